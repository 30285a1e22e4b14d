//! gatehouse: an MCP server that gates tools behind what only a person in a browser can do.
//!
//! `App::build` builds the application (`app`) and `serve` runs its router on a listener until a
//! shutdown future completes; tests run exactly this on port 0. `serve_metrics` serves `/metrics` on a listener of its own
//! (`server.metrics_bind`), `serve_pages` the browser pages alone (`gatehouse stdio`). `cli` is
//! the program the binaries run ([`binary!`]).
//!
//! Unit tests of up to a hundred lines close the file they test (`#[cfg(test)] mod tests { ... }`);
//! longer ones sit in `tests.rs` in the module's own folder (`foo.rs` and `foo/mod.rs` both have
//! `foo/tests.rs`), never behind `#[path]`.

pub mod app;
pub mod audit;
pub mod cli;
pub mod clock;
pub mod config;
pub mod demo;
pub mod diagnosis;
pub mod domain;
pub mod edge;
pub mod events;
pub mod forms;
pub mod gate;
pub mod identity;
pub mod instance;
pub mod jose;
pub mod jsonrpc;
#[cfg(test)]
mod layers;
pub mod mcp;
pub mod metrics;
pub mod outbound;
pub mod path_prefix;
pub mod private_file;
pub mod providers;
pub mod public_url;
pub mod rate_limit;
pub mod refreshed;
pub mod retention;
pub mod routes;
pub mod secret;
pub mod state;
pub mod store;
pub mod telemetry;
pub mod text;
pub mod tools;
pub mod unread_body;
pub mod upstreams;
pub mod vault;
pub mod web;

use std::future::Future;
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tower::ServiceExt;

pub use app::App;
pub use config::Config;
pub use state::AppState;
#[cfg(feature = "jemalloc")]
#[doc(hidden)]
pub use tikv_jemallocator;

/// A binary's whole source: with the `jemalloc` feature jemalloc as the allocator, then
/// [`cli::main`].
///
/// jemalloc (the release binaries and the image build with it; its C build is a minute of a
/// first `cargo build`, so that does not) keeps an idle SSE connection's memory small: the unwritten pages of hyper's
/// per-connection buffers stay out of resident memory. See the book's benchmarks
/// (docs/src/benchmarks.md).
/// Freed pages go back to the OS at once instead of after jemalloc's default 10 s decay: with
/// thousands of streams opening in a burst that halves resident memory, at no measured cost in
/// throughput. `_RJEM_MALLOC_CONF` in the environment still overrides it.
#[macro_export]
macro_rules! binary {
    () => {
        #[cfg(feature = "jemalloc")]
        #[global_allocator]
        static ALLOCATOR: $crate::tikv_jemallocator::Jemalloc = $crate::tikv_jemallocator::Jemalloc;

        #[cfg(feature = "jemalloc")]
        #[allow(non_upper_case_globals)]
        #[unsafe(export_name = "_rjem_malloc_conf")]
        static malloc_conf: &[u8] = b"dirty_decay_ms:0,muzzy_decay_ms:0\0";

        fn main() -> std::process::ExitCode {
            $crate::cli::main()
        }
    };
}

/// hyper's HTTP/1 buffer limit, and so the longest request head: a bearer token up to the 16 KiB
/// gatehouse reads (Entra ID's with 200 group ids is about 11 KiB) plus ordinary headers, and a
/// longer token still reaches the handler for its `401 invalid_token`. Above it hyper answers 431
/// itself. The read buffer starts at 8 KiB and grows only for a head or body that fills it, so an
/// idle SSE connection with an ordinary head stays small; a client that does not read can have up
/// to this much queued for it.
const HTTP1_MAX_BUFFER: usize = 32 * 1024;
/// A client must send its request head within this time, so idle half-open connections go away.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// Serves HTTP/1.1 until `shutdown` completes, then closes the listening socket (new connections
/// are refused from then on), cancels the state's shutdown token so open streams end (after a
/// `retry:` hint) and waits for in-flight requests.
///
/// HTTP/1.1 only: MCP clients and reverse proxies speak it to upstreams, and an HTTP/1-only
/// connection costs about half the memory of one that could also be HTTP/2, which counts with
/// thousands of idle SSE streams (see the book's benchmarks, docs/src/benchmarks.md).
pub async fn serve(
    listener: TcpListener,
    app: App,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let token = app.state.shutdown.clone();
    serve_router(listener, app.router(), shutdown, move || token.cancel()).await
}

/// Serves [`App::pages_router`] until `shutdown` completes (`gatehouse stdio`'s browser pages).
pub async fn serve_pages(
    listener: TcpListener,
    app: App,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_router(listener, app.pages_router(), shutdown, || {}).await
}

/// Serves [`app::metrics_router`] until `shutdown` completes (the binary binds `server.metrics_bind`;
/// tests bind port 0). Never the public listener: `/metrics` there is 404.
pub async fn serve_metrics(
    listener: TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_router(listener, app::metrics_router(state), shutdown, || {}).await
}

/// The accept loop of [`serve`], [`serve_pages`] and [`serve_metrics`]; `closed` runs once the listening socket
/// is closed, before in-flight requests are waited for.
async fn serve_router(
    listener: TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
    closed: impl FnOnce(),
) -> std::io::Result<()> {
    let mut builder = http1::Builder::new();
    builder
        .max_buf_size(HTTP1_MAX_BUFFER)
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT);
    let graceful = GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of file descriptors, typically: wait instead of spinning.
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        // Small SSE events must leave at once, not wait for Nagle's algorithm.
        if let Err(error) = stream.set_nodelay(true) {
            tracing::debug!(%error, "cannot set TCP_NODELAY");
        }
        let router = router.clone();
        let service = hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
            request.extensions_mut().insert(ConnectInfo(peer));
            router.clone().oneshot(request)
        });
        let connection = graceful.watch(builder.serve_connection(TokioIo::new(stream), service));
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%peer, error = %error, "connection ended with an error");
            }
        });
    }
    // Close the listening socket before draining: new connections are refused at once, so a
    // proxy fails over instead of waiting in the backlog until the process exits.
    drop(listener);
    closed();
    graceful.shutdown().await;
    Ok(())
}
