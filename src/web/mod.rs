//! Browser- and operator-facing routes: the landing page, health checks, and the pages users
//! open from elicitations.

mod browser;
mod connect;
mod connections;
mod forms;
pub mod pages;

use askama::Template;
use axum::extract::State;
use axum::http::header::{
    CACHE_CONTROL, CONTENT_SECURITY_POLICY, REFERRER_POLICY, X_CONTENT_TYPE_OPTIONS, X_FRAME_OPTIONS,
};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::Serialize;
use serde_json::json;

use pages::{Page, page as page_template};

use crate::error::AppError;
use crate::mcp::MCP_PATH;
use crate::state::AppState;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/", get(index))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .merge(connect::router())
        .merge(forms::router())
        .merge(connections::router())
}

#[derive(Template, Serialize)]
#[template(path = "index.html", blocks = ["title", "content"])]
struct IndexPage {
    mcp_url: String,
    version: &'static str,
    tools: Vec<String>,
}
page_template!(IndexPage, "index.html");

/// Renders a page (the operator's version when there is one) with the headers every gatehouse
/// page sends.
pub fn page(state: &AppState, template: &impl Page) -> Result<Response, AppError> {
    let mut response = Html(state.pages.render(template)?).into_response();
    let headers = response.headers_mut();
    headers.insert(
        CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("default-src 'none'; style-src 'self' 'unsafe-inline'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"),
    );
    headers.insert(X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    // Not `no-referrer`: under it browsers send `Origin: null` with the page's own form posts,
    // which the origin check must refuse. `same-origin` still tells other sites nothing.
    headers.insert(REFERRER_POLICY, HeaderValue::from_static("same-origin"));
    headers.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    Ok(response)
}

async fn index(State(state): State<AppState>) -> Result<Response, AppError> {
    let mcp_url = state
        .config
        .public_url()
        .join(MCP_PATH)
        .map(|u| u.to_string())
        .unwrap_or_default();
    let (tools, _) = state.tools.page(0, usize::MAX);
    page(
        &state,
        &IndexPage {
            mcp_url,
            version: env!("CARGO_PKG_VERSION"),
            tools: tools.iter().map(|t| t.definition().name.clone()).collect(),
        },
    )
}

/// The process is up.
async fn healthz() -> &'static str {
    "ok"
}

/// The database answers, its migrations are applied and (on PostgreSQL) the bus is listening.
async fn readyz(State(state): State<AppState>) -> Response {
    let database = state.store.check_ready().await;
    let bus = state.bus.hub().is_connected();
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
