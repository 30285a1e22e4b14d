//! Traces (`[telemetry] otlp_endpoint`): the real binary exports its spans over OTLP/gRPC to a fake
//! collector on loopback; outgoing calls to HTTP tools and upstream MCP servers carry the trace as
//! `traceparent`; a client's `traceparent` is honoured; no exported attribute holds a secret.

mod common;
#[path = "common/echo.rs"]
mod echo;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::Request;
use axum::middleware::Next;
use common::fake_oauth::{FakeOptions, FakeProvider};
use common::otlp::Collector;
use common::replica::Replica;
use common::upstream::{self, Log};
use common::{Backend, Browser, McpClient, TEST_KEY, TestDatabase, elicitations, eventually, free_port, url_of};
use opentelemetry_proto::tonic::common::v1::any_value::Value as Attribute;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue};
use opentelemetry_proto::tonic::trace::v1::Span;
use reqwest::StatusCode;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::json;

use echo::Echo;

/// The trace the client's `traceparent` names, and its span.
const CLIENT_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN: &str = "00f067aa0ba902b7";

/// An attribute's value as text.
fn text(value: Option<&AnyValue>) -> String {
    match value.and_then(|value| value.value.as_ref()) {
        Some(Attribute::StringValue(text)) => text.clone(),
        Some(Attribute::IntValue(n)) => n.to_string(),
        Some(Attribute::BoolValue(b)) => b.to_string(),
        Some(Attribute::DoubleValue(x)) => x.to_string(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}

fn attribute(span: &Span, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|attribute| attribute.key == key)
        .map(|attribute| text(attribute.value.as_ref()))
}

/// Every attribute of every span and span event, as `key=value`.
fn every_attribute(spans: &[Span]) -> Vec<String> {
    let pairs = |attributes: &[KeyValue]| -> Vec<String> {
        attributes
            .iter()
            .map(|attribute| format!("{}={}", attribute.key, text(attribute.value.as_ref())))
            .collect()
    };
    spans
        .iter()
        .flat_map(|span| {
            let mut all = pairs(&span.attributes);
            all.push(format!("name={}", span.name));
            for event in &span.events {
                all.push(format!("event={}", event.name));
                all.extend(pairs(&event.attributes));
            }
            all
        })
        .collect()
}

/// The last span named `name` (spans are exported as they end).
fn last_named<'a>(spans: &'a [Span], name: &str) -> &'a Span {
    spans
        .iter()
        .rfind(|span| span.name == name)
        .unwrap_or_else(|| panic!("a span {name}: {:?}", names(spans)))
}

fn names(spans: &[Span]) -> Vec<&str> {
    spans.iter().map(|span| span.name.as_str()).collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// A `traceparent`'s trace id and parent span id.
fn parse_traceparent(value: &str) -> (String, String) {
    let parts: Vec<&str> = value.split('-').collect();
    assert_eq!(parts.len(), 4, "a W3C traceparent: {value}");
    assert_eq!(parts[0], "00", "{value}");
    (parts[1].to_owned(), parts[2].to_owned())
}

/// `peek` asks for the sign-in, the browser signs in at the fake provider, and the retry runs.
async fn sign_in_and_peek(client: &McpClient) {
    let call = json!({"name": "peek", "arguments": {"who": "path-argument"}});
    let asked = elicitations(&client.request("tools/call", call.clone()).await);
    let page = Browser::new().sign_in(&url_of(&asked[0])).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    let result = client.call("tools/call", call).await;
    assert_eq!(result["isError"], false, "{result}");
}

/// An upstream MCP server on loopback (rmcp, stateful), recording the head of every request.
async fn mcp_upstream() -> (String, Log) {
    let seen: Log = Arc::default();
    let service: StreamableHttpService<Echo, LocalSessionManager> = StreamableHttpService::new(
        || Ok(Echo::default()),
        Arc::default(),
        StreamableHttpServerConfig::default().with_sse_keep_alive(None),
    );
    let log = seen.clone();
    let app = Router::new()
        .nest_service("/mcp", service)
        .layer(axum::middleware::from_fn(move |request: Request, next: Next| {
            let log = log.clone();
            async move {
                log.lock().expect("log").push(upstream::Seen {
                    path: request.uri().path().to_owned(),
                    headers: request
                        .headers()
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("").to_owned()))
                        .collect(),
                    ..upstream::Seen::default()
                });
                next.run(request).await
            }
        }));
    let addr = upstream::serve(app).await;
    (format!("http://{addr}/mcp"), seen)
}

/// The fake provider's `fake`, a tool `peek` that sends its token (and its argument `who` in the
/// path) to the recording upstream, the upstream MCP server `up` (no credentials), and traces to
/// the collector.
fn configuration(fake: &FakeProvider, peek: SocketAddr, mcp: &str, collector: SocketAddr) -> String {
    let mut toml = fake.configure(include_str!("fixtures/fake_provider.toml"));
    toml.push_str(&format!(
        "\n[[tools]]\nname = \"peek\"\ndescription = \"Shows the token\"\nrequires = [\"fake\"]\n\
         input_schema = {{ type = \"object\", properties = {{ who = {{ type = \"string\" }} }} }}\n\
         http = {{ url = \"http://{peek}/peek/{{{{args.who}}}}?key=query-secret\" }}\n\
         \n[[upstreams]]\nid = \"up\"\nurl = \"{mcp}\"\ntimeout = \"5s\"\n\
         \n[telemetry]\notlp_endpoint = \"http://{collector}\"\nservice_name = \"gatehouse-test\"\n"
    ));
    toml
}

backend_test!(
    async fn spans_are_exported_and_the_trace_reaches_tools_and_upstreams(backend: Backend) {
        let database = TestDatabase::new(backend).await;
        let (collector, collector_addr) = Collector::start().await;
        let (peek, peeked) = upstream::recording().await;
        let (mcp, mcp_seen) = mcp_upstream().await;
        let fake = FakeProvider::start(FakeOptions::default()).await;
        let port = free_port();
        let public_url = format!("http://127.0.0.1:{port}");
        // A schedule far beyond the test: the spans arrive because shutdown flushes them.
        let replica = Replica::start_with_env(
            &database.url,
            &configuration(&fake, peek, &mcp, collector_addr),
            port,
            &public_url,
            TEST_KEY,
            &[("OTEL_BSP_SCHEDULE_DELAY", "600000")],
        )
        .await;
        let traceparent = format!("00-{CLIENT_TRACE}-{CLIENT_SPAN}-01");
        let mut client = McpClient::new(&replica.mcp()).with_header("traceparent", &traceparent);
        let session = client.initialize().await;
        let session_id = session
            .headers
            .get("mcp-session-id")
            .and_then(|value| value.to_str().ok())
            .expect("a session id")
            .to_owned();

        sign_in_and_peek(&client).await;
        eventually("the upstream's tools are listed", async || {
            let listed = client.call("tools/list", json!({})).await;
            listed["tools"]
                .as_array()?
                .iter()
                .any(|tool| tool["name"] == "up_echo")
                .then_some(())
        })
        .await;
        let result = client
            .call(
                "tools/call",
                json!({"name": "up_echo", "arguments": {"text": "argument-value"}}),
            )
            .await;
        assert_eq!(result["isError"], false, "{result}");
        replica.stop().await;
        let spans = collector.spans();

        // The HTTP tool got the trace: its parent is the outgoing call's span, in the MCP
        // request's trace, which is the client's.
        let peeked = peeked.lock().expect("log").clone();
        let sent = peeked.last().expect("the tool called its upstream");
        assert_eq!(sent.path, "/peek/path-argument");
        let token = sent
            .header("authorization")
            .and_then(|value| value.strip_prefix("Bearer "))
            .expect("the bearer token")
            .to_owned();
        let (trace, parent) = parse_traceparent(sent.header("traceparent").expect("traceparent sent to the tool"));
        let call = last_named(&spans, "tools/call peek");
        assert_eq!(hex(&call.trace_id), trace, "the tool's trace is the MCP request's");
        assert_eq!(trace, CLIENT_TRACE, "the client's traceparent is honoured");
        let outgoing = spans
            .iter()
            .find(|span| hex(&span.span_id) == parent)
            .expect("the tool's parent span is exported");
        assert_eq!(
            outgoing.parent_span_id, call.span_id,
            "the HTTP call is the MCP request's child"
        );
        assert_eq!(attribute(outgoing, "gatehouse.call").as_deref(), Some("tool"));
        assert_eq!(attribute(outgoing, "http.request.method").as_deref(), Some("GET"));
        assert_eq!(attribute(outgoing, "http.response.status_code").as_deref(), Some("200"));
        assert_eq!(
            attribute(outgoing, "url.full"),
            Some(format!("http://{peek}/peek/")),
            "no argument, no query string"
        );
        assert_eq!(attribute(call, "mcp.method.name").as_deref(), Some("tools/call"));
        assert_eq!(attribute(call, "gen_ai.tool.name").as_deref(), Some("peek"));
        // The MCP request's span is a child of the page request's, whose parent is the client's.
        let request = spans
            .iter()
            .find(|span| span.span_id == call.parent_span_id)
            .expect("the HTTP request's span");
        assert_eq!(attribute(request, "http.route").as_deref(), Some("/mcp"));
        assert_eq!(hex(&request.parent_span_id), CLIENT_SPAN);

        // The token exchange and the OAuth callback page are spans too.
        let exchange = spans
            .iter()
            .find(|span| attribute(span, "gatehouse.call").as_deref() == Some("oauth.exchange"))
            .expect("the code exchange's span");
        assert_eq!(attribute(exchange, "peer.service").as_deref(), Some("fake"));
        assert!(
            spans
                .iter()
                .any(|span| attribute(span, "http.route").as_deref() == Some("/oauth/callback")),
            "the callback page's span: {:?}",
            names(&spans)
        );

        // The upstream MCP server got the trace of its call, through an outgoing span.
        let upstream_call = last_named(&spans, "tools/call up_echo");
        let mcp_seen = mcp_seen.lock().expect("log").clone();
        let traced: Vec<(String, String)> = mcp_seen
            .iter()
            .filter_map(|seen| seen.header("traceparent"))
            .map(parse_traceparent)
            .collect();
        assert_eq!(traced.len(), 1, "only the call's POST is traced: {mcp_seen:?}");
        let (trace, parent) = &traced[0];
        assert_eq!(*trace, hex(&upstream_call.trace_id));
        let outgoing = spans
            .iter()
            .find(|span| hex(&span.span_id) == *parent)
            .expect("the upstream's parent span is exported");
        assert_eq!(attribute(outgoing, "gatehouse.call").as_deref(), Some("upstream"));
        assert_eq!(attribute(outgoing, "peer.service").as_deref(), Some("up"));
        assert_eq!(outgoing.trace_id, upstream_call.trace_id);

        // No secret, session id or argument value in any attribute.
        let everything = every_attribute(&spans);
        for secret in [
            token.as_str(),
            "fake-secret",
            "query-secret",
            session_id.as_str(),
            "argument-value",
            "path-argument",
            TEST_KEY,
        ] {
            let leaked: Vec<&String> = everything.iter().filter(|value| value.contains(secret)).collect();
            assert!(leaked.is_empty(), "{secret} leaked into {leaked:?}");
        }
    }
);

backend_test!(
    async fn without_an_endpoint_nothing_is_propagated(backend: Backend) {
        let database = TestDatabase::new(backend).await;
        let (peek, peeked) = upstream::recording().await;
        let fake = FakeProvider::start(FakeOptions::default()).await;
        let (mcp, _) = mcp_upstream().await;
        let (collector, collector_addr) = Collector::start().await;
        let config = configuration(&fake, peek, &mcp, collector_addr);
        let config = config.replace("[telemetry]\notlp_endpoint", "[telemetry]\n# otlp_endpoint");
        let port = free_port();
        let replica = Replica::start(
            &database.url,
            &config,
            port,
            &format!("http://127.0.0.1:{port}"),
            TEST_KEY,
        )
        .await;
        let traceparent = format!("00-{CLIENT_TRACE}-{CLIENT_SPAN}-01");
        let mut client = McpClient::new(&replica.mcp()).with_header("traceparent", &traceparent);
        client.initialize().await;
        sign_in_and_peek(&client).await;
        replica.stop().await;
        let peeked = peeked.lock().expect("log").clone();
        assert!(
            peeked.iter().all(|seen| seen.header("traceparent").is_none()),
            "{peeked:?}"
        );
        assert!(collector.spans().is_empty());
    }
);
