//! A 2026-07-28 `tools/call` (with its progress on an SSE stream when it asked). A call that needs
//! the user answers `input_required`: one URL-mode `elicitation/create` per unmet requirement (the
//! same pages and elicitations as the handshake era) and a sealed `requestState`. The retry that
//! brings the state back is held on the bus while those elicitations are pending, answered the
//! moment the user finishes (on whichever replica), or answered `input_required` again, with a
//! fresh state, when `elicitation.hold` runs out. A retry whose answers say the user declined a
//! link ends the call at once, the decline reported as the gate reports one made on the page. One
//! whose answers say the user dismissed a link (`cancel`: "not now", what Claude Code in `-p` mode
//! answers to every link) is answered at once with the links in an error result, as a client
//! without URL mode gets them; the elicitations stay open, and the call made again once the user
//! finished runs. A tool may also ask the client itself (`ToolOutcome::InputRequired`): its requests go
//! out as they are, and its state travels sealed in the same `requestState`. A client that did not
//! declare URL mode gets the links in an error result, as in the handshake era (or, configured so,
//! -32021). An upstream's resource read or prompt goes through the same rounds (`offered`).

use chrono::Utc;
use serde_json::{Map, Value, json};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::request_state::RequestState;
use crate::clock::after;
use crate::config::WithoutUrlMode;
use crate::domain::ElicitationId;
use crate::gate::{Called, Hold};
use crate::identity::Caller;
use crate::jsonrpc::{MISSING_REQUIRED_CLIENT_CAPABILITY, RpcError};
use crate::mcp::calls::HeldRetry;
use crate::mcp::incall::Outbox;
use crate::mcp::links;
use crate::mcp::offered::{self, Outcome, Served};
use crate::mcp::state::McpState;
use crate::mcp::tool_call::{self, Retry, Stream, ToolRequest};
use crate::store::{ClientAction, ElicitationStatus, SessionRecord};
use crate::tools::ToolInput;

/// Runs the call; its result, or `input_required`.
pub async fn call(
    state: &McpState,
    session: &SessionRecord,
    caller: &Caller,
    mut params: Map<String, Value>,
    stream: Option<&Outbox>,
) -> Result<Value, RpcError> {
    let sealed = params.remove("requestState");
    let responses = input_responses(&mut params)?;
    let request = ToolRequest::parse(&mut params)?;
    let bound = Bound {
        name: request.name.clone(),
        arguments: request.arguments.clone(),
    };
    let (retry, round) = begin(state, session, caller, sealed, responses, &bound).await?;
    let cancelled = CancellationToken::new();
    let stream = stream.map(Stream::Notifications);
    let called = tool_call::call(state, session, caller, request, stream, retry, &cancelled).await?;
    round.finish(state, session, caller, called, &bound, Answering::Tool)
}

/// A resource read or a prompt got (an upstream's, gated as its tools are): its answer, or
/// `input_required`.
pub async fn offered(
    state: &McpState,
    session: &SessionRecord,
    caller: &Caller,
    mut params: Map<String, Value>,
    method: &str,
) -> Result<Value, RpcError> {
    let sealed = params.remove("requestState");
    let responses = input_responses(&mut params)?;
    let named = match offered::serve(state, session, caller, method, &params)? {
        Served::Listed(result) => return Ok(result),
        Served::Gated(named) => named,
    };
    // Only reads and prompts take rounds (SEP-2322): a completion that needs the user first says
    // where to go in its error.
    if method == "completion/complete" {
        return match offered::run(state, session, caller, &named, Retry::default()).await? {
            Outcome::Answer(answer) => Ok(answer),
            Outcome::Called(called) => Err(offered::refused(called)),
        };
    }
    let bound = Bound {
        name: named.label().to_owned(),
        arguments: named.arguments(),
    };
    let (retry, round) = begin(state, session, caller, sealed, responses, &bound).await?;
    match offered::run(state, session, caller, &named, retry).await? {
        Outcome::Answer(answer) => Ok(answer),
        Outcome::Called(called) => round.finish(state, session, caller, called, &bound, Answering::Other),
    }
}

/// What a request's `requestState` is bound to: the tool (or method and resource or prompt) and
/// its arguments.
struct Bound {
    name: String,
    arguments: Map<String, Value>,
}

/// Whether the request is a tool call, whose refusals and links may be told as a tool result.
#[derive(Clone, Copy, PartialEq)]
enum Answering {
    Tool,
    Other,
}

/// A request's round, between the gate's run and its answer: when it began, and its place among
/// the held retries while it runs.
struct Round {
    now: chrono::DateTime<Utc>,
    /// The retry said the user dismissed a link: the links go out as a result, not held.
    dismissed: bool,
    _permit: Option<HeldRetry>,
}

/// Opens a retry's `requestState` (bound to `bound` and the caller), ends what its answers
/// decline, and gives what the gate needs: the hold on the elicitations the client was given, and
/// the answers to a tool's own requests.
async fn begin(
    state: &McpState,
    session: &SessionRecord,
    caller: &Caller,
    sealed: Option<Value>,
    responses: Map<String, Value>,
    bound: &Bound,
) -> Result<(Retry, Round), RpcError> {
    let now = Utc::now();
    let opened = match sealed {
        None | Some(Value::Null) => None,
        Some(Value::String(sealed)) => Some(
            RequestState::open(
                &state.vault,
                &sealed,
                &caller.principal,
                &bound.name,
                &bound.arguments,
                now,
            )
            .map_err(|e| RpcError::invalid_params(e.to_string()))?,
        ),
        Some(_) => return Err(RpcError::invalid_params("params.requestState must be a string")),
    };
    // A link the client says the user declined ends the call at once: the gate reports the
    // decline (once) instead of holding the retry. One they dismissed is answered at once too.
    let answered = match &opened {
        Some(opened) => refuse(state, session, caller, &opened.elicitations(), &responses).await?,
        None => Answered::default(),
    };
    // Held only with a place among the replica's held retries and its principal's; without one,
    // answered at once. The place covers the whole round: the gate's hold on the elicitations,
    // and a tool's wait for a call parked on another replica (which, dead, never answers).
    let hold_for = state.config.elicitation.hold;
    let permit = opened
        .as_ref()
        .filter(|_| !answered.declined && !answered.dismissed)
        .and_then(|_| state.calls.hold(&caller.principal));
    let mut retry = Retry::default();
    if let Some(opened) = opened {
        if permit.is_some() && !hold_for.is_zero() {
            retry.hold = Some(Hold {
                until: Instant::now() + hold_for,
                wake: state.bus.subscribe(&session.id),
                given: opened.elicitations(),
                stop: state.shutdown.clone(),
            });
        }
        // For URL mode the answers only say the user agreed to open the links: what counts is
        // what the gate finds now. A tool's own requests get their answers.
        retry.input = Some(ToolInput {
            responses,
            state: opened.into_kept(),
            held: permit.is_some(),
        });
    } else if !responses.is_empty() {
        // Answers without a state: the tool sees them, with nothing kept.
        retry.input = Some(ToolInput {
            responses,
            state: Value::Null,
            held: false,
        });
    }
    let round = Round {
        now,
        dismissed: answered.dismissed,
        _permit: permit,
    };
    Ok((retry, round))
}

impl Round {
    /// The answer to how the gate ended the request: its result, or `input_required` with the
    /// links (or a tool's own requests) and a fresh sealed state.
    fn finish(
        self,
        state: &McpState,
        session: &SessionRecord,
        caller: &Caller,
        called: Called,
        bound: &Bound,
        answering: Answering,
    ) -> Result<Value, RpcError> {
        // A client that cannot open URLs gets the links as the handshake era gives them to such
        // clients, unless configured to be refused (-32021, below); so does one whose user
        // dismissed them, whatever the configuration.
        let without_url_mode = state.config.elicitation.without_url_mode == WithoutUrlMode::Link
            && !tool_call::supports_url_elicitation(session);
        if (without_url_mode || self.dismissed)
            && let Some(elicitations) = links::of(&called)
        {
            return match answering {
                Answering::Tool => Ok(links::result(&elicitations).into_json()),
                Answering::Other if self.dismissed => Err(offered::refused(called)),
                Answering::Other => Err(links::named_in_error(MISSING_REQUIRED_CLIENT_CAPABILITY, &elicitations)),
            };
        }
        let (requests, given, kept) = match called {
            Called::Ran(result) | Called::Answered(result) => {
                return match answering {
                    Answering::Tool => Ok(result.into_json()),
                    Answering::Other => Err(offered::refused(Called::Answered(result))),
                };
            }
            Called::Elicit(records) => {
                let requests = records
                    .iter()
                    .map(|e| (e.id.to_string(), url_request(&e.url, &e.message)))
                    .collect();
                (requests, records.iter().map(|e| e.id).collect(), Value::Null)
            }
            Called::Upstream(elicitations) => {
                let requests = elicitations
                    .iter()
                    .enumerate()
                    .map(|(i, e)| {
                        let key = e
                            .get("elicitationId")
                            .and_then(Value::as_str)
                            .map_or_else(|| format!("upstream-{i}"), str::to_owned);
                        let text = |field: &str| e.get(field).and_then(Value::as_str).unwrap_or_default().to_owned();
                        (key, url_request(&text("url"), &text("message")))
                    })
                    .collect();
                (requests, Vec::new(), Value::Null)
            }
            Called::InputRequired { requests, state } => (requests, Vec::new(), state),
        };
        check_capabilities(session, &requests)?;
        let expires = after(self.now, state.config.elicitation.ttl);
        let sealed = RequestState::new(&caller.principal, &bound.name, &bound.arguments, &given, kept, expires)
            .seal(&state.vault);
        Ok(json!({
            "resultType": "input_required",
            "inputRequests": requests,
            "requestState": sealed,
        }))
    }
}

/// What a retry's answers said about gatehouse's links it was given.
#[derive(Default)]
struct Answered {
    /// The user said no to one still pending, now declined.
    declined: bool,
    /// The user dismissed one (`cancel`): not now, the elicitation stays open.
    dismissed: bool,
}

/// Ends as declined each of gatehouse's elicitations in `given` that the client answered
/// `decline` in `responses` (keyed by the elicitation's id, as it was asked): the user said no,
/// so the gate's decision reports it like a decline on the page, once, and the next call asks
/// afresh. One answered `cancel` is left pending and noted as dismissed.
async fn refuse(
    state: &McpState,
    session: &SessionRecord,
    caller: &Caller,
    given: &[ElicitationId],
    responses: &Map<String, Value>,
) -> Result<Answered, RpcError> {
    let elicitations = state.gate.elicitations();
    let from = tool_call::origin(caller, session);
    let mut answered = Answered::default();
    for id in given {
        let action = responses
            .get(&id.to_string())
            .and_then(|response| response.get("action"))
            .and_then(Value::as_str)
            .and_then(ClientAction::parse);
        if !matches!(action, Some(ClientAction::Decline | ClientAction::Cancel)) {
            continue;
        }
        let Some(elicitation) = elicitations.get(id).await.map_err(|e| tool_call::internal(state, e))? else {
            continue;
        };
        if elicitation.session_id != session.id {
            continue;
        }
        if action == Some(ClientAction::Cancel) {
            answered.dismissed = true;
            continue;
        }
        answered.declined |= elicitations
            .finish(&elicitation, ElicitationStatus::Declined, &from)
            .await
            .map_err(|e| tool_call::internal(state, e))?;
    }
    Ok(answered)
}

/// One URL-mode `elicitation/create` input request.
fn url_request(url: &str, message: &str) -> Value {
    json!({"method": "elicitation/create", "params": {"mode": "url", "url": url, "message": message}})
}

/// A retry's `inputResponses` (removed from `params`): the answers by key, none when absent.
pub(super) fn input_responses(params: &mut Map<String, Value>) -> Result<Map<String, Value>, RpcError> {
    match params.remove("inputResponses") {
        None | Some(Value::Null) => Ok(Map::new()),
        Some(Value::Object(responses)) => Ok(responses),
        Some(_) => Err(RpcError::invalid_params("params.inputResponses must be an object")),
    }
}

/// -32021 with `requiredCapabilities` when answering `requests` needs client capabilities the
/// request did not declare.
pub(super) fn check_capabilities(session: &SessionRecord, requests: &Map<String, Value>) -> Result<(), RpcError> {
    match missing_capabilities(session, requests) {
        None => Ok(()),
        Some(required) => Err(RpcError::new(
            MISSING_REQUIRED_CLIENT_CAPABILITY,
            "Answering needs client capabilities this request did not declare in clientCapabilities",
        )
        .with_data(json!({"requiredCapabilities": required}))),
    }
}

/// The client capabilities that answering `requests` needs and the request did not declare, as
/// a `ClientCapabilities` object; `None` when it declared them all.
fn missing_capabilities(session: &SessionRecord, requests: &Map<String, Value>) -> Option<Value> {
    let declared = &session.client_capabilities;
    let mut missing = Map::new();
    for request in requests.values() {
        let params = &request["params"];
        let (capability, mode) = match request["method"].as_str() {
            Some("sampling/createMessage") => ("sampling", None),
            Some("roots/list") => ("roots", None),
            Some("elicitation/create") => ("elicitation", Some(params["mode"].as_str().unwrap_or("form"))),
            _ => continue,
        };
        let held = declared.get(capability);
        let has = match (held, mode) {
            (None, _) => false,
            (Some(_), None) => true,
            // An empty `elicitation` object means form mode, as 2025-06-18 clients declared it.
            (Some(elicitation), Some("form")) => {
                elicitation.get("form").is_some() || elicitation.as_object().is_some_and(Map::is_empty)
            }
            (Some(elicitation), Some(mode)) => elicitation.get(mode).is_some(),
        };
        if !has {
            let entry = missing.entry(capability).or_insert_with(|| json!({}));
            if let (Some(mode), Some(entry)) = (mode, entry.as_object_mut()) {
                entry.insert(mode.to_owned(), json!({}));
            }
        }
    }
    (!missing.is_empty()).then_some(Value::Object(missing))
}
