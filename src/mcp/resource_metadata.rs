//! RFC 9728 Protected Resource Metadata, in `oauth` identity mode: where an MCP client that got a
//! 401 from `/mcp` learns which authorization server issues tokens for it and with what scopes.
//! Public, so any origin may read it; other modes have none (404).

use axum::extract::State;
use axum::http::StatusCode;
use axum::http::header::{ACCESS_CONTROL_ALLOW_ORIGIN, CACHE_CONTROL};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::json;

use super::state::McpState;
use crate::routes;

pub fn router() -> Router<McpState> {
    Router::new()
        .route(routes::RESOURCE_METADATA, get(metadata))
        .route(routes::ROOT_RESOURCE_METADATA, get(metadata))
}

async fn metadata(State(state): State<McpState>) -> Response {
    match state.identity.resource_server() {
        Some(server) => (
            [(ACCESS_CONTROL_ALLOW_ORIGIN, "*"), (CACHE_CONTROL, "public, max-age=3600")],
            Json(server.metadata_document()),
        )
            .into_response(),
        None => (
            StatusCode::NOT_FOUND,
            Json(json!({"error": "not_found", "error_description": "this server is not an OAuth-protected resource (identity.mode is not `oauth`)"})),
        )
            .into_response(),
    }
}
