//! Run-or-elicit: one tool call through the gate. It decides; while the user must first finish
//! something in the browser, it waits where the call may (within the call, or a 2026-07-28 retry
//! held on the bus) and decides again; it runs the tool with the credentials it lends; when the
//! provider refuses the token or wants more scopes, it decides again (three rounds at most); and
//! it puts its answer on the audit trail. It hands out how the call ended ([`Called`]); each
//! protocol era gives that its wire shape.

use serde_json::{Map, Value, json};
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::tool::{AskWithinCall, RunTool, ToolOutcome, ToolResult};
use super::{Credentials, Decision, Gate, GateError, Requirement, ToolCall};
use crate::audit::Origin;
use crate::domain::{ElicitationId, Principal};
use crate::store::{AuditAction, ElicitationRecord, SessionRecord};

/// How a call ended: its result, or what the user or the client must do first.
pub enum Called {
    /// The tool ran: its result.
    Ran(ToolResult),
    /// The call ends with this result without the tool running (the user declined, a provider
    /// cannot be reached, a limit was reached, waiting ended).
    Answered(ToolResult),
    /// gatehouse's own pending elicitations.
    Elicit(Vec<ElicitationRecord>),
    /// An upstream's URL-mode elicitations (`mode`, `elicitationId`, `url`, `message`), as it sent
    /// them.
    Upstream(Vec<Value>),
    /// The tool's own input requests (2026-07-28), and what it keeps until their answers come.
    InputRequired { requests: Map<String, Value>, state: Value },
}

/// A 2026-07-28 retry that may wait for the elicitations it was given: until `until`, woken by
/// `wake` (the bus, for the caller's stateless session) whenever one of them may have finished.
pub struct Hold {
    pub until: Instant,
    pub wake: watch::Receiver<u64>,
    /// The elicitations the client was given; a call that needs any other answers at once, since
    /// the user has not seen its link.
    pub given: Vec<ElicitationId>,
    /// Cancelled when this replica shuts down: the call answers at once (the client retries on
    /// another replica) rather than holding the shutdown for the rest of the hold.
    pub stop: CancellationToken,
}

/// Whether and how a call waits for the user before it hands out the elicitations.
pub enum Waiting<'a, A> {
    /// Not at all.
    No,
    /// Within the call, asking through `A`.
    InCall(&'a A),
    /// A 2026-07-28 retry, held for the elicitations it was given.
    Held(Hold),
}

/// Where a call stands after the gate: run the tool, answer without running it, or the
/// elicitations the user must finish.
enum Gated {
    Run(Credentials),
    Answer(ToolResult),
    Elicit(Vec<ElicitationRecord>),
}

/// Rounds of asking within one call: enough for a tool that needs a sign-in and a form.
const MAX_IN_CALL_ROUNDS: usize = 4;

impl Gate {
    /// Runs `call` of `principal` in `session` (a real one, or a 2026-07-28 request's own) through
    /// `tool`, once every requirement is met, waiting for the user as `waiting` allows. A rejected
    /// token breaks its connection, so the second decision elicits; missing scopes join the
    /// requirements, so the next decision asks for them. Three rounds cover both.
    pub async fn run<R: RunTool, A: AskWithinCall>(
        &self,
        principal: &Principal,
        session: &SessionRecord,
        call: ToolCall<'_>,
        tool: &R,
        mut waiting: Waiting<'_, A>,
    ) -> Result<Called, GateError> {
        let mut requires = call.requires.to_vec();
        for _ in 0..3 {
            let round = ToolCall {
                requires: &requires,
                ..call
            };
            let gated = match &mut waiting {
                Waiting::Held(hold) => self.held(principal, session, &round, hold).await?,
                Waiting::InCall(ask) => self.asked_in_call(principal, session, &round, Some(*ask)).await?,
                Waiting::No => self.asked_in_call(principal, session, &round, None::<&A>).await?,
            };
            let credentials = match gated {
                Gated::Run(credentials) => {
                    // Only a gated tool's call is on the trail: one that needs nothing (whoami, say)
                    // is not an access decision, and would put a row per call in the database.
                    if !requires.is_empty() {
                        self.audit_call(principal, call.tool, call.from, true, json!({}));
                    }
                    credentials
                }
                Gated::Answer(result) => {
                    let detail = json!({ "reason": "answered without running" });
                    self.audit_call(principal, call.tool, call.from, false, detail);
                    return Ok(Called::Answered(result));
                }
                Gated::Elicit(elicitations) => {
                    let ids: Vec<String> = elicitations.iter().map(|e| e.id.to_string()).collect();
                    let detail = json!({ "reason": "the user must act first", "elicitations": ids });
                    self.audit_call(principal, call.tool, call.from, false, detail);
                    return Ok(Called::Elicit(elicitations));
                }
            };
            match tool.run(&credentials).await {
                ToolOutcome::Done(result) => return Ok(Called::Ran(result)),
                ToolOutcome::CredentialRejected { provider } => {
                    self.credential_rejected(principal, &provider, &credentials, call.from)
                        .await?;
                }
                ToolOutcome::ScopesMissing { provider, scopes } => {
                    tracing::info!(tool = call.tool, %provider, ?scopes, "the upstream wants more scopes: asking the user to grant them");
                    if !add_scopes(&mut requires, &provider, scopes) {
                        return Ok(Called::Answered(ToolResult::error(format!(
                            "{} needs permissions the connected {provider} account has not granted, and asking \
                             again did not help. Ask the user to check the account's permissions.",
                            call.tool
                        ))));
                    }
                }
                ToolOutcome::SignInRequired { provider } => {
                    let required = Requirement::Provider {
                        provider: provider.clone(),
                        scopes: Vec::new(),
                    };
                    if requires.contains(&required) || !self.connections.knows(&provider) {
                        return Ok(Called::Answered(ToolResult::error(format!(
                            "The identity provider wants the user to sign in again before {} may reach {provider} \
                             for them, and gatehouse cannot ask for that here. Sign in again in the MCP client, \
                             then retry.",
                            call.tool
                        ))));
                    }
                    tracing::info!(tool = call.tool, %provider, "the identity provider wants interaction: asking the user to sign in");
                    requires.push(required);
                }
                ToolOutcome::UrlElicitations(elicitations) => return Ok(Called::Upstream(elicitations)),
                ToolOutcome::InputRequired { requests, state } => return Ok(Called::InputRequired { requests, state }),
            }
        }
        Ok(Called::Answered(ToolResult::error(format!(
            "{} could not use the connected account; ask the user to sign in again.",
            call.tool
        ))))
    }

    /// A call of a tool the caller may not use, refused (the caller is told there is no such
    /// tool), on the audit trail.
    pub fn refused_hidden(&self, principal: &Principal, tool: &str, from: &Origin) {
        self.audit_call(principal, tool, from, false, json!({ "reason": "not permitted" }));
    }

    /// Puts the gate's answer to a call on the audit trail: allowed to run, or refused (and why).
    fn audit_call(&self, principal: &Principal, tool: &str, from: &Origin, allowed: bool, detail: Value) {
        let action = if allowed {
            AuditAction::CallAllowed
        } else {
            AuditAction::CallRefused
        };
        self.elicitations
            .backing
            .audit
            .record(principal, action, tool, from, detail);
    }

    /// Decides, and when the call may wait for the user, asks within the call and decides again.
    async fn asked_in_call<A: AskWithinCall>(
        &self,
        principal: &Principal,
        session: &SessionRecord,
        call: &ToolCall<'_>,
        ask: Option<&A>,
    ) -> Result<Gated, GateError> {
        for _ in 0..MAX_IN_CALL_ROUNDS {
            let elicitations = match self.decide_call(principal, session, call).await? {
                Gated::Elicit(elicitations) => elicitations,
                settled => return Ok(settled),
            };
            let Some(ask) = ask else {
                return Ok(Gated::Elicit(elicitations));
            };
            if let Err(result) = ask.ask(&elicitations).await {
                return Ok(Gated::Answer(result));
            }
        }
        Ok(Gated::Answer(ToolResult::error(
            "The user finished in the browser, but the tool still lacks what it needs. Call it again.",
        )))
    }

    /// Decides, and while the call still needs only elicitations the client was given, waits for
    /// a wake-up from the bus and decides again, until `hold.until` or shutdown. Whatever finishes them (on
    /// any replica) wakes the caller's stateless session, so the answer leaves the moment the
    /// user is done.
    async fn held(
        &self,
        principal: &Principal,
        session: &SessionRecord,
        call: &ToolCall<'_>,
        hold: &mut Hold,
    ) -> Result<Gated, GateError> {
        loop {
            // Marked seen before deciding: a wake-up during the decision is not lost.
            hold.wake.borrow_and_update();
            let elicitations = match self.decide_call(principal, session, call).await? {
                Gated::Elicit(elicitations) => elicitations,
                settled => return Ok(settled),
            };
            // Finished while the gate decided: it may have read the connections before and the
            // elicitations after, so decide again on what is there now.
            if hold.wake.has_changed().unwrap_or(false) {
                continue;
            }
            if !elicitations.iter().all(|e| hold.given.contains(&e.id)) {
                return Ok(Gated::Elicit(elicitations));
            }
            let woken = tokio::select! {
                waited = tokio::time::timeout_at(hold.until, hold.wake.changed()) => matches!(waited, Ok(Ok(()))),
                () = hold.stop.cancelled() => false,
            };
            if !woken {
                return Ok(Gated::Elicit(elicitations));
            }
        }
    }

    /// The decision, with what the model can act on (a decline, an unreachable provider, a limit
    /// reached) as the call's answer.
    async fn decide_call(
        &self,
        principal: &Principal,
        session: &SessionRecord,
        call: &ToolCall<'_>,
    ) -> Result<Gated, GateError> {
        let answer = match self.decide(principal, session, call).await {
            Ok(Decision::Run(credentials)) => return Ok(Gated::Run(credentials)),
            Ok(Decision::Elicit(elicitations)) => return Ok(Gated::Elicit(elicitations)),
            Ok(Decision::Denied(reason)) => reason,
            Ok(Decision::Declined(elicitation)) => format!(
                "The user declined the request: {} Do not call this tool again unless the user asks to.",
                elicitation.message
            ),
            Err(GateError::ProviderUnavailable { provider, reason }) => {
                format!("{provider} cannot be reached right now ({reason}). Try again in a moment.")
            }
            Err(GateError::TooManyPending { max }) => format!(
                "The user already has {max} requests waiting in the browser, the most allowed. Ask the user to \
                 finish or decline the ones they were given (or wait until they expire), then call this tool again."
            ),
            Err(GateError::TooManyCreated {
                per_minute,
                retry_after,
            }) => format!(
                "The user was asked to do something in the browser {per_minute} times within the last minute, the \
                 most allowed. Call this tool again in {retry_after} seconds."
            ),
            Err(error) => return Err(error),
        };
        Ok(Gated::Answer(ToolResult::error(answer)))
    }
}

/// Adds `scopes` to the call's requirement for `provider`; false when it holds them all already
/// (asking again cannot help).
fn add_scopes(requires: &mut Vec<Requirement>, provider: &str, scopes: Vec<String>) -> bool {
    let existing = requires.iter_mut().find_map(|r| match r {
        Requirement::Provider { provider: p, scopes } if p == provider => Some(scopes),
        _ => None,
    });
    match existing {
        Some(held) => {
            let before = held.len();
            for scope in scopes {
                if !held.contains(&scope) {
                    held.push(scope);
                }
            }
            held.len() > before
        }
        None => {
            requires.push(Requirement::Provider {
                provider: provider.to_owned(),
                scopes,
            });
            true
        }
    }
}
