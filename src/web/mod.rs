//! Browser- and operator-facing routes: the landing page, health checks, and the pages users
//! open from elicitations. Pages are responses rendered by one layer (with the operator's
//! templates); every response here carries the page security headers.

mod connect;
mod connections;
mod error;
mod extract;
mod forms;
mod response;
pub mod templates;

use askama::Template;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router, middleware};
use serde::Serialize;
use serde_json::json;

use crate::mcp::MCP_PATH;
use crate::state::AppState;
use response::PageResponse;
use templates::impl_page;

pub fn router(state: &AppState) -> Router<AppState> {
    Router::new()
        .route("/", get(index))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .merge(connect::router())
        .merge(forms::router())
        .merge(connections::router())
        .layer(middleware::from_fn_with_state(state.clone(), response::render_pages))
        .layer(middleware::map_response(response::security_headers))
}

#[derive(Template, Serialize)]
#[template(path = "index.html", blocks = ["title", "content"])]
struct IndexPage {
    mcp_url: String,
    version: &'static str,
    tools: Vec<String>,
}
impl_page!(IndexPage, "index.html");

async fn index(State(state): State<AppState>) -> PageResponse {
    let (tools, _) = state.tools.page(0, usize::MAX);
    PageResponse::new(IndexPage {
        mcp_url: state.public_url.at(MCP_PATH),
        version: env!("CARGO_PKG_VERSION"),
        tools: tools.iter().map(|t| t.definition().name.clone()).collect(),
    })
}

/// The process is up.
async fn healthz() -> &'static str {
    "ok"
}

/// The database answers, its migrations are applied and (on PostgreSQL) the bus is listening.
async fn readyz(State(state): State<AppState>) -> Response {
    let database = state.store.check_ready().await;
    let bus = state.bus.is_connected();
    match (&database, bus) {
        (Ok(()), true) => Json(json!({"status": "ready"})).into_response(),
        _ => {
            if let Err(error) = &database {
                tracing::warn!(%error, "not ready: database");
            }
            let body = json!({
                "status": "not ready",
                "database": if database.is_ok() { "ok" } else { "unavailable" },
                "bus": if bus { "ok" } else { "reconnecting" },
            });
            (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response()
        }
    }
}
