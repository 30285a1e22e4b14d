//! Each answered MCP request, for the metrics: its method, how it was answered and how long it
//! took. Both eras record here, whichever way the answer goes out (JSON, a stream, a batch).

use std::time::Instant;

use serde_json::Value;

use crate::jsonrpc::{INTERNAL_ERROR, RpcError, URL_ELICITATION_REQUIRED};
use crate::metrics::McpOutcome;
use crate::state::AppState;

/// Records the answer to a request of `method` that arrived at `started`.
pub(super) fn record(state: &AppState, method: &str, started: Instant, answer: Result<&Value, &RpcError>) {
    if state.metrics.is_on() {
        let outcome = match answer {
            Ok(result) => of_result(result),
            Err(error) => of_error(error),
        };
        state.metrics.mcp_request(method, outcome, started.elapsed());
    }
}

fn of_result(result: &Value) -> McpOutcome {
    if result.get("isError").and_then(Value::as_bool) == Some(true) {
        McpOutcome::ToolError
    } else if result.get("resultType").and_then(Value::as_str) == Some("input_required") {
        McpOutcome::InputRequired
    } else {
        McpOutcome::Ok
    }
}

fn of_error(error: &RpcError) -> McpOutcome {
    if error.is_busy() {
        McpOutcome::Busy
    } else if error.is_unavailable() {
        McpOutcome::Unavailable
    } else if error.code == URL_ELICITATION_REQUIRED {
        McpOutcome::ElicitationRequired
    } else if error.code == INTERNAL_ERROR {
        McpOutcome::ServerError
    } else {
        McpOutcome::ClientError
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn answers_are_told_apart() {
        assert_eq!(of_result(&json!({"content": []})), McpOutcome::Ok);
        assert_eq!(
            of_result(&json!({"content": [], "isError": true})),
            McpOutcome::ToolError
        );
        assert_eq!(
            of_result(&json!({"resultType": "input_required"})),
            McpOutcome::InputRequired
        );
        assert_eq!(
            of_error(&RpcError::new(URL_ELICITATION_REQUIRED, "sign in")),
            McpOutcome::ElicitationRequired
        );
        assert_eq!(of_error(&RpcError::unavailable()), McpOutcome::Unavailable);
        assert_eq!(of_error(&RpcError::internal()), McpOutcome::ServerError);
        assert_eq!(of_error(&RpcError::invalid_params("no")), McpOutcome::ClientError);
    }
}
