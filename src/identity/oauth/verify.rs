//! Access-token verification: a JWT's signature against the provider's keys, its issuer, audience
//! and lifetime (jsonwebtoken does the JOSE work); an opaque token by RFC 7662 introspection when
//! configured. The outcome is cached by the token's hash until the token expires, so the hot path
//! verifies no signature twice; the token itself is never stored or sent anywhere else.

use std::sync::Arc;

use jsonwebtoken::{Algorithm, Validation};
use serde::Deserialize;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use super::discovery::{AuthServerMetadata, FETCH_TIMEOUT, MAX_ANSWER};
use super::keys::KeyError;
use super::{BearerError, ResourceServer, principal_from_claims};
use crate::clock::unix_seconds;
use crate::identity::{Caller, Claims};
use crate::outbound::read_bounded;

/// Clock skew tolerated on `exp` and `nbf`, in seconds.
const LEEWAY_SECONDS: u64 = 30;
/// An introspection answer without `exp` is trusted this long.
const INTROSPECTION_DEFAULT_TTL: u64 = 60;

/// Who a verified token names and what it allows, kept until `expires_at` (seconds since the
/// epoch): a cached token costs a hash and a lookup, nothing more.
pub struct VerifiedToken {
    pub caller: Caller,
    pub scopes: Vec<String>,
    pub expires_at: u64,
}

pub type TokenKey = [u8; 32];

pub fn token_key(token: &str) -> TokenKey {
    Sha256::digest(token.as_bytes()).into()
}

/// Only asymmetric algorithms: `none` does not parse at all, and HMAC would let anyone holding
/// the public key sign.
fn asymmetric(alg: Algorithm) -> bool {
    !matches!(alg, Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512)
}

impl ResourceServer {
    pub(super) async fn verify(&self, token: &str) -> Result<Arc<VerifiedToken>, BearerError> {
        let metadata = self.discovery.metadata().await.map_err(BearerError::Unavailable)?;
        if looks_like_jwt(token) {
            self.verify_jwt(&metadata, token).await
        } else if self.introspection {
            self.introspect(&metadata, token).await
        } else {
            Err(BearerError::Invalid("the token is not a JWT".into()))
        }
    }

    async fn verify_jwt(&self, metadata: &AuthServerMetadata, token: &str) -> Result<Arc<VerifiedToken>, BearerError> {
        let claims = self
            .signed_claims(metadata, token, &self.audience, Recheck::Later)
            .await?;
        let expires_at = claims.get("exp").and_then(Value::as_u64).unwrap_or(0);
        self.verified_token(&claims, expires_at)
    }

    /// The pages' OpenID Connect id_token (OpenID Connect Core 3.1.3.7): signed with one of the
    /// provider's keys, from its issuer, for `client_id` (and authorized for it when it names
    /// several audiences), unexpired, and carrying the `nonce` the sign-in sent.
    pub async fn verify_id_token(
        &self,
        token: &str,
        client_id: &str,
        nonce: &str,
    ) -> Result<Map<String, Value>, BearerError> {
        let metadata = self.discovery.metadata().await.map_err(BearerError::Unavailable)?;
        let claims = self.signed_claims(&metadata, token, client_id, Recheck::Never).await?;
        let azp = claims.get("azp").and_then(Value::as_str);
        if azp.is_some_and(|azp| azp != client_id) || (audiences(&claims).count() > 1 && azp.is_none()) {
            return Err(BearerError::Invalid("the id_token was issued to another client".into()));
        }
        if claims.get("nonce").and_then(Value::as_str) != Some(nonce) {
            return Err(BearerError::Invalid(
                "the id_token's nonce is not this sign-in's".into(),
            ));
        }
        Ok(claims)
    }

    /// A JWT's claims once its signature (by the provider's key it names, with an asymmetric
    /// algorithm that key is for), issuer, audience and lifetime hold. `recheck` says what a key
    /// the set lacks, fetched too recently to be fetched again, makes of the token.
    async fn signed_claims(
        &self,
        metadata: &AuthServerMetadata,
        token: &str,
        audience: &str,
        recheck: Recheck,
    ) -> Result<Map<String, Value>, BearerError> {
        let header = jsonwebtoken::decode_header(token)
            .map_err(|e| BearerError::Invalid(format!("unreadable token header: {e}")))?;
        if !asymmetric(header.alg) {
            return Err(BearerError::Invalid(format!(
                "{:?} tokens are not accepted",
                header.alg
            )));
        }
        let lifetime = Lifetime::unverified(token);
        if lifetime.expired(unix_seconds()) {
            return Err(BearerError::Invalid("the token has expired".into()));
        }
        let jwks_uri = metadata
            .jwks_uri
            .as_ref()
            .ok_or_else(|| BearerError::Unavailable("the identity provider publishes no jwks_uri".into()))?;
        let issued_by = lifetime.iat.map(|iat| iat.saturating_add(LEEWAY_SECONDS));
        let key = self
            .keys
            .key(jwks_uri, header.kid.as_deref(), header.alg, issued_by)
            .await
            .map_err(|e| match (e, recheck) {
                (KeyError::NotYet(reason), Recheck::Later) | (KeyError::Unavailable(reason), _) => {
                    BearerError::Unavailable(reason)
                }
                (e, _) => BearerError::Invalid(e.to_string()),
            })?;
        if !key.verifies(header.alg) {
            return Err(BearerError::Invalid(format!("the key does not sign {:?}", header.alg)));
        }
        let mut validation = Validation::new(header.alg);
        validation.set_issuer(&[&metadata.issuer]);
        validation.set_audience(&[audience]);
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        validation.validate_nbf = true;
        validation.leeway = LEEWAY_SECONDS;
        let data = jsonwebtoken::decode::<Map<String, Value>>(token, &key.decoding, &validation)
            .map_err(|e| BearerError::Invalid(format!("{e}")))?;
        Ok(data.claims)
    }

    /// RFC 7662: the provider says whether the token is active and what it carries; gatehouse
    /// still checks the issuer and audience itself.
    async fn introspect(&self, metadata: &AuthServerMetadata, token: &str) -> Result<Arc<VerifiedToken>, BearerError> {
        let endpoint = metadata.introspection_endpoint.as_ref().ok_or_else(|| {
            BearerError::Unavailable("the identity provider publishes no introspection_endpoint".into())
        })?;
        let request = self
            .http
            .post(endpoint.clone())
            .basic_auth(&self.client_id, self.client_secret.as_ref().map(|s| s.expose()))
            .header(reqwest::header::ACCEPT, "application/json")
            .form(&[("token", token), ("token_type_hint", "access_token")])
            .timeout(FETCH_TIMEOUT)
            .build()
            .map_err(|e| BearerError::Unavailable(format!("introspection: {e}")))?;
        let response = crate::telemetry::execute(&self.http, request, "identity.introspection", "identity")
            .await
            .map_err(|e| BearerError::Unavailable(format!("introspection: {e}")))?;
        if !response.status().is_success() {
            return Err(BearerError::Unavailable(format!(
                "introspection answered {}",
                response.status()
            )));
        }
        let body = read_bounded(response, MAX_ANSWER)
            .await
            .map_err(|e| BearerError::Unavailable(format!("introspection: {e}")))?;
        let claims: Map<String, Value> = serde_json::from_slice(&body)
            .map_err(|e| BearerError::Unavailable(format!("introspection answered no JSON object: {e}")))?;
        if claims.get("active") != Some(&Value::Bool(true)) {
            return Err(BearerError::Invalid(
                "the identity provider says the token is not active".into(),
            ));
        }
        if claims
            .get("iss")
            .is_some_and(|iss| iss.as_str() != Some(metadata.issuer.as_str()))
        {
            return Err(BearerError::Invalid("the token is from another issuer".into()));
        }
        if !audiences(&claims).any(|aud| aud == self.audience) {
            return Err(BearerError::Invalid("the token is meant for another audience".into()));
        }
        let now = unix_seconds();
        let expires_at = claims
            .get("exp")
            .and_then(Value::as_u64)
            .unwrap_or(now + INTROSPECTION_DEFAULT_TTL);
        if expires_at + LEEWAY_SECONDS <= now {
            return Err(BearerError::Invalid("the token has expired".into()));
        }
        self.verified_token(&claims, expires_at)
    }

    fn verified_token(&self, claims: &Map<String, Value>, expires_at: u64) -> Result<Arc<VerifiedToken>, BearerError> {
        let principal =
            principal_from_claims(&self.issuer, &self.principal_claim, claims).map_err(BearerError::Invalid)?;
        let client = ["client_id", "azp"]
            .iter()
            .find_map(|claim| claims.get(*claim).and_then(Value::as_str))
            .map(|client| crate::text::bounded(client, MAX_CLIENT_ID_BYTES));
        Ok(Arc::new(VerifiedToken {
            caller: Caller {
                client,
                ..Caller::new(principal, Claims::from_token(claims))
            },
            scopes: scopes_of(claims),
            expires_at,
        }))
    }
}

/// What becomes of a token signed with a key the provider's set lacks, when the set was fetched
/// too recently to be fetched again.
#[derive(Clone, Copy)]
enum Recheck {
    /// An access token: unavailable (503), and the client keeps it to send again later.
    Later,
    /// The pages' id_token: refused, since its sign-in's code cannot be used again anyway.
    Never,
}

/// The longest OAuth client id kept from a token (a Client ID Metadata Document URL is long).
const MAX_CLIENT_ID_BYTES: usize = 2048;

/// What a JWT says of its own lifetime, read before its signature is checked, and used only to
/// tell a bad token from one that cannot be checked now: a token these show dead is dead whether
/// its signature holds (they are true) or not (it is forged). Unreadable values count as absent.
#[derive(Default, Deserialize)]
struct Lifetime {
    #[serde(default, deserialize_with = "seconds")]
    exp: Option<u64>,
    #[serde(default, deserialize_with = "seconds")]
    iat: Option<u64>,
}

impl Lifetime {
    fn unverified(token: &str) -> Self {
        jsonwebtoken::dangerous::insecure_decode_claims(token).unwrap_or_default()
    }

    fn expired(&self, now: u64) -> bool {
        self.exp.is_some_and(|exp| exp.saturating_add(LEEWAY_SECONDS) < now)
    }
}

/// A NumericDate as whole seconds; anything else as absent.
fn seconds<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Option<u64>, D::Error> {
    Ok(Value::deserialize(deserializer)?.as_u64())
}

/// Three base64url parts: a JWS in compact form. Anything else is an opaque token.
pub(super) fn looks_like_jwt(token: &str) -> bool {
    token.split('.').count() == 3
}

pub(super) fn audiences(claims: &Map<String, Value>) -> Box<dyn Iterator<Item = &str> + '_> {
    match claims.get("aud") {
        Some(Value::String(aud)) => Box::new(std::iter::once(aud.as_str())),
        Some(Value::Array(list)) => Box::new(list.iter().filter_map(Value::as_str)),
        _ => Box::new(std::iter::empty()),
    }
}

/// `scope` (RFC 8693 4.2 and RFC 9068: space-separated) or `scp` (Entra ID, Okta: a string or a
/// list).
fn scopes_of(claims: &Map<String, Value>) -> Vec<String> {
    let mut scopes = Vec::new();
    for name in ["scope", "scp"] {
        match claims.get(name) {
            Some(Value::String(text)) => scopes.extend(text.split_whitespace().map(str::to_owned)),
            Some(Value::Array(list)) => scopes.extend(list.iter().filter_map(Value::as_str).map(str::to_owned)),
            _ => {}
        }
    }
    scopes
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn scopes_come_from_scope_or_scp() {
        let claims = |v: Value| v.as_object().cloned().expect("object");
        assert_eq!(scopes_of(&claims(json!({"scope": "mcp  read"}))), ["mcp", "read"]);
        assert_eq!(scopes_of(&claims(json!({"scp": ["mcp"]}))), ["mcp"]);
        assert_eq!(scopes_of(&claims(json!({"scp": "a b"}))), ["a", "b"]);
        assert!(scopes_of(&claims(json!({"scope": 7}))).is_empty());
    }

    #[test]
    fn only_asymmetric_algorithms() {
        assert!(!asymmetric(Algorithm::HS256) && asymmetric(Algorithm::RS256) && asymmetric(Algorithm::EdDSA));
        assert!(
            jsonwebtoken::decode_header("eyJhbGciOiJub25lIn0.e30.").is_err(),
            "alg none never parses"
        );
    }
}
