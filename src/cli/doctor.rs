//! `gatehouse doctor`: checks a deployment from the outside in (configuration, database and
//! migrations, the key ring, providers, the identity provider, upstreams, and whether
//! `server.public_url` reaches this very instance) and reports one finding per check, each naming
//! the configuration key to fix. Every check is bounded by [`CHECK_TIMEOUT`].

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::process::ExitCode;
use std::time::Duration;

use reqwest::Method;
use serde::Serialize;
use serde_json::json;
use tokio_util::sync::CancellationToken;
use url::Url;

use crate::Config;
use crate::config::{ConfigError, IdentityMode};
use crate::identity::oauth::Discovery;
use crate::instance::InstanceNonce;
use crate::providers::Providers;
use crate::public_url::PublicUrl;
use crate::routes::INSTANCE as INSTANCE_PATH;
use crate::store::StoreError;
use crate::vault::{KeyRing, VaultError};

/// The longest one check (one connection, one request) may take.
const CHECK_TIMEOUT: Duration = Duration::from_secs(5);
/// An instance nonce is 32 hex digits; a longer answer is not one.
const MAX_NONCE_ANSWER: usize = 256;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
enum Status {
    Ok,
    Warning,
    Problem,
}

/// One check's outcome: what was checked, how it went, and for a warning or problem the
/// configuration key to fix and a one-line hint.
#[derive(Debug, Serialize)]
struct Finding {
    check: String,
    status: Status,
    key: Option<String>,
    message: String,
    hint: Option<String>,
}

impl Finding {
    fn ok(check: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            check: check.into(),
            status: Status::Ok,
            key: None,
            message: message.into(),
            hint: None,
        }
    }

    fn warning(check: impl Into<String>, key: impl Into<String>, message: impl Into<String>, hint: &str) -> Self {
        Self::flagged(Status::Warning, check.into(), key.into(), message.into(), hint)
    }

    fn problem(check: impl Into<String>, key: impl Into<String>, message: impl Into<String>, hint: &str) -> Self {
        Self::flagged(Status::Problem, check.into(), key.into(), message.into(), hint)
    }

    fn flagged(status: Status, check: String, key: String, message: String, hint: &str) -> Self {
        Self {
            check,
            status,
            key: Some(key),
            message,
            hint: Some(hint.to_owned()),
        }
    }

    fn line(&self) -> String {
        let status = match self.status {
            Status::Ok => "ok",
            Status::Warning => "warning",
            Status::Problem => "problem",
        };
        let mut line = format!("{status:<8} {}: {}", self.check, self.message);
        if let (Some(key), Some(hint)) = (&self.key, &self.hint) {
            line.push_str(&format!(" [fix {key}: {hint}]"));
        }
        line
    }
}

/// Runs every check, prints the findings (lines or JSON) and exits 1 when any is a problem.
pub(super) async fn run(loaded: Result<Config, ConfigError>, json: bool) -> ExitCode {
    let findings = match loaded {
        Ok(config) => check(&config).await,
        Err(error) => vec![unloadable(&error)],
    };
    let count = |status| findings.iter().filter(|f| f.status == status).count();
    let (problems, warnings) = (count(Status::Problem), count(Status::Warning));
    if json {
        println!(
            "{}",
            json!({"problems": problems, "warnings": warnings, "checks": findings})
        );
    } else {
        for finding in &findings {
            println!("{}", finding.line());
        }
        println!("{problems} problem(s), {warnings} warning(s)");
    }
    if problems == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// A configuration that does not load: nothing else can be checked.
fn unloadable(error: &ConfigError) -> Finding {
    config_problem(
        error,
        "--config",
        "fix the configuration, then run doctor again (nothing else was checked)",
    )
}

/// A configuration error as a finding, naming its key; a file it could not read is `file_key`.
fn config_problem(error: &ConfigError, file_key: &str, hint: &str) -> Finding {
    let key = match error {
        ConfigError::Key { key, .. } => key.clone(),
        ConfigError::Read { .. } | ConfigError::Syntax { .. } => file_key.to_owned(),
    };
    Finding::problem("configuration", key, error.to_string(), hint)
}

async fn check(config: &Config) -> Vec<Finding> {
    let mut findings = vec![configuration(config), key_ring(config)];
    findings.extend(database(config).await);
    let http = match crate::outbound::client() {
        Ok(http) => http,
        Err(error) => {
            findings.push(Finding::problem(
                "outbound HTTP",
                "(none)",
                format!("cannot build the HTTP client: {error}"),
                "the system's TLS setup is unusable",
            ));
            return findings;
        }
    };
    findings.extend(providers(config, &http).await);
    findings.extend(identity_provider(config, &http).await);
    findings.extend(upstreams(config, &http).await);
    findings.push(public_url(config, &http).await);
    findings
}

fn configuration(config: &Config) -> Finding {
    match super::check_parts(config) {
        Ok(()) => Finding::ok("configuration", "loads and validates"),
        // Besides the file itself, only operator templates are read from disk.
        Err(error) => config_problem(&error, "server.template_dir", "`gatehouse check-config` says the same"),
    }
}

/// The keys decode; the development key file is for loopback deployments only.
fn key_ring(config: &Config) -> Finding {
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

/// The database answers and its migrations are applied (pending ones named).
async fn database(config: &Config) -> Vec<Finding> {
    let connected = bounded(crate::store::connect(config.database.url.expose(), 1)).await;
    let database = match connected {
        Ok(Ok(database)) => database,
        Ok(Err(error)) => {
            return vec![Finding::problem(
                "database",
                "database.url",
                format!("cannot connect: {error}"),
                "check the URL's host, port, name and credentials, and that the database runs",
            )];
        }
        Err(elapsed) => {
            return vec![Finding::problem(
                "database",
                "database.url",
                elapsed,
                "check the URL's host and port",
            )];
        }
    };
    let mut findings = vec![Finding::ok(
        "database",
        format!("{:?} answers", database.store.backend()),
    )];
    findings.push(match bounded(database.store.check_ready()).await {
        Ok(Ok(())) => Finding::ok("migrations", "all applied"),
        Ok(Err(StoreError::NotReady(reason))) if config.database.migrate_on_start => Finding::warning(
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
    });
    findings
}

/// Every configured provider's endpoints answer over HTTP (any status), and its discovery
/// document is fetched when it names an issuer.
async fn providers(config: &Config, http: &reqwest::Client) -> Vec<Finding> {
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
                        "fine for a provider that publishes none (GitHub); else check the issuer",
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
async fn identity_provider(config: &Config, http: &reqwest::Client) -> Vec<Finding> {
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

/// Every `url` upstream answers over HTTP (any status).
async fn upstreams(config: &Config, http: &reqwest::Client) -> Vec<Finding> {
    let mut findings = Vec::new();
    for (i, upstream) in config.upstreams.iter().enumerate() {
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
async fn endpoint(http: &reqwest::Client, check: &str, key: &str, method: Method, url: &Url) -> Finding {
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

/// `server.public_url` reaches the instance on `server.bind`: the server running there, or,
/// when nothing listens, doctor's own listener there with a nonce of its own.
async fn public_url(config: &Config, http: &reqwest::Client) -> Finding {
    const CHECK: &str = "public url";
    let bind = config.server.bind;
    let here = format!("http://{}{INSTANCE_PATH}", reachable(bind));
    let public_url = PublicUrl::new(&config.public_url());
    let there = public_url.at(INSTANCE_PATH);
    match nonce_at(http, &here).await {
        Ok(nonce) => compare(http, &there, &nonce, &format!("the server on {bind}")).await,
        Err(NonceError::Refused(_)) => {
            let listener = match tokio::net::TcpListener::bind(bind).await {
                Ok(listener) => listener,
                Err(error) => {
                    return Finding::problem(
                        CHECK,
                        "server.bind",
                        format!("nothing answers at {bind} and doctor cannot listen there: {error}"),
                        "use an address of this machine that is free or served by gatehouse",
                    );
                }
            };
            let nonce = InstanceNonce::random();
            let stop = CancellationToken::new();
            let app = crate::web::instance_only(nonce.clone(), public_url.prefix());
            let stopped = stop.clone();
            let server = tokio::spawn(async move {
                axum::serve(listener, app)
                    .with_graceful_shutdown(stopped.cancelled_owned())
                    .await
            });
            let finding = compare(
                http,
                &there,
                nonce.as_str(),
                &format!("doctor's own listener on {bind}"),
            )
            .await;
            stop.cancel();
            if let Ok(Ok(Err(error))) = tokio::time::timeout(CHECK_TIMEOUT, server).await {
                tracing::warn!(%error, "doctor's listener on server.bind failed");
            }
            finding
        }
        Err(NonceError::Other(reason)) => Finding::problem(
            CHECK,
            "server.bind",
            format!("something at {bind} answers, but not as gatehouse: {reason}"),
            "another program holds server.bind, or it runs an older gatehouse",
        ),
    }
}

async fn compare(http: &reqwest::Client, there: &str, nonce: &str, instance: &str) -> Finding {
    const CHECK: &str = "public url";
    match nonce_at(http, there).await {
        Ok(seen) if seen == nonce => Finding::ok(CHECK, format!("{there} reaches {instance}")),
        Ok(_) => Finding::problem(
            CHECK,
            "server.public_url",
            format!("{there} reaches another gatehouse instance, not {instance}"),
            "point server.public_url (or the proxy in front of it) at this instance",
        ),
        Err(NonceError::Refused(reason) | NonceError::Other(reason)) => Finding::problem(
            CHECK,
            "server.public_url",
            format!("{there}: {reason}"),
            "browsers and clients must reach this instance at server.public_url",
        ),
    }
}

enum NonceError {
    /// Nothing listens there.
    Refused(String),
    Other(String),
}

/// The instance nonce served at `url`.
async fn nonce_at(http: &reqwest::Client, url: &str) -> Result<String, NonceError> {
    let response = http.get(url).timeout(CHECK_TIMEOUT).send().await.map_err(|error| {
        if error.is_connect() && !error.is_timeout() {
            NonceError::Refused(describe(&error))
        } else {
            NonceError::Other(describe(&error))
        }
    })?;
    let status = response.status();
    if !status.is_success() {
        return Err(NonceError::Other(format!("answered {status} at {INSTANCE_PATH}")));
    }
    let body = crate::outbound::read_bounded(response, MAX_NONCE_ANSWER)
        .await
        .map_err(|e| NonceError::Other(e.to_string()))?;
    Ok(String::from_utf8_lossy(&body).trim().to_owned())
}

/// Where to reach a server bound to `bind` from this machine: an unspecified address is
/// reached on loopback.
fn reachable(bind: SocketAddr) -> SocketAddr {
    match bind.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => SocketAddr::from((Ipv4Addr::LOCALHOST, bind.port())),
        IpAddr::V6(ip) if ip.is_unspecified() => SocketAddr::from((Ipv6Addr::LOCALHOST, bind.port())),
        _ => bind,
    }
}

/// The error and its causes: reqwest's own message alone says little ("error sending request").
fn describe(error: &reqwest::Error) -> String {
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
async fn bounded<T>(future: impl Future<Output = T>) -> Result<T, String> {
    tokio::time::timeout(CHECK_TIMEOUT, future)
        .await
        .map_err(|_| timed_out())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unspecified_bind_is_reached_on_loopback() {
        let any: SocketAddr = "0.0.0.0:8080".parse().expect("addr");
        assert_eq!(reachable(any), "127.0.0.1:8080".parse().expect("addr"));
        let any6: SocketAddr = "[::]:8080".parse().expect("addr");
        assert_eq!(reachable(any6), "[::1]:8080".parse().expect("addr"));
        let given: SocketAddr = "10.0.0.5:8080".parse().expect("addr");
        assert_eq!(reachable(given), given);
    }

    #[test]
    fn a_flagged_line_names_its_key_and_hint() {
        let line = Finding::problem("database", "database.url", "cannot connect", "check it").line();
        assert_eq!(line, "problem  database: cannot connect [fix database.url: check it]");
    }
}
