//! What `/mcp` checks of a request's headers beyond the edge, as typed extractors: its `Accept`
//! and `Content-Type`, a known `MCP-Protocol-Version`, a request of the handshake era, and the
//! session named by `Mcp-Session-Id`, which must exist and belong to the caller.

use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::header::{ACCEPT, CONTENT_TYPE};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderName, StatusCode};

use super::refusal::Refusal;
use super::state::McpState;
use super::{SUPPORTED_PROTOCOL_VERSIONS, modern};
use crate::domain::{Principal, SessionId};
use crate::edge::{DatabaseUp, Identified};
use crate::store::SessionRecord;

pub const SESSION_HEADER: HeaderName = HeaderName::from_static("mcp-session-id");
pub const PROTOCOL_HEADER: HeaderName = HeaderName::from_static("mcp-protocol-version");

/// A POST's `Accept` lists both JSON and SSE, and its body is JSON.
pub struct PostHeaders;

impl FromRequestParts<McpState> for PostHeaders {
    type Rejection = Refusal;

    async fn from_request_parts(parts: &mut Parts, _: &McpState) -> Result<Self, Refusal> {
        let headers = &parts.headers;
        if !accepts(headers, "application/json") || !accepts(headers, "text/event-stream") {
            return Err(Refusal::new(
                StatusCode::NOT_ACCEPTABLE,
                "Not Acceptable: Accept must list both application/json and text/event-stream",
            ));
        }
        let content_type = headers.get(CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
        if content_type
            .split(';')
            .next()
            .map(str::trim)
            .map(str::to_ascii_lowercase)
            .as_deref()
            != Some("application/json")
        {
            return Err(Refusal::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "Unsupported Media Type: Content-Type must be application/json",
            ));
        }
        Ok(Self)
    }
}

/// A GET's `Accept` lists SSE.
pub struct AcceptsEvents;

impl FromRequestParts<McpState> for AcceptsEvents {
    type Rejection = Refusal;

    async fn from_request_parts(parts: &mut Parts, _: &McpState) -> Result<Self, Refusal> {
        if !accepts(&parts.headers, "text/event-stream") {
            return Err(Refusal::new(
                StatusCode::NOT_ACCEPTABLE,
                "Not Acceptable: Accept must list text/event-stream",
            ));
        }
        Ok(Self)
    }
}

/// Whether `Accept` admits `wanted` (`type/subtype`), directly or by a wildcard.
fn accepts(headers: &HeaderMap, wanted: &str) -> bool {
    let (kind, _) = wanted.split_once('/').unwrap_or((wanted, ""));
    headers
        .get_all(ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|item| {
            let media = item.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
            media == wanted || media == "*/*" || media == format!("{kind}/*")
        })
}

/// `MCP-Protocol-Version`, when present, is a version this server speaks.
pub struct KnownProtocol;

impl FromRequestParts<McpState> for KnownProtocol {
    type Rejection = Refusal;

    async fn from_request_parts(parts: &mut Parts, _: &McpState) -> Result<Self, Refusal> {
        check_protocol_header(&parts.headers).map(|()| Self)
    }
}

pub fn check_protocol_header(headers: &HeaderMap) -> Result<(), Refusal> {
    match headers.get(PROTOCOL_HEADER) {
        None => Ok(()),
        Some(value) => match value.to_str() {
            Ok(version) if SUPPORTED_PROTOCOL_VERSIONS.contains(&version) => Ok(()),
            _ => Err(Refusal::new(
                StatusCode::BAD_REQUEST,
                format!(
                    "Bad Request: unsupported MCP-Protocol-Version {:?}; supported: {}",
                    String::from_utf8_lossy(value.as_bytes()),
                    SUPPORTED_PROTOCOL_VERSIONS.join(", ")
                ),
            )),
        },
    }
}

/// Not a 2026-07-28 request: GET and DELETE are not part of that era, whose requests are POSTs.
pub struct HandshakeEra;

impl FromRequestParts<McpState> for HandshakeEra {
    type Rejection = Refusal;

    async fn from_request_parts(parts: &mut Parts, _: &McpState) -> Result<Self, Refusal> {
        if modern::is_stateless(&parts.headers) {
            return Err(Refusal::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "Method Not Allowed: 2026-07-28 requests are POSTs",
            ));
        }
        Ok(Self)
    }
}

/// The session named by `Mcp-Session-Id`, once its caller is identified as its owner, while the
/// database can be reached.
pub struct InSession(pub Arc<SessionRecord>);

impl FromRequestParts<McpState> for InSession {
    type Rejection = Refusal;

    async fn from_request_parts(parts: &mut Parts, state: &McpState) -> Result<Self, Refusal> {
        let Identified(caller) = Identified::from_request_parts(parts, state).await?;
        DatabaseUp::from_request_parts(parts, state).await?;
        session(state, &parts.headers, &caller.principal).await.map(Self)
    }
}

/// The session named by `Mcp-Session-Id`, which must exist and belong to `principal`.
pub async fn session(
    state: &McpState,
    headers: &HeaderMap,
    principal: &Principal,
) -> Result<Arc<SessionRecord>, Refusal> {
    let header = headers.get(SESSION_HEADER).ok_or_else(|| {
        Refusal::new(
            StatusCode::BAD_REQUEST,
            "Bad Request: Mcp-Session-Id header is required",
        )
    })?;
    let not_found = || Refusal::new(StatusCode::NOT_FOUND, "Session not found: initialize a new session");
    let id: SessionId = header
        .to_str()
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(not_found)?;
    let record = state
        .sessions
        .find(&id)
        .await
        .map_err(|e| Refusal::store(state, "session lookup failed", &e))?;
    let record = record.ok_or_else(not_found)?;
    if &record.principal != principal {
        tracing::warn!(session = ?id, "session used by another principal");
        return Err(Refusal::new(
            StatusCode::FORBIDDEN,
            "Forbidden: this session belongs to another user",
        ));
    }
    Ok(record)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(accept: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(ACCEPT, HeaderValue::from_str(accept).expect("header"));
        headers
    }

    #[test]
    fn accept_matching_handles_lists_parameters_and_wildcards() {
        let both = headers("application/json, text/event-stream;q=0.9");
        assert!(accepts(&both, "application/json") && accepts(&both, "text/event-stream"));
        assert!(accepts(&headers("*/*"), "text/event-stream"));
        assert!(accepts(&headers("text/*"), "text/event-stream"));
        assert!(!accepts(&headers("application/json"), "text/event-stream"));
        assert!(!accepts(&HeaderMap::new(), "application/json"));
    }
}
