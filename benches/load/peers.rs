//! Section "peers" (`--peers`; optional, never in CI): the fast upstream's `echo` called directly,
//! through gatehouse, through FastMCP's proxy and through IBM's ContextForge, in interleaved rounds
//! (`--peer-rounds`, default 2) at the same concurrency, with each proxy's CPU per call summed
//! over all its processes and its resident memory at the end. The peers are installed on demand,
//! pinned, by `bench/peers/setup.sh` into `target/bench-peers/`; their launchers print the MCP URL
//! (and a bearer token, where the peer wants one) once it can take calls.

use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use super::cpu::{Cpu, PerCall, process_tree, row};
use super::fast_upstream::FastUpstream;
use super::upstream::{GATED_TOOL, gatehouse_config, start};
use super::{Database, Era, LoadResult, Options, Target, Who, call_load, local, rss_kib};

/// How long a peer may take to install or to start (ContextForge migrates its database first).
const PEER_START: Duration = Duration::from_secs(300);

/// How ContextForge names the upstream's `echo`: its gateway's slug, its separator, the tool.
const CONTEXTFORGE_TOOL: &str = "fast-echo";

/// A proxy under measurement, or the upstream itself.
struct Route {
    target: Target,
    /// The proxy's root process (its CPU and memory include its descendants); none when direct.
    pid: Option<u32>,
    /// The pinned version and settings, for the table.
    about: String,
    rounds: Vec<(LoadResult, PerCall)>,
}

pub(super) async fn section(options: &Options, database: &Database) -> Result<(), String> {
    let peers = local::repo().join("bench/peers");
    install(&peers).await?;
    let upstream = FastUpstream::start().await?;
    let outcome = side_by_side(options, database, &peers, &upstream).await;
    upstream.stop().await;
    outcome
}

/// `bench/peers/setup.sh`: the peers' virtual environments, reinstalled only when a pin changed.
async fn install(peers: &Path) -> Result<(), String> {
    let status = tokio::time::timeout(
        PEER_START,
        Command::new("bash")
            .arg(peers.join("setup.sh"))
            .stdout(Stdio::null())
            .status(),
    )
    .await
    .map_err(|_| "bench/peers/setup.sh took over 300 s".to_owned())?
    .map_err(|e| format!("bench/peers/setup.sh: {e}"))?;
    if !status.success() {
        return Err(format!("bench/peers/setup.sh failed ({status})"));
    }
    Ok(())
}

async fn side_by_side(
    options: &Options,
    database: &Database,
    peers: &Path,
    upstream: &FastUpstream,
) -> Result<(), String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let config = dir.path().join("gatehouse.toml");
    std::fs::write(&config, gatehouse_config(&upstream.url)).map_err(|e| e.to_string())?;
    let (gatehouse, gatehouse_url) = start(database, &config).await?;
    let venvs = local::repo().join("target/bench-peers");
    let fastmcp = Launched::start(
        Command::new(venvs.join("fastmcp/bin/python")).arg(peers.join("fastmcp_proxy.py")),
        &upstream.url,
        &dir.path().join("fastmcp.log"),
    )
    .await?;
    let contextforge = Launched::start(
        Command::new("bash").arg(peers.join("contextforge.sh")),
        &upstream.url,
        &dir.path().join("contextforge.log"),
    )
    .await?;
    let echo = |name, url: &str, tool, who| Target {
        name,
        url: url.to_owned(),
        tool,
        method: "tools/call",
        arguments: json!({"text": "hello"}),
        who,
        era: Era::Handshake,
    };
    let mut paths = vec![
        Route {
            target: echo("direct (rmcp in the bench process)", &upstream.url, "echo", Who::Nobody),
            pid: None,
            about: "the upstream itself".into(),
            rounds: Vec::new(),
        },
        Route {
            target: echo(
                "gatehouse",
                &gatehouse_url,
                GATED_TOOL,
                Who::Users("bench-peers-client-"),
            ),
            pid: gatehouse.id(),
            about: "this build, PostgreSQL, a principal (and upstream session) per client".into(),
            rounds: Vec::new(),
        },
        Route {
            target: echo("FastMCP proxy", &fastmcp.url, "echo", fastmcp.who()),
            pid: fastmcp.pid(),
            about: format!("{}, {}", pin(peers, "fastmcp.txt"), fastmcp.settings),
            rounds: Vec::new(),
        },
        Route {
            target: echo("ContextForge", &contextforge.url, CONTEXTFORGE_TOOL, contextforge.who()),
            pid: contextforge.pid(),
            about: format!("{}, {}", pin(peers, "contextforge.txt"), contextforge.settings),
            rounds: Vec::new(),
        },
    ];
    println!(
        "\n## Side by side with the peers: tools/call echo at {} clients, {} interleaved rounds ({} s measured after {} s warm-up each)\n",
        options.clients,
        options.peer_rounds,
        options.duration.as_secs(),
        options.warmup.as_secs()
    );
    println!(
        "| path (round) | calls/s | p50 ms | p99 ms | calls | errors | CPU per call: the proxy (all its processes) | bench (clients + upstream) | rest of the machine |\n|---|---|---|---|---|---|---|---|---|"
    );
    for round in 1..=options.peer_rounds {
        for path in &mut paths {
            let cpu = || path.pid.map_or_else(|| Cpu::read(None), Cpu::read_tree);
            let before = cpu();
            let result = call_load(&path.target, options.clients, options.warmup, options.duration).await?;
            let per_call = before.per_call(&cpu(), &result);
            row(&format!("{} ({round})", path.target.name), &result, &per_call);
            path.rounds.push((result, per_call));
        }
    }
    summary(&paths);
    drop((fastmcp, contextforge, gatehouse));
    Ok(())
}

/// The pinned line of a requirements file in `bench/peers`.
fn pin(peers: &Path, file: &str) -> String {
    std::fs::read_to_string(peers.join(file))
        .ok()
        .and_then(|text| {
            text.lines()
                .map(str::trim)
                .find(|line| line.contains("==") && !line.starts_with('#'))
                .map(str::to_owned)
        })
        .unwrap_or_else(|| format!("(no pin in bench/peers/{file})"))
}

/// Each path's range over the rounds, its memory and processes now, and its rate against gatehouse's.
fn summary(paths: &[Route]) {
    let rate = |r: &LoadResult| r.calls as f64 / r.seconds;
    let range = |values: Vec<f64>, digits: usize| {
        let low = values.iter().copied().fold(f64::INFINITY, f64::min);
        let high = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        format!("{low:.digits$}–{high:.digits$}")
    };
    let best = |path: &Route| path.rounds.iter().map(|(r, _)| rate(r)).fold(0.0, f64::max);
    let ours = paths.get(1).map_or(f64::NAN, best);
    println!(
        "\n| path | calls/s | p99 ms | proxy CPU per call | gatehouse's rate / this | resident memory (processes) | version and settings |\n|---|---|---|---|---|---|---|"
    );
    for path in paths {
        let calls = range(path.rounds.iter().map(|(r, _)| rate(r)).collect(), 0);
        let p99 = range(path.rounds.iter().map(|(r, _)| r.p99_ms).collect(), 2);
        let cpu: Vec<f64> = path.rounds.iter().filter_map(|(_, c)| c.gatehouse).collect();
        let cpu = if path.pid.is_none() || cpu.is_empty() {
            "—".to_owned()
        } else {
            format!("{} µs", range(cpu, 0))
        };
        let memory = path.pid.map_or_else(
            || "—".to_owned(),
            |pid| {
                let tree = process_tree(pid);
                let kib: u64 = tree.iter().filter_map(|&pid| rss_kib(pid)).sum();
                format!("{:.0} MiB ({})", kib as f64 / 1024.0, tree.len())
            },
        );
        println!(
            "| {} | {calls} | {p99} | {cpu} | {:.1} | {memory} | {} |",
            path.target.name,
            ours / best(path),
            path.about
        );
    }
}

/// A peer started by its launcher (`bench/peers/*`) in a process group of its own; the whole group
/// is killed when this is dropped. The launcher takes the upstream's URL and a port, and prints
/// `url URL`, `bearer TOKEN` (when the peer wants one), `settings TEXT`, then `ready`.
struct Launched {
    child: Child,
    url: String,
    bearer: Option<String>,
    settings: String,
}

impl Launched {
    async fn start(command: &mut Command, upstream: &str, log: &Path) -> Result<Self, String> {
        let shown = format!("{:?}", command.as_std());
        let stderr = std::fs::File::create(log).map_err(|e| e.to_string())?;
        let mut child = command
            .arg(upstream)
            .arg(local::free_port().to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("cannot run {shown}: {e}"))?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let mut launched = Self {
            child,
            url: String::new(),
            bearer: None,
            settings: String::new(),
        };
        let mut lines = BufReader::new(stdout).lines();
        let read = async {
            while let Some(line) = lines.next_line().await.map_err(|e| e.to_string())? {
                match line.split_once(' ') {
                    Some(("url", url)) => launched.url = url.to_owned(),
                    Some(("bearer", token)) => launched.bearer = Some(token.to_owned()),
                    Some(("settings", text)) => launched.settings = text.to_owned(),
                    _ if line == "ready" => return Ok(()),
                    _ => {}
                }
            }
            Err("it exited".to_owned())
        };
        let ready = tokio::time::timeout(PEER_START, read)
            .await
            .unwrap_or_else(|_| Err(format!("not ready within {} s", PEER_START.as_secs())));
        if let Err(why) = ready.and_then(|()| {
            (!launched.url.is_empty())
                .then_some(())
                .ok_or_else(|| "no url".to_owned())
        }) {
            let log = std::fs::read_to_string(log).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(30).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            return Err(format!("{shown}: {why}; its log ends:\n{}", tail.join("\n")));
        }
        launched.wait_listening().await?;
        Ok(launched)
    }

    /// Waits until the peer's port takes connections (a launcher may print `ready` just before
    /// its server binds).
    async fn wait_listening(&self) -> Result<(), String> {
        let url = url::Url::parse(&self.url).map_err(|e| format!("{}: {e}", self.url))?;
        let address = (
            url.host_str().unwrap_or("127.0.0.1").to_owned(),
            url.port_or_known_default().unwrap_or(80),
        );
        for _ in 0..600 {
            if tokio::net::TcpStream::connect(address.clone()).await.is_ok() {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Err(format!("{} did not take connections within 60 s", self.url))
    }

    fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    fn who(&self) -> Who {
        match &self.bearer {
            Some(token) => Who::Bearer(Arc::new(vec![token.clone()])),
            None => Who::Nobody,
        }
    }
}

impl Drop for Launched {
    fn drop(&mut self) {
        if let Some(group) = self.child.id().and_then(|pid| i32::try_from(pid).ok()) {
            // SAFETY: kill only sends a signal; the group is the one this child leads.
            unsafe {
                libc::kill(-group, libc::SIGKILL);
            }
        }
    }
}
