//! gatehouse: an MCP server that gates tools behind what only a person in a browser can do.
//!
//! `app` builds the router and `serve` runs it on a listener until a shutdown future completes;
//! tests run exactly this on port 0. `serve_metrics` serves `/metrics` on a listener of its own
//! (`server.metrics_bind`), `serve_pages` the browser pages alone (`gatehouse stdio`). `cli` is
//! the program the binaries run ([`binary!`]).
//!
//! Unit tests close the file they test (`#[cfg(test)] mod tests { ... }`), or, when that would take
//! it past 600 lines, sit in `tests.rs` in the module's own folder (`foo.rs` and `foo/mod.rs` both
//! have `foo/tests.rs`), never behind `#[path]`.

pub mod audit;
pub mod cli;
pub mod clock;
pub mod config;
pub mod domain;
pub mod events;
pub mod forms;
pub mod gate;
pub mod identity;
pub mod instance;
pub mod jsonrpc;
pub mod mcp;
pub mod metrics;
pub mod outbound;
pub mod path_prefix;
pub mod private_file;
pub mod providers;
pub mod public_url;
pub mod rate_limit;
pub mod retention;
pub mod secret;
pub mod state;
pub mod store;
pub mod telemetry;
pub mod text;
pub mod tools;
pub mod unread_body;
pub mod upstreams;
pub mod vault;
pub mod web;

use std::future::Future;
use std::time::Duration;

use axum::Router;
use axum::extract::{ConnectInfo, MatchedPath, State};
use axum::http::StatusCode;
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tower::ServiceExt;
use tower_http::classify::ServerErrorsFailureClass;
use tower_http::trace::{DefaultOnResponse, OnResponse, TraceLayer};

pub use config::Config;
pub use state::AppState;
#[doc(hidden)]
pub use tikv_jemallocator;

/// A binary's whole source: jemalloc as the allocator, then [`cli::main`].
///
/// jemalloc keeps an idle SSE connection's memory small: the unwritten pages of hyper's
/// per-connection buffers stay out of resident memory. See the README's benchmark figures.
/// Freed pages go back to the OS at once instead of after jemalloc's default 10 s decay: with
/// thousands of streams opening in a burst that halves resident memory, at no measured cost in
/// throughput. `_RJEM_MALLOC_CONF` in the environment still overrides it.
#[macro_export]
macro_rules! binary {
    () => {
        #[global_allocator]
        static ALLOCATOR: $crate::tikv_jemallocator::Jemalloc = $crate::tikv_jemallocator::Jemalloc;

        #[allow(non_upper_case_globals)]
        #[unsafe(export_name = "_rjem_malloc_conf")]
        static malloc_conf: &[u8] = b"dirty_decay_ms:0,muzzy_decay_ms:0\0";

        fn main() -> std::process::ExitCode {
            $crate::cli::main()
        }
    };
}

/// hyper's HTTP/1 read buffer limit: 8 KiB (its minimum) holds any sane request head and keeps an
/// idle SSE connection small.
const HTTP1_MAX_BUFFER: usize = 8 * 1024;
/// A client must send its request head within this time, so idle half-open connections go away.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

pub fn app(state: AppState) -> Router {
    let routes = Router::new().merge(mcp::router()).merge(web::router(&state));
    layered(routes, state)
}

/// The pages without the MCP endpoint: what `gatehouse stdio` serves on its loopback listener.
pub fn pages_app(state: AppState) -> Router {
    let routes = web::router(&state);
    layered(routes, state)
}

/// The routes with the common layers, reached with or without the public URL's path prefix.
fn layered(routes: Router<AppState>, state: AppState) -> Router {
    let prefix = state.public_url.prefix().to_owned();
    let routes = routes
        .layer(axum::middleware::from_fn(unread_body::close_if_unread))
        .layer(
            TraceLayer::new_for_http()
                .make_span_with(request_span)
                .on_response(on_response)
                .on_failure(log_failure),
        )
        .with_state(state);
    path_prefix::serve_under(&prefix, routes)
}

/// A response that failed (5xx), at the level it deserves: a bad or slow gateway is another
/// service's fault (a provider that answered with an error), and 503 a database outage, WARN;
/// anything else is ours, ERROR. The cause was logged, with context, where it happened.
fn log_failure(class: ServerErrorsFailureClass, latency: Duration, _span: &tracing::Span) {
    match class {
        ServerErrorsFailureClass::StatusCode(status)
            if matches!(
                status,
                StatusCode::BAD_GATEWAY | StatusCode::SERVICE_UNAVAILABLE | StatusCode::GATEWAY_TIMEOUT
            ) =>
        {
            tracing::warn!(%status, ?latency, "response failed");
        }
        class => tracing::error!(classification = %class, ?latency, "response failed"),
    }
}

/// The span every request's logs carry. It records the path only, for every route: a query can
/// hold secrets (the OAuth callback's `code` and `state`), and tower-http's default span would
/// record the whole URI at every debug line of the request. When traces are exported it is an
/// OpenTelemetry server span with the route instead (a page's path holds an elicitation's id),
/// child of the client's `traceparent`.
fn request_span<B>(request: &axum::http::Request<B>) -> tracing::Span {
    if !telemetry::enabled() {
        return tracing::debug_span!(
            "request",
            method = %request.method(),
            path = %request.uri().path(),
            version = ?request.version(),
        );
    }
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or("unmatched", MatchedPath::as_str);
    let span = tracing::debug_span!(
        "request",
        otel.name = %format_args!("{} {route}", request.method()),
        otel.kind = "server",
        http.request.method = %request.method(),
        http.route = route,
        network.protocol.version = ?request.version(),
        http.response.status_code = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    );
    telemetry::set_remote_parent(&span, request.headers());
    span
}

/// tower-http's response log, and the status on the span when traces are exported.
fn on_response<B>(response: &axum::http::Response<B>, latency: Duration, span: &tracing::Span) {
    if telemetry::enabled() {
        telemetry::record_status(span, response.status());
    }
    DefaultOnResponse::default().on_response(response, latency, span);
}

/// The metrics listener's routes: `GET /metrics` only, Prometheus's scrape.
pub fn metrics_app(state: AppState) -> Router {
    Router::new().route("/metrics", get(scrape)).with_state(state)
}

/// The metrics as OpenMetrics text, with the database pool as it is at the scrape.
async fn scrape(State(state): State<AppState>) -> Response {
    let pool = state.store.pool_stats();
    state.metrics.set_pool(pool.open, pool.idle, pool.max);
    match state.metrics.encode() {
        Ok(text) => ([(CONTENT_TYPE, metrics::CONTENT_TYPE)], text).into_response(),
        Err(error) => {
            tracing::error!(%error, "cannot encode the metrics");
            StatusCode::INTERNAL_SERVER_ERROR.into_response()
        }
    }
}

/// Serves HTTP/1.1 until `shutdown` completes, then closes the listening socket (new connections
/// are refused from then on), cancels the state's shutdown token so open streams end (after a
/// `retry:` hint) and waits for in-flight requests.
///
/// HTTP/1.1 only: MCP clients and reverse proxies speak it to upstreams, and an HTTP/1-only
/// connection costs about half the memory of one that could also be HTTP/2, which counts with
/// thousands of idle SSE streams (see the README's benchmark).
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let token = state.shutdown.clone();
    serve_router(listener, app(state), shutdown, move || token.cancel()).await
}

/// Serves [`pages_app`] until `shutdown` completes (`gatehouse stdio`'s browser pages).
pub async fn serve_pages(
    listener: TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_router(listener, pages_app(state), shutdown, || {}).await
}

/// Serves [`metrics_app`] until `shutdown` completes (the binary binds `server.metrics_bind`;
/// tests bind port 0). Never the public listener: `/metrics` there is 404.
pub async fn serve_metrics(
    listener: TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_router(listener, metrics_app(state), shutdown, || {}).await
}

/// The accept loop of [`serve`], [`serve_pages`] and [`serve_metrics`]; `closed` runs once the listening socket
/// is closed, before in-flight requests are waited for.
async fn serve_router(
    listener: TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
    closed: impl FnOnce(),
) -> std::io::Result<()> {
    let mut builder = http1::Builder::new();
    builder
        .max_buf_size(HTTP1_MAX_BUFFER)
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT);
    let graceful = GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of file descriptors, typically: wait instead of spinning.
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        // Small SSE events must leave at once, not wait for Nagle's algorithm.
        if let Err(error) = stream.set_nodelay(true) {
            tracing::debug!(%error, "cannot set TCP_NODELAY");
        }
        let router = router.clone();
        let service = hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
            request.extensions_mut().insert(ConnectInfo(peer));
            router.clone().oneshot(request)
        });
        let connection = graceful.watch(builder.serve_connection(TokioIo::new(stream), service));
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%peer, error = %error, "connection ended with an error");
            }
        });
    }
    // Close the listening socket before draining: new connections are refused at once, so a
    // proxy fails over instead of waiting in the backlog until the process exits.
    drop(listener);
    closed();
    graceful.shutdown().await;
    Ok(())
}
