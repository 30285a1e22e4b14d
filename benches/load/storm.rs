//! A reconnect storm, as a replica restart behind a proxy causes: new sessions `initialize` and
//! open their GET stream 200 at a time while the streams opened before stay idle. Counts what was
//! answered, what was refused as an overload (503 "server busy"), what was refused as an outage
//! (any other 503), and how many of the streams open before ended meanwhile.

use std::time::{Duration, Instant};

use super::streams::settled_rss_kib;
use super::{open_session, rss_kib};

/// New sessions opening at once.
const WAVE: usize = 200;

/// How one request of the storm was answered.
#[derive(Default)]
struct Tally {
    ok: usize,
    /// 503 saying the server is busy.
    overload: usize,
    /// Any other 503: an outage.
    outage: usize,
    /// Anything else (another status, a transport error).
    other: usize,
}

impl Tally {
    fn count(&mut self, answer: &Result<(), Refused>) {
        match answer {
            Ok(()) => self.ok += 1,
            Err(Refused::Overload) => self.overload += 1,
            Err(Refused::Outage) => self.outage += 1,
            Err(Refused::Other(_)) => self.other += 1,
        }
    }
}

pub(super) enum Refused {
    Overload,
    Outage,
    Other(String),
}

impl Refused {
    /// A refusal with `status` and `body` (a JSON-RPC error).
    pub(super) fn of(status: reqwest::StatusCode, body: &str) -> Self {
        if status != reqwest::StatusCode::SERVICE_UNAVAILABLE {
            Self::Other(format!("{status}: {body}"))
        } else if body.contains("busy") {
            Self::Overload
        } else {
            Self::Outage
        }
    }
}

pub(super) struct StormResult {
    initialize: Tally,
    streams: Tally,
    /// Streams open before the storm that ended during it.
    dropped: usize,
    idle: usize,
    rss_before_mib: f64,
    rss_after_mib: f64,
    seconds: f64,
    first_other: Option<String>,
}

impl StormResult {
    pub(super) fn print(&self, sessions: usize) {
        println!(
            "\n## Reconnect storm: {sessions} new sessions, {WAVE} at a time, beside {} idle streams\n",
            self.idle
        );
        println!("| request | answered | refused as overload | refused as outage | other |\n|---|---|---|---|---|");
        for (name, tally) in [("initialize", &self.initialize), ("GET stream", &self.streams)] {
            println!(
                "| {name} | {} | {} | {} | {} |",
                tally.ok, tally.overload, tally.outage, tally.other
            );
        }
        println!(
            "\nidle streams dropped: {} of {}; storm took {:.1} s; RSS {:.1} MiB before, {:.1} MiB after",
            self.dropped, self.idle, self.seconds, self.rss_before_mib, self.rss_after_mib
        );
        if let Some(other) = &self.first_other {
            println!("first other answer: {other}");
        }
    }
}

/// Runs the storm against `url` (server `pid`) while `idle` streams stay open.
pub(super) async fn storm(
    url: &str,
    pid: u32,
    sessions: usize,
    idle: &mut [reqwest::Response],
) -> Result<StormResult, String> {
    let rss_before = rss_kib(pid).ok_or("cannot read the server's memory")?;
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .map_err(|e| e.to_string())?;
    let (mut initialize, mut streams) = (Tally::default(), Tally::default());
    let mut opened = Vec::with_capacity(sessions);
    let mut first_other = None;
    let started = Instant::now();
    for wave in 0..sessions.div_ceil(WAVE) {
        let size = WAVE.min(sessions - wave * WAVE);
        let tasks: Vec<_> = (0..size)
            .map(|_| {
                let (http, url) = (http.clone(), url.to_owned());
                tokio::spawn(async move {
                    let session = match open_session(&http, &url, None).await {
                        Ok(Ok(session)) => session,
                        Ok(Err((status, body))) => return (Err(Refused::of(status, &body)), None),
                        Err(error) => return (Err(Refused::Other(error)), None),
                    };
                    (Ok(()), Some(open_stream(&http, &url, &session).await))
                })
            })
            .collect();
        for task in tasks {
            let (initialized, stream) = task.await.map_err(|e| e.to_string())?;
            initialize.count(&initialized);
            let stream = stream.map(|stream| stream.map(|response| opened.push(response)));
            if let Some(stream) = &stream {
                streams.count(stream);
            }
            for answer in [Some(initialized), stream].into_iter().flatten() {
                if let Err(Refused::Other(other)) = answer {
                    first_other.get_or_insert(other);
                }
            }
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    let dropped = futures::future::join_all(idle.iter_mut().map(ended)).await;
    let rss_after = settled_rss_kib(pid).await?;
    drop(opened);
    Ok(StormResult {
        initialize,
        streams,
        dropped: dropped.into_iter().filter(|ended| *ended).count(),
        idle: idle.len(),
        rss_before_mib: rss_before as f64 / 1024.0,
        rss_after_mib: rss_after as f64 / 1024.0,
        seconds,
        first_other,
    })
}

/// Opens the session's GET stream and reads its first bytes (the priming event).
async fn open_stream(http: &reqwest::Client, url: &str, session: &str) -> Result<reqwest::Response, Refused> {
    let response = http
        .get(url)
        .header("accept", "text/event-stream")
        .header("mcp-session-id", session)
        .header("mcp-protocol-version", "2025-11-25")
        .send()
        .await
        .map_err(|e| Refused::Other(e.to_string()))?;
    let status = response.status();
    if !status.is_success() {
        let body = response.text().await.unwrap_or_default();
        return Err(Refused::of(status, &body));
    }
    let mut response = response;
    response.chunk().await.map_err(|e| Refused::Other(e.to_string()))?;
    Ok(response)
}

/// Whether the stream has ended: reads what it has sent (keep-alive comments, a `retry:` hint)
/// until nothing more arrives within a moment.
async fn ended(stream: &mut reqwest::Response) -> bool {
    let quiet = Instant::now() + Duration::from_millis(500);
    loop {
        match tokio::time::timeout_at(quiet.into(), stream.chunk()).await {
            Err(_) => return false,
            Ok(Ok(Some(_))) => continue,
            Ok(Ok(None) | Err(_)) => return true,
        }
    }
}
