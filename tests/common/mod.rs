//! Test harness: real databases (a fresh PostgreSQL database or SQLite file per test), the real
//! server on port 0, a test per backend, and waiting for what must happen. The clients that talk
//! to the server are in `mcp` (MCP over raw HTTP, so tests see every status and header) and `web`
//! (a browser over plain HTTP).
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use gatehouse::config::ConfigSource;
use gatehouse::mcp::McpState;
use gatehouse::{App, AppState, Config};
use serde_json::{Value, json};
use sqlx::Connection;
use tokio::sync::OnceCell;
use tokio_util::sync::CancellationToken;

pub mod browser;
pub mod caddy;
pub mod claude_code;
pub mod cluster;
pub mod config_keys;
pub mod deploy_files;
pub mod deployment;
pub mod fake_idp;
pub mod fake_mcp_auth;
pub mod fake_oauth;
pub mod line_peer;
pub mod local;
pub mod mcp;
pub mod mcp_upstreams;
pub mod nginx;
pub mod otlp;
pub mod python;
pub mod raw;
pub mod recording_proxy;
pub mod records;
pub mod replica;
pub mod stateless;
pub mod tls;
pub mod upstream;
pub mod web;

pub use local::{free_port, repo, unix_seconds};
// Every test binary uses some of these, none uses all.
#[allow(unused_imports)]
pub use mcp::{
    McpClient, Reply, SseStream, answer, call_response, elicitation_request, elicitations, next_notes, note, publish,
    text, url_of,
};
#[allow(unused_imports)]
pub use web::{Browser, Page, assert_lists_tools, confirm_payment, description, unescape};

/// How long a test waits for something that must happen: generous, it only guards against a test
/// hanging and measures nothing. Checks that something does NOT happen name their own, shorter
/// window.
pub const WAIT: Duration = Duration::from_secs(10);
/// How long a process of its own (a replica, Caddy) may take to come up: it starts, connects and
/// migrates while the suite runs a dozen others on two cores.
pub const STARTUP: Duration = Duration::from_secs(30);

/// Everything gatehouse logs in this test binary (one global subscriber, at DEBUG), so tests can
/// prove that no token or secret reaches a log line. Call it before starting a server.
pub fn captured_logs() -> Arc<Mutex<Vec<u8>>> {
    static LOGS: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    LOGS.get_or_init(|| {
        let logs = Arc::new(Mutex::new(Vec::new()));
        let sink = logs.clone();
        let writer = move || LogWriter(sink.clone());
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter(gatehouse::cli::log_filter_of(Some("debug")))
            .with_ansi(false)
            .with_writer(writer)
            .finish();
        let _ = tracing::subscriber::set_global_default(subscriber);
        logs
    })
    .clone()
}

/// The captured logs as text.
pub fn logged_text() -> String {
    String::from_utf8_lossy(
        &captured_logs()
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
    )
    .into_owned()
}

struct LogWriter(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Postgres,
    Sqlite,
}

/// One test per backend, declared with its body:
///
/// ```ignore
/// backend_test!(
///     /// What it proves.
///     async fn the_name(backend: Backend) { ... }
/// );
/// ```
///
/// makes `the_name::sqlite` and `the_name::postgres`; the body sees the file's items through
/// `use super::*`. The PostgreSQL test passes without running when [`postgres_admin_url`] finds
/// no server (and fails under `CI=true`). Parentheses, not braces, so rustfmt formats the body.
#[macro_export]
macro_rules! backend_test {
    ($(#[$attribute:meta])* async fn $name:ident($backend:ident: $backend_type:ty) $body:block) => {
        $(#[$attribute])*
        mod $name {
            use super::*;

            async fn test_body($backend: $backend_type) $body

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                test_body($crate::common::Backend::Sqlite).await
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                if $crate::common::postgres_admin_url().await.is_some() {
                    test_body($crate::common::Backend::Postgres).await
                }
            }
        }
    };
}

/// One test on PostgreSQL only (replicas share a database only there), declared with its body
/// like [`backend_test`]; it passes without running when there is no PostgreSQL server (and
/// fails under `CI=true`).
#[macro_export]
macro_rules! postgres_test {
    ($(#[$attribute:meta])* async fn $name:ident() $body:block) => {
        $(#[$attribute])*
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            if $crate::common::postgres_admin_url().await.is_some() $body
        }
    };
}

/// Tries `attempt` until it gives a value, pausing briefly between tries: for a condition that
/// becomes true a moment later (another replica catching up, a server getting ready). Panics
/// naming `what` after [`WAIT`], which only guards against hanging.
pub async fn eventually<T>(what: &str, attempt: impl AsyncFnMut() -> Option<T>) -> T {
    eventually_within(WAIT, what, attempt).await
}

/// [`eventually`] with a limit of its own ([`STARTUP`] for a process coming up).
pub async fn eventually_within<T>(limit: Duration, what: &str, mut attempt: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if let Some(value) = attempt().await {
            return value;
        }
        assert!(tokio::time::Instant::now() < deadline, "{what}: not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until a server started as its own process (`bind` is its `host:port`) answers
/// `/readyz` with success.
pub async fn until_ready(bind: &str) {
    let http = reqwest::Client::new();
    eventually_within(STARTUP, &format!("the server at {bind} became ready"), async || {
        http.get(format!("http://{bind}/readyz"))
            .send()
            .await
            .is_ok_and(|r| r.status().is_success())
            .then_some(())
    })
    .await;
}

static POSTGRES: OnceCell<Option<String>> = OnceCell::const_new();

/// The PostgreSQL server for tests: `TEST_DATABASE_URL`, else 127.0.0.1:5432 when it answers.
/// `scripts/test` starts a throwaway cluster when neither exists. Without any, PostgreSQL tests
/// skip loudly, and fail under `CI=true`.
pub async fn postgres_admin_url() -> Option<String> {
    POSTGRES
        .get_or_init(|| async {
            let candidate = std::env::var("TEST_DATABASE_URL")
                .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned());
            let skip_requested = std::env::var("GATEHOUSE_SKIP_POSTGRES").is_ok_and(|v| v == "1");
            let reachable = !skip_requested
                && tokio::time::timeout(Duration::from_secs(5), sqlx::PgConnection::connect(&candidate))
                    .await
                    .is_ok_and(|c| c.is_ok());
            if reachable {
                drop_stale_databases(&candidate).await;
                return Some(candidate);
            }
            let message = format!(
                "\n!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n\
                 !!! PostgreSQL is not reachable at {candidate}\n\
                 !!! PostgreSQL tests are SKIPPED. Set TEST_DATABASE_URL or run scripts/test.\n\
                 !!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n"
            );
            assert!(
                std::env::var("CI").map_or(true, |v| v != "true"),
                "CI=true requires PostgreSQL: {message}"
            );
            eprintln!("{message}");
            None
        })
        .await
        .clone()
}

const DATABASE_PREFIX: &str = "gh_test_";

/// Databases of earlier runs (named with their creation time) older than an hour are dropped.
async fn drop_stale_databases(admin_url: &str) {
    let Ok(mut admin) = sqlx::PgConnection::connect(admin_url).await else {
        return;
    };
    let names: Vec<(String,)> = sqlx::query_as("SELECT datname FROM pg_database WHERE datname LIKE 'gh_test_%'")
        .fetch_all(&mut admin)
        .await
        .unwrap_or_default();
    let cutoff = unix_seconds().saturating_sub(3600);
    for (name,) in names {
        let created = name
            .trim_start_matches(DATABASE_PREFIX)
            .split('_')
            .next()
            .and_then(|s| s.parse::<u64>().ok());
        if created.is_some_and(|t| t < cutoff) {
            let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
                "DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"
            )))
            .execute(&mut admin)
            .await;
        }
    }
}

/// A database of its own for one test.
pub struct TestDatabase {
    pub url: String,
    pub backend: Backend,
    _dir: Option<tempfile::TempDir>,
}

impl TestDatabase {
    pub async fn new(backend: Backend) -> Self {
        match backend {
            Backend::Sqlite => {
                let dir = tempfile::tempdir().expect("temp dir");
                let url = format!("sqlite://{}", dir.path().join("gatehouse.db").display());
                Self {
                    url,
                    backend,
                    _dir: Some(dir),
                }
            }
            Backend::Postgres => {
                let admin_url = postgres_admin_url()
                    .await
                    .expect("PostgreSQL tests run only when it is reachable");
                let name = format!("{DATABASE_PREFIX}{}_{}", unix_seconds(), uuid::Uuid::now_v7().simple());
                let mut admin = sqlx::PgConnection::connect(&admin_url).await.expect("connect as admin");
                sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE \"{name}\"")))
                    .execute(&mut admin)
                    .await
                    .expect("create database");
                let mut url = url::Url::parse(&admin_url).expect("admin url");
                url.set_path(&name);
                Self {
                    url: url.to_string(),
                    backend,
                    _dir: None,
                }
            }
        }
    }

    /// A direct pool, to look at what the server stored.
    pub async fn query_count(&self, sql: &'static str) -> i64 {
        match self.backend {
            Backend::Postgres => {
                let mut conn = sqlx::PgConnection::connect(&self.url).await.expect("connect");
                sqlx::query_scalar(sql).fetch_one(&mut conn).await.expect("count query")
            }
            Backend::Sqlite => {
                let mut conn = sqlx::SqliteConnection::connect(&self.url).await.expect("connect");
                sqlx::query_scalar(sql).fetch_one(&mut conn).await.expect("count query")
            }
        }
    }

    /// The pids of gatehouse's pooled PostgreSQL connections to this database (the bus's LISTEN
    /// connection names itself apart).
    pub async fn gatehouse_backends(&self) -> Vec<i32> {
        let mut conn = sqlx::PgConnection::connect(&self.url).await.expect("connect");
        sqlx::query_scalar(
            "SELECT pid FROM pg_stat_activity
             WHERE datname = current_database() AND application_name = 'gatehouse' ORDER BY pid",
        )
        .fetch_all(&mut conn)
        .await
        .expect("backends")
    }
}

impl TestDatabase {
    /// Every stored token, verifier, event, form value, sealed form secret, upstream catalogue,
    /// audit detail and text column, as bytes: tests look for secrets in it.
    pub async fn everything_stored(&self) -> Vec<u8> {
        let mut all = Vec::new();
        match self.backend {
            Backend::Postgres => {
                let mut conn = sqlx::PgConnection::connect(&self.url).await.expect("connect");
                type Row = (Vec<u8>, Option<Vec<u8>>, Option<String>);
                let tokens: Vec<Row> =
                    sqlx::query_as("SELECT access_token, refresh_token, account_label FROM connections")
                        .fetch_all(&mut conn)
                        .await
                        .expect("connections");
                for (access, refresh, label) in tokens {
                    all.extend(access);
                    all.extend(refresh.unwrap_or_default());
                    all.extend(label.unwrap_or_default().into_bytes());
                }
                for sql in [
                    "SELECT encode(pkce_verifier, 'escape') FROM oauth_flows",
                    "SELECT message::text FROM session_events",
                    "SELECT url || message || requirement || COALESCE(detail, '') FROM elicitations",
                    "SELECT client_info::text FROM sessions",
                    "SELECT fields::text FROM form_values",
                    "SELECT fields::text FROM form_answers",
                    "SELECT tools::text FROM upstream_catalogues",
                    "SELECT detail::text FROM audit",
                ] {
                    let rows: Vec<(String,)> = sqlx::query_as(sql).fetch_all(&mut conn).await.expect("rows");
                    all.extend(rows.into_iter().flat_map(|(t,)| t.into_bytes()));
                }
                for sql in [
                    "SELECT secrets FROM form_values WHERE secrets IS NOT NULL",
                    "SELECT secrets FROM form_answers WHERE secrets IS NOT NULL",
                ] {
                    let rows: Vec<(Vec<u8>,)> = sqlx::query_as(sql).fetch_all(&mut conn).await.expect("rows");
                    all.extend(rows.into_iter().flat_map(|(b,)| b));
                }
            }
            Backend::Sqlite => {
                let mut conn = sqlx::SqliteConnection::connect(&self.url).await.expect("connect");
                for sql in [
                    "SELECT access_token FROM connections",
                    "SELECT refresh_token FROM connections WHERE refresh_token IS NOT NULL",
                    "SELECT pkce_verifier FROM oauth_flows",
                    "SELECT CAST(message AS BLOB) FROM session_events",
                    "SELECT CAST(url || message || requirement || COALESCE(detail, '') AS BLOB) FROM elicitations",
                    "SELECT CAST(client_info AS BLOB) FROM sessions",
                    "SELECT CAST(fields AS BLOB) FROM form_values",
                    "SELECT CAST(fields AS BLOB) FROM form_answers",
                    "SELECT CAST(tools AS BLOB) FROM upstream_catalogues",
                    "SELECT CAST(detail AS BLOB) FROM audit",
                    "SELECT secrets FROM form_values WHERE secrets IS NOT NULL",
                    "SELECT secrets FROM form_answers WHERE secrets IS NOT NULL",
                ] {
                    let rows: Vec<(Vec<u8>,)> = sqlx::query_as(sql).fetch_all(&mut conn).await.expect("rows");
                    all.extend(rows.into_iter().flat_map(|(b,)| b));
                }
            }
        }
        all
    }

    /// Runs one statement on the database, as an operator (or a fault) would.
    pub async fn execute(&self, sql: &'static str) {
        match self.backend {
            Backend::Postgres => {
                let mut conn = sqlx::PgConnection::connect(&self.url).await.expect("connect");
                sqlx::query(sql).execute(&mut conn).await.expect("statement");
            }
            Backend::Sqlite => {
                let mut conn = sqlx::SqliteConnection::connect(&self.url).await.expect("connect");
                sqlx::query(sql).execute(&mut conn).await.expect("statement");
            }
        }
    }

    /// Every pending elicitation is marked expired, as the sweeper marks it, with an expiry one
    /// millisecond after the latest OAuth callback began (when it used its flow): it expired while
    /// that callback was under way.
    pub async fn expire_during_callback(&self) {
        self.execute(match self.backend {
            Backend::Postgres => {
                "UPDATE elicitations SET status = 'expired',
                     expires_at = (SELECT MAX(used_at) + interval '1 millisecond' FROM oauth_flows)
                 WHERE status = 'pending'"
            }
            Backend::Sqlite => {
                "UPDATE elicitations SET status = 'expired', expires_at = (SELECT MAX(used_at) + 1 FROM oauth_flows)
                 WHERE status = 'pending'"
            }
        })
        .await;
    }

    /// Moves every elicitation's expiry into the past.
    pub async fn expire_elicitations(&self) {
        match self.backend {
            Backend::Postgres => {
                let mut conn = sqlx::PgConnection::connect(&self.url).await.expect("connect");
                sqlx::query("UPDATE elicitations SET expires_at = now() - interval '1 minute'")
                    .execute(&mut conn)
                    .await
                    .expect("update");
            }
            Backend::Sqlite => {
                let mut conn = sqlx::SqliteConnection::connect(&self.url).await.expect("connect");
                // A minute ago, as on PostgreSQL: not so long ago that the retention sweep deletes it.
                let minute_ago = (chrono::Utc::now() - chrono::Duration::minutes(1)).timestamp_millis();
                sqlx::query("UPDATE elicitations SET expires_at = ?1")
                    .bind(minute_ago)
                    .execute(&mut conn)
                    .await
                    .expect("update");
            }
        }
    }
}

/// Builds a configuration the way the binary does: TOML text plus environment-style overrides.
pub fn config(toml: &str, env: &[(&str, &str)]) -> Config {
    load_config(toml, env).expect("valid test configuration")
}

/// [`config`], or the error that refuses it.
pub fn load_config(toml: &str, env: &[(&str, &str)]) -> Result<Config, gatehouse::config::ConfigError> {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("gatehouse.toml");
    std::fs::write(&path, toml).expect("write config");
    let env: BTreeMap<String, String> = env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    Config::load(ConfigSource {
        file: Some(&path),
        env: &env,
    })
}

/// The key and message of the error that refuses this configuration; panics when it is accepted
/// or refused without naming a key.
pub fn refusal(toml: &str, env: &[(&str, &str)]) -> (String, String) {
    match load_config(toml, env) {
        Err(gatehouse::config::ConfigError::Key { key, message }) => (key, message),
        Err(other) => panic!("expected an error naming a key, got {other}"),
        Ok(_) => panic!("expected the configuration to be refused: {toml}"),
    }
}

/// The real server on a loopback port.
pub struct TestServer {
    pub addr: SocketAddr,
    pub url: String,
    pub state: AppState,
    /// The MCP endpoint's own parts (its sessions, the calls running).
    pub mcp: McpState,
    /// The metrics listener's address, when the configuration sets `server.metrics_bind` (any
    /// value: the test server listens on a free loopback port instead).
    pub metrics_addr: Option<SocketAddr>,
    shutdown: CancellationToken,
    server: tokio::task::JoinHandle<std::io::Result<()>>,
    metrics: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl TestServer {
    pub async fn start(database: &TestDatabase, extra_toml: &str) -> Self {
        Self::start_on(database, extra_toml, "127.0.0.1:0").await
    }

    /// Starts on a free port known beforehand, so the configuration can point a tool at the server
    /// itself: `toml` gets the server's address, `127.0.0.1:PORT`.
    pub async fn start_addressed(database: &TestDatabase, toml: impl FnOnce(&str) -> String) -> Self {
        let addr = format!("127.0.0.1:{}", free_port());
        Self::start_on(database, &toml(&addr), &addr).await
    }

    /// Starts on `bind` (port 0 picks a free one); the database URL goes in as an override.
    pub async fn start_on(database: &TestDatabase, extra_toml: &str, bind: &str) -> Self {
        Self::start_resolving_on(database, extra_toml, bind, gatehouse::outbound::system_resolver()).await
    }

    /// Starts with every outbound request resolving names with `resolver`.
    pub async fn start_resolving(
        database: &TestDatabase,
        extra_toml: &str,
        resolver: Arc<dyn reqwest::dns::Resolve>,
    ) -> Self {
        Self::start_resolving_on(database, extra_toml, "127.0.0.1:0", resolver).await
    }

    async fn start_resolving_on(
        database: &TestDatabase,
        extra_toml: &str,
        bind: &str,
        resolver: Arc<dyn reqwest::dns::Resolve>,
    ) -> Self {
        let listener = tokio::net::TcpListener::bind(bind).await.expect("bind test server");
        let addr = listener.local_addr().expect("local addr");
        let mut config = config(
            extra_toml,
            &[
                ("GATEHOUSE_DATABASE__URL", &database.url),
                ("GATEHOUSE_SECRETS__KEYS", TEST_KEY),
            ],
        );
        config.server.bind = addr;
        config.server.sse_keep_alive = Duration::from_secs(1);
        config.server.sse_retry = Duration::from_millis(250);
        let shutdown = CancellationToken::new();
        let (app, tasks) = App::build_resolving(config, resolver, shutdown.clone())
            .await
            .expect("build the app");
        let state = app.state.clone();
        let (metrics_addr, metrics) = match state.config.server.metrics_bind {
            Some(_) => {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                    .await
                    .expect("bind metrics");
                let metrics_addr = listener.local_addr().expect("metrics addr");
                let stopped = shutdown.clone().cancelled_owned();
                let metrics = tokio::spawn(gatehouse::serve_metrics(listener, state.clone(), stopped));
                (Some(metrics_addr), Some(metrics))
            }
            None => (None, None),
        };
        let server_shutdown = shutdown.clone();
        let mcp = app.mcp.clone();
        let server = tokio::spawn(gatehouse::serve(listener, app, async move {
            server_shutdown.cancelled().await
        }));
        Self {
            addr,
            url: format!("http://{addr}/mcp"),
            state,
            mcp,
            metrics_addr,
            shutdown,
            server,
            metrics,
            tasks,
        }
    }

    /// Graceful shutdown, as at SIGTERM; waits for the server and its background tasks.
    pub async fn stop(self) {
        self.shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(10), self.server)
            .await
            .expect("server stops in time")
            .expect("join")
            .expect("serve");
        if let Some(metrics) = self.metrics {
            tokio::time::timeout(Duration::from_secs(10), metrics)
                .await
                .expect("metrics listener stops in time")
                .expect("join")
                .expect("serve metrics");
        }
        for task in self.tasks {
            tokio::time::timeout(Duration::from_secs(10), task)
                .await
                .expect("task stops in time")
                .expect("join");
        }
    }

    pub fn client(&self) -> McpClient {
        McpClient::new(&self.url)
    }

    /// A client of `user` (named in `X-Forwarded-User`, header identity), initialized on
    /// 2025-11-25 with URL- and form-mode elicitation.
    pub async fn eliciting_client(&self, user: &str) -> McpClient {
        let mut client = self.client().with_user("x-forwarded-user", user);
        client
            .initialize_with("2025-11-25", json!({"elicitation": {"form": {}, "url": {}}}))
            .await;
        client
    }

    /// `user` (through `client`) calls `tool`, which asks for a form by -32042, and fills it in
    /// in the browser with its `token` field set to `token`.
    pub async fn fill_in_token(&self, client: &McpClient, user: &str, tool: &str, token: &str) {
        let reply = client
            .request("tools/call", json!({"name": tool, "arguments": {}}))
            .await;
        let listed = elicitations(&reply);
        assert_eq!(listed.len(), 1, "{}", reply.body);
        self.fill_in_form(&url_of(&listed[0]), user, token).await;
    }

    /// `user` opens the form page at `url` in the browser and submits it with its `token` field
    /// set to `token`.
    pub async fn fill_in_form(&self, url: &str, user: &str, token: &str) {
        let browser = Browser::as_user("x-forwarded-user", user);
        let page = browser.get(url).await;
        assert_eq!(page.status, reqwest::StatusCode::OK, "{}", page.body);
        let sent = browser
            .post_form(
                url,
                &self.base(),
                &[("csrf", &page.csrf()), ("token", token), ("action", "submit")],
            )
            .await;
        assert!(
            sent.status.is_success() || sent.status.is_redirection(),
            "{}",
            sent.body
        );
    }

    /// One retention sweep by this server, once it gets the lease (its own periodic sweep, or
    /// another replica's, may hold it for a moment).
    pub async fn sweep_retention(&self) -> gatehouse::retention::Swept {
        eventually("the retention lease was free", async || {
            self.state.retention.sweep().await.expect("retention sweep")
        })
        .await
    }

    pub fn base(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// `/metrics` on the metrics listener, as Prometheus scrapes it: the text, after checking it
    /// answered 200 with the OpenMetrics content type.
    pub async fn scrape(&self) -> String {
        let addr = self.metrics_addr.expect("the test server has a metrics listener");
        let response = reqwest::get(format!("http://{addr}/metrics")).await.expect("scrape");
        assert_eq!(response.status(), reqwest::StatusCode::OK);
        let content_type = response.headers()[reqwest::header::CONTENT_TYPE]
            .to_str()
            .expect("text");
        assert!(
            content_type.starts_with("application/openmetrics-text"),
            "{content_type}"
        );
        response.text().await.expect("metrics text")
    }
}

/// The key ring of test servers (base64 of 32 bytes); replicas of one test share it.
pub const TEST_KEY: &str = "dGVzdC1rZXktZm9yLWdhdGVob3VzZS10ZXN0cy0zMmI=";

/// Header identity mode behind a reverse proxy on loopback, which names the user in
/// `X-Forwarded-User`.
pub const HEADER_IDENTITY: &str = include_str!("../fixtures/header_identity.toml");

/// [`HEADER_IDENTITY`] with the user's groups in `X-Forwarded-Groups`, for rules by `groups`.
pub fn header_identity_with_groups() -> String {
    HEADER_IDENTITY.replacen(
        "[identity]\n",
        "[identity]\ngroups_header = \"X-Forwarded-Groups\"\n",
        1,
    )
}

/// A payment tool that asks for a confirmation within the call (`elicit = "request"`, waiting up
/// to `timeout`), through a call-scoped form showing the arguments. It calls the server's own
/// /healthz, so `addr` must be the server's (see [`TestServer::start_addressed`]).
pub fn pay_tool(addr: &str, timeout: &str) -> String {
    include_str!("../fixtures/pay_tool.toml")
        .replace("GATEHOUSE", addr)
        .replace("TIMEOUT", timeout)
}

/// The arguments tests call the [`pay_tool`] with: markup, an ampersand and quotes, which its page
/// must show escaped.
pub fn pay_arguments() -> Value {
    json!({"amount": "12.40", "payee": "<b>ACME</b> & \"Sons\""})
}
