//! A real Caddy in front of replicas: Debian's `caddy` (2.6.2) running one of the repository's own
//! Caddyfiles (`deploy/Caddyfile`, `deploy/Caddyfile.prefixed`), adapted to this machine by a short list of textual substitutions that must
//! each match, started as a process of its own and killed when dropped.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use base64::Engine;

use super::local::on_path;
use super::python::unavailable;
use super::{STARTUP, eventually_within, repo};

/// The user and password of the demo account in `deploy/Caddyfile` (the file keeps only their
/// bcrypt hash, which the tests use as it is).
pub const DEMO_USER: &str = "demo";
pub const DEMO_PASSWORD: &str = "demo-password";

/// One of the repository's proxy configurations, `deploy/{name}`, as docker-compose.yml mounts it.
pub fn deploy_caddyfile(name: &str) -> String {
    let path = repo().join("deploy").join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// `caddyfile` (the text of `deploy/Caddyfile` or `deploy/Caddyfile.prefixed`; one list fits
/// both) made runnable here: listening
/// on `127.0.0.1:port` in front of `upstreams` (`host:port` each), by Debian's Caddy 2.6.2.
/// Every substitution must match exactly once, so a change to the file fails the tests loudly
/// instead of leaving them to test something else:
///
/// 1. `basic_auth` -> `basicauth`: the directive's name before Caddy 2.8, which renamed it (the
///    file needs 2.8+, so docker-compose.yml pins the image).
/// 2. `stream_close_delay 5m` is dropped (its line is left blank, whatever its indentation):
///    Caddy 2.6.2 does not know it; it keeps SSE streams open across a config reload, which these
///    tests never do.
/// 3. The global options `admin off` and `default_bind 127.0.0.1` are added after
///    `auto_https off`: no admin endpoint, and the site listens on loopback only, on this shared
///    machine.
/// 4. The site address `:8080` -> `:PORT` (with a host, say `127.0.0.1:PORT`, Caddy would add
///    TLS and match on the Host header).
/// 5. The replicas `gatehouse-a:8080 gatehouse-b:8080` -> `upstreams`.
pub fn adapt(caddyfile: &str, port: u16, upstreams: &[&str]) -> String {
    let substitutions = [
        ("\tbasic_auth {\n", "\tbasicauth {\n".to_owned()),
        ("stream_close_delay 5m\n", "\n".to_owned()),
        (
            "\tauto_https off\n",
            "\tauto_https off\n\tadmin off\n\tdefault_bind 127.0.0.1\n".to_owned(),
        ),
        ("\n:8080 {\n", format!("\n:{port} {{\n")),
        ("gatehouse-a:8080 gatehouse-b:8080", upstreams.join(" ")),
    ];
    substitutions.iter().fold(caddyfile.to_owned(), |text, (from, to)| {
        let found = text.matches(from).count();
        assert_eq!(
            found, 1,
            "the Caddyfile changed: {from:?} must occur exactly once for tests/common/caddy.rs to adapt it \
             (found {found} times); update the substitutions in adapt()"
        );
        text.replacen(from, to, 1)
    })
}

/// `Authorization: Basic ...` for `user` and `password`.
pub fn basic_auth(user: &str, password: &str) -> String {
    let credentials = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    format!("Basic {credentials}")
}

/// The `caddy` on PATH, or None after a loud skip (a failure under `CI=true`: `.ci/run` installs
/// Debian's package).
pub fn caddy_binary() -> Option<PathBuf> {
    let found = on_path("caddy");
    if found.is_none() {
        unavailable("Caddy", "no `caddy` on PATH; apt-get install caddy");
    }
    found
}

/// `caddy run` with an adapted Caddyfile on `127.0.0.1:port`, killed when dropped.
pub struct Caddy {
    child: tokio::process::Child,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    dir: tempfile::TempDir,
}

impl Caddy {
    /// Writes `caddyfile` (already adapted, see [`adapt`]) to a directory of its own, which is also
    /// Caddy's home, data and config directory, runs `caddy` (from [`caddy_binary`]) on it and
    /// waits until it answers on `127.0.0.1:port`.
    pub async fn start(caddy: &Path, caddyfile: &str, port: u16) -> Self {
        let dir = tempfile::tempdir().expect("caddy dir");
        let config = dir.path().join("Caddyfile");
        std::fs::write(&config, caddyfile).expect("write the Caddyfile");
        let log = std::fs::File::create(dir.path().join("caddy.log")).expect("log file");
        let child = tokio::process::Command::new(caddy)
            .env_clear()
            .env("HOME", dir.path())
            .env("XDG_DATA_HOME", dir.path().join("data"))
            .env("XDG_CONFIG_HOME", dir.path().join("config"))
            .args(["run", "--adapter", "caddyfile", "--config"])
            .arg(&config)
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .expect("spawn caddy");
        let mut caddy = Self {
            child,
            base: format!("http://127.0.0.1:{port}"),
            dir,
        };
        caddy.wait_ready().await;
        caddy
    }

    /// Waits until Caddy answers at all (without credentials: 401); panics with its log when it
    /// exits first.
    async fn wait_ready(&mut self) {
        let http = reqwest::Client::new();
        let base = self.base.clone();
        let (child, log) = (&mut self.child, self.dir.path().join("caddy.log"));
        eventually_within(STARTUP, &format!("Caddy answers at {base}"), async || {
            if let Ok(Some(status)) = child.try_wait() {
                let log = std::fs::read_to_string(&log).unwrap_or_default();
                panic!("caddy exited ({status}) before answering:\n{log}");
            }
            http.get(&base).send().await.ok().map(drop)
        })
        .await;
    }
}
