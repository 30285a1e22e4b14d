//! Answers to requests whose body was left unread say `Connection: close` in their head.
//!
//! Refusing before reading is the rule here (an unauthenticated or malformed request costs no
//! body), and hyper closes such a connection after the answer, since the next request cannot be
//! found behind an unread body. But hyper notices only once the head has left, saying keep-alive:
//! a client that reuses the connection at once (httpx does, for the retry after a 401) then sees it
//! closed under its next request. Saying `close` in the head lets every client know in time.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::HeaderValue;
use axum::http::header::CONNECTION;
use axum::middleware::Next;
use axum::response::Response;
use hyper::body::{Body as _, Frame, SizeHint};

/// The middleware: runs the request with its body watched, and marks the answer if the body was
/// not read to its end.
pub async fn close_if_unread(request: Request, next: Next) -> Response {
    if request.body().is_end_stream() {
        return next.run(request).await;
    }
    let finished = Arc::new(AtomicBool::new(false));
    let request = request.map(|inner| {
        Body::new(Watched {
            inner,
            finished: finished.clone(),
        })
    });
    let mut response = next.run(request).await;
    if !finished.load(Ordering::Acquire) {
        response
            .headers_mut()
            .insert(CONNECTION, HeaderValue::from_static("close"));
    }
    response
}

/// A request body that records when it has been read to its end.
struct Watched {
    inner: Body,
    finished: Arc<AtomicBool>,
}

impl hyper::body::Body for Watched {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let frame = Pin::new(&mut self.inner).poll_frame(cx);
        if matches!(frame, Poll::Ready(None)) || self.inner.is_end_stream() {
            self.finished.store(true, Ordering::Release);
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
