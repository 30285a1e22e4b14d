//! The 2026-07-28 upstream calls parked on this replica: an upstream asked the client of a running
//! call something (`elicitation/create`, `sampling/createMessage`, `roots/list`), the call answered
//! `input_required`, and the upstream's request waits here for the retry's answers. A parked call
//! is named by this replica's id and its own id, which the retry's sealed `requestState` carries; a
//! retry that lands on another replica reaches it over the bus, and its outcome comes back the same
//! way. Bounded: at most [`MAX_PARKED`] calls here and [`MAX_PARKED_PER_PRINCIPAL`] per principal,
//! each until its deadline (or until this replica shuts down), when it ends and gives its place
//! back.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use serde_json::{Map, Value, json};
use tokio::sync::oneshot;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::tool::tool_result;
use crate::domain::Principal;
use crate::events::Bus;
use crate::store::Notice;
use crate::tools::{ToolOutcome, ToolResult};

/// Calls parked here at once; a call that would park one more answers its upstream's request
/// with an error instead. Each is an upstream request kept open and a task: a few kilobytes.
pub const MAX_PARKED: usize = 1_000;
/// Calls one principal may have parked here at once.
pub const MAX_PARKED_PER_PRINCIPAL: usize = 8;

/// What a retry brings to a parked call: the client's answers, and where the call's next outcome
/// goes (its result, or another `input_required` when the upstream asks again).
pub struct Resume {
    pub responses: Map<String, Value>,
    pub reply: oneshot::Sender<ToolOutcome>,
}

/// Where a parked call is: what the tool keeps in the `requestState` of its `input_required`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParkedRef {
    pub replica: String,
    pub id: String,
}

impl ParkedRef {
    pub fn to_state(&self) -> Value {
        json!({"parked": {"replica": self.replica, "id": self.id}})
    }

    /// The parked call a retry's kept state names, if any.
    pub fn from_state(state: &Value) -> Option<Self> {
        let parked = state.get("parked")?;
        Some(Self {
            replica: parked.get("replica")?.as_str()?.to_owned(),
            id: parked.get("id")?.as_str()?.to_owned(),
        })
    }
}

/// The calls parked here, and the retries here waiting for a call parked on another replica.
pub struct ParkedCalls {
    /// This replica's id (its instance nonce).
    replica: String,
    inner: Mutex<Inner>,
    /// Cancelled when this replica shuts down: every parked call ends at once.
    stopped: CancellationToken,
}

#[derive(Default)]
struct Inner {
    calls: HashMap<String, (Principal, oneshot::Sender<Resume>)>,
    by_principal: HashMap<Principal, usize>,
    /// Outcomes awaited from other replicas, by the key the resume notice gave.
    awaiting: HashMap<String, oneshot::Sender<Value>>,
}

/// One parked call's place; dropping it gives the place back (and forgets the call if no retry
/// took it).
pub struct Slot {
    calls: Arc<ParkedCalls>,
    principal: Principal,
    id: String,
    resume: oneshot::Receiver<Resume>,
    deadline: Instant,
    stopped: CancellationToken,
}

impl Slot {
    pub fn id(&self) -> &str {
        &self.id
    }

    pub fn parked_ref(&self) -> ParkedRef {
        ParkedRef {
            replica: self.calls.replica.clone(),
            id: self.id.clone(),
        }
    }

    /// The retry's answers, or `None` once the deadline has passed without one (or the replica
    /// shuts down).
    pub async fn wait(&mut self) -> Option<Resume> {
        tokio::select! {
            resume = tokio::time::timeout_at(self.deadline, &mut self.resume) => resume.ok()?.ok(),
            () = self.stopped.cancelled() => None,
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut inner = self.calls.lock();
        inner.calls.remove(&self.id);
        if let Some(count) = inner.by_principal.get_mut(&self.principal) {
            *count -= 1;
            if *count == 0 {
                inner.by_principal.remove(&self.principal);
            }
        }
    }
}

/// Removes an awaited outcome nobody waits for any more.
struct Awaiting<'a> {
    calls: &'a ParkedCalls,
    key: String,
}

impl Drop for Awaiting<'_> {
    fn drop(&mut self) {
        self.calls.lock().awaiting.remove(&self.key);
    }
}

impl ParkedCalls {
    pub fn new(replica: String) -> Self {
        Self {
            replica,
            inner: Mutex::default(),
            stopped: CancellationToken::new(),
        }
    }

    /// Ends every call parked here, now and from now on: this replica shuts down.
    pub fn stop(&self) {
        self.stopped.cancel();
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn replica(&self) -> &str {
        &self.replica
    }

    /// A place for one more parked call of `principal` until `deadline`; `None` when the
    /// replica's places, or the principal's, are all taken.
    pub fn park(self: &Arc<Self>, principal: &Principal, deadline: Instant) -> Option<Slot> {
        let mut inner = self.lock();
        if inner.calls.len() >= MAX_PARKED {
            return None;
        }
        let count = inner.by_principal.entry(principal.clone()).or_default();
        if *count >= MAX_PARKED_PER_PRINCIPAL {
            return None;
        }
        *count += 1;
        let id = Uuid::now_v7().simple().to_string();
        let (sender, resume) = oneshot::channel();
        inner.calls.insert(id.clone(), (principal.clone(), sender));
        Some(Slot {
            calls: self.clone(),
            principal: principal.clone(),
            id,
            resume,
            deadline,
            stopped: self.stopped.clone(),
        })
    }

    /// Calls parked here now.
    #[cfg(test)]
    pub fn parked_now(&self) -> usize {
        self.lock().calls.len()
    }

    /// Hands `responses` to the call parked here as `id` by `principal`: its next outcome, or
    /// `None` when no such call waits (it ended at its deadline, or another retry took it).
    pub async fn resume(&self, id: &str, principal: &Principal, responses: Map<String, Value>) -> Option<ToolOutcome> {
        let sender = {
            let mut inner = self.lock();
            match inner.calls.get(id) {
                Some((owner, _)) if owner == principal => inner.calls.remove(id).map(|(_, sender)| sender)?,
                _ => return None,
            }
        };
        let (reply, outcome) = oneshot::channel();
        sender.send(Resume { responses, reply }).ok()?;
        outcome.await.ok()
    }

    /// Hands `responses` to the call parked on another replica, over the bus, and waits up to
    /// `wait` for its outcome. An `Err` says why there is none, for the model.
    pub async fn resume_elsewhere(
        &self,
        bus: &Bus,
        parked: &ParkedRef,
        principal: &Principal,
        responses: Map<String, Value>,
        wait: Duration,
    ) -> Result<ToolOutcome, String> {
        let key = Uuid::now_v7().simple().to_string();
        let (sender, outcome) = oneshot::channel();
        {
            let mut inner = self.lock();
            if inner.awaiting.len() >= MAX_PARKED {
                return Err("gatehouse is too busy to pass the answers on right now".to_owned());
            }
            inner.awaiting.insert(key.clone(), sender);
        }
        let _awaiting = Awaiting {
            calls: self,
            key: key.clone(),
        };
        let notice = json!({"replica": parked.replica, "id": parked.id, "principal": principal.as_str(),
            "reply": key, "responses": responses});
        match bus.tell_replicas(&Notice::ParkedResume(notice.to_string())).await {
            Ok(true) => {}
            Ok(false) => return Err("the answers are too large to pass on to the replica holding the call".to_owned()),
            Err(error) => {
                tracing::warn!(%error, "could not pass answers on to the replica holding a parked call");
                return Err("the answers could not be passed on to the replica holding the call".to_owned());
            }
        }
        match tokio::time::timeout(wait, outcome).await {
            Ok(Ok(outcome)) => decode(&outcome).ok_or_else(|| "the waiting call is gone".to_owned()),
            _ => Err("the replica holding the call did not answer".to_owned()),
        }
    }

    /// Applies what other replicas send for the parked calls here (and the outcomes of calls
    /// parked elsewhere, for the retries waiting here), until shutdown.
    pub async fn listen(self: Arc<Self>, bus: Arc<Bus>, shutdown: CancellationToken) {
        let mut notices = bus.subscribe_calls();
        loop {
            let notice = tokio::select! {
                () = shutdown.cancelled() => {
                    self.stop();
                    return;
                }
                notice = notices.recv() => notice,
            };
            match notice {
                Ok(Notice::ParkedResume(text)) => self.resume_for_another(&bus, &text),
                Ok(Notice::ParkedOutcome(text)) => {
                    let outcome: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
                    let key = outcome.get("reply").and_then(Value::as_str).unwrap_or_default();
                    if let Some(sender) = self.lock().awaiting.remove(key) {
                        let _ = sender.send(outcome.get("outcome").cloned().unwrap_or(Value::Null));
                    }
                }
                Ok(_) => {}
                Err(tokio::sync::broadcast::error::RecvError::Lagged(missed)) => {
                    tracing::warn!(missed, "missed notices for parked upstream calls");
                }
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
            }
        }
    }

    /// Another replica's retry for a call parked here: its outcome goes back over the bus (null
    /// when no such call waits here).
    fn resume_for_another(self: &Arc<Self>, bus: &Arc<Bus>, text: &str) {
        let Ok(resume) = serde_json::from_str::<Value>(text) else {
            return;
        };
        let field = |name: &str| resume.get(name).and_then(Value::as_str).unwrap_or_default().to_owned();
        if field("replica") != self.replica {
            return;
        }
        let Ok(principal) = Principal::parse(&field("principal")) else {
            return;
        };
        let responses = resume
            .get("responses")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        let (calls, bus, key, id) = (self.clone(), bus.clone(), field("reply"), field("id"));
        tokio::spawn(async move {
            let outcome = calls.resume(&id, &principal, responses).await;
            let mut answer = json!({"reply": key, "outcome": outcome.as_ref().map(encode)});
            if answer.to_string().len() > MAX_OUTCOME_BYTES {
                let result = ToolResult::error(
                    "The result is too large to pass between gatehouse's replicas. Call the tool again.",
                );
                answer["outcome"] = encode(&ToolOutcome::Done(result));
            }
            if let Err(error) = bus.tell_replicas(&Notice::ParkedOutcome(answer.to_string())).await {
                tracing::warn!(%error, "could not send a parked call's outcome to the replica waiting for it");
            }
        });
    }
}

/// The largest outcome sent back over the bus, within PostgreSQL's NOTIFY payload (8000 bytes).
const MAX_OUTCOME_BYTES: usize = 7_800;

/// An outcome as it crosses the bus.
fn encode(outcome: &ToolOutcome) -> Value {
    match outcome {
        ToolOutcome::Done(result) => json!({"result": result.clone().into_json()}),
        ToolOutcome::CredentialRejected { provider } => json!({"credentialRejected": provider}),
        ToolOutcome::SignInRequired { provider } => json!({"signInRequired": provider}),
        ToolOutcome::ScopesMissing { provider, scopes } => {
            json!({"scopesMissing": {"provider": provider, "scopes": scopes}})
        }
        ToolOutcome::UrlElicitations(elicitations) => json!({"urlElicitations": elicitations}),
        ToolOutcome::InputRequired { requests, state } => {
            json!({"inputRequired": {"requests": requests, "state": state}})
        }
    }
}

/// An outcome read back from the bus.
fn decode(outcome: &Value) -> Option<ToolOutcome> {
    if let Some(result) = outcome.get("result") {
        return Some(ToolOutcome::Done(tool_result(result.clone())));
    }
    if let Some(provider) = outcome.get("credentialRejected").and_then(Value::as_str) {
        return Some(ToolOutcome::CredentialRejected {
            provider: provider.to_owned(),
        });
    }
    if let Some(provider) = outcome.get("signInRequired").and_then(Value::as_str) {
        return Some(ToolOutcome::SignInRequired {
            provider: provider.to_owned(),
        });
    }
    if let Some(missing) = outcome.get("scopesMissing") {
        return Some(ToolOutcome::ScopesMissing {
            provider: missing.get("provider")?.as_str()?.to_owned(),
            scopes: serde_json::from_value(missing.get("scopes")?.clone()).ok()?,
        });
    }
    if let Some(elicitations) = outcome.get("urlElicitations").and_then(Value::as_array) {
        return Some(ToolOutcome::UrlElicitations(elicitations.clone()));
    }
    let input = outcome.get("inputRequired")?;
    Some(ToolOutcome::InputRequired {
        requests: input.get("requests")?.as_object()?.clone(),
        state: input.get("state").cloned().unwrap_or(Value::Null),
    })
}

#[cfg(test)]
mod tests;
