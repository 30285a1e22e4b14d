//! Prompts over a fixed catalogue, for any protocol era: `prompts/list` and `prompts/get`. Each
//! function takes the request's params and the prompts, and returns the result or the JSON-RPC
//! error.

use std::collections::HashMap;

use serde_json::{Map, Value, json};

use super::resources::single_page;
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
    single_page(params)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn catalogue() -> Vec<Prompt> {
        vec![Prompt {
            name: "greet",
            description: "Greets",
            arguments: vec![Argument {
                name: "who",
                description: "Whom",
                required: true,
                suggestions: &[],
            }],
            render: |arguments| vec![json!(arguments.get("who"))],
        }]
    }

    fn params(value: Value) -> Map<String, Value> {
        value.as_object().cloned().expect("object")
    }

    #[test]
    fn get_checks_the_name_and_the_arguments() {
        let prompts = catalogue();
        let got = get(&prompts, &params(json!({"name": "greet", "arguments": {"who": "Ada"}}))).expect("prompt");
        assert_eq!(got["messages"], json!(["Ada"]));
        let refused = |value: Value| get(&prompts, &params(value)).expect_err("refused").message;
        assert_eq!(refused(json!({"name": "nope"})), "Unknown prompt: nope");
        assert_eq!(refused(json!({"name": "greet"})), "prompt greet needs argument who");
        assert_eq!(
            refused(json!({"name": "greet", "arguments": {"who": 1}})),
            "params.arguments.who must be a string"
        );
        assert_eq!(
            refused(json!({"name": "greet", "arguments": {"who": "a", "extra": "b"}})),
            "prompt greet has no argument extra"
        );
        assert!(list(&prompts, &params(json!({"cursor": "x"}))).is_err());
    }
}
