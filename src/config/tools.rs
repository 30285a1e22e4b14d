//! `[[tools]]`: HTTP tools as configured, and how each one asks for what it is missing.

use std::collections::BTreeMap;
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::duration::{DurationText, duration, duration_text, optional_duration, optional_duration_text};

/// An HTTP tool: one HTTP request per call, its answer the tool's result.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolConfig {
    /// The tool's name in `tools/list`.
    #[schemars(example = &"github_me")]
    pub name: String,
    /// A human-readable title clients may show.
    #[schemars(example = &"My GitHub profile")]
    pub title: Option<String>,
    /// What the tool does, for the model.
    #[serde(default)]
    #[schemars(example = &"The signed-in user's GitHub profile")]
    pub description: String,
    /// JSON Schema of the arguments; an object schema with no properties when absent.
    #[schemars(example = serde_json::json!({"type": "object", "properties": {"repo": {"type": "string"}}, "required": ["repo"]}))]
    pub input_schema: Option<serde_json::Value>,
    /// What must be true before the tool runs: `provider`, `provider:scope1 scope2`, `form:id`.
    #[serde(default)]
    #[schemars(example = ["github:repo", "form:openai"])]
    pub requires: Vec<String>,
    /// What the tool does when a requirement is missing.
    #[serde(default)]
    pub elicit: ElicitMode,
    /// With `elicit = "request"`: how long to wait for the user (default `elicitation.wait`).
    #[serde(
        default,
        deserialize_with = "optional_duration",
        serialize_with = "optional_duration_text"
    )]
    #[schemars(with = "Option<DurationText>")]
    #[schemars(example = &"5m")]
    pub elicit_timeout: Option<Duration>,
    /// Who may see and call the tool, by claims: `{ groups = ["eng"], email = ["*@acme.com"] }`,
    /// `*` matching any run of characters; any listed claim matching grants. Everyone when absent.
    #[schemars(example = serde_json::json!({"groups": ["eng"], "email": ["*@acme.com"]}))]
    pub allow: Option<super::AllowConfig>,
    /// The HTTP request the tool makes.
    pub http: HttpToolConfig,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ElicitMode {
    /// Fail with -32042 (or a result naming the URL); the client retries when the user is done.
    #[default]
    Error,
    /// Send `elicitation/create` on the call's own stream and wait for the user within the call.
    Request,
}

/// The request an HTTP tool makes.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HttpToolConfig {
    /// The HTTP method.
    #[serde(default = "default_method")]
    pub method: String,
    /// URL template; `{{args.NAME}}` placeholders are percent-encoded into the URL.
    #[schemars(example = &"https://api.github.com/repos/{{args.owner}}/{{args.repo}}")]
    pub url: String,
    /// Request headers, templates over `{{args.NAME}}` and `{{form.ID.FIELD}}` (no line breaks).
    #[serde(default)]
    #[schemars(example = serde_json::json!({"X-Api-Key": "{{form.tracker.key}}"}))]
    pub headers: BTreeMap<String, String>,
    /// A string template (sent as is) or a table (sent as JSON, placeholders become JSON values).
    #[schemars(example = serde_json::json!({"title": "{{args.title}}"}))]
    pub body: Option<serde_json::Value>,
    /// How long the request may take; then the call is an `isError` result.
    #[serde(
        default = "default_tool_timeout",
        deserialize_with = "duration",
        serialize_with = "duration_text"
    )]
    #[schemars(with = "DurationText")]
    pub timeout: Duration,
    /// The largest answer read; a larger one is an `isError` result.
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
