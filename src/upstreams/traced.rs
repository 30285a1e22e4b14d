//! Traces across the upstream MCP client: rmcp sends a session's requests from a task of its own,
//! outside the span of the tool call that asked, so the call puts its trace in the request's
//! `_meta.traceparent` (where MCP carries trace context) and [`Traced`], the HTTP client of the
//! transport, makes each POST an `http.client` span in that trace with a `traceparent` header.
//! [`http_client`] builds the reqwest client beneath it, the one every upstream's requests use.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::stream::BoxStream;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use rmcp::model::{ClientJsonRpcMessage, GetMeta, JsonRpcMessage, RequestMetaObject};
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse, StreamableHttpResponseLimits,
};
use sse_stream::Sse;
use tracing::Instrument;
use url::Url;

use super::direct::SeenSession;
use crate::config::ConfigError;
use crate::telemetry::{self, TRACEPARENT, TRACESTATE};

type Result<T> = std::result::Result<T, StreamableHttpError<reqwest13::Error>>;

/// The `_meta` of a request to an upstream: the current span's trace, when traces are exported.
pub fn request_meta() -> Option<RequestMetaObject> {
    if !telemetry::enabled() {
        return None;
    }
    let mut headers = HeaderMap::new();
    telemetry::inject(&tracing::Span::current(), &mut headers);
    let traceparent = headers.get(TRACEPARENT)?.to_str().ok()?;
    let mut meta = RequestMetaObject::new();
    meta.set_traceparent(traceparent);
    if let Some(tracestate) = headers.get(TRACESTATE).and_then(|value| value.to_str().ok()) {
        meta.set_tracestate(tracestate);
    }
    Some(meta)
}

/// The upstream transport's HTTP client: reqwest's, with a span and `traceparent` for every POST
/// of a request that carries a trace.
/// It also notes the session id each POST carries, for the calls posted directly (`direct`).
#[derive(Clone)]
pub struct Traced {
    client: reqwest13::Client,
    upstream: Arc<str>,
    session: SeenSession,
}

impl Traced {
    pub fn new(client: reqwest13::Client, upstream: &str, session: SeenSession) -> Self {
        Self {
            client,
            upstream: upstream.into(),
            session,
        }
    }

    /// The span of a POST of `message` to `uri`, child of the trace in its `_meta`, and its
    /// `traceparent` added to `headers`; none for a message without a trace.
    fn span(
        &self,
        uri: &str,
        message: &ClientJsonRpcMessage,
        headers: &mut HashMap<HeaderName, HeaderValue>,
    ) -> Option<tracing::Span> {
        let JsonRpcMessage::Request(request) = message else {
            return None;
        };
        if !telemetry::enabled() {
            return None;
        }
        let meta = request.request.get_meta();
        let traceparent = meta.get_traceparent()?;
        let url = Url::parse(uri).ok()?;
        let mut carrier = HeaderMap::new();
        carrier.insert(TRACEPARENT, HeaderValue::from_str(traceparent).ok()?);
        if let Some(tracestate) = meta
            .get_tracestate()
            .and_then(|value| HeaderValue::from_str(value).ok())
        {
            carrier.insert(TRACESTATE, tracestate);
        }
        let span = telemetry::client_span("upstream", &self.upstream, &reqwest::Method::POST, &url);
        telemetry::set_remote_parent(&span, &carrier);
        let mut outgoing = HeaderMap::new();
        telemetry::inject(&span, &mut outgoing);
        headers.extend(outgoing.into_iter().filter_map(|(name, value)| Some((name?, value))));
        Some(span)
    }
}

/// Delegates to reqwest's client; POSTs of traced requests go within their span. The two methods
/// without limits take rmcp's default ones, as reqwest's client does, so each request is sent
/// (and traced) in one place. The signatures repeat because they are the trait's, each written out.
impl StreamableHttpClient for Traced {
    type Error = reqwest13::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse> {
        let limits = StreamableHttpResponseLimits::default();
        self.post_message_with_response_limits(uri, message, session_id, auth_header, custom_headers, limits)
            .await
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        mut custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse> {
        if let Some(session) = &session_id {
            self.session.saw(session);
        }
        let span = self.span(&uri, &message, &mut custom_headers);
        let post = self.client.post_message_with_response_limits(
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
            limits,
        );
        within(span, post).await
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<()> {
        self.client
            .delete_session(uri, session_id, auth_header, custom_headers)
            .await
    }

    // rmcp's trait requires both `get_stream` and its variant with a size limit, with the same
    // parameters; the first passes the default limit to the second.
    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<BoxStream<'static, std::result::Result<Sse, SseError>>> {
        let max = StreamableHttpResponseLimits::default().max_sse_event_size;
        self.get_stream_with_max_sse_event_size(uri, session_id, last_event_id, auth_header, custom_headers, max)
            .await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<BoxStream<'static, std::result::Result<Sse, SseError>>> {
        self.client
            .get_stream_with_max_sse_event_size(
                uri,
                session_id,
                last_event_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await
    }
}

/// Runs a POST within its span (if it has one), marking the span when it failed. (rmcp's answer
/// does not tell the status.)
async fn within(
    span: Option<tracing::Span>,
    post: impl Future<Output = Result<StreamableHttpPostResponse>>,
) -> Result<StreamableHttpPostResponse> {
    let Some(span) = span else {
        return post.await;
    };
    let posted = post.instrument(span.clone()).await;
    if posted.is_err() {
        span.record("otel.status_code", "ERROR");
    }
    posted
}

/// The client for upstream MCP servers: no redirects (a redirect could carry a user's token
/// elsewhere), bounded connection time, TLS through rustls with ring and the Mozilla roots.
pub(super) fn http_client() -> std::result::Result<reqwest13::Client, ConfigError> {
    let roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| ConfigError::key("upstreams", format!("cannot set up TLS: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    reqwest13::Client::builder()
        .redirect(reqwest13::redirect::Policy::none())
        .connect_timeout(Duration::from_secs(10))
        .user_agent(concat!("gatehouse/", env!("CARGO_PKG_VERSION")))
        .tls_backend_preconfigured(tls)
        .build()
        .map_err(|e| ConfigError::key("upstreams", format!("cannot build the HTTP client: {e}")))
}
