//! The standalone SSE stream (GET /mcp), read from the session's persisted event log. Each event's
//! SSE `id` is its sequence number, so `Last-Event-ID` resumes exactly where the client was.
//! `follow` is the reading itself, which `stdio` also uses to write the session's events to stdout.
//!
//! A stream first replays what the client asked to see again (after `Last-Event-ID`, up to the
//! delivered mark), then delivers new events. New events are claimed in the database before they
//! are written, so when a session has several streams, on any replicas, each event goes out on one.
//! A stream that resumes with `Last-Event-ID` replaces the session's older streams: they end
//! without claiming anything more, since a client that resumes has stopped reading them.
//!
//! A read that finds no pool connection in time (every connection busy in a reconnect storm, or
//! the database away) does not end the stream: it keeps its place and reads again after a pause
//! that doubles, with jitter, up to a few seconds. Such a read ran no statement after its last
//! success, so it claimed nothing it did not return. Other database errors end the stream with a
//! retry hint, as before: a connection cut mid-statement may have claimed events, which the
//! client's resume replays. So only the session's end, a resumed stream, shutdown or such an
//! error ends a stream.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use chrono::Utc;
use futures::{Stream, StreamExt};
use serde_json::Value;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::PRIMING_SINCE;
use super::tool_call::supports_url_elicitation;
use crate::domain::SessionId;
use crate::events::StreamSlot;
use crate::jsonrpc::ELICITATION_COMPLETE;
use crate::metrics::{Metrics, OpenStream};
use crate::state::AppState;
use crate::store::{SessionRecord, Store, StoreError, StoredEvent, TakenEvents};

/// Events read from the log per query.
const BATCH: i64 = 100;
/// The pause after a read found no pool connection in time; it doubles after each failure in a
/// row, up to `READ_RETRY_MAX`.
const READ_RETRY_MIN: Duration = Duration::from_millis(100);
const READ_RETRY_MAX: Duration = Duration::from_secs(5);

/// What a session's log gives the stream that follows it, whatever carries it (an SSE stream
/// here, stdout in `stdio`).
pub(super) enum Delivered {
    /// The log's event `seq`.
    Message { seq: i64, message: Value },
    /// The stream ends after a failure; the client may follow again after this long, from the
    /// last `seq` it got.
    Retry(Duration),
}

/// Opens the stream: `resume_after` is the client's `Last-Event-ID`; `slot` is its place among
/// the session's streams on this replica, held until the stream ends or a resumed one replaces it.
pub async fn open(
    state: &AppState,
    session: &SessionRecord,
    resume_after: Option<i64>,
    slot: StreamSlot,
) -> Result<Response, StoreError> {
    let (cursor, delivered) = follow(state, session, resume_after, slot).await?;
    // A priming event (an id, empty data) tells the client where to resume if this stream drops.
    let priming = session
        .protocol_version
        .since(PRIMING_SINCE)
        .then(|| Event::default().id(cursor.to_string()).data(""));
    let events = futures::stream::iter(priming)
        .chain(delivered.map(|delivered| {
            match delivered {
                Delivered::Message { seq, message } => Event::default()
                    .event("message")
                    .id(seq.to_string())
                    .data(message.to_string()),
                Delivered::Retry(retry) => Event::default().retry(retry),
            }
        }))
        .map(Ok::<_, Infallible>);
    let keep_alive = KeepAlive::new().interval(state.config.server.sse_keep_alive);
    Ok(Sse::new(events).keep_alive(keep_alive).into_response())
}

/// Follows the session's log from `resume_after` (else from its delivered mark) while `slot`
/// holds: returns where it starts and what it delivers, which ends when the session does, at
/// shutdown (with a retry hint) or when a resumed stream replaces this one. A session that did
/// not declare URL-mode elicitation is sent no `notifications/elicitation/complete`: the event
/// stays in its log (it wakes the calls waiting in the session) and is passed over.
pub(super) async fn follow(
    state: &AppState,
    session: &SessionRecord,
    resume_after: Option<i64>,
    slot: StreamSlot,
) -> Result<(i64, impl Stream<Item = Delivered> + use<>), StoreError> {
    let completions = supports_url_elicitation(session);
    let session = &session.id;
    // Subscribe before the first read, so an event appended in between still wakes the stream.
    let wake = state.bus.subscribe(session);
    let delivered = state.store.delivered_seq(session).await?.unwrap_or(0);
    let cursor = resume_after.unwrap_or(delivered);
    let reader = Reader {
        store: state.store.clone(),
        session: session.clone(),
        completions,
        wake,
        cursor,
        replay_until: delivered,
        pending: VecDeque::new(),
        shutdown: state.shutdown.clone(),
        retry: state.config.server.sse_retry,
        closing: false,
        up_to_date: false,
        read_retry: READ_RETRY_MIN,
        slot,
        _open: state.metrics.stream_opened(),
        metrics: state.metrics.clone(),
    };
    Ok((cursor, futures::stream::unfold(reader, Reader::next)))
}

struct Reader {
    store: Arc<dyn Store>,
    session: SessionId,
    /// Whether the session's client takes `notifications/elicitation/complete`.
    completions: bool,
    wake: watch::Receiver<u64>,
    /// The newest event this stream has written (or skipped because another stream took it).
    cursor: i64,
    /// Events up to here were delivered before this stream opened and are replayed unclaimed.
    replay_until: i64,
    pending: VecDeque<Delivered>,
    shutdown: CancellationToken,
    retry: Duration,
    closing: bool,
    /// The last read found the log read to its end: wait for a wake-up (once `pending` is
    /// written) before reading again.
    up_to_date: bool,
    /// The pause before the next read if this one finds no pool connection in time.
    read_retry: Duration,
    slot: StreamSlot,
    /// Counts the stream as open while it lives.
    _open: OpenStream,
    metrics: Arc<Metrics>,
}

/// What one read of the session's log found.
enum Read {
    /// The log moved and may hold more (a full batch, or events another stream claimed): read
    /// again before waiting.
    Progress,
    /// The log is read to its end (nothing new, or a batch that was not full): wait for a
    /// wake-up once the events found are written.
    UpToDate,
    /// The session ended: close the stream.
    SessionGone,
}

impl Reader {
    async fn next(mut self) -> Option<(Delivered, Self)> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                return Some((event, self));
            }
            // Replaced: claim nothing more, and end without a retry hint.
            if self.closing || self.slot.is_ended() {
                return None;
            }
            if self.up_to_date {
                tokio::select! {
                    changed = self.wake.changed() => if changed.is_err() { self.close_with_retry() },
                    () = self.shutdown.cancelled() => self.close_with_retry(),
                    () = self.slot.ended() => return None,
                }
                self.up_to_date = false;
                continue;
            }
            self.wake.borrow_and_update();
            let read = LogRead {
                store: self.store.clone(),
                session: self.session.clone(),
                cursor: self.cursor,
                replay_until: self.replay_until,
                replaced: self.slot.replaced(),
            };
            // In a task of its own, so a client hanging up cannot cancel the read halfway.
            match tokio::spawn(read.run()).await {
                // Replaced while reading: the resumed stream writes from here on.
                Ok(Ok(_)) if self.slot.is_ended() => return None,
                Ok(Ok(found)) => {
                    self.read_retry = READ_RETRY_MIN;
                    for event in found.events {
                        if event.message["method"] == ELICITATION_COMPLETE {
                            if !self.completions {
                                continue;
                            }
                            if !found.replayed {
                                let waited = (Utc::now() - event.created_at).to_std().unwrap_or_default();
                                self.metrics.notification_delivered_after(waited);
                            }
                        }
                        self.push(event.seq, &event.message);
                    }
                    self.cursor = found.cursor;
                    match found.read {
                        Read::Progress => {}
                        Read::UpToDate => self.up_to_date = true,
                        Read::SessionGone => return None,
                    }
                }
                Ok(Err(error)) if error.is_pool_timeout() => {
                    let pause = self.next_read_retry();
                    tracing::debug!(%error, session = ?self.session, retry_in = ?pause, "no database connection to read the event log; reading again");
                    tokio::select! {
                        () = tokio::time::sleep(pause) => {}
                        () = self.shutdown.cancelled() => self.close_with_retry(),
                        () = self.slot.ended() => return None,
                    }
                }
                Ok(Err(error)) => {
                    // The client reconnects with Last-Event-ID and misses nothing.
                    tracing::warn!(%error, session = ?self.session, "event stream closed after a database error");
                    self.close_with_retry();
                }
                Err(error) => {
                    tracing::error!(%error, session = ?self.session, "reading the event log failed");
                    self.close_with_retry();
                }
            }
        }
    }

    /// A pause between half and all of the current retry delay (so streams that failed together
    /// do not read again together), and the delay doubled for the next failure in a row.
    fn next_read_retry(&mut self) -> Duration {
        let delay = self.read_retry;
        self.read_retry = (delay * 2).min(READ_RETRY_MAX);
        delay.mul_f64(rand::random_range(0.5..=1.0))
    }

    fn close_with_retry(&mut self) {
        self.pending.push_back(Delivered::Retry(self.retry));
        self.closing = true;
    }

    fn push(&mut self, seq: i64, message: &Value) {
        self.pending.push_back(Delivered::Message {
            seq,
            message: message.clone(),
        });
        self.cursor = seq;
    }
}

/// One read of the session's log. It runs in a task of its own: sqlx closes a connection whose
/// query (or the ping before handing it out) is cancelled, so a read dropped halfway by a client
/// hanging up would cost a new connection, and over TLS opening one takes a slow handshake (see
/// `store::postgres`). Events it claims but nobody writes are replayed on resume, like any event
/// a dropped stream had claimed.
struct LogRead {
    store: Arc<dyn Store>,
    session: SessionId,
    cursor: i64,
    replay_until: i64,
    /// Once cancelled, the read claims nothing more: the events are the resumed stream's.
    replaced: CancellationToken,
}

/// What a read found: the events to write, in order, and where the stream's cursor is after them.
struct Found {
    read: Read,
    events: Vec<StoredEvent>,
    /// The events were delivered before: the client asked to see them again.
    replayed: bool,
    cursor: i64,
}

impl LogRead {
    async fn run(self) -> Result<Found, StoreError> {
        let found = |read, events: Vec<StoredEvent>, cursor| {
            Ok(Found {
                read,
                events,
                replayed: false,
                cursor,
            })
        };
        if self.cursor < self.replay_until {
            let Some(mut events) = self.store.events_after(&self.session, self.cursor, BATCH).await? else {
                return found(Read::SessionGone, Vec::new(), self.cursor);
            };
            let more = events.len() as i64 == BATCH;
            events.retain(|e| e.seq <= self.replay_until);
            let mut cursor = events.last().map_or(self.cursor, |e| e.seq);
            if !more {
                cursor = cursor.max(self.replay_until);
            }
            return Ok(Found {
                read: Read::Progress,
                events,
                replayed: true,
                cursor,
            });
        }
        if self.replaced.is_cancelled() {
            // Claim nothing: the read only tells whether the session still exists.
            let read = match self.store.events_after(&self.session, self.cursor, 1).await? {
                Some(_) => Read::UpToDate,
                None => Read::SessionGone,
            };
            return found(read, Vec::new(), self.cursor);
        }
        // Usually this stream's cursor is the delivered mark, and the read's own claim settles it.
        let Some(TakenEvents { events, claimed }) =
            self.store.take_events_after(&self.session, self.cursor, BATCH).await?
        else {
            return found(Read::SessionGone, Vec::new(), self.cursor);
        };
        let Some(last) = events.last().map(|e| e.seq) else {
            // Nothing new: woken because the session changed (it still exists), or by an event
            // another read already took.
            return found(Read::UpToDate, Vec::new(), self.cursor);
        };
        // A batch that was not full held everything in the log when it was read, and whatever
        // was appended since has bumped the wake-up this read began by taking: no need to read
        // again before waiting.
        let moved = if events.len() as i64 == BATCH {
            Read::Progress
        } else {
            Read::UpToDate
        };
        if claimed {
            return found(moved, events, last);
        }
        let Some(delivered) = self.store.delivered_seq(&self.session).await? else {
            return found(Read::SessionGone, Vec::new(), self.cursor);
        };
        if delivered < self.cursor && !self.replaced.is_cancelled() {
            // The client resumed past the mark: claim from the mark, write what it has not seen.
            if self.store.claim_delivery(&self.session, delivered, last).await? {
                return found(Read::Progress, events, last);
            }
            found(Read::Progress, Vec::new(), self.cursor)
        } else {
            // Another stream claimed events up to the mark: they are that stream's to write.
            found(Read::Progress, Vec::new(), delivered)
        }
    }
}
