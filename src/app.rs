//! The assembly: `App::build` builds the whole application from the configuration (the shared
//! state, the MCP endpoint's and the pages' router states, and every background task), and its
//! routers put the endpoint and the pages behind the common layers (request spans and logs, the
//! unread-body guard, the public URL's path prefix). `metrics_router` is the metrics listener's.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{MatchedPath, State};
use axum::http::StatusCode;
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tower_http::classify::ServerErrorsFailureClass;
use tower_http::trace::{DefaultOnResponse, OnResponse, TraceLayer};

use crate::config::Config;
use crate::mcp::{self, McpState};
use crate::state::{AppState, StartError};
use crate::web::templates::Templates;
use crate::web::{self, PagesState};
use crate::{demo, metrics, path_prefix, telemetry, unread_body};

/// The application: the shared state, and the router states of the endpoint and of the pages
/// over it. Cloning it clones three pointers.
#[derive(Clone)]
pub struct App {
    pub state: AppState,
    pub mcp: McpState,
    pub pages: PagesState,
}

impl App {
    /// Checks the configuration, opens the database (migrating it when configured to) and starts
    /// the background tasks, which stop when `shutdown` is cancelled.
    pub async fn build(config: Config, shutdown: CancellationToken) -> Result<(Self, Vec<JoinHandle<()>>), StartError> {
        Self::build_resolving(config, crate::outbound::system_resolver(), shutdown).await
    }

    /// [`App::build`], every outbound request resolving names with `resolver` (tests use their
    /// own to change what a name resolves to).
    pub async fn build_resolving(
        config: Config,
        resolver: Arc<dyn reqwest::dns::Resolve>,
        shutdown: CancellationToken,
    ) -> Result<(Self, Vec<JoinHandle<()>>), StartError> {
        // The templates first: a broken template directory stops the start before anything opens.
        let templates = Templates::load(config.server.template_dir.as_deref())?;
        let extra = mcp::extra_tools(&config);
        let (state, mut tasks) = AppState::build(config, extra, resolver, shutdown).await?;
        let pages = PagesState::new(state.clone(), templates)?;
        let mcp = McpState::start(state.clone(), &mut tasks);
        Ok((Self { state, mcp, pages }, tasks))
    }

    /// The MCP endpoint and the pages (and in demo mode the demo service and sign-in provider):
    /// what `gatehouse serve` serves.
    pub fn router(&self) -> Router {
        let mut routes = Router::new()
            .merge(mcp::router().with_state(self.mcp.clone()))
            .merge(web::router(&self.pages).with_state(self.pages.clone()));
        if self.state.config.demo.is_some() {
            let demo =
                demo::router(&self.state.public_url).layer(axum::middleware::map_response(web::security_headers));
            routes = routes.merge(demo);
        }
        self.layered(routes)
    }

    /// The pages without the MCP endpoint: what `gatehouse stdio` serves on its loopback listener.
    pub fn pages_router(&self) -> Router {
        self.layered(web::router(&self.pages).with_state(self.pages.clone()))
    }

    /// The routes with the common layers, reached with or without the public URL's path prefix.
    fn layered(&self, routes: Router) -> Router {
        let routes = routes
            .layer(axum::middleware::from_fn(unread_body::close_if_unread))
            .layer(
                TraceLayer::new_for_http()
                    .make_span_with(request_span)
                    .on_response(on_response)
                    .on_failure(log_failure),
            );
        path_prefix::serve_under(self.state.public_url.prefix(), routes)
    }
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
pub fn metrics_router(state: AppState) -> Router {
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
