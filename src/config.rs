//! Typed configuration: one TOML file, every key overridable from the environment, validated once
//! at start. Errors name the offending key so an operator can fix the file without reading code.

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use ipnet::IpNet;
use serde::{Deserialize, Deserializer};
use url::Url;

use crate::forms::FormConfig;
use crate::secret::Secret;

/// Environment variables that override one key: `GATEHOUSE_<SECTION>__<KEY>`, e.g.
/// `GATEHOUSE_DATABASE__URL`. The double underscore separates levels because keys contain `_`.
pub const ENV_PREFIX: &str = "GATEHOUSE_";
const ENV_LEVEL_SEPARATOR: &str = "__";
/// A string value `env:NAME` is replaced by the variable NAME (secrets stay out of files).
const ENV_REFERENCE: &str = "env:";

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

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub server: ServerConfig,
    pub database: DatabaseConfig,
    pub identity: IdentityConfig,
    pub mcp: McpConfig,
    pub log: LogConfig,
    pub secrets: SecretsConfig,
    pub elicitation: ElicitationConfig,
    pub providers: Vec<ProviderConfig>,
    pub forms: Vec<FormConfig>,
    pub tools: Vec<ToolConfig>,
}

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
}

impl Default for ElicitationConfig {
    fn default() -> Self {
        Self {
            ttl: Duration::from_secs(600),
            wait: Duration::from_secs(300),
            progress_interval: Duration::from_secs(10),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ClientAuth {
    /// HTTP Basic with the client id and secret (RFC 6749 2.3.1).
    Basic,
    /// `client_id` and `client_secret` in the form body.
    Post,
}

/// An OAuth 2 provider. A `preset` fills the URLs of a known provider; every key set here wins.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderConfig {
    pub id: String,
    pub preset: Option<String>,
    /// Shown to users ("GitHub"); defaults to the preset's name or the id.
    pub name: Option<String>,
    pub authorize_url: Option<Url>,
    pub token_url: Option<Url>,
    pub userinfo_url: Option<Url>,
    /// JSON pointer into the userinfo answer for the account label (e.g. "/login").
    pub account_label: Option<String>,
    /// RFC 9207: when set, an `iss` sent to the callback must equal it.
    pub issuer: Option<String>,
    pub revocation_url: Option<Url>,
    pub client_id: String,
    pub client_secret: Secret<String>,
    /// Scopes every sign-in asks for; tools may require more.
    #[serde(default)]
    pub scopes: Vec<String>,
    pub scope_separator: Option<String>,
    pub client_auth: Option<ClientAuth>,
    /// Extra authorize parameters (e.g. `access_type = "offline"`).
    #[serde(default)]
    pub authorize_params: BTreeMap<String, String>,
    /// Microsoft Entra ID: the tenant (default "common").
    pub tenant: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    pub bind: SocketAddr,
    /// What browsers and clients see. Defaults to `http://{bind}` on loopback; required elsewhere.
    pub public_url: Option<Url>,
    /// Origins besides the public one that may call `/mcp` from a browser.
    pub allowed_origins: Vec<String>,
    /// CIDRs of reverse proxies whose identity and forwarding headers are believed.
    pub trusted_proxies: Vec<IpNet>,
    /// Largest accepted JSON-RPC body.
    pub max_request_bytes: usize,
    /// Interval of SSE keep-alive comments, so proxies do not close idle streams.
    #[serde(deserialize_with = "duration")]
    pub sse_keep_alive: Duration,
    /// How long a client waits before reconnecting after the server closes a stream.
    #[serde(deserialize_with = "duration")]
    pub sse_retry: Duration,
    /// A directory of page templates (same names as the built-in ones) that replace them.
    pub template_dir: Option<PathBuf>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            bind: SocketAddr::from(([127, 0, 0, 1], 8080)),
            public_url: None,
            allowed_origins: Vec::new(),
            trusted_proxies: Vec::new(),
            max_request_bytes: 1024 * 1024,
            sse_keep_alive: Duration::from_secs(15),
            sse_retry: Duration::from_secs(1),
            template_dir: None,
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

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IdentityMode {
    /// One user: the person at this machine. Only allowed when bound to loopback.
    Local,
    /// The principal is a header set by a trusted reverse proxy.
    Header,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct IdentityConfig {
    pub mode: IdentityMode,
    /// The header carrying the principal in `header` mode.
    pub header: String,
    /// The principal's name in `local` mode.
    pub local_principal: String,
}

impl Default for IdentityConfig {
    fn default() -> Self {
        Self {
            mode: IdentityMode::Local,
            header: "X-Forwarded-User".to_owned(),
            local_principal: "local".to_owned(),
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
}

impl Default for McpConfig {
    fn default() -> Self {
        Self {
            page_size: 50,
            session_idle_timeout: Duration::from_secs(24 * 3600),
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

fn duration<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
    let text = String::deserialize(deserializer)?;
    humantime::parse_duration(&text)
        .map_err(|e| serde::de::Error::custom(format!("`{text}` is not a duration like \"30s\" or \"10m\": {e}")))
}

fn optional_duration<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Duration>, D::Error> {
    duration(deserializer).map(Some)
}

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
        apply_env_overrides(&mut tree, source.env)?;
        let mut value = toml::Value::Table(tree);
        resolve_env_references(&mut value, "", source.env)?;
        let config: Config = serde_path_to_error::deserialize(value).map_err(|e| {
            let key = e.path().to_string();
            ConfigError::Key {
                key,
                message: e.into_inner().to_string(),
            }
        })?;
        config.validate()?;
        Ok(config)
    }

    /// The origin browsers and clients use, without a trailing slash.
    pub fn public_url(&self) -> Url {
        match &self.server.public_url {
            Some(url) => url.clone(),
            None => Url::parse(&format!("http://{}", self.server.bind)).expect("a socket address is a valid URL host"),
        }
    }

    fn validate(&self) -> Result<(), ConfigError> {
        let loopback = self.server.bind.ip().is_loopback();
        match &self.server.public_url {
            None if !loopback => {
                return Err(ConfigError::key(
                    "server.public_url",
                    "is required when server.bind is not a loopback address (browsers and clients must reach it)",
                ));
            }
            Some(url) => {
                if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
                    return Err(ConfigError::key(
                        "server.public_url",
                        "must be an http or https URL with a host",
                    ));
                }
                if url.path() != "/" || url.query().is_some() {
                    return Err(ConfigError::key(
                        "server.public_url",
                        "must be an origin without a path or query (gatehouse serves from the root)",
                    ));
                }
            }
            None => {}
        }
        for (i, origin) in self.server.allowed_origins.iter().enumerate() {
            let parsed = Url::parse(origin)
                .ok()
                .filter(|u| u.host_str().is_some() && u.path() == "/");
            if parsed.is_none() || origin.ends_with('/') {
                return Err(ConfigError::key(
                    format!("server.allowed_origins[{i}]"),
                    format!("`{origin}` is not an origin like \"https://app.example.com\""),
                ));
            }
        }
        if self.server.max_request_bytes < 1024 {
            return Err(ConfigError::key("server.max_request_bytes", "must be at least 1024"));
        }
        if self.server.sse_keep_alive.is_zero() {
            return Err(ConfigError::key("server.sse_keep_alive", "must be longer than zero"));
        }
        let url = self.database.url.expose();
        if !(url.starts_with("sqlite:") || url.starts_with("postgres://") || url.starts_with("postgresql://")) {
            return Err(ConfigError::key(
                "database.url",
                "must start with sqlite:, postgres:// or postgresql://",
            ));
        }
        if self.database.max_connections == 0 {
            return Err(ConfigError::key("database.max_connections", "must be at least 1"));
        }
        match self.identity.mode {
            IdentityMode::Local if !loopback => {
                return Err(ConfigError::key(
                    "identity.mode",
                    "`local` trusts whoever can reach the port, so it needs server.bind on a loopback address; \
                     use `header` behind a reverse proxy",
                ));
            }
            IdentityMode::Local if self.identity.local_principal.trim().is_empty() => {
                return Err(ConfigError::key("identity.local_principal", "must not be empty"));
            }
            IdentityMode::Header => {
                if axum::http::HeaderName::try_from(self.identity.header.as_str()).is_err() {
                    return Err(ConfigError::key("identity.header", "is not a valid header name"));
                }
                if self.server.trusted_proxies.is_empty() {
                    return Err(ConfigError::key(
                        "server.trusted_proxies",
                        "must list the reverse proxy's addresses in `header` identity mode, \
                         otherwise anyone could claim to be anyone",
                    ));
                }
            }
            IdentityMode::Local => {}
        }
        if self.mcp.page_size == 0 {
            return Err(ConfigError::key("mcp.page_size", "must be at least 1"));
        }
        if self.elicitation.ttl < Duration::from_secs(30) {
            return Err(ConfigError::key(
                "elicitation.ttl",
                "must be at least 30s: people need time to sign in",
            ));
        }
        if self.elicitation.wait.is_zero() || self.elicitation.wait > self.elicitation.ttl {
            return Err(ConfigError::key(
                "elicitation.wait",
                "must be longer than zero and at most elicitation.ttl (an elicitation cannot outlive its page)",
            ));
        }
        if self.elicitation.progress_interval < Duration::from_millis(100) {
            return Err(ConfigError::key(
                "elicitation.progress_interval",
                "must be at least 100ms",
            ));
        }
        for (i, tool) in self.tools.iter().enumerate() {
            if let Some(timeout) = tool.elicit_timeout
                && (timeout.is_zero() || timeout > self.elicitation.ttl)
            {
                return Err(ConfigError::key(
                    format!("tools[{i}].elicit_timeout"),
                    "must be longer than zero and at most elicitation.ttl",
                ));
            }
        }
        if let Some(dir) = &self.server.template_dir
            && !dir.is_dir()
        {
            return Err(ConfigError::key(
                "server.template_dir",
                format!("{} is not a directory", dir.display()),
            ));
        }
        if self.secrets.keys.is_empty() && !self.database.url.expose().starts_with("sqlite:") {
            return Err(ConfigError::key(
                "secrets.keys",
                "must list at least one key on PostgreSQL (replicas must share it); \
                 make one with `gatehouse generate-key`",
            ));
        }
        Ok(())
    }
}

/// Overlays `GATEHOUSE_<SECTION>__<KEY>=value` onto the file's table. The value is taken as a
/// string where the key holds a string, and otherwise parsed as a TOML value (`8`, `true`,
/// `["a", "b"]`); a list key also takes comma-separated text.
fn apply_env_overrides(tree: &mut toml::Table, env: &BTreeMap<String, String>) -> Result<(), ConfigError> {
    for (name, raw) in env {
        let Some(rest) = name.strip_prefix(ENV_PREFIX) else {
            continue;
        };
        if !rest.contains(ENV_LEVEL_SEPARATOR) {
            continue;
        }
        let path: Vec<String> = rest.split(ENV_LEVEL_SEPARATOR).map(str::to_ascii_lowercase).collect();
        if path.iter().any(String::is_empty) {
            return Err(ConfigError::key(
                name.clone(),
                "is not of the form GATEHOUSE_<SECTION>__<KEY>",
            ));
        }
        let (leaf, sections) = path.split_last().expect("split yields at least one element");
        let mut table = &mut *tree;
        for section in sections {
            let entry = table
                .entry(section.clone())
                .or_insert_with(|| toml::Value::Table(toml::Table::new()));
            table = entry.as_table_mut().ok_or_else(|| {
                ConfigError::key(
                    name.clone(),
                    format!("`{section}` is not a section, so it cannot hold keys"),
                )
            })?;
        }
        let value = env_value(table.get(leaf), sections.first().map(String::as_str), leaf, raw);
        table.insert(leaf.clone(), value);
    }
    Ok(())
}

fn env_value(existing: Option<&toml::Value>, section: Option<&str>, leaf: &str, raw: &str) -> toml::Value {
    let is_list = matches!(existing, Some(toml::Value::Array(_))) || LIST_KEYS.contains(&(section.unwrap_or(""), leaf));
    let is_string =
        matches!(existing, Some(toml::Value::String(_))) || STRING_KEYS.contains(&(section.unwrap_or(""), leaf));
    if is_string {
        return toml::Value::String(raw.to_owned());
    }
    if let Ok(parsed) = format!("v = {raw}").parse::<toml::Table>()
        && let Some(value) = parsed.get("v")
    {
        return value.clone();
    }
    if is_list {
        let items = raw.split(',').map(str::trim).filter(|s| !s.is_empty());
        return toml::Value::Array(items.map(|s| toml::Value::String(s.to_owned())).collect());
    }
    toml::Value::String(raw.to_owned())
}

/// Keys whose environment override is always text, even when it looks like a number.
const STRING_KEYS: &[(&str, &str)] = &[
    ("server", "bind"),
    ("server", "public_url"),
    ("server", "sse_keep_alive"),
    ("server", "sse_retry"),
    ("server", "template_dir"),
    ("database", "url"),
    ("identity", "mode"),
    ("identity", "header"),
    ("identity", "local_principal"),
    ("mcp", "session_idle_timeout"),
    ("elicitation", "ttl"),
    ("elicitation", "wait"),
    ("elicitation", "progress_interval"),
    ("secrets", "dev_key_file"),
    ("log", "format"),
];
/// Keys whose environment override may be comma-separated text.
const LIST_KEYS: &[(&str, &str)] = &[
    ("server", "allowed_origins"),
    ("server", "trusted_proxies"),
    ("secrets", "keys"),
];

fn resolve_env_references(
    value: &mut toml::Value,
    path: &str,
    env: &BTreeMap<String, String>,
) -> Result<(), ConfigError> {
    match value {
        toml::Value::String(text) => {
            if let Some(name) = text.strip_prefix(ENV_REFERENCE) {
                let resolved = env.get(name).ok_or_else(|| {
                    ConfigError::key(path, format!("refers to environment variable {name}, which is not set"))
                })?;
                *text = resolved.clone();
            }
        }
        toml::Value::Array(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                resolve_env_references(item, &format!("{path}[{i}]"), env)?;
            }
        }
        toml::Value::Table(table) => {
            for (key, item) in table.iter_mut() {
                let child = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                resolve_env_references(item, &child, env)?;
            }
        }
        _ => {}
    }
    Ok(())
}

impl fmt::Display for IdentityMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            IdentityMode::Local => "local",
            IdentityMode::Header => "header",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(file: &str, env: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("gatehouse.toml");
        std::fs::write(&path, file).expect("write config");
        let env = env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        Config::load(ConfigSource {
            file: Some(&path),
            env: &env,
        })
    }

    fn key_of(error: ConfigError) -> String {
        match error {
            ConfigError::Key { key, .. } => key,
            other => panic!("expected a key error, got {other}"),
        }
    }

    #[test]
    fn no_file_gives_the_embedded_default() {
        let config = Config::load(ConfigSource {
            file: None,
            env: &BTreeMap::new(),
        })
        .expect("default config");
        assert_eq!(config.server.bind.to_string(), "127.0.0.1:8080");
        assert_eq!(config.database.url.expose(), "sqlite://gatehouse.db");
        assert_eq!(config.identity.mode, IdentityMode::Local);
        assert_eq!(config.public_url().as_str(), "http://127.0.0.1:8080/");
    }

    #[test]
    fn environment_overrides_file_and_types_follow_the_key() {
        let config = load(
            "[server]\nbind = \"127.0.0.1:9000\"\n[database]\nmax_connections = 3\n",
            &[
                ("GATEHOUSE_SERVER__BIND", "127.0.0.1:9100"),
                ("GATEHOUSE_DATABASE__MAX_CONNECTIONS", "7"),
                (
                    "GATEHOUSE_SERVER__ALLOWED_ORIGINS",
                    "https://a.example, https://b.example",
                ),
                ("GATEHOUSE_DATABASE__URL", "postgres://u:p@db/gatehouse"),
                (
                    "GATEHOUSE_SECRETS__KEYS",
                    "a2V5LWtleS1rZXkta2V5LWtleS1rZXkta2V5LWtleS0=",
                ),
            ],
        )
        .expect("config");
        assert_eq!(config.server.bind.port(), 9100);
        assert_eq!(config.database.max_connections, 7);
        assert_eq!(
            config.server.allowed_origins,
            vec!["https://a.example", "https://b.example"]
        );
        assert_eq!(config.database.url.expose(), "postgres://u:p@db/gatehouse");
        assert_eq!(
            config.secrets.keys.len(),
            1,
            "a list key takes one value from the environment"
        );
    }

    #[test]
    fn postgres_needs_configured_keys() {
        let error = load("[database]\nurl = \"postgres://db/gatehouse\"\n", &[]).unwrap_err();
        assert_eq!(key_of(error), "secrets.keys");
    }

    #[test]
    fn env_references_are_resolved_and_missing_ones_name_the_key() {
        let file = "[database]\nurl = \"env:GH_TEST_DB\"\n";
        let config = load(file, &[("GH_TEST_DB", "sqlite://x.db")]).expect("config");
        assert_eq!(config.database.url.expose(), "sqlite://x.db");
        let error = load(file, &[]).expect_err("missing variable");
        assert!(error.to_string().contains("GH_TEST_DB"), "{error}");
        assert_eq!(key_of(error), "database.url");
    }

    #[test]
    fn bad_values_name_their_key() {
        assert_eq!(
            key_of(load("[server]\nbind = \"nowhere\"\n", &[]).unwrap_err()),
            "server.bind"
        );
        assert_eq!(
            key_of(load("[server]\nsse_keep_alive = \"soon\"\n", &[]).unwrap_err()),
            "server.sse_keep_alive"
        );
        assert_eq!(
            key_of(load("[server]\nbnid = \"x\"\n", &[]).unwrap_err()),
            "server.bnid"
        );
        assert_eq!(
            key_of(load("[database]\nurl = \"mysql://x\"\n", &[]).unwrap_err()),
            "database.url"
        );
        assert_eq!(
            key_of(
                load(
                    "[server]\nallowed_origins = [\"https://ok.example\", \"not a url\"]\n",
                    &[]
                )
                .unwrap_err()
            ),
            "server.allowed_origins[1]"
        );
        assert_eq!(
            key_of(
                load(
                    "[[tools]]\nname = \"t\"\n[tools.http]\nurl = \"http://x\"\ntimeout = 5\n",
                    &[]
                )
                .unwrap_err()
            ),
            "tools[0].http.timeout"
        );
    }

    #[test]
    fn local_identity_is_refused_off_loopback() {
        let error = load(
            "[server]\nbind = \"0.0.0.0:8080\"\npublic_url = \"https://gh.example\"\n",
            &[],
        )
        .unwrap_err();
        assert_eq!(key_of(error), "identity.mode");
        let error = load("[server]\nbind = \"0.0.0.0:8080\"\n", &[]).unwrap_err();
        assert_eq!(key_of(error), "server.public_url");
    }

    #[test]
    fn header_identity_needs_trusted_proxies() {
        let base =
            "[server]\nbind = \"0.0.0.0:8080\"\npublic_url = \"https://gh.example\"\n[identity]\nmode = \"header\"\n";
        assert_eq!(key_of(load(base, &[]).unwrap_err()), "server.trusted_proxies");
        let config = load(
            base,
            &[("GATEHOUSE_SERVER__TRUSTED_PROXIES", "10.0.0.0/8,127.0.0.1/32")],
        )
        .expect("config");
        assert_eq!(config.server.trusted_proxies.len(), 2);
    }

    #[test]
    fn unreadable_and_malformed_files_say_so() {
        let missing = Config::load(ConfigSource {
            file: Some(Path::new("/nonexistent/g.toml")),
            env: &BTreeMap::new(),
        });
        assert!(matches!(missing, Err(ConfigError::Read { .. })));
        assert!(matches!(load("[server\n", &[]), Err(ConfigError::Syntax { .. })));
    }
}
