//! The 2026-07-28 era on `/mcp`, beside 2025-11-25: which requests belong to it, their headers and
//! `_meta` checked against each other, and the answers. Its requests are stateless: what the client
//! can do comes with each request (`_meta`), never from an earlier one; nothing is stored for them
//! but the elicitations a gated call asks for (see `call`).

mod call;
#[cfg(feature = "conformance")]
mod fixtures;
mod request_state;

use std::time::Instant;

use axum::http::{HeaderMap, HeaderName, StatusCode};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use chrono::Utc;
use serde::Serialize;
use serde::ser::{SerializeMap, Serializer};
use serde_json::{Map, Value, json};
use tracing::Instrument;

use super::incall::Outbox;
use super::measure;
use super::methods::{MAX_CAPABILITIES_BYTES, SERVER_INFO, kept_client_info, list_tools, serialized_len};
use super::{STATELESS_PROTOCOL_VERSION, SUPPORTED_PROTOCOL_VERSIONS};
use crate::domain::{LogLevel, ProtocolVersion, SessionId};
use crate::identity::Caller;
use crate::jsonrpc::{
    self, HEADER_MISMATCH, INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND, Message, RequestId, RpcError,
    UNSUPPORTED_PROTOCOL_VERSION,
};
use crate::mcp::state::McpState;
use crate::store::SessionRecord;
use crate::telemetry;

const PROTOCOL_HEADER: HeaderName = HeaderName::from_static("mcp-protocol-version");
const METHOD_HEADER: HeaderName = HeaderName::from_static("mcp-method");
const NAME_HEADER: HeaderName = HeaderName::from_static("mcp-name");

const META_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
const META_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
const META_CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
const META_LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";

/// How long a client may keep `server/discover`'s answer, which is the same for everybody.
const DISCOVER_TTL_MS: u64 = 3_600_000;
/// How long a client may keep a `tools/list` page when the tools can change only with the
/// configuration; upstreams' catalogues change at any time, so with upstreams it is zero.
const TOOLS_TTL_MS: u64 = 300_000;

/// Told to the model by `server/discover`: how gated tools behave in this era.
const INSTRUCTIONS: &str = "Some tools on this server act on the user's accounts at other services or need \
information that only the user can enter, in a browser. When such a tool needs something the user has not \
provided yet, the client is asked to show the user a link; once the user has finished there, the call goes on \
by itself. Never ask the user to paste passwords, API keys or tokens into the conversation: the page collects \
them. Call `whoami` to see who the server thinks is calling.";

/// Whether a message belongs to the 2026-07-28 era: `server/discover`, anything whose `_meta`
/// names a protocol version (an unknown one is answered here, with the error it deserves), or a
/// request whose `MCP-Protocol-Version` header names the stateless revision.
pub fn requested(headers: &HeaderMap, message: &Message) -> bool {
    if message.method() == Some("server/discover") {
        return true;
    }
    let params = match message {
        Message::Request { params, .. } | Message::Notification { params, .. } => params.as_ref(),
        Message::Response { .. } => None,
    };
    if params
        .and_then(|p| p.get("_meta"))
        .and_then(|m| m.get(META_VERSION))
        .is_some()
    {
        return true;
    }
    is_stateless(headers)
}

/// Whether the request's `MCP-Protocol-Version` is the stateless revision.
pub fn is_stateless(headers: &HeaderMap) -> bool {
    headers
        .get(PROTOCOL_HEADER)
        .is_some_and(|v| v == STATELESS_PROTOCOL_VERSION)
}

/// Every version gatehouse speaks, newest first: the stateless one, then the handshake era's.
fn supported_versions() -> Vec<&'static str> {
    std::iter::once(STATELESS_PROTOCOL_VERSION)
        .chain(SUPPORTED_PROTOCOL_VERSIONS)
        .collect()
}

/// What goes back: an HTTP status and a JSON-RPC body, 202 with none (a notification), or a call
/// whose progress the client asked for, answered on an SSE stream.
pub enum Answer {
    Json(StatusCode, Value),
    /// 200 with a result, decorated as it is written (see [`Decorated`]).
    Result(RequestId, Value),
    Accepted,
    /// Boxed: it holds the whole session and caller.
    Streamed(Box<Streamed>),
}

/// A `tools/call` with a `progressToken`, checked and ready to run: its progress notifications
/// and then its response go on the request's own SSE stream (never a request: what needs the
/// client is `input_required`, as without a stream).
pub struct Streamed {
    id: RequestId,
    session: SessionRecord,
    caller: Caller,
    params: Map<String, Value>,
    started: Instant,
}

impl Streamed {
    /// Runs the call, sending its notifications to `outbox`; the JSON-RPC response.
    pub async fn run(self, state: &McpState, outbox: &Outbox) -> Value {
        let span = telemetry::mcp_span("tools/call", &self.params);
        let answer = call::call(state, &self.session, &self.caller, self.params, Some(outbox))
            .instrument(span.clone())
            .await;
        telemetry::record_outcome(&span, answer.as_ref());
        measure::record(state, "tools/call", self.started, answer.as_ref());
        let decorated = answer.and_then(|result| {
            serde_json::to_value(Decorated(&result)).map_err(|e| {
                tracing::error!(error = %e, "could not write a tools/call result");
                RpcError::internal()
            })
        });
        match decorated {
            Ok(result) => jsonrpc::result_response(&self.id, result),
            Err(error) => jsonrpc::error_response(Some(&self.id), &error),
        }
    }
}

/// Answers a message of this era.
pub async fn answer(state: &McpState, headers: &HeaderMap, caller: &Caller, message: Message) -> Answer {
    let (id, method, params) = match message {
        Message::Request { id, method, params } => (id, method, params),
        // Cancellation is the client closing its request; nothing else is sent to a server.
        Message::Notification { .. } => return Answer::Accepted,
        Message::Response { id, .. } => {
            let error = RpcError::new(
                INVALID_REQUEST,
                "2026-07-28 clients answer input requests in the retried request, not as responses",
            );
            return Answer::Json(StatusCode::BAD_REQUEST, jsonrpc::error_response(Some(&id), &error));
        }
    };
    let started = Instant::now();
    let mut params = jsonrpc::params_object(params);
    if let Err(Refused { status, error }) = check(headers, &method, &params) {
        measure::record(state, &method, started, Err(&error));
        return Answer::Json(status, jsonrpc::error_response(Some(&id), &error));
    }
    if method == "tools/call" && params.get("_meta").and_then(|m| m.get("progressToken")).is_some() {
        return match stateless_session(caller, &mut params) {
            Ok(session) => Answer::Streamed(Box::new(Streamed {
                id,
                session,
                caller: caller.clone(),
                params,
                started,
            })),
            Err(error) => {
                measure::record(state, &method, started, Err(&error));
                Answer::Json(StatusCode::OK, jsonrpc::error_response(Some(&id), &error))
            }
        };
    }
    let span = telemetry::mcp_span(&method, &params);
    let outcome = dispatch(state, caller, &method, params).instrument(span.clone()).await;
    telemetry::record_outcome(&span, outcome.as_ref().map_err(|refused| &refused.error));
    measure::record(
        state,
        &method,
        started,
        outcome.as_ref().map_err(|refused| &refused.error),
    );
    match outcome {
        Ok(result) => Answer::Result(id, result),
        Err(Refused { status, error }) => Answer::Json(status, jsonrpc::error_response(Some(&id), &error)),
    }
}

/// A JSON-RPC error and the HTTP status it goes out with.
struct Refused {
    status: StatusCode,
    error: RpcError,
}

impl Refused {
    fn bad_request(code: i64, message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::BAD_REQUEST,
            error: RpcError::new(code, message),
        }
    }
}

/// Errors found by a method: 400 for what the request got wrong in this era's terms, 503 for an
/// outage, else 200 with the error.
impl From<RpcError> for Refused {
    fn from(error: RpcError) -> Self {
        let status = if error.is_unavailable() {
            StatusCode::SERVICE_UNAVAILABLE
        } else if error.code == jsonrpc::MISSING_REQUIRED_CLIENT_CAPABILITY {
            StatusCode::BAD_REQUEST
        } else {
            StatusCode::OK
        };
        Self { status, error }
    }
}

/// The request's headers against its body, in the order the specification lists the errors.
fn check(headers: &HeaderMap, method: &str, params: &Map<String, Value>) -> Result<(), Refused> {
    let header = |name: &HeaderName| headers.get(name).map(|v| v.to_str().map_err(|_| ()));
    let Some(Ok(version)) = header(&PROTOCOL_HEADER) else {
        return Err(Refused::bad_request(
            HEADER_MISMATCH,
            "Header mismatch: a 2026-07-28 request needs an MCP-Protocol-Version header",
        ));
    };
    let meta = params.get("_meta").and_then(Value::as_object);
    let missing: Vec<&str> = [META_VERSION, META_CAPABILITIES]
        .into_iter()
        .filter(|key| meta.is_none_or(|meta| !meta.contains_key(*key)))
        .collect();
    if !missing.is_empty() {
        return Err(Refused::bad_request(
            INVALID_PARAMS,
            format!("Invalid params: missing _meta keys: {}", missing.join(", ")),
        ));
    }
    let requested = meta.and_then(|meta| meta.get(META_VERSION)).and_then(Value::as_str);
    if requested != Some(version) {
        return Err(Refused::bad_request(
            HEADER_MISMATCH,
            "Header mismatch: MCP-Protocol-Version does not match _meta's protocolVersion",
        ));
    }
    if version != STATELESS_PROTOCOL_VERSION {
        return Err(Refused {
            status: StatusCode::BAD_REQUEST,
            error: RpcError::new(UNSUPPORTED_PROTOCOL_VERSION, "Unsupported protocol version")
                .with_data(json!({"supported": supported_versions(), "requested": version})),
        });
    }
    if header(&METHOD_HEADER) != Some(Ok(method)) {
        return Err(Refused::bad_request(
            HEADER_MISMATCH,
            "Header mismatch: the Mcp-Method header must name the request's method",
        ));
    }
    let named = match method {
        "tools/call" | "prompts/get" => params.get("name"),
        "resources/read" => params.get("uri"),
        _ => return Ok(()),
    };
    let sent = headers.get(NAME_HEADER).and_then(|v| decode_header(v.as_bytes()));
    if sent.is_none() || sent.as_deref() != named.and_then(Value::as_str) {
        return Err(Refused::bad_request(
            HEADER_MISMATCH,
            "Header mismatch: the Mcp-Name header must carry the request's name (or uri)",
        ));
    }
    Ok(())
}

/// A header's text: as it is when ASCII, or a `=?base64?…?=` word decoded (how clients send
/// names that are not).
fn decode_header(raw: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(raw).ok()?;
    match text.strip_prefix("=?base64?").and_then(|rest| rest.strip_suffix("?=")) {
        Some(encoded) => String::from_utf8(STANDARD.decode(encoded).ok()?).ok(),
        None => Some(text.to_owned()),
    }
}

async fn dispatch(
    state: &McpState,
    caller: &Caller,
    method: &str,
    mut params: Map<String, Value>,
) -> Result<Value, Refused> {
    match method {
        "server/discover" => Ok(discover(state)),
        "tools/list" => {
            let mut result = list_tools(state, caller, params)?;
            let ttl = if state.upstreams.is_empty() { TOOLS_TTL_MS } else { 0 };
            result["ttlMs"] = json!(ttl);
            // Which tools a caller sees depends on who it is (`allow`).
            result["cacheScope"] = json!("private");
            Ok(result)
        }
        "tools/call" => {
            let session = stateless_session(caller, &mut params)?;
            Ok(call::call(state, &session, caller, params, None).await?)
        }
        #[cfg(feature = "conformance")]
        "resources/list"
        | "resources/templates/list"
        | "resources/read"
        | "prompts/list"
        | "prompts/get"
        | "completion/complete"
            if state.fixtures.is_some() =>
        {
            let session = stateless_session(caller, &mut params)?;
            fixtures::answer(state, &session, method, params)
        }
        // Subscriptions need a session to send updates to: none in this era.
        // Cacheable results (the lists and reads) say how long: not at all, since upstreams' lists
        // and resources change at any time, and who sees what depends on who asks.
        "resources/list" | "resources/templates/list" | "resources/read" | "prompts/list" => {
            let session = stateless_session(caller, &mut params)?;
            let mut result = call::offered(state, &session, caller, params, method).await?;
            result["ttlMs"] = json!(0);
            result["cacheScope"] = json!("private");
            Ok(result)
        }
        "prompts/get" | "completion/complete" => {
            let session = stateless_session(caller, &mut params)?;
            Ok(call::offered(state, &session, caller, params, method).await?)
        }
        other => Err(not_found(other)),
    }
}

/// 404 with "Method not found", for a method this era does not serve.
fn not_found(method: &str) -> Refused {
    Refused {
        status: StatusCode::NOT_FOUND,
        error: RpcError::new(METHOD_NOT_FOUND, format!("Method not found: {method}")),
    }
}

fn discover(state: &McpState) -> Value {
    let capabilities = super::offered::capabilities(state, json!({"tools": {"listChanged": false}}), false);
    #[cfg(feature = "conformance")]
    let capabilities = fixtures::advertise(state, capabilities);
    json!({
        "supportedVersions": supported_versions(),
        "capabilities": capabilities,
        "instructions": INSTRUCTIONS,
        "ttlMs": if state.upstreams.is_empty() { DISCOVER_TTL_MS } else { 0 },
        "cacheScope": "public",
    })
}

/// The JSON-RPC response carrying a result of this era.
#[derive(Serialize)]
pub struct ResultResponse<'a> {
    jsonrpc: &'static str,
    id: &'a RequestId,
    result: Decorated<'a>,
}

impl<'a> ResultResponse<'a> {
    pub fn new(id: &'a RequestId, result: &'a Value) -> Self {
        Self {
            jsonrpc: "2.0",
            id,
            result: Decorated(result),
        }
    }
}

/// A result as it goes out: it says it is complete (unless it asks for input) and who answered,
/// in `_meta` beside whatever `_meta` it has. Both are written with the result rather than
/// inserted into it, so nothing is built per response for what never changes (every modern
/// response carries them; building them showed in the throughput of stateless calls).
pub struct Decorated<'a>(&'a Value);

impl Serialize for Decorated<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let Value::Object(result) = self.0 else {
            return self.0.serialize(serializer);
        };
        let mut map = serializer.serialize_map(None)?;
        if !result.contains_key("resultType") {
            map.serialize_entry("resultType", "complete")?;
        }
        map.serialize_entry("_meta", &ResultMeta(result.get("_meta")))?;
        for (key, value) in result.iter().filter(|(key, _)| *key != "_meta") {
            map.serialize_entry(key, value)?;
        }
        map.end()
    }
}

/// A result's `_meta` with the server's identity (replacing any the result claimed).
struct ResultMeta<'a>(Option<&'a Value>);

impl Serialize for ResultMeta<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry(META_SERVER_INFO, &SERVER_INFO)?;
        if let Some(Value::Object(meta)) = self.0 {
            for (key, value) in meta.iter().filter(|(key, _)| *key != META_SERVER_INFO) {
                map.serialize_entry(key, value)?;
            }
        }
        map.end()
    }
}

/// The session a stateless request stands in: the principal's shared stateless id, with what
/// this request's `_meta` says of its client, and nothing from any earlier request.
/// The capabilities and client info are moved out of `_meta` (the session holds them from then on).
fn stateless_session(caller: &Caller, params: &mut Map<String, Value>) -> Result<SessionRecord, RpcError> {
    let mut take = |key: &str| {
        params
            .get_mut("_meta")
            .and_then(Value::as_object_mut)
            .and_then(|meta| meta.remove(key))
    };
    let capabilities = take(META_CAPABILITIES);
    let client_info = take(META_CLIENT_INFO);
    let meta = params.get("_meta").and_then(Value::as_object);
    let capabilities = match capabilities {
        Some(value @ Value::Object(_)) if serialized_len(&value) <= MAX_CAPABILITIES_BYTES => value,
        Some(Value::Object(_)) => {
            return Err(RpcError::invalid_params(format!(
                "_meta's clientCapabilities is larger than {MAX_CAPABILITIES_BYTES} bytes"
            )));
        }
        _ => return Err(RpcError::invalid_params("_meta's clientCapabilities must be an object")),
    };
    let client_info = match client_info {
        None => Map::new(),
        Some(Value::Object(info)) => kept_client_info(info),
        Some(_) => return Err(RpcError::invalid_params("_meta's clientInfo must be an object")),
    };
    // Log messages go out only when the request asks for them, at its level or above.
    let log_level = match meta.and_then(|meta| meta.get(META_LOG_LEVEL)) {
        None => None,
        Some(Value::String(level)) => Some(level.parse::<LogLevel>().map_err(RpcError::invalid_params)?),
        Some(_) => return Err(RpcError::invalid_params("_meta's logLevel must be a string")),
    };
    Ok(SessionRecord {
        id: SessionId::stateless(&caller.principal),
        principal: caller.principal.clone(),
        protocol_version: ProtocolVersion::stateless(),
        client_info: Value::Object(client_info),
        client_capabilities: capabilities,
        log_level,
        created_at: Utc::now(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_read_plain_or_from_base64_words() {
        assert_eq!(decode_header(b"acme_me").as_deref(), Some("acme_me"));
        let encoded = format!("=?base64?{}?=", STANDARD.encode("café"));
        assert_eq!(decode_header(encoded.as_bytes()).as_deref(), Some("café"));
        assert_eq!(decode_header(b"=?base64?not base64?="), None);
    }

    #[test]
    fn results_go_out_complete_and_signed_by_the_server_keeping_their_own_meta() {
        let written = |result: Value| serde_json::to_value(Decorated(&result)).expect("serializes");
        let server_info = json!({"name": "gatehouse", "title": "gatehouse", "version": env!("CARGO_PKG_VERSION")});
        assert_eq!(
            written(json!({"tools": []})),
            json!({"resultType": "complete", "tools": [], "_meta": {META_SERVER_INFO: server_info}})
        );
        assert_eq!(
            written(json!({"resultType": "input_required", "requestState": "s",
                "_meta": {"progress": 1, META_SERVER_INFO: {"name": "impostor"}}})),
            json!({"resultType": "input_required", "requestState": "s",
                "_meta": {"progress": 1, META_SERVER_INFO: server_info}})
        );
        assert_eq!(
            written(json!({"_meta": null})),
            json!({"resultType": "complete", "_meta": {META_SERVER_INFO: server_info}})
        );
        assert_eq!(written(json!("not an object")), json!("not an object"));
        let id = RequestId::Number(7);
        let result = json!({});
        assert_eq!(
            serde_json::to_value(ResultResponse::new(&id, &result)).expect("serializes"),
            json!({"jsonrpc": "2.0", "id": 7, "result": {"resultType": "complete", "_meta": {META_SERVER_INFO: server_info}}})
        );
    }

    #[test]
    fn client_info_is_moved_out_of_meta_and_only_its_short_text_fields_kept() {
        let caller = Caller::named(crate::domain::Principal::parse("ada").expect("principal"));
        let params = json!({"_meta": {META_CAPABILITIES: {}, "progressToken": 1, META_CLIENT_INFO: {
            "name": "n".repeat(1000), "version": "1.0", "icons": [{"src": "data:"}], "title": 3}}});
        let mut params = params.as_object().expect("object").clone();
        let session = stateless_session(&caller, &mut params).expect("session");
        let name = session.client_info["name"].as_str().expect("name");
        assert!(name.len() <= 256 && name.ends_with('…'), "{name}");
        assert_eq!(session.client_info["version"], "1.0");
        assert_eq!(session.client_info.as_object().map(Map::len), Some(2));
        assert_eq!(params["_meta"], json!({"progressToken": 1}));
    }

    #[test]
    fn log_messages_are_admitted_only_at_the_level_meta_asks_for() {
        let caller = Caller::named(crate::domain::Principal::parse("ada").expect("principal"));
        let with = |meta: Value| {
            let params = json!({"_meta": meta});
            let mut params = params.as_object().expect("object").clone();
            stateless_session(&caller, &mut params).map(|session| session.log_level)
        };
        let capabilities = json!({});
        assert_eq!(with(json!({META_CAPABILITIES: capabilities})).expect("no level"), None);
        assert_eq!(
            with(json!({META_CAPABILITIES: capabilities, META_LOG_LEVEL: "warning"})).expect("warning"),
            Some(LogLevel::Warning)
        );
        for bad in [json!("loud"), json!(3)] {
            let refused = with(json!({META_CAPABILITIES: capabilities, META_LOG_LEVEL: bad})).expect_err("refused");
            assert_eq!(refused.code, INVALID_PARAMS);
        }
    }
}
