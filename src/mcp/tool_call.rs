//! One `tools/call` through the gate, in either protocol era. The gate decides whether the tool may
//! run; when the user must first finish something in the browser, the call waits for it where it
//! can (within the call on its SSE stream, or a 2026-07-28 retry held on the bus) and otherwise
//! says what the user must open, which the era presents: error -32042 or a result with the links
//! (2025-11-25, here), `input_required` (2026-07-28, in `modern`).

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::calls::StreamChannel;
use super::incall::{self, Outbox, Waited};
use super::state::McpState;
use super::{STATELESS_PROTOCOL_VERSION, store_failure};
use crate::audit::Origin;
use crate::config::ElicitMode;
use crate::domain::{ElicitationId, LogLevel, Principal};
use crate::gate::{Credentials, Decision, GateError, Requirement, ToolCall, client_name};
use crate::identity::Caller;
use crate::jsonrpc::{self, RpcError, URL_ELICITATION_REQUIRED};
use crate::store::{AuditAction, ElicitationRecord, SessionRecord};
use crate::tools::{CallContext, CallStream, Tool, ToolInput, ToolOutcome, ToolResult};

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

/// A 2026-07-28 retry that may wait for the elicitations it was given: until `until`, woken by
/// `wake` (the bus, for the caller's stateless session) whenever one of them may have finished.
pub struct Hold {
    pub until: Instant,
    pub wake: watch::Receiver<u64>,
    /// The elicitations the client was given; a call that needs any other answers at once, since
    /// the user has not seen its link.
    pub given: Vec<ElicitationId>,
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

/// How a call ended: its result, or what the user must open first.
pub enum Called {
    Result(Value),
    /// gatehouse's own pending elicitations.
    Elicit(Vec<ElicitationRecord>),
    /// An upstream's URL-mode elicitations (`mode`, `elicitationId`, `url`, `message`), as it sent
    /// them.
    Upstream(Vec<Value>),
    /// The tool's own input requests (2026-07-28), and what it keeps until their answers come.
    InputRequired {
        requests: Map<String, Value>,
        state: Value,
    },
}

/// Runs `request` for `caller` in `session` (a real one, or a 2026-07-28 request's own): checks
/// the tool and its arguments, asks the gate, and calls the tool with what the gate lent it.
/// `stream` is the request's own SSE stream, `retry` what a 2026-07-28 retry brings.
pub async fn call(
    state: &McpState,
    session: &SessionRecord,
    caller: &Caller,
    request: ToolRequest,
    stream: Option<Stream<'_>>,
    retry: Retry,
    cancelled: &CancellationToken,
) -> Result<Called, RpcError> {
    let Retry { mut hold, input } = retry;
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
    let from = Origin {
        address: caller.address,
        client: Some(client_name(session)),
    };
    // A tool the caller may not use is refused exactly like one that does not exist.
    if !tool.definition().permits(&caller.claims) {
        audit_call(
            state,
            &caller.principal,
            &name,
            &from,
            false,
            json!({ "reason": "not permitted" }),
        );
        return Err(RpcError::invalid_params(format!("Unknown tool: {name}")));
    }
    let principal = &caller.principal;
    if let Err(problems) = tool.definition().input_schema.check(&arguments) {
        let result = ToolResult::error(format!("Invalid arguments for {name}: {}.", problems.join("; ")));
        return Ok(Called::Result(result.to_json()));
    }
    let definition = tool.definition();
    let details = definition.form_details(&arguments);
    let mut requires = definition.requires.clone();
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
    let waiting = match (outbox, definition.elicit) {
        (Some(outbox), ElicitMode::Request) if requests => Some(Waiting {
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
            from: &from,
        };
        let gated = match hold.as_mut() {
            Some(hold) => held(state, session, principal, &call, hold).await?,
            None => gate_call(state, session, principal, &call, waiting.as_ref()).await?,
        };
        let credentials = match gated {
            Gated::Run(credentials) => {
                // Only a gated tool's call is on the trail: one that needs nothing (whoami, say)
                // is not an access decision, and would put a row per call in the database.
                if !requires.is_empty() {
                    audit_call(state, principal, &name, &from, true, json!({}));
                }
                credentials
            }
            Gated::Reply(result) => {
                let detail = json!({ "reason": "answered without running" });
                audit_call(state, principal, &name, &from, false, detail);
                return Ok(Called::Result(result.to_json()));
            }
            Gated::Elicit(elicitations) => {
                let ids: Vec<String> = elicitations.iter().map(|e| e.id.to_string()).collect();
                let detail = json!({ "reason": "the user must act first", "elicitations": ids });
                audit_call(state, principal, &name, &from, false, detail);
                return Ok(Called::Elicit(elicitations));
            }
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
            input: input.as_ref(),
            from: &from,
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
                        stream.as_deref(),
                        LogLevel::Warning,
                        json!({"event": "tool failed", "tool": name, "error": text}),
                    )
                    .await;
                }
                return Ok(Called::Result(result.to_json()));
            }
            ToolOutcome::CredentialRejected { provider } => {
                state
                    .gate
                    .credential_rejected(principal, &provider, &credentials, &from)
                    .await
                    .map_err(internal)?;
            }
            ToolOutcome::ScopesMissing { provider, scopes } => {
                tracing::info!(tool = name, %provider, ?scopes, "the upstream wants more scopes: asking the user to grant them");
                if !add_scopes(&mut requires, &provider, scopes) {
                    return Ok(Called::Result(
                        ToolResult::error(format!(
                            "{name} needs permissions the connected {provider} account has not granted, and asking \
                             again did not help. Ask the user to check the account's permissions."
                        ))
                        .to_json(),
                    ));
                }
            }
            ToolOutcome::UrlElicitations(elicitations) => return Ok(Called::Upstream(elicitations)),
            ToolOutcome::InputRequired { requests, state } => return Ok(Called::InputRequired { requests, state }),
        }
    }
    Ok(Called::Result(
        ToolResult::error(format!(
            "{name} could not use the connected account; ask the user to sign in again."
        ))
        .to_json(),
    ))
}

/// Puts the gate's answer to a call on the audit trail: allowed to run, or refused (and why).
fn audit_call(state: &McpState, principal: &Principal, tool: &str, from: &Origin, allowed: bool, detail: Value) {
    let action = if allowed {
        AuditAction::CallAllowed
    } else {
        AuditAction::CallRefused
    };
    state.audit.record(principal, action, tool, from, detail);
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

/// The 2025-11-25 answer to a call that needs the user: error -32042 listing the URL-mode
/// elicitations, or for clients without URL mode a result that asks the model to have the user
/// open the links.
pub fn handshake_answer(session: &SessionRecord, called: Called) -> Result<Value, RpcError> {
    let elicitations = match called {
        Called::Result(result) => return Ok(result),
        Called::Elicit(records) => records
            .iter()
            .map(|e| json!({"mode": "url", "elicitationId": e.id.to_string(), "url": e.url, "message": e.message}))
            .collect(),
        Called::Upstream(elicitations) => elicitations,
        Called::InputRequired { .. } => {
            return Ok(ToolResult::error(
                "This tool asks the client for input during the call, which needs protocol 2026-07-28.",
            )
            .to_json());
        }
    };
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

/// Where a call stands after the gate: run the tool, answer the model instead, or the
/// elicitations the user must finish.
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
    state: &McpState,
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

/// Decides, and while the call still needs only elicitations the client was given, waits for a
/// wake-up from the bus and decides again, until `hold.until`. Whatever finishes them (on any
/// replica) wakes the caller's stateless session, so the answer leaves the moment the user is done.
async fn held(
    state: &McpState,
    session: &SessionRecord,
    principal: &Principal,
    call: &ToolCall<'_>,
    hold: &mut Hold,
) -> Result<Gated, RpcError> {
    loop {
        // Marked seen before deciding: a wake-up during the decision is not lost.
        hold.wake.borrow_and_update();
        let elicitations = match decide(state, session, principal, call).await? {
            Gated::Elicit(elicitations) => elicitations,
            settled => return Ok(settled),
        };
        // Finished while the gate decided: it may have read the connections before and the
        // elicitations after, so decide again on what is there now.
        if hold.wake.has_changed().unwrap_or(false) {
            continue;
        }
        if !elicitations.iter().all(|e| hold.given.contains(&e.id)) {
            return Ok(Gated::Elicit(elicitations));
        }
        match tokio::time::timeout_at(hold.until, hold.wake.changed()).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) | Err(_) => return Ok(Gated::Elicit(elicitations)),
        }
    }
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

async fn decide(
    state: &McpState,
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
        Err(GateError::TooManyCreated {
            per_minute,
            retry_after,
        }) => Ok(Gated::Reply(ToolResult::error(format!(
            "The user was asked to do something in the browser {per_minute} times within the last minute, the \
             most allowed. Call this tool again in {retry_after} seconds."
        )))),
        Err(error) => Err(internal(error)),
    }
}

/// Whether the client said it can open URLs for elicitations (`elicitation.url`).
pub fn supports_url_elicitation(session: &SessionRecord) -> bool {
    session
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
    if session.protocol_version == STATELESS_PROTOCOL_VERSION {
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
