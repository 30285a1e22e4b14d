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
use axum::body::Bytes;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use rand::RngCore;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use url::{Url, form_urlencoded};

// A file beside this one, so the benchmark that includes this file by path finds it too.
#[path = "fake_slack.rs"]
pub mod fake_slack;

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

impl std::fmt::Debug for FakeProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeProvider")
            .field("base_url", &self.base_url)
            .finish_non_exhaustive()
    }
}

impl FakeProvider {
    /// Binds `127.0.0.1:0` and serves the fake in a tokio task until the last handle is dropped.
    pub async fn start(options: FakeOptions) -> FakeProvider {
        let shared = Shared(Arc::new(Mutex::new(Inner {
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
        })));
        let listener = tokio::net::TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
            .await
            .expect("fake OAuth provider: bind 127.0.0.1:0");
        let port = listener
            .local_addr()
            .expect("fake OAuth provider: local address")
            .port();
        let app = Router::new()
            .route("/authorize", get(authorize))
            .route("/token", post(token))
            .route("/userinfo", get(protected_resource))
            .route("/api/me", get(protected_resource))
            .route("/api/auth.test", get(protected_resource))
            .route("/api/chat.postMessage", post(protected_resource))
            .route("/revoke", post(revoke))
            .with_state(shared.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        FakeProvider {
            base_url: format!("http://127.0.0.1:{port}"),
            shared,
            _server: Arc::new(ServerTask(task)),
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

/// Aborts the server task when the last [`FakeProvider`] handle goes away.
pub(crate) struct ServerTask(pub(crate) tokio::task::JoinHandle<()>);

impl Drop for ServerTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[derive(Clone)]
struct Shared(Arc<Mutex<Inner>>);

impl Shared {
    /// Locks the state; a panic elsewhere while holding the lock does not wedge the fake.
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

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

/// `prefix` + 32 random bytes, base64url without padding.
pub(crate) fn random_token(prefix: &str) -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    format!("{prefix}{}", URL_SAFE_NO_PAD.encode(bytes))
}

/// A stable, JavaScript-safe numeric id for a login (FNV-1a).
fn user_id(login: &str) -> u64 {
    let hash = login.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    1_000_000 + hash % 1_000_000_000
}

/// Form or query parameters, refusing repeats (RFC 6749 3.1, 3.2). Empty values count as absent.
pub(crate) struct Params(HashMap<String, String>);

impl Params {
    /// Parses `application/x-www-form-urlencoded`; `Err` names a repeated parameter.
    pub(crate) fn parse(pairs: &[(String, String)]) -> Result<Params, String> {
        let mut map = HashMap::new();
        for (key, value) in pairs {
            if map.insert(key.clone(), value.clone()).is_some() {
                return Err(key.clone());
            }
        }
        Ok(Params(map))
    }

    pub(crate) fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str).filter(|v| !v.is_empty())
    }
}

pub(crate) fn decode_pairs(raw: &[u8]) -> Vec<(String, String)> {
    form_urlencoded::parse(raw).into_owned().collect()
}

/// Decodes one `application/x-www-form-urlencoded` component (`+` is a space); `None` when
/// malformed (bad `%` escape or not UTF-8).
fn form_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b'%' => {
                let hex = bytes.get(i + 1..i + 3)?;
                if !hex.iter().all(u8::is_ascii_hexdigit) {
                    return None;
                }
                out.push(u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?);
                i += 3;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// Splits a requested `scope` on spaces and on the configured separator.
fn split_scopes(scope: Option<&str>, separator: char) -> Vec<String> {
    scope
        .unwrap_or_default()
        .split([' ', separator])
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

pub(crate) fn plain_400(reason: impl Into<String>) -> Response {
    (
        StatusCode::BAD_REQUEST,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        reason.into(),
    )
        .into_response()
}

/// A token-endpoint style body (`/token` responses, `/revoke` errors) in the configured format.
pub(crate) fn token_body(format: TokenFormat, status: StatusCode, fields: &[(&str, Value)]) -> Response {
    let (content_type, body) = match format {
        TokenFormat::Json => {
            let map: serde_json::Map<String, Value> =
                fields.iter().map(|(k, v)| ((*k).to_owned(), v.clone())).collect();
            ("application/json", Value::Object(map).to_string())
        }
        TokenFormat::Form => {
            let mut serializer = form_urlencoded::Serializer::new(String::new());
            for (key, value) in fields {
                match value {
                    Value::String(s) => serializer.append_pair(key, s),
                    other => serializer.append_pair(key, &other.to_string()),
                };
            }
            ("application/x-www-form-urlencoded", serializer.finish())
        }
    };
    let mut response = (status, [(header::CONTENT_TYPE, content_type)], body).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(header::PRAGMA, HeaderValue::from_static("no-cache"));
    response
}

/// An RFC 6749 5.2 error response; `invalid_client` is a 401, everything else a 400 (Slack: 200).
fn oauth_error(options: &FakeOptions, error: &str, description: &str) -> Response {
    if options.dialect == Dialect::Slack {
        return fake_slack::error(error, description);
    }
    let status = if error == "invalid_client" {
        StatusCode::UNAUTHORIZED
    } else {
        StatusCode::BAD_REQUEST
    };
    let mut response = token_body(
        options.token_format,
        status,
        &[("error", json!(error)), ("error_description", json!(description))],
    );
    if error == "invalid_client" && options.client_auth == ClientAuth::Basic {
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Basic realm=\"fake-oauth\""),
        );
    }
    response
}

/// `GET /authorize`: validates like a real provider (400 without redirecting on a bad client or
/// redirect URI), then redirects per the configured [`AuthorizeOutcome`].
async fn authorize(State(shared): State<Shared>, RawQuery(query): RawQuery) -> Response {
    let pairs = decode_pairs(query.unwrap_or_default().as_bytes());
    let mut inner = shared.lock();
    inner.stats.authorize_requests += 1;
    inner.stats.last_authorize_query = pairs.clone();
    let params = match Params::parse(&pairs) {
        Ok(params) => params,
        Err(key) => return plain_400(format!("parameter {key} given more than once")),
    };
    match params.get("client_id") {
        None => return plain_400("missing client_id"),
        Some(id) if id != inner.options.client_id => return plain_400(format!("unknown client_id {id:?}")),
        Some(_) => {}
    }
    let Some(redirect_uri) = params.get("redirect_uri") else {
        return plain_400("missing redirect_uri");
    };
    let mut redirect = match Url::parse(redirect_uri) {
        Ok(url) if matches!(url.scheme(), "http" | "https") && url.host().is_some() && url.fragment().is_none() => url,
        _ => {
            return plain_400(format!(
                "redirect_uri {redirect_uri:?} is not an absolute http(s) URL without fragment"
            ));
        }
    };
    if params.get("response_type") != Some("code") {
        return plain_400("response_type must be code");
    }
    let Some(state) = params.get("state") else {
        return plain_400("missing state");
    };
    if params.get("code_challenge_method") != Some("S256") {
        return plain_400("code_challenge_method must be S256");
    }
    let challenge = params.get("code_challenge").unwrap_or_default();
    if !valid_code_challenge(challenge) {
        return plain_400("code_challenge must be 43 to 128 characters of [A-Za-z0-9-._~]");
    }

    {
        let mut out = redirect.query_pairs_mut();
        match inner.outcome {
            AuthorizeOutcome::Approve => {
                let code = random_token("code_");
                let scope_param = match inner.options.dialect {
                    Dialect::Rfc6749 => "scope",
                    Dialect::Slack => "user_scope",
                };
                let requested = split_scopes(params.get(scope_param), inner.options.scope_separator);
                let scopes = inner.options.granted_scopes.clone().unwrap_or(requested);
                let grant = inner.next_grant;
                inner.next_grant += 1;
                let record = CodeRecord {
                    grant,
                    client_id: inner.options.client_id.clone(),
                    redirect_uri: redirect_uri.to_owned(),
                    code_challenge: challenge.to_owned(),
                    scopes,
                    user: inner.next_user.clone(),
                    issued_at: Instant::now(),
                    used: false,
                };
                inner.codes.insert(code.clone(), record);
                out.append_pair("code", &code);
            }
            AuthorizeOutcome::Deny => {
                out.append_pair("error", "access_denied");
                out.append_pair("error_description", "The user denied the request");
            }
            AuthorizeOutcome::Fail => {
                out.append_pair("error", "server_error");
                out.append_pair("error_description", "The fake provider was told to fail");
            }
        }
        out.append_pair("state", state);
        if let Some(issuer) = &inner.options.issuer {
            out.append_pair("iss", issuer);
        }
    }
    (StatusCode::FOUND, [(header::LOCATION, redirect.to_string())]).into_response()
}

/// A PKCE `code_challenge` of the right form: 43 to 128 characters of `[A-Za-z0-9-._~]`.
pub(crate) fn valid_code_challenge(challenge: &str) -> bool {
    (43..=128).contains(&challenge.len())
        && challenge
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~'))
}

/// The PKCE S256 `code_challenge` of a `code_verifier` (RFC 7636 4.2).
pub(crate) fn s256_challenge(verifier: &str) -> String {
    URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()))
}

/// A token-endpoint failure: the RFC 6749 5.2 error code and a description.
pub(crate) type Failure = (&'static str, &'static str);

/// Authenticates the client per [`FakeOptions::client_auth`]; returns its id.
fn authenticate_client(options: &FakeOptions, headers: &HeaderMap, params: &Params) -> Result<String, Failure> {
    let authorization = headers.get(header::AUTHORIZATION);
    let body_secret = params.get("client_secret");
    if authorization.is_some() && body_secret.is_some() {
        return Err(("invalid_request", "more than one client authentication method"));
    }
    let (id, secret) = match options.client_auth {
        ClientAuth::Basic => {
            let value = authorization.ok_or(("invalid_client", "client_secret_basic authentication required"))?;
            let (id, secret) = parse_basic(value).ok_or(("invalid_client", "malformed Basic authorization"))?;
            if params.get("client_id").is_some_and(|body_id| body_id != id) {
                return Err(("invalid_client", "client_id in body differs from Basic"));
            }
            (id, secret)
        }
        ClientAuth::Post => match (authorization, params.get("client_id"), body_secret) {
            (Some(_), _, _) => return Err(("invalid_client", "client_secret_post authentication required")),
            (None, Some(id), Some(secret)) => (id.to_owned(), secret.to_owned()),
            _ => return Err(("invalid_client", "client_id and client_secret required")),
        },
    };
    if id != options.client_id || secret != options.client_secret {
        return Err(("invalid_client", "unknown client or wrong secret"));
    }
    Ok(id)
}

/// `Basic base64(urlencode(id) ":" urlencode(secret))` → `(id, secret)`.
pub(crate) fn parse_basic(value: &HeaderValue) -> Option<(String, String)> {
    let (scheme, credentials) = value.to_str().ok()?.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = String::from_utf8(STANDARD.decode(credentials.trim()).ok()?).ok()?;
    let (id, secret) = decoded.split_once(':')?;
    Some((form_decode(id)?, form_decode(secret)?))
}

/// Reads a form body after checking its media type; repeated parameters are refused.
pub(crate) fn form_params(headers: &HeaderMap, body: &[u8]) -> Result<Params, Failure> {
    let is_form = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("application/x-www-form-urlencoded"));
    if !is_form {
        return Err(("invalid_request", "body must be application/x-www-form-urlencoded"));
    }
    Params::parse(&decode_pairs(body)).map_err(|_| ("invalid_request", "repeated parameter"))
}

/// Reads a form body, then authenticates the client: the common front half of `/token` and
/// `/revoke`. Returns the parameters and the client id.
fn authenticated_form(options: &FakeOptions, headers: &HeaderMap, body: &[u8]) -> Result<(Params, String), Failure> {
    let params = form_params(headers, body)?;
    let client_id = authenticate_client(options, headers, &params)?;
    Ok((params, client_id))
}

/// `POST /token`.
async fn token(State(shared): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    let options = shared.lock().options.clone();
    let (params, client_id) = match authenticated_form(&options, &headers, &body) {
        Ok(ok) => ok,
        Err((error, description)) => return oauth_error(&options, error, description),
    };
    match params.get("grant_type") {
        Some("authorization_code") => {
            let hold = shared.lock().hold.clone();
            if let Some(hold) = hold {
                hold.pass().await;
            }
            exchange_code(&shared, &options, &params, &client_id)
        }
        Some("refresh_token") => refresh(&shared, &params, &client_id).await,
        Some(_) => oauth_error(
            &options,
            "unsupported_grant_type",
            "only authorization_code and refresh_token",
        ),
        None => oauth_error(&options, "invalid_request", "missing grant_type"),
    }
}

/// `grant_type=authorization_code`. A code is spent by any exchange attempt; presenting a spent
/// code again also revokes every token issued from it (RFC 6749 4.1.2).
fn exchange_code(shared: &Shared, options: &FakeOptions, params: &Params, client_id: &str) -> Response {
    let mut inner = shared.lock();
    inner.stats.code_exchanges += 1;
    let Some(code) = params.get("code") else {
        return oauth_error(options, "invalid_request", "missing code");
    };
    let Some(record) = inner.codes.get_mut(code) else {
        return oauth_error(options, "invalid_grant", "unknown code");
    };
    if record.used {
        let grant = record.grant;
        inner.revoke_grant(grant);
        return oauth_error(options, "invalid_grant", "code already used");
    }
    record.used = true;
    if record.issued_at.elapsed() > CODE_LIFETIME {
        return oauth_error(options, "invalid_grant", "code expired");
    }
    if record.client_id != client_id {
        return oauth_error(options, "invalid_grant", "code was issued to another client");
    }
    if params.get("redirect_uri") != Some(record.redirect_uri.as_str()) {
        return oauth_error(
            options,
            "invalid_grant",
            "redirect_uri differs from the authorization request",
        );
    }
    let verifier = params.get("code_verifier").unwrap_or_default();
    if s256_challenge(verifier) != record.code_challenge {
        return oauth_error(options, "invalid_grant", "code_verifier does not match code_challenge");
    }
    let (grant, user, scopes) = (record.grant, record.user.clone(), record.scopes.clone());
    let refresh_scopes = inner.options.refresh_tokens.then_some(scopes.as_slice());
    let fields = inner.issue(grant, client_id, &user, &scopes, refresh_scopes);
    match options.dialect {
        Dialect::Rfc6749 => token_body(options.token_format, StatusCode::OK, &fields),
        Dialect::Slack => fake_slack::exchange_answer(&user, &fields),
    }
}

/// Decrements the in-flight refresh count however the request ends (even if the client hangs up
/// during the delay and the handler future is dropped).
struct InFlight(Shared);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.lock().refreshes_in_flight -= 1;
    }
}

/// `grant_type=refresh_token`. The token is checked after [`FakeOptions::refresh_delay_ms`], so
/// racing refreshes of one rotating token see exactly one winner.
async fn refresh(shared: &Shared, params: &Params, client_id: &str) -> Response {
    let delay = {
        let mut inner = shared.lock();
        inner.stats.refreshes += 1;
        inner.refreshes_in_flight += 1;
        inner.stats.concurrent_refresh_peak = inner.stats.concurrent_refresh_peak.max(inner.refreshes_in_flight);
        inner.options.refresh_delay_ms
    };
    let in_flight = InFlight(shared.clone());
    if delay > 0 {
        tokio::time::sleep(Duration::from_millis(delay)).await;
    }
    drop(in_flight);

    let mut inner = shared.lock();
    let options = inner.options.clone();
    let Some(refresh_token) = params.get("refresh_token") else {
        return oauth_error(&options, "invalid_request", "missing refresh_token");
    };
    let Some(record) = inner.refresh_tokens.get_mut(refresh_token) else {
        return oauth_error(&options, "invalid_grant", "unknown refresh token");
    };
    if record.revoked {
        return oauth_error(&options, "invalid_grant", "refresh token revoked");
    }
    if record.client_id != client_id {
        return oauth_error(&options, "invalid_grant", "refresh token was issued to another client");
    }
    let mut scopes = record.scopes.clone();
    if let Some(requested) = params.get("scope") {
        let requested = split_scopes(Some(requested), options.scope_separator);
        if !requested.iter().all(|s| scopes.contains(s)) {
            return oauth_error(&options, "invalid_scope", "scope exceeds the original grant");
        }
        scopes = requested;
    }
    let (grant, user, original) = (record.grant, record.user.clone(), record.scopes.clone());
    // Rotation: the old refresh token dies; the new one keeps the grant's full scopes even when
    // this refresh asked for fewer.
    let rotated = options.rotate_refresh_tokens.then_some(original);
    if rotated.is_some() {
        record.revoked = true;
    }
    let fields = inner.issue(grant, client_id, &user, &scopes, rotated.as_deref());
    match options.dialect {
        Dialect::Rfc6749 => token_body(options.token_format, StatusCode::OK, &fields),
        Dialect::Slack => fake_slack::refresh_answer(&fields),
    }
}

/// `GET /userinfo` and `GET /api/me` (and the Slack Web API's methods): the signed-in account, for
/// a valid bearer token.
async fn protected_resource(State(shared): State<Shared>, headers: HeaderMap) -> Response {
    let presented = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            let (scheme, token) = v.trim().split_once(' ').unwrap_or((v.trim(), ""));
            scheme.eq_ignore_ascii_case("bearer").then(|| token.trim().to_owned())
        });
    let mut inner = shared.lock();
    let Some(token) = presented else {
        // RFC 6750 3.1: no error code when the request carries no credentials at all.
        return (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer realm=\"fake-oauth\"")],
        )
            .into_response();
    };
    inner.stats.api_bearer_tokens.push(token.clone());
    let valid = inner.access_tokens.get(&token).filter(|t| t.is_valid(Instant::now()));
    if inner.options.dialect == Dialect::Slack {
        return fake_slack::api_answer(valid.map(|record| record.user.as_str()));
    }
    match valid {
        Some(record) => axum::Json(json!({
            "login": record.user,
            "id": user_id(&record.user),
            "sub": user_id(&record.user).to_string(),
            "email": format!("{}@example.test", record.user),
            "scopes": record.scopes,
        }))
        .into_response(),
        None => (
            StatusCode::UNAUTHORIZED,
            [(
                header::WWW_AUTHENTICATE,
                "Bearer realm=\"fake-oauth\", error=\"invalid_token\"",
            )],
        )
            .into_response(),
    }
}

/// `POST /revoke` (RFC 7009): revokes an access token, or a refresh token together with every
/// token of its grant. Unknown tokens are fine (200); `token_type_hint` is ignored.
async fn revoke(State(shared): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    let options = shared.lock().options.clone();
    let (params, client_id) = match authenticated_form(&options, &headers, &body) {
        Ok(ok) => ok,
        Err((error, description)) => return oauth_error(&options, error, description),
    };
    let Some(token) = params.get("token") else {
        return oauth_error(&options, "invalid_request", "missing token");
    };
    let mut inner = shared.lock();
    inner.stats.revocations += 1;
    if let Some(record) = inner.access_tokens.get_mut(token).filter(|t| t.client_id == client_id) {
        record.revoked = true;
    } else if let Some(grant) = inner
        .refresh_tokens
        .get(token)
        .filter(|t| t.client_id == client_id)
        .map(|t| t.grant)
    {
        inner.revoke_grant(grant);
    }
    StatusCode::OK.into_response()
}
