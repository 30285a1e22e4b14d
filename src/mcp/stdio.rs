//! MCP over stdin/stdout (`gatehouse stdio`): newline-delimited JSON-RPC for a local client that
//! launches gatehouse as a command. One session for the process, started by `initialize`; its
//! requests go to the same `methods` as Streamable HTTP's, its answers and notifications to the
//! same `calls`. What a call sends while it runs (in-call `elicitation/create`, progress) and the
//! session's events (`notifications/elicitation/complete`, read with `stream::follow`) are
//! written as they come. Stdout carries protocol messages only.
//!
//! Bounded: a line longer than `server.max_request_bytes` is answered with an error and skipped
//! without being kept, and at most [`MAX_IN_FLIGHT`] requests run at once (one more is refused).

use std::future::Future;
use std::io;
use std::sync::Arc;

use bytes::BytesMut;
use futures::StreamExt;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinSet;
use tokio_util::codec::{Decoder, LinesCodec, LinesCodecError};

use super::incall::Outbox;
use super::state::McpState;
use super::stream::{self, Delivered};
use super::{calls, methods};
use crate::domain::SessionId;
use crate::identity::Caller;
use crate::jsonrpc::{self, INVALID_REQUEST, Message, PARSE_ERROR, RequestId, RpcError};
use crate::store::SessionRecord;

/// Requests running at once; each may wait for its user in the browser.
pub const MAX_IN_FLIGHT: usize = 64;
/// Messages waiting to be written to stdout; senders wait beyond it.
const OUTGOING: usize = 64;

/// Serves the one session on `input` and `output` until `input` ends, `output` closes or
/// `shutdown` completes. The session ends with it.
pub async fn serve(
    state: &McpState,
    caller: Caller,
    input: impl AsyncRead + Unpin,
    output: impl AsyncWrite + Unpin + Send + 'static,
    shutdown: impl Future<Output = ()>,
) -> io::Result<()> {
    let (out, outgoing) = mpsc::channel(OUTGOING);
    let writer = tokio::spawn(write_lines(output, outgoing));
    let mut connection = Connection {
        state: state.clone(),
        caller,
        out,
        session: None,
        in_flight: Arc::new(Semaphore::new(MAX_IN_FLIGHT)),
        running: JoinSet::new(),
    };
    let mut lines = Lines::new(input, state.config.server.max_request_bytes);
    tokio::pin!(shutdown);
    let read = loop {
        let line = tokio::select! {
            () = &mut shutdown => break Ok(()),
            () = connection.out.closed() => break Ok(()),
            line = lines.next() => line,
        };
        match line {
            Ok(Some(Line::Text(text))) => connection.receive(&text).await,
            Ok(Some(Line::Invalid(error))) => connection.send(jsonrpc::error_response(None, &error)).await,
            Ok(None) => break Ok(()),
            Err(error) => break Err(error),
        }
    };
    connection.close().await;
    let written = match writer.await {
        Ok(written) => written,
        Err(error) => Err(io::Error::other(error)),
    };
    read.and(written)
}

/// Writes each message as one line, flushed at once.
async fn write_lines(mut output: impl AsyncWrite + Unpin, mut outgoing: mpsc::Receiver<Value>) -> io::Result<()> {
    while let Some(message) = outgoing.recv().await {
        let mut line = message.to_string().into_bytes();
        line.push(b'\n');
        output.write_all(&line).await?;
        output.flush().await?;
    }
    Ok(())
}

/// What one line of input was.
enum Line {
    Text(String),
    /// A line that cannot be a message (too long, not UTF-8): what to answer.
    Invalid(RpcError),
}

/// The input's lines, each within `max` bytes; a longer one is discarded as it arrives.
struct Lines<R> {
    input: R,
    codec: LinesCodec,
    buffer: BytesMut,
    max: usize,
    ended: bool,
}

impl<R: AsyncRead + Unpin> Lines<R> {
    fn new(input: R, max: usize) -> Self {
        Self {
            input,
            codec: LinesCodec::new_with_max_length(max),
            buffer: BytesMut::new(),
            max,
            ended: false,
        }
    }

    /// The next line, or `None` at the end of the input.
    async fn next(&mut self) -> io::Result<Option<Line>> {
        loop {
            let decoded = if self.ended {
                self.codec.decode_eof(&mut self.buffer)
            } else {
                self.codec.decode(&mut self.buffer)
            };
            match decoded {
                Ok(Some(text)) => return Ok(Some(Line::Text(text))),
                Ok(None) if self.ended => return Ok(None),
                Ok(None) => {}
                Err(LinesCodecError::MaxLineLengthExceeded) => {
                    return Ok(Some(Line::Invalid(RpcError::new(
                        INVALID_REQUEST,
                        format!("Invalid Request: a message is longer than {} bytes", self.max),
                    ))));
                }
                Err(LinesCodecError::Io(error)) if error.kind() == io::ErrorKind::InvalidData => {
                    return Ok(Some(Line::Invalid(RpcError::new(
                        PARSE_ERROR,
                        "Parse error: a message is not UTF-8",
                    ))));
                }
                Err(LinesCodecError::Io(error)) => return Err(error),
            }
            if self.input.read_buf(&mut self.buffer).await? == 0 {
                self.ended = true;
            }
        }
    }
}

struct Connection {
    state: McpState,
    caller: Caller,
    out: mpsc::Sender<Value>,
    session: Option<SessionId>,
    in_flight: Arc<Semaphore>,
    /// The requests running, and the task writing the session's events.
    running: JoinSet<()>,
}

impl Connection {
    async fn send(&self, message: Value) {
        // A closed output ends the loop in `serve`.
        let _ = self.out.send(message).await;
    }

    async fn refuse(&self, id: Option<&RequestId>, error: RpcError) {
        self.send(jsonrpc::error_response(id, &error)).await;
    }

    async fn receive(&mut self, text: &str) {
        if text.trim().is_empty() {
            return;
        }
        let value: Value = match serde_json::from_str(text) {
            Ok(value) => value,
            Err(error) => {
                return self
                    .refuse(None, RpcError::new(PARSE_ERROR, format!("Parse error: {error}")))
                    .await;
            }
        };
        if value.is_array() {
            let error = RpcError::new(
                INVALID_REQUEST,
                "Invalid Request: JSON-RPC batches are not part of MCP over stdio",
            );
            return self.refuse(None, error).await;
        }
        let message = match jsonrpc::classify(value) {
            Ok(message) => message,
            Err((id, error)) => return self.refuse(id.as_ref(), error).await,
        };
        let Some(session) = self.session.clone() else {
            return match message {
                Message::Request { id, method, params } if method == "initialize" => {
                    self.initialize(id, params).await;
                }
                Message::Request { id, .. } => {
                    let error = RpcError::new(INVALID_REQUEST, "Invalid Request: send initialize first");
                    self.refuse(Some(&id), error).await;
                }
                // Nothing can be answered or notified before the session exists.
                Message::Response { .. } | Message::Notification { .. } => {}
            };
        };
        match message {
            Message::Request { id, method, params } => self.request(session, id, method, params).await,
            Message::Response { id, answer } => match self.find(&session).await {
                Ok(record) => calls::route_answer(&self.state, &self.state.calls, &record, &id, answer).await,
                Err(error) => tracing::info!(message = %error.message, "dropped an answer"),
            },
            Message::Notification { method, params } => {
                methods::notified(&self.state, &session, &method, params.as_ref()).await;
            }
        }
    }

    async fn initialize(&mut self, id: RequestId, params: Option<Value>) {
        match methods::initialize(&self.state, self.caller.principal.clone(), params).await {
            Ok((session, result)) => {
                self.send(jsonrpc::result_response(&id, result)).await;
                let (state, out) = (self.state.clone(), self.out.clone());
                self.session = Some(session.id.clone());
                self.running.spawn(deliver_events(state, session, out));
            }
            Err(error) => self.refuse(Some(&id), error).await,
        }
    }

    /// The session as stored now: its log level may have changed, and it may have ended.
    async fn find(&self, session: &SessionId) -> Result<Arc<SessionRecord>, RpcError> {
        match self.state.sessions.find(session).await {
            Ok(Some(record)) => Ok(record),
            Ok(None) => Err(RpcError::new(
                INVALID_REQUEST,
                "Invalid Request: the session has ended; start gatehouse again",
            )),
            Err(error) => Err(super::store_failure(&self.state, "session lookup failed", &error)),
        }
    }

    /// Runs the request in a task of its own, so answers to what it asks can arrive meanwhile.
    async fn request(&mut self, session: SessionId, id: RequestId, method: String, params: Option<Value>) {
        if method == "initialize" {
            let error = RpcError::new(INVALID_REQUEST, "Invalid Request: the session is already initialized");
            return self.refuse(Some(&id), error).await;
        }
        let Ok(permit) = self.in_flight.clone().try_acquire_owned() else {
            let error = RpcError::new(
                INVALID_REQUEST,
                format!("Invalid Request: {MAX_IN_FLIGHT} requests are running already; wait for one to finish"),
            );
            return self.refuse(Some(&id), error).await;
        };
        let record = match self.find(&session).await {
            Ok(record) => record,
            Err(error) => return self.refuse(Some(&id), error).await,
        };
        // Finished requests leave their outcome in the set until taken.
        while let Some(finished) = self.running.try_join_next() {
            if let Err(error) = finished {
                tracing::error!(%error, "a stdio request's task failed");
            }
        }
        let (state, caller, out) = (self.state.clone(), self.caller.clone(), self.out.clone());
        self.running.spawn(async move {
            let _permit = permit;
            let outbox =
                methods::streams_answer(&state, &record, &method, params.as_ref()).then(|| Outbox::onto(out.clone()));
            let outcome = methods::handle(&state, &record, &caller, &id, &method, params, outbox.as_ref()).await;
            let response = match outcome {
                Ok(result) => jsonrpc::result_response(&id, result),
                Err(error) => jsonrpc::error_response(Some(&id), &error),
            };
            let _ = out.send(response).await;
        });
    }

    /// The client is gone: running requests stop and the session ends.
    async fn close(mut self) {
        self.running.shutdown().await;
        if let Some(session) = &self.session {
            self.state.upstreams.session_ended(session);
            match self.state.sessions.end(session).await {
                Ok(_) => tracing::debug!(?session, "session ended with the input"),
                Err(error) => tracing::warn!(%error, ?session, "could not end the session"),
            }
        }
    }
}

/// Writes the session's events to the output as they are appended, following the log again
/// (from the last event written) when a database failure interrupts it, until the session ends.
async fn deliver_events(state: McpState, session: Arc<SessionRecord>, out: mpsc::Sender<Value>) {
    let mut resume_after = None;
    loop {
        let Some(slot) = state.bus.claim_stream(&session.id, 1) else {
            tracing::error!(session = ?session.id, "the session's events are already followed");
            return;
        };
        let retry = match stream::follow(&state, &session, resume_after, slot).await {
            Ok((_, delivered)) => {
                let mut delivered = std::pin::pin!(delivered);
                let mut retry = None;
                while let Some(item) = delivered.next().await {
                    match item {
                        Delivered::Message { seq, message } => {
                            if out.send(message).await.is_err() {
                                return;
                            }
                            resume_after = Some(seq);
                        }
                        Delivered::Retry(after) => retry = Some(after),
                    }
                }
                match retry {
                    Some(after) => after,
                    // The session ended.
                    None => return,
                }
            }
            Err(error) => {
                tracing::warn!(%error, session = ?session.id, "cannot follow the session's events");
                state.config.server.sse_retry
            }
        };
        tokio::select! {
            () = state.shutdown.cancelled() => return,
            () = tokio::time::sleep(retry) => {}
        }
    }
}
