//! `gatehouse doctor`: checks a deployment from the outside in (configuration, database and
//! migrations, the key ring, providers, the identity provider, upstreams, and whether
//! `server.public_url` reaches this very instance) and reports one finding per check, each naming
//! the configuration key to fix. Every check is bounded by [`CHECK_TIMEOUT`]. The checks that
//! also make sense inside a running server (the operator pages show them) are `crate::diagnosis`;
//! loading the configuration, connecting to the database and the public URL's check are here.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::process::ExitCode;

use reqwest::StatusCode;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::Config;
use crate::config::ConfigError;
use crate::diagnosis::{
    self, CHECK_TIMEOUT, Finding, Status, bounded, describe, identity_provider, key_ring, providers, upstreams,
};
use crate::instance::InstanceNonce;
use crate::public_url::PublicUrl;
use crate::routes::INSTANCE as INSTANCE_PATH;

/// An instance nonce is 32 hex digits; a longer answer is not one.
const MAX_NONCE_ANSWER: usize = 256;

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
    const HINT: &str = "fix the configuration, then run doctor again (nothing else was checked)";
    match error {
        ConfigError::Key { key, .. } => Finding::problem("configuration", key.clone(), error.to_string(), HINT),
        // The file itself, named by --config or GATEHOUSE_CONFIG: no key of it.
        ConfigError::Read { .. } | ConfigError::Syntax { .. } => {
            Finding::keyless_problem("configuration", error.to_string(), HINT)
        }
    }
}

async fn check(config: &Config) -> Vec<Finding> {
    let mut findings = vec![configuration(config), key_ring(config)];
    findings.extend(database(config).await);
    let http = match crate::outbound::client() {
        Ok(http) => http,
        Err(error) => {
            findings.push(Finding::keyless_problem(
                "outbound HTTP",
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
    findings.extend(environment_proxies(config, |name| std::env::var_os(name).is_some()));
    findings
}

/// The environment's proxies, when set, serve only the ordinary client: requests to what remote
/// servers name go through `[outbound] proxy` or none (`outbound::Guarded`).
fn environment_proxies(config: &Config, is_set: impl Fn(&str) -> bool) -> Option<Finding> {
    let set: Vec<&str> = crate::outbound::ENVIRONMENT_PROXIES
        .into_iter()
        .filter(|name| is_set(name))
        .collect();
    if set.is_empty() {
        return None;
    }
    let through = match &config.outbound.proxy {
        Some(proxy) => format!("they go through outbound.proxy ({proxy})"),
        None => "they go through no proxy (set outbound.proxy for one)".to_owned(),
    };
    Some(Finding::ok(
        "outbound proxy",
        format!(
            "{} is set: ignored for requests to what remote servers name (discovery, registration, tokens); {through}",
            set.join(", ")
        ),
    ))
}

fn configuration(config: &Config) -> Finding {
    match super::check_parts(config) {
        Ok(()) => Finding::ok("configuration", "loads and validates"),
        Err(error) => {
            // Besides the file itself (read already), only operator templates are read from disk.
            let key = match &error {
                ConfigError::Key { key, .. } => key.clone(),
                ConfigError::Read { .. } | ConfigError::Syntax { .. } => "server.template_dir".to_owned(),
            };
            let hint = "`gatehouse check-config` says the same";
            Finding::problem("configuration", key, error.to_string(), hint)
        }
    }
}

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
    findings.push(diagnosis::migrations(&*database.store, config.database.migrate_on_start).await);
    findings.push(principals(&*database.store, config.identity.mode).await);
    findings
}

/// Stored principals that the identity mode's normal form makes one user: their rows are kept
/// apart (never merged), and the operator decides whose they are.
async fn principals(store: &dyn crate::store::Store, mode: crate::config::IdentityMode) -> Finding {
    let form = mode.principal_form();
    let stored = match bounded(store.stored_principals()).await {
        Ok(Ok(stored)) => stored,
        Ok(Err(error)) => return Finding::warning("principals", "database.url", error.to_string(), "migrate first"),
        Err(elapsed) => return Finding::warning("principals", "database.url", elapsed, "the database is slow"),
    };
    let (renames, collisions) = crate::store::principals::plan(stored, form);
    if !collisions.is_empty() {
        let listed: Vec<String> = collisions
            .iter()
            .map(|c| format!("{} (all `{}`)", c.stored.join(", "), c.normal))
            .collect();
        return Finding::problem(
            "principals",
            "identity.mode",
            format!(
                "stored principals collide in `{mode}` mode, {form}: {}; their rows are kept apart, never merged",
                listed.join("; ")
            ),
            "decide which user each is; remove the other's connections, form values and sessions \
             (`gatehouse admin`, naming the principal as stored); the next start renames the rest",
        );
    }
    if !renames.is_empty() {
        return Finding::warning(
            "principals",
            "database.migrate_on_start",
            format!(
                "{} stored principal(s) are not yet in `{mode}` mode's normal form",
                renames.len()
            ),
            "`gatehouse migrate` (or a start with database.migrate_on_start) rewrites them",
        );
    }
    Finding::ok(
        "principals",
        format!("every stored principal is in `{mode}` mode's normal form"),
    )
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
        Err(error @ (NonceError::Other(_) | NonceError::SignIn(_))) => Finding::problem(
            CHECK,
            "server.bind",
            format!("something at {bind} answers, but not as gatehouse: {}", error.reason()),
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
        // gatehouse asks for no sign-in there: a proxy in front of it does (the deployment
        // chapter's Caddy with basic auth), so the URL reaches something that guards it.
        Err(NonceError::SignIn(status)) => Finding::ok(
            CHECK,
            format!(
                "{there} is reachable, behind sign-in (HTTP {}); doctor cannot sign in to check that it reaches {instance}",
                status.as_u16()
            ),
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
    /// 401 or 403: whatever answers asks for a sign-in first (gatehouse never does there).
    SignIn(StatusCode),
    Other(String),
}

impl NonceError {
    fn reason(&self) -> String {
        match self {
            Self::Refused(reason) | Self::Other(reason) => reason.clone(),
            Self::SignIn(status) => format!("answered {status} at {INSTANCE_PATH}"),
        }
    }
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
    if matches!(status, StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN) {
        return Err(NonceError::SignIn(status));
    }
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
}
