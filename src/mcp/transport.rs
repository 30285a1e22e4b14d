//! Streamable HTTP: the rules of the `/mcp` endpoint. Every refusal is a status code with a
//! JSON-RPC error body that says what was wrong.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{ConnectInfo, Request, State};
use axum::http::header::{ACCEPT, CONTENT_TYPE, HOST, ORIGIN, RETRY_AFTER, WWW_AUTHENTICATE};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::Value;

use super::calls;
use super::{DEFAULT_PROTOCOL_VERSION, NO_BATCHES_SINCE, SUPPORTED_PROTOCOL_VERSIONS, methods, modern, sse, stream};
use crate::domain::{Principal, SessionId};
use crate::identity::oauth::BearerError;
use crate::identity::{Caller, IdentityError};
use crate::jsonrpc::{self, INVALID_REQUEST, Message, PARSE_ERROR, RequestId, RpcError};
use crate::state::{AppState, RETRY_AFTER_SECONDS};
use crate::store::{SessionRecord, StoreError};

pub const SESSION_HEADER: HeaderName = HeaderName::from_static("mcp-session-id");
const PROTOCOL_HEADER: HeaderName = HeaderName::from_static("mcp-protocol-version");
const LAST_EVENT_ID: HeaderName = HeaderName::from_static("last-event-id");

/// Messages in one JSON-RPC batch; a larger batch is refused whole.
const MAX_BATCH_MESSAGES: usize = 64;
/// The size of a batch's answer after which its remaining requests are not handled.
const MAX_BATCH_ANSWER_BYTES: usize = 4 * 1024 * 1024;
/// Open GET streams per session on one replica.
const MAX_STREAMS_PER_SESSION: usize = 4;

/// A refused HTTP request.
#[derive(Debug)]
pub struct Refusal {
    status: StatusCode,
    id: Option<RequestId>,
    error: RpcError,
    /// `WWW-Authenticate`, on a refusal for want of (valid) authorization.
    challenge: Option<Box<HeaderValue>>,
}

impl Refusal {
    fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            id: None,
            error: RpcError::new(INVALID_REQUEST, message),
            challenge: None,
        }
    }

    fn internal(context: &str, error: &dyn std::fmt::Display) -> Self {
        tracing::error!(%error, "{context}");
        Self::failed(None, RpcError::internal())
    }

    /// A store failure, logged with `context`: 503 during a database outage, else 500.
    fn store(context: &str, error: &StoreError) -> Self {
        Self::failed(None, super::store_failure(context, error))
    }

    /// A request that failed on our side with `error` (internal or unavailable).
    fn failed(id: Option<RequestId>, error: RpcError) -> Self {
        let status = if error.is_unavailable() {
            StatusCode::SERVICE_UNAVAILABLE
        } else {
            StatusCode::INTERNAL_SERVER_ERROR
        };
        Self {
            status,
            id,
            error,
            challenge: None,
        }
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let body = jsonrpc::error_response(self.id.as_ref(), &self.error);
        let mut response = json_response(self.status, &body);
        if let Some(challenge) = self.challenge {
            response.headers_mut().insert(WWW_AUTHENTICATE, *challenge);
        }
        response
    }
}

/// A JSON body; a 503 also tells the client when to retry.
fn json_response(status: StatusCode, body: &impl Serialize) -> Response {
    let mut response = (status, axum::Json(body)).into_response();
    if status == StatusCode::SERVICE_UNAVAILABLE {
        response
            .headers_mut()
            .insert(RETRY_AFTER, HeaderValue::from_static(RETRY_AFTER_SECONDS));
    }
    response
}

/// The answer to one request: 200 with its result or error, except that "unavailable" goes out
/// with 503, so clients and proxies see an outage as one.
fn answer(id: &RequestId, outcome: Result<Value, RpcError>) -> Response {
    match outcome {
        Ok(result) => json_response(StatusCode::OK, &jsonrpc::result_response(id, result)),
        Err(error) if error.is_unavailable() => Refusal::failed(Some(id.clone()), error).into_response(),
        Err(error) => json_response(StatusCode::OK, &jsonrpc::error_response(Some(id), &error)),
    }
}

/// While the bus finds the database unreachable, requests are refused at once instead of each
/// waiting for a database connection.
fn check_database(state: &AppState) -> Result<(), Refusal> {
    if state.bus.is_database_reachable() {
        Ok(())
    } else {
        Err(Refusal::failed(None, RpcError::unavailable()))
    }
}

fn accepted() -> Response {
    StatusCode::ACCEPTED.into_response()
}

/// Whether `Accept` admits `wanted` (`type/subtype`), directly or by a wildcard.
fn accepts(headers: &HeaderMap, wanted: &str) -> bool {
    let (kind, _) = wanted.split_once('/').unwrap_or((wanted, ""));
    headers
        .get_all(ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|item| {
            let media = item.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
            media == wanted || media == "*/*" || media == format!("{kind}/*")
        })
}

/// Origin and Host checks, before anything else: a browser page on another site (or a DNS name
/// rebound to this machine) must not reach a local server.
fn check_origin_and_host(state: &AppState, headers: &HeaderMap) -> Result<(), Refusal> {
    if let Some(origin) = headers.get(ORIGIN) {
        let origin = origin.to_str().unwrap_or("");
        if !state.origin_allowed(origin) {
            return Err(Refusal::new(
                StatusCode::FORBIDDEN,
                format!("Forbidden: origin {origin:?} is not allowed"),
            ));
        }
    }
    if state.bound_to_loopback() {
        let host = headers.get(HOST).and_then(|h| h.to_str().ok()).unwrap_or("");
        if !state.host_allowed(host) {
            return Err(Refusal::new(
                StatusCode::FORBIDDEN,
                format!("Forbidden: host {host:?} is not this server (DNS rebinding protection)"),
            ));
        }
    }
    Ok(())
}

/// `MCP-Protocol-Version`, when present, must be a version this server speaks.
fn check_protocol_header(headers: &HeaderMap) -> Result<(), Refusal> {
    match headers.get(PROTOCOL_HEADER) {
        None => Ok(()),
        Some(value) => match value.to_str() {
            Ok(version) if SUPPORTED_PROTOCOL_VERSIONS.contains(&version) => Ok(()),
            _ => Err(Refusal::new(
                StatusCode::BAD_REQUEST,
                format!(
                    "Bad Request: unsupported MCP-Protocol-Version {:?}; supported: {}",
                    String::from_utf8_lossy(value.as_bytes()),
                    SUPPORTED_PROTOCOL_VERSIONS.join(", ")
                ),
            )),
        },
    }
}

/// GET and DELETE are not part of the 2026-07-28 era: its requests are POSTs.
fn refuse_stateless(headers: &HeaderMap) -> Result<(), Refusal> {
    if modern::is_stateless(headers) {
        return Err(Refusal::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "Method Not Allowed: 2026-07-28 requests are POSTs",
        ));
    }
    Ok(())
}

/// The caller, by the identity mode; refused with the challenge MCP authorization prescribes.
async fn caller(state: &AppState, parts: &Parts, peer: SocketAddr) -> Result<Caller, Refusal> {
    let identified = state.identity.caller(&parts.headers, peer).await.map(|mut caller| {
        caller.address = Some(state.client_address(&parts.headers, peer));
        caller
    });
    identified.map_err(|e| {
        let bearer = match (&e, state.identity.resource_server()) {
            (IdentityError::Bearer(bearer), Some(server)) => Some((bearer, server)),
            _ => None,
        };
        let Some((bearer, server)) = bearer else {
            tracing::info!(%peer, reason = %e, "refused unidentified MCP request");
            return Refusal::new(StatusCode::UNAUTHORIZED, format!("Unauthorized: {e}"));
        };
        let (status, challenge) = server.challenge(bearer);
        let message = match bearer {
            BearerError::Unavailable(reason) => {
                tracing::warn!(%peer, %reason, "cannot check a bearer token: the identity provider is unreachable");
                "Service Unavailable: the identity provider cannot be reached; try again shortly".to_owned()
            }
            BearerError::InsufficientScope => "Forbidden: the access token lacks a required scope".to_owned(),
            other => {
                tracing::info!(%peer, reason = %other, "refused an MCP request's bearer token");
                format!("Unauthorized: {other}")
            }
        };
        Refusal {
            status,
            id: None,
            error: if status == StatusCode::SERVICE_UNAVAILABLE {
                RpcError::new(jsonrpc::SERVICE_UNAVAILABLE, message)
            } else {
                RpcError::new(INVALID_REQUEST, message)
            },
            challenge: challenge.map(Box::new),
        }
    })
}

/// The session named by `Mcp-Session-Id`, which must exist and belong to `principal`.
async fn session(state: &AppState, headers: &HeaderMap, principal: &Principal) -> Result<Arc<SessionRecord>, Refusal> {
    let header = headers.get(SESSION_HEADER).ok_or_else(|| {
        Refusal::new(
            StatusCode::BAD_REQUEST,
            "Bad Request: Mcp-Session-Id header is required",
        )
    })?;
    let not_found = || Refusal::new(StatusCode::NOT_FOUND, "Session not found: initialize a new session");
    let id: SessionId = header
        .to_str()
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(not_found)?;
    let record = state
        .sessions
        .find(&id)
        .await
        .map_err(|e| Refusal::store("session lookup failed", &e))?;
    let record = record.ok_or_else(not_found)?;
    if &record.principal != principal {
        tracing::warn!(session = ?id, "session used by another principal");
        return Err(Refusal::new(
            StatusCode::FORBIDDEN,
            "Forbidden: this session belongs to another user",
        ));
    }
    Ok(record)
}

/// The whole body, within `server.max_request_bytes` and `server.request_body_timeout`: a body
/// trickled in byte by byte must not hold a connection open for ever.
async fn read_body(state: &AppState, body: Body) -> Result<Bytes, Refusal> {
    let limit = state.config.server.max_request_bytes;
    let deadline = state.config.server.request_body_timeout;
    let read = tokio::time::timeout(deadline, axum::body::to_bytes(body, limit))
        .await
        .map_err(|_| {
            Refusal::new(
                StatusCode::REQUEST_TIMEOUT,
                format!(
                    "Request Timeout: the request body did not arrive within {}",
                    humantime::format_duration(deadline)
                ),
            )
        })?;
    read.map_err(|e| {
        let too_large = std::error::Error::source(&e).is_some_and(|s| s.is::<http_body_util::LengthLimitError>());
        if too_large {
            Refusal::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("Payload Too Large: the limit is {limit} bytes"),
            )
        } else {
            Refusal::new(
                StatusCode::BAD_REQUEST,
                "Bad Request: the request body could not be read",
            )
        }
    })
}

pub async fn post(
    State(state): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    request: Request,
) -> Response {
    match handle_post(&state, peer, request).await {
        Ok(response) => response,
        Err(refusal) => refusal.into_response(),
    }
}

async fn handle_post(state: &AppState, peer: SocketAddr, request: Request) -> Result<Response, Refusal> {
    let (parts, body) = request.into_parts();
    check_origin_and_host(state, &parts.headers)?;
    if !accepts(&parts.headers, "application/json") || !accepts(&parts.headers, "text/event-stream") {
        return Err(Refusal::new(
            StatusCode::NOT_ACCEPTABLE,
            "Not Acceptable: Accept must list both application/json and text/event-stream",
        ));
    }
    let content_type = parts
        .headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if content_type
        .split(';')
        .next()
        .map(str::trim)
        .map(str::to_ascii_lowercase)
        .as_deref()
        != Some("application/json")
    {
        return Err(Refusal::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "Unsupported Media Type: Content-Type must be application/json",
        ));
    }
    let caller = caller(state, &parts, peer).await?;
    check_database(state)?;
    let bytes = read_body(state, body).await?;
    let value: Value = serde_json::from_slice(&bytes).map_err(|e| Refusal {
        status: StatusCode::BAD_REQUEST,
        id: None,
        error: RpcError::new(PARSE_ERROR, format!("Parse error: {e}")),
        challenge: None,
    })?;

    if let Value::Array(items) = value {
        return handle_batch(state, &parts.headers, &caller, items).await;
    }
    let message = jsonrpc::classify(value).map_err(|(id, error)| Refusal {
        status: StatusCode::BAD_REQUEST,
        id,
        error,
        challenge: None,
    })?;
    if modern::requested(&parts.headers, &message) {
        return Ok(match modern::answer(state, &parts.headers, &caller, message).await {
            modern::Answer::Json(status, body) => json_response(status, &body),
            modern::Answer::Result(id, result) => {
                json_response(StatusCode::OK, &modern::ResultResponse::new(&id, &result))
            }
            modern::Answer::Accepted => accepted(),
            modern::Answer::Streamed(call) => {
                let task_state = state.clone();
                sse::sse_answer(state, move |outbox| async move { call.run(&task_state, &outbox).await })
            }
        });
    }
    if message.method() == Some("initialize") {
        return initialize(state, &parts.headers, caller.principal, message).await;
    }
    check_protocol_header(&parts.headers)?;
    let session = session(state, &parts.headers, &caller.principal).await?;
    match message {
        Message::Request { id, method, params }
            if methods::streams_answer(state, &session, &method, params.as_ref()) =>
        {
            Ok(sse::streamed_answer(state, session, caller, id, method, params))
        }
        Message::Request { id, method, params } => {
            let outcome = methods::handle(state, &session, &caller, &id, &method, params, None).await;
            Ok(answer(&id, outcome))
        }
        Message::Response { id, answer } => {
            calls::route_answer(state, &session, &id, answer).await;
            Ok(accepted())
        }
        Message::Notification { method, params } => {
            methods::notified(state, &session.id, &method, params.as_ref()).await;
            Ok(accepted())
        }
    }
}

async fn initialize(
    state: &AppState,
    headers: &HeaderMap,
    principal: Principal,
    message: Message,
) -> Result<Response, Refusal> {
    let Message::Request { id, params, .. } = message else {
        return Err(Refusal::new(
            StatusCode::BAD_REQUEST,
            "Bad Request: initialize must be a request with an id",
        ));
    };
    if headers.contains_key(SESSION_HEADER) {
        return Err(Refusal {
            status: StatusCode::BAD_REQUEST,
            id: Some(id),
            error: RpcError::new(
                INVALID_REQUEST,
                "Invalid Request: initialize starts a new session and must not carry Mcp-Session-Id",
            ),
            challenge: None,
        });
    }
    match methods::initialize(state, principal, params).await {
        Ok((session_id, result)) => {
            let mut response = json_response(StatusCode::OK, &jsonrpc::result_response(&id, result));
            let value =
                HeaderValue::from_str(session_id.as_str()).map_err(|e| Refusal::internal("session id header", &e))?;
            response.headers_mut().insert(SESSION_HEADER, value);
            Ok(response)
        }
        Err(error) => Ok(answer(&id, Err(error))),
    }
}

/// JSON-RPC batches, which only 2025-03-26 allows. A batch holds at most `MAX_BATCH_MESSAGES`
/// messages, or none of it is handled; once the answers pass `MAX_BATCH_ANSWER_BYTES`, the
/// remaining requests are not handled and each gets an error saying so.
async fn handle_batch(
    state: &AppState,
    headers: &HeaderMap,
    caller: &Caller,
    items: Vec<Value>,
) -> Result<Response, Refusal> {
    let refuse = |message: String| Refusal::new(StatusCode::BAD_REQUEST, message);
    if items.is_empty() {
        return Err(refuse("Invalid Request: an empty batch".into()));
    }
    check_protocol_header(headers)?;
    let header_version = headers
        .get(PROTOCOL_HEADER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or(DEFAULT_PROTOCOL_VERSION);
    if header_version >= NO_BATCHES_SINCE {
        return Err(refuse(format!(
            "Invalid Request: protocol {header_version} does not allow JSON-RPC batches"
        )));
    }
    let session = session(state, headers, &caller.principal).await?;
    if session.protocol_version.as_str() >= NO_BATCHES_SINCE {
        return Err(refuse(format!(
            "Invalid Request: protocol {} does not allow JSON-RPC batches",
            session.protocol_version
        )));
    }
    if items.len() > MAX_BATCH_MESSAGES {
        return Err(refuse(format!(
            "Invalid Request: the batch is too large: it holds {} messages and the limit is {MAX_BATCH_MESSAGES}",
            items.len()
        )));
    }
    let mut responses = Vec::new();
    let mut answer_bytes = 0;
    for item in items {
        let response = match jsonrpc::classify(item) {
            Err((id, error)) => jsonrpc::error_response(id.as_ref(), &error),
            Ok(Message::Request { id, method, .. }) if method == "initialize" => jsonrpc::error_response(
                Some(&id),
                &RpcError::new(INVALID_REQUEST, "Invalid Request: initialize cannot be part of a batch"),
            ),
            Ok(Message::Request { id, .. }) if answer_bytes > MAX_BATCH_ANSWER_BYTES => jsonrpc::error_response(
                Some(&id),
                &RpcError::new(
                    INVALID_REQUEST,
                    format!(
                        "Invalid Request: not handled: the batch's answer passed its limit of {MAX_BATCH_ANSWER_BYTES} bytes; send this request again on its own"
                    ),
                ),
            ),
            Ok(Message::Request { id, method, params }) => {
                match methods::handle(state, &session, caller, &id, &method, params, None).await {
                    Ok(result) => jsonrpc::result_response(&id, result),
                    Err(error) => jsonrpc::error_response(Some(&id), &error),
                }
            }
            Ok(Message::Notification { .. } | Message::Response { .. }) => continue,
        };
        answer_bytes += response.to_string().len();
        responses.push(response);
    }
    if responses.is_empty() {
        Ok(accepted())
    } else {
        Ok(json_response(StatusCode::OK, &Value::Array(responses)))
    }
}

pub async fn get(
    State(state): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    request: Request,
) -> Response {
    let (parts, _) = request.into_parts();
    let opened = async {
        check_origin_and_host(&state, &parts.headers)?;
        refuse_stateless(&parts.headers)?;
        if !accepts(&parts.headers, "text/event-stream") {
            return Err(Refusal::new(
                StatusCode::NOT_ACCEPTABLE,
                "Not Acceptable: Accept must list text/event-stream",
            ));
        }
        check_protocol_header(&parts.headers)?;
        let caller = caller(&state, &parts, peer).await?;
        check_database(&state)?;
        let session = session(&state, &parts.headers, &caller.principal).await?;
        let resume_after = match parts.headers.get(LAST_EVENT_ID) {
            None => None,
            Some(value) => Some(
                value
                    .to_str()
                    .ok()
                    .and_then(|v| v.trim().parse::<i64>().ok())
                    .filter(|seq| *seq >= 0)
                    .ok_or_else(|| {
                        Refusal::new(
                            StatusCode::BAD_REQUEST,
                            "Bad Request: Last-Event-ID is not an event id of this server",
                        )
                    })?,
            ),
        };
        let slot = match resume_after {
            // The client resumes: it has given up its older streams, which end on every replica.
            Some(_) => state
                .bus
                .resume_stream(&session.id, MAX_STREAMS_PER_SESSION)
                .await
                .map_err(|e| Refusal::store("announcing a resumed stream failed", &e))?,
            None => state.bus.claim_stream(&session.id, MAX_STREAMS_PER_SESSION),
        };
        let slot = slot.ok_or_else(|| {
                tracing::info!(session = ?session.id, "refused a GET stream over the per-session limit");
                Refusal::new(
                    StatusCode::TOO_MANY_REQUESTS,
                    format!(
                        "Too Many Requests: this session already has {MAX_STREAMS_PER_SESSION} open streams on this server; close one first"
                    ),
                )
            })?;
        stream::open(&state, &session, resume_after, slot)
            .await
            .map_err(|e| Refusal::store("opening event stream failed", &e))
    };
    match opened.await {
        Ok(response) => response,
        Err(refusal) => refusal.into_response(),
    }
}

pub async fn delete(
    State(state): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    request: Request,
) -> Response {
    let (parts, _) = request.into_parts();
    let ended = async {
        check_origin_and_host(&state, &parts.headers)?;
        refuse_stateless(&parts.headers)?;
        check_protocol_header(&parts.headers)?;
        let caller = caller(&state, &parts, peer).await?;
        check_database(&state)?;
        let session = session(&state, &parts.headers, &caller.principal).await?;
        state
            .sessions
            .end(&session.id)
            .await
            .map_err(|e| Refusal::store("ending session failed", &e))?;
        tracing::debug!(session = ?session.id, "session ended by client");
        Ok::<_, Refusal>(StatusCode::NO_CONTENT.into_response())
    };
    match ended.await {
        Ok(response) => response,
        Err(refusal) => refusal.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(accept: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(ACCEPT, HeaderValue::from_str(accept).expect("header"));
        headers
    }

    #[test]
    fn accept_matching_handles_lists_parameters_and_wildcards() {
        let both = headers("application/json, text/event-stream;q=0.9");
        assert!(accepts(&both, "application/json") && accepts(&both, "text/event-stream"));
        assert!(accepts(&headers("*/*"), "text/event-stream"));
        assert!(accepts(&headers("text/*"), "text/event-stream"));
        assert!(!accepts(&headers("application/json"), "text/event-stream"));
        assert!(!accepts(&HeaderMap::new(), "application/json"));
    }
}
