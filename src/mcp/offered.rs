//! `resources/*`, `prompts/*` and `completion/complete` for what upstreams offer beside tools, in
//! either protocol era. The lists show what the caller may see (an upstream's `allow` hides its
//! resources and prompts as it hides its tools). A request naming one resource or prompt passes
//! the gate with its upstream's requirements, exactly as a call of its tools: before the user
//! has connected, it answers with the links to open (-32042, or `input_required` on 2026-07-28);
//! once they have, it goes to the upstream on the user's own session.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use serde_json::{Map, Value, json};

use super::links;
use super::paging::page;
use super::state::McpState;
use super::tool_call::{self, Retry};
use crate::gate::{Called, Credentials, NeverAsks, RunTool, ToolCall, ToolOutcome, ToolResult, Waiting};
use crate::identity::Caller;
use crate::jsonrpc::{INVALID_REQUEST, RpcError};
use crate::store::SessionRecord;
use crate::upstreams::{Forwarded, List, Owner, Request};

/// MCP's "Resource not found".
const RESOURCE_NOT_FOUND: i64 = -32002;

/// A request naming one upstream's resource or prompt, parsed: where it goes, and what.
pub struct Named {
    owner: Owner,
    /// What the gate and the audit trail call it: the method and gatehouse's name of the resource
    /// or prompt.
    label: String,
    request: Request,
}

impl Named {
    /// The name the request binds a 2026-07-28 `requestState` to.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// The arguments it binds that state to: a prompt's (none for a resource).
    pub fn arguments(&self) -> Map<String, Value> {
        match &self.request {
            Request::GetPrompt { arguments, .. } => arguments.clone(),
            _ => Map::new(),
        }
    }
}

/// What a method answers: its result, or a request to gate and forward.
pub enum Served {
    Listed(Value),
    Gated(Named),
}

/// Answers the lists; parses the rest into what is gated.
pub fn serve(
    state: &McpState,
    session: &SessionRecord,
    caller: &Caller,
    method: &str,
    params: &Map<String, Value>,
) -> Result<Served, RpcError> {
    let list = |list: List, key: &str| {
        let items = state.upstreams.offered(list, &caller.claims);
        page(items, key, params, state.config.mcp.page_size, |item| item).map(Served::Listed)
    };
    let uri = || {
        params
            .get("uri")
            .and_then(Value::as_str)
            .ok_or_else(|| RpcError::invalid_params(format!("{method} needs params.uri (a string)")))
    };
    let named = match method {
        "resources/list" => return list(List::Resources, "resources"),
        "resources/templates/list" => return list(List::Templates, "resourceTemplates"),
        "prompts/list" => return list(List::Prompts, "prompts"),
        "resources/read" => {
            let uri = uri()?;
            let owner = resource(state, caller, uri)?;
            let request = Request::Read {
                uri: owner.name.clone(),
            };
            (owner, uri.to_owned(), request)
        }
        "resources/subscribe" | "resources/unsubscribe" => {
            let uri = uri()?;
            let owner = resource(state, caller, uri)?;
            let subscriber = session.id.clone();
            let request = if method == "resources/subscribe" {
                Request::Subscribe {
                    uri: owner.name.clone(),
                    session: subscriber,
                }
            } else {
                Request::Unsubscribe {
                    uri: owner.name.clone(),
                    session: subscriber,
                }
            };
            (owner, uri.to_owned(), request)
        }
        "prompts/get" => {
            let name = params
                .get("name")
                .and_then(Value::as_str)
                .ok_or_else(|| RpcError::invalid_params("prompts/get needs params.name (a string)"))?;
            let arguments = match params.get("arguments") {
                None | Some(Value::Null) => Map::new(),
                Some(Value::Object(arguments)) => arguments.clone(),
                Some(_) => return Err(RpcError::invalid_params("params.arguments must be an object")),
            };
            let owner = prompt(state, caller, name)?;
            let request = Request::GetPrompt {
                name: owner.name.clone(),
                arguments,
            };
            (owner, name.to_owned(), request)
        }
        "completion/complete" => completion(state, caller, params)?,
        other => return Err(RpcError::invalid_params(format!("{other} is not served here"))),
    };
    let (owner, name, request) = named;
    Ok(Served::Gated(Named {
        label: format!("{method} {name}"),
        owner,
        request,
    }))
}

fn resource(state: &McpState, caller: &Caller, uri: &str) -> Result<Owner, RpcError> {
    state
        .upstreams
        .resource_owner(uri)
        .filter(|owner| owner.upstream.permits(&caller.claims))
        .ok_or_else(|| RpcError::new(RESOURCE_NOT_FOUND, "Resource not found").with_data(json!({ "uri": uri })))
}

fn prompt(state: &McpState, caller: &Caller, name: &str) -> Result<Owner, RpcError> {
    state
        .upstreams
        .prompt_owner(name)
        .filter(|owner| owner.upstream.permits(&caller.claims))
        .ok_or_else(|| RpcError::invalid_params(format!("Unknown prompt: {name}")))
}

/// `completion/complete`: its `ref` names a prompt or a resource (template) of one upstream, and
/// goes to it in the upstream's names.
fn completion(
    state: &McpState,
    caller: &Caller,
    params: &Map<String, Value>,
) -> Result<(Owner, String, Request), RpcError> {
    let reference = params
        .get("ref")
        .and_then(Value::as_object)
        .ok_or_else(|| RpcError::invalid_params("completion/complete needs params.ref (an object)"))?;
    let text = |key: &str| reference.get(key).and_then(Value::as_str);
    let (owner, key, name) = match text("type") {
        Some("ref/prompt") => {
            let name = text("name").ok_or_else(|| RpcError::invalid_params("a ref/prompt needs a name"))?;
            (prompt(state, caller, name)?, "name", name)
        }
        Some("ref/resource") => {
            let uri = text("uri").ok_or_else(|| RpcError::invalid_params("a ref/resource needs a uri"))?;
            (resource(state, caller, uri)?, "uri", uri)
        }
        _ => {
            return Err(RpcError::invalid_params(
                "params.ref.type must be ref/prompt or ref/resource",
            ));
        }
    };
    let mut forwarded = params.clone();
    forwarded.remove("_meta");
    forwarded["ref"][key] = json!(owner.name);
    let name = name.to_owned();
    Ok((
        owner,
        name,
        Request::Complete {
            params: Value::Object(forwarded),
        },
    ))
}

/// Forwards the request once the gate lends the credentials, keeping the upstream's answer.
struct Forwarding<'a> {
    state: &'a McpState,
    caller: &'a Caller,
    named: &'a Named,
    answer: Mutex<Option<Result<Value, RpcError>>>,
}

impl RunTool for Forwarding<'_> {
    async fn run(&self, credentials: &Credentials) -> ToolOutcome {
        let forwarded = self
            .state
            .upstreams
            .forward(
                &self.named.owner.upstream,
                &self.caller.principal,
                credentials,
                self.caller.access_token.as_ref(),
                self.named.request.clone(),
            )
            .await;
        let kept = match forwarded {
            Forwarded::Answer(value) => Ok(value),
            Forwarded::Error { code, message } => Err(RpcError::new(code, message)),
            Forwarded::Outcome(outcome) => return outcome,
        };
        *self.answer.lock().unwrap_or_else(PoisonError::into_inner) = Some(kept);
        // The answer is kept above; the gate only needs to know the request ran.
        ToolOutcome::Done(ToolResult::text(""))
    }
}

/// How a gated request ended: the upstream's answer, or what the gate says instead (the links to
/// open, a refusal told as a result).
pub enum Outcome {
    Answer(Value),
    Called(Called),
}

/// Passes `named` through the gate for `caller` in `session`, waiting as a 2026-07-28 `retry`
/// allows, and forwards it when every requirement is met.
pub async fn run(
    state: &McpState,
    session: &SessionRecord,
    caller: &Caller,
    named: &Named,
    retry: Retry,
) -> Result<Outcome, RpcError> {
    let from = tool_call::origin(caller, session);
    let no_arguments = Map::new();
    let no_details = HashMap::new();
    let gated = ToolCall {
        tool: &named.label,
        requires: &named.owner.upstream.requires,
        arguments: &no_arguments,
        client: caller.client.as_deref(),
        details: &no_details,
        from: &from,
    };
    let forwarding = Forwarding {
        state,
        caller,
        named,
        answer: Mutex::new(None),
    };
    let waiting = match retry.hold {
        Some(hold) => Waiting::Held(hold),
        None => Waiting::No,
    };
    let called = state
        .gate
        .run::<_, NeverAsks>(&caller.principal, session, gated, &forwarding, waiting)
        .await
        .map_err(|e| tool_call::internal(state, e))?;
    let answer = forwarding.answer.lock().unwrap_or_else(PoisonError::into_inner).take();
    match (called, answer) {
        (Called::Ran(_), Some(answer)) => answer.map(Outcome::Answer),
        (called, _) => Ok(Outcome::Called(called)),
    }
}

/// A result the gate gave instead of the upstream's answer (the user declined, a limit was
/// reached, the upstream failed), as the JSON-RPC error a request other than a tool call gets.
fn refusal(result: &ToolResult) -> RpcError {
    let text = result
        .content
        .iter()
        .filter_map(|c| c.get("text").and_then(Value::as_str))
        .collect::<Vec<_>>()
        .join(" ");
    RpcError::new(INVALID_REQUEST, text)
}

/// The 2025-11-25 answer: the result, or -32042 with the links to open first.
pub async fn handshake(
    state: &McpState,
    session: &SessionRecord,
    caller: &Caller,
    method: &str,
    params: &Map<String, Value>,
) -> Result<Value, RpcError> {
    let named = match serve(state, session, caller, method, params)? {
        Served::Listed(result) => return Ok(result),
        Served::Gated(named) => named,
    };
    match run(state, session, caller, &named, Retry::default()).await? {
        Outcome::Answer(value) => Ok(value),
        Outcome::Called(called) => match links::of(&called) {
            Some(elicitations) => Err(links::required(elicitations)),
            None => Err(refused(called)),
        },
    }
}

/// How the gate ended a request other than a tool call without the upstream's answer, as its
/// error: the links to open named in the message, or the reason it was refused.
pub fn refused(called: Called) -> RpcError {
    if let Some(elicitations) = links::of(&called) {
        return links::named_in_error(INVALID_REQUEST, &elicitations);
    }
    match called {
        Called::Ran(result) | Called::Answered(result) => refusal(&result),
        Called::Elicit(_) | Called::Upstream(_) | Called::InputRequired { .. } => RpcError::internal(),
    }
}

/// The capabilities `base` (gatehouse's own) and the upstreams' offers add up to, as far as
/// their listings tell; `subscriptions` when the era has `resources/subscribe`.
pub fn capabilities(state: &McpState, mut base: Value, subscriptions: bool) -> Value {
    let declared = state.upstreams.declared();
    if declared.resources {
        base["resources"] = json!({"listChanged": subscriptions, "subscribe": subscriptions && declared.subscribe});
    }
    if declared.prompts {
        base["prompts"] = json!({"listChanged": subscriptions});
    }
    if declared.completions {
        base["completions"] = json!({});
    }
    base
}
