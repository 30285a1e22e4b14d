//! `/admin/users`: every principal's connections (sorted and paged), and for one principal their
//! saved form answers (field names only, never values) and sessions (the start of their ids
//! only), with Revoke, Delete and End.

use std::collections::BTreeSet;

use axum::extract::{Query, State};
use serde::{Deserialize, Serialize};

use super::{Admin, NavItem, Operating, Pager, nav, operator, page_number, window};
use crate::domain::{Principal, SessionPrefix};
use crate::gate::{Disconnected, FormDeletion};
use crate::routes;
use crate::store::{ConnectionOrder, ConnectionStatus, Window};
use crate::tools::Offerings;
use crate::web::error::PageError;
use crate::web::extract::{CsrfBinding, Posted, when};
use crate::web::page::PageResponse;
use crate::web::state::PagesState;
use crate::web::templates::Page;

const PURPOSE: &str = "admin-users";

#[derive(Serialize)]
struct ConnectionRow {
    principal: String,
    provider: String,
    account: Option<String>,
    scopes: Vec<String>,
    state: &'static str,
    updated: String,
}

#[derive(Serialize)]
struct FormRow {
    id: String,
    title: String,
    fields: Vec<String>,
}

#[derive(Serialize)]
struct SessionRow {
    prefix: String,
    protocol: String,
    client: String,
    created: String,
}

/// A column heading that sorts by it.
#[derive(Serialize)]
struct SortLink {
    label: &'static str,
    href: String,
    current: bool,
}

#[derive(Serialize)]
struct UsersPage {
    operator: String,
    nav: Vec<NavItem>,
    status: Option<String>,
    /// The principal shown in detail (the filter), as typed.
    principal: String,
    sorts: Vec<SortLink>,
    connections: Vec<ConnectionRow>,
    pager: Pager,
    /// One principal's saved answers and sessions; `None` without the filter.
    detail: Option<Detail>,
    csrf: String,
}
impl Page for UsersPage {
    const NAME: &'static str = "admin_users.html";
}

#[derive(Serialize)]
struct Detail {
    forms: Vec<FormRow>,
    sessions: Vec<SessionRow>,
}

#[derive(Deserialize, Default)]
pub struct UsersQuery {
    principal: Option<String>,
    sort: Option<String>,
    page: Option<String>,
}

fn csrf() -> CsrfBinding {
    CsrfBinding::new(PURPOSE, routes::ADMIN_USERS)
}

pub async fn show(
    State(state): State<PagesState>,
    admin: Operating,
    Query(query): Query<UsersQuery>,
) -> Result<PageResponse, PageError> {
    render(&state, &admin, &query, None).await
}

async fn render(
    state: &PagesState,
    admin: &Admin,
    query: &UsersQuery,
    status: Option<String>,
) -> Result<PageResponse, PageError> {
    let typed = query.principal.as_deref().map(str::trim).unwrap_or_default();
    let principal = (!typed.is_empty()).then(|| Principal::parse(typed).ok()).flatten();
    let order = query
        .sort
        .as_deref()
        .and_then(ConnectionOrder::parse)
        .unwrap_or_default();
    let page = page_number(query.page.as_deref());
    let mut records = state
        .store
        .list_connections(principal.as_ref(), order, window(page))
        .await?;
    let path = routes::ADMIN_USERS;
    let filter = ("principal", typed.to_owned());
    let pager = Pager::cut(
        state,
        path,
        &[filter.clone(), ("sort", order.as_str().to_owned())],
        page,
        &mut records,
    );
    let connections = records
        .into_iter()
        .map(|c| ConnectionRow {
            principal: c.principal.to_string(),
            provider: c.provider,
            account: c.account_label,
            scopes: c.scopes,
            state: match c.status {
                ConnectionStatus::Active => "active",
                ConnectionStatus::Broken => "broken",
            },
            updated: when(c.updated_at),
        })
        .collect();
    let sorts = [
        (ConnectionOrder::Principal, "Principal"),
        (ConnectionOrder::Provider, "Provider"),
        (ConnectionOrder::Updated, "Last refresh"),
    ]
    .into_iter()
    .map(|(sort, label)| {
        let mut serializer = url::form_urlencoded::Serializer::new(String::new());
        if !typed.is_empty() {
            serializer.append_pair("principal", typed);
        }
        serializer.append_pair("sort", sort.as_str());
        SortLink {
            label,
            href: format!("{}?{}", state.public_url.path(path), serializer.finish()),
            current: sort == order,
        }
    })
    .collect();
    let detail = match &principal {
        Some(principal) => Some(detail(state, principal).await?),
        None => None,
    };
    let status = match (&principal, typed.is_empty(), status) {
        (None, false, None) => Some(format!("{typed:?} is not a principal gatehouse could know.")),
        (_, _, status) => status,
    };
    Ok(PageResponse::new(UsersPage {
        operator: admin.shown(),
        nav: nav(state, path),
        status,
        principal: typed.to_owned(),
        sorts,
        connections,
        pager,
        detail,
        csrf: csrf().token(state, &admin.principal),
    }))
}

/// One principal's saved answers (names only) and their newest sessions.
async fn detail(state: &PagesState, principal: &Principal) -> Result<Detail, PageError> {
    let forms = state
        .gate
        .form_values()
        .all_stored(principal)
        .await?
        .into_iter()
        .map(|(form, stored)| {
            let names: BTreeSet<String> = stored.values.keys().cloned().chain(stored.secret_names).collect();
            FormRow {
                id: form.id.clone(),
                title: form.title.clone(),
                fields: names.into_iter().collect(),
            }
        })
        .collect();
    let sessions = state
        .store
        .list_sessions(Some(principal), Window::first(super::PAGE_SIZE))
        .await?
        .iter()
        .map(|s| SessionRow {
            prefix: s.id.prefix().to_string(),
            protocol: s.protocol_version.to_string(),
            client: crate::gate::client_name(s),
            created: when(s.created_at),
        })
        .collect();
    Ok(Detail { forms, sessions })
}

#[derive(Deserialize)]
pub struct Action {
    csrf: String,
    action: String,
    principal: String,
    provider: Option<String>,
    form: Option<String>,
    session: Option<String>,
}

pub async fn act(
    State(state): State<PagesState>,
    admin: Operating,
    Posted(action): Posted<Action>,
) -> Result<PageResponse, PageError> {
    csrf().check(&state, &admin.principal, &action.csrf)?;
    let principal = Principal::parse(action.principal.trim()).map_err(|_| PageError::Unreadable)?;
    let operator = operator(&state);
    let actor = admin.actor();
    let status = match (action.action.as_str(), action.provider, action.form, action.session) {
        ("revoke", Some(provider), _, _) => match operator.revoke(&actor, &principal, &provider).await? {
            Disconnected::NothingConnected => format!("{principal} has no connection to {provider}."),
            Disconnected::Revoked => format!("Removed {principal}'s connection to {provider} and revoked it there."),
            Disconnected::NoRevocation => format!(
                "Removed {principal}'s connection to {provider}; {provider} has no revocation endpoint, so the grant \
                 lives on there until the user removes it."
            ),
            Disconnected::RevocationFailed => format!(
                "Removed {principal}'s connection to {provider}, but {provider} did not confirm revoking it (see the \
                 log); the user can remove the grant in {provider}'s settings."
            ),
        },
        ("delete-form", _, Some(form), _) => match operator.delete_form(&actor, &principal, &form).await? {
            FormDeletion::UnknownForm => format!("No form {form:?} is configured."),
            FormDeletion::NothingSaved => format!("{principal} has no saved answers to {form}."),
            FormDeletion::Deleted => format!("Deleted {principal}'s answers to {form}."),
        },
        ("end-session", _, _, Some(session)) => end_session(&state, &actor, &principal, &session).await?,
        _ => return Err(PageError::UnknownAction("Choose Revoke, Delete or End.")),
    };
    // Upstream sessions opened with what was just removed end here, at once.
    state.upstreams.end_sessions_of(&principal);
    let query = UsersQuery {
        principal: Some(principal.to_string()),
        ..UsersQuery::default()
    };
    render(&state, &admin, &query, Some(status)).await
}

/// Ends `principal`'s session that starts with `shown` (the page shows only the start of ids).
async fn end_session(
    state: &PagesState,
    actor: &crate::gate::Actor,
    principal: &Principal,
    shown: &str,
) -> Result<String, PageError> {
    let prefix: SessionPrefix = shown.parse().map_err(|_| PageError::Unreadable)?;
    let candidates = state.store.sessions_with_prefix(&prefix, 16).await?;
    let mut theirs = Vec::new();
    for id in candidates {
        if state
            .store
            .session(&id)
            .await?
            .is_some_and(|s| s.principal == *principal)
        {
            theirs.push(id);
        }
    }
    let [id] = theirs.as_slice() else {
        return Ok(if theirs.is_empty() {
            format!("{principal} has no session {prefix}.")
        } else {
            format!(
                "Several of {principal}'s sessions start with {prefix}; end it with `gatehouse admin sessions end` and the whole id."
            )
        });
    };
    Ok(match operator(state).end_session(actor, id).await? {
        Some(_) => format!("Ended {principal}'s session {prefix}."),
        None => format!("{principal}'s session {prefix} had ended already."),
    })
}

#[cfg(test)]
pub(super) fn samples() -> Vec<crate::web::templates::Sample> {
    let connection = |principal: &str, account: Option<&str>| ConnectionRow {
        principal: principal.to_owned(),
        provider: "github".to_owned(),
        account: account.map(str::to_owned),
        scopes: vec!["repo".to_owned()],
        state: "active",
        updated: "2026-12-03 10:00 UTC".to_owned(),
    };
    let sort = |label: &'static str, current: bool| SortLink {
        label,
        href: format!("/gh/admin/users?sort={}", label.to_lowercase()),
        current,
    };
    let detail = |full: bool| Detail {
        forms: if full {
            vec![FormRow {
                id: "openai".to_owned(),
                title: "OpenAI <key>".to_owned(),
                fields: vec!["api_key".to_owned(), "team".to_owned()],
            }]
        } else {
            Vec::new()
        },
        sessions: if full {
            vec![SessionRow {
                prefix: "a1b2c3d4".to_owned(),
                protocol: "2025-06-18".to_owned(),
                client: "Claude \"Code\"".to_owned(),
                created: "2026-12-03 09:00 UTC".to_owned(),
            }]
        } else {
            Vec::new()
        },
    };
    let page =
        |principal: &str, connections: Vec<ConnectionRow>, detail: Option<Detail>, status: Option<&str>| UsersPage {
            operator: "root@example.com".to_owned(),
            nav: super::sample_nav("Users"),
            status: status.map(str::to_owned),
            principal: principal.to_owned(),
            sorts: vec![sort("Principal", true), sort("Provider", false)],
            pager: super::sample_pager(!connections.is_empty()),
            connections,
            detail,
            csrf: "c5rf".to_owned(),
        };
    use crate::web::templates::Sample;
    vec![
        Sample::of(page(
            "",
            vec![
                connection("a@b", Some("a <at> github")),
                connection("o'neil+x/y ~z@b", None),
            ],
            None,
            None,
        )),
        Sample::of(page("a@b", Vec::new(), Some(detail(false)), Some("Revoked."))),
        Sample::of(page("a@b", vec![connection("a@b", None)], Some(detail(true)), None)),
        Sample::of(page(
            "",
            Vec::new(),
            None,
            Some("\"x\" is not a principal gatehouse could know."),
        )),
    ]
}
