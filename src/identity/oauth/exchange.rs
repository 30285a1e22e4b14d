//! OAuth 2.0 Token Exchange (RFC 8693) at the identity provider's token endpoint: the caller's own
//! access token (the `subject_token`) for one meant for another resource of the same provider,
//! gatehouse authenticating as its own client (`identity.client_id`, `identity.client_secret`).
//! Written by hand: the `oauth2` crate (5.0) has no token-exchange grant.
//!
//! What comes back goes to the upstream, so it is refused unless it is plainly a bearer access
//! token for the upstream alone: not the subject token echoed, of an access token's or a JWT's
//! `issued_token_type`, and, when it is a JWT, with the upstream in its `aud` and gatehouse not
//! (an opaque token cannot be inspected). Otherwise the upstream could replay it at gatehouse as
//! the user.

use std::time::Duration;

use serde::Deserialize;
use serde_json::{Map, Value};
use url::Url;

use super::ResourceServer;
use super::discovery::{FETCH_TIMEOUT, MAX_ANSWER};
use super::verify::{audiences, looks_like_jwt};
use crate::outbound::read_bounded;
use crate::secret::Secret;

const GRANT_TYPE: &str = "urn:ietf:params:oauth:grant-type:token-exchange";
const ACCESS_TOKEN_TYPE: &str = "urn:ietf:params:oauth:token-type:access_token";
const JWT_TOKEN_TYPE: &str = "urn:ietf:params:oauth:token-type:jwt";
/// The longest `error_description` passed on.
const MAX_DESCRIPTION_CHARS: usize = 200;

/// A token the provider issued in exchange.
pub struct Exchanged {
    pub token: Secret<String>,
    /// `expires_in`, when the provider said.
    pub expires_in: Option<Duration>,
}

#[derive(Debug, thiserror::Error)]
pub enum ExchangeError {
    /// The provider's RFC 6749 5.2 error: its `error` code and `error_description`.
    #[error("the identity provider refused the token exchange: {error}")]
    Refused { error: String, description: Option<String> },
    /// The provider could not be asked, or answered something unreadable.
    #[error("the token exchange failed: {0}")]
    Failed(String),
    /// The provider issued a token that must not go to the upstream (its configuration is
    /// wrong): why, without the token.
    #[error("the identity provider issued a token gatehouse cannot use: {0}")]
    Unusable(String),
}

impl ExchangeError {
    /// The provider wants the user at its pages first (OpenID Connect Core 3.1.2.6).
    pub fn needs_interaction(&self) -> bool {
        matches!(self, ExchangeError::Refused { error, .. }
            if matches!(error.as_str(), "interaction_required" | "consent_required" | "login_required"))
    }
}

/// RFC 8693 2.2.1: what a successful exchange answers.
#[derive(Deserialize)]
struct Answer {
    access_token: String,
    token_type: String,
    issued_token_type: Option<String>,
    expires_in: Option<u64>,
}

/// RFC 6749 5.2.
#[derive(Deserialize)]
struct Refusal {
    error: String,
    error_description: Option<String>,
}

impl ResourceServer {
    /// Exchanges `subject_token` (an access token this server verified) for an access token for
    /// `audience`, with `scopes` when any. `audience` goes as `audience` and, when it is an
    /// absolute URL, as `resource` (RFC 8707) too.
    pub async fn exchange(
        &self,
        subject_token: &Secret<String>,
        audience: &str,
        scopes: &[String],
    ) -> Result<Exchanged, ExchangeError> {
        let metadata = self.discovery.metadata().await.map_err(ExchangeError::Failed)?;
        let endpoint = metadata
            .token_endpoint
            .as_ref()
            .ok_or_else(|| ExchangeError::Failed("the identity provider publishes no token_endpoint".into()))?;
        let scope = scopes.join(" ");
        let mut form = vec![
            ("grant_type", GRANT_TYPE),
            ("subject_token", subject_token.expose().as_str()),
            ("subject_token_type", ACCESS_TOKEN_TYPE),
            ("requested_token_type", ACCESS_TOKEN_TYPE),
            ("audience", audience),
        ];
        if Url::parse(audience).is_ok() {
            form.push(("resource", audience));
        }
        if !scope.is_empty() {
            form.push(("scope", &scope));
        }
        let mut request = self
            .http
            .post(endpoint.clone())
            .header(reqwest::header::ACCEPT, "application/json")
            .timeout(FETCH_TIMEOUT);
        match &self.client_secret {
            Some(secret) => request = request.basic_auth(&self.client_id, Some(secret.expose())),
            // A public client names itself (RFC 6749 3.2.1).
            None => form.push(("client_id", &self.client_id)),
        }
        let request = request
            .form(&form)
            .build()
            .map_err(|e| ExchangeError::Failed(format!("token exchange: {e}")))?;
        let response = crate::telemetry::execute(&self.http, request, "identity.token_exchange", "identity")
            .await
            .map_err(|e| ExchangeError::Failed(format!("token exchange: {e}")))?;
        let status = response.status();
        let body = read_bounded(response, MAX_ANSWER)
            .await
            .map_err(|e| ExchangeError::Failed(format!("token exchange: {e}")))?;
        if !status.is_success() {
            return Err(match serde_json::from_slice::<Refusal>(&body) {
                Ok(refusal) if status.is_client_error() => ExchangeError::Refused {
                    error: printable(&refusal.error, 64).unwrap_or_else(|| "invalid_error".into()),
                    description: refusal
                        .error_description
                        .and_then(|d| printable(&d, MAX_DESCRIPTION_CHARS)),
                },
                _ => ExchangeError::Failed(format!("the token endpoint answered {status}")),
            });
        }
        let answer: Answer = serde_json::from_slice(&body)
            .map_err(|e| ExchangeError::Failed(format!("the token endpoint answered no token: {e}")))?;
        if answer.access_token.is_empty() {
            return Err(ExchangeError::Failed(
                "the token endpoint answered an empty token".into(),
            ));
        }
        self.usable(&answer, subject_token, audience)
            .map_err(ExchangeError::Unusable)?;
        Ok(Exchanged {
            token: Secret::new(answer.access_token),
            expires_in: answer.expires_in.map(Duration::from_secs),
        })
    }
}

impl ResourceServer {
    /// Why the token `answer` carries must not go to the upstream `audience`, if it must not.
    fn usable(&self, answer: &Answer, subject_token: &Secret<String>, audience: &str) -> Result<(), String> {
        if !answer.token_type.eq_ignore_ascii_case("bearer") {
            return Err(format!(
                "its `token_type` is `{}`, not `Bearer`",
                printable(&answer.token_type, 32).unwrap_or_default()
            ));
        }
        let issued = answer.issued_token_type.as_deref().unwrap_or_default();
        if issued != ACCESS_TOKEN_TYPE && issued != JWT_TOKEN_TYPE {
            return Err(format!(
                "its `issued_token_type` is `{}`, neither an access token nor a JWT",
                printable(issued, 100).unwrap_or_default()
            ));
        }
        if answer.access_token == *subject_token.expose() {
            return Err("it is the caller's own token, sent back".into());
        }
        if !looks_like_jwt(&answer.access_token) {
            return Ok(());
        }
        let claims: Map<String, Value> = jsonwebtoken::dangerous::insecure_decode_claims(&answer.access_token)
            .map_err(|_| "it looks like a JWT whose claims do not read".to_owned())?;
        if audiences(&claims).any(|aud| aud == self.audience || aud == self.resource) {
            return Err("its `aud` names gatehouse itself".into());
        }
        if !audiences(&claims).any(|aud| aud == audience) {
            return Err(format!("its `aud` does not name the upstream ({audience})"));
        }
        Ok(())
    }
}

/// RFC 6749 5.2 allows only printable ASCII without `"` and `\` in `error` and
/// `error_description`: anything else is dropped, and the text cut to `max` characters.
fn printable(text: &str, max: usize) -> Option<String> {
    let kept: String = text
        .chars()
        .filter(|c| matches!(c, ' ' | '!' | '#'..='[' | ']'..='~'))
        .take(max)
        .collect();
    let kept = kept.trim();
    (!kept.is_empty()).then(|| kept.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_errors_are_kept_printable_and_short() {
        assert_eq!(printable("invalid_grant", 64).as_deref(), Some("invalid_grant"));
        assert_eq!(printable("bad\"\\\n<x>", 64).as_deref(), Some("bad<x>"));
        assert_eq!(printable("  ", 64), None);
        assert_eq!(printable(&"a".repeat(300), 200).map(|s| s.len()), Some(200));
    }

    #[test]
    fn interaction_codes_send_the_user_to_sign_in() {
        let refused = |error: &str| ExchangeError::Refused {
            error: error.into(),
            description: None,
        };
        assert!(refused("interaction_required").needs_interaction());
        assert!(refused("consent_required").needs_interaction());
        assert!(refused("login_required").needs_interaction());
        assert!(!refused("invalid_grant").needs_interaction());
        assert!(!ExchangeError::Failed("x".into()).needs_interaction());
    }
}
