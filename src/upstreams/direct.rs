//! A forwarded `tools/call` on an HTTP upstream's session, posted by the calling task itself.
//!
//! Through rmcp's peer, each request crosses the service's loop task, the transport worker and a
//! task per response stream, with a channel at each step both ways; that was a third of what a
//! forwarded call cost gatehouse. Here the call's own task posts the request with rmcp's HTTP
//! client (which keeps every rule about statuses, challenges, content types and body limits) and
//! reads the answer, a JSON body or the request's SSE stream, itself. What the stream carries
//! besides the answer is handled as rmcp would: progress and log messages go to the relay in
//! order, other notifications to the relay, and the upstream's requests to the session's handler,
//! whose answers are posted back. rmcp keeps everything else: opening the session, listing,
//! notifications, cancellation, and an expired session (on its 404 the call pings through rmcp,
//! which initializes a new session, and posts once more there).
//!
//! Only where the request needs nothing rmcp's worker adds per request: a session id is known,
//! and under 2026-07-28 (SEP-2243 headers) the tool's name is a plain header value and its schema
//! promotes no argument to a header.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;
use reqwest::header::{HeaderName, HeaderValue};
use rmcp::ServiceExt;
use rmcp::model::{
    ClientJsonRpcMessage, ClientRequest, ClientResult, ErrorData, GetMeta, JsonRpcMessage, ProgressToken,
    ProtocolVersion, RequestId, ServerJsonRpcMessage, ServerNotification, ServerResult,
};
use rmcp::service::{Peer, RequestContext, RoleClient, RunningService, Service, ServiceError};
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpClientTransportConfig, StreamableHttpError,
    StreamableHttpPostResponse, StreamableHttpResponseLimits,
};
use rmcp::transport::{DynamicTransportError, StreamableHttpClientTransport};
use sse_stream::Sse;
use url::Url;

use super::failure::{HttpError, OpenError};
use super::forwarded::Response;
use super::pool::{Opening, timed};
use super::relay::{Handler, InOrder, Relay};
use super::traced::Traced;
use super::upstream::Upstream;

type Events = BoxStream<'static, Result<Sse, SseError>>;

/// Times a response stream that ended before the answer is resumed (`Last-Event-ID`), as rmcp's
/// worker would, and the wait before each when the upstream named none.
const RESUMPTIONS: usize = 3;
const RESUME_AFTER: Duration = Duration::from_secs(1);

/// The `Mcp-Session-Id` the session's transport last sent: rmcp's, renewed when it initializes
/// the session again. Shared by the transport's client ([`Traced`]) and [`Direct`].
#[derive(Clone, Default)]
pub struct SeenSession(Arc<Mutex<Option<Arc<str>>>>);

impl SeenSession {
    pub fn saw(&self, id: &Arc<str>) {
        let mut seen = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if seen.as_ref() != Some(id) {
            *seen = Some(id.clone());
        }
    }

    fn get(&self) -> Option<Arc<str>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

/// What a direct call needs of its session, kept beside rmcp's service.
pub struct Direct {
    client: Traced,
    uri: Arc<str>,
    auth: Option<String>,
    /// The session's own headers and `MCP-Protocol-Version`, as rmcp sends them.
    headers: HashMap<HeaderName, HeaderValue>,
    /// Whether requests carry SEP-2243's `Mcp-Method` and `Mcp-Name` (2026-07-28 on).
    standard_headers: bool,
    session: SeenSession,
    next: AtomicU64,
}

/// A call posted directly: its id and progress token, and its answer to come.
pub struct Posted {
    pub id: RequestId,
    pub progress_token: ProgressToken,
    pub answer: Response,
}

impl Direct {
    /// `version` is what `initialize` agreed on.
    pub fn new(
        client: Traced,
        uri: &str,
        auth: Option<String>,
        mut headers: HashMap<HeaderName, HeaderValue>,
        version: &ProtocolVersion,
        session: SeenSession,
    ) -> Self {
        if let Ok(value) = HeaderValue::from_str(version.as_str()) {
            headers.insert(HeaderName::from_static("mcp-protocol-version"), value);
        }
        Self {
            client,
            uri: uri.into(),
            auth,
            headers,
            standard_headers: *version >= ProtocolVersion::STANDARD_HEADERS,
            session,
            next: AtomicU64::new(0),
        }
    }

    /// What a direct post of a `tools/call` of `name` takes, unless this call needs what only
    /// rmcp's worker adds.
    pub fn prepare(self: &Arc<Self>, name: &str, headers_in_schema: bool) -> Option<Prepared> {
        let session = self.session.get()?;
        let mut headers = self.headers.clone();
        if self.standard_headers {
            let plain = plain_header_value(name).filter(|_| !headers_in_schema)?;
            headers.insert(
                HeaderName::from_static("mcp-method"),
                HeaderValue::from_static("tools/call"),
            );
            headers.insert(HeaderName::from_static("mcp-name"), plain);
        }
        Some(Prepared {
            direct: self.clone(),
            session,
            headers,
        })
    }
}

/// A direct post about to be made: the session it goes to and its headers.
pub struct Prepared {
    direct: Arc<Direct>,
    session: Arc<str>,
    headers: HashMap<HeaderName, HeaderValue>,
}

impl Prepared {
    /// Posts `request` (the `tools/call`) with an id and progress token of its own.
    pub fn post(self, mut request: ClientRequest, peer: &Peer<RoleClient>, relay: &Arc<Relay>) -> Posted {
        // rmcp numbers its own requests; these ids cannot meet them.
        let n = self.direct.next.fetch_add(1, Ordering::Relaxed);
        let id = RequestId::String(format!("gatehouse-{n}").into());
        let progress_token = ProgressToken(id.clone());
        request.get_meta_mut().set_progress_token(progress_token.clone());
        let message = ClientJsonRpcMessage::request(request, id.clone());
        let call = Call {
            direct: self.direct,
            id: id.clone(),
            headers: self.headers,
            peer: peer.clone(),
            relay: relay.clone(),
        };
        Posted {
            id,
            progress_token,
            answer: Box::pin(call.run(message, self.session)),
        }
    }
}

/// Opens an HTTP session with the user's `opening` through rmcp's Streamable HTTP client (which
/// initializes it again when the upstream answers 404), and what its calls need to be posted
/// directly.
pub(super) async fn serve(
    client: reqwest13::Client,
    upstream: &Upstream,
    url: &Url,
    opening: &Opening,
    handler: Handler,
    relay: &Arc<Relay>,
) -> Result<(RunningService<RoleClient, Handler>, Arc<Direct>), OpenError> {
    let mut headers = HashMap::new();
    for (name, value) in &opening.values {
        let name = HeaderName::try_from(name.as_str())
            .map_err(|_| OpenError::Failed(format!("header {name} is not a valid name")))?;
        let value = HeaderValue::from_str(value.expose())
            .map_err(|_| OpenError::Failed(format!("header {name} would not be a valid value")))?;
        headers.insert(name, value);
    }
    let auth = opening.bearer.as_ref().map(|bearer| bearer.expose().clone());
    let mut config = StreamableHttpClientTransportConfig::with_uri(url.as_str())
        .custom_headers(headers.clone())
        .reinit_on_expired_session(true);
    if let Some(auth) = &auth {
        config = config.auth_header(auth.clone());
    }
    let session = SeenSession::default();
    let client = Traced::new(client, &upstream.id, session.clone());
    let transport = StreamableHttpClientTransport::with_client(client.clone(), config);
    let service = timed(handler.serve(InOrder::new(transport, relay.clone())), upstream.timeout).await?;
    let version = service
        .peer()
        .peer_info()
        .map(|info| info.protocol_version.clone())
        .unwrap_or_default();
    let direct = Direct::new(client, url.as_str(), auth, headers, &version, session);
    Ok((service, Arc::new(direct)))
}

/// One call in flight.
struct Call {
    direct: Arc<Direct>,
    id: RequestId,
    headers: HashMap<HeaderName, HeaderValue>,
    peer: Peer<RoleClient>,
    relay: Arc<Relay>,
}

impl Call {
    async fn run(self, message: ClientJsonRpcMessage, session: Arc<str>) -> Result<ServerResult, ServiceError> {
        let posted = match self.post(message.clone(), session).await {
            Err(StreamableHttpError::SessionExpired) => {
                // rmcp initializes a new session on its own 404; the call goes on there.
                self.peer
                    .send_request(ClientRequest::PingRequest(Default::default()))
                    .await?;
                let session = self.direct.session.get().ok_or(ServiceError::TransportClosed)?;
                self.post(message, session).await
            }
            posted => posted,
        };
        match posted.map_err(transport_error)? {
            StreamableHttpPostResponse::Json(message, _) => self
                .answer(message)
                .await
                .unwrap_or(Err(ServiceError::UnexpectedResponse)),
            StreamableHttpPostResponse::Sse(events, _) => self.read(events).await,
            _ => Err(ServiceError::UnexpectedResponse),
        }
    }

    async fn post(
        &self,
        message: ClientJsonRpcMessage,
        session: Arc<str>,
    ) -> Result<StreamableHttpPostResponse, HttpError> {
        let direct = &self.direct;
        direct
            .client
            .post_message_with_response_limits(
                direct.uri.clone(),
                message,
                Some(session),
                direct.auth.clone(),
                self.headers.clone(),
                StreamableHttpResponseLimits::default(),
            )
            .await
    }

    /// Reads the request's stream until the answer, resuming it when it ends early.
    async fn read(&self, mut events: Events) -> Result<ServerResult, ServiceError> {
        let mut last_event: Option<String> = None;
        let mut retry = RESUME_AFTER;
        for resumed in 0..=RESUMPTIONS {
            while let Some(event) = events.next().await {
                let event = event.map_err(|e| transport_error(HttpError::Sse(e)))?;
                if let Some(id) = event.id {
                    last_event = Some(id);
                }
                if let Some(millis) = event.retry {
                    retry = Duration::from_millis(millis);
                }
                let Some(data) = event.data.filter(|data| !data.trim().is_empty()) else {
                    continue;
                };
                let message = serde_json::from_str::<ServerJsonRpcMessage>(&data)
                    .map_err(|e| transport_error(HttpError::Deserialize(e)))?;
                if let Some(answer) = self.answer(message).await {
                    return answer;
                }
            }
            let (Some(last), true) = (&last_event, resumed < RESUMPTIONS) else {
                break;
            };
            tokio::time::sleep(retry).await;
            let session = self.direct.session.get();
            events = self
                .direct
                .client
                .get_stream(
                    self.direct.uri.clone(),
                    session,
                    Some(last.clone()),
                    self.direct.auth.clone(),
                    self.headers.clone(),
                )
                .await
                .map_err(transport_error)?;
        }
        Err(ServiceError::TransportClosed)
    }

    /// The call's answer, when `message` is it; anything else the upstream sent meanwhile is
    /// handled as rmcp's service would.
    async fn answer(&self, message: ServerJsonRpcMessage) -> Option<Result<ServerResult, ServiceError>> {
        match message {
            JsonRpcMessage::Response(response) if response.id == self.id => Some(Ok(response.result)),
            JsonRpcMessage::Error(error) if error.id.as_ref() == Some(&self.id) => {
                Some(Err(ServiceError::McpError(error.error)))
            }
            JsonRpcMessage::Notification(notification) => {
                self.relay.notified(notification.notification).await;
                None
            }
            JsonRpcMessage::Request(request) => {
                tokio::spawn(answer_request(
                    self.direct.clone(),
                    self.headers.clone(),
                    self.peer.clone(),
                    Handler(self.relay.clone()),
                    request.request,
                    request.id,
                ));
                None
            }
            JsonRpcMessage::Response(_) | JsonRpcMessage::Error(_) => {
                tracing::debug!("an upstream answered a request gatehouse did not make on this stream");
                None
            }
        }
    }
}

/// The session's handler answers the upstream's request (relaying it to the client, as through
/// rmcp), and the answer is posted back.
async fn answer_request(
    direct: Arc<Direct>,
    headers: HashMap<HeaderName, HeaderValue>,
    peer: Peer<RoleClient>,
    handler: Handler,
    request: rmcp::model::ServerRequest,
    id: RequestId,
) {
    let answered: Result<ClientResult, ErrorData> = handler
        .handle_request(request, RequestContext::new(id.clone(), peer))
        .await;
    let message = match answered {
        Ok(result) => ClientJsonRpcMessage::response(result, id),
        Err(error) => ClientJsonRpcMessage::error(error, Some(id)),
    };
    let posted = direct
        .client
        .post_message_with_response_limits(
            direct.uri.clone(),
            message,
            direct.session.get(),
            direct.auth.clone(),
            headers,
            StreamableHttpResponseLimits::default(),
        )
        .await;
    if let Err(error) = posted {
        tracing::debug!(%error, "could not answer an upstream's request");
    }
}

/// An error of the HTTP client, as rmcp's service reports one of its transport.
fn transport_error(error: HttpError) -> ServiceError {
    ServiceError::TransportSend(DynamicTransportError::from_parts(
        "streamable-http",
        std::any::TypeId::of::<Traced>(),
        Box::new(error),
    ))
}

/// `value` as a header value SEP-2243 sends as it is (printable ASCII, no space at either end,
/// not the Base64 sentinel); `None` when it would need encoding.
fn plain_header_value(value: &str) -> Option<HeaderValue> {
    let bytes = value.as_bytes();
    let plain = !bytes.is_empty()
        && bytes.iter().all(|b| (0x20..=0x7e).contains(b))
        && !bytes.starts_with(b" ")
        && !bytes.ends_with(b" ")
        && !value.starts_with("=?base64?");
    plain.then(|| HeaderValue::from_str(value).ok()).flatten()
}

impl Relay {
    /// A notification on a direct call's stream, as rmcp's service and [`super::relay::InOrder`]
    /// would pass it on.
    async fn notified(&self, notification: ServerNotification) {
        match notification {
            ServerNotification::ProgressNotification(progress) => self.progress(&progress.params).await,
            #[allow(deprecated)]
            ServerNotification::LoggingMessageNotification(log) => self.log(&log.params).await,
            ServerNotification::ToolListChangedNotification(_)
            | ServerNotification::ResourceListChangedNotification(_)
            | ServerNotification::PromptListChangedNotification(_) => self.list_again(),
            ServerNotification::ResourceUpdatedNotification(updated) => self.updated(&updated.params).await,
            ServerNotification::CustomNotification(custom) => self.custom(custom).await,
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::plain_header_value;

    #[test]
    fn only_plain_names_go_as_they_are() {
        assert!(plain_header_value("get_weather").is_some());
        assert!(plain_header_value("a b").is_some());
        for needs_encoding in ["", " lead", "trail ", "naïve", "tab\tin", "=?base64?x?="] {
            assert!(plain_header_value(needs_encoding).is_none(), "{needs_encoding:?}");
        }
    }
}
