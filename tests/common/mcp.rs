//! An MCP client over raw HTTP, so tests see every status and header: requests, the SSE streams of
//! a session and of a call, and readers of what comes back (tool results, -32042 elicitations).

use std::time::Duration;

use futures::StreamExt;
use reqwest::StatusCode;
use serde_json::{Value, json};

use super::{TestServer, WAIT};

pub const ACCEPT_BOTH: &str = "application/json, text/event-stream";

/// An MCP client over raw HTTP.
#[derive(Clone)]
pub struct McpClient {
    pub url: String,
    pub http: reqwest::Client,
    pub session: Option<String>,
    pub protocol_version: String,
    pub next_id: std::sync::Arc<std::sync::atomic::AtomicI64>,
    /// Headers sent with every request, as a reverse proxy in `header` identity mode adds them
    /// (or `Authorization: Bearer`).
    pub identity: Vec<(String, String)>,
}

pub struct Reply {
    pub status: StatusCode,
    pub headers: reqwest::header::HeaderMap,
    pub body: Value,
}

impl McpClient {
    pub fn new(url: &str) -> Self {
        Self {
            url: url.to_owned(),
            http: reqwest::Client::builder()
                .pool_max_idle_per_host(0)
                .build()
                .expect("client"),
            session: None,
            protocol_version: "2025-11-25".into(),
            next_id: std::sync::Arc::new(std::sync::atomic::AtomicI64::new(1)),
            identity: Vec::new(),
        }
    }

    /// The same session, addressed to another replica.
    pub fn on(&self, server: &TestServer) -> Self {
        Self {
            url: server.url.clone(),
            ..self.clone()
        }
    }

    /// This client with every request carrying `header: value` (header identity mode).
    pub fn with_user(self, header: &str, value: &str) -> Self {
        Self {
            identity: vec![(header.to_owned(), value.to_owned())],
            ..self
        }
    }

    /// This client with every request carrying one more header (the proxy's groups, email).
    pub fn with_header(mut self, header: &str, value: &str) -> Self {
        self.identity.push((header.to_owned(), value.to_owned()));
        self
    }

    /// Initializes with the given protocol version and capabilities, then sends `initialized`.
    pub async fn initialize_with(&mut self, version: &str, capabilities: Value) -> Reply {
        let body = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": version, "capabilities": capabilities,
            "clientInfo": {"name": "gatehouse-tests", "version": "1.0"}}});
        let reply = self.post_raw(&body, &[]).await;
        assert_eq!(reply.status, StatusCode::OK, "initialize: {}", reply.body);
        self.session = Some(
            reply
                .headers
                .get("mcp-session-id")
                .expect("Mcp-Session-Id on initialize")
                .to_str()
                .expect("ascii")
                .to_owned(),
        );
        self.protocol_version = reply.body["result"]["protocolVersion"]
            .as_str()
            .expect("version")
            .to_owned();
        let initialized = self.notify("notifications/initialized", json!({})).await;
        assert_eq!(initialized, StatusCode::ACCEPTED);
        reply
    }

    pub async fn initialize(&mut self) -> Reply {
        self.initialize_with("2025-11-25", json!({"elicitation": {"url": {}, "form": {}}}))
            .await
    }

    fn session_headers(&self) -> Vec<(String, String)> {
        let mut headers = vec![("MCP-Protocol-Version".to_owned(), self.protocol_version.clone())];
        if let Some(session) = &self.session {
            headers.push(("Mcp-Session-Id".to_owned(), session.clone()));
        }
        headers.extend(self.identity.iter().cloned());
        headers
    }

    /// POSTs `body` with the usual headers plus `extra` (which replace same-named ones).
    pub async fn post_raw(&self, body: &Value, extra: &[(&str, &str)]) -> Reply {
        self.post_bytes(body.to_string().into_bytes(), extra).await
    }

    pub async fn post_bytes(&self, body: Vec<u8>, extra: &[(&str, &str)]) -> Reply {
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert("accept", ACCEPT_BOTH.parse().expect("header"));
        headers.insert("content-type", "application/json".parse().expect("header"));
        for (name, value) in self.session_headers() {
            headers.insert(
                reqwest::header::HeaderName::from_bytes(name.as_bytes()).expect("name"),
                value.parse().expect("value"),
            );
        }
        for (name, value) in extra {
            let name = reqwest::header::HeaderName::from_bytes(name.as_bytes()).expect("name");
            if value.is_empty() {
                headers.remove(&name);
            } else {
                headers.insert(name, value.parse().expect("value"));
            }
        }
        let response = self
            .http
            .post(&self.url)
            .headers(headers)
            .body(body)
            .send()
            .await
            .expect("POST /mcp");
        let status = response.status();
        let headers = response.headers().clone();
        let streamed = headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        let bytes = response.bytes().await.expect("body");
        let body = if bytes.is_empty() {
            Value::Null
        } else if streamed {
            // An answer streamed as SSE (as a server may answer any request): its last message is
            // the response; what came before (progress, log messages) is not the caller's here.
            String::from_utf8_lossy(&bytes)
                .lines()
                .rev()
                .filter_map(|line| line.strip_prefix("data:"))
                .filter_map(|data| serde_json::from_str::<Value>(data.trim()).ok())
                .find(|message| message.get("id").is_some() && message.get("method").is_none())
                .unwrap_or(Value::Null)
        } else {
            serde_json::from_slice(&bytes).expect("JSON body")
        };
        Reply { status, headers, body }
    }

    pub async fn request(&self, method: &str, params: Value) -> Reply {
        let id = self.next_id.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.post_raw(
            &json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
            &[],
        )
        .await
    }

    /// A request whose answer comes as an SSE stream (a call that may ask for input on the way).
    pub async fn request_stream(&self, method: &str, params: Value) -> SseStream {
        let id = self.next_id.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut request = self
            .http
            .post(&self.url)
            .header("accept", ACCEPT_BOTH)
            .header("content-type", "application/json")
            .body(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string());
        for (name, value) in self.session_headers() {
            request = request.header(name, value);
        }
        let response = request.send().await.expect("POST /mcp");
        assert_eq!(response.status(), StatusCode::OK);
        let content_type = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        assert!(
            content_type.starts_with("text/event-stream"),
            "expected an SSE answer, got {content_type}: {:?}",
            response.text().await
        );
        SseStream::new(response)
    }

    /// A request that must succeed; returns its `result`.
    pub async fn call(&self, method: &str, params: Value) -> Value {
        let reply = self.request(method, params).await;
        assert_eq!(reply.status, StatusCode::OK, "{method}: {}", reply.body);
        assert!(reply.body.get("error").is_none(), "{method} failed: {}", reply.body);
        reply.body["result"].clone()
    }

    pub async fn notify(&self, method: &str, params: Value) -> StatusCode {
        self.post_raw(&json!({"jsonrpc": "2.0", "method": method, "params": params}), &[])
            .await
            .status
    }

    /// Opens the session's GET stream, resuming after `last_event_id` when given.
    pub async fn open_stream(&self, last_event_id: Option<&str>) -> SseStream {
        let mut request = self.http.get(&self.url).header("accept", "text/event-stream");
        for (name, value) in self.session_headers() {
            request = request.header(name, value);
        }
        if let Some(id) = last_event_id {
            request = request.header("last-event-id", id);
        }
        let response = request.send().await.expect("GET /mcp");
        assert_eq!(
            response.status(),
            StatusCode::OK,
            "GET stream: {:?}",
            response.text().await
        );
        SseStream::new(response)
    }

    pub async fn delete(&self) -> StatusCode {
        let mut request = self.http.delete(&self.url);
        for (name, value) in self.session_headers() {
            request = request.header(name, value);
        }
        request.send().await.expect("DELETE /mcp").status()
    }
}

/// One SSE event as received.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SseEvent {
    pub id: Option<String>,
    pub event: Option<String>,
    pub data: String,
    pub retry: Option<u64>,
}

impl SseEvent {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.data).unwrap_or_else(|e| panic!("event data is not JSON ({e}): {:?}", self.data))
    }
}

pub struct SseStream {
    bytes: futures::stream::BoxStream<'static, reqwest::Result<bytes::Bytes>>,
    buffer: String,
    pub ended: bool,
}

impl SseStream {
    pub fn new(response: reqwest::Response) -> Self {
        Self {
            bytes: response.bytes_stream().boxed(),
            buffer: String::new(),
            ended: false,
        }
    }

    /// The next block of the stream as it came, up to and with its blank line: an event, or only a
    /// comment (a keep-alive); None when the stream ends or `wait` passes.
    pub async fn next_block(&mut self, wait: Duration) -> Option<String> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                return Some(self.buffer.drain(..end + 2).collect());
            }
            if self.ended {
                return None;
            }
            match tokio::time::timeout_at(deadline, self.bytes.next()).await {
                Err(_) => return None,
                Ok(None) | Ok(Some(Err(_))) => {
                    self.ended = true;
                }
                Ok(Some(Ok(chunk))) => self
                    .buffer
                    .push_str(&String::from_utf8_lossy(&chunk).replace("\r\n", "\n")),
            }
        }
    }

    /// The next event (comments skipped), or None when the stream ends or `wait` passes.
    pub async fn next_event(&mut self, wait: Duration) -> Option<SseEvent> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let block = self.next_block(left).await?;
            let mut event = SseEvent::default();
            let mut has_field = false;
            for line in block.lines() {
                if line.starts_with(':') || line.is_empty() {
                    continue;
                }
                has_field = true;
                let (field, value) = line
                    .split_once(':')
                    .map_or((line, ""), |(f, v)| (f, v.strip_prefix(' ').unwrap_or(v)));
                match field {
                    "id" => event.id = Some(value.to_owned()),
                    "event" => event.event = Some(value.to_owned()),
                    "data" => {
                        if !event.data.is_empty() {
                            event.data.push('\n');
                        }
                        event.data.push_str(value);
                    }
                    "retry" => event.retry = value.parse().ok(),
                    _ => {}
                }
            }
            if has_field {
                return Some(event);
            }
        }
    }

    /// Waits for `notifications/elicitation/complete` (skipping other messages) and returns its
    /// elicitation id.
    pub async fn next_completion(&mut self) -> String {
        loop {
            let (_, message) = self.next_message(WAIT).await.expect("a completion notification");
            if message["method"] == "notifications/elicitation/complete" {
                return message["params"]["elicitationId"].as_str().expect("id").to_owned();
            }
        }
    }

    /// The next event that carries a JSON-RPC message.
    pub async fn next_message(&mut self, wait: Duration) -> Option<(SseEvent, Value)> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let event = self.next_event(left).await?;
            if !event.data.is_empty() {
                let message = event.json();
                return Some((event, message));
            }
        }
    }
}

/// Appends a message to a session's event log through the server's own bus.
pub async fn publish(server: &TestServer, session: &str, message: &Value) -> i64 {
    let id = session.parse().expect("session id");
    server
        .state
        .bus
        .publish(&id, message)
        .await
        .expect("publish")
        .expect("session exists")
}

pub fn note(n: i64) -> Value {
    json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "logger": "test", "data": {"n": n}}})
}

/// The numbers of the next `count` [`note`]s on `stream`, as they came.
pub async fn next_notes(stream: &mut SseStream, count: usize) -> Vec<i64> {
    let mut seen = Vec::new();
    while seen.len() < count {
        let (_, message) = stream
            .next_message(WAIT)
            .await
            .unwrap_or_else(|| panic!("every event on the stream; got {seen:?}"));
        seen.push(message["params"]["data"]["n"].as_i64().expect("n"));
    }
    seen
}

/// The first content block's text of a tool result.
pub fn text(result: &Value) -> String {
    result["content"][0]["text"].as_str().expect("text content").to_owned()
}

/// The link of an elicitation.
pub fn url_of(elicitation: &Value) -> String {
    elicitation["url"].as_str().expect("url").to_owned()
}

/// The elicitations of a -32042 answer, whose message names each link (for clients that show
/// only the message) and asks for the request again.
pub fn elicitations(reply: &Reply) -> Vec<Value> {
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    assert_eq!(
        reply.body["error"]["code"], -32042,
        "expected URL elicitation: {}",
        reply.body
    );
    let elicitations = reply.body["error"]["data"]["elicitations"]
        .as_array()
        .expect("elicitations")
        .clone();
    let message = reply.body["error"]["message"].as_str().expect("message");
    assert!(message.contains("then retry"), "{message}");
    for elicitation in &elicitations {
        let url = url_of(elicitation);
        assert!(
            message.split_whitespace().any(|word| word == url),
            "the message names {url}: {message}"
        );
    }
    elicitations
}

/// Reads the call's stream up to its `elicitation/create`, returning it and what came before.
pub async fn elicitation_request(stream: &mut SseStream) -> (Value, Vec<Value>) {
    let mut before = Vec::new();
    loop {
        let (_, message) = stream
            .next_message(WAIT)
            .await
            .expect("elicitation/create on the call's stream");
        if message["method"] == "elicitation/create" {
            return (message, before);
        }
        before.push(message);
    }
}

/// Reads the call's stream to its response, returning it and the notifications before it.
pub async fn call_response(stream: &mut SseStream) -> (Value, Vec<Value>) {
    let mut before = Vec::new();
    loop {
        let (_, message) = stream.next_message(WAIT).await.expect("the call's response");
        if message.get("result").is_some() || message.get("error").is_some() {
            assert!(
                stream.next_event(Duration::from_millis(500)).await.is_none(),
                "the stream ends after the response"
            );
            return (message, before);
        }
        before.push(message);
    }
}

pub async fn answer(client: &McpClient, request: &Value, action: &str) {
    let reply = client
        .post_raw(
            &json!({"jsonrpc": "2.0", "id": request["id"], "result": {"action": action}}),
            &[],
        )
        .await;
    assert_eq!(reply.status, StatusCode::ACCEPTED, "{}", reply.body);
}
