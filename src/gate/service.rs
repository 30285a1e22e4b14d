//! The gate: decides whether a tool may run for a principal, creates the elicitations for what is
//! missing, and carries out the browser side of OAuth (flows, callback, token refresh).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chrono::{DateTime, Utc};
use rand::RngCore;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};
use url::Url;

use super::Requirement;
use crate::domain::{ElicitationId, Principal};
use crate::events::{Bus, Notice};
use crate::forms::{Form, FormScope, Forms, Submission};
use crate::providers::{OAuthClient, OAuthError, Provider, Providers, pkce_challenge};
use crate::secret::Secret;
use crate::store::{
    ConnectionCache, ConnectionRecord, ConnectionStatus, ElicitationRecord, ElicitationStatus, FormAnswerRecord,
    FormValuesRecord, OAuthFlowRecord, RefreshedTokens, SessionRecord, Store, StoreError,
};
use crate::vault::{KeyRing, VaultError};

/// An OAuth flow (state, PKCE verifier, browser cookie) lives this long.
const FLOW_TTL: Duration = Duration::from_secs(600);
/// Tokens expiring sooner than this are refreshed before use.
const REFRESH_MARGIN: Duration = Duration::from_secs(60);
/// How long a refresh may hold its lease (the provider timeout plus slack).
const REFRESH_LEASE: Duration = Duration::from_secs(20);
/// How often a call waiting for another's refresh looks again.
const REFRESH_POLL: Duration = Duration::from_millis(50);
/// Flows are kept this long after expiry, so a late callback still gets a precise answer.
const FLOW_RETENTION: Duration = Duration::from_secs(3600);

pub const CALLBACK_PATH: &str = "/oauth/callback";

#[derive(Debug, thiserror::Error)]
pub enum GateError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Vault(#[from] VaultError),
    /// The provider could not be reached to refresh a token; the call may be retried.
    #[error("{provider} could not be reached: {reason}")]
    ProviderUnavailable { provider: String, reason: String },
}

/// What one call may use: access tokens by provider (with the connection version they came from)
/// and submitted form values by form.
#[derive(Default)]
pub struct Credentials {
    tokens: HashMap<String, (Secret<String>, DateTime<Utc>)>,
    forms: HashMap<String, Submission>,
}

impl Credentials {
    pub fn token(&self, provider: &str) -> Option<&Secret<String>> {
        self.tokens.get(provider).map(|(token, _)| token)
    }

    pub fn forms(&self) -> &HashMap<String, Submission> {
        &self.forms
    }

    /// Every secret this call holds, so results can be scrubbed of any an upstream echoes back.
    pub fn secrets(&self) -> impl Iterator<Item = &str> {
        self.tokens.values().map(|(token, _)| token.expose().as_str()).chain(
            self.forms
                .values()
                .flat_map(|f| f.secrets.values().map(|s| s.expose().as_str())),
        )
    }

    fn version(&self, provider: &str) -> Option<DateTime<Utc>> {
        self.tokens.get(provider).map(|(_, version)| *version)
    }
}

/// One tool call, as the gate sees it.
pub struct CallSite<'a> {
    pub tool: &'a str,
    pub requires: &'a [Requirement],
    pub arguments: &'a Map<String, Value>,
    /// The call-scoped forms' descriptions with this call's arguments, by form id.
    pub details: &'a HashMap<String, String>,
}

/// A requirement not met yet, with what a call-scoped form's elicitation carries.
struct Missing {
    requirement: Requirement,
    call_key: Option<String>,
    detail: Option<String>,
}

impl Missing {
    fn plain(requirement: Requirement) -> Self {
        Self {
            requirement,
            call_key: None,
            detail: None,
        }
    }
}

pub enum Decision {
    Run(Credentials),
    /// The user must act in a browser: one elicitation per unmet requirement.
    Elicit(Vec<ElicitationRecord>),
    /// The user declined this requirement; reported once, then the next call elicits afresh.
    Declined(ElicitationRecord),
}

/// What a connection looks like to the user (never a token).
pub struct ConnectionSummary {
    pub provider: String,
    pub provider_name: String,
    pub account_label: Option<String>,
    pub scopes: Vec<String>,
    pub active: bool,
    pub connected_at: DateTime<Utc>,
}

/// Why a callback was refused: nothing was stored.
#[derive(Debug, thiserror::Error, PartialEq)]
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
    #[error("The provider sent no authorization code.")]
    NoCode,
}

/// How a callback ended for the user.
pub enum CallbackOutcome {
    Connected {
        provider_name: String,
        account_label: Option<String>,
        client_name: String,
    },
    Declined {
        provider_name: String,
    },
    Failed {
        provider_name: String,
    },
}

/// A started flow: where to send the browser and the cookie that binds it.
pub struct StartedFlow {
    pub authorize_url: Url,
    pub cookie_name: String,
    pub cookie_value: String,
}

pub struct Gate {
    store: Arc<dyn Store>,
    forms: Arc<Forms>,
    /// Each principal's connections, invalidated through the bus when they change.
    connections: Arc<ConnectionCache>,
    vault: Arc<KeyRing>,
    providers: Arc<Providers>,
    oauth: OAuthClient,
    bus: Arc<Bus>,
    public_url: Url,
    ttl: Duration,
}

fn random_token() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    URL_SAFE_NO_PAD.encode(bytes)
}

fn sha256_hex(text: &str) -> String {
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn after(now: DateTime<Utc>, duration: Duration) -> DateTime<Utc> {
    now + chrono::Duration::from_std(duration).unwrap_or(chrono::Duration::MAX)
}

fn access_context(principal: &Principal, provider: &str) -> String {
    format!("connection:{principal}:{provider}:access")
}

fn refresh_context(principal: &Principal, provider: &str) -> String {
    format!("connection:{principal}:{provider}:refresh")
}

fn user_form_context(principal: &Principal, form: &str) -> String {
    format!("form:{principal}:{form}:secrets")
}

fn answer_context(elicitation: &ElicitationId) -> String {
    format!("answer:{elicitation}:secrets")
}

/// Identifies one call: the tool and its arguments (serde_json maps are sorted, so equal
/// arguments give equal keys).
fn call_key(tool: &str, arguments: &Map<String, Value>) -> String {
    sha256_hex(&json!({ "tool": tool, "arguments": arguments }).to_string())
}

fn completion(id: &ElicitationId) -> Value {
    crate::mcp::jsonrpc::notification(
        "notifications/elicitation/complete",
        json!({ "elicitationId": id.to_string() }),
    )
}

impl Gate {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        store: Arc<dyn Store>,
        forms: Arc<Forms>,
        connections: Arc<ConnectionCache>,
        vault: Arc<KeyRing>,
        providers: Arc<Providers>,
        oauth: OAuthClient,
        bus: Arc<Bus>,
        public_url: Url,
        ttl: Duration,
    ) -> Self {
        Self {
            store,
            forms,
            connections,
            vault,
            providers,
            oauth,
            bus,
            public_url,
            ttl,
        }
    }

    /// The principal's connections, from the cache when it has them.
    async fn connections_of(&self, principal: &Principal) -> Result<Arc<Vec<ConnectionRecord>>, GateError> {
        if let Some(cached) = self.connections.get(principal) {
            return Ok(cached);
        }
        let epoch = self.connections.epoch();
        let loaded = Arc::new(self.store.connections(principal).await?);
        self.connections.insert_loaded(epoch, principal.clone(), loaded.clone());
        Ok(loaded)
    }

    /// After a change here; other replicas learn of it from the store's notice.
    fn connections_changed(&self, principal: &Principal) {
        self.bus.hub().notify(&Notice::ConnectionsChanged(principal.clone()));
    }

    pub fn vault(&self) -> &KeyRing {
        &self.vault
    }

    pub fn providers(&self) -> &Providers {
        &self.providers
    }

    pub fn redirect_uri(&self) -> String {
        self.public_url
            .join(CALLBACK_PATH)
            .map(|u| u.to_string())
            .unwrap_or_default()
    }

    /// The page that satisfies a requirement: a provider's connect page or a form.
    fn page_url(&self, requirement: &Requirement, id: &ElicitationId) -> String {
        let path = match requirement {
            Requirement::Provider { .. } => format!("/connect/{id}"),
            Requirement::Form { .. } => format!("/forms/{id}"),
        };
        self.public_url.join(&path).map(|u| u.to_string()).unwrap_or_default()
    }

    /// Run, or what the user must do first.
    pub async fn decide(
        &self,
        principal: &Principal,
        session: &SessionRecord,
        call: &CallSite<'_>,
    ) -> Result<Decision, GateError> {
        let mut credentials = Credentials::default();
        let mut missing = Vec::new();
        let mut call_forms = Vec::new();
        for requirement in call.requires {
            let (id, scopes) = match requirement {
                Requirement::Provider { provider, scopes } => (provider, scopes),
                Requirement::Form { form } => {
                    let Some(definition) = self.forms.get(form) else {
                        continue;
                    };
                    if definition.scope == FormScope::Call {
                        call_forms.push(form);
                        continue;
                    }
                    match self.store.form_values(principal, form).await? {
                        Some(record) => {
                            let submission = self.open(
                                &record.fields,
                                record.secrets.as_deref(),
                                &user_form_context(principal, form),
                            )?;
                            credentials.forms.insert(form.clone(), submission);
                        }
                        None => missing.push(Missing::plain(requirement.clone())),
                    }
                    continue;
                }
            };
            let Some(provider) = self.providers.get(id) else {
                continue;
            };
            let needed = provider.scopes_with(scopes);
            let connection = self
                .connections_of(principal)
                .await?
                .iter()
                .find(|c| &c.provider == id)
                .cloned();
            let ask_for = match connection {
                Some(c) if c.status == ConnectionStatus::Active && needed.iter().all(|s| c.scopes.contains(s)) => {
                    match self.usable_token(provider, c).await? {
                        Some((token, version)) => {
                            credentials.tokens.insert(id.clone(), (token, version));
                            continue;
                        }
                        None => needed,
                    }
                }
                // Step-up: sign in again for everything granted so far plus what is missing.
                Some(c) if c.status == ConnectionStatus::Active => provider.scopes_with(&[c.scopes, needed].concat()),
                _ => needed,
            };
            missing.push(Missing::plain(Requirement::Provider {
                provider: id.clone(),
                scopes: ask_for,
            }));
        }
        // A call-scoped answer is used up when taken, so it is taken only once nothing else is
        // missing; until then the other requirements are asked for first.
        if missing.is_empty() {
            let key = call_key(call.tool, call.arguments);
            for form in call_forms {
                let text = format!("form:{form}");
                match self.store.take_form_answer(principal, &session.id, &text, &key).await? {
                    Some(answer) => {
                        let submission = self.open(
                            &answer.fields,
                            answer.secrets.as_deref(),
                            &answer_context(&answer.elicitation_id),
                        )?;
                        credentials.forms.insert(form.clone(), submission);
                    }
                    None => missing.push(Missing {
                        requirement: Requirement::Form { form: form.clone() },
                        call_key: Some(key.clone()),
                        detail: call.details.get(form).cloned(),
                    }),
                }
            }
        }
        if missing.is_empty() {
            return Ok(Decision::Run(credentials));
        }
        let mut elicitations = Vec::new();
        for missing in missing {
            let text = missing.requirement.to_string();
            if let Some(declined) = self
                .store
                .take_unreported_decline(principal, &session.id, &text, missing.call_key.as_deref())
                .await?
            {
                return Ok(Decision::Declined(declined));
            }
            elicitations.push(self.elicitation_for(principal, session, &missing, &text).await?);
        }
        Ok(Decision::Elicit(elicitations))
    }

    /// Submitted values from their stored form: the non-secret JSON and the sealed secrets.
    fn open(&self, fields: &Value, secrets: Option<&[u8]>, context: &str) -> Result<Submission, GateError> {
        let values = match fields {
            Value::Object(map) => map.clone(),
            _ => return Err(StoreError::Corrupt("form values are not a JSON object".into()).into()),
        };
        let secrets = match secrets {
            None => BTreeMap::new(),
            Some(sealed) => {
                let opened = self.vault.decrypt(sealed, context)?;
                serde_json::from_slice::<BTreeMap<String, String>>(&opened)
                    .map_err(|e| StoreError::Corrupt(format!("sealed form secrets: {e}")))?
                    .into_iter()
                    .map(|(name, value)| (name, Secret::new(value)))
                    .collect()
            }
        };
        Ok(Submission { values, secrets })
    }

    /// Seals a submission's secrets (None when it has none).
    fn seal(&self, secrets: &BTreeMap<String, Secret<String>>, context: &str) -> Option<Vec<u8>> {
        if secrets.is_empty() {
            return None;
        }
        let plain: BTreeMap<&str, &str> = secrets
            .iter()
            .map(|(name, value)| (name.as_str(), value.expose().as_str()))
            .collect();
        let json = Secret::new(serde_json::to_vec(&plain).unwrap_or_default());
        Some(self.vault.encrypt(json.expose(), context))
    }

    async fn elicitation_for(
        &self,
        principal: &Principal,
        session: &SessionRecord,
        missing: &Missing,
        text: &str,
    ) -> Result<ElicitationRecord, GateError> {
        let now = Utc::now();
        let requirement = &missing.requirement;
        if let Some(pending) = self
            .store
            .pending_elicitation(principal, &session.id, text, missing.call_key.as_deref(), now)
            .await?
        {
            return Ok(pending);
        }
        let id = ElicitationId::generate();
        let message = match requirement {
            Requirement::Provider { provider, scopes } => {
                let name = self
                    .providers
                    .get(provider)
                    .map_or(provider.as_str(), |p| p.name.as_str());
                if scopes.is_empty() {
                    format!("Authorization is required to access your {name} account.")
                } else {
                    format!(
                        "Authorization is required to access your {name} account ({}).",
                        scopes.join(", ")
                    )
                }
            }
            Requirement::Form { form } => match self.forms.get(form) {
                Some(form) if form.scope == FormScope::Call => {
                    format!("Please confirm in your browser: {}.", form.title)
                }
                Some(form) => format!("Please fill in \"{}\" in your browser.", form.title),
                None => format!("Please fill in the form \"{form}\" to continue."),
            },
        };
        let client_name = session
            .client_info
            .get("title")
            .or_else(|| session.client_info.get("name"))
            .and_then(Value::as_str)
            .unwrap_or("your MCP client")
            .chars()
            .take(100)
            .collect();
        let record = ElicitationRecord {
            id,
            principal: principal.clone(),
            session_id: session.id.clone(),
            requirement: text.to_owned(),
            status: ElicitationStatus::Pending,
            message,
            url: self.page_url(requirement, &id),
            client_name,
            created_at: now,
            expires_at: after(now, self.ttl),
            completed_at: None,
            call_key: missing.call_key.clone(),
            detail: missing.detail.clone(),
        };
        let stored = self.store.insert_elicitation(&record).await?;
        if stored.id == id {
            tracing::info!(elicitation = %id, principal = %principal, requirement = text, "elicitation created");
        }
        Ok(stored)
    }

    /// The access token of an active connection, refreshed first when it is about to expire.
    /// `None`: the connection cannot be used and the user must sign in again.
    async fn usable_token(
        &self,
        provider: &Provider,
        mut connection: ConnectionRecord,
    ) -> Result<Option<(Secret<String>, DateTime<Utc>)>, GateError> {
        let deadline = tokio::time::Instant::now() + REFRESH_LEASE;
        loop {
            let now = Utc::now();
            let fresh = connection.expires_at.is_none_or(|at| at > after(now, REFRESH_MARGIN));
            if connection.status != ConnectionStatus::Active {
                return Ok(None);
            }
            if fresh {
                let token = self.vault.decrypt_str(
                    &connection.access_token,
                    &access_context(&connection.principal, &provider.id),
                )?;
                return Ok(Some((token, connection.updated_at)));
            }
            if connection.refresh_token.is_none() {
                return Ok(None);
            }
            let leased = self
                .store
                .acquire_refresh_lease(&connection.principal, &provider.id, after(now, REFRESH_LEASE), now)
                .await?;
            if let Some(leased) = leased {
                return self.refresh(provider, leased).await;
            }
            // Another call (here or on another replica) is refreshing: wait for its result.
            if tokio::time::Instant::now() >= deadline {
                return Err(GateError::ProviderUnavailable {
                    provider: provider.name.clone(),
                    reason: "a token refresh is taking too long".into(),
                });
            }
            tokio::time::sleep(REFRESH_POLL).await;
            match self.store.connection(&connection.principal, &provider.id).await? {
                Some(reloaded) => connection = reloaded,
                None => return Ok(None),
            }
        }
    }

    /// Refreshes under the lease the caller holds.
    async fn refresh(
        &self,
        provider: &Provider,
        leased: ConnectionRecord,
    ) -> Result<Option<(Secret<String>, DateTime<Utc>)>, GateError> {
        let principal = &leased.principal;
        let now = Utc::now();
        if leased.expires_at.is_none_or(|at| at > after(now, REFRESH_MARGIN)) {
            // Refreshed by someone else between our read and the lease: release it unchanged.
            let unchanged = RefreshedTokens {
                access_token: leased.access_token.clone(),
                refresh_token: None,
                expires_at: leased.expires_at,
                scopes: None,
            };
            self.store.store_refreshed(principal, &provider.id, &unchanged).await?;
            self.connections_changed(principal);
            let token = self
                .vault
                .decrypt_str(&leased.access_token, &access_context(principal, &provider.id))?;
            // Releasing bumped the version: a later 401 must match the stored one to break it.
            let version = self
                .store
                .connection(principal, &provider.id)
                .await?
                .map_or(now, |c| c.updated_at);
            return Ok(Some((token, version)));
        }
        let Some(sealed) = &leased.refresh_token else {
            return Ok(None);
        };
        let refresh_token = self
            .vault
            .decrypt_str(sealed, &refresh_context(principal, &provider.id))?;
        match self.oauth.refresh(provider, refresh_token.expose()).await {
            Ok(tokens) => {
                let refreshed = RefreshedTokens {
                    access_token: self
                        .vault
                        .encrypt_str(tokens.access_token.expose(), &access_context(principal, &provider.id)),
                    // A provider that sends no new refresh token keeps the old one valid.
                    refresh_token: tokens.refresh_token.as_ref().map(|t| {
                        self.vault
                            .encrypt_str(t.expose(), &refresh_context(principal, &provider.id))
                    }),
                    expires_at: tokens.expires_in.map(|s| after(Utc::now(), Duration::from_secs(s))),
                    scopes: tokens.scope.as_deref().map(|s| provider.split_scopes(s)),
                };
                self.store.store_refreshed(principal, &provider.id, &refreshed).await?;
                self.connections_changed(principal);
                tracing::info!(principal = %principal, provider = %provider.id, "access token refreshed");
                let version = self
                    .store
                    .connection(principal, &provider.id)
                    .await?
                    .map_or(now, |c| c.updated_at);
                Ok(Some((tokens.access_token, version)))
            }
            Err(OAuthError::Rejected { error, .. }) => {
                tracing::info!(principal = %principal, provider = %provider.id, %error, "refresh refused; connection broken");
                self.store
                    .mark_connection_broken(principal, &provider.id, leased.updated_at)
                    .await?;
                self.connections_changed(principal);
                Ok(None)
            }
            Err(OAuthError::Unavailable(reason)) => {
                tracing::warn!(principal = %principal, provider = %provider.id, %reason, "refresh failed");
                Err(GateError::ProviderUnavailable {
                    provider: provider.name.clone(),
                    reason,
                })
            }
        }
    }

    /// The provider refused a token during a call: the connection is broken (unless it was
    /// refreshed meanwhile) and the next decision elicits a new sign-in.
    pub async fn credential_rejected(
        &self,
        principal: &Principal,
        provider: &str,
        credentials: &Credentials,
    ) -> Result<(), GateError> {
        if let Some(version) = credentials.version(provider)
            && self.store.mark_connection_broken(principal, provider, version).await?
        {
            self.connections_changed(principal);
            tracing::info!(principal = %principal, provider, "the provider refused the token; connection broken");
        }
        Ok(())
    }

    pub async fn elicitation(&self, id: &ElicitationId) -> Result<Option<ElicitationRecord>, GateError> {
        Ok(self.store.elicitation(id).await?)
    }

    /// Ends a pending elicitation (decline, failure) and notifies its session.
    pub async fn finish(&self, elicitation: &ElicitationRecord, status: ElicitationStatus) -> Result<bool, GateError> {
        let finished = self
            .store
            .finish_elicitation(&elicitation.id, status, &completion(&elicitation.id), Utc::now())
            .await?;
        if finished {
            self.bus.hub().notify(&Notice::Appended(elicitation.session_id.clone()));
            tracing::info!(elicitation = %elicitation.id, status = status.as_str(), "elicitation finished");
        }
        Ok(finished)
    }

    /// Marks the elicitation's decline as reported (a waiting call told the model already).
    pub async fn take_decline(&self, elicitation: &ElicitationRecord) -> Result<(), GateError> {
        self.store
            .take_unreported_decline(
                &elicitation.principal,
                &elicitation.session_id,
                &elicitation.requirement,
                elicitation.call_key.as_deref(),
            )
            .await?;
        Ok(())
    }

    /// The provider an elicitation asks for, with the scopes to request.
    pub fn provider_of(&self, elicitation: &ElicitationRecord) -> Option<(&Provider, Vec<String>)> {
        match Requirement::parse(&elicitation.requirement).ok()? {
            Requirement::Provider { provider, scopes } => self.providers.get(&provider).map(|p| (p, scopes)),
            Requirement::Form { .. } => None,
        }
    }

    /// Starts an OAuth flow for a pending elicitation: stores the hashed state, the encrypted
    /// PKCE verifier and the hashed browser cookie.
    pub async fn start_flow(
        &self,
        elicitation: &ElicitationRecord,
        secure_cookie: bool,
    ) -> Result<Option<StartedFlow>, GateError> {
        let Some((provider, scopes)) = self.provider_of(elicitation) else {
            return Ok(None);
        };
        let state = random_token();
        let verifier = random_token();
        let cookie_value = random_token();
        let state_hash = sha256_hex(&state);
        let now = Utc::now();
        let flow = OAuthFlowRecord {
            state_hash: state_hash.clone(),
            elicitation_id: elicitation.id,
            principal: elicitation.principal.clone(),
            provider: provider.id.clone(),
            scopes: scopes.clone(),
            pkce_verifier: self
                .vault
                .encrypt_str(&verifier, &format!("flow:{state_hash}:verifier")),
            browser_hash: sha256_hex(&cookie_value),
            created_at: now,
            expires_at: after(now, FLOW_TTL),
            used_at: None,
        };
        self.store.insert_flow(&flow).await?;
        let authorize_url = provider.authorize_url(&state, &pkce_challenge(&verifier), &scopes, &self.redirect_uri());
        Ok(Some(StartedFlow {
            authorize_url,
            cookie_name: flow_cookie_name(&state_hash, secure_cookie),
            cookie_value,
        }))
    }

    /// The flow a callback's `state` names, with the name of the cookie that must match it.
    pub async fn flow_for_state(
        &self,
        state: &str,
        secure_cookie: bool,
    ) -> Result<Option<(OAuthFlowRecord, String)>, GateError> {
        let state_hash = sha256_hex(state);
        let flow = self.store.flow(&state_hash).await?;
        Ok(flow.map(|f| (f, flow_cookie_name(&state_hash, secure_cookie))))
    }

    /// Checks a callback against its flow; nothing is changed by a refusal.
    pub async fn check_callback(
        &self,
        flow: &OAuthFlowRecord,
        cookie: Option<&str>,
        principal: &Principal,
        iss: Option<&str>,
    ) -> Result<ElicitationRecord, CallbackRefusal> {
        if flow.used_at.is_some() {
            return Err(CallbackRefusal::AlreadyUsed);
        }
        if flow.expires_at <= Utc::now() {
            return Err(CallbackRefusal::Expired);
        }
        let cookie_matches =
            cookie.is_some_and(|c| constant_time_eq(sha256_hex(c).as_bytes(), flow.browser_hash.as_bytes()));
        if !cookie_matches {
            return Err(CallbackRefusal::OtherBrowser);
        }
        if &flow.principal != principal {
            return Err(CallbackRefusal::OtherUser);
        }
        let provider = self
            .providers
            .get(&flow.provider)
            .ok_or(CallbackRefusal::UnknownState)?;
        if let (Some(expected), Some(iss)) = (&provider.issuer, iss)
            && expected != iss
        {
            return Err(CallbackRefusal::WrongIssuer);
        }
        let elicitation = self
            .store
            .elicitation(&flow.elicitation_id)
            .await
            .ok()
            .flatten()
            .ok_or(CallbackRefusal::UnknownState)?;
        if elicitation.status != ElicitationStatus::Pending || elicitation.expires_at <= Utc::now() {
            return Err(CallbackRefusal::Expired);
        }
        Ok(elicitation)
    }

    /// Finishes an accepted callback: consumes the flow (single use), then either records the
    /// provider's refusal or exchanges the code and saves the connection.
    pub async fn complete_callback(
        &self,
        flow: &OAuthFlowRecord,
        elicitation: &ElicitationRecord,
        code: Option<&str>,
        provider_error: Option<&str>,
    ) -> Result<Result<CallbackOutcome, CallbackRefusal>, GateError> {
        let Some(provider) = self.providers.get(&flow.provider) else {
            return Ok(Err(CallbackRefusal::UnknownState));
        };
        let provider_name = provider.name.clone();
        if !self.store.consume_flow(&flow.state_hash, Utc::now()).await? {
            return Ok(Err(CallbackRefusal::AlreadyUsed));
        }
        if let Some(error) = provider_error {
            let status = if error == "access_denied" {
                ElicitationStatus::Declined
            } else {
                ElicitationStatus::Failed
            };
            tracing::info!(elicitation = %elicitation.id, provider = %provider.id, error, "provider answered with an error");
            self.finish(elicitation, status).await?;
            return Ok(Ok(if status == ElicitationStatus::Declined {
                CallbackOutcome::Declined { provider_name }
            } else {
                CallbackOutcome::Failed { provider_name }
            }));
        }
        let Some(code) = code.filter(|c| !c.is_empty()) else {
            self.finish(elicitation, ElicitationStatus::Failed).await?;
            return Ok(Err(CallbackRefusal::NoCode));
        };
        let verifier = self
            .vault
            .decrypt_str(&flow.pkce_verifier, &format!("flow:{}:verifier", flow.state_hash))?;
        let tokens = match self
            .oauth
            .exchange_code(provider, code, verifier.expose(), &self.redirect_uri())
            .await
        {
            Ok(tokens) => tokens,
            Err(error) => {
                tracing::warn!(elicitation = %elicitation.id, provider = %provider.id, %error, "code exchange failed");
                self.finish(elicitation, ElicitationStatus::Failed).await?;
                return Ok(Ok(CallbackOutcome::Failed { provider_name }));
            }
        };
        let account_label = self.oauth.account_label(provider, tokens.access_token.expose()).await;
        let principal = &flow.principal;
        let now = Utc::now();
        let connection = ConnectionRecord {
            principal: principal.clone(),
            provider: provider.id.clone(),
            access_token: self
                .vault
                .encrypt_str(tokens.access_token.expose(), &access_context(principal, &provider.id)),
            refresh_token: tokens.refresh_token.as_ref().map(|t| {
                self.vault
                    .encrypt_str(t.expose(), &refresh_context(principal, &provider.id))
            }),
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
        let completed = self
            .store
            .save_connection(&connection, &elicitation.id, &completion(&elicitation.id))
            .await?;
        self.connections_changed(principal);
        if completed {
            self.bus.hub().notify(&Notice::Appended(elicitation.session_id.clone()));
        }
        tracing::info!(elicitation = %elicitation.id, principal = %principal, provider = %provider.id, "connected");
        Ok(Ok(CallbackOutcome::Connected {
            provider_name,
            account_label,
            client_name: elicitation.client_name.clone(),
        }))
    }

    /// The form an elicitation asks for.
    pub fn form_of(&self, elicitation: &ElicitationRecord) -> Option<&Form> {
        match Requirement::parse(&elicitation.requirement).ok()? {
            Requirement::Form { form } => self.forms.get(&form),
            Requirement::Provider { .. } => None,
        }
    }

    pub fn forms(&self) -> &Forms {
        &self.forms
    }

    /// The principal's stored values for a user-scoped form: the non-secret values and the names
    /// of the stored secrets (never their values).
    pub async fn stored_form(
        &self,
        principal: &Principal,
        form: &str,
    ) -> Result<Option<(Map<String, Value>, BTreeSet<String>)>, GateError> {
        let Some(record) = self.store.form_values(principal, form).await? else {
            return Ok(None);
        };
        let submission = self.open(
            &record.fields,
            record.secrets.as_deref(),
            &user_form_context(principal, form),
        )?;
        Ok(Some((submission.values, submission.secrets.into_keys().collect())))
    }

    /// Every user-scoped form the principal has values for, with what `stored_form` gives.
    pub async fn stored_forms(
        &self,
        principal: &Principal,
    ) -> Result<Vec<(&Form, Map<String, Value>, BTreeSet<String>)>, GateError> {
        let mut stored = Vec::new();
        for record in self.store.all_form_values(principal).await? {
            // Values of a form no longer configured stay stored, but nothing can show them.
            let Some(form) = self.forms.get(&record.form) else {
                continue;
            };
            let submission = self.open(
                &record.fields,
                record.secrets.as_deref(),
                &user_form_context(principal, &form.id),
            )?;
            stored.push((form, submission.values, submission.secrets.into_keys().collect()));
        }
        Ok(stored)
    }

    /// Saves a user-scoped form's values; secrets left blank keep their stored value. With an
    /// elicitation, completes it and notifies its session. Returns whether it was completed.
    pub async fn save_user_form(
        &self,
        principal: &Principal,
        form: &Form,
        mut submission: Submission,
        elicitation: Option<&ElicitationRecord>,
    ) -> Result<bool, GateError> {
        let context = user_form_context(principal, &form.id);
        let now = Utc::now();
        let existing = self.store.form_values(principal, &form.id).await?;
        if let Some(existing) = &existing {
            let stored = self.open(&existing.fields, existing.secrets.as_deref(), &context)?;
            for (name, value) in stored.secrets {
                submission.secrets.entry(name).or_insert(value);
            }
        }
        let record = FormValuesRecord {
            principal: principal.clone(),
            form: form.id.clone(),
            fields: Value::Object(submission.values),
            secrets: self.seal(&submission.secrets, &context),
            created_at: existing.map_or(now, |e| e.created_at),
            updated_at: now,
        };
        let notification = elicitation.map_or(Value::Null, |e| completion(&e.id));
        let completed = self
            .store
            .save_form_values(&record, elicitation.map(|e| &e.id), &notification, now)
            .await?;
        if let (true, Some(elicitation)) = (completed, elicitation) {
            self.bus.hub().notify(&Notice::Appended(elicitation.session_id.clone()));
        }
        tracing::info!(principal = %principal, form = %form.id, "form values saved");
        Ok(completed)
    }

    /// Stores the answer to a call-scoped form for the call that asked, completing its
    /// elicitation. False (nothing stored) when the elicitation was no longer pending.
    pub async fn answer_call_form(
        &self,
        elicitation: &ElicitationRecord,
        submission: Submission,
    ) -> Result<bool, GateError> {
        let answer = FormAnswerRecord {
            elicitation_id: elicitation.id,
            fields: Value::Object(submission.values),
            secrets: self.seal(&submission.secrets, &answer_context(&elicitation.id)),
            created_at: Utc::now(),
        };
        let completed = self
            .store
            .save_form_answer(&answer, &completion(&elicitation.id), Utc::now())
            .await?;
        if completed {
            self.bus.hub().notify(&Notice::Appended(elicitation.session_id.clone()));
            tracing::info!(elicitation = %elicitation.id, "call form answered");
        }
        Ok(completed)
    }

    /// Deletes the principal's values for a form; false when there were none.
    pub async fn delete_form_values(&self, principal: &Principal, form: &str) -> Result<bool, GateError> {
        let deleted = self.store.delete_form_values(principal, form).await?;
        if deleted {
            tracing::info!(principal = %principal, form, "form values deleted");
        }
        Ok(deleted)
    }

    pub async fn connections(&self, principal: &Principal) -> Result<Vec<ConnectionSummary>, GateError> {
        Ok(self
            .connections_of(principal)
            .await?
            .iter()
            .cloned()
            .map(|c| ConnectionSummary {
                provider_name: self
                    .providers
                    .get(&c.provider)
                    .map_or_else(|| c.provider.clone(), |p| p.name.clone()),
                provider: c.provider,
                account_label: c.account_label,
                scopes: c.scopes,
                active: c.status == ConnectionStatus::Active,
                connected_at: c.created_at,
            })
            .collect())
    }

    /// Removes a connection and revokes its tokens where the provider supports it. Returns
    /// whether there was one, and whether revocation succeeded (None: nothing to revoke).
    pub async fn disconnect(
        &self,
        principal: &Principal,
        provider_id: &str,
    ) -> Result<Option<Option<bool>>, GateError> {
        let Some(connection) = self.store.delete_connection(principal, provider_id).await? else {
            return Ok(None);
        };
        self.connections_changed(principal);
        let Some(provider) = self.providers.get(provider_id).filter(|p| p.revocation_url.is_some()) else {
            return Ok(Some(None));
        };
        let (sealed, context, hint) = match &connection.refresh_token {
            Some(refresh) => (refresh, refresh_context(principal, provider_id), "refresh_token"),
            None => (
                &connection.access_token,
                access_context(principal, provider_id),
                "access_token",
            ),
        };
        let token = self.vault.decrypt_str(sealed, &context)?;
        let revoked = match self.oauth.revoke(provider, token.expose(), hint).await {
            Ok(()) => true,
            Err(error) => {
                tracing::warn!(principal = %principal, provider = provider_id, %error, "revocation failed");
                false
            }
        };
        Ok(Some(Some(revoked)))
    }

    /// Marks overdue elicitations expired, forgets long-expired flows and untaken call answers.
    pub async fn sweep(&self) -> Result<(), GateError> {
        let now = Utc::now();
        let expired = self.store.expire_elicitations(now).await?;
        if expired > 0 {
            tracing::info!(expired, "elicitations expired");
        }
        let retention = now - chrono::Duration::from_std(FLOW_RETENTION).unwrap_or_default();
        self.store.delete_stale_flows(retention).await?;
        let dropped = self.store.delete_untaken_answers(retention).await?;
        if dropped > 0 {
            tracing::info!(dropped, "call answers nobody took were dropped");
        }
        Ok(())
    }
}

/// `__Host-` cookies (Secure, Path=/, no Domain) over HTTPS; a plain name on http://localhost,
/// where browsers refuse `Secure` cookies. One cookie per flow, so parallel sign-ins do not
/// overwrite each other.
fn flow_cookie_name(state_hash: &str, secure: bool) -> String {
    let id = &state_hash[..16.min(state_hash.len())];
    if secure {
        format!("__Host-gatehouse-flow-{id}")
    } else {
        format!("gatehouse-flow-{id}")
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Runs the sweeper until shutdown.
pub async fn sweep_periodically(gate: Arc<Gate>, shutdown: tokio_util::sync::CancellationToken) {
    let mut interval = tokio::time::interval(Duration::from_secs(15));
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = interval.tick() => {}
        }
        if let Err(error) = gate.sweep().await {
            tracing::warn!(%error, "elicitation sweep failed");
        }
    }
}
