//! Who is calling. The principal comes only from the configured identity mode, never from what a
//! client says about itself: `local` (the one user at this machine), `header` (a trusted reverse
//! proxy's header) or `oauth` (a bearer token from the identity provider, see `oauth`), written in
//! the mode's normal form (`PrincipalForm`) as it enters. Besides the principal, a caller carries
//! claims (groups, email, name, and the principal itself) that `access` rules read.

pub mod access;
mod claims;
pub mod oauth;
pub mod oidc;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::http::{HeaderMap, HeaderName};
use ipnet::IpNet;

use crate::config::{Config, ConfigError, IdentityMode};
use crate::domain::{InvalidPrincipal, Principal};
use crate::secret::Secret;
pub use claims::Claims;

#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    #[error("request did not come through a trusted proxy")]
    UntrustedPeer,
    #[error("the identity header {0} is missing")]
    MissingHeader(HeaderName),
    #[error("the identity header {0} is repeated")]
    RepeatedHeader(HeaderName),
    #[error("the identity header {0} is not UTF-8")]
    NotUtf8(HeaderName),
    #[error("the identity header is not valid: {0}")]
    InvalidHeader(InvalidPrincipal),
    #[error(transparent)]
    Bearer(#[from] oauth::BearerError),
}

/// A request's user: the principal everything is bound to, and the claims `allow` rules read.
#[derive(Debug, Clone)]
pub struct Caller {
    pub principal: Principal,
    pub claims: Arc<Claims>,
    /// Where the request came from, after trusted proxies (set by the transport, for the audit
    /// trail).
    pub address: Option<IpAddr>,
    /// `oauth` mode: the verified access token the request carried, for upstreams with
    /// `auth = "token_exchange"` to exchange; never forwarded itself.
    pub access_token: Option<Secret<String>>,
    /// `oauth` mode: the OAuth client the token was issued to (its `client_id` claim, RFC 9068,
    /// else `azp`), bounded; what is bound to the caller (an approval) is bound to it too.
    pub client: Option<String>,
}

impl Caller {
    /// A caller with its identity's claims, and `principal` among them: rules name the
    /// principal as they name any claim.
    pub fn new(principal: Principal, claims: Claims) -> Self {
        Self {
            claims: Arc::new(claims.with_principal(&principal)),
            principal,
            address: None,
            access_token: None,
            client: None,
        }
    }

    /// A caller known by name only (local mode, tests).
    pub fn named(principal: Principal) -> Self {
        Self::new(principal, Claims::default())
    }
}

pub enum Identity {
    Local(Principal),
    Header(HeaderIdentity),
    OAuth(Box<oauth::ResourceServer>),
}

/// `header` mode: the principal (and optionally groups and email) from a trusted proxy's headers.
pub struct HeaderIdentity {
    header: HeaderName,
    groups_header: Option<HeaderName>,
    email_header: Option<HeaderName>,
    trusted_proxies: Vec<IpNet>,
}

fn header_name(key: &str, name: &str) -> Result<HeaderName, ConfigError> {
    HeaderName::try_from(name).map_err(|e| ConfigError::key(key, e.to_string()))
}

impl Identity {
    /// Config validation has already checked the header names, the local principal and the issuer.
    /// `http` is the outbound client `oauth` mode fetches the provider's metadata and keys with.
    pub fn from_config(config: &Config, http: reqwest::Client) -> Result<Self, ConfigError> {
        let identity = &config.identity;
        match identity.mode {
            IdentityMode::Local => IdentityMode::Local
                .principal_form()
                .principal(&identity.local_principal)
                .map(Identity::Local)
                .map_err(|e| ConfigError::key("identity.local_principal", e.to_string())),
            IdentityMode::Header => Ok(Identity::Header(HeaderIdentity {
                header: header_name("identity.header", &identity.header)?,
                groups_header: identity
                    .groups_header
                    .as_deref()
                    .map(|name| header_name("identity.groups_header", name))
                    .transpose()?,
                email_header: identity
                    .email_header
                    .as_deref()
                    .map(|name| header_name("identity.email_header", name))
                    .transpose()?,
                trusted_proxies: config.server.trusted_proxies.clone(),
            })),
            IdentityMode::OAuth => {
                oauth::ResourceServer::from_config(config, http).map(|server| Identity::OAuth(Box::new(server)))
            }
        }
    }

    /// The caller behind an MCP request that arrived from `peer`.
    pub async fn caller(&self, headers: &HeaderMap, peer: SocketAddr) -> Result<Caller, IdentityError> {
        match self {
            Identity::Local(principal) => Ok(Caller::named(principal.clone())),
            Identity::Header(header) => header.caller(headers, peer),
            Identity::OAuth(server) => Ok(server.caller(headers).await?),
        }
    }

    /// The resource server, in `oauth` mode.
    pub fn resource_server(&self) -> Option<&oauth::ResourceServer> {
        match self {
            Identity::OAuth(server) => Some(server),
            _ => None,
        }
    }
}

impl HeaderIdentity {
    fn caller(&self, headers: &HeaderMap, peer: SocketAddr) -> Result<Caller, IdentityError> {
        if !is_trusted(&self.trusted_proxies, peer.ip()) {
            return Err(IdentityError::UntrustedPeer);
        }
        let principal = IdentityMode::Header
            .principal_form()
            .principal(
                single_header(headers, &self.header)?
                    .ok_or_else(|| IdentityError::MissingHeader(self.header.clone()))?,
            )
            .map_err(IdentityError::InvalidHeader)?;
        let mut claims = Claims::default();
        if let Some(name) = &self.groups_header
            && let Some(groups) = single_header(headers, name)?
        {
            claims.insert("groups", groups.split(',').map(str::trim).filter(|g| !g.is_empty()));
        }
        if let Some(name) = &self.email_header
            && let Some(email) = single_header(headers, name)?
        {
            claims.insert("email", std::iter::once(email.trim()));
        }
        Ok(Caller::new(principal, claims))
    }
}

/// A header the proxy sets, as UTF-8. A proxy that appends its header instead of replacing it
/// leaves the client's own value in front of it, so a second occurrence is refused, never resolved.
fn single_header<'h>(headers: &'h HeaderMap, name: &HeaderName) -> Result<Option<&'h str>, IdentityError> {
    let mut values = headers.get_all(name).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(IdentityError::RepeatedHeader(name.clone()));
    }
    // `HeaderValue::to_str` accepts visible ASCII only; proxies send names as UTF-8.
    std::str::from_utf8(value.as_bytes())
        .map(Some)
        .map_err(|_| IdentityError::NotUtf8(name.clone()))
}

/// The client's address: the peer's, or when the peer is a trusted proxy, the nearest address
/// in `X-Forwarded-For` that is not one (each proxy appends the address it was reached from, so
/// only the hops after the last untrusted one are believed). An entry that is not an address
/// stops the walk at the hop that sent it.
pub fn client_address(trusted: &[IpNet], headers: &HeaderMap, peer: SocketAddr) -> IpAddr {
    let mut address = peer.ip();
    if !is_trusted(trusted, address) {
        return address;
    }
    let hops = headers
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .map(str::trim)
        .collect::<Vec<_>>();
    for hop in hops.into_iter().rev() {
        let Ok(hop) = hop.parse::<IpAddr>() else {
            return address;
        };
        address = hop;
        if !is_trusted(trusted, hop) {
            return hop;
        }
    }
    address
}

fn is_trusted(trusted: &[IpNet], ip: IpAddr) -> bool {
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(IpAddr::V6(v6)),
        v4 => v4,
    };
    trusted.iter().any(|net| net.contains(&ip))
}

#[cfg(test)]
mod tests;
