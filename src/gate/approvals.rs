//! Approvals: a call that waits until someone else says yes. A call requiring `approval:ID` asks
//! (an elicitation bound to the caller and the call, [`CallBinding`], not to the session that
//! asked, living the approval's `ttl`); approvers matching the approval's rule, never the caller,
//! vote on its page, which shows every argument whole; `quorum` approvals or one denial decide it,
//! once (a compare-and-swap: a vote arriving after the decision is refused and not stored), and
//! the decision is stored as the answer to that call, taken once by the caller's retry (or the
//! waiting call) from any session on any replica; the tool then runs from the arguments the
//! approvers saw. Each new request is announced to the approval's webhook (`notify`), without
//! failing the call when that fails.

mod notify;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use serde_json::{Map, Value, json};

use super::binding::{CallBinding, arguments_context};
use super::form_values::take_answer;
use super::{Ask, Backing, Elicitations, GateError, Requirement};
use crate::audit::Origin;
use crate::config::ApprovalConfig;
use crate::domain::Principal;
use crate::identity::Claims;
use crate::identity::access::Allow;
use crate::store::{
    AskScope, AuditAction, ElicitationRecord, ElicitationStatus, FormAnswerRecord, StoreError, VoteRecord, Window,
};
use crate::text;

pub use notify::{Notifier, webhook_signature};

/// The longest reason an approver may give, in bytes.
const MAX_REASON_BYTES: usize = 1024;

/// One configured approval.
pub struct Approval {
    pub id: String,
    pub title: String,
    approvers: Allow,
    /// Who may approve, in words ("groups: finance").
    pub approvers_text: String,
    pub quorum: u32,
    pub ttl: Duration,
    /// The largest arguments (as JSON) a call may ask this approval for.
    pub max_argument_bytes: usize,
    notify: Option<notify::Webhook>,
}

impl Approval {
    fn from_config(config: &ApprovalConfig) -> Self {
        let approvers_text = config
            .approvers
            .iter()
            .map(|(claim, values)| format!("{claim}: {}", values.join(", ")))
            .collect::<Vec<_>>()
            .join("; ");
        Self {
            id: config.id.clone(),
            title: config.title.clone(),
            approvers: Allow::from_config(&config.approvers),
            approvers_text,
            quorum: config.quorum,
            ttl: config.ttl,
            max_argument_bytes: config.max_argument_bytes,
            notify: notify::Webhook::from_config(&config.notify),
        }
    }

    /// Whether `principal` with `claims` may decide `request` (never their own).
    pub fn may_decide(&self, principal: &Principal, claims: &Claims, request: &ElicitationRecord) -> bool {
        &request.principal != principal && self.approvers.permits(claims)
    }
}

/// What the caller's call learns of its approval.
pub enum Decided {
    /// Approved: the call runs with these arguments, the ones the approvers were shown.
    Approved {
        arguments: Map<String, Value>,
    },
    Denied {
        reason: String,
    },
}

/// Where a request stands, as its page shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    Waiting,
    Approved,
    Denied,
    Expired,
    Withdrawn,
}

impl Standing {
    pub fn as_str(self) -> &'static str {
        match self {
            Standing::Waiting => "waiting",
            Standing::Approved => "approved",
            Standing::Denied => "denied",
            Standing::Expired => "expired",
            Standing::Withdrawn => "withdrawn",
        }
    }
}

/// Why a vote was not taken; nothing changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum VoteRefusal {
    #[error("You cannot decide your own request.")]
    OwnRequest,
    #[error("You are not one of this request's approvers.")]
    NotAnApprover,
    #[error("You decided this request already.")]
    AlreadyVoted,
    #[error("This request is no longer waiting for a decision.")]
    NotWaiting,
}

/// How a vote went.
pub enum Voted {
    /// Counted; more approvals are needed.
    Counted { approvals: u32, quorum: u32 },
    /// The request is decided (approved, or denied) and the caller told.
    Decided,
}

pub struct Approvals {
    backing: Backing,
    elicitations: Arc<Elicitations>,
    approvals: Vec<Arc<Approval>>,
    notifier: Notifier,
}

impl Approvals {
    pub fn from_config(
        approvals: &[ApprovalConfig],
        backing: Backing,
        elicitations: Arc<Elicitations>,
        http: reqwest::Client,
    ) -> Self {
        Self {
            approvals: approvals.iter().map(|a| Arc::new(Approval::from_config(a))).collect(),
            notifier: Notifier::new(http, backing.metrics.clone()),
            backing,
            elicitations,
        }
    }

    pub fn get(&self, id: &str) -> Option<&Arc<Approval>> {
        self.approvals.iter().find(|a| a.id == id)
    }

    /// The approval an elicitation asks for.
    pub fn of(&self, elicitation: &ElicitationRecord) -> Option<&Arc<Approval>> {
        match Requirement::parse(&elicitation.requirement).ok()? {
            Requirement::Approval { approval } => self.get(&approval),
            Requirement::Provider { .. } | Requirement::Form { .. } => None,
        }
    }

    /// What to ask for when a call needs `approval`: the request, bound to this call.
    pub(super) fn ask(approval: &Approval, binding: CallBinding, key: String) -> Ask {
        let detail = json!({ "tool": binding.tool }).to_string();
        Ask {
            requirement: Requirement::Approval {
                approval: approval.id.clone(),
            },
            message: format!(
                "This call needs approval: {}. It waits until an approver says yes in the browser.",
                approval.title
            ),
            call_key: Some(key),
            detail: Some(detail),
            ttl: Some(approval.ttl),
            binding: Some(binding),
        }
    }

    /// The decision given for exactly this call of `principal` (through the same OAuth client),
    /// whichever session asked, taken (it is used once).
    pub(super) async fn take_decision(
        &self,
        principal: &Principal,
        client: Option<&str>,
        approval: &Approval,
        key: &str,
    ) -> Result<Option<Decided>, GateError> {
        let requirement = Requirement::Approval {
            approval: approval.id.clone(),
        };
        let scope = AskScope::Caller { client };
        let Some(answer) = take_answer(&self.backing, principal, scope, &requirement, key).await? else {
            return Ok(None);
        };
        Ok(Some(match answer.fields.get("decision").and_then(Value::as_str) {
            Some("approved") => {
                let request = self
                    .backing
                    .store
                    .elicitation(&answer.elicitation_id)
                    .await?
                    .ok_or_else(|| {
                        StoreError::Corrupt(format!("approval answer without request {}", answer.elicitation_id))
                    })?;
                Decided::Approved {
                    arguments: self.arguments(&request)?,
                }
            }
            _ => Decided::Denied {
                reason: answer
                    .fields
                    .get("reason")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
            },
        }))
    }

    /// A new request was stored: its approvers are told (in the background).
    pub(super) fn requested(
        &self,
        approval: &Approval,
        request: &ElicitationRecord,
        arguments: &serde_json::Map<String, Value>,
    ) {
        if let Some(webhook) = &approval.notify {
            let page = self.backing.public_url.at(&crate::routes::approval(request.id));
            self.notifier.announce(webhook, approval, request, &page, arguments);
        }
    }

    /// The pending requests `principal` (with `claims`) may decide, newest first.
    pub async fn waiting_for(
        &self,
        principal: &Principal,
        claims: &Claims,
    ) -> Result<Vec<(ElicitationRecord, Arc<Approval>)>, GateError> {
        let pending = self
            .backing
            .store
            .list_elicitations(true, Window::first(MAX_LISTED))
            .await?;
        let now = Utc::now();
        Ok(pending
            .into_iter()
            .filter(|e| e.expires_at > now)
            .filter_map(|e| {
                let approval = self.of(&e)?.clone();
                approval.may_decide(principal, claims, &e).then_some((e, approval))
            })
            .collect())
    }

    /// The votes on a request so far.
    pub async fn votes(&self, request: &ElicitationRecord) -> Result<Vec<VoteRecord>, GateError> {
        Ok(self.backing.store.votes(&request.id).await?)
    }

    /// The call's full arguments, as the request keeps them: what approvers are shown and what
    /// the tool runs with once approved.
    pub fn arguments(&self, request: &ElicitationRecord) -> Result<Map<String, Value>, GateError> {
        let bound = request
            .bound
            .as_ref()
            .ok_or_else(|| StoreError::Corrupt(format!("approval request {} keeps no call", request.id)))?;
        let json = self
            .backing
            .vault
            .decrypt(&bound.sealed_arguments, &arguments_context(&request.id))?;
        serde_json::from_slice(&json)
            .map_err(|e| StoreError::Corrupt(format!("approval request {}'s arguments: {e}", request.id)).into())
    }

    /// Where `request` stands: waiting, or the one decision taken (a denial is the only vote
    /// stored when it decides, and no vote is stored once the request is decided), expired or
    /// withdrawn.
    pub fn standing(request: &ElicitationRecord, votes: &[VoteRecord]) -> Standing {
        match request.status {
            ElicitationStatus::Pending if request.expires_at > Utc::now() => Standing::Waiting,
            ElicitationStatus::Pending | ElicitationStatus::Expired => Standing::Expired,
            ElicitationStatus::Declined | ElicitationStatus::Failed => Standing::Withdrawn,
            ElicitationStatus::Completed if votes.iter().any(|v| !v.approve) => Standing::Denied,
            ElicitationStatus::Completed => Standing::Approved,
        }
    }

    /// `approver` (with `claims`) approves or denies `request`: one vote each, never on their own
    /// request, only while it waits. `quorum` approvals, or one denial, decide it, once: the
    /// decision is stored as the call's answer and its caller told, on whichever replica holds it.
    pub async fn vote(
        &self,
        request: &ElicitationRecord,
        approver: &Principal,
        claims: &Claims,
        approve: bool,
        reason: &str,
        from: &Origin,
    ) -> Result<Result<Voted, VoteRefusal>, GateError> {
        let Some(approval) = self.of(request) else {
            return Ok(Err(VoteRefusal::NotWaiting));
        };
        if &request.principal == approver {
            return Ok(Err(VoteRefusal::OwnRequest));
        }
        if !approval.may_decide(approver, claims, request) {
            return Ok(Err(VoteRefusal::NotAnApprover));
        }
        let now = Utc::now();
        if request.status != ElicitationStatus::Pending || request.expires_at <= now {
            return Ok(Err(VoteRefusal::NotWaiting));
        }
        let store = &self.backing.store;
        if store.votes(&request.id).await?.iter().any(|v| &v.approver == approver) {
            return Ok(Err(VoteRefusal::AlreadyVoted));
        }
        let vote = VoteRecord {
            elicitation_id: request.id,
            approver: approver.clone(),
            approve,
            reason: text::bounded(reason.trim(), MAX_REASON_BYTES),
            decided_at: now,
        };
        let answer = if approve {
            // An approval is counted while the request waits; the one that makes the quorum decides.
            if !store.record_vote(&vote).await? {
                return Ok(Err(VoteRefusal::NotWaiting));
            }
            self.voted(approval, request, &vote, from);
            let approvers: Vec<String> = store
                .votes(&request.id)
                .await?
                .iter()
                .filter(|v| v.approve)
                .map(|v| v.approver.to_string())
                .collect();
            if (approvers.len() as u32) < approval.quorum {
                return Ok(Ok(Voted::Counted {
                    approvals: approvers.len() as u32,
                    quorum: approval.quorum,
                }));
            }
            json!({"decision": "approved", "approvers": approvers})
        } else {
            json!({"decision": "denied", "reason": format!("denied by {approver}{}", reason_suffix(&vote.reason))})
        };
        let record = FormAnswerRecord {
            elicitation_id: request.id,
            fields: answer,
            secrets: None,
            created_at: now,
        };
        // A denial is stored only with the decision it makes, so no denial stands beside an
        // approval that let the call run.
        let deciding_vote = (!approve).then_some(&vote);
        let record = &record;
        let decided = self
            .elicitations
            .finish_with(request, ElicitationStatus::Completed, from, |notification| async move {
                store.decide(deciding_vote, record, &notification, Utc::now()).await
            })
            .await?;
        if !decided {
            return Ok(Err(VoteRefusal::NotWaiting));
        }
        if !approve {
            self.voted(approval, request, &vote, from);
        }
        tracing::info!(elicitation = %request.id, approve, "approval request decided");
        Ok(Ok(Voted::Decided))
    }

    /// A vote was stored: counted, and on the audit trail.
    fn voted(&self, approval: &Approval, request: &ElicitationRecord, vote: &VoteRecord, from: &Origin) {
        let decision = if vote.approve { "approve" } else { "deny" };
        self.backing.metrics.approval_vote(decision);
        let detail = json!({
            "decision": decision,
            "reason": vote.reason,
            "elicitation": request.id.to_string(),
            "caller": request.principal.to_string(),
        });
        self.backing
            .audit
            .record(&vote.approver, AuditAction::ApprovalDecided, &approval.id, from, detail);
    }

    /// The caller withdraws their own request: it ends, and the waiting call is told.
    pub async fn withdraw(&self, request: &ElicitationRecord, from: &Origin) -> Result<bool, GateError> {
        self.elicitations
            .finish(request, ElicitationStatus::Declined, from)
            .await
    }
}

/// Pending elicitations looked through for requests an approver may decide.
const MAX_LISTED: usize = 1000;

fn reason_suffix(reason: &str) -> String {
    if reason.is_empty() {
        String::new()
    } else {
        format!(": {reason}")
    }
}
