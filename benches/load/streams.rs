//! Idle GET streams: the server's resident memory with many of them open, and how to read it once
//! the allocator has settled.

use std::time::Duration;

use super::{initialize, rss_kib};

pub(super) struct StreamResult {
    pub(super) rss_before_mib: f64,
    pub(super) rss_with_streams_mib: f64,
    /// The streams, still open.
    pub(super) open: Vec<reqwest::Response>,
}

/// Opens `count` idle GET streams (one session each) and reads the server's resident memory.
pub(super) async fn idle_streams(url: &str, pid: u32, count: usize) -> Result<StreamResult, String> {
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(64)
        .build()
        .map_err(|e| e.to_string())?;
    let mut sessions = Vec::with_capacity(count);
    let initializers: Vec<_> = (0..16)
        .map(|worker| {
            let (http, url) = (http.clone(), url.to_owned());
            let share = count / 16 + usize::from(worker < count % 16);
            tokio::spawn(async move {
                let mut mine = Vec::with_capacity(share);
                for _ in 0..share {
                    mine.push(initialize(&http, &url, None).await?);
                }
                Ok::<_, String>(mine)
            })
        })
        .collect();
    for initializer in initializers {
        sessions.extend(initializer.await.map_err(|e| e.to_string())??);
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let rss_before = rss_kib(pid).ok_or("cannot read the server's memory")?;

    // Each stream has a connection of its own; the priming event proves it is open.
    let streams = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .map_err(|e| e.to_string())?;
    let mut open = Vec::with_capacity(count);
    let mut opening = Vec::new();
    for session in sessions {
        let (streams, url) = (streams.clone(), url.to_owned());
        opening.push(tokio::spawn(async move {
            let response = streams
                .get(&url)
                .header("accept", "text/event-stream")
                .header("mcp-session-id", session)
                .header("mcp-protocol-version", "2025-11-25")
                .send()
                .await
                .map_err(|e| e.to_string())?;
            if !response.status().is_success() {
                return Err(format!("GET stream: {}", response.status()));
            }
            let mut response = response;
            response.chunk().await.map_err(|e| e.to_string())?;
            Ok(response)
        }));
        if opening.len() == 256 {
            for task in opening.drain(..) {
                open.push(task.await.map_err(|e| e.to_string())??);
            }
        }
    }
    for task in opening {
        open.push(task.await.map_err(|e| e.to_string())??);
    }
    let rss_with = settled_rss_kib(pid).await?;
    Ok(StreamResult {
        rss_before_mib: rss_before as f64 / 1024.0,
        rss_with_streams_mib: rss_with as f64 / 1024.0,
        open,
    })
}

/// Resident memory once idle: the allocator returns memory freed while work was done within
/// seconds; samples until two readings a few seconds apart agree within 1% (at most ~30 s).
pub(super) async fn settled_rss_kib(pid: u32) -> Result<u64, String> {
    let mut rss = rss_kib(pid).ok_or("cannot read the server's memory")?;
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_secs(3)).await;
        let now = rss_kib(pid).ok_or("cannot read the server's memory")?;
        let settled = now.abs_diff(rss) * 100 <= rss;
        rss = now;
        if settled {
            break;
        }
    }
    Ok(rss)
}
