//! Upstream HTTP servers on loopback for HTTP tools: each records what gatehouse sent it, so tests
//! assert on the real request (path, query, headers, body) rather than on gatehouse's own account.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use serde_json::{Value, json};

/// What the upstream saw of one request.
#[derive(Debug, Default, Clone)]
pub struct Seen {
    pub path: String,
    pub query: String,
    /// Names in lower case, as HTTP/1 servers see them.
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Seen {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("upstream body is not JSON ({e}): {}", self.body))
    }
}

/// Every request an upstream saw, oldest first.
pub type Log = Arc<Mutex<Vec<Seen>>>;

/// Records one request in the log and returns it.
pub async fn record(State(log): State<Log>, uri: axum::http::Uri, headers: HeaderMap, body: Bytes) -> Seen {
    let seen = Seen {
        path: uri.path().to_owned(),
        query: uri.query().unwrap_or("").to_owned(),
        headers: headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("").to_owned()))
            .collect(),
        body: String::from_utf8_lossy(&body).into_owned(),
    };
    log.lock().expect("log").push(seen.clone());
    seen
}

/// Serves `app` on a free loopback port for the rest of the test.
pub async fn serve(app: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind upstream");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

/// An upstream that records every request, whatever its method and path, and answers with what it
/// received, Authorization header included: a careless API that echoes credentials, so tests can
/// check that gatehouse keeps them out of tool results.
pub async fn recording() -> (SocketAddr, Log) {
    let log: Log = Arc::default();
    let app = Router::new()
        .fallback(
            |state: State<Log>, uri: axum::http::Uri, headers: HeaderMap, body: Bytes| async move {
                let seen = record(state, uri, headers, body).await;
                axum::Json(json!({
                    "path": seen.path,
                    "authorization": seen.header("authorization"),
                    "body": seen.body,
                }))
            },
        )
        .with_state(log.clone());
    (serve(app).await, log)
}
