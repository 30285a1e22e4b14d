//! The domain core: may this tool run for this principal, or what must the user do first in a
//! browser? `Gate` is made of four rooms, each owning one job:
//!
//! - `elicitations`: the elicitation lifecycle: one per unmet requirement (reused while
//!   pending), declines reported once, and the one place that finishes an elicitation and wakes
//!   the streams waiting for it;
//! - `connections`: third-party accounts: OAuth flows and their callback, tokens and their refresh
//!   under a lease, a refused token breaking its connection, disconnect and revocation;
//! - `form_values`: what users typed into hosted forms: sealed secrets, user-scoped values and
//!   call-scoped answers;
//! - `approvals`: calls that wait for someone else's yes: approvers' votes, the decision stored
//!   as the call's answer, and the webhook announcing each request.
//!
//! `decision` combines them into the answer for one tool call, and `run` runs the call on it:
//! decide, wait for the user where the call may, run the tool with the credentials lent, decide
//! again when the provider refuses them, and put the answer on the audit trail. `tool` is what it
//! needs of a tool and of the protocol, which implement it. `rekey` re-seals what the rooms
//! sealed under a new key (`gatehouse keys`); `operator` is what an operator does to users' access
//! (`gatehouse admin`, the `/admin` pages). Pages and the protocol call the gate; the gate
//! calls the store, the vault, the providers and the bus, never back.

mod approvals;
mod binding;
mod connections;
mod decision;
mod elicitations;
mod form_values;
mod operator;
pub mod rekey;
mod requirement;
mod run;
#[cfg(test)]
pub(crate) mod testing;
mod tool;

use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chrono::Utc;
use rand::RngCore;
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;

use crate::audit::Audit;
use crate::clock::{before, every};
use crate::events::Bus;
use crate::metrics::Metrics;
use crate::public_url::PublicUrl;
use crate::store::{Store, StoreError};
use crate::vault::{KeyRing, VaultError};

pub use approvals::{Approval, Approvals, Decided, Standing, VoteRefusal, Voted, webhook_signature};
pub use binding::{CallBinding, call_key};
pub use connections::{
    CallbackOutcome, CallbackParams, CallbackRefusal, ConnectionSummary, Connections, Disconnected, ProviderErrorCode,
    StartedFlow,
};
pub use decision::{Credentials, Decision, ToolCall};
pub use elicitations::{Ask, Elicitations, Limits, client_name};
pub use form_values::{FormValues, StoredValues};
pub use operator::{Actor, Expiry, FormDeletion, Operator};
pub use requirement::{InvalidRequirement, Requirement};
pub use run::{Called, Hold, Waiting};
pub use tool::{AskWithinCall, NeverAsks, RunTool, ToolOutcome, ToolResult};

#[derive(Debug, thiserror::Error)]
pub enum GateError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Vault(#[from] VaultError),
    /// The provider could not be reached to refresh a token; the call may be retried.
    #[error("{provider} could not be reached: {reason}")]
    ProviderUnavailable { provider: String, reason: String },
    /// The principal has `max` elicitations pending already; nothing new was stored.
    #[error("{max} elicitations are pending already")]
    TooManyPending { max: usize },
    /// The principal created `per_minute` elicitations within the minute; nothing new was stored,
    /// and the next one may be created in `retry_after` seconds.
    #[error("{per_minute} elicitations were created within the minute")]
    TooManyCreated { per_minute: u32, retry_after: u64 },
}

impl GateError {
    /// The database cannot be reached right now: the request may be retried shortly.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, GateError::Store(error) if error.is_unavailable())
    }
}

/// What every room of the gate stands on.
#[derive(Clone)]
pub struct Backing {
    pub store: Arc<dyn Store>,
    pub bus: Arc<Bus>,
    /// Seals tokens and form secrets at rest.
    pub vault: Arc<KeyRing>,
    pub public_url: Arc<PublicUrl>,
    /// Counts elicitations, refreshes and broken connections.
    pub metrics: Arc<Metrics>,
    /// Where what happens to a principal's access is recorded.
    pub audit: Arc<Audit>,
}

pub struct Gate {
    /// For the sweep of what belongs to no room: the pages' expired browser sessions.
    store: Arc<dyn Store>,
    elicitations: Arc<Elicitations>,
    connections: Arc<Connections>,
    form_values: Arc<FormValues>,
    approvals: Arc<Approvals>,
}

/// Flows are kept this long after they expire, so a late callback still gets a precise answer;
/// call answers no call took are kept this long after they were given.
const RETENTION: Duration = Duration::from_secs(3600);
const SWEEP_INTERVAL: Duration = Duration::from_secs(15);

impl Gate {
    pub fn new(
        store: Arc<dyn Store>,
        elicitations: Arc<Elicitations>,
        connections: Arc<Connections>,
        form_values: Arc<FormValues>,
        approvals: Arc<Approvals>,
    ) -> Self {
        Self {
            store,
            elicitations,
            connections,
            form_values,
            approvals,
        }
    }

    pub fn approvals(&self) -> &Approvals {
        &self.approvals
    }

    pub fn elicitations(&self) -> &Elicitations {
        &self.elicitations
    }

    pub fn connections(&self) -> &Connections {
        &self.connections
    }

    pub fn form_values(&self) -> &FormValues {
        &self.form_values
    }

    /// Marks overdue elicitations expired, forgets long-expired flows and untaken call answers,
    /// and ends expired browser sessions. Ended elicitations are deleted by the retention sweep
    /// (`crate::retention`), once their period has passed.
    pub async fn sweep(&self) -> Result<(), GateError> {
        let now = Utc::now();
        let retention = before(now, RETENTION);
        let expired = self.elicitations.expire_overdue(now).await?.len() as u64;
        let flows = self.connections.forget_flows_before(retention).await?;
        let answers = self.form_values.drop_untaken_answers(retention).await?;
        let browser_sessions = self.store.delete_expired_browser_sessions(now).await?;
        if expired + flows + answers + browser_sessions > 0 {
            tracing::info!(
                expired,
                flows,
                answers,
                browser_sessions,
                "swept expired elicitations, old flows, untaken call answers and expired browser sessions"
            );
        }
        Ok(())
    }
}

/// Runs the sweeper until shutdown.
pub async fn sweep_periodically(gate: Arc<Gate>, shutdown: CancellationToken) {
    every(SWEEP_INTERVAL, shutdown, || async {
        if let Err(error) = gate.sweep().await {
            tracing::warn!(%error, "elicitation sweep failed");
        }
    })
    .await;
}

/// 256 random bits, base64url: a browser's cookie value (a flow's, a browser session's).
pub fn random_token() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    URL_SAFE_NO_PAD.encode(bytes)
}

/// Hex SHA-256: how a cookie value or a state is stored, so the store never holds it.
pub fn sha256_hex(text: &str) -> String {
    hex::encode(Sha256::digest(text.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha256_hex_is_the_lowercase_hex_digest() {
        assert_eq!(
            sha256_hex("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
