//! The service the demo tools call, served on gatehouse's own address in demo mode only. It
//! answers with what reached it, so the user sees that an API key went to the service (its length
//! and last 4 characters, never the key) and that a confirmed action arrived; it does nothing else.

use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;

use crate::routes;

/// The header the demo tool sends the user's key in.
const API_KEY_HEADER: &str = "x-api-key";

/// The demo service's routes ([`routes::DEMO_SERVICE`], [`routes::DEMO_SEND`]).
pub fn router() -> Router {
    Router::new()
        .route(routes::DEMO_SERVICE, get(service))
        .route(routes::DEMO_SEND, post(send))
}

/// What the service makes of the API key it was sent: its length and last 4 characters.
async fn service(headers: HeaderMap) -> Response {
    let Some(key) = headers.get(API_KEY_HEADER).and_then(|value| value.to_str().ok()) else {
        let body = json!({"error": "Demo service: no API key in the X-Api-Key header."});
        return (StatusCode::UNAUTHORIZED, Json(body)).into_response();
    };
    let length = key.chars().count();
    let last4: String = key.chars().skip(length.saturating_sub(4)).collect();
    Json(json!({
        "service": "gatehouse's demo service",
        "received": format!("an API key of {length} characters ending in '{last4}'"),
        "note": "Demo: the key went from gatehouse's form to this service in a header; the model sees only this answer.",
    }))
    .into_response()
}

#[derive(Deserialize)]
struct Email {
    to: String,
    subject: String,
}

/// A confirmed email, which the demo does not send.
async fn send(Json(email): Json<Email>) -> Json<serde_json::Value> {
    Json(json!({
        "sent": false,
        "message": format!(
            "Demo: the user confirmed sending '{}' to {} in the browser; nothing was sent.",
            email.subject, email.to
        ),
    }))
}
