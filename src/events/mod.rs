//! The bus. Events are persisted in the session's log first; the bus only wakes the streams that
//! must read them. On PostgreSQL every replica LISTENs, so an event appended through one replica
//! wakes the stream held by another within milliseconds; on SQLite the bus is in process.
//!
//! Wake-ups carry no payload: a woken stream reads the log after its own cursor, so a lost or
//! duplicated wake-up can delay an event but never skip or repeat one. When the LISTEN connection
//! drops, every stream is woken once the new connection is listening, which covers the gap.
//!
//! Changed upstream tool catalogues are announced the same way, to whoever subscribed
//! (`Bus::subscribe_catalogues`), by upstream id; after a gap, by [`EVERY_UPSTREAM`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use serde_json::Value;
use sqlx::postgres::PgListener;
use tokio::sync::{broadcast, mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::domain::{ElicitationId, Principal, SessionId, StreamId};
use crate::metrics::Metrics;
use crate::store::{ClientAction, Notice};
use crate::store::{ConnectionCache, NOTIFY_CHANNEL, SessionCache, Store, StoreError};

/// What catalogue subscribers receive when any catalogue may have changed unannounced (this
/// replica's LISTEN connection was re-opened): reload every one. No upstream id looks like it.
pub const EVERY_UPSTREAM: &str = "*";

/// Changed catalogues queued per subscriber; one that falls further behind reloads them all.
const CATALOGUE_QUEUE: usize = 64;
/// Cancellations, relayed answers and parked calls' answers and outcomes from other replicas
/// queued for this one's calls; a listener further behind loses the oldest (their calls end by
/// their own timeouts).
const CALL_NOTICE_QUEUE: usize = 256;
/// The largest NOTIFY payload PostgreSQL takes is 8000 bytes.
const MAX_NOTICE_BYTES: usize = 7900;

/// Local fan-out: one watch channel per session that has a stream open on this replica, and the
/// in-call elicitations waiting here for their client's answer. Private: callers say what they
/// mean through `Bus`.
struct Hub {
    wakers: Mutex<HashMap<SessionId, watch::Sender<u64>>>,
    /// Two calls of one session may wait on the same (reused) elicitation: each gets the answer.
    answers: Mutex<HashMap<ElicitationId, Vec<mpsc::Sender<ClientAction>>>>,
    /// Open GET streams per session on this replica (in-call waits also subscribe to `wakers`,
    /// so their receivers do not count streams).
    streams: Mutex<HashMap<SessionId, Vec<OpenStream>>>,
    cache: Arc<SessionCache>,
    connections: Arc<ConnectionCache>,
    /// The ids of upstreams whose stored catalogue changed, to every catalogue subscriber.
    catalogues: broadcast::Sender<String>,
    /// Cancellations, relayed answers and parked calls' notices from other replicas, for calls
    /// that may be here.
    calls: broadcast::Sender<Notice>,
    /// Whether this replica currently receives other replicas' notices (always true in process).
    connected: AtomicBool,
    /// False while the LISTEN connection cannot be opened again: the database is down.
    reachable: AtomicBool,
}

impl Hub {
    fn new(cache: Arc<SessionCache>, connections: Arc<ConnectionCache>, in_process: bool) -> Self {
        Self {
            wakers: Mutex::new(HashMap::new()),
            answers: Mutex::new(HashMap::new()),
            streams: Mutex::new(HashMap::new()),
            cache,
            connections,
            catalogues: broadcast::channel(CATALOGUE_QUEUE).0,
            calls: broadcast::channel(CALL_NOTICE_QUEUE).0,
            connected: AtomicBool::new(in_process),
            reachable: AtomicBool::new(true),
        }
    }

    fn subscribe(&self, session: &SessionId) -> watch::Receiver<u64> {
        let mut wakers = self.lock();
        wakers.retain(|_, sender| sender.receiver_count() > 0);
        wakers
            .entry(session.clone())
            .or_insert_with(|| watch::channel(0).0)
            .subscribe()
    }

    fn notify(&self, notice: &Notice) {
        let session = match notice {
            Notice::Appended(session) => session,
            Notice::Changed(session) => {
                self.cache.invalidate(session);
                session
            }
            Notice::ConnectionsChanged(principal) => {
                self.connections.invalidate(principal);
                return;
            }
            Notice::Answered(elicitation, action) => {
                let answers = self.answers.lock().unwrap_or_else(PoisonError::into_inner);
                for waiter in answers.get(elicitation).into_iter().flatten() {
                    // A full queue means the waiter has answers it has not read yet; more add nothing.
                    let _ = waiter.try_send(*action);
                }
                return;
            }
            Notice::Resumed(session, stream) => {
                self.resumed_elsewhere(session, *stream);
                return;
            }
            Notice::CatalogueChanged(upstream) => {
                self.catalogue_changed(upstream);
                return;
            }
            Notice::CallCancelled(..)
            | Notice::RelayAnswered(..)
            | Notice::ParkedResume(..)
            | Notice::ParkedOutcome(..) => {
                // An error only says that nobody listens.
                let _ = self.calls.send(notice.clone());
                return;
            }
        };
        if let Some(sender) = self.lock().get(session) {
            sender.send_modify(|generation| *generation += 1);
        }
    }

    fn await_answer(self: &Arc<Self>, elicitation: ElicitationId) -> AnswerReceiver {
        let (sender, receiver) = mpsc::channel(4);
        self.answers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(elicitation)
            .or_default()
            .push(sender);
        AnswerReceiver {
            hub: self.clone(),
            elicitation,
            receiver,
        }
    }

    fn catalogue_changed(&self, upstream: &str) {
        // An error only says that nobody subscribed.
        let _ = self.catalogues.send(upstream.to_owned());
    }

    /// After notices may have been missed: forget cached sessions, wake every stream and have
    /// every catalogue reloaded. A resumed stream whose own notice was lost is older than every
    /// notice still to come.
    fn resync(&self) {
        self.cache.clear();
        self.connections.clear();
        self.catalogue_changed(EVERY_UPSTREAM);
        for sender in self.lock().values() {
            sender.send_modify(|generation| *generation += 1);
        }
        for open in self.open_streams().values_mut().flatten() {
            open.armed = true;
        }
    }

    /// A place for one more stream of `session`, or `None` when `limit` are open here. A resumed
    /// stream first ends the session's streams here, and is not ended by other replicas' resumes
    /// until its own notice has come back (`resumed_elsewhere`), since those were sent earlier.
    fn claim_stream(self: &Arc<Self>, session: &SessionId, limit: usize, resumed: bool) -> Option<StreamSlot> {
        let mut streams = self.open_streams();
        let open = streams.entry(session.clone()).or_default();
        if resumed {
            for older in open.drain(..) {
                older.ended.cancel();
            }
        }
        if open.len() >= limit {
            return None;
        }
        let (id, ended) = (StreamId::generate(), CancellationToken::new());
        open.push(OpenStream {
            id,
            ended: ended.clone(),
            armed: !resumed,
        });
        Some(StreamSlot {
            hub: self.clone(),
            session: session.clone(),
            id,
            ended,
        })
    }

    /// The bus carried a resume of `session` on `stream`. When the stream is here, this is its
    /// own notice come back: from now on a resume elsewhere is newer. Otherwise the session's
    /// streams here end, except resumed ones still waiting for their own notice (those resumed
    /// concurrently, and their notice comes later, so they win).
    fn resumed_elsewhere(&self, session: &SessionId, stream: StreamId) {
        let mut streams = self.open_streams();
        let Some(open) = streams.get_mut(session) else {
            return;
        };
        if let Some(own) = open.iter_mut().find(|s| s.id == stream) {
            own.armed = true;
            return;
        }
        open.retain(|s| {
            if s.armed {
                s.ended.cancel();
            }
            !s.armed
        });
        if open.is_empty() {
            streams.remove(session);
        }
    }

    fn open_streams(&self) -> MutexGuard<'_, HashMap<SessionId, Vec<OpenStream>>> {
        self.streams.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn sessions_with_streams(&self) -> Vec<SessionId> {
        self.lock()
            .iter()
            .filter(|(_, s)| s.receiver_count() > 0)
            .map(|(id, _)| id.clone())
            .collect()
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<SessionId, watch::Sender<u64>>> {
        self.wakers.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The answers to one in-call elicitation; waiting ends when it is dropped.
pub struct AnswerReceiver {
    hub: Arc<Hub>,
    elicitation: ElicitationId,
    receiver: mpsc::Receiver<ClientAction>,
}

impl AnswerReceiver {
    pub async fn recv(&mut self) -> Option<ClientAction> {
        self.receiver.recv().await
    }
}

impl Drop for AnswerReceiver {
    fn drop(&mut self) {
        // Closing first marks this waiter's sender closed, so only the others stay.
        self.receiver.close();
        let mut answers = self.hub.answers.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(waiters) = answers.get_mut(&self.elicitation) {
            waiters.retain(|sender| !sender.is_closed());
            if waiters.is_empty() {
                answers.remove(&self.elicitation);
            }
        }
    }
}

/// The hub's record of one open GET stream.
struct OpenStream {
    id: StreamId,
    /// Cancelled when a resumed stream replaces this one.
    ended: CancellationToken,
    /// Whether another replica's resume ends it (see `Hub::claim_stream`).
    armed: bool,
}

/// One open GET stream of a session on this replica; dropping it frees its place. A stream
/// that a resumed one replaced has given up its place already and must end (`ended`).
pub struct StreamSlot {
    hub: Arc<Hub>,
    session: SessionId,
    id: StreamId,
    ended: CancellationToken,
}

impl StreamSlot {
    /// Whether a resumed stream replaced this one.
    pub fn is_ended(&self) -> bool {
        self.ended.is_cancelled()
    }

    /// Completes when a resumed stream replaces this one.
    pub async fn ended(&self) {
        self.ended.cancelled().await;
    }

    /// Cancelled when a resumed stream replaces this one, for work done away from the slot.
    pub fn replaced(&self) -> CancellationToken {
        self.ended.clone()
    }
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        let mut streams = self.hub.open_streams();
        if let Some(open) = streams.get_mut(&self.session) {
            open.retain(|s| s.id != self.id);
            if open.is_empty() {
                streams.remove(&self.session);
            }
        }
    }
}

/// What the rest of gatehouse says to the bus: append an event, announce a change, wait for a
/// session's wake-ups or a client's answer.
pub struct Bus {
    store: Arc<dyn Store>,
    hub: Arc<Hub>,
}

impl Bus {
    /// `in_process`: SQLite, where this replica is the only one and needs no LISTEN connection.
    pub fn new(
        store: Arc<dyn Store>,
        sessions: Arc<SessionCache>,
        connections: Arc<ConnectionCache>,
        in_process: bool,
    ) -> Self {
        Self {
            store,
            hub: Arc::new(Hub::new(sessions, connections, in_process)),
        }
    }

    /// Persists `message` in the session's log and wakes its streams. `None`: the session is gone.
    pub async fn publish(&self, session: &SessionId, message: &Value) -> Result<Option<i64>, StoreError> {
        let seq = self.store.append_event(session, message).await?;
        if seq.is_some() {
            self.appended(session);
        }
        Ok(seq)
    }

    /// A store transaction appended an event to the session's log (an elicitation's completion
    /// notification): wake the streams here at once; other replicas learn of it from the store's
    /// NOTIFY.
    pub fn appended(&self, session: &SessionId) {
        self.hub.notify(&Notice::Appended(session.clone()));
    }

    /// The session changed or ended here: drop cached copies (the PostgreSQL store also NOTIFYs
    /// the other replicas).
    pub fn session_changed(&self, session: &SessionId) {
        self.hub.notify(&Notice::Changed(session.clone()));
    }

    /// The principal's connections changed here: drop cached copies (other replicas learn of it
    /// from the store's NOTIFY).
    pub fn connections_changed(&self, principal: &Principal) {
        self.hub.notify(&Notice::ConnectionsChanged(principal.clone()));
    }

    /// An upstream's stored catalogue changed here (`save_catalogue` returned true): tell the
    /// catalogue subscribers here (the PostgreSQL store also NOTIFYs the other replicas, and this
    /// one again).
    pub fn catalogue_changed(&self, upstream: &str) {
        self.hub.notify(&Notice::CatalogueChanged(upstream.to_owned()));
    }

    /// The ids of upstreams whose stored catalogue changed, on any replica, from now on: reload
    /// each from the store. [`EVERY_UPSTREAM`] means any may have changed unannounced (the bus
    /// reconnected): reload them all. So does [`broadcast::error::RecvError::Lagged`], which a
    /// receiver more than 64 changes behind gets instead of the ones it missed. A change may be
    /// received twice (on PostgreSQL, the local announcement and its NOTIFY); reloading is
    /// idempotent.
    pub fn subscribe_catalogues(&self) -> broadcast::Receiver<String> {
        self.hub.catalogues.subscribe()
    }

    /// Tells the other replicas of a cancellation or a relayed answer that no call here took, or
    /// of answers for (or the outcome of) a call parked on one replica and retried on another.
    /// False when the notice is too large for a NOTIFY (an answer of several kilobytes).
    pub async fn tell_replicas(&self, notice: &Notice) -> Result<bool, StoreError> {
        let payload = notice.encode();
        if payload.len() > MAX_NOTICE_BYTES {
            return Ok(false);
        }
        self.store.broadcast(&payload).await?;
        Ok(true)
    }

    /// Cancellations, relayed answers and parked calls' answers and outcomes that other replicas
    /// sent, for the calls here.
    pub fn subscribe_calls(&self) -> broadcast::Receiver<Notice> {
        self.hub.calls.subscribe()
    }

    /// A receiver that changes whenever the session's log or record may have changed.
    pub fn subscribe(&self, session: &SessionId) -> watch::Receiver<u64> {
        self.hub.subscribe(session)
    }

    /// A place for one more GET stream of `session` on this replica, or `None` when `limit`
    /// streams are open here already.
    pub fn claim_stream(&self, session: &SessionId, limit: usize) -> Option<StreamSlot> {
        self.hub.claim_stream(session, limit, false)
    }

    /// The place of a stream that resumes the session's events (`Last-Event-ID`): the client has
    /// given up its older streams, so they end, here at once and on other replicas when the
    /// notice reaches them, and new events go to this one. `None` only when `limit` is zero.
    pub async fn resume_stream(&self, session: &SessionId, limit: usize) -> Result<Option<StreamSlot>, StoreError> {
        let Some(slot) = self.hub.claim_stream(session, limit, true) else {
            return Ok(None);
        };
        self.store
            .broadcast(&Notice::Resumed(session.clone(), slot.id).encode())
            .await?;
        Ok(Some(slot))
    }

    /// Waits here for the client's answer to the `elicitation/create` for `elicitation`, until
    /// the returned receiver is dropped.
    pub fn await_answer(&self, elicitation: ElicitationId) -> AnswerReceiver {
        self.hub.await_answer(elicitation)
    }

    /// Routes a client's answer to the call waiting for it, on whichever replica that is. A
    /// waiter here may also get it again through the NOTIFY; a repeated answer changes nothing.
    pub async fn answer(&self, elicitation: ElicitationId, action: ClientAction) -> Result<(), StoreError> {
        let notice = Notice::Answered(elicitation, action);
        self.store.broadcast(&notice.encode()).await?;
        self.hub.notify(&notice);
        Ok(())
    }

    /// Sessions with a stream open here, which count as in use.
    pub fn sessions_with_streams(&self) -> Vec<SessionId> {
        self.hub.sessions_with_streams()
    }

    /// Whether this replica currently receives other replicas' notices (always true in process).
    pub fn is_connected(&self) -> bool {
        self.hub.connected.load(Ordering::Relaxed)
    }

    /// False from when this replica's lost LISTEN connection could not be opened again until it
    /// is listening again: the database is down, and requests are refused at once instead of
    /// each waiting for the pool's acquire timeout. A LISTEN connection that is merely cut (the
    /// database still answering) does not count. Always true in process.
    pub fn is_database_reachable(&self) -> bool {
        self.hub.reachable.load(Ordering::Relaxed)
    }

    /// Whether `error` is an overload rather than an outage: no pool connection came free in
    /// time while this replica's LISTEN connection is up, so the database answers and every
    /// connection is busy with other work. A database that goes away cuts the LISTEN connection
    /// first, and its pool timeouts count as the outage they are.
    pub fn is_overloaded(&self, error: &StoreError) -> bool {
        error.is_pool_timeout() && self.is_connected() && self.is_database_reachable()
    }
}

const RECONNECT_DELAY_MIN: Duration = Duration::from_millis(100);
/// Small: while the database is down, requests are refused until the bus is listening again.
const RECONNECT_DELAY_MAX: Duration = Duration::from_secs(1);

/// Why a LISTEN connection's life ended.
enum Lost {
    /// It could not be opened: the database refuses or does not answer.
    Opening(sqlx::Error),
    /// It was open and failed.
    Dropped(sqlx::Error),
}

/// Listens for other replicas' notices until `shutdown`, reconnecting with backoff; the metrics
/// count each time it listens again after a loss.
pub async fn listen_postgres(pool: sqlx::PgPool, bus: Arc<Bus>, metrics: Arc<Metrics>, shutdown: CancellationToken) {
    let hub = &bus.hub;
    let mut delay = RECONNECT_DELAY_MIN;
    let mut lost = false;
    loop {
        let listening = || {
            if lost {
                metrics.bus_reconnected();
            }
        };
        let ended = listen_once(&pool, hub, &shutdown, listening).await;
        lost = true;
        match ended {
            Ok(()) => return,
            Err(Lost::Dropped(error)) => {
                hub.connected.store(false, Ordering::Relaxed);
                tracing::warn!(%error, retry_in = ?delay, "bus connection lost; reconnecting");
            }
            // Every connection handed out to requests is no outage: the pool had no room to try
            // the database. With room left, a timeout means the database did not answer.
            Err(Lost::Opening(error @ sqlx::Error::PoolTimedOut))
                if pool.size() >= pool.options().get_max_connections() =>
            {
                hub.connected.store(false, Ordering::Relaxed);
                tracing::warn!(%error, retry_in = ?delay, "bus connection lost and the pool is busy; reconnecting");
            }
            Err(Lost::Opening(error)) => {
                hub.connected.store(false, Ordering::Relaxed);
                hub.reachable.store(false, Ordering::Relaxed);
                tracing::warn!(%error, retry_in = ?delay, "database unreachable; refusing requests until the bus reconnects");
            }
        }
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(delay) => {}
        }
        delay = (delay * 2).min(RECONNECT_DELAY_MAX);
    }
}

/// One LISTEN connection's life. Returns Ok at shutdown and Err when the connection cannot be
/// opened or fails.
async fn listen_once(
    pool: &sqlx::PgPool,
    hub: &Hub,
    shutdown: &CancellationToken,
    listening: impl FnOnce(),
) -> Result<(), Lost> {
    let mut listener = PgListener::connect_with(pool).await.map_err(Lost::Opening)?;
    // Failures surface as errors so this function, not sqlx, decides when to resync.
    listener.ignore_pool_close_event(true);
    sqlx::query("SET application_name = 'gatehouse-bus'")
        .execute(&mut listener)
        .await
        .map_err(Lost::Opening)?;
    listener.listen(NOTIFY_CHANNEL).await.map_err(Lost::Opening)?;
    hub.connected.store(true, Ordering::Relaxed);
    hub.reachable.store(true, Ordering::Relaxed);
    listening();
    // Only now, with LISTEN active, can nothing more be missed: catch up on the gap.
    hub.resync();
    tracing::debug!("bus listening");
    loop {
        let notification = tokio::select! {
            () = shutdown.cancelled() => return Ok(()),
            received = listener.try_recv() => received.map_err(Lost::Dropped)?,
        };
        match notification {
            Some(notification) => match Notice::parse(notification.payload()) {
                Some(notice) => hub.notify(&notice),
                None => tracing::warn!(payload = notification.payload(), "ignoring unknown bus notice"),
            },
            None => return Err(Lost::Dropped(sqlx::Error::Protocol("LISTEN connection closed".into()))),
        }
    }
}

#[cfg(test)]
mod tests;
