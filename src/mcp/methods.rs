//! The MCP methods gatehouse answers.

use std::sync::Arc;
use std::time::Instant;

use chrono::Utc;
use serde::Serialize;
use serde_json::{Map, Value, json};
use tracing::Instrument;

use super::incall::Outbox;
use super::measure;
use super::paging::page;
use super::state::McpState;
use super::store_failure;
use super::tool_call::{self, Retry, Stream, ToolRequest, supports_url_elicitation};
use super::{LATEST_PROTOCOL_VERSION, SUPPORTED_PROTOCOL_VERSIONS};
use crate::config::ElicitMode;
use crate::domain::{LogLevel, Principal, ProtocolVersion, SessionId};
use crate::identity::Caller;
use crate::jsonrpc::{self, METHOD_NOT_FOUND, RequestId, RpcError};
use crate::store::SessionRecord;
use crate::telemetry;
use crate::text;
use crate::tools::Tool;

/// Told to the model at `initialize`: how gated tools behave and what to do about it.
const INSTRUCTIONS: &str = "Some tools on this server act on the user's accounts at other services or need \
information that only the user can enter, in a browser. When such a tool needs something the user has not \
provided yet, the call fails with a URL (JSON-RPC error -32042, or a tool result with the URL when the client \
cannot open URLs itself). Show the URL to the user, ask them to open it and finish there, then call the same \
tool again with the same arguments. Some tools instead ask the client to open the URL during the call and wait \
for the user. Never ask the user to paste passwords, API keys or tokens into the \
conversation: the page collects them. Call `whoami` to see who the server thinks is calling.";

/// Who answers, as an MCP `Implementation`: `serverInfo` at `initialize`, and
/// `io.modelcontextprotocol/serverInfo` on every result of the 2026-07-28 era.
#[derive(Serialize)]
pub(super) struct Implementation {
    name: &'static str,
    title: &'static str,
    version: &'static str,
}

pub(super) const SERVER_INFO: Implementation = Implementation {
    name: "gatehouse",
    title: "gatehouse",
    version: env!("CARGO_PKG_VERSION"),
};

/// Largest `capabilities` object `initialize` accepts, serialized. gatehouse reads it (whether
/// the client opens URLs) and so keeps it whole; real clients send a few hundred bytes.
pub(super) const MAX_CAPABILITIES_BYTES: usize = 16 * 1024;

/// What is kept of `clientInfo`, each a string cut to [`MAX_CLIENT_INFO_BYTES`]. Not refused
/// when larger, unlike `capabilities`: an `Implementation` may rightly carry large optional fields
/// (icons as `data:` URIs, a description) that gatehouse never uses, and a client should not fail
/// to connect over them. Only what pages and logs show is stored.
const CLIENT_INFO_FIELDS: [&str; 3] = ["name", "title", "version"];
const MAX_CLIENT_INFO_BYTES: usize = 256;

/// The length of `value` serialized, counted without writing it anywhere (a stateless request
/// carries its capabilities every time, so this runs on every such call).
pub(super) fn serialized_len(value: &Value) -> usize {
    struct Counter(usize);
    impl std::io::Write for Counter {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 = self.0.saturating_add(bytes.len());
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut counter = Counter(0);
    serde_json::to_writer(&mut counter, value).map_or(usize::MAX, |()| counter.0)
}

pub(super) fn kept_client_info(info: Map<String, Value>) -> Map<String, Value> {
    info.into_iter()
        .filter(|(field, _)| CLIENT_INFO_FIELDS.contains(&field.as_str()))
        .filter_map(|(field, value)| match value {
            Value::String(text) if text.len() > MAX_CLIENT_INFO_BYTES => {
                Some((field, Value::String(text::bounded(&text, MAX_CLIENT_INFO_BYTES))))
            }
            text @ Value::String(_) => Some((field, text)),
            _ => None,
        })
        .collect()
}

/// Answers `initialize`: persists a new session (ending the principal's least recently used one
/// beyond the cap) and returns its id and the result.
pub async fn initialize(
    state: &McpState,
    principal: Principal,
    params: Option<Value>,
) -> Result<(Arc<SessionRecord>, Value), RpcError> {
    let started = Instant::now();
    let span = telemetry::mcp_span("initialize", &Map::new());
    let answer = start_session(state, principal, params).instrument(span.clone()).await;
    let outcome = answer.as_ref().map(|(_, result)| result);
    telemetry::record_outcome(&span, outcome);
    measure::record(state, "initialize", started, outcome);
    answer
}

async fn start_session(
    state: &McpState,
    principal: Principal,
    params: Option<Value>,
) -> Result<(Arc<SessionRecord>, Value), RpcError> {
    let mut params = jsonrpc::params_object(params);
    let requested = params
        .get("protocolVersion")
        .and_then(Value::as_str)
        .ok_or_else(|| RpcError::invalid_params("initialize needs params.protocolVersion (a string)"))?;
    let version = SUPPORTED_PROTOCOL_VERSIONS
        .iter()
        .find(|v| **v == requested)
        .copied()
        .unwrap_or(LATEST_PROTOCOL_VERSION);
    let capabilities = match params.remove("capabilities") {
        None => json!({}),
        Some(value @ Value::Object(_)) if serialized_len(&value) <= MAX_CAPABILITIES_BYTES => value,
        Some(Value::Object(_)) => {
            return Err(RpcError::invalid_params(format!(
                "params.capabilities is larger than {MAX_CAPABILITIES_BYTES} bytes"
            )));
        }
        Some(_) => return Err(RpcError::invalid_params("params.capabilities must be an object")),
    };
    let client_info = match params.remove("clientInfo") {
        None => Map::new(),
        Some(Value::Object(info)) => kept_client_info(info),
        Some(_) => return Err(RpcError::invalid_params("params.clientInfo must be an object")),
    };
    let record = SessionRecord {
        id: SessionId::generate(),
        principal,
        protocol_version: ProtocolVersion::new(version),
        client_info: Value::Object(client_info),
        client_capabilities: capabilities,
        log_level: None,
        created_at: Utc::now(),
    };
    let turn = state.admission.turn().await?;
    let (record, evicted) = state
        .sessions
        .create(record)
        .await
        .map_err(|e| store_failure(state, "could not persist a new session", &e))?;
    drop(turn);
    for ended in &evicted {
        state.upstreams.session_ended(ended);
        tracing::info!(session = ?ended, principal = %record.principal, "ended the least recently used session: the principal holds the most allowed");
    }
    let about = |field: &str| record.client_info.get(field).and_then(Value::as_str).unwrap_or("-");
    tracing::info!(
        session = ?record.id,
        principal = %record.principal,
        protocol = version,
        client = about("name"),
        client_version = about("version"),
        "session started"
    );
    let result = json!({
        "protocolVersion": version,
        "capabilities": offered(state),
        "serverInfo": SERVER_INFO,
        "instructions": INSTRUCTIONS,
    });
    Ok((record, result))
}

/// The capabilities `initialize` announces: tools and logging, and what the upstreams offer
/// beside tools as far as their listings tell.
fn offered(state: &McpState) -> Value {
    let capabilities = json!({"tools": {"listChanged": !state.upstreams.is_empty()}, "logging": {}});
    let capabilities = super::offered::capabilities(state, capabilities, true);
    #[cfg(feature = "conformance")]
    if state.fixtures.is_some() {
        return super::fixtures::advertise(capabilities, true);
    }
    capabilities
}

/// Whether the request's answer goes out as an SSE stream: a call to a tool that asks for what
/// it misses within the call (`elicit = "request"`), from a client that can open URLs; or a call
/// to a tool whose client may be sent something while it runs (an upstream's progress, log
/// messages and elicitations, say).
pub fn streams_answer(state: &McpState, session: &SessionRecord, method: &str, params: Option<&Value>) -> bool {
    if method != "tools/call" {
        return false;
    }
    let Some(name) = params.and_then(|p| p.get("name")).and_then(Value::as_str) else {
        return false;
    };
    let Some(tool) = state.tools.get(name).cloned().or_else(|| state.upstreams.tool(name)) else {
        return false;
    };
    let progress_requested = params.and_then(|p| p.pointer("/_meta/progressToken")).is_some();
    (supports_url_elicitation(session) && tool.definition().elicit == ElicitMode::Request)
        || tool.sends_during_call(session, progress_requested)
}

/// Answers the request `id` within an established session. `outbox` is the request's own SSE
/// stream, when it has one.
pub async fn handle(
    state: &McpState,
    session: &Arc<SessionRecord>,
    caller: &Caller,
    id: &RequestId,
    method: &str,
    params: Option<Value>,
    outbox: Option<&Outbox>,
) -> Result<Value, RpcError> {
    let started = Instant::now();
    let params = jsonrpc::params_object(params);
    let span = telemetry::mcp_span(method, &params);
    let answer = async {
        match method {
            "ping" => Ok(json!({})),
            "logging/setLevel" => set_level(state, session, params).await,
            "tools/list" => list_tools(state, caller, params),
            "tools/call" => {
                let running = state.calls.start(&session.id, id);
                let mut params = params;
                let request = ToolRequest::parse(&mut params)?;
                let called = tool_call::call(
                    state,
                    session,
                    caller,
                    request,
                    outbox.map(Stream::Full),
                    Retry::default(),
                    &running.cancelled,
                )
                .await?;
                tool_call::handshake_answer(session, called)
            }
            #[cfg(feature = "conformance")]
            method if jsonrpc::OFFERED_METHODS.contains(&method) && state.fixtures.is_some() => {
                super::fixtures::answer(state.fixtures.as_deref(), &session.id, method, &params)
            }
            method if jsonrpc::OFFERED_METHODS.contains(&method) => {
                super::offered::handshake(state, session, caller, method, &params).await
            }
            "initialize" => Err(RpcError::new(
                jsonrpc::INVALID_REQUEST,
                "the session is already initialized",
            )),
            other => Err(RpcError::new(METHOD_NOT_FOUND, format!("Method not found: {other}"))),
        }
    }
    .instrument(span.clone())
    .await;
    telemetry::record_outcome(&span, answer.as_ref());
    measure::record(state, method, started, answer.as_ref());
    answer
}

/// A notification from the client within an established session: a cancellation stops its
/// call; the others need nothing from the server.
pub async fn notified(state: &McpState, session: &SessionId, method: &str, params: Option<&Value>) {
    if method == "notifications/cancelled" {
        super::calls::cancel(state, &state.calls, session, params).await;
    }
}

async fn set_level(state: &McpState, session: &SessionRecord, params: Map<String, Value>) -> Result<Value, RpcError> {
    let level: LogLevel = params
        .get("level")
        .and_then(Value::as_str)
        .ok_or_else(|| RpcError::invalid_params("logging/setLevel needs params.level"))?
        .parse()
        .map_err(RpcError::invalid_params)?;
    state
        .sessions
        .set_log_level(&session.id, level)
        .await
        .map_err(|e| store_failure(state, "could not store the log level", &e))?;
    Ok(json!({}))
}

/// gatehouse's own tools, then the upstreams' in configuration order: those the caller may use.
pub(super) fn list_tools(state: &McpState, caller: &Caller, params: Map<String, Value>) -> Result<Value, RpcError> {
    let upstream_tools = state.upstreams.tools();
    let visible: Vec<&Arc<dyn Tool>> = state
        .tools
        .all()
        .iter()
        .chain(upstream_tools.iter())
        .filter(|t| t.definition().permits(&caller.claims))
        .collect();
    page(visible, "tools", &params, state.config.mcp.page_size, |t| {
        t.definition().to_json()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_serialized_length_is_counted_exactly() {
        for value in [
            json!({}),
            json!({"elicitation": {"url": {}}, "name": "é \" \u{1}", "n": [1, 2.5, null, true]}),
        ] {
            let written = serde_json::to_vec(&value).map(|bytes| bytes.len());
            assert_eq!(Ok(serialized_len(&value)), written.map_err(|e| e.to_string()));
        }
    }
}
