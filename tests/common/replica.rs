//! `gatehouse serve` as a process of its own, as replicas run in production: started with a
//! configuration file, a database and a key ring, killed when dropped.

use std::process::Stdio;

use reqwest::StatusCode;

use super::{McpClient, eventually_within};

/// The binary under test.
pub const BINARY: &str = env!("CARGO_BIN_EXE_gatehouse");

/// A `gatehouse serve` process on `127.0.0.1:port`, killed when dropped.
pub struct Replica {
    child: tokio::process::Child,
    pub base: String,
    /// Its metrics listener's `/metrics`.
    metrics: String,
    _dir: tempfile::TempDir,
}

impl Replica {
    /// Starts a replica of the database at `database_url` with `config` and the key ring `keys`
    /// (comma-separated, as `GATEHOUSE_SECRETS__KEYS` takes them), every replica of a test with
    /// the same `public_url` (as behind one load balancer), and waits until it is ready.
    pub async fn start(database_url: &str, config: &str, port: u16, public_url: &str, keys: &str) -> Self {
        Self::start_with_env(database_url, config, port, public_url, keys, &[]).await
    }

    /// [`Replica::start`] with more environment variables (`OTEL_BSP_SCHEDULE_DELAY`, ...).
    pub async fn start_with_env(
        database_url: &str,
        config: &str,
        port: u16,
        public_url: &str,
        keys: &str,
        env: &[(&str, &str)],
    ) -> Self {
        let dir = tempfile::tempdir().expect("dir");
        let config_path = dir.path().join("gatehouse.toml");
        std::fs::write(&config_path, config).expect("write config");
        let log = std::fs::File::create(dir.path().join("gatehouse.log")).expect("log file");
        let metrics_bind = format!("127.0.0.1:{}", super::free_port());
        let child = tokio::process::Command::new(BINARY)
            .env_clear()
            .arg("--config")
            .arg(&config_path)
            .arg("serve")
            .current_dir(dir.path())
            .env("GATEHOUSE_DATABASE__URL", database_url)
            .env("GATEHOUSE_SERVER__BIND", format!("127.0.0.1:{port}"))
            .env("GATEHOUSE_SERVER__PUBLIC_URL", public_url)
            .env("GATEHOUSE_SERVER__SSE_KEEP_ALIVE", "1s")
            .env("GATEHOUSE_SERVER__SSE_RETRY", "250ms")
            .env("GATEHOUSE_SECRETS__KEYS", keys)
            .env("GATEHOUSE_SERVER__METRICS_BIND", &metrics_bind)
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .expect("spawn gatehouse");
        let replica = Self {
            child,
            base: format!("http://127.0.0.1:{port}"),
            metrics: format!("http://{metrics_bind}/metrics"),
            _dir: dir,
        };
        replica.wait_ready().await;
        replica
    }

    pub async fn wait_ready(&self) {
        let readyz = format!("{}/readyz", self.base);
        eventually_within(super::STARTUP, "the replica is ready", async || {
            reqwest::get(&readyz)
                .await
                .is_ok_and(|r| r.status() == StatusCode::OK)
                .then_some(())
        })
        .await;
    }

    /// Everything it logged so far (its stderr, a file: not a terminal).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self._dir.path().join("gatehouse.log")).unwrap_or_default()
    }

    pub fn mcp(&self) -> String {
        format!("{}/mcp", self.base)
    }

    /// `gatehouse_bus_reconnects_total` from its metrics.
    pub async fn bus_reconnects(&self) -> Option<u64> {
        let text = reqwest::get(&self.metrics).await.ok()?.text().await.ok()?;
        text.lines()
            .find_map(|line| line.strip_prefix("gatehouse_bus_reconnects_total ")?.parse().ok())
    }

    /// How many MCP requests it has answered (`gatehouse_mcp_requests_total`, every label).
    pub async fn mcp_requests(&self) -> u64 {
        let text = reqwest::get(&self.metrics)
            .await
            .expect("scrape")
            .text()
            .await
            .expect("metrics text");
        text.lines()
            .filter(|line| line.starts_with("gatehouse_mcp_requests_total{"))
            .filter_map(|line| line.rsplit(' ').next()?.parse::<u64>().ok())
            .sum()
    }

    /// SIGTERM, and waits for the process to exit (after its graceful shutdown).
    pub async fn stop(mut self) {
        let pid = self.child.id().expect("the replica runs");
        let pid = i32::try_from(pid).expect("a pid fits in i32");
        // SAFETY: kill(2) with a pid of our own child and a valid signal number.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0, "SIGTERM");
        let status = tokio::time::timeout(super::WAIT, self.child.wait())
            .await
            .expect("the replica exits in time")
            .expect("wait");
        assert!(status.success(), "the replica exits cleanly: {status}");
    }

    /// SIGKILL: no shutdown, no goodbye to streams or the database.
    pub async fn kill(mut self) {
        self.child.kill().await.expect("SIGKILL");
    }

    /// The client's session, addressed to this replica.
    pub fn client(&self, client: &McpClient) -> McpClient {
        McpClient {
            url: self.mcp(),
            ..client.clone()
        }
    }
}
