//! The error of the browser-facing routes. Internal causes are logged with context and shown as a
//! generic message.

use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};

#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error("template: {0}")]
    Template(#[from] askama::Error),
}

impl IntoResponse for AppError {
    fn into_response(self) -> Response {
        tracing::error!(error = %self, "request failed");
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            Html("<!doctype html><title>Error</title><p>Something went wrong on our side.</p>"),
        )
            .into_response()
    }
}
