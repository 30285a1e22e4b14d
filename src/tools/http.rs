//! The HTTP tool: declared in configuration, it calls one HTTP API and returns the response.

use std::time::Duration;

use crate::outbound::{ReadError, read_bounded};
use async_trait::async_trait;
use reqwest::Method;
use reqwest::header::{CONTENT_TYPE, HeaderName, HeaderValue};
use serde_json::Value;
use url::Url;

use super::body::Body;
use super::redact::Redactor;
use super::template::{Encoding, Placeholders, Template, Values};
use super::{Arguments, CallContext, Tool, ToolDefinition, ToolOutcome, ToolResult};
use crate::config::{ConfigError, ToolConfig};
use crate::forms::Form;
use crate::gate::{Credentials, Requirement};
use crate::providers::{Providers, TokenRefusal};
use crate::telemetry;

/// Body text shown in an error result, at most.
const ERROR_EXCERPT_BYTES: usize = 2048;

pub struct HttpTool {
    definition: ToolDefinition,
    method: Method,
    url: Template,
    /// Scheme, host and port of every URL this tool may call: placeholders cannot change them.
    origin: url::Origin,
    /// The URL's text before its first placeholder: what its calls' spans show (never arguments).
    shown_url: Url,
    headers: Vec<(HeaderName, Template)>,
    body: Option<Body>,
    timeout: Duration,
    max_response_bytes: usize,
    /// The provider whose access token is sent as `Authorization: Bearer` (the first required).
    bearer: Option<Bearer>,
    client: reqwest::Client,
}

/// The provider whose token a tool sends, and how that provider's API refuses a token besides 401.
struct Bearer {
    provider: String,
    refused_when: Option<TokenRefusal>,
}

impl HttpTool {
    pub fn from_config(
        tool: &ToolConfig,
        definition: ToolDefinition,
        forms: &[&Form],
        key: &str,
        providers: &Providers,
        client: reqwest::Client,
    ) -> Result<Self, ConfigError> {
        let arguments = definition.input_schema.property_names();
        let names = Placeholders {
            arguments: &arguments,
            forms,
        };
        let http = &tool.http;
        let method = Method::from_bytes(http.method.to_ascii_uppercase().as_bytes()).map_err(|_| {
            ConfigError::key(
                format!("{key}.http.method"),
                format!("`{}` is not an HTTP method", http.method),
            )
        })?;

        let url_key = format!("{key}.http.url");
        let url = Template::parse(&http.url, &url_key, &names)?;
        if url.uses_secrets() {
            return Err(ConfigError::key(
                url_key,
                "uses a secret form field; URLs end up in logs and proxies, so secrets go in headers or the body",
            ));
        }
        let shown_url = static_url(&url, &url_key)?;
        let origin = shown_url.origin();
        url.check_url().map_err(|why| {
            ConfigError::key(
                &url_key,
                format!("changes when parsed ({why}): write its path without `.` or `..` segments"),
            )
        })?;

        let mut headers = Vec::new();
        for (name, value) in &http.headers {
            let header_key = format!("{key}.http.headers.{name}");
            let name = HeaderName::try_from(name.as_str())
                .map_err(|_| ConfigError::key(&header_key, "is not a valid header name"))?;
            headers.push((name, Template::parse(value, &header_key, &names)?));
        }

        let body_key = format!("{key}.http.body");
        let content_type = http
            .headers
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(CONTENT_TYPE.as_str()))
            .map(|(_, value)| value.as_str());
        let body = http
            .body
            .as_ref()
            .map(|body| Body::from_config(body, &body_key, &names, content_type))
            .transpose()?;
        if body.is_some() && matches!(method, Method::GET | Method::HEAD) {
            return Err(ConfigError::key(body_key, format!("a {method} request has no body")));
        }
        if http.timeout.is_zero() {
            return Err(ConfigError::key(
                format!("{key}.http.timeout"),
                "must be longer than zero",
            ));
        }
        if http.max_response_bytes == 0 {
            return Err(ConfigError::key(
                format!("{key}.http.max_response_bytes"),
                "must be at least 1",
            ));
        }

        let mut definition = definition;
        definition.read_only = matches!(method, Method::GET | Method::HEAD);
        let bearer = definition.requires.iter().find_map(|r| match r {
            Requirement::Provider { provider, .. } => Some(Bearer {
                provider: provider.clone(),
                refused_when: providers.get(provider).and_then(|p| p.token_refused_when.clone()),
            }),
            Requirement::Form { .. } | Requirement::Approval { .. } => None,
        });
        if bearer.is_some() && http.headers.keys().any(|h| h.eq_ignore_ascii_case("authorization")) {
            return Err(ConfigError::key(
                format!("{key}.http.headers.Authorization"),
                "is set by gatehouse to the user's access token for a tool that requires a provider",
            ));
        }
        Ok(Self {
            definition,
            method,
            url,
            origin,
            shown_url,
            headers,
            body,
            timeout: http.timeout,
            max_response_bytes: http.max_response_bytes,
            bearer,
            client,
        })
    }

    fn build_request(&self, values: &Values<'_>) -> Result<reqwest::RequestBuilder, String> {
        let url = self.url.render_url(values)?;
        if url.origin() != self.origin {
            return Err("the arguments would send the request to another host".into());
        }
        let mut request = self.client.request(self.method.clone(), url).timeout(self.timeout);
        for (name, template) in &self.headers {
            let value = template.render(values, Encoding::Header)?;
            let value =
                HeaderValue::from_str(&value).map_err(|_| format!("header {name} would not be a valid value"))?;
            request = request.header(name, value);
        }
        if let Some(body) = &self.body {
            let (body, content_type) = body.render(values)?;
            request = request.body(body);
            if let Some(content_type) = content_type
                && !self.headers.iter().any(|(name, _)| name == CONTENT_TYPE)
            {
                request = request.header(CONTENT_TYPE, content_type);
            }
        }
        Ok(request)
    }
}

/// The fixed text of a URL template before any placeholder, which must hold the whole origin.
fn static_url(url: &Template, key: &str) -> Result<Url, ConfigError> {
    let prefix = url.static_prefix();
    let parsed = Url::parse(prefix).map_err(|e| ConfigError::key(key, format!("is not an absolute URL: {e}")))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(ConfigError::key(key, "must be an http or https URL"));
    }
    // With placeholders, the host must end before the first one: `https://{{args.h}}.x/` is refused.
    let authority_end = prefix
        .find("://")
        .map(|i| i + 3)
        .and_then(|start| prefix[start..].find('/').map(|j| start + j));
    if url.has_placeholders() && authority_end.is_none() {
        return Err(ConfigError::key(
            key,
            "placeholders may only appear after the host, in the path or query",
        ));
    }
    Ok(parsed)
}

#[async_trait]
impl Tool for HttpTool {
    fn definition(&self) -> &ToolDefinition {
        &self.definition
    }

    async fn call(&self, _context: &CallContext<'_>, credentials: &Credentials, arguments: &Arguments) -> ToolOutcome {
        let values = Values {
            arguments,
            forms: credentials.forms(),
        };
        let mut request = match self.build_request(&values) {
            Ok(request) => request,
            Err(reason) => {
                return ToolOutcome::Done(ToolResult::error(format!(
                    "Cannot call {}: {reason}",
                    self.definition.name
                )));
            }
        };
        if let Some(Bearer { provider, .. }) = &self.bearer {
            // The gate ran this tool only with a token for every provider it requires.
            let Some(token) = credentials.token(provider) else {
                return ToolOutcome::CredentialRejected {
                    provider: provider.clone(),
                };
            };
            request = request.bearer_auth(token.expose());
        }
        let redactor = Redactor::new(credentials.secrets());
        match self.send(request, &redactor).await {
            Sent::Answer(result) => ToolOutcome::Done(result),
            Sent::Unauthorized => match &self.bearer {
                Some(Bearer { provider, .. }) => ToolOutcome::CredentialRejected {
                    provider: provider.clone(),
                },
                None => ToolOutcome::Done(ToolResult::error(format!(
                    "{} answered 401 Unauthorized",
                    self.origin.ascii_serialization()
                ))),
            },
        }
    }
}

enum Sent {
    Answer(ToolResult),
    /// 401, or a 2xx answer the provider's `token_refused_when` matches: the token was refused.
    Unauthorized,
}

impl HttpTool {
    async fn send(&self, request: reqwest::RequestBuilder, redactor: &Redactor) -> Sent {
        let host = self.origin.ascii_serialization();
        let sent = match request.build() {
            Ok(request) => {
                telemetry::execute_traced(&self.client, request, "tool", &self.definition.name, &self.shown_url).await
            }
            Err(error) => Err(error),
        };
        let response = match sent {
            Ok(response) => response,
            Err(e) if e.is_timeout() => {
                let waited = humantime::format_duration(self.timeout);
                return Sent::Answer(ToolResult::error(format!("{host} did not answer within {waited}")));
            }
            Err(e) => {
                tracing::warn!(tool = %self.definition.name, error = %e, "upstream request failed");
                return Sent::Answer(ToolResult::error(format!("Could not reach {host}")));
            }
        };
        if response.status() == reqwest::StatusCode::UNAUTHORIZED {
            return Sent::Unauthorized;
        }
        self.read_answer(response, &host, redactor).await
    }

    /// The tool result for an upstream answer: its text, JSON objects also as structured content,
    /// with the call's secrets redacted before anything is cut. A 2xx answer that refuses the
    /// token is never shown.
    async fn read_answer(&self, response: reqwest::Response, host: &str, redactor: &Redactor) -> Sent {
        let status = response.status();
        let is_json = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/json") || v.contains("+json"));
        let body = match read_bounded(response, self.max_response_bytes).await {
            Ok(body) => body,
            Err(ReadError::TooLarge) => {
                return Sent::Answer(ToolResult::error(format!(
                    "{host} sent more than {} bytes, the limit for this tool",
                    self.max_response_bytes
                )));
            }
            Err(ReadError::Timeout) => {
                return Sent::Answer(ToolResult::error(format!(
                    "{host} did not finish answering within {}",
                    humantime::format_duration(self.timeout)
                )));
            }
            Err(ReadError::Failed(_)) => {
                return Sent::Answer(ToolResult::error(format!(
                    "The connection to {host} failed while reading its answer"
                )));
            }
        };
        let refused_when = self.bearer.as_ref().and_then(|b| b.refused_when.as_ref());
        if status.is_success()
            && let Some(refused_when) = refused_when
            && serde_json::from_slice::<Value>(&body).is_ok_and(|answer| refused_when.matches(&answer))
        {
            return Sent::Unauthorized;
        }
        let text = redactor.text(&String::from_utf8_lossy(&body));
        if status.is_redirection() {
            return Sent::Answer(ToolResult::error(format!(
                "{host} answered {status}, a redirect, which gatehouse does not follow"
            )));
        }
        if !status.is_success() {
            let excerpt: String = text.chars().take(ERROR_EXCERPT_BYTES).collect();
            return Sent::Answer(ToolResult::error(format!("{host} answered {status}: {excerpt}")));
        }
        Sent::Answer(match serde_json::from_str::<Value>(&text) {
            // Parsing decodes escapes: the strings are checked again as they now read.
            Ok(value @ Value::Object(_)) if is_json => ToolResult::structured(redactor.value(value)),
            _ => ToolResult::text(text),
        })
    }
}
