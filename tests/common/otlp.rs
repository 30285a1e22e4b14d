//! A fake OpenTelemetry collector on loopback: the OTLP/gRPC trace service (tonic), counting the
//! spans exported to it and keeping them for a test. Used by `tests/traces.rs` and the
//! benchmark's traced run (which only counts).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{TraceService, TraceServiceServer};
use opentelemetry_proto::tonic::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};
use opentelemetry_proto::tonic::trace::v1::Span;

/// A fake OpenTelemetry collector: the spans exported to it, over OTLP/gRPC.
#[derive(Clone, Default)]
pub struct Collector {
    /// Whether spans are kept ([`Collector::spans`]) or only counted.
    keep: bool,
    spans: Arc<Mutex<Vec<Span>>>,
    counted: Arc<AtomicUsize>,
}

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let spans: Vec<Span> = request
            .into_inner()
            .resource_spans
            .into_iter()
            .flat_map(|resource| resource.scope_spans)
            .flat_map(|scope| scope.spans)
            .collect();
        self.counted.fetch_add(spans.len(), Ordering::Relaxed);
        if self.keep {
            self.spans.lock().expect("spans").extend(spans);
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
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
        let incoming = futures::stream::unfold(listener, |listener| async move {
            let accepted = listener.accept().await.map(|(stream, _)| stream);
            Some((accepted, listener))
        });
        let service = TraceServiceServer::new(collector.clone());
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(incoming),
        );
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
