//! MCP authorization, resource-server side: gatehouse is an OAuth 2.1 protected resource of one
//! identity provider. A request to `/mcp` carries `Authorization: Bearer <token>`; the token is
//! verified (see `verify`), must carry the configured scopes, and names the caller: the principal
//! is the issuer and the configured claim (`sub`). Refusals follow RFC 6750 3 and RFC 9728 5.1:
//! a 401 or 403 whose `WWW-Authenticate` points at the Protected Resource Metadata. The verified
//! token can be exchanged for one meant for an upstream of the same provider (see `exchange`).

mod discovery;
mod exchange;
mod keys;
mod verify;

use std::sync::Arc;

use axum::http::header::AUTHORIZATION;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use serde_json::{Map, Value, json};
use url::Url;

pub use discovery::{AuthServerMetadata, Discovery};
pub use exchange::{ExchangeError, Exchanged};
use keys::KeySet;
use verify::{TokenKey, VerifiedToken, token_key};

use super::Caller;
use crate::clock::unix_seconds;
use crate::config::{Config, ConfigError, IdentityMode};
use crate::domain::Principal;
use crate::public_url::PublicUrl;
use crate::routes;
use crate::secret::Secret;
use crate::store::Cache;

/// Verified tokens cached per replica; a full cache starts over.
const TOKEN_CACHE_CAPACITY: usize = 100_000;
/// The longest bearer token read; longer ones are refused unverified.
const MAX_TOKEN_BYTES: usize = 16 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum BearerError {
    #[error("the request carries no bearer token")]
    Missing,
    #[error("the token is not valid: {0}")]
    Invalid(String),
    #[error("the token lacks a required scope")]
    InsufficientScope,
    /// The token cannot be checked now (the provider or its keys are unreachable or broken, or
    /// the key it names is not at hand yet): 503, and the client keeps its token.
    #[error("the token cannot be verified now: {0}")]
    Unavailable(String),
}

pub struct ResourceServer {
    /// What tokens' `aud` must contain: `identity.audience`, by default `resource`.
    audience: String,
    /// The canonical URL of `/mcp` (RFC 8707, RFC 9728 3.3): what clients ask tokens for.
    resource: String,
    scopes: Vec<String>,
    principal_claim: String,
    client_id: String,
    client_secret: Option<Secret<String>>,
    introspection: bool,
    issuer: Url,
    resource_metadata_url: String,
    discovery: Discovery,
    keys: KeySet,
    http: reqwest::Client,
    verified: Cache<TokenKey, VerifiedToken>,
}

impl ResourceServer {
    /// Config validation has checked that the issuer and client id are set.
    pub fn from_config(config: &Config, http: reqwest::Client) -> Result<Self, ConfigError> {
        let identity = &config.identity;
        let issuer = identity
            .issuer
            .clone()
            .ok_or_else(|| ConfigError::key("identity.issuer", "is required in `oauth` mode"))?;
        let public_url = PublicUrl::new(&config.public_url());
        crate::jose::install();
        Ok(Self {
            audience: identity.audience.clone().unwrap_or_else(|| public_url.at(routes::MCP)),
            resource: public_url.at(routes::MCP),
            scopes: identity.scopes.clone(),
            principal_claim: identity.principal_claim.clone(),
            client_id: identity.client_id.clone().unwrap_or_default(),
            client_secret: identity.client_secret.clone(),
            introspection: identity.introspection,
            discovery: Discovery::new(issuer.clone(), http.clone(), identity.jwks_refresh_interval),
            keys: KeySet::new(http.clone(), identity.jwks_refresh_interval),
            issuer,
            // Under the public URL, not at the host's root where RFC 9728 3.1 derives it from
            // `resource` (`/.well-known/oauth-protected-resource/gatehouse/mcp`, also served): a
            // proxy that forwards only gatehouse's path prefix forwards this one too.
            resource_metadata_url: public_url.at(routes::RESOURCE_METADATA),
            http,
            verified: Cache::new(TOKEN_CACHE_CAPACITY),
        })
    }

    /// The caller a request's bearer token names.
    pub async fn caller(&self, headers: &HeaderMap) -> Result<Caller, BearerError> {
        let token = bearer_token(headers)?;
        let key = token_key(token);
        let verified = match self.verified.get(&key).filter(|v| v.expires_at > unix_seconds()) {
            Some(verified) => verified,
            None => {
                let verified = self.verify(token).await?;
                self.verified.insert(key, verified.clone());
                verified
            }
        };
        if !self.scopes.iter().all(|needed| has_scope(&verified.scopes, needed)) {
            return Err(BearerError::InsufficientScope);
        }
        Ok(Caller {
            access_token: Some(Secret::new(token.to_owned())),
            ..verified.caller.clone()
        })
    }

    /// RFC 9728 2: what a client needs to find the authorization server and ask for a token. The
    /// `resource` is the URL the metadata describes (3.3 requires it); a provider that puts
    /// something else in `aud` (Entra ID: the API's app id) is configured with `identity.audience`.
    pub fn metadata_document(&self) -> Value {
        let mut document = json!({
            "resource": self.resource,
            "authorization_servers": [self.issuer.as_str().trim_end_matches('/')],
            "bearer_methods_supported": ["header"],
            "resource_name": "gatehouse",
        });
        if !self.scopes.is_empty() {
            document["scopes_supported"] = json!(self.scopes);
        }
        document
    }

    /// The status and `WWW-Authenticate` challenge of a refusal (RFC 6750 3, RFC 9728 5.1); a
    /// token that cannot be verified now is a 503 and no challenge, so clients keep their tokens.
    pub fn challenge(&self, error: &BearerError) -> (StatusCode, Option<HeaderValue>) {
        let mut parts = Vec::new();
        let status = match error {
            BearerError::Missing => StatusCode::UNAUTHORIZED,
            BearerError::Invalid(_) => {
                parts.push(r#"error="invalid_token""#.to_owned());
                parts.push(r#"error_description="The access token is invalid or expired""#.to_owned());
                StatusCode::UNAUTHORIZED
            }
            BearerError::InsufficientScope => {
                parts.push(r#"error="insufficient_scope""#.to_owned());
                StatusCode::FORBIDDEN
            }
            BearerError::Unavailable(_) => return (StatusCode::SERVICE_UNAVAILABLE, None),
        };
        parts.push(format!(r#"resource_metadata="{}""#, self.resource_metadata_url));
        if !self.scopes.is_empty() {
            // Configuration admits only scope tokens: no quotes or backslashes to escape.
            parts.push(format!(r#"scope="{}""#, self.scopes.join(" ")));
        }
        let value = HeaderValue::try_from(format!("Bearer {}", parts.join(", "))).ok();
        (status, value)
    }

    /// The issuer's metadata (for the pages' sign-in, which uses the same provider).
    pub async fn authorization_server(&self) -> Result<Arc<AuthServerMetadata>, String> {
        self.discovery.metadata().await
    }
}

/// The principal a token (or an id_token, for the pages) names: `issuer#claim`, unique across
/// providers and stable for the user, compared exactly (a `sub` is case-sensitive). `issuer` is
/// the configured one.
pub fn principal_from_claims(issuer: &Url, claim: &str, claims: &Map<String, Value>) -> Result<Principal, String> {
    let value = match claims.get(claim) {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Number(number)) => number.to_string(),
        _ => return Err(format!("the token has no `{claim}` claim")),
    };
    IdentityMode::OAuth
        .principal_form()
        .principal(&format!("{}#{value}", issuer.as_str().trim_end_matches('/')))
        .map_err(|e| format!("the `{claim}` claim: {e}"))
}

/// Whether a token's scopes include `needed`. A scope configured as a URI (Entra ID's
/// `api://<app>/mcp`, which clients must ask for) arrives in the token as its last segment (`scp:
/// "mcp"`), so that counts too.
fn has_scope(scopes: &[String], needed: &str) -> bool {
    let short = needed
        .contains("://")
        .then(|| needed.rsplit('/').next())
        .flatten()
        .filter(|s| !s.is_empty());
    scopes.iter().any(|s| s == needed || Some(s.as_str()) == short)
}

/// RFC 6750 2.1: `Authorization: Bearer <token>`, once; the scheme is case-insensitive.
fn bearer_token(headers: &HeaderMap) -> Result<&str, BearerError> {
    let mut values = headers.get_all(AUTHORIZATION).iter();
    let value = values.next().ok_or(BearerError::Missing)?;
    if values.next().is_some() {
        return Err(BearerError::Invalid("more than one Authorization header".into()));
    }
    let text = value
        .to_str()
        .map_err(|_| BearerError::Invalid("the Authorization header is not ASCII".into()))?;
    let (scheme, token) = text.split_once(' ').ok_or(BearerError::Missing)?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(BearerError::Missing);
    }
    let token = token.trim();
    if token.is_empty() {
        return Err(BearerError::Invalid("the bearer token is empty".into()));
    }
    if token.len() > MAX_TOKEN_BYTES {
        return Err(BearerError::Invalid("the token is too long".into()));
    }
    Ok(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(values: &[&str]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for value in values {
            headers.append(AUTHORIZATION, value.parse().expect("header"));
        }
        headers
    }

    #[test]
    fn uri_scopes_match_their_last_segment() {
        let scopes = ["mcp".to_owned(), "openid".to_owned()];
        assert!(has_scope(&scopes, "mcp"));
        assert!(has_scope(&scopes, "api://0b6f-gatehouse/mcp"));
        assert!(!has_scope(&scopes, "api://0b6f-gatehouse/admin"));
        assert!(!has_scope(&scopes, "mc"));
        assert!(
            !has_scope(&["api://x/mcp".to_owned()], "mcp"),
            "only the configured URI shortens"
        );
    }

    #[test]
    fn reads_one_bearer_token() {
        assert_eq!(bearer_token(&headers(&["Bearer abc"])).expect("token"), "abc");
        assert_eq!(bearer_token(&headers(&["bearer  abc "])).expect("token"), "abc");
        assert!(matches!(bearer_token(&headers(&[])), Err(BearerError::Missing)));
        assert!(matches!(
            bearer_token(&headers(&["Basic eDp5"])),
            Err(BearerError::Missing)
        ));
        assert!(matches!(
            bearer_token(&headers(&["Bearer "])),
            Err(BearerError::Invalid(_))
        ));
        assert!(matches!(
            bearer_token(&headers(&["Bearer a", "Bearer b"])),
            Err(BearerError::Invalid(_))
        ));
    }

    #[test]
    fn reads_tokens_up_to_the_limit() {
        let longest = "t".repeat(MAX_TOKEN_BYTES);
        let header = format!("Bearer {longest}");
        assert_eq!(bearer_token(&headers(&[&header])).expect("token"), longest);
        let header = format!("Bearer {longest}t");
        assert!(matches!(
            bearer_token(&headers(&[&header])),
            Err(BearerError::Invalid(_))
        ));
    }
}
