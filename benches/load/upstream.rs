//! Section "upstream": `tools/call` and `resources/read` to a fast MCP server directly and
//! through gatehouse's `[[upstreams]]`, back to back at the same concurrency, then gatehouse's
//! memory per held upstream session with many users.

use std::future::Future;
use std::path::Path;
use std::time::Duration;

use serde_json::json;

use super::caddy::Caddy;
use super::cpu::{Cpu, PerCall, row};
use super::fast_upstream::FastUpstream;
use super::streams::settled_rss_kib;
use super::{
    ACCEPT, Database, Era, LoadResult, Options, Target, Who, body_text, call_load, initialize, local, message_of,
    start_gatehouse, tool_succeeded, wait_until_up,
};

/// The upstream's tool as gatehouse names it: `<id>_<tool>`.
pub(super) const GATED_TOOL: &str = "fast_echo";
/// The upstream's resource as gatehouse names it: `<tag>+<uri>`.
const GATED_RESOURCE: &str = "fast+echo://note";

pub(super) async fn section(options: &Options, database: &Database) -> Result<(), String> {
    let upstream = FastUpstream::start().await?;
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let config = dir.path().join("gatehouse.toml");
    std::fs::write(&config, gatehouse_config(&upstream.url)).map_err(|e| e.to_string())?;
    let mut outcome = side_by_side(options, database, &config, &upstream).await;
    if outcome.is_ok() {
        outcome = held_sessions(options, database, &config, &upstream).await;
    }
    upstream.stop().await;
    outcome
}

/// Header identity (each client is a principal of its own) and the fast upstream, no requirements.
pub(super) fn gatehouse_config(upstream_url: &str) -> String {
    format!(
        "{}\n[[upstreams]]\nid = \"fast\"\nurl = \"{upstream_url}\"\nrequires = []\n",
        include_str!("../../tests/fixtures/header_identity.toml")
    )
}

/// A gatehouse on `config`, its `/mcp` URL once it answers.
pub(super) async fn start(database: &Database, config: &Path) -> Result<(tokio::process::Child, String), String> {
    let port = local::free_port();
    let public = format!("http://127.0.0.1:{port}");
    let gatehouse = start_gatehouse(&database.url, port, Some((config, &public)))?;
    wait_until_up(&format!("{public}/healthz")).await?;
    let url = format!("{public}/mcp");
    wait_for_tool(&url).await?;
    Ok((gatehouse, url))
}

/// gatehouse lists the upstream's tools in the background after it starts, offering
/// `fast_connect` until then: polls `tools/list` until the upstream's tool is on offer.
async fn wait_for_tool(url: &str) -> Result<(), String> {
    let http = reqwest::Client::new();
    let user = "bench-upstream-lister";
    let session = initialize(&http, url, Some(("x-forwarded-user", user))).await?;
    let mut last = String::new();
    for _ in 0..300 {
        let mut cursor: Option<String> = None;
        loop {
            let params = cursor.as_ref().map_or_else(|| json!({}), |c| json!({"cursor": c}));
            let request = http
                .post(url)
                .header("accept", ACCEPT)
                .header("x-forwarded-user", user)
                .header("mcp-session-id", &session)
                .header("mcp-protocol-version", "2025-11-25")
                .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": params}));
            let body = body_text(request).await?;
            let Some(result) = message_of::<serde_json::Value>(body.as_bytes()).and_then(|m| m.get("result").cloned())
            else {
                return Err(format!("tools/list failed: {body}"));
            };
            let names = result["tools"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|t| t["name"].as_str());
            if names.clone().any(|name| name == GATED_TOOL) {
                return Ok(());
            }
            last = names.collect::<Vec<_>>().join(", ");
            cursor = result["nextCursor"].as_str().map(str::to_owned);
            if cursor.is_none() {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(format!(
        "gatehouse did not list {GATED_TOOL} within 30 s; it lists: {last}"
    ))
}

/// Direct, then through gatehouse with one principal per client: throughput, latency, CPU.
async fn side_by_side(
    options: &Options,
    database: &Database,
    config: &Path,
    upstream: &FastUpstream,
) -> Result<(), String> {
    println!(
        "\n## tools/call to an upstream MCP server (rmcp, in the bench process) at {} clients, direct and through gatehouse ({} s measured after {} s warm-up)\n",
        options.clients,
        options.duration.as_secs(),
        options.warmup.as_secs()
    );
    println!(
        "| path | calls/s | p50 ms | p99 ms | calls | errors | CPU per call: the proxy (gatehouse, Caddy) | bench (clients + upstream) | rest of the machine (PostgreSQL, others' work) |\n|---|---|---|---|---|---|---|---|---|"
    );
    let direct = Target {
        name: "direct (echo)",
        url: upstream.url.clone(),
        tool: "echo",
        method: "tools/call",
        arguments: json!({"text": "hello"}),
        who: Who::Nobody,
        era: Era::Handshake,
    };
    let (sessions_before, cpu) = (upstream.open_sessions().await, Cpu::read(None));
    let direct_result = call_load(&direct, options.clients, options.warmup, options.duration).await?;
    let direct_cpu = cpu.per_call(&Cpu::read(None), &direct_result);
    row(direct.name, &direct_result, &direct_cpu);
    let direct_held = upstream.open_sessions().await.saturating_sub(sessions_before);
    let floor = through_caddy(options, &direct).await?;
    let direct_read = Target {
        name: "direct (resources/read echo://note)",
        tool: super::echo::NOTE,
        method: "resources/read",
        ..direct
    };
    let cpu = Cpu::read(None);
    let read_result = call_load(&direct_read, options.clients, options.warmup, options.duration).await?;
    row(
        direct_read.name,
        &read_result,
        &cpu.per_call(&Cpu::read(None), &read_result),
    );

    let (mut gatehouse, url) = start(database, config).await?;
    let outcome = through_gatehouse(options, upstream, &gatehouse, url).await;
    let _ = gatehouse.kill().await;
    let (through, through_cpu, held) = outcome?;
    if let (Some(caddy), Some(gatehouse)) = (floor.and_then(|cpu| cpu.gatehouse), through_cpu.gatehouse) {
        println!(
            "\nthe hop's own CPU per call: gatehouse {gatehouse:.0} µs, a plain HTTP reverse proxy (Caddy) {caddy:.0} µs: {:.1} times the floor, {:.0} µs above it",
            gatehouse / caddy,
            gatehouse - caddy
        );
    }
    let rate = |r: &LoadResult| r.calls as f64 / r.seconds;
    if let Some(cores) = std::thread::available_parallelism().ok().map(|n| n.get() as f64) {
        let ceiling = |cpu: &PerCall| match cpu.machine {
            Some(machine) if machine > 0.0 => format!("{:.0}", cores * 1e6 / machine),
            _ => "n/a".to_owned(),
        };
        println!(
            "\nall {cores} cores' CPU per call allows at most: {} calls/s direct, {} through gatehouse",
            ceiling(&direct_cpu),
            ceiling(&through_cpu)
        );
    }
    println!(
        "upstream sessions opened: {direct_held} by the direct clients, {held} by gatehouse for {} principals",
        options.clients
    );
    println!(
        "gatehouse / direct throughput: {:.2} (goal ≥ 0.90); p50 added: {:.2} ms (goal ≤ 1 ms); p99 added: {:.2} ms",
        rate(&through) / rate(&direct_result),
        through.p50_ms - direct_result.p50_ms,
        through.p99_ms - direct_result.p99_ms
    );
    Ok(())
}

/// The direct call through Caddy's `reverse_proxy`: the floor of a hop (Caddy's CPU per call in
/// the proxy column); `None` without Caddy.
async fn through_caddy(options: &Options, direct: &Target) -> Result<Option<PerCall>, String> {
    let Some(caddy) = Caddy::start(&direct.url).await? else {
        return Ok(None);
    };
    let target = Target {
        name: "direct (echo) through Caddy's reverse_proxy",
        url: caddy.url.clone(),
        tool: direct.tool,
        method: direct.method,
        arguments: direct.arguments.clone(),
        who: Who::Nobody,
        era: direct.era,
    };
    let cpu = Cpu::read(caddy.pid());
    let result = call_load(&target, options.clients, options.warmup, options.duration).await?;
    let cpu = cpu.per_call(&Cpu::read(caddy.pid()), &result);
    row(target.name, &result, &cpu);
    Ok(Some(cpu))
}

/// The through-gatehouse row; returns its result, its CPU, and how many upstream sessions it opened.
async fn through_gatehouse(
    options: &Options,
    upstream: &FastUpstream,
    gatehouse: &tokio::process::Child,
    url: String,
) -> Result<(LoadResult, PerCall, usize), String> {
    let pid = gatehouse.id().ok_or("gatehouse exited")?;
    let http = reqwest::Client::new();
    // One call first, so a gatehouse that cannot reach the upstream says why instead of a row of errors.
    let probe = initialize(&http, &url, Some(("x-forwarded-user", "bench-upstream-probe"))).await?;
    if let Err(answer) = call_once(&http, &url, "bench-upstream-probe", &probe).await? {
        return Err(format!("{GATED_TOOL} through gatehouse failed: {answer}"));
    }
    let sessions_before = upstream.open_sessions().await;
    let target = Target {
        name: "through gatehouse (fast_echo, a principal per client)",
        url,
        tool: GATED_TOOL,
        method: "tools/call",
        arguments: json!({"text": "hello"}),
        who: Who::Users("bench-upstream-client-"),
        era: Era::Handshake,
    };
    let cpu = Cpu::read(Some(pid));
    let result = call_load(&target, options.clients, options.warmup, options.duration).await?;
    let cpu = cpu.per_call(&Cpu::read(Some(pid)), &result);
    row(target.name, &result, &cpu);
    let held = upstream.open_sessions().await.saturating_sub(sessions_before);
    // The same principals read the upstream's resource on the sessions they hold.
    let read = Target {
        name: "through gatehouse (resources/read fast+echo://note, the same principals)",
        tool: GATED_RESOURCE,
        method: "resources/read",
        ..target
    };
    let read_cpu = Cpu::read(Some(pid));
    let read_result = call_load(&read, options.clients, options.warmup, options.duration).await?;
    row(
        read.name,
        &read_result,
        &read_cpu.per_call(&Cpu::read(Some(pid)), &read_result),
    );
    Ok((result, cpu, held))
}

/// `users` principals each call the upstream's tool once on a fresh gatehouse; its resident
/// memory before and after, against the sessions the upstream itself counts.
async fn held_sessions(
    options: &Options,
    database: &Database,
    config: &Path,
    upstream: &FastUpstream,
) -> Result<(), String> {
    let users = options.upstream_users;
    println!("\n## {users} users' upstream sessions held at once\n");
    let (mut gatehouse, url) = start(database, config).await?;
    let outcome = measure_held(users, upstream, &gatehouse, &url).await;
    let _ = gatehouse.kill().await;
    outcome
}

async fn measure_held(
    users: usize,
    upstream: &FastUpstream,
    gatehouse: &tokio::process::Child,
    url: &str,
) -> Result<(), String> {
    let pid = gatehouse.id().ok_or("gatehouse exited")?;
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(64)
        .build()
        .map_err(|e| e.to_string())?;
    // A few users first, so what every first call sets up once is in place before measuring.
    let warm = open_sessions(&http, url, "bench-upstream-warm-", 10).await?;
    let (_, warm_failures) = call_all(&http, url, warm).await?;
    if warm_failures > 0 {
        return Err(format!("{warm_failures} of 10 warm-up calls failed"));
    }
    // The users' gatehouse sessions exist before the "before" reading: the difference is what
    // their calls added, upstream sessions above all.
    let sessions = open_sessions(&http, url, "bench-upstream-user-", users).await?;
    let (upstream_before, initializes_before) = (upstream.open_sessions().await, upstream.initializes());
    let rss_before = settled_rss_kib(pid).await?;
    let (first_failure, failures) = call_all(&http, url, sessions).await?;
    let rss_after = settled_rss_kib(pid).await?;
    let held = upstream.open_sessions().await.saturating_sub(upstream_before);
    let initialized = upstream.initializes().saturating_sub(initializes_before);
    if let Some(answer) = first_failure {
        eprintln!("{failures} calls failed; the first: {answer}");
    }
    println!(
        "| users | calls ok | upstream sessions held (initializes) | RSS before calls | RSS after | per upstream session |\n|---|---|---|---|---|---|"
    );
    let per_session = if held == 0 {
        "n/a".to_owned()
    } else {
        format!("{:.1} KiB", (rss_after as f64 - rss_before as f64) / held as f64)
    };
    println!(
        "| {users} | {} | {held} ({initialized}) | {:.1} MiB | {:.1} MiB | {per_session} |",
        users - failures,
        rss_before as f64 / 1024.0,
        rss_after as f64 / 1024.0
    );
    Ok(())
}

/// One gatehouse session for each of `count` users named `{prefix}{i}`: (user, session id).
async fn open_sessions(
    http: &reqwest::Client,
    url: &str,
    prefix: &str,
    count: usize,
) -> Result<Vec<(String, String)>, String> {
    in_parallel((0..count).map(|i| {
        let (http, url, user) = (http.clone(), url.to_owned(), format!("{prefix}{i}"));
        async move {
            let session = initialize(&http, &url, Some(("x-forwarded-user", &user))).await?;
            Ok((user, session))
        }
    }))
    .await
}

/// Each session calls the upstream's tool once: the first failed answer, and how many failed.
async fn call_all(
    http: &reqwest::Client,
    url: &str,
    sessions: Vec<(String, String)>,
) -> Result<(Option<String>, usize), String> {
    let answers = in_parallel(sessions.into_iter().map(|(user, session)| {
        let (http, url) = (http.clone(), url.to_owned());
        async move { call_once(&http, &url, &user, &session).await }
    }))
    .await?;
    let failures = answers.iter().filter(|a| a.is_err()).count();
    let first = answers.into_iter().find_map(Result::err);
    Ok((first, failures))
}

/// One call of the upstream's tool as `user`: Ok(()) for a successful result, else the answer.
async fn call_once(http: &reqwest::Client, url: &str, user: &str, session: &str) -> Result<Result<(), String>, String> {
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": GATED_TOOL, "arguments": {"text": "hello"}}});
    let response = http
        .post(url)
        .header("accept", ACCEPT)
        .header("x-forwarded-user", user)
        .header("mcp-session-id", session)
        .header("mcp-protocol-version", "2025-11-25")
        .json(&call)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let status = response.status();
    let body = response.text().await.map_err(|e| e.to_string())?;
    Ok(if status.is_success() && tool_succeeded(body.as_bytes()) {
        Ok(())
    } else {
        Err(format!("{status}: {body}"))
    })
}

/// Runs the tasks 32 at a time; their outputs in order, or the first error.
async fn in_parallel<T, F>(tasks: impl Iterator<Item = F>) -> Result<Vec<T>, String>
where
    T: Send + 'static,
    F: Future<Output = Result<T, String>> + Send + 'static,
{
    let mut done = Vec::new();
    let mut running = Vec::with_capacity(32);
    for task in tasks {
        running.push(tokio::spawn(task));
        if running.len() == 32 {
            for handle in running.drain(..) {
                done.push(handle.await.map_err(|e| e.to_string())??);
            }
        }
    }
    for handle in running {
        done.push(handle.await.map_err(|e| e.to_string())??);
    }
    Ok(done)
}
