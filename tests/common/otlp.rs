//! A fake OpenTelemetry collector on loopback: OTLP/HTTP's trace endpoint (`POST /v1/traces`,
//! protobuf), counting the spans exported to it and keeping them for a test. Used by
//! `tests/traces.rs` and the benchmark's traced run (which only counts).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use opentelemetry_proto::tonic::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;

/// A fake OpenTelemetry collector: the spans exported to it, over OTLP/HTTP.
#[derive(Clone, Default)]
pub struct Collector {
    /// Whether spans are kept ([`Collector::spans`]) or only counted.
    keep: bool,
    spans: Arc<Mutex<Vec<Span>>>,
    counted: Arc<AtomicUsize>,
}

/// One export: a protobuf `ExportTraceServiceRequest`, answered as OTLP/HTTP answers it.
async fn export(State(collector): State<Collector>, body: Bytes) -> impl IntoResponse {
    let Ok(request) = ExportTraceServiceRequest::decode(body) else {
        return (
            StatusCode::BAD_REQUEST,
            [(header::CONTENT_TYPE, "text/plain")],
            Vec::new(),
        );
    };
    let spans: Vec<Span> = request
        .resource_spans
        .into_iter()
        .flat_map(|resource| resource.scope_spans)
        .flat_map(|scope| scope.spans)
        .collect();
    collector.counted.fetch_add(spans.len(), Ordering::Relaxed);
    if collector.keep {
        collector.spans.lock().expect("spans").extend(spans);
    }
    let answer = ExportTraceServiceResponse { partial_success: None };
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/x-protobuf")],
        answer.encode_to_vec(),
    )
}

impl Collector {
    /// Listens on a free loopback port for the rest of the test, keeping every span.
    pub async fn start() -> (Self, SocketAddr) {
        Self::listen(true).await
    }

    /// Listens on a free loopback port, counting spans only (a benchmark's millions).
    pub async fn start_counting() -> (Self, SocketAddr) {
        Self::listen(false).await
    }

    async fn listen(keep: bool) -> (Self, SocketAddr) {
        let collector = Self {
            keep,
            ..Self::default()
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind collector");
        let addr = listener.local_addr().expect("addr");
        let app = axum::Router::new()
            .route("/v1/traces", axum::routing::post(export))
            .with_state(collector.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        (collector, addr)
    }

    pub fn spans(&self) -> Vec<Span> {
        self.spans.lock().expect("spans").clone()
    }

    /// How many spans arrived.
    pub fn count(&self) -> usize {
        self.counted.load(Ordering::Relaxed)
    }
}
