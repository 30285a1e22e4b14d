//! Browser- and operator-facing routes: the landing page, health checks, the pages users open
//! from elicitations, and the operator pages under `/admin`. Pages are responses rendered by one layer (with the operator's
//! templates); every response here carries the page security headers. The pages' own parts
//! (templates, sign-in, request limit) are their router state, `PagesState`.

mod admin;
mod approvals;
mod browser_sessions;
mod connect;
mod connections;
mod cookies;
mod error;
mod extract;
mod forms;
mod layers;
mod page;
mod sign_in;
mod state;
pub mod templates;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::http::header::{CACHE_CONTROL, RETRY_AFTER};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router, middleware};
use serde::Serialize;
use serde_json::json;
use std::time::Duration;

use crate::edge::{AllowedPostOrigin, DatabaseUp, KnownHost, RETRY_AFTER_SECONDS};
use crate::instance::InstanceNonce;
use crate::routes;
pub use layers::security_headers;
use page::PageResponse;
pub use state::PagesState;
use templates::Page;

pub fn router(state: &PagesState) -> Router<PagesState> {
    let pages = Router::new()
        .route(routes::INDEX, get(index))
        .merge(
            Router::new()
                .merge(connect::router())
                .merge(forms::router())
                .merge(connections::router())
                .merge(approvals::router())
                .merge(sign_in::router())
                .merge(admin::router(state))
                .layer(middleware::from_extractor_with_state::<DatabaseUp, _>(state.clone())),
        )
        .layer(middleware::from_fn_with_state(state.clone(), layers::limit_requests));
    Router::new()
        .route(routes::HEALTHZ, get(healthz))
        .route(routes::READYZ, get(readyz))
        .route(routes::INSTANCE, get(instance))
        .route(routes::CLIENT_METADATA, get(client_metadata))
        .merge(pages)
        // On a loopback-bound instance a `Host` that is not this server's name is refused, as
        // `/mcp` refuses it; a post from another site's page is refused by its `Origin`, by the
        // rule of `/mcp`, before its body is read.
        .layer(middleware::from_extractor_with_state::<(KnownHost, AllowedPostOrigin), _>(state.clone()))
        .layer(middleware::from_fn_with_state(state.clone(), layers::render_pages))
        .layer(middleware::map_response(layers::security_headers))
}

#[derive(Serialize)]
struct IndexPage {
    mcp_url: String,
    version: &'static str,
    tools: Vec<ToolLine>,
    /// In demo mode, the tool to try first and why.
    try_first: Option<TryFirstLine>,
}
impl Page for IndexPage {
    const NAME: &'static str = "index.html";
}

/// A tool as the landing page lists it: as its definition names and describes it.
#[derive(Serialize)]
struct ToolLine {
    name: String,
    title: Option<String>,
    description: String,
}

#[derive(Serialize)]
struct TryFirstLine {
    tool: String,
    why: String,
}

async fn index(State(state): State<PagesState>) -> PageResponse {
    let tools = state.tools.all().iter().cloned().chain(state.upstreams.tools());
    let tools: Vec<ToolLine> = tools
        .map(|t| {
            let definition = t.definition();
            ToolLine {
                name: definition.name.clone(),
                title: definition.title.clone(),
                description: definition.description.clone(),
            }
        })
        .collect();
    let try_first = state
        .config
        .demo
        .as_ref()
        .filter(|first| tools.iter().any(|t| t.name == first.tool))
        .map(|first| TryFirstLine {
            tool: first.tool.clone(),
            why: first.why.clone(),
        });
    PageResponse::new(IndexPage {
        mcp_url: state.public_url.at(routes::MCP),
        version: env!("CARGO_PKG_VERSION"),
        tools,
        try_first,
    })
}

/// The process is up.
async fn healthz() -> &'static str {
    "ok"
}

/// gatehouse's Client ID Metadata Document at the authorization server of the `auth = "mcp"`
/// upstream `upstream`, listing its redirect URI alone; 404 unless gatehouse signs in there with
/// it (see `gate::connections::remote`).
async fn client_metadata(State(state): State<PagesState>, Path(upstream): Path<String>) -> Response {
    let Some((document_url, redirect_uri)) = state.gate.connections().metadata_document(&upstream).await else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let document = crate::providers::registration::client_metadata_document(&document_url, &redirect_uri);
    ([(CACHE_CONTROL, "public, max-age=3600")], Json(document)).into_response()
}

/// This process's nonce (`crate::instance`), which `gatehouse doctor` compares.
async fn instance(State(state): State<PagesState>) -> Response {
    instance_answer(&state.instance)
}

/// Only [`routes::INSTANCE`] (also under the public URL's path `prefix`), answering `nonce`: what
/// `gatehouse doctor` serves on `server.bind` while no server does, to see whether
/// `server.public_url` reaches it.
pub fn instance_only(nonce: InstanceNonce, prefix: &str) -> Router {
    let routes = Router::new().route(routes::INSTANCE, get(move || async move { instance_answer(&nonce) }));
    crate::path_prefix::serve_under(prefix, routes)
}

fn instance_answer(nonce: &InstanceNonce) -> Response {
    ([(CACHE_CONTROL, "no-store")], nonce.as_str().to_owned()).into_response()
}

/// How long `/readyz` waits for the database: a load balancer's probe must not hang for the
/// pool's acquire timeout during an outage.
const READY_CHECK_TIMEOUT: Duration = Duration::from_secs(1);

/// The database answers, its migrations are applied and (on PostgreSQL) the bus is listening.
/// What is known without asking comes first: a reconnecting bus answers 503 at once.
async fn readyz(State(state): State<PagesState>) -> Response {
    if !state.bus.is_connected() {
        return not_ready("unchecked", "reconnecting");
    }
    match tokio::time::timeout(READY_CHECK_TIMEOUT, state.store.check_ready()).await {
        Ok(Ok(())) => Json(json!({"status": "ready"})).into_response(),
        Ok(Err(error)) => {
            tracing::warn!(%error, "not ready: database");
            not_ready("unavailable", "ok")
        }
        Err(_) => {
            tracing::warn!(timeout = ?READY_CHECK_TIMEOUT, "not ready: the database did not answer in time");
            not_ready("unavailable", "ok")
        }
    }
}

/// 503 naming what is not ready, with a hint to probe again in a second.
fn not_ready(database: &str, bus: &str) -> Response {
    let body = json!({"status": "not ready", "database": database, "bus": bus});
    (
        StatusCode::SERVICE_UNAVAILABLE,
        [(RETRY_AFTER, RETRY_AFTER_SECONDS)],
        Json(body),
    )
        .into_response()
}

#[cfg(test)]
pub(crate) fn samples() -> Vec<templates::Sample> {
    let tool = |name: &str, title: Option<&str>, description: &str| ToolLine {
        name: name.to_owned(),
        title: title.map(str::to_owned),
        description: description.to_owned(),
    };
    let page = |try_first| IndexPage {
        mcp_url: "https://gatehouse.example/gh/mcp".to_owned(),
        version: "0.1.0",
        tools: vec![tool("echo", Some("Echo"), "Says it back"), tool("say_<hi>", None, "")],
        try_first,
    };
    vec![
        templates::Sample::of(page(None)),
        templates::Sample::of(page(Some(TryFirstLine {
            tool: "echo".to_owned(),
            why: "it <echoes>.".to_owned(),
        }))),
    ]
}
