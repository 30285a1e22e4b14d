//! Traces (`[telemetry] otlp_endpoint`): the OpenTelemetry layer that exports gatehouse's spans
//! over OTLP/HTTP (protobuf, to `<endpoint>/v1/traces`), the spans of MCP requests and outgoing HTTP calls, and W3C `traceparent` taken
//! from incoming requests and put on outgoing ones.
//!
//! The spans are DEBUG spans of gatehouse's own targets: without an endpoint the log filter
//! (`RUST_LOG`, INFO by default) disables them and nothing is propagated. With one, a filter of
//! the OpenTelemetry layer's own enables them for it alone, so logs read as before. No span
//! carries a secret: no session id, token, argument value or query string.

use std::sync::atomic::{AtomicBool, Ordering};

use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::{Map, Value};
use tracing::{Instrument, Span};
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::Layer;
use tracing_subscriber::filter::FilterFn;
use tracing_subscriber::registry::LookupSpan;
use url::Url;

use crate::config::TelemetryConfig;

/// Set once the OpenTelemetry layer is installed: only then is there a trace to propagate.
static ENABLED: AtomicBool = AtomicBool::new(false);

/// The exporter of a running process; [`Telemetry::shutdown`] sends the spans still batched.
pub struct Telemetry {
    provider: SdkTracerProvider,
}

impl Telemetry {
    /// The OpenTelemetry layer exporting to `config.otlp_endpoint` in batches, and what flushes
    /// it. Must run within a Tokio runtime (each export's request runs on it), which must outlive
    /// [`Telemetry::shutdown`].
    pub fn start<S>(
        config: &TelemetryConfig,
        endpoint: &Url,
        http: reqwest::Client,
    ) -> Result<(Self, impl Layer<S>), opentelemetry_otlp::ExporterBuildError>
    where
        S: tracing::Subscriber + for<'span> LookupSpan<'span>,
    {
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
            .with_endpoint(traces_url(endpoint))
            .with_http_client(Exports {
                http,
                runtime: tokio::runtime::Handle::current(),
            })
            .build()?;
        let resource = opentelemetry_sdk::Resource::builder()
            .with_service_name(config.service_name.clone())
            .build();
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource)
            .build();
        let layer = tracing_opentelemetry::layer()
            .with_tracer(provider.tracer("gatehouse"))
            .with_location(false)
            .with_threads(false)
            .with_tracked_inactivity(false)
            .with_filter(FilterFn::new(exported));
        ENABLED.store(true, Ordering::Relaxed);
        Ok((Self { provider }, layer))
    }

    /// Exports what is still batched and stops the exporter; blocks until then.
    pub fn shutdown(self) {
        ENABLED.store(false, Ordering::Relaxed);
        if let Err(error) = self.provider.shutdown() {
            eprintln!("gatehouse: the last traces were not exported: {error}");
        }
    }
}

/// Where spans are posted: `<endpoint>/v1/traces`, as OTLP/HTTP puts a signal under a collector's
/// base URL (an endpoint that already ends so is taken as it is).
fn traces_url(endpoint: &Url) -> String {
    let base = endpoint.as_str().trim_end_matches('/');
    if base.ends_with("/v1/traces") {
        base.to_owned()
    } else {
        format!("{base}/v1/traces")
    }
}

/// The exporter's HTTP client: gatehouse's outbound client, each request run on the Tokio
/// runtime the exporter was started on (the batch exporter calls from a thread of its own, where
/// no runtime is), its answer read within [`MAX_EXPORT_ANSWER`].
#[derive(Debug)]
struct Exports {
    http: reqwest::Client,
    runtime: tokio::runtime::Handle,
}

/// A collector's answer to an export is a small protobuf message; more is not read.
const MAX_EXPORT_ANSWER: usize = 64 * 1024;
/// Time allowed for one export.
const EXPORT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

#[async_trait::async_trait]
impl opentelemetry_http::HttpClient for Exports {
    async fn send_bytes(
        &self,
        request: axum::http::Request<bytes::Bytes>,
    ) -> Result<axum::http::Response<bytes::Bytes>, opentelemetry_http::HttpError> {
        let mut request = reqwest::Request::try_from(request)?;
        *request.timeout_mut() = Some(EXPORT_TIMEOUT);
        let http = self.http.clone();
        let exported = self.runtime.spawn(async move {
            let response = http.execute(request).await.map_err(|e| e.to_string())?;
            let status = response.status();
            let body = crate::outbound::read_bounded(response, MAX_EXPORT_ANSWER)
                .await
                .map_err(|e| e.to_string())?;
            Ok::<_, String>((status, body))
        });
        let (status, body) = exported.await??;
        Ok(axum::http::Response::builder()
            .status(status)
            .body(bytes::Bytes::from(body))?)
    }
}

/// What the OpenTelemetry layer sees: gatehouse's spans, and warnings and errors as span events.
fn exported(metadata: &tracing::Metadata<'_>) -> bool {
    if metadata.is_span() {
        metadata.target().starts_with("gatehouse") && *metadata.level() <= tracing::Level::DEBUG
    } else {
        *metadata.level() <= tracing::Level::WARN
    }
}

/// Whether spans are exported (and so `traceparent` propagated).
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Makes the trace of an incoming request's `traceparent` the parent of `span`.
pub fn set_remote_parent(span: &Span, headers: &HeaderMap) {
    if !enabled() || !headers.contains_key(TRACEPARENT) {
        return;
    }
    let context = TraceContextPropagator::new().extract(&Headers(headers));
    // Fails only for a span the layer does not see; it then has no trace to join.
    let _ = span.set_parent(context);
}

/// Puts `span`'s `traceparent` (and `tracestate`) on an outgoing request.
pub fn inject(span: &Span, headers: &mut HeaderMap) {
    if !enabled() {
        return;
    }
    TraceContextPropagator::new().inject_context(&span.context(), &mut HeadersMut(headers));
}

/// The W3C Trace Context headers (and, by the same names, MCP's `_meta` keys).
pub const TRACEPARENT: &str = "traceparent";
pub const TRACESTATE: &str = "tracestate";

/// The span of one MCP request: its JSON-RPC method and, for `tools/call`, the tool its `params`
/// name (never the arguments, the session or the caller). Nothing is read while the span is off.
pub fn mcp_span(method: &str, params: &Map<String, Value>) -> Span {
    tracing::debug_span!(
        "mcp.request",
        otel.name = %span_name(method, called_tool(method, params)),
        otel.kind = "server",
        mcp.method.name = %method,
        gen_ai.tool.name = called_tool(method, params),
        rpc.jsonrpc.error_code = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    )
}

/// An MCP span's name: `tools/call whoami`, `tools/list` (as OpenTelemetry's MCP conventions have it).
fn span_name(method: &str, tool: Option<&str>) -> String {
    match tool {
        Some(tool) => format!("{method} {tool}"),
        None => method.to_owned(),
    }
}

/// The tool a `tools/call`'s params name.
fn called_tool<'a>(method: &str, params: &'a Map<String, Value>) -> Option<&'a str> {
    if method != "tools/call" {
        return None;
    }
    params.get("name")?.as_str()
}

/// Records an MCP request's JSON-RPC error code, if it failed, on its span. Asking for a URL
/// elicitation (-32042) is the gate working, not a failure of the span.
pub fn record_outcome<T>(span: &Span, outcome: Result<&T, &crate::jsonrpc::RpcError>) {
    if let Err(error) = outcome {
        span.record("rpc.jsonrpc.error_code", error.code);
        if error.code != crate::jsonrpc::URL_ELICITATION_REQUIRED {
            span.record("otel.status_code", "ERROR");
        }
    }
}

/// The span of one outgoing HTTP call: what it is for (`call`: a provider's token endpoint, a
/// tool, ...), to whom (`peer`: the provider, tool or upstream as configured), the method and the
/// URL without its query, fragment or user info.
pub fn client_span(call: &'static str, peer: &str, method: &reqwest::Method, url: &Url) -> Span {
    tracing::debug_span!(
        "http.client",
        otel.name = %method,
        otel.kind = "client",
        gatehouse.call = call,
        peer.service = %peer,
        http.request.method = %method,
        url.full = %bare(url),
        server.address = url.host_str(),
        server.port = url.port_or_known_default(),
        http.response.status_code = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    )
}

/// `url` without user info, query or fragment: those can carry secrets.
fn bare(url: &Url) -> Url {
    let mut bare = url.clone();
    bare.set_query(None);
    bare.set_fragment(None);
    let _ = bare.set_username("");
    let _ = bare.set_password(None);
    bare
}

/// Records an outgoing call's status on its span.
pub fn record_status(span: &Span, status: reqwest::StatusCode) {
    span.record("http.response.status_code", status.as_u16());
    if status.is_server_error() {
        span.record("otel.status_code", "ERROR");
    }
}

/// Sends `request` with `client` within a [`client_span`]. The span ends when the answer's head
/// has arrived. No `traceparent`: for third parties that are no part of the user's call (providers).
pub async fn execute(
    client: &reqwest::Client,
    request: reqwest::Request,
    call: &'static str,
    peer: &str,
) -> reqwest::Result<reqwest::Response> {
    let span = client_span(call, peer, request.method(), request.url());
    send(client, request, span, false).await
}

/// [`execute`], with `traceparent` when traces are exported: for what the call itself reaches
/// (HTTP tools). The span shows `shown` for the URL, which holds no argument.
pub async fn execute_traced(
    client: &reqwest::Client,
    request: reqwest::Request,
    call: &'static str,
    peer: &str,
    shown: &Url,
) -> reqwest::Result<reqwest::Response> {
    let span = client_span(call, peer, request.method(), shown);
    send(client, request, span, true).await
}

async fn send(
    client: &reqwest::Client,
    mut request: reqwest::Request,
    span: Span,
    propagate: bool,
) -> reqwest::Result<reqwest::Response> {
    if propagate {
        inject(&span, request.headers_mut());
    }
    let sent = client.execute(request).instrument(span.clone()).await;
    match &sent {
        Ok(response) => record_status(&span, response.status()),
        Err(_) => {
            span.record("otel.status_code", "ERROR");
        }
    }
    sent
}

struct Headers<'a>(&'a HeaderMap);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|value| value.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(HeaderName::as_str).collect()
    }
}

struct HeadersMut<'a>(&'a mut HeaderMap);

impl Injector for HeadersMut<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(name), Ok(value)) = (HeaderName::try_from(key), HeaderValue::try_from(value)) {
            self.0.insert(name, value);
        }
    }
}
