//! Typed configuration: one TOML file, every key overridable from the environment, validated once
//! at start. Errors name the offending key so an operator can fix the file without reading code.
//!
//! This module owns loading (file, environment layer, typing, validation) and the error type; the
//! submodules own one part each: `sections` the server's own sections, `identity` who the caller is, `providers`, `forms`,
//! `tools` and `upstreams` the configured lists, `env` the environment layer, `duration` durations in the file,
//! `validate` the checks across keys, and `schema` and `reference` the JSON Schema and the
//! reference page derived from the types. It imports only leaf modules (`secret`), so every other
//! module may build on it.

mod approvals;
mod duration;
mod env;
mod forms;
mod identity;
mod providers;
pub mod reference;
pub mod schema;
mod sections;
mod tools;
mod upstreams;
mod validate;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;
use url::Url;

pub use approvals::{ApprovalConfig, NotifyConfig};
pub use duration::parse_duration;
pub use env::ENV_PREFIX;
pub use forms::{FieldConfig, FormConfig, FormScope, OptionConfig};
pub use identity::{AllowConfig, IdentityConfig, IdentityMode, is_scope_token};
pub use providers::{ClientAuth, ProviderConfig, TokenRefusedWhen};
pub use sections::{
    AdminConfig, DatabaseConfig, ElicitationConfig, LimitsConfig, LogConfig, LogFormat, McpConfig, OutboundConfig,
    RetentionConfig, SecretsConfig, ServerConfig, TelemetryConfig, WithoutUrlMode,
};
pub use tools::{ElicitMode, HttpToolConfig, ToolConfig};
pub use upstreams::{UpstreamAuth, UpstreamConfig, UpstreamOverride};

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("config file {path} is not valid TOML: {message}")]
    Syntax { path: PathBuf, message: String },
    #[error("config key `{key}`: {message}")]
    Key { key: String, message: String },
}

impl ConfigError {
    pub fn key(key: impl Into<String>, message: impl Into<String>) -> Self {
        Self::Key {
            key: key.into(),
            message: message.into(),
        }
    }
}

/// gatehouse's configuration file (TOML). Every key is optional unless a list entry needs it;
/// `GATEHOUSE_<SECTION>__<KEY>` environment variables override the file, and any string `env:NAME`
/// is read from the environment variable NAME.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// The HTTP listener and the public URL.
    pub server: ServerConfig,
    /// The database: SQLite for one process, PostgreSQL for replicas.
    pub database: DatabaseConfig,
    /// Who the caller is: `local`, `header` or `oauth`.
    pub identity: IdentityConfig,
    /// The MCP endpoint's sessions and lists.
    pub mcp: McpConfig,
    /// Logs.
    pub log: LogConfig,
    /// The key ring for secrets at rest.
    pub secrets: SecretsConfig,
    /// How elicitations behave.
    pub elicitation: ElicitationConfig,
    /// What one user or client address may make gatehouse do.
    pub limits: LimitsConfig,
    /// How long what is over is kept.
    pub retention: RetentionConfig,
    /// Traces over OTLP/gRPC.
    pub telemetry: TelemetryConfig,
    /// Requests to URLs remote servers name.
    pub outbound: OutboundConfig,
    /// OAuth 2 providers users sign in to.
    pub providers: Vec<ProviderConfig>,
    /// Hosted web forms.
    pub forms: Vec<FormConfig>,
    /// HTTP tools.
    pub tools: Vec<ToolConfig>,
    /// Upstream MCP servers whose tools gatehouse lists and gates.
    pub upstreams: Vec<UpstreamConfig>,
    /// Calls that wait until someone else approves them.
    pub approvals: Vec<ApprovalConfig>,
    /// Who may open the operator pages (`/admin`).
    pub admin: AdminConfig,
    /// Whether the demo set was added (`crate::demo`), and then what the landing page suggests
    /// trying first: never read from a file, set at start.
    #[serde(skip)]
    pub demo: Option<TryFirst>,
}

/// The tool of the demo set a newcomer should try first, and why (shown on the landing page).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TryFirst {
    /// One of the demo set's tools.
    pub tool: String,
    /// Why that one: a sentence, after "Try TOOL first:".
    pub why: String,
}

/// `limits.sessions_per_principal` when neither it nor its old name is set.
const DEFAULT_SESSIONS_PER_PRINCIPAL: usize = 100;

/// `retention.finished_elicitations` when neither it nor its old name is set: 7 days.
const DEFAULT_FINISHED_ELICITATIONS: Duration = Duration::from_secs(7 * 24 * 3600);

/// Where the configuration comes from: an optional file plus the process environment.
pub struct ConfigSource<'a> {
    pub file: Option<&'a Path>,
    pub env: &'a BTreeMap<String, String>,
}

impl Config {
    /// Reads, overlays, resolves `env:` references, deserializes and validates.
    pub fn load(source: ConfigSource<'_>) -> Result<Self, ConfigError> {
        let mut tree = match source.file {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                    path: path.to_owned(),
                    source,
                })?;
                text.parse::<toml::Table>().map_err(|e| ConfigError::Syntax {
                    path: path.to_owned(),
                    message: e.to_string(),
                })?
            }
            None => toml::Table::new(),
        };
        env::apply_env_overrides(&mut tree, source.env)?;
        let mut value = toml::Value::Table(tree);
        env::resolve_env_references(&mut value, "", source.env)?;
        let mut config: Config = serde_path_to_error::deserialize(value).map_err(|e| {
            let key = e.path().to_string();
            ConfigError::Key {
                key,
                message: e.into_inner().to_string(),
            }
        })?;
        identity::normalise_rules(&mut config)?;
        config.validate()?;
        Ok(config)
    }

    /// Live sessions one principal may hold: `limits.sessions_per_principal`, or its old name
    /// `mcp.max_sessions_per_principal` (validation refuses the two set apart), else 100.
    pub fn sessions_per_principal(&self) -> usize {
        self.limits
            .sessions_per_principal
            .or(self.mcp.max_sessions_per_principal)
            .unwrap_or(DEFAULT_SESSIONS_PER_PRINCIPAL)
    }

    /// How long ended elicitations are kept: `retention.finished_elicitations`, or its old name
    /// `elicitation.retention` (validation refuses the two set apart), else 7 days.
    pub fn finished_elicitations_retention(&self) -> Duration {
        self.retention
            .finished_elicitations
            .or(self.elicitation.retention)
            .unwrap_or(DEFAULT_FINISHED_ELICITATIONS)
    }

    /// The URL browsers and clients use: `server.public_url`, or on loopback the bind address.
    /// `AppState` builds its `PublicUrl` from it once at start.
    pub fn public_url(&self) -> Url {
        match &self.server.public_url {
            Some(url) => url.clone(),
            None => Url::parse(&format!("http://{}", self.server.bind)).expect("a socket address is a valid URL host"),
        }
    }
}

#[cfg(test)]
mod tests;
