//! Answers that go out as an SSE stream on the request's own response: what a call sends while it
//! runs (progress, log messages, and in 2025-11-25 its requests to the client), then its response.

use std::convert::Infallible;
use std::sync::Arc;

use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde_json::Value;
use tracing::Instrument;

use super::incall::Outbox;
use super::methods;
use super::state::McpState;
use crate::identity::Caller;
use crate::jsonrpc::{self, RequestId};
use crate::store::SessionRecord;

/// Answers a request on its own SSE stream: what the call sends while it runs (elicitation
/// requests, progress), then its response. The call runs in its own task, so it notices when the
/// client goes away instead of being dropped mid-write.
pub fn streamed_answer(
    state: &McpState,
    session: Arc<SessionRecord>,
    caller: Caller,
    id: RequestId,
    method: String,
    params: Option<Value>,
) -> Response {
    let task_state = state.clone();
    sse_answer(state, move |outbox| async move {
        match methods::handle(&task_state, &session, &caller, &id, &method, params, Some(&outbox)).await {
            Ok(result) => jsonrpc::result_response(&id, result),
            Err(error) => jsonrpc::error_response(Some(&id), &error),
        }
    })
}

/// An SSE answer: `run` sends what goes out while it works to its outbox and returns the
/// response, which goes last. It runs in its own task, so it notices when the client goes away.
pub fn sse_answer<F, Fut>(state: &McpState, run: F) -> Response
where
    F: FnOnce(Outbox) -> Fut + Send + 'static,
    Fut: Future<Output = Value> + Send + 'static,
{
    let (outbox, receiver) = Outbox::channel();
    // Within the request's span: the call's spans are its children, in the same trace.
    tokio::spawn(
        async move {
            let body = run(outbox.clone()).await;
            outbox.send(body).await;
        }
        .in_current_span(),
    );
    let events = tokio_stream::wrappers::ReceiverStream::new(receiver)
        .map(|message| Ok::<_, Infallible>(Event::default().data(message.to_string())));
    Sse::new(events)
        .keep_alive(KeepAlive::new().interval(state.config.server.sse_keep_alive))
        .into_response()
}
