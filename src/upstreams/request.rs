//! Requests other than tool calls, forwarded to the upstream that owns what they name, on the
//! user's own session, once the gate has lent the credentials: `resources/read`,
//! `resources/subscribe` and `unsubscribe`, `prompts/get`, `completion/complete`. What the upstream
//! answers crosses as everything from it does (redacted, its elicitations checked), with its
//! resource URIs made gatehouse's.

use std::sync::Arc;

// resources/subscribe and unsubscribe are legacy from protocol 2026-07-28 on (subscriptions/listen),
// but the upstreams of 2025-11-25 take them, and gatehouse's clients of that revision send them.
#[allow(deprecated)]
use rmcp::model::{
    ClientRequest, CompleteRequest, CompleteRequestParams, GetPromptRequest, GetPromptRequestParams,
    ReadResourceRequest, ReadResourceRequestParams, SubscribeRequest, SubscribeRequestParams, UnsubscribeRequest,
    UnsubscribeRequestParams,
};
use rmcp::service::ServiceError;
use serde_json::{Map, Value, json};

use super::Core;
use super::crossing::Crossing;
use super::forwarded::{URL_ELICITATION_REQUIRED, cancel, elicitations_asked, service_failed};
use super::offers::relink;
use super::tool::{failed, redactor, traced_options, user_session};
use super::upstream::Upstream;
use crate::domain::{Principal, SessionId};
use crate::gate::Credentials;
use crate::secret::Secret;
use crate::tools::ToolOutcome;

/// An upstream's error message passed on, at most.
const MAX_ERROR_MESSAGE_BYTES: usize = 512;

/// A request for an upstream, in the upstream's own names.
#[derive(Clone)]
pub enum Request {
    Read {
        uri: String,
    },
    Subscribe {
        uri: String,
        session: SessionId,
    },
    Unsubscribe {
        uri: String,
        session: SessionId,
    },
    GetPrompt {
        name: String,
        arguments: Map<String, Value>,
    },
    /// `completion/complete`'s params, its `ref` already in the upstream's names.
    Complete {
        params: Value,
    },
}

/// How a forwarded request ended.
pub enum Forwarded {
    /// The upstream's result, as the client gets it.
    Answer(Value),
    /// The upstream's JSON-RPC error: its code and its message, redacted and bounded.
    Error { code: i64, message: String },
    /// What the gate acts on (credentials refused, scopes or a step in the browser wanted), or a
    /// failure told as a result.
    Outcome(ToolOutcome),
}

fn failure(sentence: String) -> Forwarded {
    Forwarded::Outcome(failed(sentence))
}

impl Core {
    /// Forwards `request` to `upstream` on `principal`'s session; `access_token`, the caller's
    /// own, is what a token-exchange upstream's token is exchanged from.
    pub(super) async fn forward(
        &self,
        upstream: &Arc<Upstream>,
        principal: &Principal,
        credentials: &Credentials,
        access_token: Option<&Secret<String>>,
        request: Request,
    ) -> Forwarded {
        let (session, bearer) = match user_session(self, upstream, principal, credentials, access_token).await {
            Ok(opened) => opened,
            Err(outcome) => return Forwarded::Outcome(outcome),
        };
        // Subscriptions are recorded before the upstream is asked, so an update sent right after
        // it answers is not missed; one it refuses is forgotten again.
        let (request, subscribed) = match request {
            Request::Read { uri } => (
                ClientRequest::ReadResourceRequest(ReadResourceRequest::new(ReadResourceRequestParams::new(uri))),
                None,
            ),
            #[allow(deprecated)]
            Request::Subscribe {
                uri,
                session: subscriber,
            } => {
                if let Err(max) = session.relay.subscribe(&uri, &subscriber) {
                    return Forwarded::Error {
                        code: crate::jsonrpc::INVALID_REQUEST,
                        message: format!(
                            "The {} server holds {max} subscriptions already, the most allowed.",
                            upstream.id
                        ),
                    };
                }
                let params = SubscribeRequestParams::new(uri.clone());
                (
                    ClientRequest::SubscribeRequest(SubscribeRequest::new(params)),
                    Some((uri, subscriber)),
                )
            }
            #[allow(deprecated)]
            Request::Unsubscribe {
                uri,
                session: subscriber,
            } => {
                if !session.relay.unsubscribe(&uri, &subscriber) {
                    // Others still want its updates.
                    return Forwarded::Answer(json!({}));
                }
                let params = UnsubscribeRequestParams::new(uri);
                (ClientRequest::UnsubscribeRequest(UnsubscribeRequest::new(params)), None)
            }
            Request::GetPrompt { name, arguments } => {
                let params = GetPromptRequestParams::new(name).with_arguments(arguments);
                (ClientRequest::GetPromptRequest(GetPromptRequest::new(params)), None)
            }
            Request::Complete { params } => match serde_json::from_value::<CompleteRequestParams>(params) {
                Ok(params) => (ClientRequest::CompleteRequest(CompleteRequest::new(params)), None),
                Err(error) => {
                    return Forwarded::Error {
                        code: crate::jsonrpc::INVALID_PARAMS,
                        message: format!("completion/complete's params cannot be read: {error}"),
                    };
                }
            },
        };
        let peer = session.service.peer();
        let handle = match peer.send_request_with_option(request, traced_options()).await {
            Ok(handle) => handle,
            Err(error) => return Forwarded::Outcome(service_failed(upstream, Some(self), &session, &error)),
        };
        let id = handle.id.clone();
        let answer = match tokio::time::timeout(upstream.timeout, handle.await_response()).await {
            Ok(answer) => answer,
            Err(_) => {
                cancel(&session, id, "gatehouse's timeout for the upstream passed").await;
                return failure(format!(
                    "The {} server did not answer within {}.",
                    upstream.id,
                    humantime::format_duration(upstream.timeout)
                ));
            }
        };
        if answer.is_err()
            && let Some((uri, subscriber)) = &subscribed
        {
            session.relay.unsubscribe(uri, subscriber);
        }
        let redactor = redactor(credentials, bearer.as_ref(), access_token);
        let crossing = Crossing::of(upstream, &redactor);
        match answer {
            Ok(result) => {
                let mut value = crossing.value(serde_json::to_value(result).unwrap_or(Value::Null));
                relink(&mut value, &upstream.tag);
                Forwarded::Answer(value)
            }
            Err(ServiceError::McpError(error)) if error.code.0 == URL_ELICITATION_REQUIRED => {
                Forwarded::Outcome(elicitations_asked(upstream, principal, &crossing, &error))
            }
            Err(ServiceError::McpError(error)) => Forwarded::Error {
                code: i64::from(error.code.0),
                message: crossing.bounded_text(&error.message, MAX_ERROR_MESSAGE_BYTES),
            },
            Err(error) => Forwarded::Outcome(service_failed(upstream, Some(self), &session, &error)),
        }
    }
}
