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
    /// Only for a request bound to the caller and the call rather than to its session (an
    /// approval): the caller's OAuth client and the call's arguments, sealed.
    pub bound: Option<BoundCall>,
}

/// What a caller-bound request keeps of its call besides its key.
#[derive(Clone, PartialEq, Eq)]
pub struct BoundCall {
    /// The OAuth client the caller's token was issued to (`oauth` mode).
    pub client: Option<String>,
    /// The call's full arguments as JSON, sealed by the key ring.
    pub sealed_arguments: Vec<u8>,
}

/// Ciphertexts are not secret, but there is no reason to print them.
impl std::fmt::Debug for BoundCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BoundCall")
            .field("client", &self.client)
            .field("sealed_arguments", &self.sealed_arguments.len())
            .finish()
    }
}

impl ElicitationRecord {
    /// The ask this elicitation answers.
    pub fn ask_key(&self) -> AskKey<'_> {
        AskKey {
            principal: &self.principal,
            scope: match &self.bound {
                None => AskScope::Session(&self.session_id),
                Some(bound) => AskScope::Caller {
                    client: bound.client.as_deref(),
                },
            },
            requirement: &self.requirement,
            call_key: self.call_key.as_deref(),
        }
    }
}

/// One ask: the same principal and requirement, for a call-scoped form or an approval the same
/// call, and the same session, or for a caller-bound request the same OAuth client in any
/// session. A key without a call key matches only elicitations without one.
#[derive(Debug, Clone, Copy)]
pub struct AskKey<'a> {
    pub principal: &'a Principal,
    pub scope: AskScope<'a>,
    pub requirement: &'a str,
    pub call_key: Option<&'a str>,
}

/// Where an ask belongs: to one session, or to the caller whatever the session.
#[derive(Debug, Clone, Copy)]
pub enum AskScope<'a> {
    Session(&'a SessionId),
    Caller { client: Option<&'a str> },
}

impl<'a> AskScope<'a> {
    /// The session, for a session's ask.
    pub fn session(self) -> Option<&'a str> {
        match self {
            AskScope::Session(session) => Some(session.as_str()),
            AskScope::Caller { .. } => None,
        }
    }

    /// The OAuth client, for a caller-bound ask.
    pub fn client(self) -> Option<&'a str> {
        match self {
            AskScope::Session(_) => None,
            AskScope::Caller { client } => client,
        }
    }
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
