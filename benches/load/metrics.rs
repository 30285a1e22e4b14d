//! Section "metrics": `whoami` at N clients against gatehouse without `server.metrics_bind`, then
//! with it, back to back on the same machine and database, and `/metrics` scrapes timed while the
//! second run is under load (spread evenly over its measured window). Both runs have no
//! `telemetry.otlp_endpoint`, so tracing's spans are there but off, as in production without it; a
//! third run with metrics exports every span to a collector in the benchmark's process (OTLP/gRPC).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::json;

use super::otlp::Collector;
use super::{
    Database, Era, LoadResult, Options, Target, Who, call_load, gatehouse_command, local, percentile, report,
    wait_until_up,
};

pub(super) async fn section(options: &Options, database: &Database) -> Result<(), String> {
    println!(
        "\n## whoami without and with metrics at {} concurrent clients ({} s measured after {} s warm-up), \
         {} scrapes while loaded\n",
        options.clients,
        options.duration.as_secs(),
        options.warmup.as_secs(),
        options.scrapes
    );
    println!("| metrics | calls/s | p50 ms | p99 ms | calls | errors |\n|---|---|---|---|---|---|");
    let off = run(options, database, None, None).await?.0;
    report("off (no metrics_bind, no otlp_endpoint)", &off);
    let (on, scrapes) = run(options, database, Some(local::free_port()), None).await?;
    report("on (metrics_bind, scraped; spans off)", &on);
    let (collector, collector_addr) = collector()?;
    let (traced, _) = run(options, database, Some(local::free_port()), Some(collector_addr)).await?;
    report("on, and every span exported", &traced);
    let rate = |result: &LoadResult| result.calls as f64 / result.seconds;
    println!(
        "\nwith / without metrics (spans off) throughput: {:.3}\n\
         with metrics and exported traces / without: {:.3} ({} spans received, warm-up included)",
        rate(&on) / rate(&off),
        rate(&traced) / rate(&off),
        collector.count()
    );
    let Some(scrapes) = scrapes else {
        return Err("the run with metrics was not scraped".into());
    };
    let mut latencies = scrapes.latencies;
    latencies.sort_unstable();
    println!(
        "/metrics while loaded: {} scrapes, p50 {:.2} ms, p99 {:.2} ms, {} bytes, {} failed; \
         tools/call counted: {}",
        latencies.len(),
        percentile(&latencies, 0.50),
        percentile(&latencies, 0.99),
        scrapes.bytes,
        scrapes.failed,
        scrapes.counted_calls.as_deref().unwrap_or("nothing")
    );
    Ok(())
}

/// What the scrapes measured, and the last one's count of successful `tools/call`.
struct Scrapes {
    latencies: Vec<u32>,
    bytes: usize,
    failed: usize,
    counted_calls: Option<String>,
}

/// A gatehouse (local identity) under the load; with `metrics_port`, metrics on and scraped there;
/// with `otlp`, its spans exported there.
async fn run(
    options: &Options,
    database: &Database,
    metrics_port: Option<u16>,
    otlp: Option<SocketAddr>,
) -> Result<(LoadResult, Option<Scrapes>), String> {
    let port = local::free_port();
    let mut command = gatehouse_command(&database.url, port, None);
    if let Some(metrics_port) = metrics_port {
        command.env("GATEHOUSE_SERVER__METRICS_BIND", format!("127.0.0.1:{metrics_port}"));
    }
    if let Some(otlp) = otlp {
        command.env("GATEHOUSE_TELEMETRY__OTLP_ENDPOINT", format!("http://{otlp}"));
    }
    let mut gatehouse = command.spawn().map_err(|e| format!("cannot start gatehouse: {e}"))?;
    let public = format!("http://127.0.0.1:{port}");
    wait_until_up(&format!("{public}/healthz")).await?;
    let target = Target {
        name: "whoami",
        url: format!("{public}/mcp"),
        tool: "whoami",
        method: "tools/call",
        arguments: json!({}),
        who: Who::Nobody,
        era: Era::Handshake,
    };
    let loaded = call_load(&target, options.clients, options.warmup, options.duration);
    let outcome = match metrics_port {
        None => loaded.await.map(|result| (result, None)),
        Some(metrics_port) => {
            let url = format!("http://127.0.0.1:{metrics_port}/metrics");
            wait_until_up(&url).await?;
            let scraper = scraper(url, options)?;
            let result = loaded.await;
            let scrapes = tokio::task::spawn_blocking(move || scraper.join())
                .await
                .map_err(|e| format!("the scraper's thread failed: {e}"))?
                .map_err(|_| "the scraper panicked".to_string())?;
            result.map(|result| (result, Some(scrapes)))
        }
    };
    let _ = gatehouse.kill().await;
    outcome
}

/// A collector that counts spans, on a thread and runtime of its own (a process of its own in
/// production), for the rest of the benchmark.
fn collector() -> Result<(Collector, SocketAddr), String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the collector's runtime: {e}"))?;
    let (started, listening) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("collector".into())
        .spawn(move || {
            runtime.block_on(async move {
                let _ = started.send(Collector::start_counting().await);
                std::future::pending::<()>().await;
            });
        })
        .map_err(|e| format!("cannot start the collector's thread: {e}"))?;
    listening.recv().map_err(|_| "the collector did not start".to_string())
}

/// The scrapes on a thread and runtime of their own, as Prometheus would be a process of its own:
/// on the load generator's runtime a scrape's time would include waiting behind 50 clients' tasks.
fn scraper(url: String, options: &Options) -> Result<std::thread::JoinHandle<Scrapes>, String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the scraper's runtime: {e}"))?;
    let (warmup, duration, count) = (options.warmup, options.duration, options.scrapes);
    std::thread::Builder::new()
        .name("scraper".into())
        .spawn(move || runtime.block_on(scrape_while_loaded(&url, warmup, duration, count)))
        .map_err(|e| format!("cannot start the scraper's thread: {e}"))
}

/// `options.scrapes` scrapes spread evenly over the measured window (after the warm-up; the
/// clients' sessions are opened first, which the warm-up covers only roughly).
async fn scrape_while_loaded(url: &str, warmup: Duration, duration: Duration, count: usize) -> Scrapes {
    let http = reqwest::Client::new();
    let mut scrapes = Scrapes {
        latencies: Vec::with_capacity(count),
        bytes: 0,
        failed: 0,
        counted_calls: None,
    };
    tokio::time::sleep(warmup).await;
    let spacing = duration / u32::try_from(count.max(1)).unwrap_or(u32::MAX);
    let mut ticks = tokio::time::interval(spacing.max(Duration::from_millis(1)));
    for _ in 0..count {
        ticks.tick().await;
        let started = Instant::now();
        let text = match http.get(url).send().await {
            Ok(response) if response.status().is_success() => response.text().await.ok(),
            _ => None,
        };
        let Some(text) = text else {
            scrapes.failed += 1;
            continue;
        };
        scrapes
            .latencies
            .push(started.elapsed().as_micros().min(u128::from(u32::MAX)) as u32);
        scrapes.bytes = text.len();
        scrapes.counted_calls = text
            .lines()
            .find_map(|line| line.strip_prefix(r#"gatehouse_mcp_requests_total{method="tools/call",outcome="ok"} "#))
            .map(str::to_owned);
    }
    scrapes
}
