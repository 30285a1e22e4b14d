//! gatehouse: an MCP server that gates tools behind what only a person in a browser can do.
//!
//! `app` builds the router and `serve` runs it on a listener until a shutdown future completes;
//! tests run exactly this on port 0.

pub mod config;
pub mod domain;
mod error;
pub mod events;
pub mod gate;
pub mod identity;
pub mod mcp;
pub mod secret;
pub mod state;
pub mod store;
pub mod tools;
mod web;

use std::future::Future;
use std::net::SocketAddr;

use axum::Router;
use tokio::net::TcpListener;
use tower_http::trace::TraceLayer;

pub use config::Config;
pub use state::AppState;

pub fn app(state: AppState) -> Router {
    Router::new().merge(mcp::router()).merge(web::router()).layer(TraceLayer::new_for_http()).with_state(state)
}

/// Serves until `shutdown` completes, then cancels the state's shutdown token so open streams end
/// (after a `retry:` hint) and waits for in-flight requests.
pub async fn serve(listener: TcpListener, state: AppState, shutdown: impl Future<Output = ()> + Send + 'static) -> std::io::Result<()> {
    let token = state.shutdown.clone();
    let router = app(state);
    axum::serve(listener, router.into_make_service_with_connect_info::<SocketAddr>())
        .with_graceful_shutdown(async move {
            shutdown.await;
            token.cancel();
        })
        .await
}
