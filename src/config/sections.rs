//! The server and its sections: `[server]`, `[database]`, `[mcp]`, `[log]`,
//! `[secrets]`, `[elicitation]`, `[limits]`, `[retention]` and `[telemetry]`, each with the defaults an empty
//! file gets.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use ipnet::IpNet;
use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize};
use url::Url;

use super::duration::{DurationText, duration, duration_text, optional_duration, optional_duration_text};
use crate::secret::Secret;

/// The key ring that encrypts tokens and form secrets at rest.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct SecretsConfig {
    /// Base64 32-byte keys (`gatehouse generate-key`), newest first: the first encrypts, every
    /// one decrypts (rotation). Required on PostgreSQL; empty by default.
    #[schemars(example = ["env:GATEHOUSE_KEY", "env:GATEHOUSE_OLD_KEY"])]
    pub keys: Vec<Secret<String>>,
    /// Used on SQLite when `keys` is empty: created (mode 0600) with a random key if missing;
    /// relative to the working directory.
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

/// How elicitations (the links users open) behave.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ElicitationConfig {
    /// How long a user has to finish in the browser before the elicitation expires.
    #[serde(deserialize_with = "duration", serialize_with = "duration_text")]
    #[schemars(with = "DurationText")]
    pub ttl: Duration,
    /// How long a tool with `elicit = "request"` waits for the user before giving up (at most `ttl`).
    #[serde(deserialize_with = "duration", serialize_with = "duration_text")]
    #[schemars(with = "DurationText")]
    pub wait: Duration,
    /// While such a tool waits, a progress notification goes out this often (when the client sent
    /// a progressToken), which also keeps clients from timing the request out.
    #[serde(deserialize_with = "duration", serialize_with = "duration_text")]
    #[schemars(with = "DurationText")]
    pub progress_interval: Duration,
    /// Pending elicitations one principal may have at once (at least 1); a call that would ask for
    /// one more is refused (a tool error) and nothing is stored.
    pub max_pending_per_principal: usize,
    /// The old name of `retention.finished_elicitations`, still read; set to another value than
    /// it, refused naming both.
    #[serde(deserialize_with = "optional_duration", serialize_with = "optional_duration_text")]
    #[schemars(with = "Option<DurationText>")]
    #[schemars(example = &"7d")]
    pub retention: Option<Duration>,
    /// How long a 2026-07-28 retry waits for the elicitations it was given before answering
    /// `input_required` again: below common client timeouts, and long enough that a user who takes
    /// minutes in the browser does not use up the client's rounds of retries. Zero: no waiting;
    /// at most 5m and `ttl`.
    #[serde(deserialize_with = "duration", serialize_with = "duration_text")]
    #[schemars(with = "DurationText")]
    pub hold: Duration,
    /// What a 2026-07-28 client that cannot open URLs (no `elicitation.url` in its capabilities)
    /// gets for a call that needs the user.
    pub without_url_mode: WithoutUrlMode,
}

/// `elicitation.without_url_mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize, JsonSchema)]
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

/// The HTTP listener and what browsers and clients see of it.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// The address and port to listen on (`127.0.0.1:0` takes a free port).
    pub bind: SocketAddr,
    /// The URL browsers and clients use, with an optional path prefix
    /// (`https://host/gatehouse`). Defaults to `http://{bind}` on loopback; required elsewhere.
    #[serde(deserialize_with = "public_url_setting")]
    #[schemars(example = &"https://gatehouse.example.com")]
    pub public_url: Option<Url>,
    /// Origins besides the public one that may call `/mcp` from a browser.
    #[schemars(example = ["http://localhost:6274"])]
    pub allowed_origins: Vec<String>,
    /// CIDRs of reverse proxies whose identity and forwarding headers are believed.
    #[schemars(with = "Vec<String>")]
    #[schemars(example = ["10.0.0.0/8", "192.168.1.5/32"])]
    pub trusted_proxies: Vec<IpNet>,
    /// Largest accepted JSON-RPC body, in bytes (at least 1024).
    pub max_request_bytes: usize,
    /// A request body (`/mcp` and page posts) must arrive whole within this time, or 408 (longer
    /// than zero).
    #[serde(deserialize_with = "duration", serialize_with = "duration_text")]
    #[schemars(with = "DurationText")]
    pub request_body_timeout: Duration,
    /// Interval of SSE keep-alive comments, so proxies do not close idle streams (longer than zero).
    #[serde(deserialize_with = "duration", serialize_with = "duration_text")]
    #[schemars(with = "DurationText")]
    pub sse_keep_alive: Duration,
    /// How long a client waits before reconnecting after the server closes a stream.
    #[serde(deserialize_with = "duration", serialize_with = "duration_text")]
    #[schemars(with = "DurationText")]
    pub sse_retry: Duration,
    /// A directory of page templates (same names as the built-in ones) that replace them.
    #[schemars(example = &"/etc/gatehouse/templates")]
    pub template_dir: Option<PathBuf>,
    /// Where Prometheus scrapes `/metrics`: a listener of its own, never the public one (so not
    /// `bind`). Unset (the default): no metrics are recorded.
    #[schemars(example = &"127.0.0.1:9464")]
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

/// Where sessions, connections and everything else are stored.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct DatabaseConfig {
    /// `sqlite://path` (one process) or `postgres://...` (replicas); may carry a password, so
    /// never logged.
    #[serde(serialize_with = "crate::secret::Secret::serialize_default")]
    #[schemars(example = &"postgres://gatehouse@db.example.com/gatehouse")]
    pub url: Secret<String>,
    /// Connections each replica opens at start and keeps (at least 1).
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

/// The MCP endpoint's sessions and lists.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct McpConfig {
    /// Tools per `tools/list` page.
    pub page_size: usize,
    /// Sessions unused for this long are ended and their events dropped.
    #[serde(deserialize_with = "duration", serialize_with = "duration_text")]
    #[schemars(with = "DurationText")]
    pub session_idle_timeout: Duration,
    /// The old name of `limits.sessions_per_principal`, still read; set to another value than
    /// it, refused naming both.
    #[schemars(example = 100)]
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
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsConfig {
    /// Elicitations one principal may have created per minute (reused pending ones do not count);
    /// beyond it a gated call gets a tool error saying when to retry. 0: no limit.
    pub elicitations_per_minute: u32,
    /// Live sessions one principal may hold; an `initialize` beyond it ends that principal's
    /// least recently used session. Unset: `mcp.max_sessions_per_principal`, else 100.
    #[schemars(example = 100)]
    pub sessions_per_principal: Option<usize>,
    /// 2026-07-28 retries one principal may have held at once on a replica (beside the replica's
    /// 10,000 in all): those waiting for the user, and those waiting for a call parked on another
    /// replica. One more is answered at once (a retry for a call parked elsewhere is refused with
    /// an error naming this key), so one user cannot take every place.
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

/// `log.format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// Logs (to stderr; levels from `RUST_LOG`, default `info`).
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    /// How each log line is written.
    pub format: LogFormat,
}

/// How long what is over is kept (each period at least 1h and at most 100y); the sweep that
/// deletes it runs on one replica at a time.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RetentionConfig {
    /// Events written to a stream are deleted this long after they were appended (events of
    /// ended sessions go with their session, at once).
    #[serde(deserialize_with = "duration", serialize_with = "duration_text")]
    #[schemars(with = "DurationText")]
    pub events: Duration,
    /// Finished and expired elicitations, their flows and answers are deleted this long after they
    /// ended. Unset: `elicitation.retention`, else 7 days.
    #[serde(deserialize_with = "optional_duration", serialize_with = "optional_duration_text")]
    #[schemars(with = "Option<DurationText>")]
    #[schemars(example = &"7d")]
    pub finished_elicitations: Option<Duration>,
    /// Audit rows are deleted this long after they were recorded.
    #[serde(deserialize_with = "duration", serialize_with = "duration_text")]
    #[schemars(with = "DurationText")]
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

/// Traces: where gatehouse's spans go over OTLP/HTTP. Unset (the default): no exporter, and no
/// `traceparent` on outgoing requests.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct TelemetryConfig {
    /// The collector's OTLP/HTTP endpoint, e.g. `http://127.0.0.1:4318`: spans are posted as
    /// protobuf to `<endpoint>/v1/traces` (an endpoint ending in `/v1/traces` is used as it is).
    #[schemars(example = &"http://127.0.0.1:4318")]
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

/// Requests to URLs that remote servers name (an `auth = "mcp"` upstream's discovery,
/// registration, token, refresh and revocation endpoints): see `crate::outbound::Guarded`.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct OutboundConfig {
    /// The proxy these requests go through, e.g. `http://proxy.internal:3128`. Unset (the
    /// default): none, and `HTTP_PROXY`, `HTTPS_PROXY` and `ALL_PROXY` are ignored for them. Through
    /// a proxy, the proxy resolves names, so gatehouse checks only the addresses URLs spell out.
    #[schemars(example = &"http://proxy.internal:3128")]
    pub proxy: Option<Url>,
}

/// Who may open the operator pages under `/admin`. Without `allow`, nobody may: the pages are
/// never open by default, in any identity mode.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct AdminConfig {
    /// The `allow` rule shape of tools (`{ groups = ["ops"], email = ["*@acme.com"] }`), plus
    /// `principal`: the principals themselves.
    #[schemars(example = serde_json::json!({"groups": ["ops"]}))]
    pub allow: Option<super::AllowConfig>,
}
