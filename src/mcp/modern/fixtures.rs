//! With the conformance fixtures (the `conformance` feature): resources, prompts and completion in
//! the 2026-07-28 era, answered by the same era-neutral functions as in the handshake era. Lists
//! and `resources/read` say how long they may be kept (the fixtures never change, and are the
//! same for everybody); a prompt that needs the client first answers `input_required` until the
//! retry brings the answer. Subscriptions need a session and stay in the handshake era.

use serde_json::{Map, Value, json};

use super::call::{check_capabilities, input_responses};
use super::{Refused, not_found};
use crate::mcp::fixtures;
use crate::mcp::state::McpState;
use crate::store::SessionRecord;

/// How long a client may keep a list of fixtures or a read resource.
const FIXTURES_TTL_MS: u64 = 300_000;

/// The capabilities `server/discover` announces, with what the fixtures serve when they are on.
pub fn advertise(state: &McpState, capabilities: Value) -> Value {
    match state.fixtures {
        Some(_) => fixtures::advertise(capabilities, false),
        None => capabilities,
    }
}

/// Answers a resources, prompts or completion request; "Method not found" when the fixtures are
/// off.
pub fn answer(
    state: &McpState,
    session: &SessionRecord,
    method: &str,
    mut params: Map<String, Value>,
) -> Result<Value, Refused> {
    let Some(served) = state.fixtures.as_deref() else {
        return Err(not_found(method));
    };
    let responses = input_responses(&mut params)?;
    // Nothing is kept across a fixture's round, so no state is issued, and one sent is ignored.
    params.remove("requestState");
    if let Some(requests) = fixtures::input_requests(method, &params, &responses) {
        check_capabilities(session, &requests)?;
        return Ok(json!({"resultType": "input_required", "inputRequests": requests}));
    }
    let mut result = fixtures::answer(Some(served), &session.id, method, &params)?;
    if matches!(
        method,
        "resources/list" | "resources/templates/list" | "resources/read" | "prompts/list"
    ) {
        result["ttlMs"] = json!(FIXTURES_TTL_MS);
        result["cacheScope"] = json!("public");
    }
    Ok(result)
}
