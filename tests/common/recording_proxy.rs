//! A forward HTTP proxy on loopback that records what goes through it: the request line of each
//! plain-HTTP request (absolute form, `GET http://host:port/path HTTP/1.1`) and the target of
//! each `CONNECT`, then forwards it. Every forwarded request carries `Connection: close`, so each
//! request comes on a connection of its own and is recorded.

use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A request head, at most.
const MAX_HEAD: usize = 64 * 1024;

/// The running proxy; it stops when dropped.
pub struct RecordingProxy {
    pub url: String,
    seen: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl RecordingProxy {
    pub async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind the proxy");
        let addr = listener.local_addr().expect("the proxy's address");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let recorded = seen.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(relay(client, recorded.clone()));
            }
        });
        Self {
            url: format!("http://{addr}"),
            seen,
            task,
        }
    }

    /// Each request line (or `CONNECT` line) so far, in order.
    pub fn seen(&self) -> Vec<String> {
        self.seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

impl Drop for RecordingProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Reads one request head from `client`, records its first line and forwards the request (or
/// tunnels a `CONNECT`); answers 400 or 502 when it cannot.
async fn relay(mut client: TcpStream, seen: Arc<Mutex<Vec<String>>>) {
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    let end = loop {
        if let Some(end) = head.windows(4).position(|w| w == b"\r\n\r\n") {
            break end + 4;
        }
        match client.read(&mut buf).await {
            Ok(n) if n > 0 && head.len() + n <= MAX_HEAD => head.extend_from_slice(&buf[..n]),
            _ => return,
        }
    };
    let text = String::from_utf8_lossy(&head[..end]).into_owned();
    let line = text.lines().next().unwrap_or_default().to_owned();
    seen.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .push(line.clone());
    let mut parts = line.split(' ');
    let (method, target) = (parts.next().unwrap_or_default(), parts.next().unwrap_or_default());
    if method == "CONNECT" {
        let Ok(mut upstream) = TcpStream::connect(target).await else {
            let _ = client
                .write_all(b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\n\r\n")
                .await;
            return;
        };
        if client
            .write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")
            .await
            .is_ok()
        {
            let _ = client.write_all(&head[end..]).await;
            let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
        }
        return;
    }
    let Some((authority, path)) = target
        .strip_prefix("http://")
        .map(|rest| rest.split_at(rest.find('/').unwrap_or(rest.len())))
    else {
        let _ = client
            .write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")
            .await;
        return;
    };
    let Ok(mut upstream) = TcpStream::connect(authority).await else {
        let _ = client
            .write_all(b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\n\r\n")
            .await;
        return;
    };
    // The request in origin form, its connection closed after the answer.
    let path = if path.is_empty() { "/" } else { path };
    let mut forwarded = format!("{method} {path} HTTP/1.1\r\n");
    for header in text.lines().skip(1).take_while(|l| !l.is_empty()) {
        let name = header.split(':').next().unwrap_or_default().trim().to_ascii_lowercase();
        if name != "connection" && name != "proxy-connection" && name != "keep-alive" {
            forwarded.push_str(header);
            forwarded.push_str("\r\n");
        }
    }
    forwarded.push_str("connection: close\r\n\r\n");
    if upstream.write_all(forwarded.as_bytes()).await.is_ok() && upstream.write_all(&head[end..]).await.is_ok() {
        let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
    }
}
