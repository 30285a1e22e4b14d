//! The checks of a deployment that make sense from where it runs, shared by `gatehouse doctor`
//! (which adds the configuration's loading and whether `server.public_url` reaches this very
//! instance) and the operator pages (`/admin/health`, inside a running server): the key ring,
//! the database and its migrations, providers, the identity provider and upstreams. One
//! finding per check, naming the configuration key to fix; each bounded by [`CHECK_TIMEOUT`].

use std::future::Future;
use std::time::Duration;

use reqwest::Method;
use serde::Serialize;
use url::Url;

use crate::config::{Config, IdentityMode};
use crate::identity::oauth::Discovery;
use crate::providers::Providers;
use crate::store::{Store, StoreError};
use crate::vault::{KeyRing, VaultError};

/// The longest one check (one connection, one request) may take.
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    Warning,
    Problem,
}

/// One check's outcome: what was checked, how it went, and for a warning or problem a one-line
/// hint and the configuration key to fix (a key the configuration has: `tests/hint_keys.rs`),
/// unless no key can fix it.
#[derive(Debug, Serialize)]
pub struct Finding {
    pub check: String,
    pub status: Status,
    pub key: Option<String>,
    pub message: String,
    pub hint: Option<String>,
}

impl Finding {
    pub fn ok(check: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            check: check.into(),
            status: Status::Ok,
            key: None,
            message: message.into(),
            hint: None,
        }
    }

    pub fn warning(check: impl Into<String>, key: impl Into<String>, message: impl Into<String>, hint: &str) -> Self {
        Self::flagged(Status::Warning, check.into(), Some(key.into()), message.into(), hint)
    }

    pub fn problem(check: impl Into<String>, key: impl Into<String>, message: impl Into<String>, hint: &str) -> Self {
        Self::flagged(Status::Problem, check.into(), Some(key.into()), message.into(), hint)
    }

    /// A problem no configuration key can fix (the file does not read, the machine's TLS setup).
    pub fn keyless_problem(check: impl Into<String>, message: impl Into<String>, hint: &str) -> Self {
        Self::flagged(Status::Problem, check.into(), None, message.into(), hint)
    }

    fn flagged(status: Status, check: String, key: Option<String>, message: String, hint: &str) -> Self {
        Self {
            check,
            status,
            key,
            message,
            hint: Some(hint.to_owned()),
        }
    }

    pub fn line(&self) -> String {
        let status = match self.status {
            Status::Ok => "ok",
            Status::Warning => "warning",
            Status::Problem => "problem",
        };
        let mut line = format!("{status:<8} {}: {}", self.check, self.message);
        match (&self.key, &self.hint) {
            (Some(key), Some(hint)) => line.push_str(&format!(" [fix {key}: {hint}]")),
            (None, Some(hint)) => line.push_str(&format!(" [{hint}]")),
            _ => {}
        }
        line
    }
}

/// The checks a running server makes of itself for the operator pages: its configuration loaded
/// and validated at start, so it is ok; then the key ring, the database (through the server's own
/// pool), providers, the identity provider and upstreams.
pub async fn running(config: &Config, store: &dyn Store, http: &reqwest::Client) -> Vec<Finding> {
    let mut findings = vec![
        Finding::ok("configuration", "loaded and validated at start"),
        key_ring(config),
    ];
    findings.push(match bounded(store.check_ready()).await {
        Err(elapsed) => Finding::problem("database", "database.url", elapsed, "check the URL's host and port"),
        Ok(Err(error)) if error.is_unavailable() => Finding::problem(
            "database",
            "database.url",
            error.to_string(),
            "check that the database runs and is reachable from here",
        ),
        Ok(_) => Finding::ok("database", format!("{:?} answers", store.backend())),
    });
    findings.push(migrations(store, config.database.migrate_on_start).await);
    findings.extend(providers(config, http).await);
    findings.extend(identity_provider(config, http).await);
    findings.extend(upstreams(config, http).await);
    findings
}

/// The keys decode; the development key file is for loopback deployments only.
pub fn key_ring(config: &Config) -> Finding {
    const CHECK: &str = "key ring";
    let secrets = &config.secrets;
    if !secrets.keys.is_empty() {
        return match KeyRing::from_keys(&secrets.keys) {
            Ok(ring) => {
                let ids = ring.key_ids();
                let first = ids.first().map(ToString::to_string).unwrap_or_default();
                Finding::ok(
                    CHECK,
                    format!("{} key(s) decode; the first ({first}) encrypts", ids.len()),
                )
            }
            Err(error) => {
                let key = match &error {
                    VaultError::BadKey { index, .. } => format!("secrets.keys[{index}]"),
                    _ => "secrets.keys".to_owned(),
                };
                Finding::problem(
                    CHECK,
                    key,
                    error.to_string(),
                    "`gatehouse generate-key` makes a valid key",
                )
            }
        };
    }
    let path = &secrets.dev_key_file;
    let loopback = config.server.bind.ip().is_loopback();
    if std::fs::symlink_metadata(path).is_err() {
        let message = format!("the development key file {} does not exist yet", path.display());
        return if loopback {
            Finding::ok(CHECK, format!("{message}; `serve` creates it"))
        } else {
            Finding::warning(CHECK, "secrets.keys", message, DEV_KEY_HINT)
        };
    }
    // The file exists, so this only reads it.
    match KeyRing::load_or_create_dev_key(path) {
        Ok(_) if loopback => Finding::ok(CHECK, format!("the development key file {} decodes", path.display())),
        Ok(_) => Finding::warning(
            CHECK,
            "secrets.keys",
            format!(
                "the development key file {} is in use while server.bind is not loopback",
                path.display()
            ),
            DEV_KEY_HINT,
        ),
        Err(error) => Finding::problem(
            CHECK,
            "secrets.dev_key_file",
            error.to_string(),
            "remove or repair the file, or set secrets.keys",
        ),
    }
}

const DEV_KEY_HINT: &str = "a deployment reached from other machines keeps its keys in secrets.keys \
                            (`gatehouse generate-key`), not in a file beside the database";

/// The database's migrations are applied (pending ones named); pending ones are a warning when
/// `serve` applies them at start (`migrate_on_start`), else a problem.
pub async fn migrations(store: &dyn Store, migrate_on_start: bool) -> Finding {
    match bounded(store.check_ready()).await {
        Ok(Ok(())) => Finding::ok("migrations", "all applied"),
        Ok(Err(StoreError::NotReady(reason))) if migrate_on_start => Finding::warning(
            "migrations",
            "database.migrate_on_start",
            reason,
            "`serve` applies them when it starts; `gatehouse migrate` applies them now",
        ),
        Ok(Err(StoreError::NotReady(reason))) => Finding::problem(
            "migrations",
            "database.migrate_on_start",
            reason,
            "run `gatehouse migrate`, or set database.migrate_on_start = true",
        ),
        Ok(Err(error)) => Finding::problem(
            "migrations",
            "database.url",
            error.to_string(),
            "the database answers but its migrations cannot be read",
        ),
        Err(elapsed) => Finding::problem(
            "migrations",
            "database.url",
            elapsed,
            "the database is too slow to answer",
        ),
    }
}

/// Every configured provider's endpoints answer over HTTP (any status), and its discovery
/// document is fetched when it names an issuer.
pub async fn providers(config: &Config, http: &reqwest::Client) -> Vec<Finding> {
    // A provider that does not build is the configuration check's finding.
    let Ok(providers) = Providers::from_config(config) else {
        return Vec::new();
    };
    let mut findings = Vec::new();
    // `Providers` keeps the configured order, so `i` is the provider's index in the file.
    for (i, provider) in providers.iter().enumerate() {
        let check = format!("provider {}", provider.id);
        let endpoints = [
            ("authorize_url", Method::GET, Some(&provider.authorize_url)),
            ("token_url", Method::POST, Some(&provider.token_url)),
            ("userinfo_url", Method::GET, provider.userinfo_url.as_ref()),
            ("revocation_url", Method::POST, provider.revocation_url.as_ref()),
        ];
        for (field, method, url) in endpoints {
            if let Some(url) = url {
                let key = format!("providers[{i}].{field}");
                findings.push(endpoint(http, &format!("{check} {field}"), &key, method, url).await);
            }
        }
        if let Some(issuer) = &provider.issuer {
            let key = format!("providers[{i}].issuer");
            findings.push(match Url::parse(issuer) {
                Ok(issuer) => match discovery(http, issuer).await {
                    Ok(()) => Finding::ok(format!("{check} discovery"), "metadata fetched"),
                    Err(reason) => Finding::warning(
                        format!("{check} discovery"),
                        key,
                        format!("no discovery document: {reason}"),
                        "fine for a provider that publishes none; else check the issuer",
                    ),
                },
                Err(error) => Finding::warning(
                    format!("{check} discovery"),
                    key,
                    format!("`{issuer}` is not a URL: {error}"),
                    "an issuer is the URL the provider names itself by",
                ),
            });
        }
    }
    findings
}

/// `identity.mode = "oauth"`: the identity provider's metadata, and its key set when it names one.
pub async fn identity_provider(config: &Config, http: &reqwest::Client) -> Vec<Finding> {
    let identity = &config.identity;
    let (IdentityMode::OAuth, Some(issuer)) = (identity.mode, &identity.issuer) else {
        return Vec::new();
    };
    let discovery = Discovery::new(issuer.clone(), http.clone(), Duration::ZERO);
    match bounded(discovery.metadata()).await.and_then(|fetched| fetched) {
        Ok(metadata) => {
            let mut findings = vec![Finding::ok(
                "identity provider",
                format!("metadata of {issuer} fetched"),
            )];
            if let Some(jwks) = &metadata.jwks_uri {
                findings.push(endpoint(http, "identity provider jwks_uri", "identity.issuer", Method::GET, jwks).await);
            }
            findings
        }
        Err(reason) => vec![Finding::problem(
            "identity provider",
            "identity.issuer",
            format!("no metadata: {reason}"),
            "the issuer must publish RFC 8414 or OpenID Connect discovery metadata",
        )],
    }
}

/// Every `url` upstream answers over HTTP (any status); every `command` upstream's program is
/// found and may be run (`upstreams::command`).
pub async fn upstreams(config: &Config, http: &reqwest::Client) -> Vec<Finding> {
    let mut findings = Vec::new();
    for (i, upstream) in config.upstreams.iter().enumerate() {
        if upstream.command.is_some() {
            let check = format!("upstream {}", upstream.id);
            findings.push(match crate::upstreams::command::locate(upstream) {
                Ok(Some(found)) => Finding::ok(check, format!("its program is {}", found.display())),
                Ok(None) => Finding::ok(check, "its program is looked for on a PATH set per user (not checked)"),
                Err(unusable) => Finding::problem(
                    check,
                    format!("upstreams[{i}].command"),
                    unusable.to_string(),
                    "install the program where gatehouse runs (for the user it runs as), or give its full path",
                ),
            });
        }
        // An unparsable URL is the configuration check's finding.
        if let Some(url) = upstream.url.as_deref().and_then(|url| Url::parse(url).ok()) {
            let check = format!("upstream {}", upstream.id);
            findings.push(endpoint(http, &check, &format!("upstreams[{i}].url"), Method::GET, &url).await);
        }
    }
    findings
}

async fn discovery(http: &reqwest::Client, issuer: Url) -> Result<(), String> {
    let discovery = Discovery::new(issuer, http.clone(), Duration::ZERO);
    bounded(discovery.metadata())
        .await
        .and_then(|fetched| fetched.map(|_| ()))
}

/// Any HTTP answer means reachable; a connection, TLS or timeout error is a problem.
pub async fn endpoint(http: &reqwest::Client, check: &str, key: &str, method: Method, url: &Url) -> Finding {
    match http.request(method, url.clone()).timeout(CHECK_TIMEOUT).send().await {
        Ok(response) => Finding::ok(check, format!("{url} answers ({})", response.status())),
        Err(error) => Finding::problem(
            check,
            key,
            format!("{url}: {}", describe(&error)),
            "check the host name, port and TLS certificate, and that it is reachable from here",
        ),
    }
}

/// The error and its causes: reqwest's own message alone says little ("error sending request").
pub fn describe(error: &reqwest::Error) -> String {
    if error.is_timeout() {
        return timed_out();
    }
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        text.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    text
}

fn timed_out() -> String {
    format!("no answer within {}s", CHECK_TIMEOUT.as_secs())
}

/// `future`, or the timed-out message after [`CHECK_TIMEOUT`].
pub async fn bounded<T>(future: impl Future<Output = T>) -> Result<T, String> {
    tokio::time::timeout(CHECK_TIMEOUT, future)
        .await
        .map_err(|_| timed_out())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flagged_line_names_its_key_and_hint() {
        let line = Finding::problem("database", "database.url", "cannot connect", "check it").line();
        assert_eq!(line, "problem  database: cannot connect [fix database.url: check it]");
    }
}
