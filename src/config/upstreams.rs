//! `[[upstreams]]`: upstream MCP servers whose tools gatehouse lists and gates, reached over
//! Streamable HTTP (`url`) or as a local process per user speaking stdio (`command`).

use std::collections::BTreeMap;
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::ElicitMode;
use super::duration::{DurationText, duration, duration_text, optional_duration, optional_duration_text};
use crate::secret::Secret;

/// An upstream MCP server: over Streamable HTTP (`url`) or a local process per user (`command`).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UpstreamConfig {
    /// Names the upstream in logs and pages, and its tools `<id>_<tool>` unless `prefix` says otherwise.
    #[schemars(example = &"github")]
    pub id: String,
    /// Streamable HTTP endpoint; exactly one of `url` and `command`.
    #[schemars(example = &"https://api.githubcopilot.com/mcp/")]
    pub url: Option<String>,
    /// A program and its arguments, run without a shell: one process per user.
    #[schemars(example = ["npx", "-y", "your-notes-mcp-server"])]
    pub command: Option<Vec<String>>,
    /// As for `[[tools]]`: `provider`, `provider:scopes`, `form:ID`.
    #[serde(default)]
    #[schemars(example = ["github:repo read:org"])]
    pub requires: Vec<String>,
    /// How gatehouse authenticates to the upstream when no provider's token goes as the bearer.
    #[schemars(example = &"mcp")]
    pub auth: Option<UpstreamAuth>,
    /// `auth = "token_exchange"`: the `audience` (and `resource`) asked for; the upstream's `url`
    /// when absent.
    #[schemars(example = &"docs-mcp")]
    pub audience: Option<String>,
    /// `auth = "token_exchange"`: the scopes asked for; none (the provider's default) when empty.
    /// `auth = "mcp"`: the scopes every sign-in asks for; when empty, those the server's
    /// challenge or metadata names.
    #[serde(default)]
    #[schemars(example = ["read", "write"])]
    pub scopes: Vec<String>,
    /// `auth = "mcp"`: a client registered with the server's authorization server beforehand,
    /// for servers that offer neither Client ID Metadata Documents nor dynamic registration.
    #[schemars(example = &"env:LINEAR_CLIENT_ID")]
    pub client_id: Option<String>,
    /// `auth = "mcp"`: the pre-registered client's secret (`env:NAME` reads it from the
    /// environment); none for a public client.
    #[schemars(example = &"env:LINEAR_CLIENT_SECRET")]
    pub client_secret: Option<Secret<String>>,
    /// Extra HTTP headers (`url` upstreams), templates over `{{form.ID.FIELD}}`.
    #[serde(default)]
    #[schemars(example = serde_json::json!({"X-Api-Key": "{{form.notes_key.token}}"}))]
    pub headers: BTreeMap<String, String>,
    /// The process's environment (`command` upstreams), templates over `{{form.ID.FIELD}}`.
    #[serde(default)]
    #[schemars(example = serde_json::json!({"NOTES_TOKEN": "{{form.notes_key.token}}"}))]
    pub env: BTreeMap<String, String>,
    /// Who may see and call the upstream's tools, by claims (`{ groups = ["eng"] }`); everyone
    /// when absent.
    #[schemars(example = serde_json::json!({"groups": ["eng"]}))]
    pub allow: Option<super::AllowConfig>,
    /// Only these tools are listed and callable; their names stand in before any listing succeeded.
    #[schemars(example = ["get_me", "list_issues"])]
    pub tools: Option<Vec<String>>,
    /// Put before each tool's name; `<id>_` when absent, nothing when "".
    #[schemars(example = &"gh_")]
    pub prefix: Option<String>,
    /// The origins (`https://host[:port]`) the upstream may send users to in its URL elicitations;
    /// any http or https origin when absent.
    #[schemars(example = ["https://github.com"])]
    pub elicitation_origins: Option<Vec<String>>,
    /// How long one call to the upstream may take.
    #[serde(
        default = "default_timeout",
        deserialize_with = "duration",
        serialize_with = "duration_text"
    )]
    #[schemars(with = "DurationText")]
    pub timeout: Duration,
    /// `command` upstreams: processes running at once, across users; the oldest idle one stops
    /// for a new one, and when none is idle the call is refused.
    #[serde(default = "default_max_processes")]
    pub max_processes: usize,
    /// `command` upstreams: a process that served no call for this long stops.
    #[serde(
        default = "default_idle_timeout",
        deserialize_with = "duration",
        serialize_with = "duration_text"
    )]
    #[schemars(with = "DurationText")]
    pub idle_timeout: Duration,
    /// Per-tool extra requirements and in-call confirmation.
    #[serde(default)]
    pub overrides: Vec<UpstreamOverride>,
}

/// `auth`: how gatehouse gets the credentials it presents to the upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum UpstreamAuth {
    /// OAuth 2.0 Token Exchange (RFC 8693) at `[identity]`'s provider, `identity.mode = "oauth"`
    /// only: the caller's own access token is exchanged for one meant for the upstream.
    TokenExchange,
    /// The MCP authorization specification: gatehouse discovers the server's authorization
    /// server, registers itself there, and signs each user in; the connection is named after the
    /// upstream's `id`.
    Mcp,
}

/// One upstream tool's own settings: more requirements, and asking within the call.
// `requires`, `elicit` and `elicit_timeout` are written again here, as in `ToolConfig`, rather
// than shared through `#[serde(flatten)]`: serde does not support `flatten` with
// `deny_unknown_fields` (which turns an operator's misspelt key into an error), and a flattened
// field's error would lose its path (`upstreams[0].overrides[1].elicit_timeout`).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UpstreamOverride {
    /// The upstream's own name of the tool (without prefix).
    #[schemars(example = &"merge_pull_request")]
    pub tool: String,
    /// Requirements on top of the upstream's.
    #[serde(default)]
    #[schemars(example = ["form:confirm_merge"])]
    pub requires: Vec<String>,
    /// What the call does when a requirement is missing, as for `[[tools]]`.
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
}

fn default_timeout() -> Duration {
    Duration::from_secs(60)
}

fn default_max_processes() -> usize {
    50
}

fn default_idle_timeout() -> Duration {
    Duration::from_secs(600)
}
