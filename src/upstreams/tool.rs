//! A tool of an upstream MCP server, as a gatehouse tool: once the gate has let the call through,
//! it is forwarded on the user's own upstream session with the user's credentials, and what the
//! upstream answers (or how it fails) becomes the call's outcome.

use std::sync::{Arc, Weak};
use std::time::Duration;

use async_trait::async_trait;
use rmcp::model::{CallToolRequest, CallToolRequestParams, ClientRequest, GetMeta};
use rmcp::service::PeerRequestOptions;
use serde_json::{Map, Value};
use tokio::sync::mpsc;

use super::Core;
use super::failure::{self, OpenError, Refusal};
use super::forwarded::{Response, Stop, UpstreamCall, service_failed, wait_parked};
use super::parked::ParkedRef;
use super::pool::{Opening, Session};
use super::upstream::{Transport, Upstream};
use crate::domain::{Principal, ProtocolEra};
use crate::gate::Credentials;
use crate::metrics::UpstreamOutcome;
use crate::secret::Secret;
use crate::store::SessionRecord;
use crate::tools::{
    Arguments, CallContext, Encoding, Redactor, Tool, ToolDefinition, ToolInput, ToolOutcome, ToolResult, Values,
};

/// Upstream requests of one 2026-07-28 call queued while it is parked on an earlier one.
const ASKS_QUEUE: usize = 4;
/// How much longer than the upstream's timeout a retry waits for the outcome of a call parked on
/// another replica: the bus's round trips.
const RESUME_MARGIN: Duration = Duration::from_secs(5);

pub struct UpstreamTool {
    upstream: Arc<Upstream>,
    /// The upstream's own name of the tool; `None` for the stand-in that connects the user and
    /// lists the upstream's tools, offered while nobody has listed them yet.
    name: Option<String>,
    definition: ToolDefinition,
    /// Whether its schema promotes arguments to headers (SEP-2243's `x-mcp-header`), which only
    /// rmcp's worker sends: its calls go through rmcp, not `direct`.
    headers_in_schema: bool,
    core: Weak<Core>,
}

impl UpstreamTool {
    pub fn new(upstream: Arc<Upstream>, name: Option<String>, definition: ToolDefinition, core: Weak<Core>) -> Self {
        Self {
            upstream,
            name,
            headers_in_schema: names_key(definition.input_schema.as_json(), "x-mcp-header"),
            definition,
            core,
        }
    }

    /// The call on `session`, its answer redacted by `redactor`.
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
        let mut request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        if let Some(meta) = super::traced::request_meta() {
            request.get_meta_mut().extend(meta);
        }
        let peer = session.service.peer();
        let prepared = session
            .direct
            .as_ref()
            .and_then(|direct| direct.prepare(name, self.headers_in_schema));
        let (id, progress_token, response) = match prepared {
            Some(prepared) => {
                let posted = prepared.post(request, peer, &session.relay);
                (posted.id, posted.progress_token, posted.answer)
            }
            None => match peer
                .send_request_with_option(request, PeerRequestOptions::no_options())
                .await
            {
                Ok(handle) => {
                    let (id, token) = (handle.id.clone(), handle.progress_token.clone());
                    (id, token, Box::pin(handle.await_response()) as Response)
                }
                Err(error) => return service_failed(&self.upstream, Some(core), session, &error),
            },
        };
        // Registered before the upstream can have answered anything but the request itself, so its
        // progress reaches the client; a progress notification racing the registration is dropped.
        // A 2026-07-28 call takes the upstream's requests itself, and parks on them.
        let (asks, asked) = mpsc::channel(ASKS_QUEUE);
        let modern = context.session.protocol_version.era() == ProtocolEra::Stateless;
        let running = session.relay.register(
            progress_token,
            context.progress_token.cloned(),
            context.stream.clone(),
            redactor.clone(),
            &context.session.client_capabilities,
            modern.then_some(asks),
        );
        let forwarded = UpstreamCall {
            upstream: self.upstream.clone(),
            core: self.core.clone(),
            session: session.clone(),
            principal: context.principal.clone(),
            id,
            response,
            _running: running,
            asks: asked,
            redactor,
        };
        let stop = async {
            let gone = async {
                match &context.stream {
                    Some(stream) => stream.gone().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = gone => Stop { reason: "the client went away", said: "The client went away." },
                () = context.cancelled.cancelled() => Stop {
                    reason: "the client cancelled the call",
                    said: "The call was cancelled.",
                },
            }
        };
        let (outcome, parking) = forwarded.drive(stop).await;
        if let Some(parking) = parking {
            tokio::spawn(wait_parked(parking));
        }
        outcome
    }

    /// A retry bringing the client's answers to the upstream's requests of a parked call: they go
    /// to the call, here or on the replica that holds it, and its next outcome is the retry's.
    async fn resume(
        &self,
        core: &Core,
        context: &CallContext<'_>,
        parked: &ParkedRef,
        input: &ToolInput,
    ) -> ToolOutcome {
        let responses = input.responses.clone();
        let outcome = if parked.replica == core.parked.replica() {
            core.parked
                .resume(&parked.id, context.principal, responses)
                .await
                .ok_or_else(String::new)
        } else if !input.held {
            // Waiting takes one of the user's places among the held retries: a replica that
            // died never answers, so each wait would last its whole time.
            tracing::info!(upstream = %self.upstream.id, principal = %context.principal, "a retry for a call parked on another replica is refused at once: the user has the most retries held");
            return failed(format!(
                "Refused at once: the user already has as many retries waiting as one user may \
                 (limits.held_retries_per_principal), so the answers were not passed on to the {} \
                 server's request. Call the tool again once the others are answered.",
                self.upstream.id
            ));
        } else {
            // The owner steps the call for up to the upstream's timeout before it answers.
            let wait = self.upstream.timeout + RESUME_MARGIN;
            core.parked
                .resume_elsewhere(&core.bus, parked, context.principal, responses, wait)
                .await
        };
        outcome.unwrap_or_else(|why| {
            let why = if why.is_empty() {
                String::new()
            } else {
                format!(" ({why})")
            };
            failed(format!(
                "The {} server's request is no longer waiting for the answers{why}. Call the tool again.",
                self.upstream.id
            ))
        })
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
    // A user whose identity provider wanted interaction signed in for the server: that token
    // serves instead of an exchange (see `SignInRequired`).
    let signed_in = upstream
        .exchange
        .as_ref()
        .and_then(|_| credentials.token(&upstream.id).cloned());
    let exchanged = match (&upstream.exchange, &signed_in) {
        (_, Some(token)) => Some(token.clone()),
        (Some(exchange), None) => Some(
            core.exchanges
                .token(upstream, exchange, principal, access_token)
                .await?,
        ),
        (None, None) => None,
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
            if signed_in.is_some() && status == Refusal::Unauthorized {
                return Err(ToolOutcome::CredentialRejected {
                    provider: upstream.id.clone(),
                });
            }
            Err(refused(upstream, status))
        }
        Err(OpenError::Full(limit)) => Err(failed(format!(
            "The {} server is busy: all {limit} of its sessions are in use. Try again in a moment.",
            upstream.id
        ))),
        Err(OpenError::Failed(why)) => {
            tracing::warn!(upstream = %upstream.id, %principal, %why, "could not open an upstream session");
            core.faults
                .record(&upstream.id, format_args!("opening a session: {why}"));
            Err(failed(failure::unreachable(&upstream.id)))
        }
        Err(OpenError::Broken { fault, why }) => {
            tracing::warn!(upstream = %upstream.id, %principal, %why, "an upstream is unusable until the operator fixes it");
            core.faults.record(
                &upstream.id,
                format_args!("opening a session: {why} (the operator must fix it)"),
            );
            Err(failed(failure::broken(&upstream.id, fault)))
        }
    }
}

/// Whether `key` names a member of any object within `value`.
fn names_key(value: &Value, key: &str) -> bool {
    match value {
        Value::Object(members) => members.iter().any(|(name, value)| name == key || names_key(value, key)),
        Value::Array(items) => items.iter().any(|item| names_key(item, key)),
        _ => false,
    }
}

/// A failed call's outcome: `sentence`, for the model.
pub fn failed(sentence: impl Into<String>) -> ToolOutcome {
    ToolOutcome::Done(ToolResult::error(sentence))
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

/// The upstream refused the credentials the call used, as the call's outcome.
pub fn refused(upstream: &Upstream, refusal: Refusal) -> ToolOutcome {
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

/// A `CallToolResult` as the upstream gave it.
pub fn tool_result(result: Value) -> ToolResult {
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
            return failed("gatehouse is shutting down. Try again in a moment.");
        };
        // A retry for a call parked on the upstream's request goes on with that call.
        let parked = context
            .input
            .and_then(|input| Some((ParkedRef::from_state(&input.state)?, input)));
        let outcome = match parked {
            Some((parked, input)) => self.resume(&core, context, &parked, input).await,
            None => self.run(&core, context, credentials, arguments).await,
        };
        let counted = match &outcome {
            ToolOutcome::Done(result) if result.is_error => UpstreamOutcome::Error,
            ToolOutcome::Done(_) => UpstreamOutcome::Ok,
            ToolOutcome::UrlElicitations(_) | ToolOutcome::InputRequired { .. } => UpstreamOutcome::ElicitationRequired,
            ToolOutcome::CredentialRejected { .. }
            | ToolOutcome::ScopesMissing { .. }
            | ToolOutcome::SignInRequired { .. } => UpstreamOutcome::Refused,
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
