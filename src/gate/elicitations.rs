//! The elicitation lifecycle: one pending elicitation per unmet requirement of a session (reused
//! while it is pending; how many a principal may create per minute and have pending is bounded),
//! the page that satisfies it, declines reported once, expiry, and the one place where an
//! elicitation is finished (completed, declined, failed): it writes the
//! `notifications/elicitation/complete` event in the same store transaction as whatever finished
//! it, then wakes the session's streams here. Expiry alone ends one silently: nobody finished it,
//! and a client asking again gets a new one.

use std::future::Future;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use super::binding::{CallBinding, arguments_context};
use super::{Backing, GateError, Requirement};
use crate::audit::Origin;
use crate::clock::after;
use crate::domain::{ElicitationId, Principal};
use crate::jsonrpc;
use crate::metrics::{ElicitationKind, ElicitationOutcome};
use crate::rate_limit::RateLimit;
use crate::routes;
use crate::store::{
    AskKey, AskScope, AuditAction, BoundCall, ElicitationRecord, ElicitationStatus, Ending, SessionRecord, StoreError,
};
use crate::text;

/// What the user is asked for: one unmet requirement, in words.
#[derive(Debug, Clone)]
pub struct Ask {
    pub requirement: Requirement,
    /// Shown to the user by the client, and in the page's fallback text.
    pub message: String,
    /// Only for call-scoped forms: which call is asked (a hash of tool and arguments).
    pub call_key: Option<String>,
    /// Only for call-scoped forms: the form's description with the call's arguments; for
    /// approvals the tool and its arguments, as JSON.
    pub detail: Option<String>,
    /// How long the user (or an approver) has; `elicitation.ttl` when None.
    pub ttl: Option<Duration>,
    /// Only for approvals: the call the request is bound to, whatever the session.
    pub binding: Option<CallBinding>,
}

impl Ask {
    /// The store's key for this ask; `requirement` is the requirement's text.
    fn key<'a>(&'a self, principal: &'a Principal, session: &'a SessionRecord, requirement: &'a str) -> AskKey<'a> {
        AskKey {
            principal,
            scope: match &self.binding {
                None => AskScope::Session(&session.id),
                Some(binding) => AskScope::Caller {
                    client: binding.client.as_deref(),
                },
            },
            requirement,
            call_key: self.call_key.as_deref(),
        }
    }
}

/// How long elicitations last, how many a principal may create and have pending.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// How long the user has to finish in the browser.
    pub ttl: Duration,
    /// Pending elicitations one principal may have at once.
    pub max_pending: usize,
    /// Elicitations one principal may create per minute, on this replica (0: no limit).
    pub per_minute: u32,
}

impl Limits {
    /// The limits `[elicitation]` and `[limits]` configure.
    pub fn from_config(config: &crate::config::Config) -> Self {
        Self {
            ttl: config.elicitation.ttl,
            max_pending: config.elicitation.max_pending_per_principal,
            per_minute: config.limits.elicitations_per_minute,
        }
    }
}

pub struct Elicitations {
    /// Also where `Gate::run` finds the audit trail for the calls' rows.
    pub(super) backing: Backing,
    limits: Limits,
    /// Elicitations created per principal in the last minute.
    created: RateLimit<Principal>,
}

/// Longest client name kept from `clientInfo` (it is shown on pages).
const MAX_CLIENT_NAME: usize = 100;

/// Longest call-scoped description stored, in bytes: it holds the model's arguments.
const MAX_DETAIL_BYTES: usize = 16 * 1024;

impl Elicitations {
    pub fn new(backing: Backing, limits: Limits) -> Self {
        Self {
            backing,
            created: RateLimit::per_minute(limits.per_minute),
            limits,
        }
    }

    pub async fn get(&self, id: &ElicitationId) -> Result<Option<ElicitationRecord>, GateError> {
        Ok(self.backing.store.elicitation(id).await?)
    }

    /// The session's pending elicitation for this ask, or a new one (then `true`); refused when the principal
    /// has the most pending elicitations allowed, or created the most allowed within the minute.
    /// Refusing the new one, rather than expiring the oldest, keeps every link the user was
    /// already given working: the model is told to have the user finish those first, or to wait.
    pub async fn ask(
        &self,
        principal: &Principal,
        session: &SessionRecord,
        ask: &Ask,
        from: &Origin,
    ) -> Result<(ElicitationRecord, bool), GateError> {
        let now = Utc::now();
        let text = ask.requirement.to_string();
        let store = &self.backing.store;
        if let Some(pending) = store
            .pending_elicitation(ask.key(principal, session, &text), now)
            .await?
        {
            return Ok((pending, false));
        }
        self.expire_overdue_ask(principal, session, ask, now).await?;
        if let Err(limited) = self.created.check(principal) {
            let retry_after = limited.retry_after_seconds();
            tracing::info!(principal = %principal, retry_after, "elicitation refused: too many created this minute");
            return Err(GateError::TooManyCreated {
                per_minute: self.limits.per_minute,
                retry_after,
            });
        }
        let id = ElicitationId::generate();
        let record = ElicitationRecord {
            id,
            principal: principal.clone(),
            session_id: session.id.clone(),
            requirement: text,
            status: ElicitationStatus::Pending,
            message: ask.message.clone(),
            url: self.page_url(&ask.requirement, &id),
            client_name: client_name(session),
            created_at: now,
            expires_at: after(now, ask.ttl.unwrap_or(self.limits.ttl)),
            completed_at: None,
            call_key: ask.call_key.clone(),
            detail: ask
                .detail
                .as_deref()
                .map(|detail| text::bounded(detail, MAX_DETAIL_BYTES)),
            bound: ask.binding.as_ref().map(|binding| BoundCall {
                client: binding.client.clone(),
                sealed_arguments: self.backing.vault.encrypt(
                    Value::Object(binding.arguments.clone()).to_string().as_bytes(),
                    &arguments_context(&id),
                ),
            }),
        };
        // Two concurrent calls may both get here: the store keeps the first and returns it.
        let max = self.limits.max_pending;
        let Some(stored) = store.insert_elicitation(&record, max).await? else {
            tracing::info!(principal = %principal, max, "elicitation refused: too many pending");
            return Err(GateError::TooManyPending { max });
        };
        let new = stored.id == id;
        if new {
            tracing::info!(elicitation = %id, principal = %principal, requirement = %stored.requirement, "elicitation created");
            self.count(&stored, ElicitationOutcome::Created);
            self.audit(&stored, AuditAction::ElicitationCreated, from);
        }
        Ok((stored, new))
    }

    /// The page that satisfies a requirement: a provider's connect page or a form.
    fn page_url(&self, requirement: &Requirement, id: &ElicitationId) -> String {
        let path = match requirement {
            Requirement::Provider { .. } => routes::connect(id),
            Requirement::Form { .. } => routes::form(id),
            Requirement::Approval { .. } => routes::approval(id),
        };
        self.backing.public_url.at(&path)
    }

    /// The user's decline of this ask in this session, if no call has reported it yet; taking it
    /// marks it reported, so the next call asks afresh.
    pub async fn take_unreported_decline(
        &self,
        principal: &Principal,
        session: &SessionRecord,
        ask: &Ask,
    ) -> Result<Option<ElicitationRecord>, GateError> {
        let text = ask.requirement.to_string();
        let key = ask.key(principal, session, &text);
        Ok(self.backing.store.take_unreported_decline(key).await?)
    }

    /// An expiry of this ask in this session no call has reported yet (an approval request nobody
    /// decided in time), taken: the next call asks afresh.
    pub async fn take_unreported_expiry(
        &self,
        principal: &Principal,
        session: &SessionRecord,
        ask: &Ask,
    ) -> Result<Option<ElicitationRecord>, GateError> {
        self.expire_overdue_ask(principal, session, ask, Utc::now()).await?;
        let text = ask.requirement.to_string();
        let key = ask.key(principal, session, &text);
        Ok(self.backing.store.take_unreported_expiry(key).await?)
    }

    /// Ends this ask's pending elicitation when it expired unswept, on the trail.
    async fn expire_overdue_ask(
        &self,
        principal: &Principal,
        session: &SessionRecord,
        ask: &Ask,
        now: DateTime<Utc>,
    ) -> Result<(), GateError> {
        let text = ask.requirement.to_string();
        for expired in self
            .backing
            .store
            .expire_overdue_ask(ask.key(principal, session, &text), now)
            .await?
        {
            self.count(&expired, ElicitationOutcome::Expired);
            self.audit(&expired, AuditAction::ElicitationExpired, &Origin::unknown());
        }
        Ok(())
    }

    /// Marks the elicitation's decline as reported (a waiting call told the model already).
    pub async fn mark_decline_reported(&self, elicitation: &ElicitationRecord) -> Result<(), GateError> {
        self.backing
            .store
            .take_unreported_decline(elicitation.ask_key())
            .await?;
        Ok(())
    }

    /// Ends a pending elicitation without what it asked for (declined, failed) and tells its
    /// session. False when it was no longer pending.
    pub async fn finish(
        &self,
        elicitation: &ElicitationRecord,
        status: ElicitationStatus,
        from: &Origin,
    ) -> Result<bool, GateError> {
        let store = &self.backing.store;
        let finished = self
            .finish_with(elicitation, status, from, |notification| async move {
                let ending = Ending {
                    elicitation: &elicitation.id,
                    notification: &notification,
                    at: Utc::now(),
                };
                store.finish_elicitation(ending, status).await
            })
            .await?;
        if finished {
            tracing::info!(elicitation = %elicitation.id, status = status.as_str(), "elicitation finished");
        }
        Ok(finished)
    }

    /// Counts what happened to an elicitation in the metrics.
    pub(super) fn count(&self, elicitation: &ElicitationRecord, outcome: ElicitationOutcome) {
        let kind = match elicitation.requirement.split_once(':') {
            Some(("form", _)) => ElicitationKind::Form,
            Some(("approval", _)) => ElicitationKind::Approval,
            _ => ElicitationKind::Connection,
        };
        self.backing.metrics.elicitations(kind, outcome, 1);
    }

    /// Finishes an elicitation through `write`, a store operation that must, in one transaction,
    /// move it out of pending and append the completion `notification` it is given to the
    /// session's event log; it returns whether it did. Then the session's streams here are woken
    /// (other replicas learn of it from the store), the metrics count the ending, `status`, and it
    /// goes on the audit trail. The one way an elicitation is finished.
    pub(super) async fn finish_with<F, Fut>(
        &self,
        elicitation: &ElicitationRecord,
        status: ElicitationStatus,
        from: &Origin,
        write: F,
    ) -> Result<bool, GateError>
    where
        F: FnOnce(Value) -> Fut,
        Fut: Future<Output = Result<bool, StoreError>>,
    {
        let notification = jsonrpc::elicitation_complete(&elicitation.id.to_string());
        let finished = write(notification).await?;
        if finished {
            self.backing.bus.appended(&elicitation.session_id);
            let outcome = match status {
                ElicitationStatus::Completed => {
                    let taken = (Utc::now() - elicitation.created_at).to_std().unwrap_or_default();
                    self.backing.metrics.elicitation_completed_after(taken);
                    ElicitationOutcome::Completed
                }
                ElicitationStatus::Declined => ElicitationOutcome::Declined,
                ElicitationStatus::Expired => ElicitationOutcome::Expired,
                ElicitationStatus::Pending | ElicitationStatus::Failed => ElicitationOutcome::Failed,
            };
            self.count(elicitation, outcome);
            let action = match status {
                ElicitationStatus::Completed => AuditAction::ElicitationCompleted,
                ElicitationStatus::Declined => AuditAction::ElicitationDeclined,
                ElicitationStatus::Expired => AuditAction::ElicitationExpired,
                ElicitationStatus::Pending | ElicitationStatus::Failed => AuditAction::ElicitationFailed,
            };
            self.audit(elicitation, action, from);
        }
        Ok(finished)
    }

    /// Puts what happened to `elicitation` on the audit trail: its id, and what it asks for.
    fn audit(&self, elicitation: &ElicitationRecord, action: AuditAction, from: &Origin) {
        self.backing.audit.record(
            &elicitation.principal,
            action,
            &elicitation.id.to_string(),
            &from.for_client(&elicitation.client_name),
            json!({ "requirement": elicitation.requirement }),
        );
    }

    /// Marks every pending elicitation past its expiry expired; returns them.
    pub async fn expire_overdue(&self, now: DateTime<Utc>) -> Result<Vec<ElicitationRecord>, GateError> {
        let expired = self.backing.store.expire_elicitations(now).await?;
        for elicitation in &expired {
            self.count(elicitation, ElicitationOutcome::Expired);
            self.audit(elicitation, AuditAction::ElicitationExpired, &Origin::unknown());
        }
        Ok(expired)
    }
}

/// The client's name as it introduced itself, for pages ("GitHub wants ... for Claude") and the
/// audit trail.
pub fn client_name(session: &SessionRecord) -> String {
    session
        .client_info
        .get("title")
        .or_else(|| session.client_info.get("name"))
        .and_then(Value::as_str)
        .unwrap_or("your MCP client")
        .chars()
        .take(MAX_CLIENT_NAME)
        .collect()
}

#[cfg(test)]
mod tests;
