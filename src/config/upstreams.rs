//! `[[upstreams]]`: upstream MCP servers whose tools gatehouse lists and gates, reached over
//! Streamable HTTP (`url`) or as a local process per user speaking stdio (`command`).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use super::ElicitMode;
use super::duration::{duration, optional_duration};
use crate::secret::Secret;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamConfig {
    /// Names the upstream in logs and pages, and its tools `<id>_<tool>` unless `prefix` says otherwise.
    pub id: String,
    /// Streamable HTTP endpoint; exactly one of `url` and `command`.
    pub url: Option<String>,
    /// A program and its arguments, run without a shell: one process per user.
    pub command: Option<Vec<String>>,
    /// As for `[[tools]]`: `provider`, `provider:scopes`, `form:ID`.
    #[serde(default)]
    pub requires: Vec<String>,
    /// How gatehouse authenticates to the upstream when no provider's token goes as the bearer.
    pub auth: Option<UpstreamAuth>,
    /// `auth = "token_exchange"`: the `audience` (and `resource`) asked for; the upstream's `url`
    /// when absent.
    pub audience: Option<String>,
    /// `auth = "token_exchange"`: the scopes asked for; none (the provider's default) when empty.
    /// `auth = "mcp"`: the scopes every sign-in asks for; when empty, those the server's
    /// challenge or metadata names.
    #[serde(default)]
    pub scopes: Vec<String>,
    /// `auth = "mcp"`: a client registered with the server's authorization server beforehand,
    /// for servers that offer neither Client ID Metadata Documents nor dynamic registration.
    pub client_id: Option<String>,
    /// `auth = "mcp"`: the pre-registered client's secret (`env:NAME` reads it from the
    /// environment); none for a public client.
    pub client_secret: Option<Secret<String>>,
    /// Extra HTTP headers (`url` upstreams), templates over `{{form.ID.FIELD}}`.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// The process's environment (`command` upstreams), templates over `{{form.ID.FIELD}}`.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Who may see and call the upstream's tools, by claims (see `AllowConfig`); everyone when absent.
    pub allow: Option<super::AllowConfig>,
    /// Only these tools are listed and callable; their names stand in before any listing succeeded.
    pub tools: Option<Vec<String>>,
    /// Put before each tool's name; `<id>_` when absent, nothing when "".
    pub prefix: Option<String>,
    /// The origins (`https://host[:port]`) the upstream may send users to in its URL elicitations;
    /// any http or https origin when absent.
    pub elicitation_origins: Option<Vec<String>>,
    /// How long one call to the upstream may take.
    #[serde(default = "default_timeout", deserialize_with = "duration")]
    pub timeout: Duration,
    /// `command` upstreams: processes running at once, across users; the oldest idle one stops
    /// for a new one, and when none is idle the call is refused.
    #[serde(default = "default_max_processes")]
    pub max_processes: usize,
    /// `command` upstreams: a process that served no call for this long stops.
    #[serde(default = "default_idle_timeout", deserialize_with = "duration")]
    pub idle_timeout: Duration,
    /// Per-tool extra requirements and in-call confirmation.
    #[serde(default)]
    pub overrides: Vec<UpstreamOverride>,
}

/// `auth`: how gatehouse gets the credentials it presents to the upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
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

/// `requires`, `elicit` and `elicit_timeout` are written again here, as in `ToolConfig`, rather
/// than shared through `#[serde(flatten)]`: serde does not support `flatten` with
/// `deny_unknown_fields` (which turns an operator's misspelt key into an error), and a flattened
/// field's error would lose its path (`upstreams[0].overrides[1].elicit_timeout`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamOverride {
    /// The upstream's own name of the tool (without prefix).
    pub tool: String,
    /// Requirements on top of the upstream's.
    #[serde(default)]
    pub requires: Vec<String>,
    #[serde(default)]
    pub elicit: ElicitMode,
    #[serde(default, deserialize_with = "optional_duration")]
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
