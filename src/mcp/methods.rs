//! The MCP methods gatehouse answers.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chrono::Utc;
use serde_json::{Map, Value, json};

use super::calls::StreamChannel;
use super::incall::{self, Outbox, Waited};
use super::{LATEST_PROTOCOL_VERSION, SUPPORTED_PROTOCOL_VERSIONS};
use crate::config::ElicitMode;
use crate::domain::{LogLevel, Principal, SessionId};
use crate::gate::{Credentials, Decision, GateError, Requirement, ToolCall};
use crate::identity::Caller;
use crate::jsonrpc::{self, METHOD_NOT_FOUND, RequestId, RpcError, URL_ELICITATION_REQUIRED};
use crate::state::AppState;
use crate::store::{ElicitationRecord, SessionRecord, StoreError};
use crate::text;
use crate::tools::{CallContext, CallStream, Tool, ToolOutcome, ToolResult};
use tokio_util::sync::CancellationToken;

/// Told to the model at `initialize`: how gated tools behave and what to do about it.
const INSTRUCTIONS: &str = "Some tools on this server act on the user's accounts at other services or need \
information that only the user can enter, in a browser. When such a tool needs something the user has not \
provided yet, the call fails with a URL (JSON-RPC error -32042, or a tool result with the URL when the client \
cannot open URLs itself). Show the URL to the user, ask them to open it and finish there, then call the same \
tool again with the same arguments. Some tools instead ask the client to open the URL during the call and wait \
for the user. Never ask the user to paste passwords, API keys or tokens into the \
conversation: the page collects them. Call `whoami` to see who the server thinks is calling.";

/// Largest `capabilities` object `initialize` accepts, serialized. gatehouse reads it (whether
/// the client opens URLs) and so keeps it whole; real clients send a few hundred bytes.
const MAX_CAPABILITIES_BYTES: usize = 16 * 1024;

/// What is kept of `clientInfo`, each a string cut to [`MAX_CLIENT_INFO_BYTES`]. Not refused
/// when larger, unlike `capabilities`: an `Implementation` may rightly carry large optional fields
/// (icons as `data:` URIs, a description) that gatehouse never uses, and a client should not fail
/// to connect over them. Only what pages and logs show is stored.
const CLIENT_INFO_FIELDS: [&str; 3] = ["name", "title", "version"];
const MAX_CLIENT_INFO_BYTES: usize = 256;

fn serialized_len(value: &Value) -> usize {
    serde_json::to_vec(value).map_or(usize::MAX, |bytes| bytes.len())
}

fn kept_client_info(info: &Map<String, Value>) -> Map<String, Value> {
    CLIENT_INFO_FIELDS
        .iter()
        .filter_map(|field| {
            let text = info.get(*field)?.as_str()?;
            Some(((*field).to_owned(), json!(text::bounded(text, MAX_CLIENT_INFO_BYTES))))
        })
        .collect()
}

/// Answers `initialize`: persists a new session (ending the principal's least recently used one
/// beyond the cap) and returns its id and the result.
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
        Some(Value::Object(info)) => kept_client_info(&info),
        Some(_) => return Err(RpcError::invalid_params("params.clientInfo must be an object")),
    };
    let record = SessionRecord {
        id: SessionId::generate(),
        principal,
        protocol_version: version.to_owned(),
        client_info: Value::Object(client_info),
        client_capabilities: capabilities,
        log_level: None,
        created_at: Utc::now(),
    };
    let (record, evicted) = state
        .sessions
        .create(record)
        .await
        .map_err(|e| store_failure("could not persist a new session", &e))?;
    for ended in &evicted {
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
        "serverInfo": {"name": "gatehouse", "title": "gatehouse", "version": env!("CARGO_PKG_VERSION")},
        "instructions": INSTRUCTIONS,
    });
    Ok((record.id.clone(), result))
}

/// The capabilities `initialize` announces.
fn offered(state: &AppState) -> Value {
    let capabilities = json!({"tools": {"listChanged": !state.upstreams.is_empty()}, "logging": {}});
    #[cfg(feature = "conformance")]
    if state.fixtures.is_some() {
        return super::fixtures::advertise(capabilities);
    }
    capabilities
}

/// Whether the request's answer goes out as an SSE stream: a call to a tool that asks for what
/// it misses within the call (`elicit = "request"`), from a client that can open URLs; or a call
/// to a tool whose client may be sent something while it runs (an upstream's progress, log
/// messages and elicitations, say).
pub fn streams_answer(state: &AppState, session: &SessionRecord, method: &str, params: Option<&Value>) -> bool {
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
    state: &AppState,
    session: &Arc<SessionRecord>,
    caller: &Caller,
    id: &RequestId,
    method: &str,
    params: Option<Value>,
    outbox: Option<&Outbox>,
) -> Result<Value, RpcError> {
    let params = jsonrpc::params_object(params);
    match method {
        "ping" => Ok(json!({})),
        "logging/setLevel" => set_level(state, session, params).await,
        "tools/list" => list_tools(state, caller, params),
        "tools/call" => {
            let running = state.calls.start(&session.id, id);
            call_tool(state, session, caller, params, outbox, &running.cancelled).await
        }
        #[cfg(feature = "conformance")]
        "resources/list"
        | "resources/templates/list"
        | "resources/read"
        | "resources/subscribe"
        | "resources/unsubscribe"
        | "prompts/list"
        | "prompts/get"
        | "completion/complete" => super::fixtures::answer(state.fixtures.as_deref(), &session.id, method, &params),
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
    state
        .sessions
        .set_log_level(&session.id, level)
        .await
        .map_err(|e| store_failure("could not store the log level", &e))?;
    Ok(json!({}))
}

fn encode_cursor(offset: usize) -> String {
    URL_SAFE_NO_PAD.encode(format!("offset:{offset}"))
}

fn decode_cursor(cursor: &str) -> Option<usize> {
    let bytes = URL_SAFE_NO_PAD.decode(cursor).ok()?;
    std::str::from_utf8(&bytes).ok()?.strip_prefix("offset:")?.parse().ok()
}

/// gatehouse's own tools, then the upstreams' in configuration order: those the caller may use.
fn list_tools(state: &AppState, caller: &Caller, params: Map<String, Value>) -> Result<Value, RpcError> {
    let upstream_tools = state.upstreams.tools();
    let visible: Vec<&Arc<dyn Tool>> = state
        .tools
        .all()
        .iter()
        .chain(upstream_tools.iter())
        .filter(|t| t.definition().permits(&caller.claims))
        .collect();
    let total = visible.len();
    let offset = match params.get("cursor") {
        None | Some(Value::Null) => 0,
        Some(Value::String(cursor)) => decode_cursor(cursor)
            .filter(|offset| *offset <= total)
            .ok_or_else(|| RpcError::invalid_params("params.cursor is not a cursor this server gave out"))?,
        Some(_) => return Err(RpcError::invalid_params("params.cursor must be a string")),
    };
    let end = offset.saturating_add(state.config.mcp.page_size).min(total);
    let next = (end < total).then_some(end);
    let page: Vec<Value> = visible[offset..end].iter().map(|t| t.definition().to_json()).collect();
    let mut result = json!({ "tools": page });
    if let Some(next) = next {
        result["nextCursor"] = json!(encode_cursor(next));
    }
    Ok(result)
}

async fn call_tool(
    state: &AppState,
    session: &SessionRecord,
    caller: &Caller,
    mut params: Map<String, Value>,
    outbox: Option<&Outbox>,
    cancelled: &CancellationToken,
) -> Result<Value, RpcError> {
    let progress_token = params
        .get("_meta")
        .and_then(|meta| meta.get("progressToken"))
        .filter(|token| token.is_string() || token.is_i64())
        .cloned();
    let name = match params.remove("name") {
        Some(Value::String(name)) => name,
        _ => return Err(RpcError::invalid_params("tools/call needs params.name (a string)")),
    };
    let arguments = match params.remove("arguments") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(arguments)) => arguments,
        Some(_) => return Err(RpcError::invalid_params("params.arguments must be an object")),
    };
    let tool: Arc<dyn Tool> = match state.tools.get(&name) {
        Some(tool) => tool.clone(),
        None => state
            .upstreams
            .tool(&name)
            .ok_or_else(|| RpcError::invalid_params(format!("Unknown tool: {name}")))?,
    };
    // A tool the caller may not use is refused exactly like one that does not exist.
    if !tool.definition().permits(&caller.claims) {
        return Err(RpcError::invalid_params(format!("Unknown tool: {name}")));
    }
    let principal = &caller.principal;
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
    let definition = tool.definition();
    let details = definition.form_details(&arguments);
    let mut requires = definition.requires.clone();
    let stream: Option<Arc<dyn CallStream>> = outbox.map(|outbox| {
        Arc::new(StreamChannel {
            outbox: outbox.clone(),
            session: session.id.clone(),
            calls: state.calls.clone(),
        }) as Arc<dyn CallStream>
    });
    let waiting = match (outbox, definition.elicit) {
        (Some(outbox), ElicitMode::Request) => Some(Waiting {
            outbox,
            progress_token: progress_token.as_ref(),
            timeout: definition.elicit_timeout,
        }),
        _ => None,
    };
    // A rejected token breaks its connection, so the second decision elicits; missing scopes join
    // the requirements, so the next decision asks for them. Three rounds cover both.
    for _ in 0..3 {
        let call = ToolCall {
            tool: &name,
            requires: &requires,
            arguments: &arguments,
            details: &details,
        };
        let credentials = match gate_call(state, session, principal, &call, waiting.as_ref()).await? {
            Gated::Run(credentials) => credentials,
            Gated::Reply(result) => return Ok(result.to_json()),
            Gated::Elicit(elicitations) => return elicit(session, &elicitations),
        };
        let context = CallContext {
            principal,
            session,
            credentials: &credentials,
            gate: &state.gate,
            stream: stream.clone(),
            progress_token: progress_token.as_ref(),
            cancelled,
            offerings: state.upstreams.as_ref(),
        };
        match tool.call(&context, &arguments).await {
            ToolOutcome::Done(result) => {
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
                return Ok(result.to_json());
            }
            ToolOutcome::CredentialRejected { provider } => {
                state
                    .gate
                    .credential_rejected(principal, &provider, &credentials)
                    .await
                    .map_err(internal)?;
            }
            ToolOutcome::ScopesMissing { provider, scopes } => {
                tracing::info!(tool = name, %provider, ?scopes, "the upstream wants more scopes: asking the user to grant them");
                if !add_scopes(&mut requires, &provider, scopes) {
                    return Ok(ToolResult::error(format!(
                        "{name} needs permissions the connected {provider} account has not granted, and asking again                          did not help. Ask the user to check the account's permissions."
                    ))
                    .to_json());
                }
            }
            ToolOutcome::UrlElicitations(elicitations) => return ask_to_open(session, elicitations),
        }
    }
    Ok(ToolResult::error(format!(
        "{name} could not use the connected account; ask the user to sign in again."
    ))
    .to_json())
}

/// Adds `scopes` to the call's requirement for `provider`; false when it holds them all already
/// (asking again cannot help).
fn add_scopes(requires: &mut Vec<Requirement>, provider: &str, scopes: Vec<String>) -> bool {
    let existing = requires.iter_mut().find_map(|r| match r {
        Requirement::Provider { provider: p, scopes } if p == provider => Some(scopes),
        _ => None,
    });
    match existing {
        Some(held) => {
            let before = held.len();
            for scope in scopes {
                if !held.contains(&scope) {
                    held.push(scope);
                }
            }
            held.len() > before
        }
        None => {
            requires.push(Requirement::Provider {
                provider: provider.to_owned(),
                scopes,
            });
            true
        }
    }
}

/// Error -32042 with these URL-mode `elicitations` entries (gatehouse's own, or an upstream's
/// passed on as they are); for clients without URL mode, a result that asks the model to have the
/// user open the URLs.
fn ask_to_open(session: &SessionRecord, elicitations: Vec<Value>) -> Result<Value, RpcError> {
    if supports_url_elicitation(session) {
        return Err(
            RpcError::new(URL_ELICITATION_REQUIRED, "This request requires more information.")
                .with_data(json!({ "elicitations": elicitations })),
        );
    }
    let steps: Vec<String> = elicitations
        .iter()
        .map(|e| {
            let message = e
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("A step in the browser is needed.");
            let url = e.get("url").and_then(Value::as_str).unwrap_or("");
            format!("- {message} Open: {url}")
        })
        .collect();
    Ok(ToolResult::error(format!(
        "The user must first complete a step in their browser:\n{}\nShow the link to the user, ask them to open it and \
         finish there, then call this tool again with the same arguments.",
        steps.join("\n")
    ))
    .to_json())
}

/// Where a call stands after the gate: run the tool, answer the model instead, or fail with the
/// elicitations the user must finish (-32042, or a result with the links).
enum Gated {
    Run(Credentials),
    Reply(ToolResult),
    Elicit(Vec<ElicitationRecord>),
}

/// How a call waits for the user within itself (`elicit = "request"` on a stream).
struct Waiting<'a> {
    outbox: &'a Outbox,
    progress_token: Option<&'a Value>,
    timeout: Duration,
}

/// Rounds of asking within one call: enough for a tool that needs a sign-in and a form.
const MAX_IN_CALL_ROUNDS: usize = 4;

/// Decides, and when the call may wait for the user, asks within the call and decides again.
async fn gate_call(
    state: &AppState,
    session: &SessionRecord,
    principal: &Principal,
    call: &ToolCall<'_>,
    waiting: Option<&Waiting<'_>>,
) -> Result<Gated, RpcError> {
    for _ in 0..MAX_IN_CALL_ROUNDS {
        let elicitations = match decide(state, session, principal, call).await? {
            Gated::Elicit(elicitations) => elicitations,
            settled => return Ok(settled),
        };
        let Some(waiting) = waiting else {
            return Ok(Gated::Elicit(elicitations));
        };
        let waited = incall::wait(
            state,
            session,
            &elicitations,
            waiting.outbox,
            waiting.progress_token,
            waiting.timeout,
        )
        .await;
        match waited {
            Waited::Done => {}
            Waited::Stopped(result) => return Ok(Gated::Reply(result)),
            Waited::Gone => {
                tracing::info!(session = ?session.id, tool = call.tool, "client left while the call waited for the user");
                return Ok(Gated::Reply(ToolResult::error("The client closed the request.")));
            }
        }
    }
    Ok(Gated::Reply(ToolResult::error(
        "The user finished in the browser, but the tool still lacks what it needs. Call it again.",
    )))
}

fn internal(error: GateError) -> RpcError {
    match error {
        GateError::Store(error) => store_failure("gate failed", &error),
        other => {
            tracing::error!(error = %other, "gate failed");
            RpcError::internal()
        }
    }
}

/// What the client sees of a store failure, which is logged with `context`: during a database
/// outage "unavailable" (HTTP 503), otherwise an internal error.
pub fn store_failure(context: &str, error: &StoreError) -> RpcError {
    if error.is_unavailable() {
        tracing::warn!(%error, "{context}: the database is unavailable");
        RpcError::unavailable()
    } else {
        tracing::error!(%error, "{context}");
        RpcError::internal()
    }
}

async fn decide(
    state: &AppState,
    session: &SessionRecord,
    principal: &Principal,
    call: &ToolCall<'_>,
) -> Result<Gated, RpcError> {
    match state.gate.decide(principal, session, call).await {
        Ok(Decision::Run(credentials)) => Ok(Gated::Run(credentials)),
        Ok(Decision::Elicit(elicitations)) => Ok(Gated::Elicit(elicitations)),
        Ok(Decision::Declined(elicitation)) => Ok(Gated::Reply(ToolResult::error(format!(
            "The user declined the request: {} Do not call this tool again unless the user asks to.",
            elicitation.message
        )))),
        Err(GateError::ProviderUnavailable { provider, reason }) => Ok(Gated::Reply(ToolResult::error(format!(
            "{provider} cannot be reached right now ({reason}). Try again in a moment."
        )))),
        Err(GateError::TooManyPending { max }) => Ok(Gated::Reply(ToolResult::error(format!(
            "The user already has {max} requests waiting in the browser, the most allowed. Ask the user to \
             finish or decline the ones they were given (or wait until they expire), then call this tool again."
        )))),
        Err(error) => Err(internal(error)),
    }
}

/// Whether the client said it can open URLs for elicitations (`elicitation.url`).
fn supports_url_elicitation(session: &SessionRecord) -> bool {
    session
        .client_capabilities
        .get("elicitation")
        .and_then(|e| e.get("url"))
        .is_some_and(Value::is_object)
}

/// Error -32042 listing the elicitations, or for clients without URL mode a tool result that
/// asks the model to have the user open the URLs.
fn elicit(session: &SessionRecord, elicitations: &[ElicitationRecord]) -> Result<Value, RpcError> {
    let entries = elicitations
        .iter()
        .map(|e| json!({"mode": "url", "elicitationId": e.id.to_string(), "url": e.url, "message": e.message}))
        .collect();
    ask_to_open(session, entries)
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
