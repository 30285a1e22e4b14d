//! Section "stateless" (`--skip-stateless`): protocol 2026-07-28 beside 2025-11-25. `whoami` at N
//! clients in each era, in alternating rounds on one gatehouse; then, on two replicas, `--held` retries held
//! at once on one of them (the extra resident memory they cost), and for `--completions` of them,
//! one at a time, the time from the browser's callback on the other replica to the held retry's
//! answer.

use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{Value, json};
use tokio::task::JoinHandle;

use super::cpu::{Cpu, row};
use super::elicitation::{browse_to_callback, loop_config};
use super::streams::settled_rss_kib;
use super::{
    ACCEPT, Database, Era, Options, Target, Who, body_text, call_load, fake_oauth, local, percentile, start_gatehouse,
    stateless_headers, stateless_meta, wait_until_up,
};

/// How long retries are held here: far longer than the measurement, so none runs out.
const HOLD: &str = "300s";
/// Rounds of the two eras' throughput, alternating.
const ROUNDS: usize = 3;
/// First calls sent at once while retries are being set up.
const SETUP_CONCURRENCY: usize = 50;

pub(super) async fn section(options: &Options, database: &Database) -> Result<(), String> {
    throughput(options, database).await?;
    held(options, database).await
}

async fn throughput(options: &Options, database: &Database) -> Result<(), String> {
    let port = local::free_port();
    let mut gatehouse = start_gatehouse(&database.url, port, None)?;
    let url = format!("http://127.0.0.1:{port}/mcp");
    wait_until_up(&format!("http://127.0.0.1:{port}/healthz")).await?;
    println!(
        "\n## whoami by protocol era at {} concurrent clients ({} s measured after {} s warm-up)\n",
        options.clients,
        options.duration.as_secs(),
        options.warmup.as_secs()
    );
    println!(
        "| era | calls/s | p50 ms | p99 ms | calls | errors | gatehouse CPU/call | load generator CPU/call | rest |\n|---|---|---|---|---|---|---|---|---|"
    );
    let pid = gatehouse.id();
    let eras = [
        ("2025-11-25 (a session per client)", Era::Handshake),
        ("2026-07-28 (stateless)", Era::Stateless),
    ];
    // Rounds alternate the eras, so a swing in the machine's speed (a virtual machine's neighbours)
    // falls on both rather than on whichever ran second.
    let mut totals = [(0u64, 0f64); 2];
    let mut ratios = Vec::with_capacity(ROUNDS);
    for round in 1..=ROUNDS {
        let mut rates = [0f64; 2];
        for (index, (name, era)) in eras.into_iter().enumerate() {
            let target = Target {
                name,
                url: url.clone(),
                tool: "whoami",
                method: "tools/call",
                arguments: json!({}),
                who: Who::Nobody,
                era,
            };
            let cpu = Cpu::read(pid);
            let result = call_load(&target, options.clients, options.warmup, options.duration).await;
            let after = Cpu::read(pid);
            let result = match result {
                Ok(result) => result,
                Err(error) => {
                    let _ = gatehouse.kill().await;
                    return Err(error);
                }
            };
            row(
                &format!("{name}, round {round}"),
                &result,
                &cpu.per_call(&after, &result),
            );
            rates[index] = result.calls as f64 / result.seconds;
            totals[index].0 += result.calls;
            totals[index].1 += result.seconds;
        }
        ratios.push(rates[1] / rates[0]);
    }
    let _ = gatehouse.kill().await;
    let rate = |(calls, seconds): (u64, f64)| calls as f64 / seconds;
    let rounds: Vec<String> = ratios.iter().map(|ratio| format!("{ratio:.2}")).collect();
    println!(
        "\nstateless / handshake throughput: {:.2} over {ROUNDS} alternating rounds (each round: {})",
        rate(totals[1]) / rate(totals[0]),
        rounds.join(", ")
    );
    Ok(())
}

/// A held retry's task: when its answer arrived, and whether it was the tool's result.
type Held = JoinHandle<Result<(Instant, bool), String>>;

async fn held(options: &Options, database: &Database) -> Result<(), String> {
    let fake = fake_oauth::FakeProvider::start(fake_oauth::FakeOptions::default()).await;
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let config = dir.path().join("gatehouse.toml");
    std::fs::write(
        &config,
        format!("{}\n[elicitation]\nhold = \"{HOLD}\"\n", loop_config(&fake)),
    )
    .map_err(|e| e.to_string())?;
    let (port_a, port_b) = (local::free_port(), local::free_port());
    let (base_a, base_b) = (
        format!("http://127.0.0.1:{port_a}"),
        format!("http://127.0.0.1:{port_b}"),
    );
    let mut a = start_gatehouse(&database.url, port_a, Some((&config, &base_a)))?;
    let mut b = start_gatehouse(&database.url, port_b, Some((&config, &base_a)))?;
    let outcome = measure_held(options, &base_a, &base_b, a.id()).await;
    let _ = a.kill().await;
    let _ = b.kill().await;
    outcome
}

async fn measure_held(options: &Options, base_a: &str, base_b: &str, pid: Option<u32>) -> Result<(), String> {
    wait_until_up(&format!("{base_a}/healthz")).await?;
    wait_until_up(&format!("{base_b}/healthz")).await?;
    let pid = pid.ok_or("gatehouse exited")?;
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .pool_max_idle_per_host(SETUP_CONCURRENCY)
        .build()
        .map_err(|e| e.to_string())?;
    let mcp = format!("{base_a}/mcp");
    let before = settled_rss_kib(pid).await?;

    // Every user's first call answers input_required; its retry is then held on A.
    let users: Vec<String> = (0..options.held).map(|i| format!("bench-held-{i}")).collect();
    let asked: Vec<Result<(String, Held), String>> = futures::stream::iter(users.iter())
        .map(|user| {
            let (http, mcp) = (http.clone(), mcp.clone());
            async move {
                let first = call_me(&http, &mcp, user, None).await?;
                let url = first["inputRequests"]
                    .as_object()
                    .and_then(|requests| requests.values().next())
                    .and_then(|request| request["params"]["url"].as_str())
                    .ok_or_else(|| format!("no input_required: {first}"))?
                    .to_owned();
                let state = first["requestState"].as_str().ok_or("no requestState")?.to_owned();
                let user = user.clone();
                let retry: Held = tokio::spawn(async move {
                    let answer = call_me(&http, &mcp, &user, Some(&state)).await?;
                    Ok((Instant::now(), answer["isError"] == json!(false)))
                });
                Ok((url, retry))
            }
        })
        .buffered(SETUP_CONCURRENCY)
        .collect()
        .await;
    let asked: Vec<(String, Held)> = asked.into_iter().collect::<Result<_, _>>()?;
    // The last retries reach A a moment after they were sent; then the memory settles.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let with = settled_rss_kib(pid).await?;
    let extra_mib = with.saturating_sub(before) as f64 / 1024.0;
    println!("\n## 2026-07-28 retries held on replica A, completed in the browser on replica B (hold {HOLD})\n");
    println!("| retries held | RSS before | RSS holding them | extra | per retry |\n|---|---|---|---|---|");
    println!(
        "| {} | {:.1} MiB | {:.1} MiB | {extra_mib:.1} MiB | {:.1} KiB |",
        asked.len(),
        before as f64 / 1024.0,
        with as f64 / 1024.0,
        with.saturating_sub(before) as f64 / asked.len().max(1) as f64
    );

    let mut latencies = Vec::new();
    let mut errors = 0;
    for ((url, retry), user) in asked.into_iter().zip(&users).take(options.completions) {
        let (callback, cookie) = browse_to_callback(&http, &url, user, base_a, base_b).await?;
        let sent = Instant::now();
        let done = http
            .get(&callback)
            .header("x-forwarded-user", user)
            .header("cookie", cookie)
            .send()
            .await
            .map_err(|e| e.to_string())?;
        let answered = tokio::time::timeout(Duration::from_secs(10), retry).await;
        match (done.status().is_success(), answered) {
            (true, Ok(Ok(Ok((at, true))))) => {
                let latency = at.saturating_duration_since(sent);
                latencies.push(latency.as_micros().min(u128::from(u32::MAX)) as u32);
            }
            (_, outcome) => {
                if errors == 0 {
                    eprintln!("held retry not answered with the result: {outcome:?}");
                }
                errors += 1;
            }
        }
    }
    latencies.sort_unstable();
    println!("\n| completions (one at a time) | callback→held retry answered p50 | p99 | errors |\n|---|---|---|---|");
    println!(
        "| {} | {:.2} ms | {:.2} ms | {errors} |",
        latencies.len(),
        percentile(&latencies, 0.50),
        percentile(&latencies, 0.99)
    );
    Ok(())
}

/// `me` as `user` in 2026-07-28, the first time or as a retry with `state`; its result.
async fn call_me(http: &reqwest::Client, mcp: &str, user: &str, state: Option<&str>) -> Result<Value, String> {
    let mut params = json!({"name": "me", "arguments": {}, "_meta": stateless_meta()});
    if let Some(state) = state {
        params["requestState"] = json!(state);
        params["inputResponses"] = json!({});
    }
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params});
    let request = http
        .post(mcp)
        .header("accept", ACCEPT)
        .header("x-forwarded-user", user)
        .json(&body);
    let body = body_text(stateless_headers(request, "tools/call", "me")).await?;
    let answer: Value = serde_json::from_str(&body).map_err(|e| e.to_string())?;
    answer
        .get("result")
        .cloned()
        .ok_or_else(|| format!("tools/call failed: {answer}"))
}
