//! A tool of an upstream MCP server, as a gatehouse tool: once the gate has let the call through,
//! it is forwarded on the user's own upstream session with the user's credentials, and what the
//! upstream answers (or how it fails) becomes the call's outcome.

use std::sync::{Arc, Weak};

use async_trait::async_trait;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CancelledNotification, CancelledNotificationParam, ClientNotification,
    ClientRequest, ErrorData, ServerResult,
};
use rmcp::service::{PeerRequestOptions, ServiceError};
use serde_json::{Map, Value};

use super::Core;
use super::crossing::{Crossing, Refused};
use super::failure::{self, Refusal};
use super::offers::relink;
use super::pool::{OpenError, Opening, Session};
use super::upstream::{Transport, Upstream};
use crate::domain::Principal;
use crate::gate::Credentials;
use crate::metrics::UpstreamOutcome;
use crate::secret::Secret;
use crate::store::SessionRecord;
use crate::tools::{Arguments, CallContext, Encoding, Redactor, Tool, ToolDefinition, ToolOutcome, ToolResult, Values};

/// JSON-RPC error code of an upstream asking for URL-mode elicitation first.
pub(super) const URL_ELICITATION_REQUIRED: i32 = -32042;
/// An upstream's error message shown to the model, at most.
const MAX_ERROR_MESSAGE_BYTES: usize = 512;

pub struct UpstreamTool {
    upstream: Arc<Upstream>,
    /// The upstream's own name of the tool; `None` for the stand-in that connects the user and
    /// lists the upstream's tools, offered while nobody has listed them yet.
    name: Option<String>,
    definition: ToolDefinition,
    core: Weak<Core>,
}

impl UpstreamTool {
    pub fn new(upstream: Arc<Upstream>, name: Option<String>, definition: ToolDefinition, core: Weak<Core>) -> Self {
        Self {
            upstream,
            name,
            definition,
            core,
        }
    }

    fn failed(&self, sentence: impl Into<String>) -> ToolOutcome {
        failed(sentence)
    }

    async fn forward(
        &self,
        core: &Core,
        session: &Arc<Session>,
        context: &CallContext<'_>,
        redactor: Arc<Redactor>,
        name: &str,
        arguments: &Map<String, Value>,
    ) -> ToolOutcome {
        let params = CallToolRequestParams::new(name.to_owned()).with_arguments(arguments.clone());
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        let peer = session.service.peer();
        let handle = match peer.send_request_with_option(request, traced_options()).await {
            Ok(handle) => handle,
            Err(error) => return service_failed(core, &self.upstream, session, &error),
        };
        // Registered before the upstream can have answered anything but the request itself, so its
        // progress reaches the client; a progress notification racing the registration is dropped.
        let _running = session.relay.register(
            handle.progress_token.clone(),
            context.progress_token.cloned(),
            context.stream.clone(),
            redactor.clone(),
            &context.session.client_capabilities,
        );
        let id = handle.id.clone();
        let gone = async {
            match &context.stream {
                Some(stream) => stream.gone().await,
                None => std::future::pending().await,
            }
        };
        let answer = tokio::select! {
            answer = handle.await_response() => answer,
            () = gone => {
                cancel(session, id, "the client went away").await;
                return self.failed("The client went away.");
            }
            () = context.cancelled.cancelled() => {
                cancel(session, id, "the client cancelled the call").await;
                return self.failed("The call was cancelled.");
            }
            () = tokio::time::sleep(self.upstream.timeout) => {
                cancel(session, id, "gatehouse's timeout for the upstream passed").await;
                return self.failed(format!(
                    "The {} server did not answer within {}.",
                    self.upstream.id,
                    humantime::format_duration(self.upstream.timeout)
                ));
            }
        };
        let crossing = Crossing::of(&self.upstream, &redactor);
        match answer {
            Ok(ServerResult::CallToolResult(result)) => {
                let mut result = crossing.value(serde_json::to_value(result).unwrap_or(Value::Null));
                // Resource links in the result name resources the client reads through gatehouse.
                relink(&mut result, &self.upstream.tag);
                ToolOutcome::Done(tool_result(result))
            }
            Ok(_) => self.failed(format!(
                "The {} server gave an answer gatehouse cannot read.",
                self.upstream.id
            )),
            Err(ServiceError::McpError(error)) if error.code.0 == URL_ELICITATION_REQUIRED => {
                elicitations_asked(&self.upstream, context.principal, &crossing, &error)
            }
            Err(ServiceError::McpError(error)) => self.failed(format!(
                "The {} server refused the call: {}",
                self.upstream.id,
                crossing.bounded_text(&error.message, MAX_ERROR_MESSAGE_BYTES)
            )),
            Err(error) => service_failed(core, &self.upstream, session, &error),
        }
    }
}

pub(super) fn failed(sentence: impl Into<String>) -> ToolOutcome {
    ToolOutcome::Done(ToolResult::error(sentence))
}

/// The upstream's -32042: the URL elicitations it asks for, each checked and marked as its own
/// on the way (or, when one is refused or none is named, a failure).
pub(super) fn elicitations_asked(
    upstream: &Upstream,
    principal: &Principal,
    crossing: &Crossing<'_>,
    error: &ErrorData,
) -> ToolOutcome {
    let elicitations = error
        .data
        .as_ref()
        .and_then(|d| d.get("elicitations"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if elicitations.is_empty() {
        return failed(format!(
            "The {} server asked for a step in the browser without saying which.",
            upstream.id
        ));
    }
    match elicitations
        .into_iter()
        .map(|e| crossing.elicitation(e))
        .collect::<Result<Vec<_>, _>>()
    {
        Ok(elicitations) => ToolOutcome::UrlElicitations(elicitations),
        Err(Refused(why)) => {
            tracing::warn!(upstream = %upstream.id, %principal, %why, "refused an upstream's elicitation");
            failed(format!(
                "The {} server asked for a step in the browser that gatehouse refused: {why}.",
                upstream.id
            ))
        }
    }
}

/// The session's credentials for `upstream`: the bearer token (`exchanged`, for a token-exchange
/// upstream) and the rendered headers or environment.
fn opening(
    upstream: &Upstream,
    credentials: &Credentials,
    exchanged: Option<Secret<String>>,
) -> Result<Opening, ToolOutcome> {
    let bearer = match &upstream.bearer {
        _ if exchanged.is_some() => exchanged,
        Some(provider) => match credentials.token(provider) {
            Some(token) => Some(token.clone()),
            // The gate runs the tool only with a token for every provider it requires.
            None => {
                return Err(ToolOutcome::CredentialRejected {
                    provider: provider.clone(),
                });
            }
        },
        None => None,
    };
    let no_arguments = Map::new();
    let values = Values {
        arguments: &no_arguments,
        forms: credentials.forms(),
    };
    let (templates, encoding) = match &upstream.transport {
        Transport::Http { headers, .. } => (
            headers
                .iter()
                .map(|(n, t)| (n.as_str().to_owned(), t))
                .collect::<Vec<_>>(),
            Encoding::Header,
        ),
        Transport::Stdio { env, .. } => (env.iter().map(|(n, t)| (n.clone(), t)).collect(), Encoding::Text),
    };
    let mut rendered = Vec::new();
    for (name, template) in templates {
        let value = template
            .render(&values, encoding)
            .map_err(|why| failed(format!("Cannot reach the {} server: {name}: {why}", upstream.id)))?;
        rendered.push((name, Secret::new(value)));
    }
    Ok(Opening {
        bearer,
        values: rendered,
        secrets: credentials.secrets().map(|s| Secret::new(s.to_owned())).collect(),
    })
}

/// The redactor of what an upstream answers on the user's session: the user's secrets, and for a
/// token-exchange upstream the exchanged `bearer` and the caller's own `access_token`.
pub(super) fn redactor(
    credentials: &Credentials,
    bearer: Option<&Secret<String>>,
    access_token: Option<&Secret<String>>,
) -> Redactor {
    let own = [bearer, access_token]
        .into_iter()
        .flatten()
        .map(|s| s.expose().as_str());
    Redactor::new(credentials.secrets().chain(own))
}

/// What the upstream's refusal of the credentials means for the gate.
fn refused(upstream: &Upstream, refusal: Refusal) -> ToolOutcome {
    match (refusal, &upstream.bearer) {
        (Refusal::Unauthorized, Some(provider)) => ToolOutcome::CredentialRejected {
            provider: provider.clone(),
        },
        (Refusal::InsufficientScope(scopes), Some(provider)) => ToolOutcome::ScopesMissing {
            provider: provider.clone(),
            scopes,
        },
        (_, None) if upstream.exchange.is_some() => failed(format!(
            "The {} server refused the token the identity provider issued for it in exchange for the user's; \
             the next call asks for a new one.",
            upstream.id
        )),
        (_, None) => failed(format!(
            "The {} server refused the credentials gatehouse holds for it. Ask the user to check them.",
            upstream.id
        )),
    }
}

/// A request on `session` that failed below MCP: a refusal of the credentials, or a failure
/// (a lost session is forgotten, so the next request opens a new one).
pub(super) fn service_failed(
    core: &Core,
    upstream: &Upstream,
    session: &Arc<Session>,
    error: &ServiceError,
) -> ToolOutcome {
    if let Some(refusal) = failure::request_refusal(error) {
        core.pool.forget(session);
        if let Some(principal) = &session.principal {
            core.exchanges.forget(principal, &upstream.id);
        }
        return refused(upstream, refusal);
    }
    tracing::warn!(upstream = %upstream.id, principal = ?session.principal, %error, "an upstream request failed");
    if matches!(error, ServiceError::TransportClosed | ServiceError::TransportSend(_)) {
        // A crashed process or a dropped session: the next call opens a new one.
        core.pool.forget(session);
    }
    failed(failure::describe(&upstream.id, error))
}

/// The user's session with `upstream`, opened with the credentials the gate lent when it is not
/// open yet (a new one lists the upstream when its catalogue is stale). For a token-exchange
/// upstream the bearer is the token held for the user, else `access_token` (the caller's own)
/// exchanged; that bearer is returned beside the session.
pub(super) async fn user_session(
    core: &Core,
    upstream: &Upstream,
    principal: &Principal,
    credentials: &Credentials,
    access_token: Option<&Secret<String>>,
) -> Result<(Arc<Session>, Option<Secret<String>>), ToolOutcome> {
    let exchanged = match &upstream.exchange {
        Some(exchange) => Some(
            core.exchanges
                .token(upstream, exchange, principal, access_token)
                .await?,
        ),
        None => None,
    };
    let opening = opening(upstream, credentials, exchanged.clone())?;
    match core.pool.session(upstream, principal, opening).await {
        Ok((session, new)) => {
            if new {
                core.listed_through(&upstream.id);
            }
            Ok((session, exchanged))
        }
        Err(OpenError::Refused { status, challenge }) => {
            tracing::info!(upstream = %upstream.id, %principal, %challenge, "the upstream refused the user's credentials");
            core.exchanges.forget(principal, &upstream.id);
            Err(refused(upstream, status))
        }
        Err(OpenError::Full(limit)) => Err(failed(format!(
            "The {} server is busy: all {limit} of its sessions are in use. Try again in a moment.",
            upstream.id
        ))),
        Err(OpenError::Failed(why)) => {
            tracing::warn!(upstream = %upstream.id, %principal, %why, "could not open an upstream session");
            Err(failed(format!(
                "The {} server cannot be reached right now. Try again in a moment.",
                upstream.id
            )))
        }
    }
}

pub(super) async fn cancel(session: &Session, id: rmcp::model::RequestId, reason: &str) {
    let params = CancelledNotificationParam::new(Some(id), Some(reason.to_owned()));
    let notification = ClientNotification::CancelledNotification(CancelledNotification::new(params));
    if let Err(error) = session.service.peer().send_notification(notification).await {
        tracing::debug!(upstream = %session.upstream, %error, "could not tell the upstream a call was cancelled");
    }
}

/// A `CallToolResult` as the upstream gave it.
fn tool_result(result: Value) -> ToolResult {
    ToolResult {
        content: result
            .get("content")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default(),
        structured: result.get("structuredContent").cloned(),
        is_error: result.get("isError").and_then(Value::as_bool).unwrap_or(false),
    }
}

#[async_trait]
impl Tool for UpstreamTool {
    fn definition(&self) -> &ToolDefinition {
        &self.definition
    }

    /// The upstream may report progress, log, and ask for elicitations, sampling or roots while
    /// it runs.
    fn sends_during_call(&self, session: &SessionRecord, progress_requested: bool) -> bool {
        let declared = |capability| session.client_capabilities.get(capability).is_some();
        progress_requested
            || declared("elicitation")
            || declared("sampling")
            || declared("roots")
            || session.log_level.is_some()
    }

    async fn call(&self, context: &CallContext<'_>, credentials: &Credentials, arguments: &Arguments) -> ToolOutcome {
        let Some(core) = self.core.upgrade() else {
            return self.failed("gatehouse is shutting down. Try again in a moment.");
        };
        let outcome = self.run(&core, context, credentials, arguments).await;
        let counted = match &outcome {
            ToolOutcome::Done(result) if result.is_error => UpstreamOutcome::Error,
            ToolOutcome::Done(_) => UpstreamOutcome::Ok,
            ToolOutcome::UrlElicitations(_) | ToolOutcome::InputRequired { .. } => UpstreamOutcome::ElicitationRequired,
            ToolOutcome::CredentialRejected { .. } | ToolOutcome::ScopesMissing { .. } => UpstreamOutcome::Refused,
        };
        core.metrics.upstream_request(&self.upstream.id, counted);
        outcome
    }
}

impl UpstreamTool {
    /// The call on the user's upstream session, opened first when it is not yet.
    async fn run(
        &self,
        core: &Core,
        context: &CallContext<'_>,
        credentials: &Credentials,
        arguments: &Map<String, Value>,
    ) -> ToolOutcome {
        let exchanging = user_session(
            core,
            &self.upstream,
            context.principal,
            credentials,
            context.access_token,
        );
        let (session, bearer) = match exchanging.await {
            Ok(opened) => opened,
            Err(outcome) => return outcome,
        };
        match &self.name {
            Some(name) => {
                let redactor = Arc::new(redactor(credentials, bearer.as_ref(), context.access_token));
                self.forward(core, &session, context, redactor, name, arguments).await
            }
            None => {
                let listed = core.refresh(&self.upstream.id).await;
                let names: Vec<String> = listed.iter().map(|tool| tool.definition().name.clone()).collect();
                ToolOutcome::Done(ToolResult::text(if names.is_empty() {
                    format!("Connected to {}, which offers no tools here.", self.upstream.id)
                } else {
                    format!(
                        "Connected to {}. Its tools are listed now: {}.",
                        self.upstream.id,
                        names.join(", ")
                    )
                }))
            }
        }
    }
}

impl std::fmt::Debug for UpstreamTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamTool")
            .field("upstream", &self.upstream.id)
            .field("name", &self.name)
            .finish()
    }
}

/// A call's request options: its trace in `_meta`, which [`super::traced::Traced`] sends as
/// `traceparent`.
pub(super) fn traced_options() -> PeerRequestOptions {
    let mut options = PeerRequestOptions::no_options();
    options.meta = super::traced::request_meta();
    options
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn results_keep_content_structure_and_error_flag() {
        let result = tool_result(
            json!({"content": [{"type": "text", "text": "hi"}], "structuredContent": {"a": 1}, "isError": true}),
        );
        assert_eq!(result.content, vec![json!({"type": "text", "text": "hi"})]);
        assert_eq!(result.structured, Some(json!({"a": 1})));
        assert!(result.is_error);
        assert!(!tool_result(json!({"content": []})).is_error);
    }
}
