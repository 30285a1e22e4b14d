//! The server and its sections: `[server]`, `[database]`, `[mcp]`, `[log]`,
//! `[secrets]`, `[elicitation]`, `[limits]`, `[retention]` and `[telemetry]`, each with the defaults an empty
//! file gets.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use ipnet::IpNet;
use serde::{Deserialize, Deserializer};
use url::Url;

use super::duration::{duration, optional_duration};
use crate::secret::Secret;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SecretsConfig {
    /// Base64 32-byte keys, newest first: the first encrypts, every one decrypts (rotation).
    pub keys: Vec<Secret<String>>,
    /// Used on SQLite when `keys` is empty: created (mode 0600) with a random key if missing.
    pub dev_key_file: PathBuf,
}

impl Default for SecretsConfig {
    fn default() -> Self {
        Self {
            keys: Vec::new(),
            dev_key_file: PathBuf::from("gatehouse.key"),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ElicitationConfig {
    /// How long a user has to finish in the browser before the elicitation expires.
    #[serde(deserialize_with = "duration")]
    pub ttl: Duration,
    /// How long a tool with `elicit = "request"` waits for the user before giving up (at most `ttl`).
    #[serde(deserialize_with = "duration")]
    pub wait: Duration,
    /// While such a tool waits, a progress notification goes out this often (when the client sent
    /// a progressToken), which also keeps clients from timing the request out.
    #[serde(deserialize_with = "duration")]
    pub progress_interval: Duration,
    /// Pending elicitations one principal may have at once; a call that would ask for one more
    /// is refused (a tool error) and nothing is stored.
    pub max_pending_per_principal: usize,
    /// The old name of `retention.finished_elicitations`, still read (see
    /// [`super::Config::finished_elicitations_retention`]).
    #[serde(deserialize_with = "optional_duration")]
    pub retention: Option<Duration>,
    /// How long a 2026-07-28 retry waits for the elicitations it was given before answering
    /// `input_required` again: below common client timeouts, and long enough that a user who takes
    /// minutes in the browser does not use up the client's rounds of retries. Zero: no waiting.
    #[serde(deserialize_with = "duration")]
    pub hold: Duration,
    /// What a 2026-07-28 client that cannot open URLs (no `elicitation.url` in its capabilities)
    /// gets for a call that needs the user.
    pub without_url_mode: WithoutUrlMode,
}

/// `elicitation.without_url_mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WithoutUrlMode {
    /// An error result (`isError`) naming the links and asking to call again once the user
    /// finished there, as the 2025-11-25 era answers such clients.
    #[default]
    Link,
    /// -32021 (missing required client capability) naming `elicitation.url`.
    Error,
}

impl Default for ElicitationConfig {
    fn default() -> Self {
        Self {
            ttl: Duration::from_secs(600),
            wait: Duration::from_secs(300),
            progress_interval: Duration::from_secs(10),
            max_pending_per_principal: 32,
            retention: None,
            hold: Duration::from_secs(25),
            without_url_mode: WithoutUrlMode::default(),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    pub bind: SocketAddr,
    /// What browsers and clients see, with an optional path prefix (`crate::public_url::parse`).
    /// Defaults to `http://{bind}` on loopback; required elsewhere.
    #[serde(deserialize_with = "public_url_setting")]
    pub public_url: Option<Url>,
    /// Origins besides the public one that may call `/mcp` from a browser.
    pub allowed_origins: Vec<String>,
    /// CIDRs of reverse proxies whose identity and forwarding headers are believed.
    pub trusted_proxies: Vec<IpNet>,
    /// Largest accepted JSON-RPC body.
    pub max_request_bytes: usize,
    /// A request body (`/mcp` and page posts) must arrive whole within this time, or 408.
    #[serde(deserialize_with = "duration")]
    pub request_body_timeout: Duration,
    /// Interval of SSE keep-alive comments, so proxies do not close idle streams.
    #[serde(deserialize_with = "duration")]
    pub sse_keep_alive: Duration,
    /// How long a client waits before reconnecting after the server closes a stream.
    #[serde(deserialize_with = "duration")]
    pub sse_retry: Duration,
    /// A directory of page templates (same names as the built-in ones) that replace them.
    pub template_dir: Option<PathBuf>,
    /// Where Prometheus scrapes `/metrics`: a listener of its own, never the public one. Unset
    /// (the default): no metrics are recorded.
    pub metrics_bind: Option<SocketAddr>,
}

/// `server.public_url`, checked and normalised by [`crate::public_url::parse`].
fn public_url_setting<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Url>, D::Error> {
    let text = String::deserialize(deserializer)?;
    crate::public_url::parse(&text)
        .map(Some)
        .map_err(serde::de::Error::custom)
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            bind: SocketAddr::from(([127, 0, 0, 1], 8080)),
            public_url: None,
            allowed_origins: Vec::new(),
            trusted_proxies: Vec::new(),
            max_request_bytes: 1024 * 1024,
            request_body_timeout: Duration::from_secs(30),
            sse_keep_alive: Duration::from_secs(15),
            sse_retry: Duration::from_secs(1),
            template_dir: None,
            metrics_bind: None,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DatabaseConfig {
    /// `sqlite://path` (embedded default) or `postgres://...`; may carry a password, so redacted.
    pub url: Secret<String>,
    pub max_connections: u32,
    /// Apply pending migrations when `serve` starts (`gatehouse migrate` always does).
    pub migrate_on_start: bool,
}

impl Default for DatabaseConfig {
    fn default() -> Self {
        Self {
            url: Secret::new("sqlite://gatehouse.db".to_owned()),
            max_connections: 16,
            migrate_on_start: true,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct McpConfig {
    /// Tools per `tools/list` page.
    pub page_size: usize,
    /// Sessions unused for this long are ended and their events dropped.
    #[serde(deserialize_with = "duration")]
    pub session_idle_timeout: Duration,
    /// The old name of `limits.sessions_per_principal`, still read (see [`Config::sessions_per_principal`]).
    pub max_sessions_per_principal: Option<usize>,
    /// Serve the official conformance suite's fixture tools, resources and prompts. Only a build
    /// with the `conformance` feature (`gatehouse-conformance`) has them; elsewhere `true` is refused.
    pub conformance_fixtures: bool,
}

impl Default for McpConfig {
    fn default() -> Self {
        Self {
            page_size: 50,
            session_idle_timeout: Duration::from_secs(24 * 3600),
            max_sessions_per_principal: None,
            conformance_fixtures: false,
        }
    }
}

/// What one client may make the server do or hold; each replica counts the rates in its own memory.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsConfig {
    /// Elicitations one principal may have created per minute (reused pending ones do not count);
    /// beyond it a gated call gets a tool error saying when to retry. 0: no limit.
    pub elicitations_per_minute: u32,
    /// Live sessions one principal may hold; an `initialize` beyond it ends that principal's
    /// least recently used session. Unset: `mcp.max_sessions_per_principal`, else 100.
    pub sessions_per_principal: Option<usize>,
    /// 2026-07-28 retries one principal may have held at once on a replica (beside the replica's
    /// 10,000 in all); one more is answered at once, so one user cannot take every place.
    pub held_retries_per_principal: usize,
    /// Requests per minute one client address (after trusted proxies) may make to the pages and
    /// the OAuth callback; beyond it 429 with `Retry-After`. 0: no limit.
    pub page_requests_per_minute: u32,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        Self {
            elicitations_per_minute: 30,
            sessions_per_principal: None,
            held_retries_per_principal: 16,
            page_requests_per_minute: 120,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    pub format: LogFormat,
}

/// How long what is over is kept; the sweep that deletes it runs on one replica at a time.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetentionConfig {
    /// Events written to a stream are deleted this long after they were appended (events of
    /// ended sessions go with their session, at once).
    #[serde(deserialize_with = "duration")]
    pub events: Duration,
    /// Finished and expired elicitations, their flows and answers are deleted this long after they
    /// ended. Unset: `elicitation.retention`, else 7 days.
    #[serde(deserialize_with = "optional_duration")]
    pub finished_elicitations: Option<Duration>,
    /// Audit rows are deleted this long after they were recorded.
    #[serde(deserialize_with = "duration")]
    pub audit: Duration,
}

impl Default for RetentionConfig {
    fn default() -> Self {
        Self {
            events: Duration::from_secs(7 * 24 * 3600),
            finished_elicitations: None,
            audit: Duration::from_secs(365 * 24 * 3600),
        }
    }
}

/// Traces: where gatehouse's spans go over OTLP/gRPC. Unset (the default): no exporter, and no
/// `traceparent` on outgoing requests.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TelemetryConfig {
    /// The collector's OTLP/gRPC endpoint, e.g. `http://127.0.0.1:4317`.
    pub otlp_endpoint: Option<Url>,
    /// The `service.name` resource attribute of every exported span.
    pub service_name: String,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        Self {
            otlp_endpoint: None,
            service_name: "gatehouse".to_owned(),
        }
    }
}

/// `[admin]`: who may open the operator pages under `/admin`. Without `allow`, nobody may: the
/// pages are never open by default, in any identity mode.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AdminConfig {
    /// The `allow` rule shape of tools (`{ groups = [...], email = [...] }`), plus `principal`:
    /// the principals themselves.
    pub allow: Option<super::AllowConfig>,
}
