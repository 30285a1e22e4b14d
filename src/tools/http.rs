//! The HTTP tool: declared in configuration, it calls one HTTP API and returns the response.

use std::collections::BTreeSet;
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use reqwest::Method;
use reqwest::header::{CONTENT_TYPE, HeaderName, HeaderValue};
use serde_json::{Map, Value};
use url::Url;

use super::template::{Encoding, Template};
use super::{CallContext, InputSchema, Tool, ToolDefinition, ToolResult};
use crate::config::{ConfigError, ToolConfig};
use crate::gate::Requirement;

/// Body text shown in an error result, at most.
const ERROR_EXCERPT_BYTES: usize = 2048;

enum Body {
    Text(Template),
    /// A JSON document whose string leaves are templates.
    Json(Value),
}

pub struct HttpTool {
    definition: ToolDefinition,
    method: Method,
    url: Template,
    /// Scheme, host and port of every URL this tool may call: placeholders cannot change them.
    origin: url::Origin,
    headers: Vec<(HeaderName, Template)>,
    body: Option<Body>,
    timeout: Duration,
    max_response_bytes: usize,
    client: reqwest::Client,
}

impl HttpTool {
    pub fn from_config(tool: &ToolConfig, requires: Vec<Requirement>, key: &str, client: reqwest::Client) -> Result<Self, ConfigError> {
        let input_schema = InputSchema::from_config(tool.input_schema.as_ref(), &format!("{key}.input_schema"))?;
        let arguments = input_schema.property_names();
        let http = &tool.http;
        let method = Method::from_bytes(http.method.to_ascii_uppercase().as_bytes())
            .map_err(|_| ConfigError::key(format!("{key}.http.method"), format!("`{}` is not an HTTP method", http.method)))?;

        let url_key = format!("{key}.http.url");
        let url = Template::parse(&http.url, &url_key, &arguments)?;
        let origin = static_origin(&url, &url_key)?;

        let mut headers = Vec::new();
        for (name, value) in &http.headers {
            let header_key = format!("{key}.http.headers.{name}");
            let name = HeaderName::try_from(name.as_str())
                .map_err(|_| ConfigError::key(&header_key, "is not a valid header name"))?;
            headers.push((name, Template::parse(value, &header_key, &arguments)?));
        }

        let body_key = format!("{key}.http.body");
        let body = match &http.body {
            None => None,
            Some(Value::String(text)) => Some(Body::Text(Template::parse(text, &body_key, &arguments)?)),
            Some(document @ (Value::Object(_) | Value::Array(_))) => {
                check_json_templates(document, &body_key, &arguments)?;
                Some(Body::Json(document.clone()))
            }
            Some(_) => return Err(ConfigError::key(body_key, "must be a string or a table")),
        };
        if body.is_some() && matches!(method, Method::GET | Method::HEAD) {
            return Err(ConfigError::key(body_key, format!("a {method} request has no body")));
        }
        if http.timeout.is_zero() {
            return Err(ConfigError::key(format!("{key}.http.timeout"), "must be longer than zero"));
        }
        if http.max_response_bytes == 0 {
            return Err(ConfigError::key(format!("{key}.http.max_response_bytes"), "must be at least 1"));
        }

        let read_only = matches!(method, Method::GET | Method::HEAD);
        Ok(Self {
            definition: ToolDefinition {
                name: tool.name.clone(),
                title: tool.title.clone(),
                description: tool.description.clone(),
                input_schema,
                read_only,
                requires,
            },
            method,
            url,
            origin,
            headers,
            body,
            timeout: http.timeout,
            max_response_bytes: http.max_response_bytes,
            client,
        })
    }

    fn build_request(&self, arguments: &Map<String, Value>) -> Result<reqwest::RequestBuilder, String> {
        let url = self.url.render(arguments, Encoding::UrlComponent)?;
        let url = Url::parse(&url).map_err(|e| format!("the arguments make an invalid URL: {e}"))?;
        if url.origin() != self.origin {
            return Err("the arguments would send the request to another host".into());
        }
        let mut request = self.client.request(self.method.clone(), url).timeout(self.timeout);
        for (name, template) in &self.headers {
            let value = template.render(arguments, Encoding::Header)?;
            let value = HeaderValue::from_str(&value).map_err(|_| format!("header {name} would not be a valid value"))?;
            request = request.header(name, value);
        }
        match &self.body {
            None => {}
            Some(Body::Text(template)) => request = request.body(template.render(arguments, Encoding::Text)?),
            Some(Body::Json(document)) => {
                let has_content_type = self.headers.iter().any(|(name, _)| name == CONTENT_TYPE);
                request = request.body(render_json(document, arguments)?.to_string());
                if !has_content_type {
                    request = request.header(CONTENT_TYPE, "application/json");
                }
            }
        }
        Ok(request)
    }
}

/// The origin of a URL template, which must be fixed text before any placeholder.
fn static_origin(url: &Template, key: &str) -> Result<url::Origin, ConfigError> {
    let prefix = url.static_prefix();
    let parsed = Url::parse(prefix).map_err(|e| ConfigError::key(key, format!("is not an absolute URL: {e}")))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(ConfigError::key(key, "must be an http or https URL"));
    }
    // With placeholders, the host must end before the first one: `https://{{args.h}}.x/` is refused.
    let authority_end = prefix.find("://").map(|i| i + 3).and_then(|start| prefix[start..].find('/').map(|j| start + j));
    if url.has_placeholders() && authority_end.is_none() {
        return Err(ConfigError::key(key, "placeholders may only appear after the host, in the path or query"));
    }
    Ok(parsed.origin())
}

fn check_json_templates(value: &Value, key: &str, arguments: &BTreeSet<String>) -> Result<(), ConfigError> {
    match value {
        Value::String(text) => Template::parse(text, key, arguments).map(|_| ()),
        Value::Array(items) => items.iter().try_for_each(|item| check_json_templates(item, key, arguments)),
        Value::Object(map) => map.values().try_for_each(|item| check_json_templates(item, key, arguments)),
        _ => Ok(()),
    }
}

/// A string that is exactly one placeholder takes the argument's JSON value; other strings are
/// rendered as text. Templates were checked at start, so parsing cannot fail here.
fn render_json(value: &Value, arguments: &Map<String, Value>) -> Result<Value, String> {
    Ok(match value {
        Value::String(text) => {
            let template = Template::parse(text, "", &arguments.keys().cloned().collect())
                .map_err(|_| "a body placeholder names an argument that was not given".to_owned());
            match template {
                Ok(template) => match template.single_argument() {
                    Some(name) => arguments.get(name).cloned().unwrap_or(Value::Null),
                    None => Value::String(template.render(arguments, Encoding::Text)?),
                },
                // An optional argument left out: the placeholder becomes null or empty text.
                Err(_) if text.trim().starts_with("{{") && text.trim().ends_with("}}") && text.matches("{{").count() == 1 => Value::Null,
                Err(_) => Value::String(strip_missing(text, arguments)),
            }
        }
        Value::Array(items) => Value::Array(items.iter().map(|item| render_json(item, arguments)).collect::<Result<_, _>>()?),
        Value::Object(map) => {
            Value::Object(map.iter().map(|(k, v)| Ok((k.clone(), render_json(v, arguments)?))).collect::<Result<_, String>>()?)
        }
        other => other.clone(),
    })
}

/// Renders `text` with left-out arguments as empty text.
fn strip_missing(text: &str, arguments: &Map<String, Value>) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find("}}") else { break };
        let name = after[..end].trim().trim_start_matches("args.");
        match arguments.get(name) {
            Some(Value::String(s)) => out.push_str(s),
            Some(Value::Null) | None => {}
            Some(other) => out.push_str(&other.to_string()),
        }
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    out
}

#[async_trait]
impl Tool for HttpTool {
    fn definition(&self) -> &ToolDefinition {
        &self.definition
    }

    async fn call(&self, _context: &CallContext<'_>, arguments: &Map<String, Value>) -> ToolResult {
        let request = match self.build_request(arguments) {
            Ok(request) => request,
            Err(reason) => return ToolResult::error(format!("Cannot call {}: {reason}", self.definition.name)),
        };
        let host = self.origin.ascii_serialization();
        let response = match request.send().await {
            Ok(response) => response,
            Err(e) if e.is_timeout() => {
                return ToolResult::error(format!("{host} did not answer within {}", humantime::format_duration(self.timeout)));
            }
            Err(e) => {
                tracing::warn!(tool = %self.definition.name, error = %e, "upstream request failed");
                return ToolResult::error(format!("Could not reach {host}"));
            }
        };
        let status = response.status();
        let is_json = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/json") || v.contains("+json"));
        let body = match read_bounded(response, self.max_response_bytes).await {
            Ok(body) => body,
            Err(ReadError::TooLarge) => {
                return ToolResult::error(format!("{host} sent more than {} bytes, the limit for this tool", self.max_response_bytes));
            }
            Err(ReadError::Timeout) => {
                return ToolResult::error(format!("{host} did not finish answering within {}", humantime::format_duration(self.timeout)));
            }
            Err(ReadError::Failed) => return ToolResult::error(format!("The connection to {host} failed while reading its answer")),
        };
        let text = String::from_utf8_lossy(&body).into_owned();
        if status.is_redirection() {
            return ToolResult::error(format!("{host} answered {status}, a redirect, which gatehouse does not follow"));
        }
        if !status.is_success() {
            let excerpt: String = text.chars().take(ERROR_EXCERPT_BYTES).collect();
            return ToolResult::error(format!("{host} answered {status}: {excerpt}"));
        }
        match serde_json::from_str::<Value>(&text) {
            Ok(value @ Value::Object(_)) if is_json => ToolResult::structured(value),
            _ => ToolResult::text(text),
        }
    }
}

enum ReadError {
    TooLarge,
    Timeout,
    Failed,
}

/// Reads the body, refusing more than `limit` bytes without buffering them.
async fn read_bounded(response: reqwest::Response, limit: usize) -> Result<Vec<u8>, ReadError> {
    if response.content_length().is_some_and(|len| len > limit as u64) {
        return Err(ReadError::TooLarge);
    }
    let mut body = Vec::new();
    let mut stream = response.bytes_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| if e.is_timeout() { ReadError::Timeout } else { ReadError::Failed })?;
        if body.len() + chunk.len() > limit {
            return Err(ReadError::TooLarge);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}
