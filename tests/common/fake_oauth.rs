//! A fake third-party OAuth 2 authorization server (think GitHub, Google or a generic provider)
//! for integration tests: a real HTTP server on `127.0.0.1:<random port>`, strict about what a
//! client sends, configurable mid-test and inspectable afterwards.
//!
//! Endpoints, relative to [`FakeProvider::base_url`]:
//!
//! * `GET /authorize` — the authorization endpoint (RFC 6749 4.1.1, PKCE S256 required by RFC 7636,
//!   `iss` in the redirect per RFC 9207 when [`FakeOptions::issuer`] is set). Nobody signs in: the
//!   account set by [`FakeProvider::set_next_user`] is taken to have approved (or denied, see
//!   [`AuthorizeOutcome`]) at once.
//! * `POST /token` — `authorization_code` and `refresh_token` grants (RFC 6749 4.1.3, 6); code
//!   exchanges can be held until the test lets them go on ([`FakeProvider::hold_code_exchanges`]).
//! * `GET /userinfo` and `GET /api/me` — a protected resource taking `Authorization: Bearer`.
//! * `POST /revoke` — token revocation (RFC 7009).
//!
//! [`Dialect::Slack`] answers the way Slack's OAuth v2 does instead (see `fake_slack`), and serves
//! `GET /api/auth.test` and `POST /api/chat.postMessage` as its Web API.
//!
//! All state sits behind one `Arc<Mutex<..>>`; [`FakeProvider`] is a cheap, cloneable handle to it.
//! The server task stops when the last handle is dropped. Malformed requests get 400s (or 401s),
//! never panics.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use axum::Router;
use serde_json::{Value, json};

// Files named by path, so the benchmark that includes this file by path finds them too.
#[path = "fake_oauth/endpoints.rs"]
mod endpoints;
#[path = "fake_slack.rs"]
pub mod fake_slack;
#[path = "fake_oauth/wire.rs"]
mod wire;

pub(crate) use wire::{
    AUTH_METHODS, Failure, Params, decode_pairs, form_params, parse_basic, plain_400, random_token,
    registration_request, s256_challenge, token_body, valid_code_challenge,
};

/// How long an authorization code may wait for its exchange.
const CODE_LIFETIME: Duration = Duration::from_secs(60);
/// How long a test waits for a held code exchange to arrive: it only guards against hanging.
const HOLD_WAIT: Duration = Duration::from_secs(10);

/// How the client must authenticate at `/token` and `/revoke`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    /// `client_secret_basic`: `Authorization: Basic base64(urlencode(id):urlencode(secret))`
    /// (RFC 6749 2.3.1); a `client_secret` in the body as well is a 400 `invalid_request`.
    Basic,
    /// `client_secret_post`: `client_id` and `client_secret` in the form body; an `Authorization`
    /// header is refused.
    Post,
}

/// The media type of `/token` (and `/revoke` error) responses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenFormat {
    /// `application/json`, as RFC 6749 5.1 prescribes.
    Json,
    /// `application/x-www-form-urlencoded`, as GitHub answers when the client does not send
    /// `Accept: application/json`. The HTTP status codes stay the same as with `Json`.
    Form,
}

/// Which provider's conventions the fake follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Dialect {
    /// RFC 6749 as written.
    #[default]
    Rfc6749,
    /// Slack's OAuth v2 and Web API (`fake_slack`).
    Slack,
}

/// What happens at the next `/authorize` that passes validation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AuthorizeOutcome {
    /// The user approves: redirect with `code` and `state`.
    #[default]
    Approve,
    /// The user declines: redirect with `error=access_denied`.
    Deny,
    /// The provider breaks: redirect with `error=server_error` and an `error_description`.
    Fail,
}

/// Behaviour of the fake; change it mid-test with [`FakeProvider::set_options`].
#[derive(Debug, Clone)]
pub struct FakeOptions {
    /// The only client the provider knows.
    pub client_id: String,
    /// That client's secret.
    pub client_secret: String,
    /// How the client must authenticate at `/token` and `/revoke`.
    pub client_auth: ClientAuth,
    /// The media type of `/token` responses, errors included.
    pub token_format: TokenFormat,
    /// Lifetime of new access tokens in seconds, sent as `expires_in`; `None` = they never expire
    /// (and `expires_in` is omitted).
    pub access_token_ttl: Option<u64>,
    /// Issue a refresh token with the code exchange.
    pub refresh_tokens: bool,
    /// A refresh returns a new refresh token and invalidates the old one; otherwise the response
    /// omits `refresh_token` and the old one stays usable.
    pub rotate_refresh_tokens: bool,
    /// When `Some`, authorization redirects (success and error) carry `iss` (RFC 9207).
    pub issuer: Option<String>,
    /// When `Some`, grant these scopes instead of the requested ones (decided at `/authorize`).
    pub granted_scopes: Option<Vec<String>>,
    /// Joins granted scopes in the token response's `scope` (`' '` per RFC, `','` like GitHub).
    /// The `scope` request parameter is split on spaces and on this character.
    pub scope_separator: char,
    /// Sleep this long inside each refresh, to widen race windows.
    pub refresh_delay_ms: u64,
    /// Whose conventions the answers follow.
    pub dialect: Dialect,
}

impl Default for FakeOptions {
    fn default() -> Self {
        FakeOptions {
            client_id: "fake-client".to_owned(),
            client_secret: "fake-secret".to_owned(),
            client_auth: ClientAuth::Basic,
            token_format: TokenFormat::Json,
            access_token_ttl: None,
            refresh_tokens: true,
            rotate_refresh_tokens: true,
            issuer: None,
            granted_scopes: None,
            scope_separator: ' ',
            refresh_delay_ms: 0,
            dialect: Dialect::Rfc6749,
        }
    }
}

/// Counters and observations; a snapshot from [`FakeProvider::stats`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FakeStats {
    /// `GET /authorize` requests, valid or not.
    pub authorize_requests: usize,
    /// `authorization_code` grant requests from an authenticated client, successful or not.
    pub code_exchanges: usize,
    /// `refresh_token` grant requests from an authenticated client, successful or not.
    pub refreshes: usize,
    /// The most refresh requests ever in flight at once (see [`FakeOptions::refresh_delay_ms`]).
    pub concurrent_refresh_peak: usize,
    /// Authenticated `/revoke` requests carrying a `token`, whether or not it was known.
    pub revocations: usize,
    /// Every bearer token presented to `/api/me` and `/userinfo`, valid or not, in order.
    pub api_bearer_tokens: Vec<String>,
    /// The decoded query of the latest `/authorize` request, valid or not, in order.
    pub last_authorize_query: Vec<(String, String)>,
    /// Every access token issued, in order.
    pub issued_access_tokens: Vec<String>,
    /// Every refresh token issued, in order.
    pub issued_refresh_tokens: Vec<String>,
}

/// Handle to a running fake provider. Clones share the same server and state.
#[derive(Clone)]
pub struct FakeProvider {
    /// `http://127.0.0.1:PORT`, without a trailing slash.
    pub base_url: String,
    shared: Shared,
    _server: Arc<ServerTask>,
}

impl FakeProvider {
    /// Binds `127.0.0.1:0` and serves the fake in a tokio task until the last handle is dropped.
    pub async fn start(options: FakeOptions) -> FakeProvider {
        let shared = Shared::new(Inner {
            options,
            next_user: "octocat".to_owned(),
            outcome: AuthorizeOutcome::Approve,
            next_grant: 0,
            codes: HashMap::new(),
            access_tokens: HashMap::new(),
            refresh_tokens: HashMap::new(),
            refreshes_in_flight: 0,
            stats: FakeStats::default(),
            hold: None,
        });
        let (listener, port) = bind_local("fake OAuth provider").await;
        let app = endpoints::router(shared.clone());
        FakeProvider {
            base_url: format!("http://127.0.0.1:{port}"),
            shared,
            _server: ServerTask::spawn(listener, app),
        }
    }

    /// A gatehouse configuration pointing at this provider: `toml` (a fixture under
    /// `tests/fixtures/`) with every `http://FAKE` replaced by [`FakeProvider::base_url`].
    pub fn configure(&self, toml: &str) -> String {
        toml.replace("http://FAKE", &self.base_url)
    }

    /// The account that signs in from the next `/authorize` on (default `"octocat"`).
    pub fn set_next_user(&self, login: &str) {
        self.shared.lock().next_user = login.to_owned();
    }

    /// What `/authorize` does from now on (default [`AuthorizeOutcome::Approve`]).
    pub fn set_authorize_outcome(&self, outcome: AuthorizeOutcome) {
        self.shared.lock().outcome = outcome;
    }

    /// Changes behaviour mid-test. Tokens and codes already issued keep what they were issued with.
    pub fn set_options(&self, f: impl FnOnce(&mut FakeOptions)) {
        f(&mut self.shared.lock().options);
    }

    /// A copy of the current options (e.g. for the client id and secret to configure).
    pub fn options(&self) -> FakeOptions {
        self.shared.lock().options.clone()
    }

    /// Every access token issued so far expires now; refresh tokens keep working.
    pub fn expire_all_access_tokens(&self) {
        let now = Instant::now();
        for token in self.shared.lock().access_tokens.values_mut() {
            token.expires_at = Some(now);
        }
    }

    /// Revokes every access token, refresh token and outstanding code issued so far: API calls
    /// answer 401 and refreshes `invalid_grant` until the user authorizes again.
    pub fn revoke_everything(&self) {
        let mut inner = self.shared.lock();
        inner.access_tokens.values_mut().for_each(|t| t.revoked = true);
        inner.refresh_tokens.values_mut().for_each(|t| t.revoked = true);
        inner.codes.values_mut().for_each(|c| c.used = true);
    }

    /// An access token for `login` with `scopes`, as if that user had just approved the configured
    /// client (a grant of its own, no refresh token, [`FakeOptions::access_token_ttl`] applies):
    /// for tests that need a valid token without going through `/authorize`, e.g. to call an
    /// upstream that checks tokens at `/userinfo` directly. Counted in
    /// [`FakeStats::issued_access_tokens`]; [`FakeProvider::revoke_everything`] revokes it too.
    pub fn issue_token(&self, login: &str, scopes: &[&str]) -> String {
        let mut inner = self.shared.lock();
        let grant = inner.next_grant;
        inner.next_grant += 1;
        let client_id = inner.options.client_id.clone();
        let scopes: Vec<String> = scopes.iter().map(|s| (*s).to_owned()).collect();
        let fields = inner.issue(grant, &client_id, login, &scopes, None);
        fields
            .iter()
            .find(|(name, _)| *name == "access_token")
            .and_then(|(_, value)| value.as_str())
            .expect("issue() always names the access token")
            .to_owned()
    }

    /// A snapshot of the counters and observations.
    pub fn stats(&self) -> FakeStats {
        self.shared.lock().stats.clone()
    }

    /// From now on every code exchange at `/token` waits until the returned hold lets it go on:
    /// a slow provider whose slowness the test controls.
    pub fn hold_code_exchanges(&self) -> ExchangeHold {
        let hold = ExchangeHold {
            arrived: Arc::new(tokio::sync::Semaphore::new(0)),
            released: Arc::new(tokio::sync::Semaphore::new(0)),
        };
        self.shared.lock().hold = Some(hold.clone());
        hold
    }
}

/// Code exchanges held at `/token`: see [`FakeProvider::hold_code_exchanges`].
#[derive(Clone)]
pub struct ExchangeHold {
    /// A permit per exchange that reached the hold.
    arrived: Arc<tokio::sync::Semaphore>,
    /// A permit per exchange allowed to go on.
    released: Arc<tokio::sync::Semaphore>,
}

impl ExchangeHold {
    /// Waits until a code exchange is being held (panics after [`HOLD_WAIT`]).
    pub async fn arrived(&self) {
        tokio::time::timeout(HOLD_WAIT, self.arrived.acquire())
            .await
            .expect("a code exchange within the wait")
            .expect("the semaphore stays open")
            .forget();
    }

    /// Lets one held code exchange go on.
    pub fn release(&self) {
        self.released.add_permits(1);
    }

    /// Inside `/token`: announces the exchange and waits to be released.
    async fn pass(&self) {
        self.arrived.add_permits(1);
        if let Ok(permit) = self.released.acquire().await {
            permit.forget();
        }
    }
}

/// Binds `127.0.0.1:0` for the fake called `fake`: the listener and its port.
pub(crate) async fn bind_local(fake: &str) -> (tokio::net::TcpListener, u16) {
    let listener = tokio::net::TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
        .await
        .unwrap_or_else(|error| panic!("{fake}: bind 127.0.0.1:0: {error}"));
    let port = listener
        .local_addr()
        .unwrap_or_else(|error| panic!("{fake}: local address: {error}"))
        .port();
    (listener, port)
}

/// A fake's server task, aborted when the last handle of the fake goes away.
pub(crate) struct ServerTask(tokio::task::JoinHandle<()>);

impl ServerTask {
    /// Serves `app` on `listener` in a task of its own.
    pub(crate) fn spawn(listener: tokio::net::TcpListener, app: Router) -> Arc<ServerTask> {
        Arc::new(ServerTask(tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        })))
    }
}

impl Drop for ServerTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A fake's state behind one lock, shared by its handles and its endpoints.
pub(crate) struct Locked<T>(Arc<Mutex<T>>);

impl<T> Locked<T> {
    pub(crate) fn new(state: T) -> Self {
        Self(Arc::new(Mutex::new(state)))
    }

    /// Locks the state; a panic elsewhere while holding the lock does not wedge the fake.
    pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
        self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

// Not derived: a clone shares the state, whatever the state is.
impl<T> Clone for Locked<T> {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

type Shared = Locked<Inner>;

struct Inner {
    options: FakeOptions,
    next_user: String,
    outcome: AuthorizeOutcome,
    /// Identifies an authorization grant: one approved `/authorize` and every token descending
    /// from its code, so revocation can take out the whole family.
    next_grant: u64,
    codes: HashMap<String, CodeRecord>,
    access_tokens: HashMap<String, AccessRecord>,
    refresh_tokens: HashMap<String, RefreshRecord>,
    refreshes_in_flight: usize,
    stats: FakeStats,
    hold: Option<ExchangeHold>,
}

struct CodeRecord {
    grant: u64,
    client_id: String,
    redirect_uri: String,
    code_challenge: String,
    scopes: Vec<String>,
    user: String,
    issued_at: Instant,
    used: bool,
}

struct AccessRecord {
    grant: u64,
    client_id: String,
    user: String,
    scopes: Vec<String>,
    expires_at: Option<Instant>,
    revoked: bool,
}

impl AccessRecord {
    fn is_valid(&self, now: Instant) -> bool {
        !self.revoked && self.expires_at.is_none_or(|at| now < at)
    }
}

struct RefreshRecord {
    grant: u64,
    client_id: String,
    user: String,
    scopes: Vec<String>,
    revoked: bool,
}

impl Inner {
    /// Issues an access token for `scopes` (and a refresh token for `refresh_scopes` when
    /// `Some`) within a grant; returns the token response fields in order.
    fn issue(
        &mut self,
        grant: u64,
        client_id: &str,
        user: &str,
        scopes: &[String],
        refresh_scopes: Option<&[String]>,
    ) -> Vec<(&'static str, Value)> {
        let access_token = random_token("at_");
        let ttl = self.options.access_token_ttl;
        self.access_tokens.insert(
            access_token.clone(),
            AccessRecord {
                grant,
                client_id: client_id.to_owned(),
                user: user.to_owned(),
                scopes: scopes.to_vec(),
                expires_at: ttl.map(|secs| Instant::now() + Duration::from_secs(secs)),
                revoked: false,
            },
        );
        self.stats.issued_access_tokens.push(access_token.clone());
        let mut fields = vec![("access_token", json!(access_token)), ("token_type", json!("bearer"))];
        if let Some(secs) = ttl {
            fields.push(("expires_in", json!(secs)));
        }
        if let Some(refresh_scopes) = refresh_scopes {
            let refresh_token = random_token("rt_");
            self.refresh_tokens.insert(
                refresh_token.clone(),
                RefreshRecord {
                    grant,
                    client_id: client_id.to_owned(),
                    user: user.to_owned(),
                    scopes: refresh_scopes.to_vec(),
                    revoked: false,
                },
            );
            self.stats.issued_refresh_tokens.push(refresh_token.clone());
            fields.push(("refresh_token", json!(refresh_token)));
        }
        let separator = self.options.scope_separator.to_string();
        fields.push(("scope", json!(scopes.join(&separator))));
        fields
    }

    /// Revokes every access and refresh token of an authorization grant.
    fn revoke_grant(&mut self, grant: u64) {
        self.access_tokens
            .values_mut()
            .filter(|t| t.grant == grant)
            .for_each(|t| t.revoked = true);
        self.refresh_tokens
            .values_mut()
            .filter(|t| t.grant == grant)
            .for_each(|t| t.revoked = true);
    }
}
