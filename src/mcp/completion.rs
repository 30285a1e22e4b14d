//! `completion/complete` for prompt arguments and resource template variables, for any protocol
//! era: the values offered for the argument that start with what the user typed so far.

use serde_json::{Map, Value, json};

use super::prompts::{self, Prompt};
use super::resources::Resources;
use crate::jsonrpc::RpcError;

/// Values in one answer, as MCP allows at most.
const MAX_VALUES: usize = 100;

pub fn complete(prompts: &[Prompt], resources: &Resources, params: &Map<String, Value>) -> Result<Value, RpcError> {
    let reference = params
        .get("ref")
        .and_then(Value::as_object)
        .ok_or_else(|| RpcError::invalid_params("completion/complete needs params.ref (an object)"))?;
    let argument = params
        .get("argument")
        .and_then(Value::as_object)
        .ok_or_else(|| RpcError::invalid_params("completion/complete needs params.argument (an object)"))?;
    let (Some(name), Some(typed)) = (
        argument.get("name").and_then(Value::as_str),
        argument.get("value").and_then(Value::as_str),
    ) else {
        return Err(RpcError::invalid_params(
            "params.argument needs a name and a value (strings)",
        ));
    };
    let offered: &[&str] = match reference.get("type").and_then(Value::as_str) {
        Some("ref/prompt") => {
            let prompt = prompts::find(prompts, reference.get("name"), "params.ref.name")?;
            let argument =
                prompt.arguments.iter().find(|a| a.name == name).ok_or_else(|| {
                    RpcError::invalid_params(format!("prompt {} has no argument {name}", prompt.name))
                })?;
            argument.suggestions
        }
        Some("ref/resource") => {
            let uri = reference
                .get("uri")
                .and_then(Value::as_str)
                .ok_or_else(|| RpcError::invalid_params("params.ref.uri must be a string"))?;
            let template = resources
                .templates
                .iter()
                .find(|t| t.uri_template == uri)
                .ok_or_else(|| RpcError::invalid_params(format!("Unknown resource template: {uri}")))?;
            template
                .suggestions
                .iter()
                .find(|(variable, _)| *variable == name)
                .map_or(&[] as &[&str], |(_, values)| *values)
        }
        _ => {
            return Err(RpcError::invalid_params(
                "params.ref.type must be ref/prompt or ref/resource",
            ));
        }
    };
    let values: Vec<&str> = offered.iter().copied().filter(|v| v.starts_with(typed)).collect();
    let total = values.len();
    let shown = &values[..total.min(MAX_VALUES)];
    Ok(json!({"completion": {"values": shown, "total": total, "hasMore": total > shown.len()}}))
}
