//! JSON-RPC 2.0 as MCP uses it: classifying incoming messages and shaping responses. A leaf: it
//! imports nothing of gatehouse, so every layer may use it.

use serde::Serialize;
use serde_json::{Map, Value, json};

pub const PARSE_ERROR: i64 = -32700;
pub const INVALID_REQUEST: i64 = -32600;
pub const METHOD_NOT_FOUND: i64 = -32601;
pub const INVALID_PARAMS: i64 = -32602;
pub const INTERNAL_ERROR: i64 = -32603;
/// MCP 2025-11-25: the request needs the user to complete URL-mode elicitations first.
pub const URL_ELICITATION_REQUIRED: i64 = -32042;
/// MCP 2026-07-28: an `MCP-Protocol-Version`, `Mcp-Method` or `Mcp-Name` header is missing or
/// disagrees with the body.
pub const HEADER_MISMATCH: i64 = -32020;
/// MCP 2026-07-28: answering needs a client capability the request did not declare.
pub const MISSING_REQUIRED_CLIENT_CAPABILITY: i64 = -32021;
/// MCP 2026-07-28: the request's protocol version is not one this server speaks.
pub const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;
/// A server error of ours (-32000..-32099): the service cannot answer right now (its database
/// is unreachable); the same request may succeed a moment later.
pub const SERVICE_UNAVAILABLE: i64 = -32010;

/// A request id: MCP allows strings and integers, never null.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(untagged)]
pub enum RequestId {
    Number(i64),
    String(String),
}

impl RequestId {
    /// A string or an integer; `None` for anything else (null, a fraction, an object).
    pub fn from_json(value: &Value) -> Option<Self> {
        match value {
            Value::String(id) => Some(RequestId::String(id.clone())),
            Value::Number(n) => n.as_i64().map(RequestId::Number),
            _ => None,
        }
    }
}

#[derive(Debug, Clone)]
pub enum Message {
    Request {
        id: RequestId,
        method: String,
        params: Option<Value>,
    },
    Notification {
        method: String,
        params: Option<Value>,
    },
    /// A client's answer to a request the server sent: its result, or its error.
    Response {
        id: RequestId,
        answer: Result<Value, Value>,
    },
}

impl Message {
    pub fn method(&self) -> Option<&str> {
        match self {
            Message::Request { method, .. } | Message::Notification { method, .. } => Some(method),
            Message::Response { .. } => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
    pub data: Option<Value>,
}

impl RpcError {
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            data: None,
        }
    }

    pub fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }

    pub fn invalid_params(message: impl Into<String>) -> Self {
        Self::new(INVALID_PARAMS, message)
    }

    /// What clients see of a server fault; the cause is logged, never sent.
    pub fn internal() -> Self {
        Self::new(INTERNAL_ERROR, "Internal error")
    }

    /// What clients see while the service cannot answer (sent with HTTP 503 and `Retry-After`).
    pub fn unavailable() -> Self {
        Self::new(SERVICE_UNAVAILABLE, "service unavailable, retry shortly")
    }

    /// What clients see while every database connection is in use (an overload, not an outage;
    /// also sent with HTTP 503 and `Retry-After`).
    pub fn busy() -> Self {
        Self::new(SERVICE_UNAVAILABLE, BUSY_MESSAGE)
    }

    /// The service cannot answer now, for an outage or an overload: a retry later may succeed.
    pub fn is_unavailable(&self) -> bool {
        self.code == SERVICE_UNAVAILABLE
    }

    /// The service is overloaded ([`RpcError::busy`]) rather than unable to reach its database.
    pub fn is_busy(&self) -> bool {
        self.is_unavailable() && self.message == BUSY_MESSAGE
    }
}

const BUSY_MESSAGE: &str = "server busy: too many requests at once, retry shortly";

/// A response body: `id` is null only when the request's id could not be read.
pub fn error_response(id: Option<&RequestId>, error: &RpcError) -> Value {
    let mut body = json!({"code": error.code, "message": error.message});
    if let Some(data) = &error.data {
        body["data"] = data.clone();
    }
    json!({"jsonrpc": "2.0", "id": id, "error": body})
}

pub fn result_response(id: &RequestId, result: Value) -> Value {
    message([("id", json!(id)), ("result", result)])
}

/// A request the server sends to the client.
pub fn request(id: &str, method: &str, params: Value) -> Value {
    message([("id", id.into()), ("method", method.into()), ("params", params)])
}

pub fn notification(method: &str, params: Value) -> Value {
    message([("method", method.into()), ("params", params)])
}

/// A JSON-RPC 2.0 message of these members. They are moved in: `json!` would serialize a `Value`
/// into a copy of itself, a whole answer's worth of allocations for each response.
fn message<const N: usize>(members: [(&str, Value); N]) -> Value {
    let mut object = Map::new();
    object.insert("jsonrpc".into(), "2.0".into());
    object.extend(members.into_iter().map(|(name, value)| (name.to_owned(), value)));
    Value::Object(object)
}

/// The method of MCP's notice that a URL-mode elicitation is over.
pub const ELICITATION_COMPLETE: &str = "notifications/elicitation/complete";

/// The MCP methods gatehouse answers itself, whatever is configured.
pub const OWN_METHODS: [&str; 6] = [
    "initialize",
    "ping",
    "tools/list",
    "tools/call",
    "logging/setLevel",
    "server/discover",
];

/// The methods it answers for the upstreams' resources, prompts and completions (`mcp::offered`).
pub const OFFERED_METHODS: [&str; 8] = [
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "resources/subscribe",
    "resources/unsubscribe",
    "prompts/list",
    "prompts/get",
    "completion/complete",
];

/// MCP's notice that the URL-mode elicitation `elicitation_id` is over: the client may retry
/// what waited for it.
pub fn elicitation_complete(elicitation_id: &str) -> Value {
    notification(ELICITATION_COMPLETE, json!({ "elicitationId": elicitation_id }))
}

/// Reads one message. On failure returns the id (when one could be read) and the error.
pub fn classify(value: Value) -> Result<Message, (Option<RequestId>, RpcError)> {
    let Value::Object(mut object) = value else {
        return Err((
            None,
            RpcError::new(INVALID_REQUEST, "Invalid Request: a message must be a JSON object"),
        ));
    };
    let id = match object.remove("id") {
        None => None,
        Some(id) => match RequestId::from_json(&id) {
            Some(id) => Some(id),
            None => return Err((None, invalid("`id` must be a string or an integer"))),
        },
    };
    if object.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err((id, invalid("`jsonrpc` must be \"2.0\"")));
    }
    if let Some(method) = object.remove("method") {
        let Value::String(method) = method else {
            return Err((id, invalid("`method` must be a string")));
        };
        let params = object.remove("params");
        if let Some(params) = &params
            && !params.is_object()
        {
            return Err((id, invalid("`params` must be an object")));
        }
        return Ok(match id {
            Some(id) => Message::Request { id, method, params },
            None => Message::Notification { method, params },
        });
    }
    match id {
        Some(id) if object.contains_key("result") || object.contains_key("error") => Ok(Message::Response {
            id,
            answer: match object.remove("result") {
                Some(result) => Ok(result),
                None => Err(object.remove("error").unwrap_or(Value::Null)),
            },
        }),
        id => Err((
            id,
            invalid("a message needs `method`, or `result` or `error` with an `id`"),
        )),
    }
}

fn invalid(reason: &str) -> RpcError {
    RpcError::new(INVALID_REQUEST, format!("Invalid Request: {reason}"))
}

/// The request's `params` as an object (absent params read as empty).
pub fn params_object(params: Option<Value>) -> Map<String, Value> {
    match params {
        Some(Value::Object(map)) => map,
        _ => Map::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_requests_notifications_and_responses() {
        let request = classify(json!({"jsonrpc": "2.0", "id": 7, "method": "ping"})).expect("request");
        assert!(matches!(
            request,
            Message::Request {
                id: RequestId::Number(7),
                ..
            }
        ));
        let note = classify(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).expect("notification");
        assert!(matches!(note, Message::Notification { .. }));
        let response = classify(json!({"jsonrpc": "2.0", "id": "s1", "result": {}})).expect("response");
        assert!(matches!(
            response,
            Message::Response {
                id: RequestId::String(_),
                ..
            }
        ));
    }

    #[test]
    fn refuses_malformed_messages_keeping_the_id_when_readable() {
        let (id, error) = classify(json!({"jsonrpc": "1.0", "id": 3, "method": "ping"})).unwrap_err();
        assert_eq!((id, error.code), (Some(RequestId::Number(3)), INVALID_REQUEST));
        let (id, _) = classify(json!({"jsonrpc": "2.0", "id": null, "method": "ping"})).unwrap_err();
        assert_eq!(id, None);
        let (_, error) = classify(json!({"jsonrpc": "2.0", "id": 1, "method": 5})).unwrap_err();
        assert_eq!(error.code, INVALID_REQUEST);
        let (_, error) = classify(json!({"jsonrpc": "2.0", "id": 1, "method": "x", "params": [1]})).unwrap_err();
        assert_eq!(error.code, INVALID_REQUEST);
        assert!(classify(json!("ping")).is_err());
        assert!(classify(json!({"jsonrpc": "2.0", "id": 1.5, "method": "ping"})).is_err());
        assert!(classify(json!({"jsonrpc": "2.0", "id": 1})).is_err());
    }

    #[test]
    fn error_responses_carry_data_only_when_given() {
        let plain = error_response(None, &RpcError::new(PARSE_ERROR, "Parse error"));
        assert_eq!(
            plain,
            json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32700, "message": "Parse error"}})
        );
        let with = error_response(
            Some(&RequestId::Number(1)),
            &RpcError::new(-32042, "m").with_data(json!({"x": 1})),
        );
        assert_eq!(with["error"]["data"], json!({"x": 1}));
    }
}
