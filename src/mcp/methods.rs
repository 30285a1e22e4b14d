//! The MCP methods gatehouse answers.

use std::sync::Arc;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chrono::Utc;
use serde_json::{Map, Value, json};

use super::jsonrpc::{self, METHOD_NOT_FOUND, RpcError};
use super::{LATEST_PROTOCOL_VERSION, SUPPORTED_PROTOCOL_VERSIONS};
use crate::domain::{LogLevel, Principal, SessionId};
use crate::state::AppState;
use crate::store::SessionRecord;
use crate::tools::{CallContext, ToolResult};

/// Told to the model at `initialize`: how gated tools behave and what to do about it.
const INSTRUCTIONS: &str = "Some tools on this server act on the user's accounts at other services or need \
information that only the user can enter, in a browser. When such a tool needs something the user has not \
provided yet, the call fails with a URL (JSON-RPC error -32042, or a tool result with the URL when the client \
cannot open URLs itself). Show the URL to the user, ask them to open it and finish there, then call the same \
tool again with the same arguments. Never ask the user to paste passwords, API keys or tokens into the \
conversation: the page collects them. Call `whoami` to see who the server thinks is calling.";

/// Answers `initialize`: persists a new session and returns its id and the result.
pub async fn initialize(
    state: &AppState,
    principal: Principal,
    params: Option<Value>,
) -> Result<(SessionId, Value), RpcError> {
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
        Some(value @ Value::Object(_)) => value,
        Some(_) => return Err(RpcError::invalid_params("params.capabilities must be an object")),
    };
    let client_info = match params.remove("clientInfo") {
        None => json!({}),
        Some(value @ Value::Object(_)) => value,
        Some(_) => return Err(RpcError::invalid_params("params.clientInfo must be an object")),
    };
    let record = SessionRecord {
        id: SessionId::generate(),
        principal,
        protocol_version: version.to_owned(),
        client_info,
        client_capabilities: capabilities,
        log_level: None,
        created_at: Utc::now(),
    };
    let record = state.sessions.create(record).await.map_err(|e| {
        tracing::error!(error = %e, "could not persist a new session");
        RpcError::internal()
    })?;
    tracing::info!(session = ?record.id, principal = %record.principal, protocol = version, client = %record.client_info, "session started");
    let result = json!({
        "protocolVersion": version,
        "capabilities": {"tools": {"listChanged": false}, "logging": {}},
        "serverInfo": {"name": "gatehouse", "title": "gatehouse", "version": env!("CARGO_PKG_VERSION")},
        "instructions": INSTRUCTIONS,
    });
    Ok((record.id.clone(), result))
}

/// Answers a request within an established session.
pub async fn handle(
    state: &AppState,
    session: &Arc<SessionRecord>,
    principal: &Principal,
    method: &str,
    params: Option<Value>,
) -> Result<Value, RpcError> {
    let params = jsonrpc::params_object(params);
    match method {
        "ping" => Ok(json!({})),
        "logging/setLevel" => set_level(state, session, params).await,
        "tools/list" => list_tools(state, params),
        "tools/call" => call_tool(state, session, principal, params).await,
        "initialize" => Err(RpcError::new(
            jsonrpc::INVALID_REQUEST,
            "the session is already initialized",
        )),
        other => Err(RpcError::new(METHOD_NOT_FOUND, format!("Method not found: {other}"))),
    }
}

async fn set_level(state: &AppState, session: &SessionRecord, params: Map<String, Value>) -> Result<Value, RpcError> {
    let level: LogLevel = params
        .get("level")
        .and_then(Value::as_str)
        .ok_or_else(|| RpcError::invalid_params("logging/setLevel needs params.level"))?
        .parse()
        .map_err(RpcError::invalid_params)?;
    state.sessions.set_log_level(&session.id, level).await.map_err(|e| {
        tracing::error!(error = %e, "could not store the log level");
        RpcError::internal()
    })?;
    Ok(json!({}))
}

fn encode_cursor(offset: usize) -> String {
    URL_SAFE_NO_PAD.encode(format!("offset:{offset}"))
}

fn decode_cursor(cursor: &str) -> Option<usize> {
    let bytes = URL_SAFE_NO_PAD.decode(cursor).ok()?;
    std::str::from_utf8(&bytes).ok()?.strip_prefix("offset:")?.parse().ok()
}

fn list_tools(state: &AppState, params: Map<String, Value>) -> Result<Value, RpcError> {
    let offset = match params.get("cursor") {
        None | Some(Value::Null) => 0,
        Some(Value::String(cursor)) => decode_cursor(cursor)
            .filter(|offset| *offset <= state.tools.len())
            .ok_or_else(|| RpcError::invalid_params("params.cursor is not a cursor this server gave out"))?,
        Some(_) => return Err(RpcError::invalid_params("params.cursor must be a string")),
    };
    let (page, next) = state.tools.page(offset, state.config.mcp.page_size);
    let mut result = json!({"tools": page.iter().map(|t| t.definition().to_json()).collect::<Vec<_>>()});
    if let Some(next) = next {
        result["nextCursor"] = json!(encode_cursor(next));
    }
    Ok(result)
}

async fn call_tool(
    state: &AppState,
    session: &SessionRecord,
    principal: &Principal,
    mut params: Map<String, Value>,
) -> Result<Value, RpcError> {
    let name = match params.remove("name") {
        Some(Value::String(name)) => name,
        _ => return Err(RpcError::invalid_params("tools/call needs params.name (a string)")),
    };
    let arguments = match params.remove("arguments") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(arguments)) => arguments,
        Some(_) => return Err(RpcError::invalid_params("params.arguments must be an object")),
    };
    let tool = state
        .tools
        .get(&name)
        .ok_or_else(|| RpcError::invalid_params(format!("Unknown tool: {name}")))?;
    if let Err(problems) = tool.definition().input_schema.check(&arguments) {
        let result = ToolResult::error(format!("Invalid arguments for {name}: {}.", problems.join("; ")));
        return Ok(result.to_json());
    }
    log(
        state,
        session,
        LogLevel::Debug,
        json!({"event": "tool call", "tool": name}),
    )
    .await;
    let result = tool.call(&CallContext { principal, session }, &arguments).await;
    if result.is_error {
        let text = result
            .content
            .first()
            .and_then(|c| c.get("text"))
            .cloned()
            .unwrap_or(Value::Null);
        log(
            state,
            session,
            LogLevel::Warning,
            json!({"event": "tool failed", "tool": name, "error": text}),
        )
        .await;
    }
    Ok(result.to_json())
}

/// Sends a `notifications/message` on the session's stream when its level admits `level`.
/// Sessions that never called `logging/setLevel` get none.
async fn log(state: &AppState, session: &SessionRecord, level: LogLevel, data: Value) {
    let Some(threshold) = session.log_level else { return };
    if level < threshold {
        return;
    }
    let message = jsonrpc::notification(
        "notifications/message",
        json!({"level": level, "logger": "gatehouse", "data": data}),
    );
    if let Err(error) = state.bus.publish(&session.id, &message).await {
        tracing::warn!(%error, "could not queue a log message for the client");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_reject_forgeries() {
        assert_eq!(decode_cursor(&encode_cursor(50)), Some(50));
        assert_eq!(decode_cursor("not-base64!"), None);
        assert_eq!(decode_cursor(&URL_SAFE_NO_PAD.encode("page:2")), None);
    }
}
