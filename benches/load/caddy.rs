//! The floor of a forwarded call: Debian's Caddy as a plain HTTP reverse proxy (`reverse_proxy`,
//! nothing else) in front of the fast upstream, so the benchmark can say what one HTTP hop costs
//! on the same request and how far gatehouse's hop is from it. Optional: without `caddy` on PATH
//! the row is left out, saying so.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use tokio::process::{Child, Command};

use super::local;

/// A running Caddy, killed when dropped.
pub(super) struct Caddy {
    child: Child,
    /// `http://127.0.0.1:PORT/mcp`, the upstream's endpoint through Caddy.
    pub(super) url: String,
    dir: tempfile::TempDir,
}

impl Caddy {
    /// Caddy on a free loopback port in front of `upstream` (`http://127.0.0.1:PORT/mcp`); `None`
    /// when there is no `caddy` on PATH.
    pub(super) async fn start(upstream: &str) -> Result<Option<Self>, String> {
        let Some(binary) = caddy_binary() else {
            return Ok(None);
        };
        let target = url::Url::parse(upstream).map_err(|e| format!("upstream URL: {e}"))?;
        let upstream_host = format!(
            "{}:{}",
            target.host_str().unwrap_or("127.0.0.1"),
            target.port_or_known_default().unwrap_or(80)
        );
        let port = local::free_port();
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let config = dir.path().join("Caddyfile");
        // No admin endpoint, no TLS, no logs; every SSE event passed on at once, as gatehouse's
        // own deployment file does.
        let caddyfile = format!(
            "{{\n\tauto_https off\n\tadmin off\n}}\n\n:{port} {{\n\tbind 127.0.0.1\n\treverse_proxy {upstream_host} {{\n\t\tflush_interval -1\n\t}}\n}}\n"
        );
        std::fs::write(&config, caddyfile).map_err(|e| e.to_string())?;
        let log = std::fs::File::create(dir.path().join("caddy.log")).map_err(|e| e.to_string())?;
        let child = Command::new(binary)
            .env_clear()
            .env("HOME", dir.path())
            .env("XDG_DATA_HOME", dir.path().join("data"))
            .env("XDG_CONFIG_HOME", dir.path().join("config"))
            .args(["run", "--adapter", "caddyfile", "--config"])
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("cannot start caddy: {e}"))?;
        let caddy = Self {
            child,
            url: format!("http://127.0.0.1:{port}{}", target.path()),
            dir,
        };
        caddy.wait_ready(port).await?;
        Ok(Some(caddy))
    }

    pub(super) fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Waits until Caddy accepts connections on its port (at most 10 s).
    async fn wait_ready(&self, port: u16) -> Result<(), String> {
        for _ in 0..200 {
            if tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_ok() {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let log = std::fs::read_to_string(self.dir.path().join("caddy.log")).unwrap_or_default();
        Err(format!("caddy did not listen on 127.0.0.1:{port} within 10 s:\n{log}"))
    }
}

/// `caddy` on PATH (Debian's package: `apt-get install caddy`).
fn caddy_binary() -> Option<PathBuf> {
    let found = local::on_path("caddy");
    if found.is_none() {
        println!("(no `caddy` on PATH: the plain reverse proxy's row is left out; apt-get install caddy)");
    }
    found
}
