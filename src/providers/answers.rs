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
pub(super) mod tests {
    use std::sync::Mutex;

    use oauth2::{HttpRequest, RefreshToken};

    use super::*;
    use crate::providers::Provider;
    use crate::providers::tests::provider;

    /// A refresh through oauth2 whose HTTP answer is `status` and `body`, rewritten as the hook
    /// rewrites it; returns the request oauth2 made and what came of it.
    pub(in crate::providers) async fn refresh_answered(
        provider: &Provider,
        status: u16,
        body: &str,
    ) -> (HttpRequest, Result<TokenResponse, OAuthError>) {
        let sent = Mutex::new(None);
        let status = StatusCode::from_u16(status).expect("status");
        let hook = |request: HttpRequest| {
            *sent.lock().expect("lock") = Some(request);
            let answer = token_answer(status, body.as_bytes(), provider.tokens_at(false));
            async move { answer }
        };
        let result = provider
            .oauth2()
            .exchange_refresh_token(&RefreshToken::new("rt".into()))
            .request_async(&hook)
            .await
            .map(TokenResponse::from)
            .map_err(OAuthError::from);
        (sent.into_inner().expect("lock").expect("a request"), result)
    }

    async fn tokens(status: u16, body: &str) -> Result<TokenResponse, OAuthError> {
        let acme = provider("preset = \"github\"").expect("provider");
        refresh_answered(&acme, status, body).await.1
    }

    #[tokio::test]
    async fn form_encoded_answers_read_like_json() {
        let form = tokens(200, "access_token=gho_a%2Fb&scope=repo%2Cuser&token_type=bearer")
            .await
            .expect("tokens");
        assert_eq!(form.access_token.expose(), "gho_a/b");
        assert_eq!(form.scope.as_deref(), Some("repo,user"));
        assert!(form.refresh_token.is_none() && form.expires_in.is_none());
        let json = tokens(
            200,
            r#"{"access_token":"a","token_type":"bearer","refresh_token":"r","expires_in":3600,"scope":"x  y"}"#,
        )
        .await
        .expect("tokens");
        assert_eq!(json.refresh_token.as_ref().map(|t| t.expose().as_str()), Some("r"));
        assert_eq!(json.expires_in, Some(3600));
        assert_eq!(
            json.scope.as_deref(),
            Some("x  y"),
            "the provider's text, spaces and all"
        );
    }

    #[tokio::test]
    async fn errors_are_refusals_whatever_the_status() {
        for (status, body) in [
            (
                200,
                r#"{"error":"bad_verification_code","error_description":"The code is wrong."}"#,
            ),
            (200, "error=bad_verification_code&error_description=The+code+is+wrong."),
            (
                400,
                r#"{"error":"bad_verification_code","error_description":"The code is wrong."}"#,
            ),
            (
                401,
                r#"{"error":"bad_verification_code","error_description":"The code is wrong.","error_uri":7}"#,
            ),
        ] {
            match tokens(status, body).await {
                Err(OAuthError::Rejected { error, description }) => {
                    assert_eq!(error, "bad_verification_code");
                    assert_eq!(description.as_deref(), Some("The code is wrong."));
                }
                other => panic!("{status} {body}: {other:?}"),
            }
        }
        match tokens(
            400,
            &format!(r#"{{"error":"{}","error_description":7}}"#, "x".repeat(500)),
        )
        .await
        {
            Err(OAuthError::Rejected { error, description }) => {
                assert_eq!(error.len(), 100);
                assert_eq!(description, None);
            }
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn failures_without_an_error_are_unavailable() {
        for (status, body, reason) in [
            (
                503,
                "",
                "answered 503 Service Unavailable with neither JSON nor form data",
            ),
            (502, "<html>Bad gateway</html>", "with neither JSON nor form data"),
            (500, "{}", "answered 500 Internal Server Error"),
            (
                500,
                r#"{"error":{"message":"boom"}}"#,
                "answered 500 Internal Server Error",
            ),
            (200, r#"{"token_type":"bearer"}"#, "sent no access_token"),
            (200, r#"{"access_token":""}"#, "sent no access_token"),
            (200, r#"{"access_token":42}"#, "sent no access_token"),
        ] {
            match tokens(status, body).await {
                Err(OAuthError::Unavailable(message)) => assert!(message.contains(reason), "{body}: {message}"),
                other => panic!("{status} {body}: {other:?}"),
            }
        }
    }

    #[tokio::test]
    async fn lenient_fields_read_as_before() {
        for (expires_in, seconds) in [
            ("3600", Some(3600)),
            ("\"3600\"", Some(3600)),
            ("\"soon\"", None),
            ("-5", None),
            ("1.5", None),
            ("null", None),
        ] {
            let body = format!(r#"{{"access_token":"a","token_type":"bearer","expires_in":{expires_in}}}"#);
            assert_eq!(tokens(200, &body).await.expect(&body).expires_in, seconds, "{body}");
        }
        for token_type in ["\"bearer\"", "\"Bearer\"", "\"BEARER\"", "\"mac\"", "null", "1"] {
            let body = format!(r#"{{"access_token":"a","token_type":{token_type}}}"#);
            assert_eq!(tokens(200, &body).await.expect(&body).access_token.expose(), "a");
        }
        let odd = tokens(200, r#"{"access_token":"a","refresh_token":"","scope":["x"]}"#)
            .await
            .expect("tokens");
        assert!(odd.refresh_token.is_none() && odd.scope.is_none());
    }

    /// What oauth2 is handed for a 200 answer read at `tokens_at`, or why it is handed nothing.
    fn rewritten(tokens_at: TokensAt, body: &str) -> Result<Value, String> {
        match token_answer(StatusCode::OK, body.as_bytes(), tokens_at) {
            Ok(answer) => Ok(serde_json::from_slice(answer.body()).expect("JSON")),
            Err(Unusable(reason)) => Err(reason),
        }
    }

    #[tokio::test]
    async fn nested_tokens_are_read_where_the_provider_puts_them() {
        // Slack's oauth.v2.access: the app's bot token at the top, the user's under authed_user.
        let exchange = r#"{"ok":true,"access_token":"xoxb-bot","token_type":"bot","scope":"commands",
            "refresh_token":"xoxe-1-bot","authed_user":{"id":"U1","scope":"chat:write,channels:history",
            "access_token":"xoxp-user","token_type":"user","refresh_token":"xoxe-1-user","expires_in":43200}}"#;
        assert_eq!(
            rewritten(TokensAt::Nested("/authed_user"), exchange),
            Ok(
                serde_json::json!({"id": "U1", "scope": "chat:write,channels:history", "access_token": "xoxp-user",
                "token_type": "user", "refresh_token": "xoxe-1-user", "expires_in": 43200})
            )
        );
        let bot_only = r#"{"ok":true,"access_token":"xoxb-bot","token_type":"bot"}"#;
        assert_eq!(
            rewritten(TokensAt::Nested("/authed_user"), bot_only),
            Err("the token endpoint sent no `/authed_user` object".into()),
            "a code exchange without the user's tokens has none to store"
        );
        // Its refreshes answer at the top level.
        let slack = provider("preset = \"slack\"").expect("slack");
        let refreshed = r#"{"ok":true,"access_token":"xoxe.xoxp-2","token_type":"user","expires_in":43200,
            "refresh_token":"xoxe-1-next","scope":"chat:write"}"#;
        let tokens = refresh_answered(&slack, 200, refreshed).await.1.expect("tokens");
        assert_eq!(tokens.access_token.expose(), "xoxe.xoxp-2");
        assert_eq!(
            tokens.refresh_token.as_ref().map(|t| t.expose().as_str()),
            Some("xoxe-1-next")
        );
        assert_eq!(tokens.expires_in, Some(43200));
        // Errors come as 200s with ok=false.
        match refresh_answered(&slack, 200, r#"{"ok":false,"error":"invalid_refresh_token"}"#)
            .await
            .1
        {
            Err(OAuthError::Rejected { error, description }) => {
                assert_eq!((error.as_str(), description), ("invalid_refresh_token", None));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn revocations_read_the_status_alone() {
        for status in [StatusCode::OK, StatusCode::NO_CONTENT] {
            let answer = revocation_answer(status).expect("revoked");
            assert_eq!(answer.status(), StatusCode::OK, "oauth2 takes only 200 for done");
        }
        match revocation_answer(StatusCode::BAD_REQUEST) {
            Err(Unusable(reason)) => assert_eq!(reason, "revocation answered 400 Bad Request"),
            Ok(_) => panic!("a 400 is no revocation"),
        }
    }

    #[test]
    fn token_answers_parse_in_json_and_form_encoding() {
        let json = parse_fields(br#"{"access_token":"a","expires_in":3600,"scope":"x y"}"#).expect("json");
        assert_eq!(json["expires_in"], 3600);
        let form = parse_fields(b"access_token=a%2Fb&scope=repo%2Cuser&token_type=bearer").expect("form");
        assert_eq!(form["access_token"], "a/b");
        assert_eq!(form["scope"], "repo,user");
        assert!(parse_fields(b"<html>oops</html>").is_none());
        assert!(parse_fields(b"").is_none());
    }
}
