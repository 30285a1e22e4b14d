//! A fake remote MCP server protected by OAuth, with its own authorization server, for testing
//! gatehouse as an MCP-authorization client (`auth = "mcp"` upstreams): real HTTP on
//! `127.0.0.1:<random port>`, strict about what a client sends, switchable mid-test and
//! inspectable afterwards.
//!
//! The resource server, relative to [`FakeMcpAuth::base_url`] (see `resource`):
//!
//! * `POST /mcp` — a minimal stateless MCP server answering JSON (tools `whoami` and `admin_only`)
//!   behind `Authorization: Bearer`; 401 with a `resource_metadata` challenge without a valid token
//!   for `{base}/mcp`, 403 `insufficient_scope` for `admin_only` without the `admin` scope.
//! * `GET /.well-known/oauth-protected-resource/mcp` and `/.well-known/oauth-protected-resource` —
//!   Protected Resource Metadata (RFC 9728).
//!
//! The authorization server, under [`FakeMcpAuth::issuer`] (the same origin, or a second listener
//! with [`FakeMcpAuthSetup::separate_authorization_server`]; see `authorize` and `token`):
//!
//! * `/.well-known/oauth-authorization-server{issuer path}` (RFC 8414) and
//!   `{issuer}/.well-known/openid-configuration`, each switchable.
//! * `GET {issuer}/authorize` — code flow with PKCE S256, `state` and `resource` (RFC 8707) required,
//!   `iss` in the redirect (RFC 9207); clients registered, pre-registered or, when switched on,
//!   Client ID Metadata Documents fetched from their URL. Nobody signs in: the account set by
//!   [`FakeMcpAuth::set_next_user`] approves at once.
//! * `POST {issuer}/register` (RFC 7591), `POST {issuer}/token` (authorization_code and rotating
//!   refresh_token grants), `POST {issuer}/revoke` (RFC 7009).
//!
//! All state sits behind one `Arc<Mutex<..>>`; [`FakeMcpAuth`] is a cheap, cloneable handle to it.
//! The server tasks stop when the last handle is dropped. Malformed requests get 400s (or 401s),
//! never panics.

// Files beside this one, named by path like the other fakes' (the benchmark includes fakes by path).
#[path = "fake_mcp_auth/authorize.rs"]
mod authorize;
#[path = "fake_mcp_auth/resource.rs"]
mod resource;
#[path = "fake_mcp_auth/token.rs"]
mod token;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};

pub use super::fake_oauth::AuthorizeOutcome;
use super::fake_oauth::{Locked, ServerTask, bind_local, random_token};

/// [`bind_local`] on any address.
async fn bind_on(host: std::net::IpAddr, fake: &str) -> (tokio::net::TcpListener, u16) {
    if host.is_loopback() {
        return bind_local(fake).await;
    }
    let listener = tokio::net::TcpListener::bind((host, 0))
        .await
        .unwrap_or_else(|error| panic!("{fake}: bind {host}:0: {error}"));
    let port = listener
        .local_addr()
        .unwrap_or_else(|error| panic!("{fake}: local address: {error}"))
        .port();
    (listener, port)
}

/// The `iss` a [`IssMode::Wrong`] redirect carries.
pub const WRONG_ISSUER: &str = "http://wrong-issuer.example";
/// The redirect URI a [`RegisterAnswer::AttackerRedirectUris`] registration answer carries.
pub const ATTACKER_REDIRECT_URI: &str = "https://attacker.example/cb";
/// Where a [`RegisterAnswer::RedirectElsewhere`] registration answer points.
pub const ATTACKER_REGISTER_URL: &str = "https://attacker.example/register";

/// Where the servers listen; fixed at [`FakeMcpAuth::start_with`].
#[derive(Debug, Clone, Default)]
pub struct FakeMcpAuthSetup {
    /// Serve the authorization server on a second listener (another origin) instead of beside the
    /// MCP endpoint.
    pub separate_authorization_server: bool,
    /// The issuer's path under the authorization server's origin: empty (the default), or starting
    /// with `/` and not ending with one. Its endpoints live under it; the RFC 8414 metadata sits
    /// at `/.well-known/oauth-authorization-server{issuer_path}`.
    pub issuer_path: String,
    /// The address the MCP endpoint (and a separate authorization server) listens on; 127.0.0.1
    /// when None.
    pub host: Option<std::net::IpAddr>,
}

/// What `iss` the authorization redirect carries (RFC 9207).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IssMode {
    /// The issuer.
    #[default]
    Correct,
    /// [`WRONG_ISSUER`].
    Wrong,
    /// No `iss` at all.
    Omitted,
}

/// How `POST /register` answers a valid request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RegisterAnswer {
    /// 201 with the client's metadata echoed.
    #[default]
    Honest,
    /// 201, the client registered, but the answer's (and the registration's) `redirect_uris` are
    /// `[ATTACKER_REDIRECT_URI]`.
    AttackerRedirectUris,
    /// 302 to [`ATTACKER_REGISTER_URL`], nothing registered.
    RedirectElsewhere,
}

/// A malicious authorization server's move (mix-up, RFC 9700 4.4.1): `/authorize` records the
/// request and sends the browser on to another server's authorization endpoint, with the
/// request's `state`, PKCE challenge and scope, asking for that server's own `resource`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MixUp {
    /// The honest server's authorization endpoint.
    pub authorize_url: String,
    /// The `resource` to ask it for: its own MCP server.
    pub resource: String,
    /// The `client_id` to name there; None: the one the request carried.
    pub client_id: Option<String>,
    /// The `redirect_uri` to name there; None: the one the request carried.
    pub redirect_uri: Option<String>,
}

/// Behaviour of the fake; change it mid-test with [`FakeMcpAuth::set_options`].
#[derive(Debug, Clone)]
pub struct McpAuthOptions {
    /// The `scope` of the 401 challenge at `/mcp` (omitted when empty). Default `["mcp"]`.
    pub challenge_scopes: Vec<String>,
    /// `resource_metadata` in the 401 challenge: `None` = `{base}/.well-known/oauth-protected-resource/mcp`.
    pub resource_metadata_url: Option<String>,
    /// Put `resource_metadata` in the 401 challenge at all (else clients must probe well-known URLs).
    pub resource_metadata_in_challenge: bool,
    /// Serve PRM at `/.well-known/oauth-protected-resource/mcp` (else 404).
    pub prm_at_path: bool,
    /// Serve PRM at `/.well-known/oauth-protected-resource` (else 404).
    pub prm_at_root: bool,
    /// Fields set over the PRM document (`resource`, `authorization_servers`, ...); a `null` removes
    /// the field.
    pub prm_overrides: Map<String, Value>,
    /// `scopes_supported` of the PRM and the AS metadata. Default `["mcp", "admin"]`.
    pub scopes_supported: Vec<String>,
    /// Serve RFC 8414 metadata.
    pub rfc8414: bool,
    /// Serve OpenID discovery (the same document).
    pub openid_configuration: bool,
    /// Advertise `registration_endpoint` (`/register` answers 404 without it).
    pub registration_endpoint: bool,
    /// Advertise `client_id_metadata_document_supported: true` and accept URL client ids.
    pub cimd_supported: bool,
    /// `token_endpoint_auth_methods_supported`. Default basic, post and none.
    pub token_endpoint_auth_methods: Vec<String>,
    /// Fields set over the AS metadata document; a `null` removes the field.
    pub as_metadata_overrides: Map<String, Value>,
    /// What the next valid `/authorize` does.
    pub authorize_outcome: AuthorizeOutcome,
    /// What `iss` the authorization redirect carries.
    pub iss: IssMode,
    /// When `Some`, grant these scopes instead of the requested ones.
    pub granted_scopes: Option<Vec<String>>,
    /// How `/register` answers.
    pub register_answer: RegisterAnswer,
    /// `expires_in` of new access tokens; `None` = they never expire (and `expires_in` is omitted).
    pub access_token_ttl: Option<u64>,
    /// Issue refresh tokens (which rotate on use).
    pub refresh_tokens: bool,
    /// The next `/token` request answers 401 `invalid_client` whatever it carries (one-shot: reset
    /// once used).
    pub next_token_invalid_client: bool,
    /// When set, `/authorize` forwards the browser elsewhere instead of answering.
    pub mix_up: Option<MixUp>,
}

impl Default for McpAuthOptions {
    fn default() -> Self {
        McpAuthOptions {
            challenge_scopes: vec!["mcp".to_owned()],
            resource_metadata_url: None,
            resource_metadata_in_challenge: true,
            prm_at_path: true,
            prm_at_root: true,
            prm_overrides: Map::new(),
            scopes_supported: vec!["mcp".to_owned(), "admin".to_owned()],
            rfc8414: true,
            openid_configuration: true,
            registration_endpoint: true,
            cimd_supported: false,
            token_endpoint_auth_methods: token::AUTH_METHODS.iter().map(|m| (*m).to_owned()).collect(),
            as_metadata_overrides: Map::new(),
            authorize_outcome: AuthorizeOutcome::Approve,
            iss: IssMode::Correct,
            granted_scopes: None,
            register_answer: RegisterAnswer::Honest,
            access_token_ttl: Some(3600),
            refresh_tokens: true,
            next_token_invalid_client: false,
            mix_up: None,
        }
    }
}

/// One `/token` request, valid or not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenRequest {
    /// `grant_type` (empty when absent).
    pub grant_type: String,
    /// The decoded form body, in order.
    pub params: Vec<(String, String)>,
    /// The client id of an `Authorization: Basic` header, if any.
    pub basic_client_id: Option<String>,
}

impl TokenRequest {
    /// A form parameter's value.
    pub fn param(&self, name: &str) -> Option<&str> {
        find(&self.params, name)
    }
}

/// The value of `name` among decoded pairs.
pub fn find<'a>(pairs: &'a [(String, String)], name: &str) -> Option<&'a str> {
    pairs
        .iter()
        .find(|(key, _)| key == name)
        .map(|(_, value)| value.as_str())
}

/// Counters and observations; a snapshot from [`FakeMcpAuth::stats`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct McpAuthStats {
    /// Paths of the well-known documents asked for (PRM and AS metadata, served or 404), in order.
    pub discovery_requests: Vec<String>,
    /// The JSON body of every `/register` request (`null` when not JSON), in order.
    pub registrations: Vec<Value>,
    /// Every Client ID Metadata Document URL fetched, in order.
    pub cimd_fetches: Vec<String>,
    /// The decoded query of every `/authorize` request, valid or not, in order.
    pub authorize_requests: Vec<Vec<(String, String)>>,
    /// Every `/token` request, in order.
    pub token_requests: Vec<TokenRequest>,
    /// Every bearer token presented at `/mcp`, valid or not, in order.
    pub mcp_bearer_tokens: Vec<String>,
    /// The JSON-RPC method of every authorized `/mcp` request, in order.
    pub mcp_methods: Vec<String>,
    /// Every token posted to `/revoke` by an authenticated client, in order.
    pub revoked_tokens: Vec<String>,
    /// Every access token issued, in order.
    pub issued_access_tokens: Vec<String>,
    /// Every refresh token issued, in order.
    pub issued_refresh_tokens: Vec<String>,
    /// Every authorization code issued, in order.
    pub issued_codes: Vec<String>,
}

/// A client the authorization server knows (registered, or pre-registered by the test).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegisteredClient {
    pub client_id: String,
    /// `None` for a public client (`token_endpoint_auth_method` `none`).
    pub client_secret: Option<String>,
    pub redirect_uris: Vec<String>,
    /// `client_secret_basic`, `client_secret_post` or `none`.
    pub token_endpoint_auth_method: String,
}

/// Handle to a running fake. Clones share the same servers and state.
#[derive(Clone)]
pub struct FakeMcpAuth {
    base_url: String,
    issuer: String,
    shared: Shared,
    _servers: Vec<Arc<ServerTask>>,
}

impl FakeMcpAuth {
    /// Both roles on one origin, issuer at its root.
    pub async fn start() -> FakeMcpAuth {
        Self::start_with(FakeMcpAuthSetup::default()).await
    }

    /// Binds `127.0.0.1:0` (twice with a separate authorization server) and serves the fake until
    /// the last handle is dropped.
    pub async fn start_with(setup: FakeMcpAuthSetup) -> FakeMcpAuth {
        let path = &setup.issuer_path;
        assert!(
            path.is_empty() || (path.starts_with('/') && !path.ends_with('/')),
            "issuer_path {path:?}: empty, or starting with / and not ending with one"
        );
        let host = setup
            .host
            .unwrap_or(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST));
        let (listener, port) = bind_on(host, "fake MCP server").await;
        let base_url = format!("http://{}", std::net::SocketAddr::from((host, port)));
        let second = if setup.separate_authorization_server {
            Some(bind_on(host, "fake MCP authorization server").await)
        } else {
            None
        };
        let as_origin = second.as_ref().map_or_else(
            || base_url.clone(),
            |(_, port)| format!("http://{}", std::net::SocketAddr::from((host, *port))),
        );
        let issuer = format!("{as_origin}{path}");
        let shared = Shared::new(Inner {
            base_url: base_url.clone(),
            issuer: issuer.clone(),
            options: McpAuthOptions::default(),
            next_user: "alice".to_owned(),
            clients: HashMap::new(),
            cimd_clients: HashSet::new(),
            codes: HashMap::new(),
            access_tokens: HashMap::new(),
            refresh_tokens: HashMap::new(),
            stats: McpAuthStats::default(),
        });
        let resource_routes = resource::router(shared.clone());
        let as_routes = authorize::router(path, shared.clone()).merge(token::router(path, shared.clone()));
        let servers = match second {
            None => vec![ServerTask::spawn(listener, resource_routes.merge(as_routes))],
            Some((as_listener, _)) => vec![
                ServerTask::spawn(listener, resource_routes),
                ServerTask::spawn(as_listener, as_routes),
            ],
        };
        FakeMcpAuth {
            base_url,
            issuer,
            shared,
            _servers: servers,
        }
    }

    /// The resource server's origin, `http://127.0.0.1:PORT`, without a trailing slash.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// The MCP endpoint and the resource tokens must be issued for: `{base_url}/mcp`.
    pub fn mcp_url(&self) -> String {
        format!("{}/mcp", self.base_url)
    }

    /// The authorization server's issuer: its origin (the base URL unless separate) and issuer path.
    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    /// The PRM URL the 401 challenge names by default.
    pub fn resource_metadata_url(&self) -> String {
        format!("{}/.well-known/oauth-protected-resource/mcp", self.base_url)
    }

    /// The account that approves from the next `/authorize` on (default `"alice"`).
    pub fn set_next_user(&self, user: &str) {
        self.shared.lock().next_user = user.to_owned();
    }

    /// Changes behaviour mid-test. Tokens and codes already issued keep what they were issued with.
    pub fn set_options(&self, f: impl FnOnce(&mut McpAuthOptions)) {
        f(&mut self.shared.lock().options);
    }

    /// A copy of the current options.
    pub fn options(&self) -> McpAuthOptions {
        self.shared.lock().options.clone()
    }

    /// A snapshot of the counters and observations.
    pub fn stats(&self) -> McpAuthStats {
        self.shared.lock().stats.clone()
    }

    /// Registers a client as an administrator would (for a configured `client_id`): a secret
    /// unless `auth_method` is `none`.
    pub fn register_client(&self, redirect_uris: &[&str], auth_method: &str) -> RegisteredClient {
        assert!(
            token::AUTH_METHODS.contains(&auth_method),
            "unknown token_endpoint_auth_method {auth_method:?}"
        );
        let client = RegisteredClient {
            client_id: random_token("client_"),
            client_secret: (auth_method != "none").then(|| random_token("secret_")),
            redirect_uris: redirect_uris.iter().map(|uri| (*uri).to_owned()).collect(),
            token_endpoint_auth_method: auth_method.to_owned(),
        };
        self.shared
            .lock()
            .clients
            .insert(client.client_id.clone(), client.clone());
        client
    }

    /// The clients known now (registered or pre-registered; not CIMD clients).
    pub fn clients(&self) -> Vec<RegisteredClient> {
        self.shared.lock().clients.values().cloned().collect()
    }

    /// Forgets every client, CIMD clients included: stored registrations now get `invalid_client`
    /// at `/token` and 400 at `/authorize`.
    pub fn forget_clients(&self) {
        let mut inner = self.shared.lock();
        inner.clients.clear();
        inner.cimd_clients.clear();
    }

    /// An access token for `user` as if `client_id` had gone through the flow for `resource` with
    /// `scopes` (no refresh token; [`McpAuthOptions::access_token_ttl`] applies).
    pub fn issue_token(&self, user: &str, client_id: &str, resource: &str, scopes: &[&str]) -> String {
        let grant = Grant {
            user: user.to_owned(),
            client_id: client_id.to_owned(),
            resource: resource.to_owned(),
            scopes: scopes.iter().map(|s| (*s).to_owned()).collect(),
        };
        let mut inner = self.shared.lock();
        let (access_token, _) = inner.issue(&grant, false);
        access_token
    }

    /// Every access token issued so far expires now; refresh tokens keep working.
    pub fn expire_all_access_tokens(&self) {
        let now = Instant::now();
        for token in self.shared.lock().access_tokens.values_mut() {
            token.expires_at = Some(now);
        }
    }

    /// Revokes every access and refresh token issued so far.
    pub fn revoke_all_tokens(&self) {
        let mut inner = self.shared.lock();
        inner.access_tokens.values_mut().for_each(|t| t.revoked = true);
        inner.refresh_tokens.values_mut().for_each(|t| t.revoked = true);
    }
}

type Shared = Locked<Inner>;

struct Inner {
    base_url: String,
    issuer: String,
    options: McpAuthOptions,
    next_user: String,
    clients: HashMap<String, RegisteredClient>,
    /// Client ID Metadata Document URLs that passed validation at `/authorize`: public clients.
    cimd_clients: HashSet<String>,
    codes: HashMap<String, CodeRecord>,
    access_tokens: HashMap<String, AccessRecord>,
    refresh_tokens: HashMap<String, RefreshRecord>,
    stats: McpAuthStats,
}

/// Who a token was issued to, for what.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Grant {
    user: String,
    client_id: String,
    resource: String,
    scopes: Vec<String>,
}

struct CodeRecord {
    grant: Grant,
    redirect_uri: String,
    code_challenge: String,
    issued_at: Instant,
    used: bool,
}

struct AccessRecord {
    grant: Grant,
    expires_at: Option<Instant>,
    revoked: bool,
}

struct RefreshRecord {
    grant: Grant,
    revoked: bool,
}

impl Inner {
    /// The resource tokens must be issued for.
    fn resource(&self) -> String {
        format!("{}/mcp", self.base_url)
    }

    /// A live access token's grant.
    fn live_access(&self, token: &str) -> Option<&Grant> {
        let record = self.access_tokens.get(token)?;
        let live = !record.revoked && record.expires_at.is_none_or(|at| Instant::now() < at);
        live.then_some(&record.grant)
    }

    /// Issues an access token (and a refresh token when asked and switched on) for `grant`.
    fn issue(&mut self, grant: &Grant, with_refresh: bool) -> (String, Option<String>) {
        let access_token = random_token("mcp_at_");
        let ttl = self.options.access_token_ttl;
        self.access_tokens.insert(
            access_token.clone(),
            AccessRecord {
                grant: grant.clone(),
                expires_at: ttl.map(|secs| Instant::now() + Duration::from_secs(secs)),
                revoked: false,
            },
        );
        self.stats.issued_access_tokens.push(access_token.clone());
        let refresh_token = (with_refresh && self.options.refresh_tokens).then(|| {
            let refresh_token = random_token("mcp_rt_");
            self.refresh_tokens.insert(
                refresh_token.clone(),
                RefreshRecord {
                    grant: grant.clone(),
                    revoked: false,
                },
            );
            self.stats.issued_refresh_tokens.push(refresh_token.clone());
            refresh_token
        });
        (access_token, refresh_token)
    }

    /// The token response for a grant.
    fn token_response(&mut self, grant: &Grant) -> Value {
        let (access_token, refresh_token) = self.issue(grant, true);
        let mut body = json!({
            "access_token": access_token,
            "token_type": "Bearer",
            "scope": grant.scopes.join(" "),
        });
        if let Some(secs) = self.options.access_token_ttl {
            body["expires_in"] = json!(secs);
        }
        if let Some(refresh_token) = refresh_token {
            body["refresh_token"] = json!(refresh_token);
        }
        body
    }
}

/// `base` with `overrides` set over it; a `null` override removes the field.
fn overridden(mut base: Map<String, Value>, overrides: &Map<String, Value>) -> Value {
    for (key, value) in overrides {
        if value.is_null() {
            base.remove(key);
        } else {
            base.insert(key.clone(), value.clone());
        }
    }
    Value::Object(base)
}
