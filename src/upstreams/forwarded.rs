//! One call forwarded to an upstream, from its request to its outcome. Each step waits for the
//! upstream's answer, for a request the upstream makes of a 2026-07-28 client (an [`Ask`]), or for
//! the end of the wait. An `Ask` parks the call (see `parked`): the call answers `input_required`
//! with the upstream's request, and a task keeps the upstream request waiting until the retry's
//! answers come, then goes on stepping and hands the retry the next outcome; at the deadline it
//! answers the upstream's request with an error and cancels the call instead.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Weak};

use rmcp::model::{
    CancelledNotification, CancelledNotificationParam, ClientNotification, ErrorData, RequestId, ServerResult,
};
use rmcp::service::ServiceError;
use serde_json::{Map, Value};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::Core;
use super::crossing::{Crossing, Refused};
use super::failure;
use super::offers::relink;
use super::parked::Slot;
use super::pool::Session;
use super::relay::{Ask, RunningCall};
use super::tool::{failed, refused, tool_result};
use super::upstream::Upstream;
use crate::domain::Principal;
use crate::tools::{Redactor, ToolOutcome};

/// JSON-RPC error code of an upstream asking for URL-mode elicitation first.
pub(super) const URL_ELICITATION_REQUIRED: i32 = -32042;
/// An upstream's error message shown to the model, at most.
const MAX_ERROR_MESSAGE_BYTES: usize = 512;

pub type Response = Pin<Box<dyn Future<Output = Result<ServerResult, ServiceError>> + Send>>;

/// A call sent to the upstream and not answered yet.
pub struct UpstreamCall {
    pub upstream: Arc<Upstream>,
    pub core: Weak<Core>,
    pub session: Arc<Session>,
    pub principal: Principal,
    pub id: RequestId,
    pub response: Response,
    /// Registered on the session's relay while the call lives.
    pub _running: RunningCall,
    /// The upstream's requests to a 2026-07-28 client (never any for a 2025-11-25 call).
    pub asks: mpsc::Receiver<Ask>,
    pub redactor: Arc<Redactor>,
}

/// Where one step of a call ended.
enum Step {
    /// The call's outcome: what the upstream answered, or why the wait ended.
    Ended(ToolOutcome),
    Asked(Ask),
}

/// A parked call: the call, the upstream's request it waits on, and its place.
pub struct Parking {
    forwarded: UpstreamCall,
    ask: Ask,
    slot: Slot,
}

/// Why a call stops before its upstream answered: told to the upstream, and to the model.
pub struct Stop {
    pub reason: &'static str,
    pub said: &'static str,
}

impl UpstreamCall {
    /// Waits for the upstream's answer, its next request, `stop`, or the upstream's timeout.
    async fn step(&mut self, stop: impl Future<Output = Stop>) -> Step {
        let timeout = self.upstream.timeout;
        tokio::select! {
            answer = &mut self.response => Step::Ended(self.outcome(answer)),
            Some(ask) = self.asks.recv() => Step::Asked(ask),
            stop = stop => {
                self.cancel(stop.reason).await;
                Step::Ended(failed(stop.said))
            }
            () = tokio::time::sleep(timeout) => {
                self.cancel("gatehouse's timeout for the upstream passed").await;
                Step::Ended(failed(format!(
                    "The {} server did not answer within {}.",
                    self.upstream.id,
                    humantime::format_duration(timeout)
                )))
            }
        }
    }

    /// Runs the call until its outcome. An upstream request of a 2026-07-28 client parks the call
    /// (the outcome is then `input_required`, and the parking is handed back for [`wait_parked`]);
    /// without a place to park, the upstream's request is refused and the call goes on.
    pub async fn drive(mut self, stop: impl Future<Output = Stop>) -> (ToolOutcome, Option<Parking>) {
        let mut stop = std::pin::pin!(stop);
        loop {
            let ask = match self.step(&mut stop).await {
                Step::Ended(outcome) => return (outcome, None),
                Step::Asked(ask) => ask,
            };
            let Some(core) = self.core.upgrade() else {
                ask.refuse("gatehouse is shutting down");
                continue;
            };
            let Some(slot) = core
                .parked
                .park(&self.principal, Instant::now() + self.upstream.timeout)
            else {
                tracing::info!(upstream = %self.upstream.id, principal = %self.principal, "an upstream's request was refused: too many calls wait for their clients");
                ask.refuse("too many calls wait for their clients already; try again later");
                continue;
            };
            let mut requests = Map::new();
            requests.insert(slot.id().to_owned(), ask.input_request());
            let state = slot.parked_ref().to_state();
            let parking = Parking {
                forwarded: self,
                ask,
                slot,
            };
            return (ToolOutcome::InputRequired { requests, state }, Some(parking));
        }
    }

    /// `&mut`: the call is `Send` but not `Sync`.
    async fn cancel(&mut self, reason: &str) {
        cancel(&self.session, self.id.clone(), reason).await;
    }

    /// What the upstream answered, as the call's outcome.
    fn outcome(&self, answer: Result<ServerResult, ServiceError>) -> ToolOutcome {
        let crossing = Crossing::of(&self.upstream, &self.redactor);
        let id = &self.upstream.id;
        match answer {
            Ok(ServerResult::CallToolResult(result)) => {
                let mut result = crossing.value(serde_json::to_value(result).unwrap_or(Value::Null));
                // Resource links in the result name resources the client reads through gatehouse.
                relink(&mut result, &self.upstream.tag);
                ToolOutcome::Done(tool_result(result))
            }
            Ok(_) => failed(format!("The {id} server gave an answer gatehouse cannot read.")),
            Err(ServiceError::McpError(error)) if error.code.0 == URL_ELICITATION_REQUIRED => {
                elicitations_asked(&self.upstream, &self.principal, &crossing, &error)
            }
            Err(ServiceError::McpError(error)) => failed(format!(
                "The {id} server refused the call: {}",
                crossing.bounded_text(&error.message, MAX_ERROR_MESSAGE_BYTES)
            )),
            Err(error) => service_failed(&self.upstream, self.core.upgrade().as_deref(), &self.session, &error),
        }
    }
}

/// Keeps a parked call until its retry's answers come (then goes on with it, and hands the retry
/// the next outcome, parking again if the upstream asks again) or its deadline passes or the
/// replica shuts down (then the upstream's request gets an error and the call is cancelled).
pub async fn wait_parked(mut parking: Parking) {
    loop {
        let Parking {
            mut forwarded,
            ask,
            mut slot,
        } = parking;
        // The input request was keyed by the parked call's id.
        let key = slot.id().to_owned();
        let Some(resume) = slot.wait().await else {
            tracing::info!(upstream = %forwarded.upstream.id, principal = %forwarded.principal, "a parked call ended: its client did not answer in time, or the replica shuts down");
            ask.refuse("the client did not answer in time");
            forwarded.cancel("the client did not answer in time").await;
            return;
        };
        drop(slot);
        ask.answer(resume.responses.get(&key));
        let (outcome, next) = forwarded.drive(std::future::pending()).await;
        // The retry may have gone meanwhile; a call parked again still ends at its deadline.
        let _ = resume.reply.send(outcome);
        match next {
            Some(next) => parking = next,
            None => return,
        }
    }
}

/// The upstream's -32042: the URL elicitations it asks for, each checked and marked as its own
/// on the way (or, when one is refused or none is named, a failure).
pub fn elicitations_asked(
    upstream: &Upstream,
    principal: &Principal,
    crossing: &Crossing<'_>,
    error: &ErrorData,
) -> ToolOutcome {
    let id = &upstream.id;
    let elicitations = error
        .data
        .as_ref()
        .and_then(|d| d.get("elicitations"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if elicitations.is_empty() {
        return failed(format!(
            "The {id} server asked for a step in the browser without saying which."
        ));
    }
    match elicitations
        .into_iter()
        .map(|e| crossing.elicitation(e))
        .collect::<Result<Vec<_>, _>>()
    {
        Ok(elicitations) => ToolOutcome::UrlElicitations(elicitations),
        Err(Refused(why)) => {
            tracing::warn!(upstream = %id, %principal, %why, "refused an upstream's elicitation");
            failed(format!(
                "The {id} server asked for a step in the browser that gatehouse refused: {why}."
            ))
        }
    }
}

pub async fn cancel(session: &Session, id: RequestId, reason: &str) {
    let params = CancelledNotificationParam::new(Some(id), Some(reason.to_owned()));
    let notification = ClientNotification::CancelledNotification(CancelledNotification::new(params));
    if let Err(error) = session.service.peer().send_notification(notification).await {
        tracing::debug!(upstream = %session.upstream, %error, "could not tell the upstream a call was cancelled");
    }
}

/// A failure of the session or the transport, as the call's outcome.
pub fn service_failed(
    upstream: &Upstream,
    core: Option<&Core>,
    session: &Arc<Session>,
    error: &ServiceError,
) -> ToolOutcome {
    if let Some(refusal) = failure::request_refusal(error) {
        if let Some(core) = core {
            core.pool.forget(session);
            if let Some(principal) = &session.principal {
                core.exchanges.forget(principal, &upstream.id);
            }
        }
        return refused(upstream, refusal);
    }
    tracing::warn!(upstream = %upstream.id, principal = ?session.principal, %error, "an upstream call failed");
    if let Some(core) = core {
        core.faults.record(&upstream.id, format_args!("a call failed: {error}"));
    }
    if matches!(error, ServiceError::TransportClosed | ServiceError::TransportSend(_))
        && let Some(core) = core
    {
        // A crashed process or a dropped session: the next call opens a new one.
        core.pool.forget(session);
    }
    failed(failure::describe(&upstream.id, error))
}
