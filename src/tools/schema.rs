//! Checking tool arguments against the tool's input schema. gatehouse checks the part of JSON
//! Schema that tool inputs use (object properties, `required`, `type`, `enum`, string lengths and
//! number bounds); a failure is a tool error the model can read and correct, as MCP asks.

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

use crate::config::ConfigError;

/// An object schema as tools declare it.
#[derive(Debug, Clone)]
pub struct InputSchema {
    schema: Value,
}

impl InputSchema {
    /// Accepts an object schema; `None` means "no arguments".
    pub fn from_config(schema: Option<&Value>, key: &str) -> Result<Self, ConfigError> {
        let Some(schema) = schema else {
            return Ok(Self {
                schema: json!({"type": "object", "properties": {}}),
            });
        };
        let object = schema
            .as_object()
            .ok_or_else(|| ConfigError::key(key, "must be a table (a JSON Schema object)"))?;
        if object.get("type").and_then(Value::as_str) != Some("object") {
            return Err(ConfigError::key(
                key,
                "must have type = \"object\" (tool arguments are an object)",
            ));
        }
        if let Some(properties) = object.get("properties")
            && !properties.is_object()
        {
            return Err(ConfigError::key(format!("{key}.properties"), "must be a table"));
        }
        if let Some(required) = object.get("required") {
            let names = required.as_array().filter(|items| items.iter().all(Value::is_string));
            if names.is_none() {
                return Err(ConfigError::key(
                    format!("{key}.required"),
                    "must be a list of property names",
                ));
            }
        }
        Ok(Self { schema: schema.clone() })
    }

    /// Any object: for a tool whose own server checks its arguments.
    pub fn open() -> Self {
        Self {
            schema: json!({"type": "object"}),
        }
    }

    pub fn as_json(&self) -> &Value {
        &self.schema
    }

    pub fn property_names(&self) -> BTreeSet<String> {
        self.schema
            .get("properties")
            .and_then(Value::as_object)
            .map(|p| p.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// Every problem with `arguments`, one sentence each.
    pub fn check(&self, arguments: &Map<String, Value>) -> Result<(), Vec<String>> {
        let mut problems = Vec::new();
        let properties = self.schema.get("properties").and_then(Value::as_object);
        for name in self
            .schema
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
        {
            if !arguments.contains_key(name) {
                problems.push(format!("`{name}` is required"));
            }
        }
        let closed = self.schema.get("additionalProperties") == Some(&Value::Bool(false));
        for (name, value) in arguments {
            match properties.and_then(|p| p.get(name)) {
                Some(property) => check_value(name, property, value, &mut problems),
                None if closed => problems.push(format!("`{name}` is not an argument of this tool")),
                None => {}
            }
        }
        if problems.is_empty() { Ok(()) } else { Err(problems) }
    }
}

fn type_matches(expected: &str, value: &Value) -> bool {
    match expected {
        "string" => value.is_string(),
        "number" => value.is_number(),
        "integer" => {
            value.as_i64().is_some() || value.as_u64().is_some() || value.as_f64().is_some_and(|f| f.fract() == 0.0)
        }
        "boolean" => value.is_boolean(),
        "object" => value.is_object(),
        "array" => value.is_array(),
        "null" => value.is_null(),
        _ => true,
    }
}

fn check_value(name: &str, schema: &Value, value: &Value, problems: &mut Vec<String>) {
    let types: Vec<&str> = match schema.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(list)) => list.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    if !types.is_empty() && !types.iter().any(|t| type_matches(t, value)) {
        problems.push(format!("`{name}` must be of type {}", types.join(" or ")));
        return;
    }
    if let Some(options) = schema.get("enum").and_then(Value::as_array)
        && !options.contains(value)
    {
        let listed: Vec<String> = options.iter().map(Value::to_string).collect();
        problems.push(format!("`{name}` must be one of {}", listed.join(", ")));
    }
    if let Some(text) = value.as_str() {
        let length = text.chars().count() as u64;
        if let Some(min) = schema.get("minLength").and_then(Value::as_u64)
            && length < min
        {
            problems.push(format!("`{name}` must be at least {min} characters long"));
        }
        if let Some(max) = schema.get("maxLength").and_then(Value::as_u64)
            && length > max
        {
            problems.push(format!("`{name}` must be at most {max} characters long"));
        }
    }
    if let Some(number) = value.as_f64() {
        if let Some(min) = schema.get("minimum").and_then(Value::as_f64)
            && number < min
        {
            problems.push(format!("`{name}` must be at least {min}"));
        }
        if let Some(max) = schema.get("maximum").and_then(Value::as_f64)
            && number > max
        {
            problems.push(format!("`{name}` must be at most {max}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema() -> InputSchema {
        InputSchema::from_config(
            Some(&json!({
                "type": "object",
                "properties": {
                    "city": {"type": "string", "minLength": 2, "maxLength": 20},
                    "days": {"type": "integer", "minimum": 1, "maximum": 7},
                    "unit": {"type": "string", "enum": ["c", "f"]}
                },
                "required": ["city"],
                "additionalProperties": false
            })),
            "tools[0].input_schema",
        )
        .expect("schema")
    }

    fn args(value: Value) -> Map<String, Value> {
        value.as_object().expect("object").clone()
    }

    #[test]
    fn accepts_valid_arguments() {
        assert!(
            schema()
                .check(&args(json!({"city": "Oslo", "days": 3, "unit": "c"})))
                .is_ok()
        );
    }

    #[test]
    fn reports_every_problem() {
        let problems = schema()
            .check(&args(json!({"days": 9.5, "unit": "k", "extra": 1})))
            .expect_err("invalid");
        assert_eq!(problems.len(), 4, "{problems:?}");
        assert!(problems.iter().any(|p| p.contains("`city` is required")));
        assert!(problems.iter().any(|p| p.contains("`days` must be of type integer")));
        assert!(problems.iter().any(|p| p.contains("`unit` must be one of")));
        assert!(problems.iter().any(|p| p.contains("`extra` is not an argument")));
        let short = schema()
            .check(&args(json!({"city": "X", "days": 0})))
            .expect_err("invalid");
        assert_eq!(short.len(), 2, "{short:?}");
    }

    #[test]
    fn refuses_schemas_that_are_not_object_schemas() {
        assert!(InputSchema::from_config(Some(&json!({"type": "string"})), "k").is_err());
        assert!(InputSchema::from_config(Some(&json!({"type": "object", "required": "x"})), "k").is_err());
        assert!(InputSchema::from_config(Some(&json!([1])), "k").is_err());
        assert_eq!(
            InputSchema::from_config(None, "k")
                .expect("default")
                .property_names()
                .len(),
            0
        );
    }
}
