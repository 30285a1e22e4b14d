//! Prompts over a fixed catalogue, for any protocol era: `prompts/list` and `prompts/get`. Each
//! function takes the request's params and the prompts, and returns the result or the JSON-RPC
//! error.

use std::collections::HashMap;

use serde_json::{Map, Value, json};

use crate::jsonrpc::RpcError;

pub struct Argument {
    pub name: &'static str,
    pub description: &'static str,
    pub required: bool,
    /// Values `completion/complete` offers.
    pub suggestions: &'static [&'static str],
}

pub struct Prompt {
    pub name: &'static str,
    pub description: &'static str,
    pub arguments: Vec<Argument>,
    /// The messages, for the given arguments (every required one is present).
    pub render: fn(&HashMap<&str, &str>) -> Vec<Value>,
}

pub fn list(prompts: &[Prompt], params: &Map<String, Value>) -> Result<Value, RpcError> {
    if !matches!(params.get("cursor"), None | Some(Value::Null)) {
        return Err(RpcError::invalid_params(
            "params.cursor is not a cursor this server gave out",
        ));
    }
    let listed: Vec<Value> = prompts
        .iter()
        .map(|prompt| {
            let arguments: Vec<Value> = prompt
                .arguments
                .iter()
                .map(|a| json!({"name": a.name, "description": a.description, "required": a.required}))
                .collect();
            json!({"name": prompt.name, "description": prompt.description, "arguments": arguments})
        })
        .collect();
    Ok(json!({ "prompts": listed }))
}

/// The prompt `params.name`, or an invalid-params error naming what was asked for.
pub fn find<'p>(prompts: &'p [Prompt], name: Option<&Value>, key: &str) -> Result<&'p Prompt, RpcError> {
    let name = name
        .and_then(Value::as_str)
        .ok_or_else(|| RpcError::invalid_params(format!("{key} must be a prompt name (a string)")))?;
    prompts
        .iter()
        .find(|p| p.name == name)
        .ok_or_else(|| RpcError::invalid_params(format!("Unknown prompt: {name}")))
}

pub fn get(prompts: &[Prompt], params: &Map<String, Value>) -> Result<Value, RpcError> {
    let prompt = find(prompts, params.get("name"), "params.name")?;
    let given = match params.get("arguments") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(arguments)) => arguments.clone(),
        Some(_) => return Err(RpcError::invalid_params("params.arguments must be an object")),
    };
    let mut arguments = HashMap::new();
    for (name, value) in &given {
        let Some(argument) = prompt.arguments.iter().find(|a| a.name == name) else {
            return Err(RpcError::invalid_params(format!(
                "prompt {} has no argument {name}",
                prompt.name
            )));
        };
        let value = value
            .as_str()
            .ok_or_else(|| RpcError::invalid_params(format!("params.arguments.{name} must be a string")))?;
        arguments.insert(argument.name, value);
    }
    if let Some(missing) = prompt
        .arguments
        .iter()
        .find(|a| a.required && !arguments.contains_key(a.name))
    {
        return Err(RpcError::invalid_params(format!(
            "prompt {} needs argument {}",
            prompt.name, missing.name
        )));
    }
    Ok(json!({"description": prompt.description, "messages": (prompt.render)(&arguments)}))
}
