//! Streamable HTTP: the rules of the `/mcp` endpoint. The edge's checks and the endpoint's own
//! (`checks`) run as the handlers' extractors, in the order written; every refusal is a status
//! code with a JSON-RPC error body that says what was wrong (`refusal`).

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use super::checks::{
    AcceptsEvents, HandshakeEra, InSession, KnownProtocol, PROTOCOL_HEADER, PostHeaders, SESSION_HEADER,
    check_protocol_header, session,
};
use super::refusal::{Refusal, json_response};
use super::state::McpState;
use super::{DEFAULT_PROTOCOL_VERSION, NO_BATCHES_SINCE, calls, methods, modern, sse, stream};
use crate::domain::Principal;
use crate::edge::{AllowedOrigin, DatabaseUp, Identified, KnownHost};
use crate::identity::Caller;
use crate::jsonrpc::{self, INVALID_REQUEST, Message, PARSE_ERROR, RequestId, RpcError};

const LAST_EVENT_ID: HeaderName = HeaderName::from_static("last-event-id");

/// Messages in one JSON-RPC batch; a larger batch is refused whole.
const MAX_BATCH_MESSAGES: usize = 64;
/// The size of a batch's answer after which its remaining requests are not handled.
const MAX_BATCH_ANSWER_BYTES: usize = 4 * 1024 * 1024;
/// Open GET streams per session on one replica.
const MAX_STREAMS_PER_SESSION: usize = 4;

/// The answer to one request: 200 with its result or error, except that "unavailable" goes out
/// with 503, so clients and proxies see an outage as one.
fn answer(id: &RequestId, outcome: Result<Value, RpcError>) -> Response {
    match outcome {
        Ok(result) => json_response(StatusCode::OK, &jsonrpc::result_response(id, result)),
        Err(error) if error.is_unavailable() => Refusal::failed(Some(id.clone()), error).into_response(),
        Err(error) => json_response(StatusCode::OK, &jsonrpc::error_response(Some(id), &error)),
    }
}

fn accepted() -> Response {
    StatusCode::ACCEPTED.into_response()
}

/// The whole body, within `server.max_request_bytes` and `server.request_body_timeout`: a body
/// trickled in byte by byte must not hold a connection open for ever.
async fn read_body(state: &McpState, body: Body) -> Result<Bytes, Refusal> {
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
    State(state): State<McpState>,
    _: (AllowedOrigin, KnownHost),
    _: PostHeaders,
    Identified(caller): Identified,
    _: DatabaseUp,
    request: Request,
) -> Result<Response, Refusal> {
    let (parts, body) = request.into_parts();
    handle_post(&state, &parts.headers, caller, body).await
}

/// A POST that passed the checks: its body, a message or a batch, handled.
async fn handle_post(state: &McpState, headers: &HeaderMap, caller: Caller, body: Body) -> Result<Response, Refusal> {
    let bytes = read_body(state, body).await?;
    let value: Value = serde_json::from_slice(&bytes).map_err(|e| {
        Refusal::with_error(
            StatusCode::BAD_REQUEST,
            None,
            RpcError::new(PARSE_ERROR, format!("Parse error: {e}")),
        )
    })?;

    if let Value::Array(items) = value {
        return handle_batch(state, headers, &caller, items).await;
    }
    let message =
        jsonrpc::classify(value).map_err(|(id, error)| Refusal::with_error(StatusCode::BAD_REQUEST, id, error))?;
    if modern::requested(headers, &message) {
        return Ok(match modern::answer(state, headers, &caller, message).await {
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
        return initialize(state, headers, caller.principal, message).await;
    }
    check_protocol_header(headers)?;
    let session = session(state, headers, &caller.principal).await?;
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
            calls::route_answer(state, &state.calls, &session, &id, answer).await;
            Ok(accepted())
        }
        Message::Notification { method, params } => {
            methods::notified(state, &session.id, &method, params.as_ref()).await;
            Ok(accepted())
        }
    }
}

async fn initialize(
    state: &McpState,
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
        return Err(Refusal::with_error(
            StatusCode::BAD_REQUEST,
            Some(id),
            RpcError::new(
                INVALID_REQUEST,
                "Invalid Request: initialize starts a new session and must not carry Mcp-Session-Id",
            ),
        ));
    }
    match methods::initialize(state, principal, params).await {
        Ok((session, result)) => {
            let mut response = json_response(StatusCode::OK, &jsonrpc::result_response(&id, result));
            let value =
                HeaderValue::from_str(session.id.as_str()).map_err(|e| Refusal::internal("session id header", &e))?;
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
    state: &McpState,
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
    if session.protocol_version.since(NO_BATCHES_SINCE) {
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
    State(state): State<McpState>,
    _: (AllowedOrigin, KnownHost),
    _: HandshakeEra,
    _: AcceptsEvents,
    _: KnownProtocol,
    InSession(session): InSession,
    request: Request,
) -> Result<Response, Refusal> {
    let resume_after = match request.headers().get(LAST_EVENT_ID) {
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
    let turn = state
        .admission
        .turn()
        .await
        .map_err(|busy| Refusal::failed(None, busy))?;
    let slot = match resume_after {
        // The client resumes: it has given up its older streams, which end on every replica.
        Some(_) => state
            .bus
            .resume_stream(&session.id, MAX_STREAMS_PER_SESSION)
            .await
            .map_err(|e| Refusal::store(&state, "announcing a resumed stream failed", &e))?,
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
    let opened = stream::open(&state, &session, resume_after, slot)
        .await
        .map_err(|e| Refusal::store(&state, "opening event stream failed", &e));
    drop(turn);
    opened
}

pub async fn delete(
    State(state): State<McpState>,
    _: (AllowedOrigin, KnownHost),
    _: HandshakeEra,
    _: KnownProtocol,
    InSession(session): InSession,
) -> Result<StatusCode, Refusal> {
    state
        .sessions
        .end(&session.id)
        .await
        .map_err(|e| Refusal::store(&state, "ending session failed", &e))?;
    state.upstreams.session_ended(&session.id);
    tracing::debug!(session = ?session.id, "session ended by client");
    Ok(StatusCode::NO_CONTENT)
}
