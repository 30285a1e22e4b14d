//! Calls running on this replica: a client's `notifications/cancelled` finds its call here, and
//! so do the client's answers to requests sent within calls (gatehouse's own in-call
//! `elicitation/create`, routed over the bus to whichever replica waits, and an upstream's
//! requests relayed to the client). Each entry lives exactly as long as its call or its request,
//! so what a client can make this hold is bounded by what it has running. Also the places of the
//! 2026-07-28 retries held here, bounded in all and per principal.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use serde_json::Value;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::incall::{self, Outbox};
use crate::domain::{ElicitationId, Principal, SessionId};
use crate::events::Bus;
use crate::jsonrpc::{self, RequestId};
use crate::state::AppState;
use crate::store::{ClientAction, Notice, SessionRecord};
use crate::tools::CallStream;

/// Prefix of the JSON-RPC ids of requests relayed to a client; the rest is random.
pub const RELAYED_ID_PREFIX: &str = "gatehouse-relay-";

type Answer = Result<Value, Value>;

/// 2026-07-28 retries held at once on this replica, waiting for their user; one more is answered
/// at once instead (its client retries again), so holding costs at most this many waiting
/// requests. Each is an open HTTP request and a bus subscription: a few kilobytes.
const MAX_HELD: usize = 10_000;

pub struct RunningCalls {
    cancels: Mutex<HashMap<(SessionId, RequestId), CancellationToken>>,
    replies: Mutex<HashMap<String, (SessionId, oneshot::Sender<Answer>)>>,
    held: Mutex<Held>,
    /// Retries one principal may have held at once (`limits.held_retries_per_principal`).
    held_per_principal: usize,
}

/// The retries held here: how many in all, and by whom (only principals holding one).
#[derive(Default)]
struct Held {
    total: usize,
    by_principal: HashMap<Principal, usize>,
}

/// One held retry's place, here and among its principal's; given back when dropped.
pub struct HeldRetry {
    calls: Arc<RunningCalls>,
    principal: Principal,
}

impl Drop for HeldRetry {
    fn drop(&mut self) {
        let mut held = lock(&self.calls.held);
        held.total = held.total.saturating_sub(1);
        if let Some(count) = held.by_principal.get_mut(&self.principal) {
            *count -= 1;
            if *count == 0 {
                held.by_principal.remove(&self.principal);
            }
        }
    }
}

/// A running call; unregistered when dropped.
pub struct RunningCall {
    calls: Arc<RunningCalls>,
    key: (SessionId, RequestId),
    pub cancelled: CancellationToken,
}

impl Drop for RunningCall {
    fn drop(&mut self) {
        lock(&self.calls.cancels).remove(&self.key);
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl RunningCalls {
    /// Nothing running yet; one principal may have `held_per_principal` retries held at once.
    pub fn new(held_per_principal: usize) -> Self {
        Self {
            cancels: Mutex::default(),
            replies: Mutex::default(),
            held: Mutex::default(),
            held_per_principal,
        }
    }

    /// A place for one more held retry of `principal`, kept while it lives; `None` when the
    /// replica's places, or the principal's, are all taken.
    pub fn hold(self: &Arc<Self>, principal: &Principal) -> Option<HeldRetry> {
        let mut held = lock(&self.held);
        if held.total >= MAX_HELD {
            return None;
        }
        let count = held.by_principal.entry(principal.clone()).or_default();
        if *count >= self.held_per_principal {
            tracing::debug!(%principal, "a retry is answered at once: the user has the most retries held");
            return None;
        }
        *count += 1;
        held.total += 1;
        Some(HeldRetry {
            calls: self.clone(),
            principal: principal.clone(),
        })
    }

    /// How many retries are held here now.
    pub fn held_now(&self) -> usize {
        lock(&self.held).total
    }

    /// Registers the call `id` of `session`, which a client may cancel from now on.
    pub fn start(self: &Arc<Self>, session: &SessionId, id: &RequestId) -> RunningCall {
        let key = (session.clone(), id.clone());
        let cancelled = CancellationToken::new();
        lock(&self.cancels).insert(key.clone(), cancelled.clone());
        RunningCall {
            calls: self.clone(),
            key,
            cancelled,
        }
    }

    /// The client cancelled its request `id`; false when no such call runs here.
    fn cancel(&self, session: &SessionId, id: RequestId) -> bool {
        match lock(&self.cancels).get(&(session.clone(), id)) {
            Some(token) => {
                token.cancel();
                true
            }
            None => false,
        }
    }

    /// The client answered a relayed request; false when nobody here waits for that answer.
    fn answer(&self, session: &SessionId, id: &str, answer: Answer) -> bool {
        let mut replies = lock(&self.replies);
        match replies.get(id) {
            Some((owner, _)) if owner == session => {}
            _ => return false,
        }
        match replies.remove(id) {
            Some((_, sender)) => sender.send(answer).is_ok(),
            None => false,
        }
    }
}

/// A client's `notifications/cancelled`: the call stops here, or on whichever replica runs it.
pub async fn cancel(state: &AppState, calls: &RunningCalls, session: &SessionId, params: Option<&Value>) {
    let Some(id) = params.and_then(|p| p.get("requestId")) else {
        return;
    };
    let Some(request) = RequestId::from_json(id) else {
        return;
    };
    if calls.cancel(session, request) {
        return;
    }
    let notice = Notice::CallCancelled(session.clone(), id.to_string());
    if let Err(error) = state.bus.tell_replicas(&notice).await {
        tracing::warn!(%error, "could not pass a cancellation on to the other replicas");
    }
}

/// Applies what other replicas received for the calls running here, until shutdown.
pub async fn listen(calls: Arc<RunningCalls>, bus: Arc<Bus>, shutdown: CancellationToken) {
    let mut notices = bus.subscribe_calls();
    loop {
        let notice = tokio::select! {
            () = shutdown.cancelled() => return,
            notice = notices.recv() => notice,
        };
        match notice {
            Ok(Notice::CallCancelled(session, id)) => {
                if let Some(id) = serde_json::from_str(&id).ok().as_ref().and_then(RequestId::from_json) {
                    calls.cancel(&session, id);
                }
            }
            Ok(Notice::RelayAnswered(session, relay, answer)) => {
                let answer: Value = serde_json::from_str(&answer).unwrap_or(Value::Null);
                let answer = match (answer.get("result"), answer.get("error")) {
                    (Some(result), _) => Ok(result.clone()),
                    (None, error) => Err(error.cloned().unwrap_or(Value::Null)),
                };
                calls.answer(&session, &relay, answer);
            }
            Ok(_) => {}
            Err(tokio::sync::broadcast::error::RecvError::Lagged(missed)) => {
                tracing::warn!(missed, "missed cancellations or relayed answers from other replicas");
            }
            Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
        }
    }
}

/// A call's own stream, as the tools see it.
pub struct StreamChannel {
    pub outbox: Outbox,
    pub session: SessionId,
    pub calls: Arc<RunningCalls>,
    /// Whether requests may go to the client on it (2025-11-25); a 2026-07-28 client's stream
    /// carries notifications only, so a tool's request gets an error at once.
    pub requests: bool,
}

/// Forgets a relayed request nobody will answer any more.
struct Pending<'a> {
    calls: &'a RunningCalls,
    id: String,
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        lock(&self.calls.replies).remove(&self.id);
    }
}

#[async_trait]
impl CallStream for StreamChannel {
    async fn notify(&self, method: &str, params: Value) -> bool {
        self.outbox.send(jsonrpc::notification(method, params)).await
    }

    async fn request(&self, method: &str, params: Value) -> Option<Result<Value, Value>> {
        if !self.requests {
            return Some(Err(serde_json::json!({
                "code": jsonrpc::METHOD_NOT_FOUND,
                "message": format!("{method} cannot be sent to a 2026-07-28 client during a call"),
            })));
        }
        let id = format!("{RELAYED_ID_PREFIX}{}", Uuid::now_v7().simple());
        let (sender, receiver) = oneshot::channel();
        lock(&self.calls.replies).insert(id.clone(), (self.session.clone(), sender));
        let _pending = Pending {
            calls: &self.calls,
            id: id.clone(),
        };
        if !self.outbox.send(jsonrpc::request(&id, method, params)).await {
            return None;
        }
        tokio::select! {
            answer = receiver => answer.ok(),
            () = self.outbox.closed() => None,
        }
    }

    async fn gone(&self) {
        self.outbox.closed().await;
    }
}

/// A client's answer to one of our `elicitation/create` requests, sent to the call that waits for
/// it wherever it runs; or to a request a call relayed from an upstream, to that call. Answers
/// to anything else, or for another session, are ignored.
pub async fn route_answer(
    state: &AppState,
    calls: &RunningCalls,
    session: &SessionRecord,
    id: &RequestId,
    answer: Result<Value, Value>,
) {
    let RequestId::String(text) = id else { return };
    if text.starts_with(RELAYED_ID_PREFIX) {
        let wire = match &answer {
            Ok(result) => serde_json::json!({ "result": result }),
            Err(error) => serde_json::json!({ "error": error }),
        };
        if calls.answer(&session.id, text, answer) {
            return;
        }
        // The call waits on another replica, if anywhere.
        let notice = Notice::RelayAnswered(session.id.clone(), text.clone(), wire.to_string());
        match state.bus.tell_replicas(&notice).await {
            Ok(true) => {}
            Ok(false) => {
                tracing::warn!(session = ?session.id, "an answer to a relayed request is too large to pass on to another replica")
            }
            Err(error) => tracing::warn!(%error, "could not pass an answer on to the other replicas"),
        }
        return;
    }
    let result = answer.ok();
    let result = result.as_ref();
    let Some(elicitation) = text
        .strip_prefix(incall::REQUEST_ID_PREFIX)
        .and_then(|rest| rest.parse::<ElicitationId>().ok())
    else {
        return;
    };
    // An error answer means the client could not ask the user: the same as a dismissal.
    let action = match result {
        None => ClientAction::Cancel,
        Some(result) => match result
            .get("action")
            .and_then(Value::as_str)
            .and_then(ClientAction::parse)
        {
            Some(action) => action,
            None => {
                tracing::info!(%elicitation, "ignoring an elicitation answer without a valid action");
                return;
            }
        },
    };
    match state.gate.elicitations().get(&elicitation).await {
        Ok(Some(record)) if record.session_id == session.id => {}
        Ok(_) => {
            tracing::warn!(%elicitation, session = ?session.id, "an elicitation answer from another session was ignored");
            return;
        }
        Err(error) => {
            tracing::error!(%error, "could not load an answered elicitation");
            return;
        }
    }
    if let Err(error) = state.bus.answer(elicitation, action).await {
        tracing::error!(%error, %elicitation, "could not route an elicitation answer");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_principal_holds_at_most_its_share_and_others_keep_theirs() {
        let calls = Arc::new(RunningCalls::new(2));
        let alice = Principal::parse("alice").expect("principal");
        let bob = Principal::parse("bob").expect("principal");
        let first = calls.hold(&alice).expect("a first place");
        let second = calls.hold(&alice).expect("a second place");
        assert!(calls.hold(&alice).is_none(), "alice's third retry is answered at once");
        let bobs = calls.hold(&bob).expect("bob still has his");
        assert_eq!(calls.held_now(), 3);
        drop(first);
        let again = calls.hold(&alice).expect("a place given back is alice's again");
        drop((second, again, bobs));
        assert_eq!(calls.held_now(), 0);
        assert!(lock(&calls.held).by_principal.is_empty(), "nobody holding, nobody kept");
    }

    #[test]
    fn the_replica_holds_at_most_its_own_bound() {
        let calls = Arc::new(RunningCalls::new(MAX_HELD));
        let alice = Principal::parse("alice").expect("principal");
        let places: Vec<HeldRetry> = (0..MAX_HELD).map_while(|_| calls.hold(&alice)).collect();
        assert_eq!(places.len(), MAX_HELD);
        let bob = Principal::parse("bob").expect("principal");
        assert!(calls.hold(&bob).is_none());
        drop(places);
        assert!(calls.hold(&bob).is_some());
    }
}
