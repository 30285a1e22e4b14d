//! What an operator does to users' access, from `gatehouse admin` or the `/admin` pages: revoke a
//! connection, expire a pending elicitation, delete saved form values, end a session. Each goes
//! through the room that does it for the user (revoking at the provider, telling the client,
//! waking streams on every replica) and, when it changed something, leaves an `admin` entry on
//! the audit trail naming the command and, from a page, the operator who acted.

use serde_json::{Value, json};

use super::{Connections, Disconnected, Elicitations, FormValues, GateError};
use crate::audit::{Audit, Origin};
use crate::domain::{ElicitationId, Principal, SessionId};
use crate::events::Bus;
use crate::store::{ElicitationRecord, ElicitationStatus, SessionRecord, Store};

/// Who acts: the operator's shell (no principal, no address), or an operator page's user.
pub struct Actor {
    pub operator: Option<Principal>,
    pub from: Origin,
}

impl Actor {
    /// `gatehouse admin`, in the operator's shell.
    pub fn shell() -> Self {
        Self {
            operator: None,
            from: Origin::unknown(),
        }
    }

    /// `operator`, on an `/admin` page, from `from`.
    pub fn page(operator: Principal, from: Origin) -> Self {
        Self {
            operator: Some(operator),
            from,
        }
    }
}

/// What an expiry found.
pub enum Expiry {
    Unknown,
    /// It had ended already, with this status.
    NotPending(ElicitationStatus),
    /// It ended between the look and the change.
    EndedMeanwhile,
    Expired(Box<ElicitationRecord>),
}

/// What a deletion of saved form values found.
#[derive(Debug, PartialEq, Eq)]
pub enum FormDeletion {
    UnknownForm,
    NothingSaved,
    Deleted,
}

/// The rooms and parts an operator's changes go through.
pub struct Operator<'a> {
    pub store: &'a dyn Store,
    pub bus: &'a Bus,
    pub elicitations: &'a Elicitations,
    pub connections: &'a Connections,
    pub form_values: &'a FormValues,
    pub audit: &'a Audit,
}

impl Operator<'_> {
    /// Removes `principal`'s connection to `provider` and revokes it at the provider.
    pub async fn revoke(
        &self,
        actor: &Actor,
        principal: &Principal,
        provider: &str,
    ) -> Result<Disconnected, GateError> {
        let disconnected = self.connections.disconnect(principal, provider, &actor.from).await?;
        let revocation = match disconnected {
            Disconnected::NothingConnected => return Ok(disconnected),
            Disconnected::NoRevocation => "none",
            Disconnected::Revoked => "revoked",
            Disconnected::RevocationFailed => "failed",
        };
        self.record(
            actor,
            principal,
            "connections revoke",
            provider,
            json!({ "revocation": revocation }),
        );
        Ok(disconnected)
    }

    /// Expires pending elicitation `id` now; its client is told it is over.
    pub async fn expire(&self, actor: &Actor, id: &ElicitationId) -> Result<Expiry, GateError> {
        let Some(elicitation) = self.elicitations.get(id).await? else {
            return Ok(Expiry::Unknown);
        };
        if elicitation.status != ElicitationStatus::Pending {
            return Ok(Expiry::NotPending(elicitation.status));
        }
        let expired = self
            .elicitations
            .finish(&elicitation, ElicitationStatus::Expired, &actor.from)
            .await?;
        if !expired {
            return Ok(Expiry::EndedMeanwhile);
        }
        self.record(
            actor,
            &elicitation.principal,
            "elicitations expire",
            &id.to_string(),
            json!({ "requirement": elicitation.requirement }),
        );
        Ok(Expiry::Expired(Box::new(elicitation)))
    }

    /// Deletes `principal`'s saved values of `form`; the next call needing them asks again.
    pub async fn delete_form(
        &self,
        actor: &Actor,
        principal: &Principal,
        form: &str,
    ) -> Result<FormDeletion, GateError> {
        if self.form_values.forms().get(form).is_none() {
            return Ok(FormDeletion::UnknownForm);
        }
        if !self.form_values.delete(principal, form, &actor.from).await? {
            return Ok(FormDeletion::NothingSaved);
        }
        self.record(actor, principal, "forms delete", form, json!({}));
        Ok(FormDeletion::Deleted)
    }

    /// Ends session `id` and its streams on every replica; the session as it was, or `None` when
    /// there was none (or it ended meanwhile).
    pub async fn end_session(&self, actor: &Actor, id: &SessionId) -> Result<Option<SessionRecord>, GateError> {
        let Some(session) = self.store.session(id).await? else {
            return Ok(None);
        };
        let ended = self.store.delete_session(id).await?;
        self.bus.session_changed(id);
        if !ended {
            return Ok(None);
        }
        let prefix = id.prefix().to_string();
        self.record(actor, &session.principal, "sessions end", &prefix, json!({}));
        Ok(Some(session))
    }

    /// The `admin` entry of a change: from a page it names the operator and the browser's address.
    fn record(&self, actor: &Actor, principal: &Principal, command: &str, subject: &str, mut detail: Value) {
        if let (Some(operator), Value::Object(map)) = (&actor.operator, &mut detail) {
            map.insert("operator".to_owned(), Value::String(operator.as_str().to_owned()));
        }
        self.audit.admin(principal, command, subject, &actor.from, detail);
    }
}
