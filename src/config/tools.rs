//! `[[tools]]`: HTTP tools as configured, and how each one asks for what it is missing.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use super::duration::{duration, optional_duration};

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolConfig {
    pub name: String,
    pub title: Option<String>,
    #[serde(default)]
    pub description: String,
    /// JSON Schema of the arguments; an object schema with no properties when absent.
    pub input_schema: Option<serde_json::Value>,
    /// What must be true before the tool runs: `provider`, `provider:scope1 scope2`, `form:id`.
    #[serde(default)]
    pub requires: Vec<String>,
    /// What the tool does when a requirement is missing.
    #[serde(default)]
    pub elicit: ElicitMode,
    /// With `elicit = "request"`: how long to wait for the user (default `elicitation.wait`).
    #[serde(default, deserialize_with = "optional_duration")]
    pub elicit_timeout: Option<Duration>,
    /// Who may see and call the tool, by claims (see `AllowConfig`); everyone when absent.
    pub allow: Option<super::AllowConfig>,
    pub http: HttpToolConfig,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ElicitMode {
    /// Fail with -32042 (or a result naming the URL); the client retries when the user is done.
    #[default]
    Error,
    /// Send `elicitation/create` on the call's own stream and wait for the user within the call.
    Request,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpToolConfig {
    #[serde(default = "default_method")]
    pub method: String,
    /// URL template; `{{args.NAME}}` placeholders are percent-encoded into the URL.
    pub url: String,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// A string template (sent as is) or a table (sent as JSON, placeholders become JSON values).
    pub body: Option<serde_json::Value>,
    #[serde(default = "default_tool_timeout", deserialize_with = "duration")]
    pub timeout: Duration,
    #[serde(default = "default_max_response_bytes")]
    pub max_response_bytes: usize,
}

fn default_method() -> String {
    "GET".to_owned()
}

fn default_tool_timeout() -> Duration {
    Duration::from_secs(30)
}

fn default_max_response_bytes() -> usize {
    1024 * 1024
}
