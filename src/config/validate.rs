//! Checks across keys that serde cannot express (loopback-only modes, limits, keys PostgreSQL
//! needs), each refusal naming the key to fix.

use std::time::Duration;

use url::Url;

use super::identity::check_allow;
use super::{Config, ConfigError};

/// The shortest and longest retention periods (`[retention]`); the longest is `"100y"` as
/// durations are written (a year of 365.25 days).
const MIN_RETENTION: Duration = Duration::from_secs(3600);
const MAX_RETENTION: Duration = Duration::from_secs(100 * 31_557_600);

impl Config {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        let loopback = self.server.bind.ip().is_loopback();
        if self.server.public_url.is_none() && !loopback {
            return Err(ConfigError::key(
                "server.public_url",
                "is required when server.bind is not a loopback address (browsers and clients must reach it)",
            ));
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
        if self.server.request_body_timeout.is_zero() {
            return Err(ConfigError::key(
                "server.request_body_timeout",
                "must be longer than zero",
            ));
        }
        if let Some(metrics) = self.server.metrics_bind
            && metrics == self.server.bind
            && metrics.port() != 0
        {
            return Err(ConfigError::key(
                "server.metrics_bind",
                "must differ from server.bind: metrics are served on a listener of their own",
            ));
        }
        if let Some(proxy) = &self.outbound.proxy
            && (!matches!(proxy.scheme(), "http" | "https") || proxy.host_str().is_none())
        {
            return Err(ConfigError::key(
                "outbound.proxy",
                "must be an http or https URL with a host, like \"http://proxy.internal:3128\"",
            ));
        }
        if let Some(endpoint) = &self.telemetry.otlp_endpoint
            && (!matches!(endpoint.scheme(), "http" | "https") || endpoint.host_str().is_none())
        {
            return Err(ConfigError::key(
                "telemetry.otlp_endpoint",
                "must be an http or https URL with a host, like \"http://127.0.0.1:4318\"",
            ));
        }
        if self.telemetry.service_name.trim().is_empty() {
            return Err(ConfigError::key("telemetry.service_name", "must not be empty"));
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
        self.identity
            .validate(loopback, !self.server.trusted_proxies.is_empty())?;
        for (i, tool) in self.tools.iter().enumerate() {
            check_allow(&format!("tools[{i}].allow"), tool.allow.as_ref(), &self.identity)?;
        }
        for (i, upstream) in self.upstreams.iter().enumerate() {
            check_allow(
                &format!("upstreams[{i}].allow"),
                upstream.allow.as_ref(),
                &self.identity,
            )?;
        }
        super::approvals::check(self)?;
        check_allow("admin.allow", self.admin.allow.as_ref(), &self.identity)?;
        if self.mcp.page_size == 0 {
            return Err(ConfigError::key("mcp.page_size", "must be at least 1"));
        }
        self.validate_limits()?;
        if self.mcp.conformance_fixtures && !cfg!(feature = "conformance") {
            return Err(ConfigError::key(
                "mcp.conformance_fixtures",
                "this build has no conformance fixtures: they are only in gatehouse-conformance \
                 (cargo build --features conformance --bin gatehouse-conformance), a test build",
            ));
        }
        if self.elicitation.max_pending_per_principal == 0 {
            return Err(ConfigError::key(
                "elicitation.max_pending_per_principal",
                "must be at least 1",
            ));
        }
        self.validate_retention()?;
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
        if self.elicitation.hold > Duration::from_secs(300) || self.elicitation.hold > self.elicitation.ttl {
            return Err(ConfigError::key(
                "elicitation.hold",
                "must be at most 5m and at most elicitation.ttl: a held request must end before its client gives up",
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

    /// `[retention]`, and the old name of one of its keys: each at least an hour (a late callback,
    /// a retried call or a resumed stream still finds what it needs) and at most a century.
    fn validate_retention(&self) -> Result<(), ConfigError> {
        let periods = [
            ("retention.events", Some(self.retention.events)),
            ("retention.finished_elicitations", self.retention.finished_elicitations),
            ("retention.audit", Some(self.retention.audit)),
            ("elicitation.retention", self.elicitation.retention),
        ];
        for (key, period) in periods {
            let Some(period) = period else { continue };
            if period < MIN_RETENTION {
                return Err(ConfigError::key(
                    key,
                    "must be at least 1h: a late callback, a retried call or a resumed stream still looks it up",
                ));
            }
            if period > MAX_RETENTION {
                return Err(ConfigError::key(key, "must be at most 100y"));
            }
        }
        if let (Some(new), Some(old)) = (self.retention.finished_elicitations, self.elicitation.retention)
            && new != old
        {
            return Err(ConfigError::key(
                "retention.finished_elicitations",
                format!(
                    "is {}, but elicitation.retention (its old name) is {}: set only \
                     retention.finished_elicitations",
                    humantime::format_duration(new),
                    humantime::format_duration(old)
                ),
            ));
        }
        Ok(())
    }

    /// `[limits]`, and the old name of one of its keys.
    fn validate_limits(&self) -> Result<(), ConfigError> {
        let sessions = [
            ("limits.sessions_per_principal", self.limits.sessions_per_principal),
            ("mcp.max_sessions_per_principal", self.mcp.max_sessions_per_principal),
        ];
        for (key, value) in sessions {
            if value == Some(0) {
                return Err(ConfigError::key(key, "must be at least 1"));
            }
        }
        if self.limits.held_retries_per_principal == 0 {
            return Err(ConfigError::key(
                "limits.held_retries_per_principal",
                "must be at least 1 (elicitation.hold = \"0s\" is how retries are answered at once)",
            ));
        }
        if let (Some(new), Some(old)) = (self.limits.sessions_per_principal, self.mcp.max_sessions_per_principal)
            && new != old
        {
            return Err(ConfigError::key(
                "limits.sessions_per_principal",
                format!(
                    "is {new}, but mcp.max_sessions_per_principal (its old name) is {old}: set only \
                     limits.sessions_per_principal"
                ),
            ));
        }
        Ok(())
    }
}
