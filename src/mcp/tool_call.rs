//! One `tools/call`, in either protocol era: finds the tool, checks the caller may use it and its
//! arguments, and hands it to the gate (`Gate::run`) with what the protocol gives the call (its
//! stream, an in-call wait for the user, a 2026-07-28 retry's hold). What the user must open is
//! presented by the era: error -32042 or a result with the links (2025-11-25, here),
//! `input_required` (2026-07-28, in `modern`).

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

use super::calls::StreamChannel;
use super::incall::{self, Outbox, Waited};
use super::links;
use super::state::McpState;
use super::{URL_MODE_SINCE, store_failure};
use crate::audit::Origin;
use crate::config::ElicitMode;
use crate::domain::{LogLevel, ProtocolEra};
use crate::gate::{AskWithinCall, Called, GateError, Hold, ToolCall, Waiting, client_name};
use crate::identity::Caller;
use crate::jsonrpc::{self, RpcError};
use crate::state::AppState;
use crate::store::{ElicitationRecord, SessionRecord};
use crate::tools::{CallContext, CallStream, ReadyCall, Tool, ToolInput, ToolResult};

/// A `tools/call`'s own parameters, parsed.
pub struct ToolRequest {
    pub name: String,
    pub arguments: Map<String, Value>,
    pub progress_token: Option<Value>,
}

impl ToolRequest {
    /// Takes `name`, `arguments` and `_meta.progressToken` out of the request's params.
    pub fn parse(params: &mut Map<String, Value>) -> Result<Self, RpcError> {
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
        Ok(Self {
            name,
            arguments,
            progress_token,
        })
    }
}

/// The request's own SSE stream, and what may go on it.
#[derive(Clone, Copy)]
pub enum Stream<'a> {
    /// 2025-11-25: notifications, and requests (in-call elicitation, an upstream's relayed ones).
    Full(&'a Outbox),
    /// 2026-07-28: notifications only; what needs the client goes out as `input_required`.
    Notifications(&'a Outbox),
}

/// What a 2026-07-28 retry brings: a wait for the elicitations it was given, and the answers to
/// the tool's own input requests. Nothing, for a first call or a 2025-11-25 one.
#[derive(Default)]
pub struct Retry {
    pub hold: Option<Hold>,
    pub input: Option<ToolInput>,
}

/// Runs `request` for `caller` in `session` (a real one, or a 2026-07-28 request's own): checks
/// the tool and its arguments, and has the gate run it. `stream` is the request's own SSE stream,
/// `retry` what a 2026-07-28 retry brings.
pub async fn call(
    state: &McpState,
    session: &SessionRecord,
    caller: &Caller,
    request: ToolRequest,
    stream: Option<Stream<'_>>,
    retry: Retry,
    cancelled: &CancellationToken,
) -> Result<Called, RpcError> {
    let Retry { hold, input } = retry;
    let ToolRequest {
        name,
        arguments,
        progress_token,
    } = request;
    let tool: Arc<dyn Tool> = match state.tools.get(&name) {
        Some(tool) => tool.clone(),
        None => state
            .upstreams
            .tool(&name)
            .ok_or_else(|| RpcError::invalid_params(format!("Unknown tool: {name}")))?,
    };
    let from = origin(caller, session);
    let definition = tool.definition();
    let principal = &caller.principal;
    // A tool the caller may not use is refused exactly like one that does not exist.
    if !definition.permits(&caller.claims) {
        state.gate.refused_hidden(principal, &name, &from);
        return Err(RpcError::invalid_params(format!("Unknown tool: {name}")));
    }
    if let Err(problems) = definition.input_schema.check(&arguments) {
        let result = ToolResult::error(format!("Invalid arguments for {name}: {}.", problems.join("; ")));
        return Ok(Called::Answered(result));
    }
    let details = definition.form_details(&arguments);
    let (outbox, requests) = match stream {
        Some(Stream::Full(outbox)) => (Some(outbox), true),
        Some(Stream::Notifications(outbox)) => (Some(outbox), false),
        None => (None, false),
    };
    let stream: Option<Arc<dyn CallStream>> = outbox.map(|outbox| {
        Arc::new(StreamChannel {
            outbox: outbox.clone(),
            session: session.id.clone(),
            calls: state.calls.clone(),
            requests,
        }) as Arc<dyn CallStream>
    });
    log(
        state,
        session,
        stream.as_deref(),
        LogLevel::Debug,
        json!({"event": "tool call", "tool": name}),
    )
    .await;
    let in_call = match (outbox, definition.elicit) {
        (Some(outbox), ElicitMode::Request) if requests => Some(InCall {
            state,
            session,
            tool: &name,
            outbox,
            progress_token: progress_token.as_ref(),
            timeout: definition.elicit_timeout,
        }),
        _ => None,
    };
    let waiting = match (hold, &in_call) {
        (Some(hold), _) => Waiting::Held(hold),
        (None, Some(in_call)) => Waiting::InCall(in_call),
        (None, None) => Waiting::No,
    };
    let ready = ReadyCall {
        tool: tool.as_ref(),
        context: CallContext {
            principal,
            session,
            gate: &state.gate,
            stream,
            progress_token: progress_token.as_ref(),
            cancelled,
            offerings: state.upstreams.as_ref(),
            input: input.as_ref(),
            from: &from,
            access_token: caller.access_token.as_ref(),
        },
        arguments: &arguments,
    };
    let gated = ToolCall {
        tool: &name,
        requires: &definition.requires,
        arguments: &arguments,
        client: caller.client.as_deref(),
        details: &details,
        from: &from,
    };
    let called = state
        .gate
        .run(principal, session, gated, &ready, waiting)
        .await
        .map_err(|e| internal(state, e))?;
    if let Called::Ran(result) = &called
        && result.is_error
    {
        let text = result
            .content
            .first()
            .and_then(|c| c.get("text"))
            .cloned()
            .unwrap_or(Value::Null);
        log(
            state,
            session,
            ready.context.stream.as_deref(),
            LogLevel::Warning,
            json!({"event": "tool failed", "tool": name, "error": text}),
        )
        .await;
    }
    Ok(called)
}

/// The 2025-11-25 answer to a call that needs the user: error -32042 listing the URL-mode
/// elicitations, or for clients without URL mode a result that asks the model to have the user
/// open the links.
pub fn handshake_answer(session: &SessionRecord, called: Called) -> Result<Value, RpcError> {
    let elicitations = match called {
        Called::Ran(result) | Called::Answered(result) => return Ok(result.into_json()),
        Called::Elicit(records) => links::listed(&records),
        Called::Upstream(elicitations) => elicitations,
        Called::InputRequired { .. } => {
            return Ok(ToolResult::error(
                "This tool asks the client for input during the call, which needs protocol 2026-07-28.",
            )
            .into_json());
        }
    };
    if supports_url_elicitation(session) {
        return Err(links::required(elicitations));
    }
    Ok(links::result(&elicitations).into_json())
}

/// How a call waits for the user within itself (`elicit = "request"` on a stream that takes
/// requests): `elicitation/create` on its stream, then the wait in `incall`.
struct InCall<'a> {
    state: &'a McpState,
    session: &'a SessionRecord,
    tool: &'a str,
    outbox: &'a Outbox,
    progress_token: Option<&'a Value>,
    timeout: Duration,
}

impl AskWithinCall for InCall<'_> {
    async fn ask(&self, elicitations: &[ElicitationRecord]) -> Result<(), ToolResult> {
        let waited = incall::wait(
            self.state,
            self.session,
            elicitations,
            self.outbox,
            self.progress_token,
            self.timeout,
        )
        .await;
        match waited {
            Waited::Done => Ok(()),
            Waited::Stopped(result) => Err(result),
            Waited::Gone => {
                tracing::info!(session = ?self.session.id, tool = self.tool, "client left while the call waited for the user");
                Err(ToolResult::error("The client closed the request."))
            }
        }
    }
}

/// Where a call comes from, for the audit trail: the caller's address and the session's client.
pub fn origin(caller: &Caller, session: &SessionRecord) -> Origin {
    Origin {
        address: caller.address,
        client: Some(client_name(session)),
    }
}

/// A gate failure as the client sees it: generic, the cause logged.
pub fn internal(state: &AppState, error: GateError) -> RpcError {
    match error {
        GateError::Store(error) => store_failure(state, "gate failed", &error),
        other => {
            tracing::error!(error = %other, "gate failed");
            RpcError::internal()
        }
    }
}

/// Whether the client said it can open URLs for elicitations (`elicitation.url`), on a protocol
/// version that has them (a 2025-06-18 session declaring `url` gets the links as a result).
pub fn supports_url_elicitation(session: &SessionRecord) -> bool {
    session.protocol_version.since(URL_MODE_SINCE)
        && session
            .client_capabilities
            .get("elicitation")
            .and_then(|e| e.get("url"))
            .is_some_and(Value::is_object)
}

/// Sends a `notifications/message` when the session's level admits `level`: on the session's
/// stream, or for a 2026-07-28 request (which has no session to keep events in) on the call's own
/// stream when it has one. Sessions that never asked for a level get none.
async fn log(state: &McpState, session: &SessionRecord, stream: Option<&dyn CallStream>, level: LogLevel, data: Value) {
    let Some(threshold) = session.log_level else { return };
    if level < threshold {
        return;
    }
    let params = json!({"level": level, "logger": "gatehouse", "data": data});
    if session.protocol_version.era() == ProtocolEra::Stateless {
        if let Some(stream) = stream {
            stream.notify("notifications/message", params).await;
        }
        return;
    }
    let message = jsonrpc::notification("notifications/message", params);
    if let Err(error) = state.bus.publish(&session.id, &message).await {
        tracing::warn!(%error, "could not queue a log message for the client");
    }
}
