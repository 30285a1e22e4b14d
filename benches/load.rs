//! gatehouse's benchmark: starts the release binary on PostgreSQL and drives it over real HTTP,
//! next to the official TypeScript SDK's in-memory example server under the same load.
//!
//!   cargo bench --bench load                       # everything, default sizes
//!   cargo bench --bench load -- --duration 10 --clients 50 --streams 10000
//!
//! Measures `tools/call` throughput and latency at N concurrent clients (each with its own
//! session), the server's resident memory with many idle GET streams open, then a reconnect storm
//! beside them (`--storm`, default 10,000 new sessions opening their streams 200 at a time; 0
//! skips it), and the whole
//! URL-elicitation loop against a fake OAuth provider on two replicas, connected to PostgreSQL
//! without TLS and then with it (`--loop-tls off|on|both`; TLS needs a server with `ssl = on`),
//! `--loop-workers` (default 8) at once, each as fast as it goes or `--loop-rate` loops/s in all.
//! Section "upstream" (`--skip-upstream`): `tools/call` to a fast in-process rmcp server directly
//! and through gatehouse's `[[upstreams]]`, and memory per held upstream session
//! (`--upstream-users`, default 1,000).
//! Section "identity" (`--skip-identity`): `whoami` with header identity, then with bearer JWTs
//! from a fake identity provider (MCP authorization), back to back.
//! Section "stateless" (`--skip-stateless`): `whoami` in protocol 2026-07-28 beside 2025-11-25,
//! then `--held` retries (default 1,000) held at once on a replica, and `--completions` (default
//! 200) callbacks on the other replica each answering its held retry.
//! Section "metrics" (`--skip-metrics`): `whoami` without `server.metrics_bind`, then with it,
//! back to back, and `--scrapes` (default 200) `/metrics` scrapes timed while loaded; then with
//! metrics and every span exported over OTLP to a collector in this process.
//! Section "peers" (`--peers`, off by default; it installs FastMCP and ContextForge on demand):
//! the fast upstream directly, through gatehouse and through both peers, in `--peer-rounds`
//! (default 2) interleaved rounds.
//! PostgreSQL comes from TEST_DATABASE_URL or 127.0.0.1:5432; the benchmark works in a database
//! of its own. `GATEHOUSE_BENCH_BIN=path` measures another gatehouse build with this benchmark
//! (an older commit's, to measure back to back).

#[path = "load/caddy.rs"]
mod caddy;
#[path = "load/cpu.rs"]
mod cpu;
#[path = "../tests/common/echo.rs"]
mod echo;
#[path = "load/elicitation.rs"]
mod elicitation;
#[allow(dead_code)]
#[path = "../tests/common/fake_idp.rs"]
mod fake_idp;
#[allow(dead_code)]
#[path = "../tests/common/fake_oauth.rs"]
mod fake_oauth;
#[path = "load/fast_upstream.rs"]
mod fast_upstream;
#[path = "load/identity.rs"]
mod identity;
#[path = "../tests/common/local.rs"]
mod local;
#[path = "load/metrics.rs"]
mod metrics;
#[allow(dead_code)]
#[path = "../tests/common/otlp.rs"]
mod otlp;
#[path = "load/peers.rs"]
mod peers;
#[path = "load/stateless.rs"]
mod stateless;
#[path = "load/storm.rs"]
mod storm;
#[path = "load/streams.rs"]
mod streams;
#[path = "load/upstream.rs"]
mod upstream;

use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sqlx::Connection;
use tokio::process::{Child, Command};

// The fake identity provider reads the clock through the crate root, as in the tests' `common`.
use local::unix_seconds;
use streams::idle_streams;

struct Options {
    duration: Duration,
    warmup: Duration,
    clients: usize,
    streams: usize,
    /// New sessions in the reconnect storm after the idle streams (0: none).
    storm: usize,
    skip_baseline: bool,
    skip_load: bool,
    skip_streams: bool,
    skip_loop: bool,
    skip_upstream: bool,
    skip_identity: bool,
    skip_stateless: bool,
    skip_metrics: bool,
    /// The optional side-by-side section with FastMCP and ContextForge.
    peers: bool,
    peer_rounds: usize,
    scrapes: usize,
    upstream_users: usize,
    held: usize,
    completions: usize,
    loop_workers: usize,
    /// Loops started per second across the workers (unset: each worker starts its next at once).
    loop_rate: Option<f64>,
    loop_tls: Vec<Tls>,
}

/// The elicitation loop's connections to PostgreSQL: without TLS, or with it (`sslmode=require`).
#[derive(Clone, Copy)]
enum Tls {
    Off,
    On,
}

impl Tls {
    fn sslmode(self) -> &'static str {
        match self {
            Tls::Off => "disable",
            Tls::On => "require",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Tls::Off => "no TLS",
            Tls::On => "TLS",
        }
    }
}

impl Options {
    fn parse() -> Result<Self, String> {
        let mut options = Self {
            duration: Duration::from_secs(10),
            warmup: Duration::from_secs(2),
            clients: 50,
            streams: 10_000,
            storm: 10_000,
            skip_baseline: false,
            skip_load: false,
            skip_streams: false,
            skip_loop: false,
            skip_upstream: false,
            skip_identity: false,
            skip_stateless: false,
            skip_metrics: false,
            peers: false,
            peer_rounds: 2,
            scrapes: 200,
            upstream_users: 1000,
            held: 1000,
            completions: 200,
            loop_workers: 8,
            loop_rate: None,
            loop_tls: vec![Tls::Off, Tls::On],
        };
        let mut args = std::env::args().skip(1).filter(|a| a != "--bench");
        while let Some(arg) = args.next() {
            let mut value = || args.next().ok_or_else(|| format!("{arg} needs a value"));
            match arg.as_str() {
                "--duration" => {
                    options.duration = Duration::from_secs(value()?.parse().map_err(|e| format!("--duration: {e}"))?)
                }
                "--warmup" => {
                    options.warmup = Duration::from_secs(value()?.parse().map_err(|e| format!("--warmup: {e}"))?)
                }
                "--clients" => options.clients = value()?.parse().map_err(|e| format!("--clients: {e}"))?,
                "--streams" => options.streams = value()?.parse().map_err(|e| format!("--streams: {e}"))?,
                "--storm" => options.storm = value()?.parse().map_err(|e| format!("--storm: {e}"))?,
                "--skip-baseline" => options.skip_baseline = true,
                "--skip-load" => options.skip_load = true,
                "--skip-streams" => options.skip_streams = true,
                "--skip-loop" => options.skip_loop = true,
                "--skip-upstream" => options.skip_upstream = true,
                "--skip-identity" => options.skip_identity = true,
                "--skip-stateless" => options.skip_stateless = true,
                "--skip-metrics" => options.skip_metrics = true,
                "--peers" => options.peers = true,
                "--peer-rounds" => options.peer_rounds = value()?.parse().map_err(|e| format!("--peer-rounds: {e}"))?,
                "--scrapes" => options.scrapes = value()?.parse().map_err(|e| format!("--scrapes: {e}"))?,
                "--held" => options.held = value()?.parse().map_err(|e| format!("--held: {e}"))?,
                "--completions" => options.completions = value()?.parse().map_err(|e| format!("--completions: {e}"))?,
                "--upstream-users" => {
                    options.upstream_users = value()?.parse().map_err(|e| format!("--upstream-users: {e}"))?
                }
                "--loop-workers" => {
                    options.loop_workers = value()?.parse().map_err(|e| format!("--loop-workers: {e}"))?
                }
                "--loop-rate" => {
                    let rate: f64 = value()?.parse().map_err(|e| format!("--loop-rate: {e}"))?;
                    if !(rate > 0.0 && rate.is_finite()) {
                        return Err(format!("--loop-rate: {rate} is not a positive rate"));
                    }
                    options.loop_rate = Some(rate);
                }
                "--loop-tls" => {
                    options.loop_tls = match value()?.as_str() {
                        "off" => vec![Tls::Off],
                        "on" => vec![Tls::On],
                        "both" => vec![Tls::Off, Tls::On],
                        other => return Err(format!("--loop-tls: {other:?} is not off, on or both")),
                    }
                }
                other => return Err(format!("unknown argument {other}")),
            }
        }
        Ok(options)
    }
}

/// Lets this process (and the servers it starts) hold many connections.
fn raise_open_files_limit() -> u64 {
    // SAFETY: getrlimit/setrlimit only read and write the struct passed to them.
    unsafe {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
        limit.rlim_cur
    }
}

async fn wait_until_up(url: &str) -> Result<(), String> {
    let client = reqwest::Client::new();
    for _ in 0..300 {
        if client.get(url).send().await.is_ok() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(format!("{url} did not come up"))
}

fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// A server under test: where to send MCP requests, and which tool to call how.
struct Target {
    name: &'static str,
    url: String,
    /// The tool called, or for `resources/read` the resource's URI.
    tool: &'static str,
    /// `tools/call` or `resources/read`.
    method: &'static str,
    arguments: Value,
    /// Who session `i` is.
    who: Who,
    /// Which protocol era the clients speak.
    era: Era,
}

/// 2025-11-25 (a session per client, from `initialize`) or 2026-07-28 (stateless requests).
#[derive(Clone, Copy)]
enum Era {
    Handshake,
    Stateless,
}

/// How each of a target's sessions says who it is.
enum Who {
    /// Nothing: local identity, or a server without any.
    Nobody,
    /// Header identity: session `i` is `{prefix}{i}` in X-Forwarded-User.
    Users(&'static str),
    /// MCP authorization: session `i` sends the `i`-th token as `Authorization: Bearer`.
    Bearer(Arc<Vec<String>>),
}

impl Who {
    /// The header session `i` sends on every request.
    fn credential(&self, i: usize) -> Option<(&'static str, String)> {
        match self {
            Who::Nobody => None,
            Who::Users(prefix) => Some(("x-forwarded-user", format!("{prefix}{i}"))),
            Who::Bearer(tokens) => Some(("authorization", format!("Bearer {}", tokens[i % tokens.len()]))),
        }
    }
}

const ACCEPT: &str = "application/json, text/event-stream";

/// Sends `request` and reads its whole answer as text.
async fn body_text(request: reqwest::RequestBuilder) -> Result<String, String> {
    let response = request.send().await.map_err(|e| e.to_string())?;
    response.text().await.map_err(|e| e.to_string())
}

/// The JSON-RPC message in a POST answer, which is JSON or (TypeScript server) an SSE stream,
/// read as `T`.
fn message_of<T: serde::de::DeserializeOwned>(body: &[u8]) -> Option<T> {
    serde_json::from_slice(body).ok().or_else(|| {
        body.split(|byte| *byte == b'\n')
            .filter_map(|line| line.strip_prefix(b"data:"))
            .map(<[u8]>::trim_ascii)
            .filter(|data| !data.is_empty())
            .find_map(|data| serde_json::from_slice(data).ok())
    })
}

/// The `_meta` of a 2026-07-28 request from a client that can open URLs.
fn stateless_meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": STATELESS,
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"url": {}}},
        "io.modelcontextprotocol/clientInfo": {"name": "gatehouse-bench", "version": "1"},
    })
}

/// The headers a 2026-07-28 request of `method` on `name` carries.
fn stateless_headers(request: reqwest::RequestBuilder, method: &str, name: &str) -> reqwest::RequestBuilder {
    request
        .header("mcp-protocol-version", STATELESS)
        .header("mcp-method", method)
        .header("mcp-name", name)
}

const STATELESS: &str = "2026-07-28";

/// A new session, sending `credential` (a header naming the user) when given.
async fn initialize(http: &reqwest::Client, url: &str, credential: Option<(&str, &str)>) -> Result<String, String> {
    open_session(http, url, credential)
        .await?
        .map_err(|(status, body)| format!("initialize answered {status}: {body}"))
}

/// A new session, or the status and body of an answer that opened none.
async fn open_session(
    http: &reqwest::Client,
    url: &str,
    credential: Option<(&str, &str)>,
) -> Result<Result<String, (reqwest::StatusCode, String)>, String> {
    let body = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "gatehouse-bench", "version": "1"}}});
    let as_user = |request: reqwest::RequestBuilder| match credential {
        Some((name, value)) => request.header(name, value),
        None => request,
    };
    let response = as_user(http.post(url))
        .header("accept", ACCEPT)
        .json(&body)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let status = response.status();
    let session = response
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let body = response.text().await.map_err(|e| e.to_string())?;
    let Some(session) = session else {
        return Ok(Err((status, body)));
    };
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    as_user(http.post(url))
        .header("accept", ACCEPT)
        .header("mcp-session-id", &session)
        .header("mcp-protocol-version", "2025-11-25")
        .json(&initialized)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    Ok(Ok(session))
}

struct LoadResult {
    calls: u64,
    errors: u64,
    seconds: f64,
    p50_ms: f64,
    p99_ms: f64,
    /// Successful calls including the warm-up's, for CPU time per call.
    all_calls: u64,
}

/// Whether a POST answer (JSON, or an SSE stream's message) is a tool result that is not an
/// error. Only `result.isError` is read, the rest skimmed: the load generator shares the machine
/// with what it measures, so it spends as little as it can on bodies, the same in every era.
fn tool_succeeded(body: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct Answer {
        result: Option<Outcome>,
    }
    #[derive(serde::Deserialize)]
    struct Outcome {
        #[serde(rename = "isError")]
        is_error: Option<bool>,
    }
    message_of::<Answer>(body).is_some_and(|answer| answer.result.is_some_and(|result| result.is_error != Some(true)))
}

/// `clients` sessions calling the tool in a loop; latencies of the measured window only.
async fn call_load(
    target: &Target,
    clients: usize,
    warmup: Duration,
    duration: Duration,
) -> Result<LoadResult, String> {
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(clients)
        .build()
        .map_err(|e| e.to_string())?;
    let mut sessions = Vec::new();
    for i in 0..clients {
        let credential = target.who.credential(i);
        let header = credential.as_ref().map(|(name, value)| (*name, value.as_str()));
        let session = match target.era {
            Era::Handshake => Some(initialize(&http, &target.url, header).await?),
            Era::Stateless => None,
        };
        sessions.push((credential.clone(), session));
    }
    let measuring = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let errors = Arc::new(AtomicU64::new(0));
    let all_calls = Arc::new(AtomicU64::new(0));
    let mut workers = Vec::new();
    for (credential, session) in sessions {
        let (http, url, measuring, stop, errors, all_calls) = (
            http.clone(),
            target.url.clone(),
            measuring.clone(),
            stop.clone(),
            errors.clone(),
            all_calls.clone(),
        );
        let mut params = match target.method {
            "resources/read" => json!({"uri": target.tool}),
            _ => json!({"name": target.tool, "arguments": target.arguments}),
        };
        if session.is_none() {
            params["_meta"] = stateless_meta();
        }
        let method = target.method;
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).to_string();
        let tool = target.tool;
        workers.push(tokio::spawn(async move {
            let mut latencies: Vec<u32> = Vec::with_capacity(1 << 16);
            while !stop.load(Ordering::Relaxed) {
                let started = Instant::now();
                let mut request = http.post(&url);
                if let Some((name, value)) = &credential {
                    request = request.header(*name, value);
                }
                request = match &session {
                    Some(session) => request
                        .header("mcp-session-id", session)
                        .header("mcp-protocol-version", "2025-11-25"),
                    None => stateless_headers(request, method, tool),
                };
                let outcome = request
                    .header("accept", ACCEPT)
                    .header("content-type", "application/json")
                    .body(body.clone())
                    .send()
                    .await;
                let ok = match outcome {
                    Ok(response) if response.status().is_success() => {
                        response.bytes().await.ok().is_some_and(|body| tool_succeeded(&body))
                    }
                    _ => false,
                };
                if ok {
                    all_calls.fetch_add(1, Ordering::Relaxed);
                }
                if measuring.load(Ordering::Relaxed) {
                    if ok {
                        latencies.push(started.elapsed().as_micros().min(u32::MAX as u128) as u32);
                    } else {
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            latencies
        }));
    }
    tokio::time::sleep(warmup).await;
    measuring.store(true, Ordering::Relaxed);
    let started = Instant::now();
    tokio::time::sleep(duration).await;
    measuring.store(false, Ordering::Relaxed);
    let seconds = started.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let mut latencies = Vec::new();
    for worker in workers {
        latencies.extend(worker.await.map_err(|e| e.to_string())?);
    }
    latencies.sort_unstable();
    Ok(LoadResult {
        calls: latencies.len() as u64,
        errors: errors.load(Ordering::Relaxed),
        seconds,
        p50_ms: percentile(&latencies, 0.50),
        p99_ms: percentile(&latencies, 0.99),
        all_calls: all_calls.load(Ordering::Relaxed),
    })
}

struct Database {
    admin_url: String,
    name: String,
    url: String,
}

async fn create_database() -> Result<Database, String> {
    let admin_url = std::env::var("TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable".into());
    let mut admin = sqlx::PgConnection::connect(&admin_url)
        .await
        .map_err(|e| format!("PostgreSQL at {admin_url}: {e}"))?;
    let name = format!("gh_bench_{}", std::process::id());
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
    )))
    .execute(&mut admin)
    .await
    .map_err(|e| e.to_string())?;
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&mut admin)
        .await
        .map_err(|e| e.to_string())?;
    let mut url = url::Url::parse(&admin_url).map_err(|e| e.to_string())?;
    url.set_path(&name);
    Ok(Database {
        admin_url,
        name,
        url: url.to_string(),
    })
}

async fn drop_database(database: &Database) {
    if let Ok(mut admin) = sqlx::PgConnection::connect(&database.admin_url).await {
        let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
            "DROP DATABASE IF EXISTS {} WITH (FORCE)",
            database.name
        )))
        .execute(&mut admin)
        .await;
    }
}

/// The release binary; with `config` (file, public URL) for the elicitation loop.
fn start_gatehouse(database_url: &str, port: u16, config: Option<(&std::path::Path, &str)>) -> Result<Child, String> {
    gatehouse_command(database_url, port, config)
        .spawn()
        .map_err(|e| format!("cannot start gatehouse: {e}"))
}

/// The gatehouse binary under test: this build's, or `GATEHOUSE_BENCH_BIN` (another build, say
/// the commit before a change, driven by the same benchmark for a back-to-back comparison).
fn gatehouse_binary() -> std::path::PathBuf {
    std::env::var_os("GATEHOUSE_BENCH_BIN").map_or_else(|| env!("CARGO_BIN_EXE_gatehouse").into(), Into::into)
}

/// The command [`start_gatehouse`] runs, for a section that sets more of the environment.
fn gatehouse_command(database_url: &str, port: u16, config: Option<(&std::path::Path, &str)>) -> Command {
    let mut command = Command::new(gatehouse_binary());
    command.arg("serve");
    if let Some((file, public_url)) = config {
        command
            .arg("--config")
            .arg(file)
            .env("GATEHOUSE_SERVER__PUBLIC_URL", public_url);
    } else {
        // The load and the idle streams are one local user's sessions, far beyond the default cap;
        // without the demo tools, so tools/list answers as it did before there was a demo.
        command
            .arg("--no-demo")
            .env("GATEHOUSE_MCP__MAX_SESSIONS_PER_PRINCIPAL", "1000000");
    }
    command
        .env("GATEHOUSE_SERVER__BIND", format!("127.0.0.1:{port}"))
        .env("GATEHOUSE_DATABASE__URL", database_url)
        .env(
            "GATEHOUSE_SECRETS__KEYS",
            "YmVuY2htYXJrLWtleS1mb3ItZ2F0ZWhvdXNlLTMyYnk=",
        )
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .kill_on_drop(true);
    command
}

fn start_ts_server(port: u16) -> Result<Child, String> {
    Command::new("bash")
        .arg(local::repo().join("bench/ts-server/run.sh"))
        .arg(port.to_string())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot start the TypeScript SDK server: {e}"))
}

/// The `p` quantile of sorted microsecond latencies, in milliseconds.
fn percentile(sorted: &[u32], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let index = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    f64::from(sorted[index]) / 1000.0
}

fn report(name: &str, result: &LoadResult) {
    println!(
        "| {name} | {:.0} | {:.2} | {:.2} | {} | {} |",
        result.calls as f64 / result.seconds,
        result.p50_ms,
        result.p99_ms,
        result.calls,
        result.errors
    );
}

async fn run(options: Options) -> Result<(), String> {
    let files = raise_open_files_limit();
    if (files as usize) < options.streams + options.storm + 1024 {
        return Err(format!(
            "{} streams need more open files than the limit of {files}",
            options.streams + options.storm
        ));
    }
    let database = create_database().await?;
    let outcome = measure(&options, &database).await;
    drop_database(&database).await;
    outcome
}

async fn measure(options: &Options, database: &Database) -> Result<(), String> {
    if !options.skip_load || !options.skip_streams {
        let port = local::free_port();
        let mut gatehouse = start_gatehouse(&database.url, port, None)?;
        let gatehouse_url = format!("http://127.0.0.1:{port}/mcp");
        wait_until_up(&format!("http://127.0.0.1:{port}/healthz")).await?;
        let pid = gatehouse.id().ok_or("gatehouse exited")?;
        if !options.skip_load {
            load(options, &gatehouse_url).await?;
        }
        if !options.skip_streams {
            println!("\n## {} idle GET streams\n", options.streams);
            let mut streams = idle_streams(&gatehouse_url, pid, options.streams).await?;
            println!(
                "| server | sessions | streams open | RSS before streams | RSS with streams |\n|---|---|---|---|---|"
            );
            let sessions = options.streams + if options.skip_load { 0 } else { options.clients };
            println!(
                "| gatehouse (PostgreSQL) | {sessions} | {} | {:.1} MiB | {:.1} MiB |",
                streams.open.len(),
                streams.rss_before_mib,
                streams.rss_with_streams_mib
            );
            if options.storm > 0 {
                storm::storm(&gatehouse_url, pid, options.storm, &mut streams.open)
                    .await?
                    .print(options.storm);
            }
        }
        let _ = gatehouse.kill().await;
    }
    if !options.skip_loop {
        elicitation::section(options, database).await?;
    }
    if !options.skip_upstream {
        upstream::section(options, database).await?;
    }
    if !options.skip_identity {
        identity::section(options, database).await?;
    }
    if !options.skip_stateless {
        stateless::section(options, database).await?;
    }
    if !options.skip_metrics {
        metrics::section(options, database).await?;
    }
    if options.peers {
        peers::section(options, database).await?;
    }
    Ok(())
}

/// Throughput and latency of gatehouse, then of the TypeScript SDK server, under the same load.
async fn load(options: &Options, gatehouse_url: &str) -> Result<(), String> {
    println!(
        "\n## tools/call at {} concurrent clients ({} s measured after {} s warm-up)\n",
        options.clients,
        options.duration.as_secs(),
        options.warmup.as_secs()
    );
    println!("| server | calls/s | p50 ms | p99 ms | calls | errors |\n|---|---|---|---|---|---|");
    let target = Target {
        name: "gatehouse (PostgreSQL, whoami)",
        url: gatehouse_url.to_owned(),
        tool: "whoami",
        method: "tools/call",
        arguments: json!({}),
        who: Who::Nobody,
        era: Era::Handshake,
    };
    let ours = call_load(&target, options.clients, options.warmup, options.duration).await?;
    report(target.name, &ours);
    if options.skip_baseline {
        return Ok(());
    }
    let ts_port = local::free_port();
    let mut ts = start_ts_server(ts_port)?;
    let ts_url = format!("http://127.0.0.1:{ts_port}/mcp");
    wait_until_up(&ts_url).await?;
    let target = Target {
        name: "TypeScript SDK example (in memory, greet)",
        url: ts_url,
        tool: "greet",
        method: "tools/call",
        arguments: json!({"name": "bench"}),
        who: Who::Nobody,
        era: Era::Handshake,
    };
    let theirs = call_load(&target, options.clients, options.warmup, options.duration).await;
    let _ = ts.kill().await;
    let theirs = theirs?;
    report(target.name, &theirs);
    let ratio = (ours.calls as f64 / ours.seconds) / (theirs.calls as f64 / theirs.seconds);
    println!("\ngatehouse / TypeScript SDK throughput: {ratio:.2}x");
    Ok(())
}

fn main() {
    let options = match Options::parse() {
        Ok(options) => options,
        Err(error) => {
            eprintln!("load: {error}");
            std::process::exit(2);
        }
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("load: {error}");
            std::process::exit(1);
        }
    };
    if let Err(error) = runtime.block_on(run(options)) {
        eprintln!("load: {error}");
        std::process::exit(1);
    }
}
