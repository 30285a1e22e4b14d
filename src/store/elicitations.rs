//! Elicitations and the OAuth flows they start: the records, an elicitation's status, the ask an
//! elicitation answers and how one ends. The operations on them are the [`Store`](super::Store)
//! trait's.

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::StoreError;
use crate::domain::{ElicitationId, Principal, SessionId};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ElicitationStatus {
    Pending,
    Completed,
    Declined,
    Expired,
    Failed,
}

impl ElicitationStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ElicitationStatus::Pending => "pending",
            ElicitationStatus::Completed => "completed",
            ElicitationStatus::Declined => "declined",
            ElicitationStatus::Expired => "expired",
            ElicitationStatus::Failed => "failed",
        }
    }

    pub(super) fn parse(text: &str) -> Result<Self, StoreError> {
        Ok(match text {
            "pending" => ElicitationStatus::Pending,
            "completed" => ElicitationStatus::Completed,
            "declined" => ElicitationStatus::Declined,
            "expired" => ElicitationStatus::Expired,
            "failed" => ElicitationStatus::Failed,
            other => return Err(StoreError::Corrupt(format!("elicitation status {other:?}"))),
        })
    }
}

/// One request to the user to satisfy one requirement.
#[derive(Debug, Clone)]
pub struct ElicitationRecord {
    pub id: ElicitationId,
    pub principal: Principal,
    pub session_id: SessionId,
    /// The requirement's canonical text (`provider:scope1 scope2`, `form:id`).
    pub requirement: String,
    pub status: ElicitationStatus,
    pub message: String,
    pub url: String,
    pub client_name: String,
    pub created_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
    pub completed_at: Option<DateTime<Utc>>,
    /// Only for call-scoped forms: a hash of the tool name and arguments, so each call is asked
    /// (and answered) on its own.
    pub call_key: Option<String>,
    /// Only for call-scoped forms: the form's description rendered with the call's arguments.
    pub detail: Option<String>,
}

impl ElicitationRecord {
    /// The ask this elicitation answers.
    pub fn ask_key(&self) -> AskKey<'_> {
        AskKey {
            principal: &self.principal,
            session: &self.session_id,
            requirement: &self.requirement,
            call_key: self.call_key.as_deref(),
        }
    }
}

/// One ask of a session: the same principal, session and requirement, and for a call-scoped form
/// the same call. A key without a call key matches only elicitations without one.
#[derive(Debug, Clone, Copy)]
pub struct AskKey<'a> {
    pub principal: &'a Principal,
    pub session: &'a SessionId,
    pub requirement: &'a str,
    pub call_key: Option<&'a str>,
}

/// How an elicitation ends: the completion notification for its session's log, and when.
#[derive(Debug, Clone, Copy)]
pub struct Ending<'a> {
    pub elicitation: &'a ElicitationId,
    pub notification: &'a Value,
    pub at: DateTime<Utc>,
}

/// An OAuth authorization in progress in someone's browser.
#[derive(Debug, Clone)]
pub struct OAuthFlowRecord {
    pub state_hash: String,
    pub elicitation_id: ElicitationId,
    pub principal: Principal,
    pub provider: String,
    /// The provider's issuer when the flow started: its code goes to that issuer only.
    pub issuer: Option<String>,
    pub scopes: Vec<String>,
    /// Encrypted PKCE verifier.
    pub pkce_verifier: Vec<u8>,
    pub browser_hash: String,
    pub created_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
    pub used_at: Option<DateTime<Utc>>,
}
