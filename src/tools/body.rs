//! HTTP tool request bodies, compiled once at start. A table is a JSON document whose strings are
//! templates. A string is JSON when, with every placeholder replaced by a number, it parses as an
//! object or array: then every placeholder must sit inside a string value (refused at start
//! otherwise) and values are JSON-escaped there. Any other string is form-encoded when the tool's
//! `Content-Type` is `application/x-www-form-urlencoded` (values percent-encoded), else text with
//! values inserted as they are.

use serde_json::Value;

use super::template::{Encoding, Placeholders, Template, Values};
use crate::config::ConfigError;

const JSON: &str = "application/json";

/// What a placeholder is written as to find out where it sits in a string body: inside a JSON
/// string it is text; anywhere else the document is not JSON.
const MARKER: &str = "GATEHOUSE_PLACEHOLDER";

pub enum Body {
    /// A string that is not JSON, its values written in this encoding.
    Text(Template, Encoding),
    /// A string that is JSON, every placeholder inside a string value.
    JsonText(Template),
    /// A table.
    Json(JsonTemplate),
}

impl Body {
    /// The body configured at `key`; `content_type` is the tool's `Content-Type` header, if set.
    pub fn from_config(
        value: &Value,
        key: &str,
        names: &Placeholders<'_>,
        content_type: Option<&str>,
    ) -> Result<Self, ConfigError> {
        match value {
            Value::String(text) => {
                let template = Template::parse(text, key, names)?;
                Ok(if is_json(&template, key)? {
                    Body::JsonText(template)
                } else if content_type.is_some_and(is_form) {
                    Body::Text(template, Encoding::UrlComponent)
                } else {
                    Body::Text(template, Encoding::Text)
                })
            }
            Value::Object(_) | Value::Array(_) => Ok(Body::Json(JsonTemplate::compile(value, key, names)?)),
            _ => Err(ConfigError::key(key, "must be a string or a table")),
        }
    }

    /// The rendered body, and the content type it has unless the tool's headers set one.
    pub fn render(&self, values: &Values<'_>) -> Result<(String, Option<&'static str>), String> {
        Ok(match self {
            Body::Text(template, encoding) => (template.render(values, *encoding)?, None),
            Body::JsonText(template) => (template.render(values, Encoding::JsonString)?, Some(JSON)),
            Body::Json(document) => (document.render(values)?.to_string(), Some(JSON)),
        })
    }
}

fn is_form(content_type: &str) -> bool {
    content_type
        .split(';')
        .next()
        .is_some_and(|media| media.trim().eq_ignore_ascii_case("application/x-www-form-urlencoded"))
}

/// Whether a string body is JSON (see the module's comment); an error if it is and a placeholder
/// sits outside a string value, or in an object key (a value could add or repeat a field).
fn is_json(template: &Template, key: &str) -> Result<bool, ConfigError> {
    let numbered = template.with_markers(|_, _| "1".to_owned());
    if !matches!(serde_json::from_str(&numbered), Ok(Value::Object(_) | Value::Array(_))) {
        return Ok(false);
    }
    let mut names = Vec::new();
    let marked = template.with_markers(|index, name| {
        names.push(name.to_owned());
        format!("{MARKER}{index}_")
    });
    let refuse = |name: &str, why: &str| {
        ConfigError::key(
            key,
            format!(
                "is JSON, and the placeholder `{{{{{name}}}}}` is {why}: put it inside a string value, \
                 where values are JSON-escaped, or write the body as a table (a string that is exactly \
                 one placeholder keeps the value's JSON type)"
            ),
        )
    };
    for (index, name) in names.iter().enumerate() {
        let alone = template.with_markers(|i, _| if i == index { MARKER.to_owned() } else { "1".to_owned() });
        if serde_json::from_str::<Value>(&alone).is_err() {
            return Err(refuse(
                name,
                "outside a string value, where an argument could change the document",
            ));
        }
    }
    let document: Value = serde_json::from_str(&marked)
        .map_err(|e| ConfigError::key(key, format!("is not valid JSON with its placeholders filled in: {e}")))?;
    let mut keys = Vec::new();
    object_keys(&document, &mut keys);
    match names
        .iter()
        .enumerate()
        .find(|(index, _)| keys.iter().any(|k| k.contains(&format!("{MARKER}{index}_"))))
    {
        Some((_, name)) => Err(refuse(
            name,
            "in an object key, where an argument could add or repeat a field",
        )),
        None => Ok(true),
    }
}

fn object_keys<'a>(value: &'a Value, keys: &mut Vec<&'a str>) {
    match value {
        Value::Array(items) => items.iter().for_each(|item| object_keys(item, keys)),
        Value::Object(map) => {
            for (key, item) in map {
                keys.push(key);
                object_keys(item, keys);
            }
        }
        _ => {}
    }
}

/// A JSON document whose strings are templates, compiled once at start.
pub enum JsonTemplate {
    /// A string that is exactly one placeholder: its JSON value (null when left out).
    Single(Template),
    Text(Template),
    Array(Vec<JsonTemplate>),
    Object(Vec<(String, JsonTemplate)>),
    Literal(Value),
}

impl JsonTemplate {
    fn compile(value: &Value, key: &str, names: &Placeholders<'_>) -> Result<Self, ConfigError> {
        Ok(match value {
            Value::String(text) => {
                let template = Template::parse(text, key, names)?;
                if template.is_single_placeholder() {
                    JsonTemplate::Single(template)
                } else {
                    JsonTemplate::Text(template)
                }
            }
            Value::Array(items) => JsonTemplate::Array(
                items
                    .iter()
                    .map(|item| Self::compile(item, key, names))
                    .collect::<Result<_, _>>()?,
            ),
            Value::Object(map) => JsonTemplate::Object(
                map.iter()
                    .map(|(k, v)| Ok((k.clone(), Self::compile(v, key, names)?)))
                    .collect::<Result<_, ConfigError>>()?,
            ),
            other => JsonTemplate::Literal(other.clone()),
        })
    }

    fn render(&self, values: &Values<'_>) -> Result<Value, String> {
        Ok(match self {
            JsonTemplate::Single(template) => template.single_value(values).unwrap_or(Value::Null),
            JsonTemplate::Text(template) => Value::String(template.render(values, Encoding::Text)?),
            JsonTemplate::Array(items) => {
                Value::Array(items.iter().map(|i| i.render(values)).collect::<Result<_, _>>()?)
            }
            JsonTemplate::Object(fields) => Value::Object(
                fields
                    .iter()
                    .map(|(k, v)| Ok((k.clone(), v.render(values)?)))
                    .collect::<Result<_, String>>()?,
            ),
            JsonTemplate::Literal(value) => value.clone(),
        })
    }
}

#[cfg(test)]
mod tests;
