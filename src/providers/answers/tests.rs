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
