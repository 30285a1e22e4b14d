//! A fake identity provider for integration tests: an OAuth 2.1 authorization server and OpenID
//! provider on `127.0.0.1:<random port>` that issues signed JWT access tokens (or opaque ones),
//! id_tokens and refresh tokens, strict about what a client sends and inspectable afterwards.
//!
//! Endpoints, relative to [`FakeIdp::issuer`] (`http://127.0.0.1:PORT/realms/test` by default):
//!
//! * `/.well-known/oauth-authorization-server{realm}` (RFC 8414, at the host's root) and
//!   `{issuer}/.well-known/openid-configuration` (OpenID Connect Discovery), each switchable.
//! * `GET /protocol/openid-connect/certs` — the JWKS (see `keys`: RSA keys that rotate, and an
//!   ES256 key), or a fault set by [`FakeIdp::break_jwks`].
//! * `GET /authorize` — authorization code with PKCE S256 required, `nonce`, `resource` (RFC 8707)
//!   and `iss` in the redirect (RFC 9207). Nobody signs in: the user named by
//!   [`FakeIdp::sign_in_as`] has consented at once; with nobody signed in the redirect carries
//!   `error=login_required`.
//! * `POST /token` — `authorization_code` and `refresh_token` grants (refresh tokens rotate), and
//!   token exchange (RFC 8693) for confidential clients: a live access token it issued for one
//!   whose `aud` is the requested `audience` (else `resource`), refused with the error
//!   [`FakeIdp::refuse_exchanges`] names, or answered wrongly as
//!   [`FakeIdp::misbehave_in_exchanges`] says; clients authenticate with `client_secret_basic`,
//!   `client_secret_post`, or (public clients) `none`.
//! * `POST /register` — dynamic client registration (RFC 7591).
//! * `POST /introspect` — token introspection (RFC 7662) for confidential clients.
//! * `GET /userinfo` (bearer) and `GET /logout` (RP-initiated logout: the user is signed out).
//!
//! All state sits behind one `Arc<Mutex<..>>`; [`FakeIdp`] is a cheap, cloneable handle to it. The
//! server task stops when the last handle is dropped. Malformed requests get 400s (or 401s), never
//! panics; the handle's methods panic on a test's own mistakes (an unknown user).

// Files beside this one, named by path so the benchmark that includes this file by path finds them.
#[path = "fake_idp/endpoints.rs"]
mod endpoints;
#[path = "fake_idp/keys.rs"]
mod keys;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::fake_oauth::{Locked, ServerTask, bind_local, random_token};
use super::unix_seconds;
pub use keys::Signer;

/// The `kid` of the ES256 key, which never rotates.
pub const EC_KID: &str = "ec-1";

/// The `client_id` claim of tokens made by [`FakeIdp::access_token`] and [`FakeIdp::claims`].
pub const DIRECT_CLIENT_ID: &str = "fake-idp-direct";

/// How the fake behaves; fixed at [`FakeIdp::start`].
#[derive(Debug, Clone)]
pub struct FakeIdpOptions {
    /// The issuer's path under `http://127.0.0.1:PORT`: empty, or starting with `/` and not
    /// ending with one (default `/realms/test`).
    pub realm_path: String,
    /// Serve RFC 8414 metadata at `/.well-known/oauth-authorization-server{realm_path}`.
    pub rfc8414: bool,
    /// Serve OpenID discovery at `{realm_path}/.well-known/openid-configuration`.
    pub openid_configuration: bool,
    /// Access tokens are random strings that only `/introspect` (and `/userinfo`) understand.
    pub opaque_access_tokens: bool,
    /// Lifetime of access tokens and id_tokens (`exp - iat`, `expires_in`).
    pub access_token_lifetime: Duration,
    /// The access token's `aud` when the client sent no `resource`; without it, the client's id.
    pub default_audience: Option<String>,
    /// Lifetime of access tokens issued by token exchange.
    pub exchanged_token_lifetime: Duration,
}

impl Default for FakeIdpOptions {
    fn default() -> Self {
        FakeIdpOptions {
            realm_path: "/realms/test".to_owned(),
            rfc8414: true,
            openid_configuration: true,
            opaque_access_tokens: false,
            access_token_lifetime: Duration::from_secs(3600),
            default_audience: None,
            exchanged_token_lifetime: Duration::from_secs(3600),
        }
    }
}

/// How the JWKS endpoint fails while [`FakeIdp::break_jwks`] says so.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JwksFault {
    /// 503 with an empty body.
    Unavailable,
    /// 200, `application/json`, and a body that is not JSON.
    Garbage,
    /// 200 with `{"keys": []}`.
    NoKeys,
}

/// A person the provider knows; their profile goes into tokens and `/userinfo`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestUser {
    pub sub: String,
    pub name: String,
    pub email: String,
    pub groups: Vec<String>,
}

/// A client the provider knows: confidential with a secret, public (`none`) without.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestClient {
    pub id: String,
    pub secret: Option<String>,
    /// `/authorize` accepts exactly these.
    pub redirect_uris: Vec<String>,
}

/// Counters and observations; a snapshot from [`FakeIdp::stats`]. Requests count whether or not
/// they succeed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IdpStats {
    pub jwks_fetches: usize,
    /// Both discovery documents together.
    pub metadata_fetches: usize,
    pub token_requests: usize,
    pub introspections: usize,
    pub registrations: usize,
    /// `GET /authorize` requests.
    pub authorizations: usize,
    pub userinfo_requests: usize,
    pub logouts: usize,
    /// `/token` requests with the token-exchange grant.
    pub token_exchanges: usize,
}

/// What a lying identity provider does to an id_token's claims before it signs them.
pub type ClaimsTamper = fn(&mut Value);

/// Handle to a running fake identity provider. Clones share the same server and state.
#[derive(Clone)]
pub struct FakeIdp {
    issuer: String,
    shared: Shared,
    _server: Arc<ServerTask>,
}

impl FakeIdp {
    /// Binds `127.0.0.1:0` and serves the fake in a tokio task until the last handle is dropped.
    pub async fn start(options: FakeIdpOptions) -> FakeIdp {
        let realm = options.realm_path.clone();
        assert!(
            realm.is_empty() || (realm.starts_with('/') && !realm.ends_with('/')),
            "fake IdP: realm_path {realm:?} must be empty or start with / and not end with one"
        );
        let (listener, port) = bind_local("fake IdP").await;
        let issuer = format!("http://127.0.0.1:{port}{realm}");
        let shared = Shared::new(Inner {
            issuer: issuer.clone(),
            options: options.clone(),
            users: HashMap::new(),
            signed_in: None,
            clients: HashMap::new(),
            keys: keys::KeyRing::new(),
            jwks_fault: None,
            codes: HashMap::new(),
            access_tokens: HashMap::new(),
            refresh_tokens: HashMap::new(),
            stats: IdpStats::default(),
            last_token_request: None,
            exchange_refusal: None,
            exchange_misbehaviour: None,
            id_token_tampering: None,
        });
        let app = endpoints::router(&options, shared.clone());
        FakeIdp {
            issuer,
            shared,
            _server: ServerTask::spawn(listener, app),
        }
    }

    /// `http://127.0.0.1:PORT{realm_path}`, without a trailing slash.
    pub fn issuer(&self) -> String {
        self.issuer.clone()
    }

    /// Adds (or replaces) a user.
    pub fn add_user(&self, user: TestUser) {
        self.shared.lock().users.insert(user.sub.clone(), user);
    }

    /// From now on `/authorize` answers as `sub`, who consents to everything. Panics if the user
    /// was not added.
    pub fn sign_in_as(&self, sub: &str) {
        let mut inner = self.shared.lock();
        assert!(
            inner.users.contains_key(sub),
            "fake IdP: add_user({sub:?}) before signing in"
        );
        inner.signed_in = Some(sub.to_owned());
    }

    /// Adds (or replaces) a client.
    pub fn register_client(&self, client: TestClient) {
        self.shared.lock().clients.insert(client.id.clone(), client);
    }

    /// A new current signing key (the other RSA fixture) under a new `kid`; the keys before it
    /// stay in the JWKS when `keep_old`. Tokens signed earlier keep their old `kid`.
    pub fn rotate_keys(&self, keep_old: bool) {
        self.shared.lock().keys.rotate(keep_old);
    }

    /// From now on the JWKS endpoint fails with `fault`, or (`None`) serves the keys again.
    pub fn break_jwks(&self, fault: Option<JwksFault>) {
        self.shared.lock().jwks_fault = fault;
    }

    /// From now on every id_token's claims go through `tamper` before they are signed (a
    /// malicious or broken identity provider, with a valid signature), or (`None`) are honest.
    pub fn tamper_id_tokens(&self, tamper: Option<ClaimsTamper>) {
        self.shared.lock().id_token_tampering = tamper;
    }

    /// The `kid` of the current signing key.
    pub fn current_kid(&self) -> String {
        self.shared.lock().keys.current_kid().to_owned()
    }

    /// A valid access token for `sub`, as `/token` would issue it (a JWT signed by the current
    /// key, or an opaque string with [`FakeIdpOptions::opaque_access_tokens`]) with
    /// `client_id` [`DIRECT_CLIENT_ID`]; `/introspect` and `/userinfo` know it.
    pub fn access_token(&self, sub: &str, audience: &str, scope: &str) -> String {
        let claims = self.claims(sub, audience, scope);
        self.shared.lock().mint_access_token(claims)
    }

    /// A valid access-token claim set for `sub` (iss, sub, aud, scope, iat, nbf, exp, jti,
    /// client_id, name, email, groups), for a test to change a claim of and [`FakeIdp::sign`].
    /// Panics if the user was not added.
    pub fn claims(&self, sub: &str, audience: &str, scope: &str) -> Value {
        let inner = self.shared.lock();
        let user = inner
            .users
            .get(sub)
            .unwrap_or_else(|| panic!("fake IdP: add_user({sub:?}) before asking for its claims"));
        inner.access_claims(user, audience, scope, DIRECT_CLIENT_ID)
    }

    /// `claims` as a compact JWT made by `signer`; `header_kid` replaces the `kid` it would
    /// carry. Nothing is recorded: `/introspect` does not know the result.
    pub fn sign(&self, signer: Signer, header_kid: Option<&str>, claims: Value) -> String {
        self.shared.lock().keys.sign(signer, header_kid, &claims)
    }

    /// The JWK Set `/protocol/openid-connect/certs` serves (not counted as a fetch).
    pub fn jwks(&self) -> Value {
        self.shared.lock().keys.jwks()
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> IdpStats {
        self.shared.lock().stats.clone()
    }

    /// From now on token exchanges are refused with the RFC 6749 5.2 `error` given, or (`None`)
    /// granted again.
    pub fn refuse_exchanges(&self, error: Option<&'static str>) {
        self.shared.lock().exchange_refusal = error;
    }

    /// From now on granted token exchanges answer wrongly as `misbehaviour` says, or (`None`)
    /// rightly again.
    pub fn misbehave_in_exchanges(&self, misbehaviour: Option<ExchangeMisbehaviour>) {
        self.shared.lock().exchange_misbehaviour = misbehaviour;
    }

    /// The decoded form fields of the latest `/token` request, valid or not.
    pub fn last_token_request(&self) -> Option<Vec<(String, String)>> {
        self.shared.lock().last_token_request.clone()
    }
}

type Shared = Locked<Inner>;

struct Inner {
    issuer: String,
    options: FakeIdpOptions,
    users: HashMap<String, TestUser>,
    signed_in: Option<String>,
    clients: HashMap<String, TestClient>,
    keys: keys::KeyRing,
    jwks_fault: Option<JwksFault>,
    codes: HashMap<String, CodeRecord>,
    /// The claims of every access token issued (JWT or opaque), for `/introspect` and `/userinfo`.
    access_tokens: HashMap<String, Value>,
    refresh_tokens: HashMap<String, RefreshRecord>,
    stats: IdpStats,
    last_token_request: Option<Vec<(String, String)>>,
    /// The `error` token exchanges are refused with, while set.
    exchange_refusal: Option<&'static str>,
    exchange_misbehaviour: Option<ExchangeMisbehaviour>,
    /// Rewrites the claims of every id_token before it is signed, while set.
    id_token_tampering: Option<ClaimsTamper>,
}

/// How a granted token exchange answers wrongly ([`FakeIdp::misbehave_in_exchanges`]).
#[derive(Debug, Clone)]
pub enum ExchangeMisbehaviour {
    /// The subject token comes back as the issued one.
    EchoSubject,
    /// The issued token's `aud` is this, not the audience asked for.
    Audience(Value),
    /// The answer's `issued_token_type` is this.
    IssuedTokenType(&'static str),
    /// The answer's `token_type` is this.
    TokenType(&'static str),
}

/// What the user consented to at `/authorize`; every token of the grant descends from it.
#[derive(Clone)]
struct Grant {
    client_id: String,
    user: TestUser,
    scope: String,
    resource: Option<String>,
    nonce: Option<String>,
    /// When the user signed in (unix seconds), the id_token's `auth_time`.
    auth_time: u64,
}

struct CodeRecord {
    grant: Grant,
    redirect_uri: String,
    code_challenge: String,
    issued_at: Instant,
    used: bool,
}

struct RefreshRecord {
    grant: Grant,
    used: bool,
}

impl Inner {
    /// An access token's claims.
    fn access_claims(&self, user: &TestUser, audience: &str, scope: &str, client_id: &str) -> Value {
        let now = unix_seconds();
        json!({
            "iss": self.issuer,
            "sub": user.sub,
            "aud": audience,
            "scope": scope,
            "iat": now,
            "nbf": now,
            "exp": now + self.options.access_token_lifetime.as_secs(),
            "jti": random_token("jti_"),
            "client_id": client_id,
            "name": user.name,
            "email": user.email,
            "groups": user.groups,
        })
    }

    /// An access token carrying `claims`, remembered for `/introspect` and `/userinfo`.
    fn mint_access_token(&mut self, claims: Value) -> String {
        let token = if self.options.opaque_access_tokens {
            random_token("at_")
        } else {
            self.keys.sign(Signer::Current, None, &claims)
        };
        self.access_tokens.insert(token.clone(), claims);
        token
    }

    /// The `/token` answer for `grant`: an access token for `scope` (within the grant's), a new
    /// refresh token for the whole grant, and an id_token (carrying `nonce`) when `scope` has
    /// `openid`.
    fn issue(&mut self, grant: &Grant, scope: &str, nonce: Option<&str>) -> Vec<(&'static str, Value)> {
        let audience = grant
            .resource
            .clone()
            .or_else(|| self.options.default_audience.clone())
            .unwrap_or_else(|| grant.client_id.clone());
        let claims = self.access_claims(&grant.user, &audience, scope, &grant.client_id);
        let access_token = self.mint_access_token(claims);
        let refresh_token = random_token("rt_");
        self.refresh_tokens.insert(
            refresh_token.clone(),
            RefreshRecord {
                grant: grant.clone(),
                used: false,
            },
        );
        let mut fields = vec![
            ("access_token", json!(access_token)),
            ("token_type", json!("Bearer")),
            ("expires_in", json!(self.options.access_token_lifetime.as_secs())),
            ("scope", json!(scope)),
            ("refresh_token", json!(refresh_token)),
        ];
        if scope.split(' ').any(|s| s == "openid") {
            let now = unix_seconds();
            let mut claims = json!({
                "iss": self.issuer,
                "sub": grant.user.sub,
                "aud": grant.client_id,
                "iat": now,
                "exp": now + self.options.access_token_lifetime.as_secs(),
                "auth_time": grant.auth_time,
                "name": grant.user.name,
                "email": grant.user.email,
                "groups": grant.user.groups,
            });
            if let Some(nonce) = nonce {
                claims["nonce"] = json!(nonce);
            }
            if let Some(tamper) = self.id_token_tampering {
                tamper(&mut claims);
            }
            fields.push(("id_token", json!(self.keys.sign(Signer::Current, None, &claims))));
        }
        fields
    }

    /// The claims of an access token this provider issued and that has not expired.
    fn live_access_token(&self, token: &str) -> Option<&Value> {
        let now = unix_seconds();
        self.access_tokens
            .get(token)
            .filter(|claims| claims["exp"].as_u64().is_some_and(|exp| now < exp))
    }
}
