//! Bearer tokens for `auth = "token_exchange"` upstreams: the caller's own access token exchanged
//! at the identity provider (RFC 8693) for one meant for the upstream, kept per (user, upstream)
//! in memory only, never stored, until shortly before it expires. A refused exchange becomes the
//! call's error, naming the provider's `error`, and a token that must not go to the upstream
//! (see `identity::oauth::exchange`) one saying what the operator must change; one that wants
//! the user to interact sends the user through a sign-in at the provider instead, and for an
//! hour that sign-in's token serves without asking the provider to exchange again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::tool::failed;
use super::upstream::{Exchange, Upstream};
use crate::domain::Principal;
use crate::identity::Identity;
use crate::identity::oauth::{ExchangeError, Exchanged};
use crate::secret::Secret;
use crate::tools::ToolOutcome;

/// Exchanged tokens held at once; a full cache drops the expired ones, then all.
const MAX_HELD: usize = 10_000;
/// An exchanged token is exchanged again this long before it expires (at most a quarter of its
/// lifetime), so a call never starts with a token about to lapse.
const MARGIN: Duration = Duration::from_secs(30);
/// How long a token is used whose answer said nothing of its lifetime.
const UNSAID_LIFETIME: Duration = Duration::from_secs(300);
/// How long a user the provider wanted to interact uses their sign-in instead of exchanges.
const SIGNED_IN_INSTEAD: Duration = Duration::from_secs(3600);

type Key = (Principal, String);

struct Held {
    /// None: the provider wanted interaction; the user's sign-in serves instead.
    token: Option<Secret<String>>,
    until: Instant,
}

pub struct Exchanges {
    identity: Arc<Identity>,
    held: Mutex<HashMap<Key, Held>>,
}

impl Exchanges {
    pub fn new(identity: Arc<Identity>) -> Self {
        Self {
            identity,
            held: Mutex::new(HashMap::new()),
        }
    }

    fn held(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Held>> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The bearer token for `principal` at `upstream`: the one held while it lasts, else a new
    /// exchange of `subject` (the caller's own access token). What fails is the call's outcome.
    pub async fn token(
        &self,
        upstream: &Upstream,
        exchange: &Exchange,
        principal: &Principal,
        subject: Option<&Secret<String>>,
    ) -> Result<Secret<String>, ToolOutcome> {
        let key = (principal.clone(), upstream.id.clone());
        if let Some(held) = self.held().get(&key).filter(|h| h.until > Instant::now()) {
            return held.token.clone().ok_or_else(|| ToolOutcome::SignInRequired {
                provider: upstream.id.clone(),
            });
        }
        let (Some(subject), Some(server)) = (subject, self.identity.resource_server()) else {
            return Err(failed(format!(
                "The {} server is reached with the user's own sign-in (token exchange), which this request does not carry.",
                upstream.id
            )));
        };
        let (token, until) = match server.exchange(subject, &exchange.audience, &exchange.scopes).await {
            Ok(Exchanged { token, expires_in }) => (token, Instant::now() + usable(expires_in)),
            Err(error) => {
                let outcome = refused(upstream, exchange, principal, &error);
                if exchange.sign_in && error.needs_interaction() {
                    self.hold(key, None, Instant::now() + SIGNED_IN_INSTEAD);
                }
                return Err(outcome);
            }
        };
        self.hold(key, Some(token.clone()), until);
        Ok(token)
    }

    fn hold(&self, key: Key, token: Option<Secret<String>>, until: Instant) {
        let mut held = self.held();
        if held.len() >= MAX_HELD {
            let now = Instant::now();
            held.retain(|_, h| h.until > now);
            if held.len() >= MAX_HELD {
                held.clear();
            }
        }
        held.insert(key, Held { token, until });
    }

    /// Drops the token held for `principal` at `upstream` (the upstream refused it): the next
    /// call exchanges anew.
    pub fn forget(&self, principal: &Principal, upstream: &str) {
        self.held().remove(&(principal.clone(), upstream.to_owned()));
    }
}

/// How long a token living `expires_in` is used: until [`MARGIN`], or a quarter of its lifetime
/// when that is shorter, before it expires.
fn usable(expires_in: Option<Duration>) -> Duration {
    let lifetime = expires_in.unwrap_or(UNSAID_LIFETIME);
    lifetime - MARGIN.min(lifetime / 4)
}

/// A failed exchange as the call's error.
fn refused(upstream: &Upstream, exchange: &Exchange, principal: &Principal, error: &ExchangeError) -> ToolOutcome {
    match error {
        ExchangeError::Unusable(_) => {
            tracing::warn!(upstream = %upstream.id, %principal, %error, "the identity provider's token exchange answer is refused")
        }
        _ => tracing::info!(upstream = %upstream.id, %principal, %error, "the token exchange for an upstream failed"),
    }
    match error {
        // The user signs in at the identity provider for the server (a URL elicitation).
        ExchangeError::Refused { .. } if exchange.sign_in && error.needs_interaction() => ToolOutcome::SignInRequired {
            provider: upstream.id.clone(),
        },
        ExchangeError::Refused { error: code, .. } if error.needs_interaction() => failed(format!(
            "The identity provider wants the user to sign in again before gatehouse may reach the {} server \
             for them ({code}), and gatehouse has no client there to ask with (`identity.client_id`). Sign in \
             again in the MCP client, then retry.",
            upstream.id
        )),
        ExchangeError::Refused { error, description } => failed(format!(
            "The identity provider refused a token for the {} server: {error}{}.",
            upstream.id,
            description.as_ref().map(|d| format!(" ({d})")).unwrap_or_default()
        )),
        ExchangeError::Unusable(reason) => failed(format!(
            "The identity provider issued a token gatehouse cannot use for the {} server: {reason}. The operator must \
             configure the identity provider to answer token exchanges for this server with a Bearer access token \
             whose audience is {} alone.",
            upstream.id, exchange.audience
        )),
        ExchangeError::Failed(_) => failed(format!(
            "Cannot reach the {} server: the identity provider did not exchange the user's token. Try again in a moment.",
            upstream.id
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_exchanged_again_before_they_expire() {
        let secs = |s: u64| Some(Duration::from_secs(s));
        assert_eq!(usable(secs(3600)), Duration::from_secs(3570));
        assert_eq!(usable(secs(60)), Duration::from_secs(45));
        assert_eq!(usable(secs(4)), Duration::from_secs(3));
        assert_eq!(usable(secs(0)), Duration::ZERO);
        assert_eq!(usable(None), Duration::from_secs(270));
    }
}
