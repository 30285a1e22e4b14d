//! The benchmark's fast upstream: an rmcp Streamable HTTP MCP server on loopback, in the bench
//! process, with one tool `echo(text)`, stateful sessions, and counts of the sessions it holds.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::serve::ListenerExt;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use super::echo::Echo;

pub struct FastUpstream {
    /// The MCP endpoint, `http://127.0.0.1:{port}/mcp`.
    pub url: String,
    sessions: Arc<LocalSessionManager>,
    initializes: Arc<AtomicU64>,
    stop: CancellationToken,
    server: tokio::task::JoinHandle<()>,
}

impl FastUpstream {
    /// Listens on a free loopback port and serves until `stop`.
    pub async fn start() -> Result<Self, String> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| format!("fast upstream: {e}"))?;
        let port = listener.local_addr().map_err(|e| format!("fast upstream: {e}"))?.port();
        // Stateful sessions (rmcp answers their POSTs as short SSE streams; its `json_response`
        // applies only without sessions). No priming events or keep-alive pings: nothing to resume.
        let mut manager = LocalSessionManager::default();
        manager.session_config.sse_retry = None;
        let sessions = Arc::new(manager);
        let stop = CancellationToken::new();
        let config = StreamableHttpServerConfig::default()
            .with_sse_keep_alive(None)
            .with_sse_retry(None)
            .with_cancellation_token(stop.child_token());
        let initializes = Arc::new(AtomicU64::new(0));
        let counter = initializes.clone();
        // rmcp builds one handler per new session, that is per initialize.
        let service: StreamableHttpService<Echo, LocalSessionManager> = StreamableHttpService::new(
            move || {
                counter.fetch_add(1, Ordering::Relaxed);
                Ok(Echo::default())
            },
            sessions.clone(),
            config,
        );
        let router = axum::Router::new().nest_service("/mcp", service);
        let shutdown = stop.clone();
        // Without TCP_NODELAY a response written in pieces (SSE headers, event, end) waits for the
        // client's delayed ACK: ~40 ms per call on loopback, which is not what a fast upstream does.
        let listener = listener.tap_io(|tcp| {
            if let Err(error) = tcp.set_nodelay(true) {
                eprintln!("fast upstream: TCP_NODELAY: {error}");
            }
        });
        let server = tokio::spawn(async move {
            let served = axum::serve(listener, router)
                .with_graceful_shutdown(async move { shutdown.cancelled_owned().await })
                .await;
            if let Err(error) = served {
                eprintln!("fast upstream stopped: {error}");
            }
        });
        Ok(Self {
            url: format!("http://127.0.0.1:{port}/mcp"),
            sessions,
            initializes,
            stop,
            server,
        })
    }

    /// Sessions the server holds right now.
    pub async fn open_sessions(&self) -> usize {
        self.sessions.sessions.read().await.len()
    }

    /// Sessions ever created (each an `initialize`).
    pub fn initializes(&self) -> u64 {
        self.initializes.load(Ordering::Relaxed)
    }

    pub async fn stop(self) {
        self.stop.cancel();
        let _ = self.server.await;
    }
}
