//! A 2026-07-28 client by hand: every request a POST carrying the headers and `_meta` the
//! stateless revision asks for, which a test may also leave out or get wrong on purpose.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use reqwest::StatusCode;
use serde_json::{Value, json};

use super::mcp::Reply;

pub const STATELESS: &str = "2026-07-28";

#[derive(Clone)]
pub struct StatelessClient {
    pub url: String,
    http: reqwest::Client,
    identity: Vec<(String, String)>,
    capabilities: Value,
    next_id: Arc<AtomicI64>,
}

impl StatelessClient {
    /// A client that can open URLs (`elicitation.url`).
    pub fn new(url: &str) -> Self {
        Self {
            url: url.to_owned(),
            http: reqwest::Client::new(),
            identity: Vec::new(),
            capabilities: json!({"elicitation": {"url": {}}}),
            next_id: Arc::new(AtomicI64::new(1)),
        }
    }

    /// This client with every request carrying `header: value` (header identity mode: the
    /// user's name, or their groups), besides the identity headers it has.
    pub fn with_user(mut self, header: &str, value: &str) -> Self {
        self.identity.push((header.to_owned(), value.to_owned()));
        self
    }

    /// This client declaring `capabilities` in every request.
    pub fn with_capabilities(self, capabilities: Value) -> Self {
        Self { capabilities, ..self }
    }

    /// The same client, addressed to another replica.
    pub fn at(&self, url: &str) -> Self {
        Self {
            url: url.to_owned(),
            ..self.clone()
        }
    }

    /// `params` with this client's `_meta` added to what it has (a `progressToken`, say).
    pub fn with_meta(&self, mut params: Value) -> Value {
        let meta = json!({
            "io.modelcontextprotocol/protocolVersion": STATELESS,
            "io.modelcontextprotocol/clientCapabilities": self.capabilities,
            "io.modelcontextprotocol/clientInfo": {"name": "gatehouse-tests", "version": "1.0"},
        });
        match params["_meta"].as_object_mut() {
            Some(existing) => existing.extend(meta.as_object().cloned().unwrap_or_default()),
            None => params["_meta"] = meta,
        }
        params
    }

    /// Sends `method` with `params` as they are (no `_meta` added) and the standard headers,
    /// changed by `headers`: a value replaces the header, `None` leaves it out.
    pub async fn send(&self, method: &str, params: Value, headers: &[(&str, Option<&str>)]) -> Reply {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let name = params
            .get("name")
            .or_else(|| params.get("uri"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        let mut standard: Vec<(String, Option<String>)> = vec![
            ("mcp-protocol-version".into(), Some(STATELESS.into())),
            ("mcp-method".into(), Some(method.into())),
            ("mcp-name".into(), name),
        ];
        for (header, value) in headers {
            let header = header.to_ascii_lowercase();
            standard.retain(|(h, _)| *h != header);
            standard.push((header, value.map(str::to_owned)));
        }
        let mut request = self
            .http
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .json(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        for (header, value) in standard.iter().filter_map(|(h, v)| v.as_ref().map(|v| (h, v))) {
            request = request.header(header.as_str(), value.as_str());
        }
        for (header, value) in &self.identity {
            request = request.header(header.as_str(), value.as_str());
        }
        let response = request.send().await.expect("POST /mcp");
        let status = response.status();
        let headers = response.headers().clone();
        let body = response.json().await.unwrap_or(Value::Null);
        Reply { status, headers, body }
    }

    /// `method` with this client's `_meta`, as a well-behaved client sends it.
    pub async fn request(&self, method: &str, params: Value) -> Reply {
        self.send(method, self.with_meta(params), &[]).await
    }

    /// `method` with this client's `_meta`, answered as an SSE stream: every message on it, in
    /// order, until the server ends it.
    pub async fn stream(&self, method: &str, params: Value) -> Vec<Value> {
        let name = params
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let mut request = self
            .http
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", STATELESS)
            .header("mcp-method", method)
            .header("mcp-name", name)
            .json(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": self.with_meta(params)}));
        for (header, value) in &self.identity {
            request = request.header(header.as_str(), value.as_str());
        }
        let response = request.send().await.expect("POST /mcp");
        assert_eq!(response.status(), StatusCode::OK);
        let content_type = response.headers().get("content-type").cloned();
        assert_eq!(
            content_type.as_ref().map(|v| v.as_bytes()),
            Some(&b"text/event-stream"[..])
        );
        let text = tokio::time::timeout(super::WAIT, response.text())
            .await
            .expect("the stream ends")
            .expect("body");
        text.lines()
            .filter_map(|line| line.strip_prefix("data:"))
            .map(|data| serde_json::from_str(data.trim()).expect("JSON on the stream"))
            .collect()
    }

    /// The result of `method`, which must succeed.
    pub async fn result(&self, method: &str, params: Value) -> Value {
        let reply = self.request(method, params).await;
        assert_eq!(reply.status, StatusCode::OK, "{method}: {}", reply.body);
        assert!(reply.body.get("error").is_none(), "{method}: {}", reply.body);
        reply.body["result"].clone()
    }
}

/// The error of a reply that must have failed with `status` and `code`.
pub fn refused(reply: &Reply, status: StatusCode, code: i64) -> Value {
    assert_eq!(reply.status, status, "{}", reply.body);
    assert_eq!(reply.body["error"]["code"], code, "{}", reply.body);
    reply.body["error"].clone()
}
