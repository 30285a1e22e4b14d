//! In-call elicitation (`elicit = "request"`): instead of failing with -32042, a tool call sends
//! `elicitation/create` (URL mode) on its own POST's SSE stream and waits, within the call, for the
//! user to finish in the browser.
//!
//! The client's answer is a POST that any replica may receive; that replica routes it over the bus
//! to the one where the call waits (`Bus::answer`). Completion is seen through the session's
//! wake-ups (a completed elicitation appends its notification to the session's log), with a slow
//! poll as a safety net for a wake-up lost while the bus reconnects.
//!
//! The client's `decline` is the user's no: the call ends saying so. Its `cancel` (or an error
//! answer) is "not now": the call ends with the links as a client without URL mode gets them, and
//! the elicitations stay open, so the call made again once the user finished runs.

use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::time::{Instant, MissedTickBehavior};

use super::links;
use crate::audit::Origin;
use crate::events::AnswerReceiver;
use crate::jsonrpc;
use crate::state::AppState;
use crate::store::ClientAction;
use crate::store::{ElicitationRecord, ElicitationStatus, SessionRecord};
use crate::tools::ToolResult;

/// Prefix of the JSON-RPC ids of our `elicitation/create` requests; the rest is the elicitation id.
pub const REQUEST_ID_PREFIX: &str = "gatehouse-elicitation-";
/// How often a waiting call looks at the store when no wake-up came.
const POLL: Duration = Duration::from_secs(2);

/// Messages sent on a POST's SSE stream, in order; the call's response is the last.
#[derive(Clone)]
pub struct Outbox {
    sender: mpsc::Sender<Value>,
}

impl Outbox {
    pub fn channel() -> (Self, mpsc::Receiver<Value>) {
        let (sender, receiver) = mpsc::channel(16);
        (Self { sender }, receiver)
    }

    /// Sends on `sender`, a channel whose reader writes to the client (stdio's output).
    pub fn onto(sender: mpsc::Sender<Value>) -> Self {
        Self { sender }
    }

    /// False when the client has gone away.
    pub async fn send(&self, message: Value) -> bool {
        self.sender.send(message).await.is_ok()
    }

    /// Completes when the client has gone away.
    pub async fn closed(&self) {
        self.sender.closed().await;
    }
}

/// How waiting for the user ended.
pub enum Waited {
    /// Every elicitation completed: decide again, the requirements should now be met.
    Done,
    /// The call cannot go on: a result for the model (declined, dismissed, timed out, failed).
    Stopped(ToolResult),
    /// The client closed the stream: nobody is left to answer.
    Gone,
}

/// Asks the client to open each elicitation's URL and waits until all are completed.
pub async fn wait(
    state: &AppState,
    session: &SessionRecord,
    elicitations: &[ElicitationRecord],
    outbox: &Outbox,
    progress_token: Option<&Value>,
    timeout: Duration,
) -> Waited {
    // Listen before asking, so neither an answer nor a completion can slip in between.
    let mut wake = state.bus.subscribe(&session.id);
    let mut answers: Vec<(ElicitationRecord, AnswerReceiver)> = elicitations
        .iter()
        .map(|e| (e.clone(), state.bus.await_answer(e.id)))
        .collect();
    for elicitation in elicitations {
        let request = jsonrpc::request(
            &format!("{REQUEST_ID_PREFIX}{}", elicitation.id),
            "elicitation/create",
            json!({
                "mode": "url",
                "elicitationId": elicitation.id.to_string(),
                "url": elicitation.url,
                "message": elicitation.message,
            }),
        );
        if !outbox.send(request).await {
            return Waited::Gone;
        }
    }
    let deadline = Instant::now() + timeout;
    let mut progress = tokio::time::interval(state.config.elicitation.progress_interval);
    progress.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut poll = tokio::time::interval(POLL);
    poll.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut progress_count = 0u64;
    let mut accepted = false;
    loop {
        if let Some(ended) = drop_completed(state, &mut answers).await {
            return ended;
        }
        tokio::select! {
            () = tokio::time::sleep_until(deadline) => {
                let waited = humantime::format_duration(timeout);
                tracing::info!(session = ?session.id, %waited, "in-call elicitation timed out");
                return Waited::Stopped(ToolResult::error(format!(
                    "The user did not finish in the browser within {waited}. The request stays open until it \
                     expires: call this tool again with the same arguments to keep waiting."
                )));
            }
            () = state.shutdown.cancelled() => {
                return Waited::Stopped(ToolResult::error(
                    "The server is restarting. Call this tool again with the same arguments in a moment.",
                ));
            }
            () = outbox.sender.closed() => return Waited::Gone,
            _ = wake.changed() => {}
            _ = poll.tick() => {}
            _ = progress.tick() => {
                if let Some(token) = progress_token {
                    progress_count += 1;
                    let message = if accepted {
                        "Waiting for the user to finish in the browser."
                    } else {
                        "Waiting for the user to open the link."
                    };
                    let notification = jsonrpc::notification(
                        "notifications/progress",
                        json!({"progressToken": token, "progress": progress_count, "message": message}),
                    );
                    if !outbox.send(notification).await {
                        return Waited::Gone;
                    }
                }
            }
            Some((index, action)) = next_answer(&mut answers) => {
                let elicitation = answers[index].0.clone();
                match action {
                    ClientAction::Accept => accepted = true,
                    ClientAction::Decline => {
                        finish_declined(state, &elicitation).await;
                        return Waited::Stopped(declined(&elicitation));
                    }
                    // Dismissed is "not now" (Claude Code in `-p` mode dismisses every link): the
                    // links go to the model as to a client without URL mode, and stay open.
                    ClientAction::Cancel => {
                        let waiting: Vec<ElicitationRecord> = answers.iter().map(|(e, _)| e.clone()).collect();
                        return Waited::Stopped(links::result(&links::listed(&waiting)));
                    }
                }
            }
        }
    }
}

/// The first answer any of the elicitations received.
async fn next_answer(answers: &mut [(ElicitationRecord, AnswerReceiver)]) -> Option<(usize, ClientAction)> {
    if answers.is_empty() {
        return std::future::pending().await;
    }
    let receivers = answers
        .iter_mut()
        .enumerate()
        .map(|(i, (_, receiver))| Box::pin(async move { receiver.recv().await.map(|action| (i, action)) }));
    futures::future::select_all(receivers).await.0
}

fn declined(elicitation: &ElicitationRecord) -> ToolResult {
    ToolResult::error(format!(
        "The user declined: {} Do not call this tool again unless the user asks to.",
        elicitation.message
    ))
}

/// Re-reads the elicitations still waited for and drops the completed ones. `Some`: waiting is
/// over, because all completed or one ended otherwise.
async fn drop_completed(state: &AppState, answers: &mut Vec<(ElicitationRecord, AnswerReceiver)>) -> Option<Waited> {
    let elicitations = state.gate.elicitations();
    let mut index = 0;
    while index < answers.len() {
        let current = match elicitations.get(&answers[index].0.id).await {
            Ok(Some(current)) => current,
            Ok(None) => {
                return Some(Waited::Stopped(ToolResult::error(
                    "The request to the user disappeared. Call this tool again.",
                )));
            }
            Err(error) => {
                tracing::error!(%error, "could not read an elicitation while waiting");
                return Some(Waited::Stopped(ToolResult::error(
                    "gatehouse could not check on the request to the user. Call this tool again in a moment.",
                )));
            }
        };
        let ended = match current.status {
            ElicitationStatus::Pending => {
                index += 1;
                continue;
            }
            ElicitationStatus::Completed => {
                answers.swap_remove(index);
                continue;
            }
            ElicitationStatus::Declined => {
                // Reported here, so the next call asks afresh instead of reporting it again.
                if let Err(error) = elicitations.mark_decline_reported(&current).await {
                    tracing::warn!(%error, "could not mark a decline reported");
                }
                declined(&current)
            }
            ElicitationStatus::Expired => {
                ToolResult::error("The request to the user expired. Call this tool again if the user still wants it.")
            }
            ElicitationStatus::Failed => ToolResult::error(format!(
                "The step in the browser did not succeed ({}). Call this tool again to retry.",
                current.message
            )),
        };
        return Some(Waited::Stopped(ended));
    }
    answers.is_empty().then_some(Waited::Done)
}

/// The client declined: the elicitation is over, and this call reports it.
async fn finish_declined(state: &AppState, elicitation: &ElicitationRecord) {
    let elicitations = state.gate.elicitations();
    let result = async {
        elicitations
            .finish(elicitation, ElicitationStatus::Declined, &Origin::unknown())
            .await?;
        elicitations.mark_decline_reported(elicitation).await
    }
    .await;
    if let Err(error) = result {
        tracing::warn!(%error, elicitation = %elicitation.id, "could not record a client's decline");
    }
}
