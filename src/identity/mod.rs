//! Who is calling. The principal comes only from the configured identity mode, never from what a
//! client says about itself.

use std::net::{IpAddr, SocketAddr};

use axum::http::{HeaderMap, HeaderName};
use ipnet::IpNet;

use crate::config::{Config, IdentityMode};
use crate::domain::{InvalidPrincipal, Principal};

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
}

pub enum Identity {
    Local(Principal),
    Header {
        header: HeaderName,
        trusted_proxies: Vec<IpNet>,
    },
}

impl Identity {
    /// Config validation has already checked the header name and the local principal.
    pub fn from_config(config: &Config) -> Result<Self, crate::config::ConfigError> {
        match config.identity.mode {
            IdentityMode::Local => Principal::parse(&config.identity.local_principal)
                .map(Identity::Local)
                .map_err(|e| crate::config::ConfigError::key("identity.local_principal", e.to_string())),
            IdentityMode::Header => {
                let header = HeaderName::try_from(config.identity.header.as_str())
                    .map_err(|e| crate::config::ConfigError::key("identity.header", e.to_string()))?;
                Ok(Identity::Header {
                    header,
                    trusted_proxies: config.server.trusted_proxies.clone(),
                })
            }
        }
    }

    /// The principal behind a request that arrived from `peer`.
    pub fn principal(&self, headers: &HeaderMap, peer: SocketAddr) -> Result<Principal, IdentityError> {
        match self {
            Identity::Local(principal) => Ok(principal.clone()),
            Identity::Header {
                header,
                trusted_proxies,
            } => {
                if !is_trusted(trusted_proxies, peer.ip()) {
                    return Err(IdentityError::UntrustedPeer);
                }
                // A proxy that appends its header instead of replacing it leaves the client's own
                // value in front of it, so a second occurrence is refused, never resolved.
                let mut values = headers.get_all(header).iter();
                let value = values
                    .next()
                    .ok_or_else(|| IdentityError::MissingHeader(header.clone()))?;
                if values.next().is_some() {
                    return Err(IdentityError::RepeatedHeader(header.clone()));
                }
                // `HeaderValue::to_str` accepts visible ASCII only; proxies send names as UTF-8.
                let text = std::str::from_utf8(value.as_bytes()).map_err(|_| IdentityError::NotUtf8(header.clone()))?;
                Principal::parse(text).map_err(IdentityError::InvalidHeader)
            }
        }
    }
}

fn is_trusted(trusted: &[IpNet], ip: IpAddr) -> bool {
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(IpAddr::V6(v6)),
        v4 => v4,
    };
    trusted.iter().any(|net| net.contains(&ip))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(header: Option<&str>) -> HeaderMap {
        let mut headers = HeaderMap::new();
        if let Some(value) = header {
            headers.insert("x-forwarded-user", value.parse().expect("header value"));
        }
        headers
    }

    fn header_identity() -> Identity {
        Identity::Header {
            header: HeaderName::from_static("x-forwarded-user"),
            trusted_proxies: vec!["10.0.0.0/8".parse().expect("cidr")],
        }
    }

    #[test]
    fn header_mode_believes_only_trusted_proxies() {
        let identity = header_identity();
        let proxy: SocketAddr = "10.1.2.3:5000".parse().expect("addr");
        let stranger: SocketAddr = "192.0.2.9:5000".parse().expect("addr");
        assert_eq!(
            identity
                .principal(&parts(Some("alice")), proxy)
                .expect("trusted")
                .as_str(),
            "alice"
        );
        assert!(matches!(
            identity.principal(&parts(Some("alice")), stranger),
            Err(IdentityError::UntrustedPeer)
        ));
        assert!(matches!(
            identity.principal(&parts(None), proxy),
            Err(IdentityError::MissingHeader(_))
        ));
        assert!(matches!(
            identity.principal(&parts(Some("  ")), proxy),
            Err(IdentityError::InvalidHeader(_))
        ));
        let mapped: SocketAddr = "[::ffff:10.0.0.7]:1".parse().expect("addr");
        assert!(
            identity.principal(&parts(Some("bob")), mapped).is_ok(),
            "IPv4-mapped IPv6 peers match IPv4 CIDRs"
        );
    }

    #[test]
    fn header_mode_refuses_a_repeated_header_and_reads_utf8() {
        let identity = header_identity();
        let proxy: SocketAddr = "10.1.2.3:5000".parse().expect("addr");
        for values in [["mallory", "alice"], ["alice", "alice"]] {
            let mut headers = HeaderMap::new();
            for value in values {
                headers.append("x-forwarded-user", value.parse().expect("header value"));
            }
            assert!(matches!(
                identity.principal(&headers, proxy),
                Err(IdentityError::RepeatedHeader(_))
            ));
        }
        let mut headers = HeaderMap::new();
        let utf8 = axum::http::HeaderValue::from_bytes("José Müller".as_bytes()).expect("header value");
        headers.insert("x-forwarded-user", utf8);
        assert_eq!(
            identity.principal(&headers, proxy).expect("UTF-8").as_str(),
            "José Müller"
        );
        let latin1 = axum::http::HeaderValue::from_bytes(b"Jos\xe9").expect("header value");
        headers.insert("x-forwarded-user", latin1);
        assert!(matches!(
            identity.principal(&headers, proxy),
            Err(IdentityError::NotUtf8(_))
        ));
    }

    #[test]
    fn local_mode_ignores_headers() {
        let identity = Identity::Local(Principal::parse("me").expect("principal"));
        let peer: SocketAddr = "127.0.0.1:1".parse().expect("addr");
        assert_eq!(
            identity
                .principal(&parts(Some("mallory")), peer)
                .expect("local")
                .as_str(),
            "me"
        );
    }
}
