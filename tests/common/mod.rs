//! Test harness: real databases (a fresh PostgreSQL database or SQLite file per test), the real
//! server on port 0, and a small MCP client speaking raw HTTP so tests see every status and header.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use gatehouse::config::ConfigSource;
use gatehouse::{AppState, Config};
use reqwest::StatusCode;
use serde_json::{Value, json};
use sqlx::Connection;
use tokio::sync::OnceCell;
use tokio_util::sync::CancellationToken;

pub mod browser;
pub mod fake_oauth;
pub mod upstream;

/// How long a test waits for something that must happen: generous, it only guards against a test
/// hanging and measures nothing. Checks that something does NOT happen name their own, shorter
/// window.
pub const WAIT: Duration = Duration::from_secs(10);

/// Everything gatehouse logs in this test binary (one global subscriber, at DEBUG), so tests can
/// prove that no token or secret reaches a log line. Call it before starting a server.
pub fn captured_logs() -> Arc<Mutex<Vec<u8>>> {
    static LOGS: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    LOGS.get_or_init(|| {
        let logs = Arc::new(Mutex::new(Vec::new()));
        let sink = logs.clone();
        let writer = move || LogWriter(sink.clone());
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
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

/// The repository root (tests run scripts and read files from it).
pub fn repo() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
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
pub async fn eventually<T>(what: &str, mut attempt: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if let Some(value) = attempt().await {
            return value;
        }
        assert!(tokio::time::Instant::now() < deadline, "{what}: not within {WAIT:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
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

fn unix_seconds() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

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
}

impl TestDatabase {
    /// Every stored token, verifier, event, form value, sealed form secret and text column, as
    /// bytes: tests look for secrets in it.
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
                sqlx::query("UPDATE elicitations SET expires_at = 0")
                    .execute(&mut conn)
                    .await
                    .expect("update");
            }
        }
    }
}

/// Builds a configuration the way the binary does: TOML text plus environment-style overrides.
pub fn config(toml: &str, env: &[(&str, &str)]) -> Config {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("gatehouse.toml");
    std::fs::write(&path, toml).expect("write config");
    let env: BTreeMap<String, String> = env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    Config::load(ConfigSource {
        file: Some(&path),
        env: &env,
    })
    .expect("valid test configuration")
}

/// The real server on a loopback port.
pub struct TestServer {
    pub addr: SocketAddr,
    pub url: String,
    pub state: AppState,
    shutdown: CancellationToken,
    server: tokio::task::JoinHandle<std::io::Result<()>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl TestServer {
    pub async fn start(database: &TestDatabase, extra_toml: &str) -> Self {
        Self::start_on(database, extra_toml, "127.0.0.1:0").await
    }

    /// Starts on `bind` (port 0 picks a free one); the database URL goes in as an override.
    pub async fn start_on(database: &TestDatabase, extra_toml: &str, bind: &str) -> Self {
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
        let (state, tasks) = AppState::build(config, shutdown.clone())
            .await
            .expect("build app state");
        let server_shutdown = shutdown.clone();
        let server = tokio::spawn(gatehouse::serve(listener, state.clone(), async move {
            server_shutdown.cancelled().await
        }));
        Self {
            addr,
            url: format!("http://{addr}/mcp"),
            state,
            shutdown,
            server,
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

    pub fn base(&self) -> String {
        format!("http://{}", self.addr)
    }
}

/// The key ring of test servers (base64 of 32 bytes); replicas of one test share it.
pub const TEST_KEY: &str = "dGVzdC1rZXktZm9yLWdhdGVob3VzZS10ZXN0cy0zMmI=";

pub const ACCEPT_BOTH: &str = "application/json, text/event-stream";

/// An MCP client over raw HTTP.
#[derive(Clone)]
pub struct McpClient {
    pub url: String,
    pub http: reqwest::Client,
    pub session: Option<String>,
    pub protocol_version: String,
    pub next_id: std::sync::Arc<std::sync::atomic::AtomicI64>,
    /// A header sent with every request, as a reverse proxy in `header` identity mode adds it.
    pub identity: Option<(String, String)>,
}

pub struct Reply {
    pub status: StatusCode,
    pub headers: reqwest::header::HeaderMap,
    pub body: Value,
}

impl McpClient {
    pub fn new(url: &str) -> Self {
        Self {
            url: url.to_owned(),
            http: reqwest::Client::builder()
                .pool_max_idle_per_host(0)
                .build()
                .expect("client"),
            session: None,
            protocol_version: "2025-11-25".into(),
            next_id: std::sync::Arc::new(std::sync::atomic::AtomicI64::new(1)),
            identity: None,
        }
    }

    /// This client with every request carrying `header: value` (header identity mode).
    pub fn with_user(self, header: &str, value: &str) -> Self {
        Self {
            identity: Some((header.to_owned(), value.to_owned())),
            ..self
        }
    }

    /// Initializes with the given protocol version and capabilities, then sends `initialized`.
    pub async fn initialize_with(&mut self, version: &str, capabilities: Value) -> Reply {
        let body = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": version, "capabilities": capabilities,
            "clientInfo": {"name": "gatehouse-tests", "version": "1.0"}}});
        let reply = self.post_raw(&body, &[]).await;
        assert_eq!(reply.status, StatusCode::OK, "initialize: {}", reply.body);
        self.session = Some(
            reply
                .headers
                .get("mcp-session-id")
                .expect("Mcp-Session-Id on initialize")
                .to_str()
                .expect("ascii")
                .to_owned(),
        );
        self.protocol_version = reply.body["result"]["protocolVersion"]
            .as_str()
            .expect("version")
            .to_owned();
        let initialized = self.notify("notifications/initialized", json!({})).await;
        assert_eq!(initialized, StatusCode::ACCEPTED);
        reply
    }

    pub async fn initialize(&mut self) -> Reply {
        self.initialize_with("2025-11-25", json!({"elicitation": {"url": {}, "form": {}}}))
            .await
    }

    fn session_headers(&self) -> Vec<(String, String)> {
        let mut headers = vec![("MCP-Protocol-Version".to_owned(), self.protocol_version.clone())];
        if let Some(session) = &self.session {
            headers.push(("Mcp-Session-Id".to_owned(), session.clone()));
        }
        headers.extend(self.identity.clone());
        headers
    }

    /// POSTs `body` with the usual headers plus `extra` (which replace same-named ones).
    pub async fn post_raw(&self, body: &Value, extra: &[(&str, &str)]) -> Reply {
        self.post_bytes(body.to_string().into_bytes(), extra).await
    }

    pub async fn post_bytes(&self, body: Vec<u8>, extra: &[(&str, &str)]) -> Reply {
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert("accept", ACCEPT_BOTH.parse().expect("header"));
        headers.insert("content-type", "application/json".parse().expect("header"));
        for (name, value) in self.session_headers() {
            headers.insert(
                reqwest::header::HeaderName::from_bytes(name.as_bytes()).expect("name"),
                value.parse().expect("value"),
            );
        }
        for (name, value) in extra {
            let name = reqwest::header::HeaderName::from_bytes(name.as_bytes()).expect("name");
            if value.is_empty() {
                headers.remove(&name);
            } else {
                headers.insert(name, value.parse().expect("value"));
            }
        }
        let response = self
            .http
            .post(&self.url)
            .headers(headers)
            .body(body)
            .send()
            .await
            .expect("POST /mcp");
        let status = response.status();
        let headers = response.headers().clone();
        let bytes = response.bytes().await.expect("body");
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).expect("JSON body")
        };
        Reply { status, headers, body }
    }

    pub async fn request(&self, method: &str, params: Value) -> Reply {
        let id = self.next_id.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.post_raw(
            &json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
            &[],
        )
        .await
    }

    /// A request whose answer comes as an SSE stream (a call that may ask for input on the way).
    pub async fn request_stream(&self, method: &str, params: Value) -> SseStream {
        let id = self.next_id.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut request = self
            .http
            .post(&self.url)
            .header("accept", ACCEPT_BOTH)
            .header("content-type", "application/json")
            .body(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string());
        for (name, value) in self.session_headers() {
            request = request.header(name, value);
        }
        let response = request.send().await.expect("POST /mcp");
        assert_eq!(response.status(), StatusCode::OK);
        let content_type = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        assert!(
            content_type.starts_with("text/event-stream"),
            "expected an SSE answer, got {content_type}: {:?}",
            response.text().await
        );
        SseStream::new(response)
    }

    /// A request that must succeed; returns its `result`.
    pub async fn call(&self, method: &str, params: Value) -> Value {
        let reply = self.request(method, params).await;
        assert_eq!(reply.status, StatusCode::OK, "{method}: {}", reply.body);
        assert!(reply.body.get("error").is_none(), "{method} failed: {}", reply.body);
        reply.body["result"].clone()
    }

    pub async fn notify(&self, method: &str, params: Value) -> StatusCode {
        self.post_raw(&json!({"jsonrpc": "2.0", "method": method, "params": params}), &[])
            .await
            .status
    }

    /// Opens the session's GET stream, resuming after `last_event_id` when given.
    pub async fn open_stream(&self, last_event_id: Option<&str>) -> SseStream {
        let mut request = self.http.get(&self.url).header("accept", "text/event-stream");
        for (name, value) in self.session_headers() {
            request = request.header(name, value);
        }
        if let Some(id) = last_event_id {
            request = request.header("last-event-id", id);
        }
        let response = request.send().await.expect("GET /mcp");
        assert_eq!(
            response.status(),
            StatusCode::OK,
            "GET stream: {:?}",
            response.text().await
        );
        SseStream::new(response)
    }

    pub async fn delete(&self) -> StatusCode {
        let mut request = self.http.delete(&self.url);
        for (name, value) in self.session_headers() {
            request = request.header(name, value);
        }
        request.send().await.expect("DELETE /mcp").status()
    }
}

/// One SSE event as received.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SseEvent {
    pub id: Option<String>,
    pub event: Option<String>,
    pub data: String,
    pub retry: Option<u64>,
}

impl SseEvent {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.data).unwrap_or_else(|e| panic!("event data is not JSON ({e}): {:?}", self.data))
    }
}

pub struct SseStream {
    bytes: futures::stream::BoxStream<'static, reqwest::Result<bytes::Bytes>>,
    buffer: String,
    pub ended: bool,
}

impl SseStream {
    pub fn new(response: reqwest::Response) -> Self {
        Self {
            bytes: response.bytes_stream().boxed(),
            buffer: String::new(),
            ended: false,
        }
    }

    /// The next event (comments skipped), or None when the stream ends or `wait` passes.
    pub async fn next_event(&mut self, wait: Duration) -> Option<SseEvent> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                let mut event = SseEvent::default();
                let mut has_field = false;
                for line in block.lines() {
                    if line.starts_with(':') || line.is_empty() {
                        continue;
                    }
                    has_field = true;
                    let (field, value) = line
                        .split_once(':')
                        .map_or((line, ""), |(f, v)| (f, v.strip_prefix(' ').unwrap_or(v)));
                    match field {
                        "id" => event.id = Some(value.to_owned()),
                        "event" => event.event = Some(value.to_owned()),
                        "data" => {
                            if !event.data.is_empty() {
                                event.data.push('\n');
                            }
                            event.data.push_str(value);
                        }
                        "retry" => event.retry = value.parse().ok(),
                        _ => {}
                    }
                }
                if has_field {
                    return Some(event);
                }
                continue;
            }
            if self.ended {
                return None;
            }
            match tokio::time::timeout_at(deadline, self.bytes.next()).await {
                Err(_) => return None,
                Ok(None) | Ok(Some(Err(_))) => {
                    self.ended = true;
                }
                Ok(Some(Ok(chunk))) => self
                    .buffer
                    .push_str(&String::from_utf8_lossy(&chunk).replace("\r\n", "\n")),
            }
        }
    }

    /// The next event that carries a JSON-RPC message.
    pub async fn next_message(&mut self, wait: Duration) -> Option<(SseEvent, Value)> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let event = self.next_event(left).await?;
            if !event.data.is_empty() {
                let message = event.json();
                return Some((event, message));
            }
        }
    }
}

/// Appends a message to a session's event log through the server's own bus.
pub async fn publish(server: &TestServer, session: &str, message: &Value) -> i64 {
    let id = session.parse().expect("session id");
    server
        .state
        .bus
        .publish(&id, message)
        .await
        .expect("publish")
        .expect("session exists")
}

pub fn note(n: i64) -> Value {
    json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "logger": "test", "data": {"n": n}}})
}

/// A payment tool that asks for a confirmation within the call (`elicit = "request"`, waiting up
/// to `timeout`), through a call-scoped form showing the arguments. It calls the server's own
/// /healthz, so `port` must be the server's.
pub fn pay_tool(port: u16, timeout: &str) -> String {
    format!(
        r#"
[elicitation]
progress_interval = "200ms"

[[forms]]
id = "confirm_pay"
title = "Confirm payment"
description = "Pay {{{{args.amount}}}} EUR to {{{{args.payee}}}}?"
scope = "call"
submit_label = "Pay"
[[forms.fields]]
name = "confirm"
label = "I confirm this payment"
type = "boolean"
required = true

[[tools]]
name = "pay"
description = "Pays someone, after the user confirms"
requires = ["form:confirm_pay"]
elicit = "request"
elicit_timeout = "{timeout}"
input_schema = {{ type = "object", properties = {{ amount = {{ type = "string" }}, payee = {{ type = "string" }} }}, required = ["amount", "payee"] }}
http = {{ url = "http://127.0.0.1:{port}/healthz" }}
"#
    )
}

/// The text of a form page's description, which must arrive escaped (no raw markup or quotes).
pub fn description(body: &str) -> String {
    let start = body.find("<p class=\"description\">").expect("a description") + "<p class=\"description\">".len();
    let shown = &body[start..start + body[start..].find("</p>").expect("end")];
    assert!(
        !shown.contains('<') && !shown.contains('"'),
        "the description is escaped: {shown}"
    );
    unescape(shown)
}

/// Decodes the entities template engines write (askama: `&#60;`, minijinja: `&lt;`, `&#x27;`).
pub fn unescape(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find('&') {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        let decoded = rest.find(';').and_then(|end| {
            let entity = &rest[1..end];
            let c = match entity {
                "amp" => Some('&'),
                "lt" => Some('<'),
                "gt" => Some('>'),
                "quot" => Some('"'),
                "apos" => Some('\''),
                _ => entity
                    .strip_prefix("#x")
                    .or_else(|| entity.strip_prefix("#X"))
                    .and_then(|hex| u32::from_str_radix(hex, 16).ok())
                    .or_else(|| entity.strip_prefix('#').and_then(|dec| dec.parse().ok()))
                    .and_then(char::from_u32),
            };
            c.map(|c| (c, end))
        });
        match decoded {
            Some((c, end)) => {
                out.push(c);
                rest = &rest[end + 1..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// A browser: keeps cookies, follows no redirects, and can carry an identity header (as a
/// reverse proxy would add it).
pub struct Browser {
    http: reqwest::Client,
    cookies: std::sync::Mutex<Vec<(String, String)>>,
    identity: Option<(String, String)>,
}

pub struct Page {
    pub status: StatusCode,
    pub headers: reqwest::header::HeaderMap,
    pub body: String,
}

impl Page {
    pub fn location(&self) -> String {
        self.headers
            .get("location")
            .and_then(|v| v.to_str().ok())
            .expect("a Location header")
            .to_owned()
    }

    /// The value of the page's hidden `csrf` field.
    pub fn csrf(&self) -> String {
        let start = self.body.find("name=\"csrf\" value=\"").expect("a csrf field") + "name=\"csrf\" value=\"".len();
        self.body[start..].split('"').next().expect("value").to_owned()
    }
}

impl Browser {
    pub fn new() -> Self {
        Self {
            http: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .expect("client"),
            cookies: std::sync::Mutex::new(Vec::new()),
            identity: None,
        }
    }

    /// A browser whose requests carry `header: value` (header identity mode).
    pub fn as_user(header: &str, value: &str) -> Self {
        Self {
            identity: Some((header.to_owned(), value.to_owned())),
            ..Self::new()
        }
    }

    pub fn cookie_header(&self) -> String {
        let cookies = self.cookies.lock().expect("cookies");
        cookies
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("; ")
    }

    async fn send(&self, request: reqwest::RequestBuilder) -> Page {
        let mut request = request.header("cookie", self.cookie_header());
        if let Some((name, value)) = &self.identity {
            request = request.header(name.as_str(), value.as_str());
        }
        let response = request.send().await.expect("browser request");
        let status = response.status();
        let headers = response.headers().clone();
        {
            let mut cookies = self.cookies.lock().expect("cookies");
            for set in headers.get_all("set-cookie").iter().filter_map(|v| v.to_str().ok()) {
                let pair = set.split(';').next().unwrap_or("");
                if let Some((name, value)) = pair.split_once('=') {
                    cookies.retain(|(k, _)| k != name);
                    if !value.is_empty() {
                        cookies.push((name.to_owned(), value.to_owned()));
                    }
                }
            }
        }
        let body = response.text().await.unwrap_or_default();
        Page { status, headers, body }
    }

    pub async fn get(&self, url: &str) -> Page {
        self.send(self.http.get(url)).await
    }

    pub async fn post_form(&self, url: &str, origin: &str, fields: &[(&str, &str)]) -> Page {
        let body = url::form_urlencoded::Serializer::new(String::new())
            .extend_pairs(fields)
            .finish();
        let request = self
            .http
            .post(url)
            .header("content-type", "application/x-www-form-urlencoded")
            .header("origin", origin)
            .body(body);
        self.send(request).await
    }

    pub fn forget_cookies(&self) {
        self.cookies.lock().expect("cookies").clear();
    }

    /// Opens an elicitation URL and presses Continue: returns the provider's authorize URL.
    pub async fn continue_to_provider(&self, connect_url: &str) -> String {
        let page = self.get(connect_url).await;
        assert_eq!(page.status, StatusCode::OK, "connect page: {}", page.body);
        let origin = url::Url::parse(connect_url)
            .expect("url")
            .origin()
            .ascii_serialization();
        let redirect = self
            .post_form(connect_url, &origin, &[("action", "continue"), ("csrf", &page.csrf())])
            .await;
        assert_eq!(redirect.status, StatusCode::SEE_OTHER, "continue: {}", redirect.body);
        redirect.location()
    }

    /// At the provider: returns where it sends the browser back (the callback URL).
    pub async fn authorize(&self, authorize_url: &str) -> String {
        let page = self.get(authorize_url).await;
        assert_eq!(page.status, StatusCode::FOUND, "authorize: {}", page.body);
        page.location()
    }

    /// The whole sign-in: connect page, Continue, provider, callback. Returns the final page.
    pub async fn sign_in(&self, connect_url: &str) -> Page {
        let authorize = self.continue_to_provider(connect_url).await;
        let callback = self.authorize(&authorize).await;
        self.get(&callback).await
    }
}
