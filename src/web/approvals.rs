//! Approval pages: `/approvals` lists the requests the signed-in user may decide, and
//! `/approvals/{id}` is one request's page, for its caller (who must approve, its state, and
//! Withdraw) and for its approvers (the caller, client, tool and exact arguments, the votes so
//! far, Approve or Deny with a reason). A caller never decides their own request.

use axum::Router;
use axum::extract::{Path, State};
use axum::response::IntoResponse;
use axum::routing::get;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::error::PageError;
use super::extract::{Browser, CsrfBinding, Posted, when};
use super::page::PageResponse;
use super::state::PagesState;
use super::templates::Page;
use crate::domain::ElicitationId;
use crate::gate::{Approval, Approvals, Standing, Voted};
use crate::routes;
use crate::store::ElicitationRecord;
use crate::text;

const PURPOSE: &str = "approval";

pub fn router() -> Router<PagesState> {
    Router::new()
        .route(routes::APPROVALS, get(list))
        .route(routes::APPROVAL, get(show).post(act))
}

/// A request as pages show it: every text escaped by the templates, invisible characters as
/// their code points.
#[derive(Serialize)]
struct RequestRow {
    id: String,
    title: String,
    caller: String,
    client: String,
    tool: String,
    /// The exact arguments, pretty JSON.
    arguments: String,
    created: String,
    expires: String,
}

impl RequestRow {
    /// The row of `request`, showing `arguments`: the call's whole arguments, which the tool runs
    /// with once approved.
    fn new(request: &ElicitationRecord, approval: &Approval, arguments: &Map<String, Value>) -> Self {
        let detail: Value = request
            .detail
            .as_deref()
            .and_then(|d| serde_json::from_str(d).ok())
            .unwrap_or(Value::Null);
        let arguments = serde_json::to_string_pretty(arguments).unwrap_or_default();
        Self {
            id: request.id.to_string(),
            title: approval.title.clone(),
            caller: text::shown(request.principal.as_str()),
            client: text::shown(&request.client_name),
            tool: text::shown(detail.get("tool").and_then(Value::as_str).unwrap_or_default()),
            arguments: text::shown(&arguments),
            created: when(request.created_at),
            expires: when(request.expires_at),
        }
    }
}

#[derive(Serialize)]
struct ApprovalsPage {
    principal: String,
    requests: Vec<RequestRow>,
}
impl Page for ApprovalsPage {
    const NAME: &'static str = "approvals.html";
}

#[derive(Serialize)]
struct VoteRow {
    approver: String,
    approve: bool,
    reason: String,
    at: String,
}

#[derive(Serialize)]
struct ApprovalPage {
    request: RequestRow,
    /// The caller's own view (Withdraw) rather than an approver's (Approve, Deny).
    own: bool,
    approvers: String,
    quorum: u32,
    /// waiting, approved, denied, expired or withdrawn.
    state: String,
    votes: Vec<VoteRow>,
    /// Whether this browser may still act (the request waits, and an approver has not voted).
    can_act: bool,
    status: Option<String>,
    csrf: String,
}
impl Page for ApprovalPage {
    const NAME: &'static str = "approval.html";
}

async fn list(State(state): State<PagesState>, browser: Browser) -> Result<PageResponse, PageError> {
    let approvals = state.gate.approvals();
    let requests = approvals
        .waiting_for(&browser.principal, &browser.claims)
        .await?
        .iter()
        .map(|(request, approval)| Ok(RequestRow::new(request, approval, &approvals.arguments(request)?)))
        .collect::<Result<_, crate::gate::GateError>>()?;
    Ok(PageResponse::new(ApprovalsPage {
        principal: browser.principal.to_string(),
        requests,
    }))
}

/// The request behind `id` and its approval, whoever asks.
async fn request(state: &PagesState, id: &str) -> Result<(ElicitationRecord, std::sync::Arc<Approval>), PageError> {
    let id: ElicitationId = id.parse().map_err(|_| PageError::UnknownLink)?;
    let request = state
        .gate
        .elicitations()
        .get(&id)
        .await?
        .ok_or(PageError::UnknownLink)?;
    let approval = state
        .gate
        .approvals()
        .of(&request)
        .cloned()
        .ok_or(PageError::UnknownLink)?;
    Ok((request, approval))
}

async fn show(
    State(state): State<PagesState>,
    browser: Browser,
    Path(id): Path<String>,
) -> Result<PageResponse, PageError> {
    let (request, approval) = request(&state, &id).await?;
    render(&state, &browser, &request, &approval, None).await
}

async fn render(
    state: &PagesState,
    browser: &Browser,
    request: &ElicitationRecord,
    approval: &Approval,
    status: Option<String>,
) -> Result<PageResponse, PageError> {
    let own = request.principal == browser.principal;
    if !own && !approval.may_decide(&browser.principal, &browser.claims, request) {
        return Err(PageError::VoteRefused(crate::gate::VoteRefusal::NotAnApprover));
    }
    let approvals = state.gate.approvals();
    let votes = approvals.votes(request).await?;
    let standing = Approvals::standing(request, &votes);
    let waiting = standing == Standing::Waiting;
    let voted = votes.iter().any(|v| v.approver == browser.principal);
    Ok(PageResponse::new(ApprovalPage {
        request: RequestRow::new(request, approval, &approvals.arguments(request)?),
        own,
        approvers: approval.approvers_text.clone(),
        quorum: approval.quorum,
        state: standing.as_str().to_owned(),
        votes: votes
            .iter()
            .map(|v| VoteRow {
                approver: text::shown(v.approver.as_str()),
                approve: v.approve,
                reason: text::shown(&v.reason),
                at: when(v.decided_at),
            })
            .collect(),
        can_act: waiting && (own || !voted),
        status,
        csrf: CsrfBinding::new(PURPOSE, request.id).token(state, &browser.principal),
    }))
}

#[derive(Deserialize)]
struct Action {
    csrf: String,
    action: String,
    #[serde(default)]
    reason: String,
}

async fn act(
    State(state): State<PagesState>,
    browser: Browser,
    Path(id): Path<String>,
    Posted(action): Posted<Action>,
) -> Result<impl IntoResponse, PageError> {
    let (request, _) = request(&state, &id).await?;
    CsrfBinding::new(PURPOSE, request.id).check(&state, &browser.principal, &action.csrf)?;
    let approvals = state.gate.approvals();
    let status = match action.action.as_str() {
        "withdraw" if request.principal == browser.principal => {
            if !approvals.withdraw(&request, &browser.from).await? {
                return Err(PageError::VoteRefused(crate::gate::VoteRefusal::NotWaiting));
            }
            "You withdrew the request; the call ends.".to_owned()
        }
        "approve" | "deny" => {
            let approve = action.action == "approve";
            let voted = approvals
                .vote(
                    &request,
                    &browser.principal,
                    &browser.claims,
                    approve,
                    &action.reason,
                    &browser.from,
                )
                .await?
                .map_err(PageError::VoteRefused)?;
            match voted {
                Voted::Counted { approvals, quorum } => {
                    format!("Your approval is counted: {approvals} of {quorum}.")
                }
                Voted::Decided if approve => "Approved. The call runs.".to_owned(),
                Voted::Decided => "Denied. The caller is told.".to_owned(),
            }
        }
        _ => return Err(PageError::UnknownAction("Choose Approve, Deny or Withdraw.")),
    };
    let (request, approval) = self::request(&state, &id).await?;
    render(&state, &browser, &request, &approval, Some(status)).await
}

#[cfg(test)]
pub(crate) fn samples() -> Vec<super::templates::Sample> {
    let row = || RequestRow {
        id: "0190b6f4-bbbb".to_owned(),
        title: "Pay an <invoice>".to_owned(),
        caller: "bob@example.com".to_owned(),
        client: "Claude \"Code\"".to_owned(),
        tool: "pay".to_owned(),
        arguments: "{\n  \"amount\": 12,\n  \"to\": \"<acme> & co\"\n}".to_owned(),
        created: "2026-12-03 10:00 UTC".to_owned(),
        expires: "2026-12-03 11:00 UTC".to_owned(),
    };
    let page = |own: bool, votes: Vec<VoteRow>, can_act: bool, status: Option<&str>| ApprovalPage {
        request: row(),
        own,
        approvers: "alice@example.com, carol@example.com".to_owned(),
        quorum: 2,
        state: "waiting".to_owned(),
        votes,
        can_act,
        status: status.map(str::to_owned),
        csrf: "c5rf".to_owned(),
    };
    let vote = |approve: bool, reason: &str| VoteRow {
        approver: "carol@example.com".to_owned(),
        approve,
        reason: reason.to_owned(),
        at: "2026-12-03 10:05 UTC".to_owned(),
    };
    use super::templates::Sample;
    vec![
        Sample::of(ApprovalsPage {
            principal: "alice@example.com".to_owned(),
            requests: vec![row(), row()],
        }),
        Sample::of(ApprovalsPage {
            principal: "alice@example.com".to_owned(),
            requests: Vec::new(),
        }),
        Sample::of(page(false, Vec::new(), true, None)),
        Sample::of(page(
            false,
            vec![vote(true, ""), vote(false, "Too <much> & \"why\"")],
            false,
            Some("Approved."),
        )),
        Sample::of(page(true, vec![vote(true, "fine")], true, None)),
    ]
}
