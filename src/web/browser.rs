//! What every page opened from an elicitation shares: who the browser is, whether the request
//! behind the link is theirs and still open, CSRF tokens, and the notice page.

use std::net::SocketAddr;

use askama::Template;
use axum::http::header::ORIGIN;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use serde::Serialize;

use super::page;
use super::pages::page as page_template;
use crate::domain::{ElicitationId, Principal};
use crate::error::AppError;
use crate::state::AppState;
use crate::store::{ElicitationRecord, ElicitationStatus};

#[derive(Template, Serialize)]
#[template(path = "notice.html", blocks = ["title", "content"])]
pub struct Notice {
    heading: String,
    message: String,
    next_step: Option<String>,
}
page_template!(Notice, "notice.html");

/// A page with a heading, a message and the status it is sent with.
pub fn notice(
    state: &AppState,
    status: StatusCode,
    heading: &str,
    message: impl Into<String>,
    next_step: Option<String>,
) -> Result<Response, AppError> {
    let mut response = page(
        state,
        &Notice {
            heading: heading.into(),
            message: message.into(),
            next_step,
        },
    )?;
    *response.status_mut() = status;
    Ok(response)
}

pub fn when(at: DateTime<Utc>) -> String {
    at.format("%Y-%m-%d %H:%M UTC").to_string()
}

/// A refusal page, boxed because handlers pass it back up instead of what they asked for.
pub fn refusal(
    state: &AppState,
    status: StatusCode,
    heading: &str,
    message: &str,
    next_step: Option<String>,
) -> Box<Response> {
    Box::new(notice(state, status, heading, message, next_step).unwrap_or_else(IntoResponse::into_response))
}

/// The browser's principal, or the page to show instead.
pub fn browser_principal(state: &AppState, headers: &HeaderMap, peer: SocketAddr) -> Result<Principal, Box<Response>> {
    state.identity.principal(headers, peer).map_err(|e| {
        tracing::info!(%peer, reason = %e, "unidentified browser");
        refusal(
            state,
            StatusCode::UNAUTHORIZED,
            "Sign-in required",
            "gatehouse could not tell who you are.",
            None,
        )
    })
}

/// The elicitation behind a link, checked against the browser's principal.
async fn owned_elicitation(
    state: &AppState,
    id: &str,
    principal: &Principal,
) -> Result<ElicitationRecord, Box<Response>> {
    let unknown = || {
        refusal(
            state,
            StatusCode::NOT_FOUND,
            "Unknown link",
            "This link does not lead to any request.",
            None,
        )
    };
    let Ok(id) = id.parse::<ElicitationId>() else {
        return Err(unknown());
    };
    let elicitation = match state.gate.elicitation(&id).await {
        Ok(Some(elicitation)) => elicitation,
        Ok(None) => return Err(unknown()),
        Err(error) => return Err(Box::new(AppError::Gate(error).into_response())),
    };
    if &elicitation.principal != principal {
        tracing::warn!(elicitation = %id, browser = %principal, "a request was opened by another user");
        return Err(refusal(
            state,
            StatusCode::FORBIDDEN,
            "Not your request",
            "This link was issued to another user. Nothing was changed.",
            Some("Ask your own assistant to start the request again.".into()),
        ));
    }
    let (heading, message) = match elicitation.status {
        ElicitationStatus::Pending if elicitation.expires_at > Utc::now() => return Ok(elicitation),
        ElicitationStatus::Pending | ElicitationStatus::Expired => ("Link expired", "This request has expired."),
        ElicitationStatus::Completed => ("Already done", "This request is already complete."),
        ElicitationStatus::Declined => ("Declined", "This request was declined."),
        ElicitationStatus::Failed => ("Request failed", "This request did not succeed."),
    };
    Err(refusal(
        state,
        StatusCode::GONE,
        heading,
        message,
        Some("Ask your assistant to try again if you still need it.".into()),
    ))
}

/// The browser's principal and the elicitation behind the link, which must be theirs and still
/// pending; or the page to show instead.
pub async fn browser_elicitation(
    state: &AppState,
    headers: &HeaderMap,
    peer: SocketAddr,
    id: &str,
) -> Result<(Principal, ElicitationRecord), Box<Response>> {
    let principal = browser_principal(state, headers, peer)?;
    let elicitation = owned_elicitation(state, id, &principal).await?;
    Ok((principal, elicitation))
}

/// A CSRF token binding a page's form to the principal and what it acts on.
pub fn csrf_token(state: &AppState, purpose: &str, principal: &Principal, subject: &str) -> String {
    state
        .gate
        .vault()
        .mac(purpose, format!("{principal}\n{subject}").as_bytes())
}

/// Whether a form post came from our own page: no foreign `Origin`, and the page's CSRF token.
pub fn genuine_post(
    state: &AppState,
    headers: &HeaderMap,
    purpose: &str,
    principal: &Principal,
    subject: &str,
    token: &str,
) -> bool {
    let cross_site = headers
        .get(ORIGIN)
        .is_some_and(|o| o.as_bytes() != state.public_origin().as_bytes());
    !cross_site
        && state
            .gate
            .vault()
            .verify_mac(purpose, format!("{principal}\n{subject}").as_bytes(), token)
}

/// The user said no on the page: the elicitation is declined and its client told.
pub async fn declined(
    state: &AppState,
    elicitation: &ElicitationRecord,
    heading: &str,
    verb: &str,
) -> Result<Response, AppError> {
    state.gate.finish(elicitation, ElicitationStatus::Declined).await?;
    notice(
        state,
        StatusCode::OK,
        heading,
        format!("You {verb}. {} has been told.", elicitation.client_name),
        Some("You can close this window.".into()),
    )
}

/// The answer to a post that did not come from our page: nothing changed.
pub fn forged_post(state: &AppState) -> Result<Response, AppError> {
    notice(
        state,
        StatusCode::FORBIDDEN,
        "Request refused",
        "This form was not submitted from this page. Nothing was changed.",
        Some("Open the link from your assistant again.".into()),
    )
}
