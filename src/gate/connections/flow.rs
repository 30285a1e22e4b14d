//! The OAuth authorization code flow for a pending elicitation: starting it (256-bit `state`
//! stored as a hash, PKCE verifier sealed, a cookie binding the browser) and its callback, which
//! refuses anything that does not match the flow (nothing is stored then) and otherwise exchanges
//! the code, saves the connection and completes the elicitation in one transaction. A flow is
//! bound to the issuer it started with and the redirect URI it sent: an answer at another
//! provider's callback, or after the provider's issuer changed, ends it (RFC 9700 4.4), and its
//! code goes nowhere. Every outcome
//! says what is true afterwards (a reload looks the flow up) and, while the elicitation still
//! takes a sign-in, where to start again.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::json;

use super::{Connections, access_context, refresh_context};
use crate::audit::Origin;
use crate::clock::after;
use crate::domain::Principal;
use crate::gate::{GateError, random_token, sha256_hex};
use crate::metrics::ElicitationOutcome;
use crate::providers::{OAuthError, Provider};
use crate::routes;
use crate::secret::Secret;
use crate::store::{
    AuditAction, ConnectionRecord, ConnectionStatus, ElicitationRecord, ElicitationStatus, OAuthFlowRecord,
};

/// An OAuth flow (state, PKCE verifier, browser cookie) lives this long.
const FLOW_TTL: Duration = Duration::from_secs(600);
/// Longest `state` read from a callback; ours are 43 characters.
const MAX_STATE_LEN: usize = 512;

/// A started flow: where to send the browser and the cookie that binds it.
pub struct StartedFlow {
    pub authorize_url: url::Url,
    pub cookie_name: String,
    pub cookie_value: String,
}

/// Why a callback was refused: nothing was stored.
#[derive(Debug, Clone, Copy, thiserror::Error, PartialEq, Eq)]
pub enum CallbackRefusal {
    #[error("This sign-in link is not valid.")]
    UnknownState,
    #[error("This sign-in link was already used.")]
    AlreadyUsed,
    #[error("This sign-in took too long and has expired. Ask your assistant to try again.")]
    Expired,
    #[error("This sign-in was started in another browser. Finish it in the browser where it began.")]
    OtherBrowser,
    #[error("This sign-in belongs to another user.")]
    OtherUser,
    #[error("The answer did not come from the expected provider.")]
    WrongIssuer,
    #[error("The answer did not say which provider sent it.")]
    MissingIssuer,
    #[error("The provider sent no authorization code.")]
    NoCode,
    #[error("The answer came back to another sign-in's address. Nothing was stored; start again.")]
    WrongCallback,
    #[error("The service moved to another sign-in server while you were signing in. Nothing was stored; start again.")]
    IssuerChanged,
    #[error("The request ended while you were signing in. Ask your assistant to try again.")]
    EndedMeanwhile,
}

/// An OAuth error code a provider sent (RFC 6749 4.1.2.1, 5.2), fit to log and show: up to 64
/// characters of the RFC's set (printable ASCII but `"` and `\`); anything else reads `unreadable`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderErrorCode(String);

impl ProviderErrorCode {
    const MAX_LEN: usize = 64;

    pub fn parse(text: &str) -> Self {
        let readable = !text.is_empty()
            && text.len() <= Self::MAX_LEN
            && text
                .bytes()
                .all(|b| matches!(b, b' '..=b'~') && b != b'"' && b != b'\\');
        Self(if readable { text } else { "unreadable" }.to_owned())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for ProviderErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// How a callback ended for the user. `retry` is the elicitation's page while it still takes a
/// new sign-in.
#[derive(Debug, PartialEq)]
pub enum CallbackOutcome {
    /// The connection is stored and the client told (now, or by an earlier use of this flow).
    Connected {
        provider_name: String,
        account_label: Option<String>,
        client_name: String,
    },
    Declined {
        provider_name: String,
    },
    /// The provider answered with an error, at the callback or its token endpoint (`error`: its
    /// code, when it sent one). Nothing was stored; the elicitation is still pending.
    ProviderFailed {
        provider_name: String,
        error: Option<ProviderErrorCode>,
        retry: String,
    },
    /// The flow was used up, but gatehouse failed to finish (its database, typically): the
    /// provider's answer is lost and the user must start again.
    Unfinished {
        provider_name: String,
        retry: String,
        /// The cause was a database outage (try again shortly), not a fault of ours.
        outage: bool,
    },
    Refused {
        refusal: CallbackRefusal,
        retry: Option<String>,
    },
}

impl CallbackOutcome {
    fn refused(refusal: CallbackRefusal) -> Self {
        Self::Refused { refusal, retry: None }
    }
}

/// What the provider sent the browser back with (the callback's query string). `state` and `code`
/// are bearer values for the flow, so `Debug` redacts them.
#[derive(Debug, Clone)]
pub struct CallbackParams {
    state: Secret<String>,
    code: Option<Secret<String>>,
    error: Option<ProviderErrorCode>,
    iss: Option<String>,
    /// The key of the redirect URI it arrived at (`/oauth/callback/{key}`); None: `/oauth/callback`.
    callback: Option<String>,
}

impl CallbackParams {
    /// Parses the query; without a plausible `state` there is no flow to talk about. The first
    /// value of each parameter counts, as with any form decoding.
    pub fn from_query(query: &str) -> Result<Self, CallbackRefusal> {
        let (mut state, mut code, mut error, mut iss) = (None, None, None, None);
        for (name, value) in url::form_urlencoded::parse(query.as_bytes()) {
            let slot = match name.as_ref() {
                "state" => &mut state,
                "code" => &mut code,
                "error" => &mut error,
                "iss" => &mut iss,
                _ => continue,
            };
            slot.get_or_insert_with(|| value.into_owned());
        }
        let state = state
            .filter(|s: &String| !s.is_empty() && s.len() <= MAX_STATE_LEN)
            .ok_or(CallbackRefusal::UnknownState)?;
        Ok(Self {
            state: Secret::new(state),
            code: code.map(Secret::new),
            error: error.as_deref().map(ProviderErrorCode::parse),
            iss,
            callback: None,
        })
    }

    /// The answer arrived at the redirect URI of key `key` (`/oauth/callback/{key}`).
    pub fn arrived_at(self, key: &str) -> Self {
        Self {
            callback: Some(key.to_owned()),
            ..self
        }
    }

    fn state_hash(&self) -> String {
        sha256_hex(self.state.expose())
    }
}

/// Whether a callback matches its flow.
enum Checked {
    Matches(Arc<Provider>, Box<ElicitationRecord>),
    Refused(CallbackRefusal),
    /// A mix-up's mark: the flow is used up and its code goes nowhere.
    Aborted(CallbackRefusal),
}

pub(in crate::gate) fn verifier_context(state_hash: &str) -> String {
    format!("flow:{state_hash}:verifier")
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The elicitation's page, while it still takes a new sign-in at `now`.
fn still_open(elicitation: &ElicitationRecord, now: DateTime<Utc>) -> Option<String> {
    (elicitation.status == ElicitationStatus::Pending && elicitation.expires_at > now).then(|| elicitation.url.clone())
}

impl Connections {
    /// `provider`'s redirect URI: its own, or the configured providers' shared one.
    fn redirect_uri(&self, provider: &Provider) -> String {
        let path = match &provider.callback {
            Some(key) => routes::remote_callback(key),
            None => routes::OAUTH_CALLBACK.to_owned(),
        };
        self.backing.public_url.at(&path)
    }

    /// `__Host-` cookies over HTTPS (`__Secure-` under a path prefix); a plain name on
    /// http://localhost, where browsers refuse `Secure` cookies. One cookie per flow, so parallel
    /// sign-ins do not overwrite each other.
    fn cookie_name(&self, state_hash: &str) -> String {
        let id = &state_hash[..16.min(state_hash.len())];
        self.backing.public_url.cookie_name(&format!("gatehouse-flow-{id}"))
    }

    /// The name of the cookie that must come with this callback.
    pub fn flow_cookie_name(&self, params: &CallbackParams) -> String {
        self.cookie_name(&params.state_hash())
    }

    /// Starts an OAuth flow for a pending elicitation: stores the hashed state, the sealed PKCE
    /// verifier and the hashed browser cookie. `None`: the elicitation asks for no provider.
    pub async fn start_flow(&self, elicitation: &ElicitationRecord) -> Result<Option<StartedFlow>, GateError> {
        let Some((provider, scopes)) = self.provider_of(elicitation).await? else {
            return Ok(None);
        };
        let sign_in = provider.authorize(&scopes, &self.redirect_uri(&provider));
        let cookie_value = random_token();
        let state_hash = sha256_hex(sign_in.state.expose());
        let now = Utc::now();
        let flow = OAuthFlowRecord {
            state_hash: state_hash.clone(),
            elicitation_id: elicitation.id,
            principal: elicitation.principal.clone(),
            provider: provider.id.clone(),
            issuer: provider.issuer.clone(),
            scopes: scopes.clone(),
            pkce_verifier: self
                .backing
                .vault
                .encrypt_str(sign_in.pkce_verifier.expose(), &verifier_context(&state_hash)),
            browser_hash: sha256_hex(&cookie_value),
            created_at: now,
            expires_at: after(now, FLOW_TTL),
            used_at: None,
        };
        self.backing.store.insert_flow(&flow).await?;
        Ok(Some(StartedFlow {
            authorize_url: sign_in.url,
            cookie_name: self.cookie_name(&state_hash),
            cookie_value,
        }))
    }

    /// The callback from the provider, in `principal`'s browser carrying `cookie` (the value of
    /// the cookie named by `flow_cookie_name`). A refusal changes nothing; a declined sign-in ends
    /// the elicitation; a provider's error leaves it pending, to be tried again; a sign-in saves
    /// the connection only together with the elicitation's completion.
    pub async fn callback(
        &self,
        principal: &Principal,
        params: &CallbackParams,
        cookie: Option<&str>,
        from: &Origin,
    ) -> Result<CallbackOutcome, GateError> {
        let started = Utc::now();
        let state_hash = params.state_hash();
        let Some(flow) = self.backing.store.flow(&state_hash).await? else {
            return Ok(CallbackOutcome::refused(CallbackRefusal::UnknownState));
        };
        if flow.used_at.is_some() {
            return self.used(&flow, principal).await;
        }
        let (provider, elicitation) = match self.check(&flow, principal, params, cookie, started).await? {
            Checked::Matches(provider, elicitation) => (provider, *elicitation),
            Checked::Refused(refusal) => {
                let retry = self.way_back(&flow, principal, started).await?;
                return Ok(CallbackOutcome::Refused { refusal, retry });
            }
            Checked::Aborted(refusal) => {
                tracing::warn!(provider = %flow.provider, %refusal, "a sign-in's answer does not belong to its flow; the flow is ended");
                self.backing.store.consume_flow(&state_hash, started).await?;
                let retry = self.way_back(&flow, principal, started).await?;
                return Ok(CallbackOutcome::Refused { refusal, retry });
            }
        };
        if !self.backing.store.consume_flow(&state_hash, started).await? {
            // Another callback of this flow, still under way.
            let retry = self.way_back(&flow, principal, started).await?;
            return Ok(CallbackOutcome::Refused {
                refusal: CallbackRefusal::AlreadyUsed,
                retry,
            });
        }
        // From here on the flow is used up: a failure must not read as "nothing happened".
        match self
            .finish_flow(&provider, &flow, &elicitation, params, started, from)
            .await
        {
            Ok(outcome) => Ok(outcome),
            Err(error) => {
                tracing::error!(elicitation = %elicitation.id, provider = %provider.id, %error, "a used sign-in flow could not be finished");
                Ok(CallbackOutcome::Unfinished {
                    provider_name: provider.name.clone(),
                    retry: elicitation.url,
                    outage: error.is_unavailable(),
                })
            }
        }
    }

    /// The rest of a callback whose flow was just used: the provider's answer, the code
    /// exchange, and the connection saved with the elicitation's completion.
    async fn finish_flow(
        &self,
        provider: &Arc<Provider>,
        flow: &OAuthFlowRecord,
        elicitation: &ElicitationRecord,
        params: &CallbackParams,
        started: DateTime<Utc>,
        from: &Origin,
    ) -> Result<CallbackOutcome, GateError> {
        let provider_name = provider.name.clone();
        // The elicitation stays open for another try; the metrics count the failed sign-in.
        let failed = |error: Option<ProviderErrorCode>| {
            self.elicitations.count(elicitation, ElicitationOutcome::Failed);
            CallbackOutcome::ProviderFailed {
                provider_name: provider.name.clone(),
                error,
                retry: elicitation.url.clone(),
            }
        };
        if let Some(error) = &params.error {
            if error.as_str() == "access_denied" {
                tracing::info!(elicitation = %elicitation.id, provider = %provider.id, "declined at the provider");
                self.elicitations
                    .finish(elicitation, ElicitationStatus::Declined, from)
                    .await?;
                return Ok(CallbackOutcome::Declined { provider_name });
            }
            tracing::warn!(elicitation = %elicitation.id, provider = %provider.id, %error, "the provider answered the sign-in with an error");
            return Ok(failed(Some(error.clone())));
        }
        let Some(code) = params
            .code
            .as_ref()
            .map(|c| c.expose().as_str())
            .filter(|c| !c.is_empty())
        else {
            tracing::warn!(elicitation = %elicitation.id, provider = %provider.id, "the provider sent no authorization code");
            return Ok(CallbackOutcome::Refused {
                refusal: CallbackRefusal::NoCode,
                retry: Some(elicitation.url.clone()),
            });
        };
        let verifier = self
            .backing
            .vault
            .decrypt_str(&flow.pkce_verifier, &verifier_context(&flow.state_hash))?;
        let tokens = match self
            .oauth
            .exchange_code(provider, code, verifier.expose(), &self.redirect_uri(provider))
            .await
        {
            Ok(tokens) => tokens,
            Err(OAuthError::Rejected { error, .. }) => {
                let error = ProviderErrorCode::parse(&error);
                tracing::warn!(elicitation = %elicitation.id, provider = %provider.id, %error, "the provider refused the code exchange");
                self.client_refused(provider, error.as_str()).await?;
                return Ok(failed(Some(error)));
            }
            Err(OAuthError::Unavailable(reason)) => {
                tracing::warn!(elicitation = %elicitation.id, provider = %provider.id, %reason, "the code exchange failed");
                return Ok(failed(None));
            }
        };
        let account_label = self.oauth.account_label(provider, tokens.access_token.expose()).await;
        let principal = &flow.principal;
        let vault = &self.backing.vault;
        let now = Utc::now();
        let connection = ConnectionRecord {
            principal: principal.clone(),
            provider: provider.id.clone(),
            issuer: provider.issuer.clone(),
            access_token: vault.encrypt_str(tokens.access_token.expose(), &access_context(principal, &provider.id)),
            refresh_token: tokens
                .refresh_token
                .as_ref()
                .map(|t| vault.encrypt_str(t.expose(), &refresh_context(principal, &provider.id))),
            expires_at: tokens.expires_in.map(|s| after(now, Duration::from_secs(s))),
            // Providers that do not say what they granted granted what was asked.
            scopes: tokens
                .scope
                .as_deref()
                .map_or_else(|| flow.scopes.clone(), |s| provider.split_scopes(s)),
            account_label: account_label.clone(),
            status: ConnectionStatus::Active,
            created_at: now,
            updated_at: now,
        };
        let (store, connection, id) = (&self.backing.store, &connection, &elicitation.id);
        let saved = self
            .elicitations
            .finish_with(
                elicitation,
                ElicitationStatus::Completed,
                from,
                |notification| async move {
                    let saved = store.save_connection(connection, id, &notification, started).await?;
                    if saved {
                        // Before the session's streams wake: a call waiting here decides on the new connection.
                        self.changed(principal);
                    }
                    Ok(saved)
                },
            )
            .await?;
        if !saved {
            tracing::info!(elicitation = %elicitation.id, provider = %provider.id, "the request ended during the sign-in; nothing stored");
            return Ok(CallbackOutcome::refused(CallbackRefusal::EndedMeanwhile));
        }
        tracing::info!(elicitation = %elicitation.id, principal = %principal, provider = %provider.id, "connected");
        let detail = json!({ "scopes": connection.scopes, "elicitation": elicitation.id.to_string() });
        let from = from.for_client(&elicitation.client_name);
        self.audit(principal, AuditAction::ConnectionCreated, &provider.id, &from, detail);
        Ok(CallbackOutcome::Connected {
            provider_name,
            account_label,
            client_name: elicitation.client_name.clone(),
        })
    }

    /// A callback for a flow already used (a reload, or a browser retrying after a crash): what
    /// that use left. Connected when it stored the connection and completed the elicitation;
    /// otherwise refused, with the way back while the elicitation still takes a sign-in. Another
    /// user learns nothing.
    async fn used(&self, flow: &OAuthFlowRecord, principal: &Principal) -> Result<CallbackOutcome, GateError> {
        let refused = |retry| CallbackOutcome::Refused {
            refusal: CallbackRefusal::AlreadyUsed,
            retry,
        };
        let (Some(provider), Some(used_at)) = (self.provider(&flow.provider).await?, flow.used_at) else {
            return Ok(refused(None));
        };
        if &flow.principal != principal {
            return Ok(refused(None));
        }
        let Some(elicitation) = self.elicitations.get(&flow.elicitation_id).await? else {
            return Ok(refused(None));
        };
        if elicitation.status == ElicitationStatus::Completed
            && let Some(connection) = self.backing.store.connection(principal, &provider.id).await?
            && connection.updated_at >= used_at
        {
            return Ok(CallbackOutcome::Connected {
                provider_name: provider.name.clone(),
                account_label: connection.account_label,
                client_name: elicitation.client_name,
            });
        }
        Ok(refused(still_open(&elicitation, Utc::now())))
    }

    /// Where the flow's own user can start again after a refusal: the elicitation's page, while
    /// it takes a sign-in.
    async fn way_back(
        &self,
        flow: &OAuthFlowRecord,
        principal: &Principal,
        now: DateTime<Utc>,
    ) -> Result<Option<String>, GateError> {
        if &flow.principal != principal {
            return Ok(None);
        }
        let elicitation = self.elicitations.get(&flow.elicitation_id).await?;
        Ok(elicitation.and_then(|e| still_open(&e, now)))
    }

    /// Checks a callback against an unused flow at `now`, in the order that tells the user the
    /// most; nothing is changed by a refusal.
    async fn check(
        &self,
        flow: &OAuthFlowRecord,
        principal: &Principal,
        params: &CallbackParams,
        cookie: Option<&str>,
        now: DateTime<Utc>,
    ) -> Result<Checked, GateError> {
        if flow.expires_at <= now {
            return Ok(Checked::Refused(CallbackRefusal::Expired));
        }
        let cookie_matches =
            cookie.is_some_and(|c| constant_time_eq(sha256_hex(c).as_bytes(), flow.browser_hash.as_bytes()));
        if !cookie_matches {
            return Ok(Checked::Refused(CallbackRefusal::OtherBrowser));
        }
        if &flow.principal != principal {
            return Ok(Checked::Refused(CallbackRefusal::OtherUser));
        }
        let Some(provider) = self.provider(&flow.provider).await? else {
            return Ok(Checked::Refused(CallbackRefusal::UnknownState));
        };
        // Its own provider's redirect URI, and the issuer it was sent to, or the code goes nowhere.
        if params.callback != provider.callback {
            return Ok(Checked::Aborted(CallbackRefusal::WrongCallback));
        }
        if provider.discovered && flow.issuer != provider.issuer {
            return Ok(Checked::Aborted(CallbackRefusal::IssuerChanged));
        }
        if let Some(refusal) = self.issuer_refusal(&provider, params.iss.as_deref()) {
            return Ok(Checked::Refused(refusal));
        }
        let Some(elicitation) = self.elicitations.get(&flow.elicitation_id).await? else {
            return Ok(Checked::Refused(CallbackRefusal::UnknownState));
        };
        if elicitation.status != ElicitationStatus::Pending || elicitation.expires_at <= now {
            return Ok(Checked::Refused(CallbackRefusal::Expired));
        }
        Ok(Checked::Matches(provider, Box::new(elicitation)))
    }

    /// RFC 9207 against mix-up (the configured providers share one redirect URI): a provider with
    /// an issuer must send it (unless it is known to send it only sometimes), and an `iss` of
    /// another configured provider is refused in any flow.
    fn issuer_refusal(&self, provider: &Provider, iss: Option<&str>) -> Option<CallbackRefusal> {
        match (provider.issuer.as_deref(), iss) {
            (Some(expected), Some(iss)) if expected == iss => None,
            (Some(_), None) if provider.require_iss => Some(CallbackRefusal::MissingIssuer),
            (_, None) => None,
            (None, Some(iss)) if !self.providers.iter().any(|p| p.issuer.as_deref() == Some(iss)) => None,
            _ => Some(CallbackRefusal::WrongIssuer),
        }
    }

    /// Forgets flows that expired before `cutoff`.
    pub async fn forget_flows_before(&self, cutoff: DateTime<Utc>) -> Result<u64, GateError> {
        Ok(self.backing.store.delete_stale_flows(cutoff).await?)
    }
}
