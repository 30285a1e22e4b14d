//! How the fake OAuth provider (`fake_oauth`) answers in its Slack dialect
//! ([`Dialect::Slack`](super::Dialect)), the way Slack's OAuth v2 does
//! (docs.slack.dev, "Installing with OAuth" and "Using token rotation"):
//!
//! * `/authorize` reads the user token's scopes from `user_scope` (comma-separated); `scope` would
//!   ask for the app's bot token.
//! * `oauth.v2.access` (`/token`) answers a code exchange with the app's bot token at the top
//!   level and the user's tokens under `authed_user` (with `refresh_token` and `expires_in` when
//!   token rotation is on), and a refresh at the top level with `token_type` "user".
//! * Every error is an HTTP 200 `{"ok": false, "error": ...}`, Slack's own error names.
//! * The Web API (`/api/auth.test`, `/api/chat.postMessage`) answers `ok` and the user's name, and
//!   a bad token with HTTP 200 `{"ok": false, "error": "invalid_auth"}`.

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

/// The app's own bot token, sent beside every user token (it must never be used as the user's).
pub const BOT_TOKEN: &str = "xoxb-fake-bot-token";

/// The name of Slack's refusal for an RFC 6749 error the fake decided on.
fn slack_error(error: &str, description: &str) -> &'static str {
    match error {
        "invalid_client" => "invalid_client_id",
        "invalid_grant" if description.contains("refresh") => "invalid_refresh_token",
        "invalid_grant" => "invalid_code",
        "unsupported_grant_type" => "invalid_grant_type",
        _ => "invalid_arguments",
    }
}

fn ok_json(body: Value) -> Response {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json; charset=utf-8")],
        body.to_string(),
    )
        .into_response()
}

/// A refusal: HTTP 200 with `ok: false`.
pub fn error(error: &str, description: &str) -> Response {
    ok_json(json!({"ok": false, "error": slack_error(error, description)}))
}

/// The token fields the fake issued, as a JSON object with `token_type` "user".
fn user_tokens(fields: &[(&str, Value)]) -> Map<String, Value> {
    let mut tokens: Map<String, Value> = fields.iter().map(|(k, v)| ((*k).to_owned(), v.clone())).collect();
    tokens.insert("token_type".into(), json!("user"));
    tokens
}

/// oauth.v2.access's answer to a code exchange of `user` (`fields` as the fake issued them).
pub fn exchange_answer(user: &str, fields: &[(&str, Value)]) -> Response {
    let mut authed_user = user_tokens(fields);
    authed_user.insert("id".into(), json!(format!("U{}", user.to_uppercase())));
    ok_json(json!({
        "ok": true,
        "app_id": "AFAKEAPP",
        "access_token": BOT_TOKEN,
        "token_type": "bot",
        "scope": "commands",
        "bot_user_id": "UFAKEBOT",
        "team": {"id": "TFAKE", "name": "Fake Team"},
        "enterprise": null,
        "is_enterprise_install": false,
        "authed_user": authed_user,
    }))
}

/// oauth.v2.access's answer to a refresh of a user token: the new tokens at the top level.
pub fn refresh_answer(fields: &[(&str, Value)]) -> Response {
    let mut answer = user_tokens(fields);
    answer.insert("ok".into(), json!(true));
    answer.insert("app_id".into(), json!("AFAKEAPP"));
    answer.insert("team".into(), json!({"id": "TFAKE", "name": "Fake Team"}));
    ok_json(Value::Object(answer))
}

/// A Web API method's answer for the signed-in `user`, or `None`'s `invalid_auth`.
pub fn api_answer(user: Option<&str>) -> Response {
    match user {
        Some(user) => ok_json(
            json!({"ok": true, "user": user, "team": "Fake Team", "user_id": format!("U{}", user.to_uppercase())}),
        ),
        None => ok_json(json!({"ok": false, "error": "invalid_auth"})),
    }
}
