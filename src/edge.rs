//! The HTTP edge: what a request to the MCP endpoint or to the pages is checked for before a
//! handler acts on it, as typed extractors both use. The peer (`Peer`), the client's address
//! after trusted proxies (`ClientAddress`), a `Host` naming this server (`KnownHost`), an allowed
//! `Origin` (`AllowedOrigin` for every request, `AllowedPostOrigin` for those that change
//! something), the caller by the identity mode (`Identified`) and a reachable database
//! (`DatabaseUp`). Each router state says, through [`Edge`], how it words a refusal: the endpoint
//! as a JSON-RPC error, the pages as a notice page.

use std::net::{IpAddr, SocketAddr};

use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::HeaderMap;
use axum::http::header::{HOST, ORIGIN};
use axum::http::request::Parts;
use axum::response::IntoResponse;
use url::Url;

use crate::identity::{Caller, IdentityError};
use crate::state::AppState;

/// The `Retry-After` (seconds) of a 503 answered because the database cannot be reached.
pub const RETRY_AFTER_SECONDS: &str = "1";

/// A router state the edge checks requests against: the shared state, and how this router
/// answers a request the edge refuses.
pub trait Edge: Send + Sync {
    type Refusal: IntoResponse + Send;

    fn app(&self) -> &AppState;

    /// The answer to a request refused for `refused` (`parts` are the request's).
    fn refuse(&self, refused: Refused, parts: &Parts) -> Self::Refusal;
}

/// Why the edge refused a request.
#[derive(Debug)]
pub enum Refused {
    /// Not served by `gatehouse::serve`, which puts the peer on every request: a bug.
    NoPeer,
    /// An `Origin` that is neither ours nor a configured one.
    ForeignOrigin(String),
    /// On a loopback-bound instance, a `Host` that is not this server's name (DNS rebinding).
    ForeignHost(String),
    /// The identity mode could not tell who is calling.
    Unidentified { error: IdentityError, peer: SocketAddr },
    /// The bus finds the database unreachable: refused at once instead of each request waiting
    /// for a database connection.
    DatabaseDown,
}

/// The peer's address, which `gatehouse::serve` puts on every request.
pub struct Peer(pub SocketAddr);

impl<S: Edge> FromRequestParts<S> for Peer {
    type Rejection = S::Refusal;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        peer(parts).map(Peer).map_err(|refused| state.refuse(refused, parts))
    }
}

fn peer(parts: &Parts) -> Result<SocketAddr, Refused> {
    parts
        .extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(peer)| *peer)
        .ok_or(Refused::NoPeer)
}

/// The client's address, after trusted proxies.
pub struct ClientAddress(pub IpAddr);

impl<S: Edge> FromRequestParts<S> for ClientAddress {
    type Rejection = S::Refusal;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let Peer(peer) = Peer::from_request_parts(parts, state).await?;
        Ok(Self(client_address(state.app(), &parts.headers, peer)))
    }
}

/// The client's address behind `peer`, after trusted proxies.
pub fn client_address(app: &AppState, headers: &HeaderMap, peer: SocketAddr) -> IpAddr {
    crate::identity::client_address(&app.config.server.trusted_proxies, headers, peer)
}

/// On a loopback-bound instance, a `Host` naming this server: a DNS name rebound to 127.0.0.1
/// must not let another site's page reach a local server.
pub struct KnownHost;

impl<S: Edge> FromRequestParts<S> for KnownHost {
    type Rejection = S::Refusal;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let app = state.app();
        if bound_to_loopback(app) {
            let host = parts.headers.get(HOST).and_then(|h| h.to_str().ok()).unwrap_or("");
            if !host_allowed(app, host) {
                return Err(state.refuse(Refused::ForeignHost(host.to_owned()), parts));
            }
        }
        Ok(Self)
    }
}

/// An `Origin`, when the request carries one, that is allowed (see [`origin_allowed`]): a page
/// on another site must not reach a local server.
pub struct AllowedOrigin;

impl<S: Edge> FromRequestParts<S> for AllowedOrigin {
    type Rejection = S::Refusal;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        check_origin(state, parts).map(|()| Self)
    }
}

/// [`AllowedOrigin`] for a request that may change something (not GET, HEAD...): another site's
/// page may link to ours, not post to it.
pub struct AllowedPostOrigin;

impl<S: Edge> FromRequestParts<S> for AllowedPostOrigin {
    type Rejection = S::Refusal;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        if parts.method.is_safe() {
            return Ok(Self);
        }
        check_origin(state, parts).map(|()| Self)
    }
}

fn check_origin<S: Edge>(state: &S, parts: &Parts) -> Result<(), S::Refusal> {
    match parts.headers.get(ORIGIN) {
        Some(origin) => {
            let origin = origin.to_str().unwrap_or("");
            if origin_allowed(state.app(), origin) {
                Ok(())
            } else {
                Err(state.refuse(Refused::ForeignOrigin(origin.to_owned()), parts))
            }
        }
        None => Ok(()),
    }
}

/// The caller, by the identity mode, with the client's address.
pub struct Identified(pub Caller);

impl<S: Edge> FromRequestParts<S> for Identified {
    type Rejection = S::Refusal;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let Peer(peer) = Peer::from_request_parts(parts, state).await?;
        match caller(state.app(), &parts.headers, peer).await {
            Ok(caller) => Ok(Self(caller)),
            Err(error) => Err(state.refuse(Refused::Unidentified { error, peer }, parts)),
        }
    }
}

/// Who is calling from `peer`, by the identity mode, with the client's address.
pub async fn caller(app: &AppState, headers: &HeaderMap, peer: SocketAddr) -> Result<Caller, IdentityError> {
    let mut caller = app.identity.caller(headers, peer).await?;
    caller.address = Some(client_address(app, headers, peer));
    Ok(caller)
}

/// The database, as far as the bus knows, can be reached.
pub struct DatabaseUp;

impl<S: Edge> FromRequestParts<S> for DatabaseUp {
    type Rejection = S::Refusal;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        if state.app().bus.is_database_reachable() {
            Ok(Self)
        } else {
            Err(state.refuse(Refused::DatabaseDown, parts))
        }
    }
}

fn bound_to_loopback(app: &AppState) -> bool {
    app.config.server.bind.ip().is_loopback()
}

/// The public origin, the configured extra origins, and, when both the public origin and the
/// bound address are loopback, the same port under another loopback name (`localhost` for
/// `127.0.0.1`). One rule for `/mcp` and the pages' form posts.
fn origin_allowed(app: &AppState, origin: &str) -> bool {
    if origin == app.public_url.origin() || app.config.server.allowed_origins.iter().any(|o| o == origin) {
        return true;
    }
    let public_on_loopback =
        Url::parse(app.public_url.origin()).is_ok_and(|public| is_loopback_name(public.host_str().unwrap_or("")));
    public_on_loopback
        && bound_to_loopback(app)
        && Url::parse(origin).is_ok_and(|url| {
            url.path() == "/"
                && is_loopback_name(url.host_str().unwrap_or(""))
                && url.port_or_known_default() == Some(app.config.server.bind.port())
        })
}

/// A `Host` header naming this server: a loopback name, or the public host.
fn host_allowed(app: &AppState, host: &str) -> bool {
    if host.eq_ignore_ascii_case(app.public_url.host()) {
        return true;
    }
    let name = match host.strip_prefix('[') {
        Some(rest) => rest.split(']').next().map(|h| format!("[{h}]")).unwrap_or_default(),
        None => host.rsplit_once(':').map_or(host, |(h, _)| h).to_owned(),
    };
    is_loopback_name(&name)
}

fn is_loopback_name(host: &str) -> bool {
    let host = host.to_ascii_lowercase();
    host == "localhost"
        || host.ends_with(".localhost")
        || host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}
