//! Providers' answers: read within a size bound, rewritten into the RFC 6749 shape the oauth2
//! crate reads, and what oauth2 made of them turned into gatehouse's [`TokenResponse`] or
//! [`OAuthError`].
//!
//! Real providers answer token requests in form encoding (GitHub), put errors inside 200 answers,
//! send `expires_in` as a string, or leave out `token_type`; oauth2 reads only RFC 6749 JSON, so
//! each answer is rewritten before it sees it.

use oauth2::basic::{BasicRequestTokenError, BasicTokenResponse};
use oauth2::http::header::CONTENT_TYPE;
use oauth2::http::{self, StatusCode};
use oauth2::{ErrorResponse, HttpResponse, RequestTokenError, TokenResponse as _};
use serde_json::{Map, Value};

use crate::secret::Secret;

/// Largest provider answer read.
const MAX_PROVIDER_RESPONSE: usize = 256 * 1024;

/// Tokens as a provider issued them.
#[derive(Debug)]
pub struct TokenResponse {
    pub access_token: Secret<String>,
    pub refresh_token: Option<Secret<String>>,
    pub expires_in: Option<u64>,
    /// Granted scopes, when the provider says (it may grant fewer than asked).
    pub scope: Option<String>,
}

impl From<BasicTokenResponse> for TokenResponse {
    fn from(answer: BasicTokenResponse) -> Self {
        Self {
            access_token: Secret::new(answer.access_token().secret().clone()),
            refresh_token: answer.refresh_token().map(|t| Secret::new(t.secret().clone())),
            expires_in: answer.expires_in().map(|d| d.as_secs()),
            // oauth2 splits `scope` on spaces only, so joined again it is the provider's text.
            scope: answer
                .scopes()
                .map(|scopes| scopes.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(" ")),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum OAuthError {
    /// The provider refused (`invalid_grant`, `invalid_client`...): the grant is unusable.
    #[error("the provider refused: {error}{}", description.as_deref().map(|d| format!(" ({d})")).unwrap_or_default())]
    Rejected { error: String, description: Option<String> },
    /// The provider could not be reached or answered nonsense: it may work later.
    #[error("the provider could not be used: {0}")]
    Unavailable(String),
}

/// Why the hook gave oauth2 no answer; never holds a secret.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(super) struct Unusable(pub(super) String);

impl From<BasicRequestTokenError<Unusable>> for OAuthError {
    fn from(error: BasicRequestTokenError<Unusable>) -> Self {
        match error {
            RequestTokenError::ServerResponse(refusal) => Self::Rejected {
                error: refusal.error().as_ref().chars().take(100).collect(),
                description: refusal.error_description().map(|d| d.chars().take(300).collect()),
            },
            other => Self::Unavailable(reason(other)),
        }
    }
}

/// Why a request through oauth2 came to nothing, without a secret in it.
pub(super) fn reason<TE: ErrorResponse>(error: RequestTokenError<Unusable, TE>) -> String {
    match error {
        RequestTokenError::ServerResponse(refusal) => format!("the provider refused: {refusal}"),
        RequestTokenError::Request(Unusable(reason)) | RequestTokenError::Other(reason) => reason,
        // Only where the answer failed to read: serde's message could quote a token.
        RequestTokenError::Parse(error, _) => format!("the answer did not read at `{}`", error.path()),
    }
}

/// The body, read as it comes, refused once it grows past [`MAX_PROVIDER_RESPONSE`].
pub(super) async fn read_limited(response: reqwest::Response) -> Result<Vec<u8>, String> {
    crate::outbound::read_bounded(response, MAX_PROVIDER_RESPONSE)
        .await
        .map_err(|e| e.to_string())
}

/// A JSON answer for oauth2.
fn answer(status: StatusCode, body: Vec<u8>) -> Result<HttpResponse, Unusable> {
    http::Response::builder()
        .status(status)
        .header(CONTENT_TYPE, "application/json")
        .body(body)
        .map_err(|e| Unusable(e.to_string()))
}

/// A revocation endpoint's answer: RFC 7009 2.2, the status says it all (the body is not read).
pub(super) fn revocation_answer(status: StatusCode) -> Result<HttpResponse, Unusable> {
    if status.is_success() {
        answer(StatusCode::OK, Vec::new())
    } else {
        Err(Unusable(format!("revocation answered {status}")))
    }
}

/// Where a token answer holds the user's tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TokensAt<'a> {
    /// At the top level, as RFC 6749 5.1 puts them.
    Top,
    /// Under this JSON pointer, which the answer must have: Slack's code exchange puts the user's
    /// tokens under `/authed_user`, beside the app's own bot token at the top level.
    Nested(&'a str),
    /// Under this JSON pointer when the answer has it, else at the top level (Slack's refreshes).
    NestedOrTop(&'a str),
}

/// A token endpoint's answer, in JSON or form encoding, success or error, rewritten as RFC 6749
/// 5.1 and 5.2 put it: an error is a 400 whatever its status (Slack's `{"ok":false,"error":..}`
/// comes with a 200), and a success is a 200 carrying a non-empty `access_token`, a `token_type`,
/// and only such other fields as oauth2 reads, taken from where `tokens_at` says.
pub(super) fn token_answer(status: StatusCode, body: &[u8], tokens_at: TokensAt) -> Result<HttpResponse, Unusable> {
    let mut fields = parse_fields(body).ok_or_else(|| {
        Unusable(format!(
            "the token endpoint answered {status} with neither JSON nor form data"
        ))
    })?;
    if fields.get("error").is_some_and(Value::is_string) {
        let refusal: Map<String, Value> = fields
            .into_iter()
            .filter(|(name, value)| matches!(name.as_str(), "error" | "error_description") && value.is_string())
            .collect();
        return answer(StatusCode::BAD_REQUEST, Value::Object(refusal).to_string().into_bytes());
    }
    if !status.is_success() {
        return Err(Unusable(format!("the token endpoint answered {status}")));
    }
    let pointer = match tokens_at {
        TokensAt::Top => None,
        TokensAt::Nested(pointer) | TokensAt::NestedOrTop(pointer) => Some(pointer),
    };
    let nested = pointer.and_then(|p| {
        Value::Object(fields.clone())
            .pointer(p)
            .and_then(Value::as_object)
            .cloned()
    });
    match (nested, tokens_at) {
        (Some(nested), _) => fields = nested,
        (None, TokensAt::Nested(pointer)) => {
            return Err(Unusable(format!("the token endpoint sent no `{pointer}` object")));
        }
        (None, _) => {}
    }
    rfc6749_success(fields)
}

/// A successful token answer's fields as oauth2 reads them.
fn rfc6749_success(mut fields: Map<String, Value>) -> Result<HttpResponse, Unusable> {
    let present = |fields: &Map<String, Value>, name: &str| {
        fields.get(name).and_then(Value::as_str).is_some_and(|s| !s.is_empty())
    };
    if !present(&fields, "access_token") {
        return Err(Unusable("the token endpoint sent no access_token".into()));
    }
    if !present(&fields, "refresh_token") {
        fields.remove("refresh_token");
    }
    if !fields.get("scope").is_some_and(Value::is_string) {
        fields.remove("scope");
    }
    if !fields.get("token_type").is_some_and(Value::is_string) {
        fields.insert("token_type".into(), "bearer".into());
    }
    let expires_in = match fields.remove("expires_in") {
        Some(Value::Number(n)) => n.as_u64(),
        Some(Value::String(s)) => s.parse().ok(),
        _ => None,
    };
    if let Some(seconds) = expires_in {
        fields.insert("expires_in".into(), seconds.into());
    }
    answer(StatusCode::OK, Value::Object(fields).to_string().into_bytes())
}

/// A JSON object, or `application/x-www-form-urlencoded` pairs as a JSON object of strings.
fn parse_fields(body: &[u8]) -> Option<Map<String, Value>> {
    if let Ok(Value::Object(map)) = serde_json::from_slice::<Value>(body) {
        return Some(map);
    }
    let text = std::str::from_utf8(body).ok()?.trim();
    if text.is_empty() || text.starts_with('<') || !text.contains('=') {
        return None;
    }
    Some(
        url::form_urlencoded::parse(text.as_bytes())
            .map(|(k, v)| (k.into_owned(), Value::String(v.into_owned())))
            .collect(),
    )
}

#[cfg(test)]
pub(super) mod tests;
