//! Section "loop": the whole URL-elicitation loop on two replicas against the fake OAuth provider,
//! with the browser on the replica holding the client's stream and on the other one, over
//! PostgreSQL without TLS and with it (`--loop-tls`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sqlx::Connection;

use super::{ACCEPT, Database, Options, Tls, body_text, fake_oauth, local, percentile, start_gatehouse, wait_until_up};

/// Where a loop's browser goes: the replica holding the client's stream, or the other one.
#[derive(Clone, Copy)]
enum BrowserOn {
    SameReplica,
    OtherReplica,
}

struct LoopResult {
    loops: u64,
    errors: u64,
    seconds: f64,
    /// Callback request sent to completion notification received, in microseconds.
    latencies: Vec<u32>,
}

/// The whole loop on two replicas: call, -32042, connect page, fake provider, callback,
/// notification on the stream, retry. Every loop is a new user, so every loop signs in. Runs once
/// per `--loop-tls` mode, each with new replicas on the same database.
pub(super) async fn section(options: &Options, database: &Database) -> Result<(), String> {
    let fake = fake_oauth::FakeProvider::start(fake_oauth::FakeOptions::default()).await;
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let config = dir.path().join("gatehouse.toml");
    std::fs::write(&config, loop_config(&fake)).map_err(|e| e.to_string())?;
    let pace = options.loop_rate.map_or_else(
        || "as fast as they go".to_owned(),
        |rate| format!("{rate} loops/s at most"),
    );
    println!(
        "\n## URL-elicitation loop on two replicas ({} workers, {pace}, {} s each, fake OAuth provider on loopback)\n",
        options.loop_workers,
        options.duration.as_secs()
    );
    println!(
        "| database | browser on | loops/s | callback→notification p50 | p99 | loops | errors |\n|---|---|---|---|---|---|---|"
    );
    for &tls in &options.loop_tls {
        let url = with_sslmode(&database.url, tls)?;
        // A server without TLS would fail the replicas' start; say so in the table instead.
        if let Err(error) = sqlx::PgConnection::connect(&url).await {
            println!("| {} | PostgreSQL refused ({error}) | | | | | |", tls.label());
            continue;
        }
        loops_on(options, &url, &config, tls).await?;
    }
    Ok(())
}

/// `url` with its `sslmode` set for `tls`.
fn with_sslmode(url: &str, tls: Tls) -> Result<String, String> {
    let mut url = url::Url::parse(url).map_err(|e| e.to_string())?;
    let query: Vec<(String, String)> = url
        .query_pairs()
        .filter(|(key, _)| key != "sslmode")
        .map(|(key, value)| (key.into_owned(), value.into_owned()))
        .collect();
    url.query_pairs_mut()
        .clear()
        .extend_pairs(query)
        .append_pair("sslmode", tls.sslmode());
    Ok(url.to_string())
}

/// Both browser placements on two new replicas connected to PostgreSQL at `url`.
async fn loops_on(options: &Options, url: &str, config: &std::path::Path, tls: Tls) -> Result<(), String> {
    let (port_a, port_b) = (local::free_port(), local::free_port());
    let public = format!("http://127.0.0.1:{port_a}");
    let mut a = start_gatehouse(url, port_a, Some((config, &public)))?;
    let mut b = start_gatehouse(url, port_b, Some((config, &public)))?;
    wait_until_up(&format!("http://127.0.0.1:{port_a}/healthz")).await?;
    wait_until_up(&format!("http://127.0.0.1:{port_b}/healthz")).await?;
    let replicas = (
        format!("http://127.0.0.1:{port_a}"),
        format!("http://127.0.0.1:{port_b}"),
    );
    for (label, browser_on) in [
        ("same replica", BrowserOn::SameReplica),
        ("other replica", BrowserOn::OtherReplica),
    ] {
        let result = run_loops(
            &replicas,
            browser_on,
            options.loop_workers,
            options.loop_rate,
            options.duration,
        )
        .await;
        let mut latencies = result.latencies;
        latencies.sort_unstable();
        println!(
            "| {} | {label} | {:.0} | {:.2} ms | {:.2} ms | {} | {} |",
            tls.label(),
            result.loops as f64 / result.seconds,
            percentile(&latencies, 0.50),
            percentile(&latencies, 0.99),
            result.loops,
            result.errors
        );
    }
    let _ = a.kill().await;
    let _ = b.kill().await;
    Ok(())
}

/// Header identity (each loop is another user), the fake provider and the tool that needs it.
/// Every page request comes from the load generator's one address, so the page rate is off.
pub(super) fn loop_config(fake: &fake_oauth::FakeProvider) -> String {
    format!(
        "{}[limits]\npage_requests_per_minute = 0\n{}",
        include_str!("../../tests/fixtures/header_identity.toml"),
        fake.configure(include_str!("../../tests/fixtures/fake_provider.toml"))
    )
}

async fn run_loops(
    replicas: &(String, String),
    browser_on: BrowserOn,
    workers: usize,
    rate: Option<f64>,
    duration: Duration,
) -> LoopResult {
    static USERS: AtomicU64 = AtomicU64::new(0);
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    // One pooled client for every loop (a browser and an MCP client per user would measure the
    // load generator's connection setup, not gatehouse). Cookies are handled per loop.
    let http = match reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
    {
        Ok(http) => http,
        Err(error) => {
            eprintln!("loop client: {error}");
            return LoopResult {
                loops: 0,
                errors: 1,
                seconds: 1.0,
                latencies: Vec::new(),
            };
        }
    };
    // Paced: loop k starts at k / rate seconds (or as soon as a worker is free, when late).
    let tickets = Arc::new(AtomicU64::new(0));
    let begin = tokio::time::Instant::now();
    let tasks: Vec<_> = (0..workers)
        .map(|_| {
            let (stop, replicas, http, tickets) = (stop.clone(), replicas.clone(), http.clone(), tickets.clone());
            tokio::spawn(async move {
                let (mut loops, mut errors, mut latencies) = (0u64, 0u64, Vec::new());
                while !stop.load(Ordering::Relaxed) {
                    if let Some(rate) = rate {
                        let ticket = tickets.fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep_until(begin + Duration::from_secs_f64(ticket as f64 / rate)).await;
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                    }
                    let user = format!("bench-user-{}", USERS.fetch_add(1, Ordering::Relaxed));
                    match one_loop(&http, &replicas, browser_on, &user).await {
                        Ok(latency) => {
                            loops += 1;
                            latencies.push(latency.as_micros().min(u32::MAX as u128) as u32);
                        }
                        Err(error) => {
                            if errors == 0 {
                                eprintln!("loop failed: {error}");
                            }
                            errors += 1;
                        }
                    }
                }
                (loops, errors, latencies)
            })
        })
        .collect();
    tokio::time::sleep(duration).await;
    stop.store(true, Ordering::Relaxed);
    let mut result = LoopResult {
        loops: 0,
        errors: 0,
        seconds: 0.0,
        latencies: Vec::new(),
    };
    for task in tasks {
        if let Ok((loops, errors, latencies)) = task.await {
            result.loops += loops;
            result.errors += errors;
            result.latencies.extend(latencies);
        }
    }
    result.seconds = started.elapsed().as_secs_f64();
    result
}

/// A user's browser from an elicitation's connect page (on `client_base`, opened on
/// `browser_base`) through the fake provider: the callback URL to open on `browser_base` and the
/// flow's cookie.
pub(super) async fn browse_to_callback(
    http: &reqwest::Client,
    url: &str,
    user: &str,
    client_base: &str,
    browser_base: &str,
) -> Result<(String, String), String> {
    let url = url.replace(client_base, browser_base);
    let page = body_text(http.get(&url).header("x-forwarded-user", user)).await?;
    let csrf = page
        .split("name=\"csrf\" value=\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .ok_or("no csrf")?
        .to_owned();
    let form = url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs([("action", "continue"), ("csrf", &csrf)])
        .finish();
    let continued = http
        .post(&url)
        .header("x-forwarded-user", user)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let cookie = continued
        .headers()
        .get("set-cookie")
        .and_then(|v| v.to_str().ok())
        .and_then(|c| c.split(';').next())
        .ok_or("no cookie")?
        .to_owned();
    let authorize = continued
        .headers()
        .get("location")
        .and_then(|v| v.to_str().ok())
        .ok_or("no redirect")?
        .to_owned();
    let at_provider = http.get(&authorize).send().await.map_err(|e| e.to_string())?;
    let callback = at_provider
        .headers()
        .get("location")
        .and_then(|v| v.to_str().ok())
        .ok_or("no callback")?
        .replace(client_base, browser_base);
    Ok((callback, cookie))
}

/// One user's loop; returns the time from sending the callback to receiving the notification.
async fn one_loop(
    http: &reqwest::Client,
    replicas: &(String, String),
    browser_on: BrowserOn,
    user: &str,
) -> Result<Duration, String> {
    let (client_base, browser_base) = match browser_on {
        BrowserOn::SameReplica => (&replicas.0, &replicas.0),
        BrowserOn::OtherReplica => (&replicas.0, &replicas.1),
    };
    let mcp = format!("{client_base}/mcp");
    let post = |body: Value, session: Option<&str>| {
        let mut request = http
            .post(&mcp)
            .header("accept", ACCEPT)
            .header("x-forwarded-user", user)
            .header("mcp-protocol-version", "2025-11-25")
            .json(&body);
        if let Some(session) = session {
            request = request.header("mcp-session-id", session);
        }
        request.send()
    };
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-11-25",
        "capabilities": {"elicitation": {"url": {}}}, "clientInfo": {"name": "bench", "version": "1"}}});
    let response = post(init, None).await.map_err(|e| e.to_string())?;
    let session = response
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .ok_or("no session")?
        .to_owned();
    let mut stream = http
        .get(&mcp)
        .header("accept", "text/event-stream")
        .header("x-forwarded-user", user)
        .header("mcp-session-id", &session)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    stream.chunk().await.map_err(|e| e.to_string())?;

    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "me"}});
    let answer: Value = post(call.clone(), Some(&session))
        .await
        .map_err(|e| e.to_string())?
        .json()
        .await
        .map_err(|e| e.to_string())?;
    let url = answer["error"]["data"]["elicitations"][0]["url"]
        .as_str()
        .ok_or("no -32042")?;
    let (callback, cookie) = browse_to_callback(http, url, user, client_base, browser_base).await?;

    let sent = Instant::now();
    let done = http
        .get(&callback)
        .header("x-forwarded-user", user)
        .header("cookie", cookie)
        .send();
    let notified = async {
        let mut seen = String::new();
        while !seen.contains("notifications/elicitation/complete") {
            let chunk = stream.chunk().await.map_err(|e| e.to_string())?.ok_or("stream ended")?;
            seen.push_str(&String::from_utf8_lossy(&chunk));
        }
        Ok::<_, String>(sent.elapsed())
    };
    let (done, latency) = tokio::join!(done, tokio::time::timeout(Duration::from_secs(10), notified));
    if !done.map_err(|e| e.to_string())?.status().is_success() {
        return Err("callback refused".into());
    }
    let latency = latency.map_err(|_| "no notification within 10 s")??;
    let retried: Value = post(call, Some(&session))
        .await
        .map_err(|e| e.to_string())?
        .json()
        .await
        .map_err(|e| e.to_string())?;
    if retried["result"]["isError"] != json!(false) {
        return Err(format!("retry failed: {retried}"));
    }
    http.delete(&mcp)
        .header("x-forwarded-user", user)
        .header("mcp-session-id", &session)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    Ok(latency)
}
