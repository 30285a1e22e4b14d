//! How the `/mcp` endpoint refuses an HTTP request: a status code with a JSON-RPC error body that
//! says what was wrong (and `WWW-Authenticate` when authorization is wanting); the edge's
//! refusals in those words; and the JSON bodies every answer of the endpoint is sent as.

use axum::http::header::{RETRY_AFTER, WWW_AUTHENTICATE};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use super::store_failure;
use crate::edge::{RETRY_AFTER_SECONDS, Refused};
use crate::identity::oauth::BearerError;
use crate::identity::{Identity, IdentityError};
use crate::jsonrpc::{self, INVALID_REQUEST, RequestId, RpcError};
use crate::state::AppState;
use crate::store::StoreError;

/// A refused HTTP request.
#[derive(Debug)]
pub struct Refusal {
    status: StatusCode,
    id: Option<RequestId>,
    error: RpcError,
    /// `WWW-Authenticate`, on a refusal for want of (valid) authorization.
    challenge: Option<Box<HeaderValue>>,
}

impl Refusal {
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            id: None,
            error: RpcError::new(INVALID_REQUEST, message),
            challenge: None,
        }
    }

    /// A refusal with its JSON-RPC `error`, answering request `id` when known.
    pub fn with_error(status: StatusCode, id: Option<RequestId>, error: RpcError) -> Self {
        Self {
            status,
            id,
            error,
            challenge: None,
        }
    }

    pub fn internal(context: &str, error: &dyn std::fmt::Display) -> Self {
        tracing::error!(%error, "{context}");
        Self::failed(None, RpcError::internal())
    }

    /// A store failure, logged with `context`: 503 while every database connection is busy or
    /// during a database outage, else 500.
    pub fn store(state: &AppState, context: &str, error: &StoreError) -> Self {
        Self::failed(None, store_failure(state, context, error))
    }

    /// A request that failed on our side with `error` (internal or unavailable).
    pub fn failed(id: Option<RequestId>, error: RpcError) -> Self {
        let status = if error.is_unavailable() {
            StatusCode::SERVICE_UNAVAILABLE
        } else {
            StatusCode::INTERNAL_SERVER_ERROR
        };
        Self::with_error(status, id, error)
    }

    /// What the edge refused, in the endpoint's words: an unidentified caller gets the challenge
    /// MCP authorization prescribes.
    pub fn at_edge(refused: Refused, identity: &Identity) -> Self {
        match refused {
            Refused::NoPeer => Self::internal(
                "an MCP request without the peer address",
                &"not served by gatehouse::serve",
            ),
            Refused::ForeignOrigin(origin) => Self::new(
                StatusCode::FORBIDDEN,
                format!("Forbidden: origin {origin:?} is not allowed"),
            ),
            Refused::ForeignHost(host) => Self::new(
                StatusCode::FORBIDDEN,
                format!("Forbidden: host {host:?} is not this server (DNS rebinding protection)"),
            ),
            Refused::Unidentified { error, peer } => Self::unidentified(&error, peer, identity),
            Refused::DatabaseDown => Self::failed(None, RpcError::unavailable()),
        }
    }

    fn unidentified(e: &IdentityError, peer: std::net::SocketAddr, identity: &Identity) -> Self {
        let bearer = match (e, identity.resource_server()) {
            (IdentityError::Bearer(bearer), Some(server)) => Some((bearer, server)),
            _ => None,
        };
        let Some((bearer, server)) = bearer else {
            tracing::info!(%peer, reason = %e, "refused unidentified MCP request");
            return Self::new(StatusCode::UNAUTHORIZED, format!("Unauthorized: {e}"));
        };
        let (status, challenge) = server.challenge(bearer);
        let message = match bearer {
            BearerError::Unavailable(reason) => {
                tracing::warn!(%peer, %reason, "cannot check a bearer token now");
                "Service Unavailable: the access token cannot be verified now; try again shortly".to_owned()
            }
            BearerError::InsufficientScope => "Forbidden: the access token lacks a required scope".to_owned(),
            other => {
                tracing::info!(%peer, reason = %other, "refused an MCP request's bearer token");
                format!("Unauthorized: {other}")
            }
        };
        Self {
            status,
            id: None,
            error: if status == StatusCode::SERVICE_UNAVAILABLE {
                RpcError::new(jsonrpc::SERVICE_UNAVAILABLE, message)
            } else {
                RpcError::new(INVALID_REQUEST, message)
            },
            challenge: challenge.map(Box::new),
        }
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let body = jsonrpc::error_response(self.id.as_ref(), &self.error);
        let mut response = json_response(self.status, &body);
        if let Some(challenge) = self.challenge {
            response.headers_mut().insert(WWW_AUTHENTICATE, *challenge);
        }
        response
    }
}

/// A JSON body; a 503 also tells the client when to retry.
pub fn json_response(status: StatusCode, body: &impl Serialize) -> Response {
    let mut response = (status, axum::Json(body)).into_response();
    if status == StatusCode::SERVICE_UNAVAILABLE {
        response
            .headers_mut()
            .insert(RETRY_AFTER, HeaderValue::from_static(RETRY_AFTER_SECONDS));
    }
    response
}
