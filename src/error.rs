//! The error of the browser-facing routes. Internal causes are logged with context and shown as a
//! generic message.

use axum::http::StatusCode;
use axum::http::header::InvalidHeaderValue;
use axum::response::{Html, IntoResponse, Response};

use crate::gate::GateError;

#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error("template: {0}")]
    Template(#[from] askama::Error),
    #[error("operator template: {0}")]
    OperatorTemplate(#[from] minijinja::Error),
    #[error("{0}")]
    Gate(#[from] GateError),
    #[error("header: {0}")]
    Header(#[from] InvalidHeaderValue),
}

impl IntoResponse for AppError {
    fn into_response(self) -> Response {
        tracing::error!(error = %self, "request failed");
        let status = match &self {
            AppError::Gate(GateError::ProviderUnavailable { .. }) => StatusCode::BAD_GATEWAY,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        let body = Html(
            "<!doctype html><title>Error</title><p>Something went wrong on our side. Nothing was changed; try again in a moment.</p>",
        );
        (status, [("cache-control", "no-store")], body).into_response()
    }
}
