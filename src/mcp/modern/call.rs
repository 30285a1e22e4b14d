//! A 2026-07-28 `tools/call`. A call that needs the user answers `input_required`: one URL-mode
//! `elicitation/create` per unmet requirement (the same pages and elicitations as the handshake
//! era) and a sealed `requestState`. The retry that brings the state back is held on the bus
//! while those elicitations are pending, answered the moment the user finishes (on whichever
//! replica), or answered `input_required` again, with a fresh state, when `elicitation.hold` runs
//! out.

use chrono::Utc;
use serde_json::{Map, Value, json};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::request_state::RequestState;
use crate::domain::ElicitationId;
use crate::gate::after;
use crate::identity::Caller;
use crate::jsonrpc::{MISSING_REQUIRED_CLIENT_CAPABILITY, RpcError};
use crate::mcp::tool_call::{self, Called, Hold, ToolRequest, supports_url_elicitation};
use crate::state::AppState;
use crate::store::SessionRecord;

/// Runs the call; its result, or `input_required`.
pub async fn call(
    state: &AppState,
    session: &SessionRecord,
    caller: &Caller,
    mut params: Map<String, Value>,
) -> Result<Value, RpcError> {
    let sealed = params.remove("requestState");
    // In URL mode `accept` only says the user agreed to open the link: what counts is what the
    // gate finds now.
    params.remove("inputResponses");
    let request = ToolRequest::parse(&mut params)?;
    let tool = request.name.clone();
    let arguments = request.arguments.clone();
    let now = Utc::now();
    let opened = match sealed {
        None | Some(Value::Null) => None,
        Some(Value::String(sealed)) => Some(
            RequestState::open(&state.vault, &sealed, &caller.principal, &tool, &arguments, now)
                .map_err(|e| RpcError::invalid_params(e.to_string()))?,
        ),
        Some(_) => return Err(RpcError::invalid_params("params.requestState must be a string")),
    };
    // Held only with a place among the replica's held retries; without one, answered at once.
    let hold_for = state.config.elicitation.hold;
    let permit = opened
        .as_ref()
        .filter(|_| !hold_for.is_zero())
        .and_then(|_| state.calls.hold());
    let hold = match (&opened, &permit) {
        (Some(opened), Some(_)) => Some(Hold {
            until: Instant::now() + hold_for,
            wake: state.bus.subscribe(&session.id),
            given: opened.elicitations(),
        }),
        _ => None,
    };
    let cancelled = CancellationToken::new();
    let called = tool_call::call(state, session, caller, request, None, hold, &cancelled).await?;
    drop(permit);
    let asks: Vec<(String, Option<ElicitationId>, Value)> = match called {
        Called::Result(result) => return Ok(result),
        Called::Elicit(records) => records
            .iter()
            .map(|e| (e.id.to_string(), Some(e.id), url_request(&e.url, &e.message)))
            .collect(),
        Called::Upstream(elicitations) => elicitations
            .iter()
            .enumerate()
            .map(|(i, e)| {
                let key = e
                    .get("elicitationId")
                    .and_then(Value::as_str)
                    .map_or_else(|| format!("upstream-{i}"), str::to_owned);
                let text = |field: &str| e.get(field).and_then(Value::as_str).unwrap_or_default().to_owned();
                (key, None, url_request(&text("url"), &text("message")))
            })
            .collect(),
    };
    if !supports_url_elicitation(session) {
        return Err(RpcError::new(
            MISSING_REQUIRED_CLIENT_CAPABILITY,
            "This tool needs the user to open a page in a browser: declare elicitation.url in clientCapabilities",
        )
        .with_data(json!({"requiredCapabilities": {"elicitation": {"url": {}}}})));
    }
    let given: Vec<ElicitationId> = asks.iter().filter_map(|(_, id, _)| *id).collect();
    let expires = after(now, state.config.elicitation.ttl);
    let state_out = RequestState::new(&caller.principal, &tool, &arguments, &given, expires).seal(&state.vault);
    let input_requests: Map<String, Value> = asks.into_iter().map(|(key, _, request)| (key, request)).collect();
    Ok(json!({
        "resultType": "input_required",
        "inputRequests": input_requests,
        "requestState": state_out,
    }))
}

/// One URL-mode `elicitation/create` input request.
fn url_request(url: &str, message: &str) -> Value {
    json!({"method": "elicitation/create", "params": {"mode": "url", "url": url, "message": message}})
}
