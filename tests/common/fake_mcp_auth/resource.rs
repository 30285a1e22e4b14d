//! The fake's resource server: Protected Resource Metadata (RFC 9728) and the bearer-protected
//! MCP endpoint, a minimal stateless MCP server answering JSON.

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use serde_json::{Map, Value, json};

use super::{Grant, Inner, Shared, overridden};

/// Protocol versions echoed back at `initialize`; any other gets the newest.
const PROTOCOL_VERSIONS: [&str; 2] = ["2025-06-18", "2025-11-25"];
const LATEST_PROTOCOL_VERSION: &str = "2025-11-25";
/// The scope `admin_only` needs.
const ADMIN_SCOPE: &str = "admin";

pub(super) fn router(shared: Shared) -> Router {
    Router::new()
        .route("/mcp", any(mcp))
        .route("/.well-known/oauth-protected-resource/mcp", get(prm_at_path))
        .route("/.well-known/oauth-protected-resource", get(prm_at_root))
        .with_state(shared)
}

async fn prm_at_path(State(shared): State<Shared>, uri: Uri) -> Response {
    prm(&shared, &uri, |inner| inner.options.prm_at_path)
}

async fn prm_at_root(State(shared): State<Shared>, uri: Uri) -> Response {
    prm(&shared, &uri, |inner| inner.options.prm_at_root)
}

/// The PRM document with its overrides, or 404 where switched off.
fn prm(shared: &Shared, uri: &Uri, served: impl Fn(&Inner) -> bool) -> Response {
    let mut inner = shared.lock();
    inner.stats.discovery_requests.push(uri.path().to_owned());
    if !served(&inner) {
        return StatusCode::NOT_FOUND.into_response();
    }
    let mut document = Map::new();
    document.insert("resource".to_owned(), json!(inner.resource()));
    document.insert("authorization_servers".to_owned(), json!([inner.issuer]));
    document.insert("scopes_supported".to_owned(), json!(inner.options.scopes_supported));
    document.insert("bearer_methods_supported".to_owned(), json!(["header"]));
    document.insert("resource_name".to_owned(), json!("Fake MCP server"));
    axum::Json(overridden(document, &inner.options.prm_overrides)).into_response()
}

/// `/mcp`: the bearer check, then one JSON-RPC message (GET and DELETE: 405 once authorized).
async fn mcp(State(shared): State<Shared>, method: Method, headers: HeaderMap, body: Bytes) -> Response {
    let grant = {
        let mut inner = shared.lock();
        let token = bearer(&headers);
        if let Some(token) = &token {
            inner.stats.mcp_bearer_tokens.push(token.clone());
        }
        let resource = inner.resource();
        let grant = token
            .as_deref()
            .and_then(|token| inner.live_access(token))
            .filter(|grant| grant.resource == resource)
            .cloned();
        match grant {
            Some(grant) => grant,
            None => return unauthorized(&inner, token.is_some()),
        }
    };
    if method != Method::POST {
        return (StatusCode::METHOD_NOT_ALLOWED, [(header::ALLOW, "POST")]).into_response();
    }
    let Ok(Value::Object(message)) = serde_json::from_slice::<Value>(&body) else {
        let error = rpc_error(Value::Null, -32700, "the body must be one JSON-RPC message (an object)");
        return (StatusCode::BAD_REQUEST, error).into_response();
    };
    let name = message.get("method").and_then(Value::as_str).unwrap_or_default();
    shared.lock().stats.mcp_methods.push(name.to_owned());
    let Some(id) = message.get("id").cloned() else {
        // A notification (`notifications/initialized`, ...) or a response: accepted.
        return StatusCode::ACCEPTED.into_response();
    };
    let params = message.get("params").cloned().unwrap_or(Value::Null);
    match name {
        "initialize" => {
            let asked = params["protocolVersion"].as_str().unwrap_or_default();
            let version = PROTOCOL_VERSIONS
                .into_iter()
                .find(|v| *v == asked)
                .unwrap_or(LATEST_PROTOCOL_VERSION);
            rpc_result(
                id,
                json!({
                    "protocolVersion": version,
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": "fake-mcp-auth", "version": "1.0.0"},
                }),
            )
        }
        "ping" => rpc_result(id, json!({})),
        "tools/list" => rpc_result(id, json!({"tools": tools()})),
        "tools/call" => call_tool(&shared, id, &params, &grant),
        _ => rpc_error(id, -32601, "method not found"),
    }
}

fn tools() -> Value {
    json!([
        {
            "name": "whoami",
            "description": "Who the bearer token was issued to, by which client, for which resource",
            "inputSchema": {"type": "object", "properties": {}},
        },
        {
            "name": "admin_only",
            "description": "Needs the admin scope",
            "inputSchema": {"type": "object", "properties": {}},
        },
    ])
}

fn call_tool(shared: &Shared, id: Value, params: &Value, grant: &Grant) -> Response {
    match params["name"].as_str() {
        Some("whoami") => {
            let who = json!({"account": grant.user, "resource": grant.resource, "client_id": grant.client_id});
            rpc_result(id, json!({"content": [{"type": "text", "text": who.to_string()}]}))
        }
        Some("admin_only") if grant.scopes.iter().any(|s| s == ADMIN_SCOPE) => rpc_result(
            id,
            json!({"content": [{"type": "text", "text": format!("admin ok for {}", grant.user)}]}),
        ),
        Some("admin_only") => insufficient_scope(&shared.lock()),
        _ => rpc_error(id, -32602, "unknown tool"),
    }
}

/// The token of an `Authorization: Bearer` header.
fn bearer(headers: &HeaderMap) -> Option<String> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?.trim();
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim().to_owned())
        .filter(|token| !token.is_empty())
}

/// 401 with the challenge the options describe (`error="invalid_token"` when a token was given).
fn unauthorized(inner: &Inner, token_given: bool) -> Response {
    let options = &inner.options;
    let mut parts = Vec::new();
    if token_given {
        parts.push("error=\"invalid_token\"".to_owned());
    }
    if options.resource_metadata_in_challenge {
        let url = options
            .resource_metadata_url
            .clone()
            .unwrap_or_else(|| format!("{}/.well-known/oauth-protected-resource/mcp", inner.base_url));
        parts.push(format!("resource_metadata=\"{url}\""));
    }
    if !options.challenge_scopes.is_empty() {
        parts.push(format!("scope=\"{}\"", options.challenge_scopes.join(" ")));
    }
    challenge(StatusCode::UNAUTHORIZED, &parts)
}

/// 403 `insufficient_scope` naming the scope `admin_only` needs.
fn insufficient_scope(inner: &Inner) -> Response {
    let parts = [
        "error=\"insufficient_scope\"".to_owned(),
        format!("scope=\"{ADMIN_SCOPE}\""),
        format!(
            "resource_metadata=\"{}/.well-known/oauth-protected-resource/mcp\"",
            inner.base_url
        ),
    ];
    challenge(StatusCode::FORBIDDEN, &parts)
}

fn challenge(status: StatusCode, parts: &[String]) -> Response {
    let value = if parts.is_empty() {
        "Bearer".to_owned()
    } else {
        format!("Bearer {}", parts.join(", "))
    };
    let mut response = status.into_response();
    if let Ok(value) = HeaderValue::from_str(&value) {
        response.headers_mut().insert(header::WWW_AUTHENTICATE, value);
    }
    response
}

fn rpc_result(id: Value, result: Value) -> Response {
    axum::Json(json!({"jsonrpc": "2.0", "id": id, "result": result})).into_response()
}

fn rpc_error(id: Value, code: i64, message: &str) -> Response {
    axum::Json(json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})).into_response()
}
