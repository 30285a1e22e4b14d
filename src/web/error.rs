//! The error of the browser-facing routes, in the manner of docs.rs' `AxumNope`: every way a page
//! request can be refused, each with its status and a notice page that says what happened and
//! what to do. An internal cause travels with the response to the page layer, which logs it with
//! the request it broke; the user sees a generic message.

use std::net::SocketAddr;

use axum::http::header::{LOCATION, RETRY_AFTER};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use super::page::PageResponse;
use super::templates::Page;
use crate::edge::RETRY_AFTER_SECONDS;
use crate::gate::{CallbackRefusal, GateError, VoteRefusal};
use crate::identity::IdentityError;
use crate::store::{ElicitationStatus, StoreError};

/// A page with a heading, a message, an optional next step and an optional link onward.
#[derive(Serialize)]
pub struct NoticePage {
    heading: String,
    message: String,
    next_step: Option<String>,
    link: Option<Link>,
}
impl Page for NoticePage {
    const NAME: &'static str = "notice.html";
}

/// A link a notice page offers: where, and its words.
#[derive(Serialize)]
pub struct Link {
    href: String,
    text: String,
}

impl NoticePage {
    pub fn new(heading: &str, message: impl Into<String>, next_step: Option<&str>) -> Self {
        Self {
            heading: heading.to_owned(),
            message: message.into(),
            next_step: next_step.map(str::to_owned),
            link: None,
        }
    }

    pub fn with_link(mut self, href: impl Into<String>, text: &str) -> Self {
        self.link = Some(Link {
            href: href.into(),
            text: text.to_owned(),
        });
        self
    }
}

/// The words of the link back to an elicitation's page after a sign-in that did not finish.
pub const START_AGAIN: &str = "Start the sign-in again";

const ASK_AGAIN: &str = "Ask your assistant to try again if you still need it.";

#[derive(Debug, thiserror::Error)]
pub enum PageError {
    #[error("the browser's user could not be identified")]
    SignInRequired,
    /// `oauth` mode, a browser without a live session: a page is sent to `login` (303), a post
    /// is answered 401 with a link there.
    #[error("the browser is not signed in")]
    NotSignedIn { login: String, redirect: bool },
    /// The pages' own sign-in did not finish: why, in words, and where to start it again.
    #[error("the sign-in did not finish: {reason}")]
    SignInFailed { reason: String, retry: Option<String> },
    /// `/login` and `/logout` outside `oauth` mode: who signs users in instead.
    #[error("sign-in is not done here")]
    SignInElsewhere(&'static str),
    #[error("no such request")]
    UnknownLink,
    /// In `oauth` mode, with who the browser is signed in as.
    #[error("the request belongs to another user")]
    NotYours {
        signed_in_as: Option<String>,
        /// The sign-out page, under the public URL's prefix.
        sign_out: String,
    },
    #[error("the request is {}", .0.as_str())]
    Closed(ElicitationStatus),
    #[error("the request names nothing gatehouse can do")]
    UnknownRequest,
    #[error("no such form")]
    UnknownForm,
    /// A button that is not on the page; the text names the ones that are.
    #[error("unknown action")]
    UnknownAction(&'static str),
    #[error("the post did not come from our page")]
    Forged,
    /// The operator pages (`/admin`) for someone `[admin] allow` does not name.
    #[error("the browser's user is not an operator")]
    NotAnOperator,
    /// A `Host` that is not this server's name on a loopback-bound instance (DNS rebinding).
    #[error("the Host header names another server")]
    ForeignHost,
    #[error("the post is too large")]
    TooLarge,
    #[error("the post could not be read")]
    Unreadable,
    /// The post's body did not arrive whole within `server.request_body_timeout`.
    #[error("the post did not arrive in time")]
    TooSlow,
    /// With the elicitation's page when it still takes a sign-in.
    #[error("the OAuth callback was refused: {refusal}")]
    CallbackRefused {
        refusal: CallbackRefusal,
        retry: Option<String>,
    },
    #[error("the request ended while the form was being filled in")]
    EndedMeanwhile,
    /// An approval vote not taken (nothing changed).
    #[error("the vote was refused: {0}")]
    VoteRefused(VoteRefusal),
    #[error("a provider could not be reached")]
    ProviderUnavailable,
    /// The database cannot be reached right now (logged where it was noticed).
    #[error("the database is unavailable")]
    Unavailable,
    /// The client address made `limits.page_requests_per_minute` requests within the minute; the
    /// next is allowed in `retry_after` seconds.
    #[error("too many requests")]
    TooManyRequests { retry_after: u64 },
    /// Logged by the page layer with the request; the user sees a generic message.
    #[error("internal error: {0}")]
    Internal(String),
}

impl From<GateError> for PageError {
    fn from(error: GateError) -> Self {
        match error {
            GateError::ProviderUnavailable { provider, reason } => {
                tracing::warn!(%provider, %reason, "a page could not reach a provider");
                PageError::ProviderUnavailable
            }
            other if other.is_unavailable() => {
                tracing::warn!(error = %other, "a page could not reach the database");
                PageError::Unavailable
            }
            other => PageError::Internal(other.to_string()),
        }
    }
}

impl From<StoreError> for PageError {
    fn from(error: StoreError) -> Self {
        GateError::from(error).into()
    }
}

impl PageError {
    /// A browser the identity mode could not tell (outside `oauth` mode), logged with its peer.
    pub fn unidentified(error: &IdentityError, peer: SocketAddr) -> Self {
        tracing::info!(%peer, reason = %error, "unidentified browser");
        PageError::SignInRequired
    }

    fn status(&self) -> StatusCode {
        match self {
            PageError::SignInRequired | PageError::NotSignedIn { .. } => StatusCode::UNAUTHORIZED,
            PageError::UnknownLink
            | PageError::UnknownRequest
            | PageError::UnknownForm
            | PageError::SignInElsewhere(_) => StatusCode::NOT_FOUND,
            PageError::NotYours { .. } | PageError::Forged | PageError::ForeignHost | PageError::NotAnOperator => {
                StatusCode::FORBIDDEN
            }
            PageError::Closed(_) | PageError::EndedMeanwhile => StatusCode::GONE,
            PageError::VoteRefused(VoteRefusal::OwnRequest | VoteRefusal::NotAnApprover) => StatusCode::FORBIDDEN,
            PageError::VoteRefused(VoteRefusal::AlreadyVoted | VoteRefusal::NotWaiting) => StatusCode::CONFLICT,
            PageError::UnknownAction(_)
            | PageError::Unreadable
            | PageError::CallbackRefused { .. }
            | PageError::SignInFailed { .. } => StatusCode::BAD_REQUEST,
            PageError::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            PageError::TooSlow => StatusCode::REQUEST_TIMEOUT,
            PageError::ProviderUnavailable => StatusCode::BAD_GATEWAY,
            PageError::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            PageError::TooManyRequests { .. } => StatusCode::TOO_MANY_REQUESTS,
            PageError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn notice(&self) -> NoticePage {
        match self {
            PageError::SignInRequired => {
                NoticePage::new("Sign-in required", "gatehouse could not tell who you are.", None)
            }
            PageError::NotSignedIn { login, .. } => NoticePage::new(
                "Sign-in required",
                "You are not signed in, or your sign-in has ended. Nothing was changed.",
                None,
            )
            .with_link(login.as_str(), "Sign in"),
            PageError::SignInFailed { reason, retry } => {
                let page = NoticePage::new("Sign-in not completed", reason.as_str(), Some("You are not signed in."));
                match retry {
                    Some(url) => page.with_link(url.as_str(), "Sign in again"),
                    None => page,
                }
            }
            PageError::SignInElsewhere(who) => NoticePage::new("Not here", *who, None),
            PageError::UnknownLink => NoticePage::new("Unknown link", "This link does not lead to any request.", None),
            PageError::NotYours { signed_in_as: None, .. } => NoticePage::new(
                "Not your request",
                "This link was issued to another user. Nothing was changed.",
                Some("Ask your own assistant to start the request again."),
            ),
            PageError::NotYours {
                signed_in_as: Some(who),
                sign_out,
            } => NoticePage::new(
                "Not your request",
                format!("You are signed in as {who}, and this link was issued to another user. Nothing was changed."),
                Some("If the request is yours, sign out and sign in again as the user it was made for."),
            )
            .with_link(sign_out.as_str(), "Sign out"),
            PageError::Closed(status) => {
                let (heading, message) = match status {
                    ElicitationStatus::Completed => ("Already done", "This request is already complete."),
                    ElicitationStatus::Declined => ("Declined", "This request was declined."),
                    ElicitationStatus::Failed => ("Request failed", "This request did not succeed."),
                    ElicitationStatus::Pending | ElicitationStatus::Expired => {
                        ("Link expired", "This request has expired.")
                    }
                };
                NoticePage::new(heading, message, Some(ASK_AGAIN))
            }
            PageError::UnknownRequest => {
                NoticePage::new("Unknown request", "This request names nothing gatehouse can do.", None)
            }
            PageError::UnknownForm => NoticePage::new("Unknown form", "This link does not lead to any form.", None),
            PageError::UnknownAction(choices) => NoticePage::new("Unknown action", *choices, None),
            PageError::Forged => NoticePage::new(
                "Request refused",
                "This form was not submitted from this page. Nothing was changed.",
                Some("Open the link from your assistant again."),
            ),
            PageError::NotAnOperator => NoticePage::new(
                "Operators only",
                "These pages are for the operators of this server. Nothing was changed.",
                None,
            ),
            PageError::ForeignHost => {
                NoticePage::new("Unknown server", "This server does not answer to that name.", None)
            }
            PageError::TooLarge => NoticePage::new(
                "Too much text",
                "The form was larger than gatehouse accepts. Nothing was saved.",
                Some("Go back and shorten what you entered."),
            ),
            PageError::Unreadable => NoticePage::new(
                "Unreadable form",
                "The form could not be read. Nothing was saved.",
                Some("Open the link from your assistant again."),
            ),
            PageError::TooSlow => NoticePage::new(
                "Form not received",
                "The form did not arrive in time. Nothing was saved.",
                Some("Go back and submit it again."),
            ),
            PageError::CallbackRefused { refusal, retry } => {
                let page = NoticePage::new(
                    "Sign-in not completed",
                    refusal.to_string(),
                    Some("Nothing was stored."),
                );
                match retry {
                    Some(url) => page.with_link(url.as_str(), START_AGAIN),
                    None => page,
                }
            }
            PageError::EndedMeanwhile => NoticePage::new(
                "Request closed",
                "This request ended while you were filling in the form.",
                Some(ASK_AGAIN),
            ),
            PageError::VoteRefused(refusal) => {
                NoticePage::new("Not decided", refusal.to_string(), Some("Nothing was changed."))
            }
            PageError::ProviderUnavailable => NoticePage::new(
                "Service unavailable",
                "A service gatehouse needs could not be reached. Nothing was changed.",
                Some("Try again in a moment."),
            ),
            PageError::Unavailable => NoticePage::new(
                "Service unavailable",
                "gatehouse cannot reach its database right now. Nothing was changed.",
                Some("Try again in a moment."),
            ),
            PageError::TooManyRequests { retry_after } => NoticePage::new(
                "Too many requests",
                format!(
                    "This address opened gatehouse's pages too often within the last minute. Nothing was changed. \
                     Try again in {retry_after} seconds."
                ),
                None,
            ),
            PageError::Internal(_) => NoticePage::new(
                "Something went wrong",
                "Something went wrong on our side. Nothing was changed; try again in a moment.",
                None,
            ),
        }
    }
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        if let PageError::NotSignedIn { login, redirect: true } = &self
            && let Ok(location) = HeaderValue::from_str(login)
        {
            return (StatusCode::SEE_OTHER, [(LOCATION, location)]).into_response();
        }
        let mut response = PageResponse::new(self.notice())
            .with_status(self.status())
            .into_response();
        match self {
            PageError::Internal(cause) => {
                response.extensions_mut().insert(Failure(cause));
            }
            PageError::Unavailable => {
                response
                    .headers_mut()
                    .insert(RETRY_AFTER, HeaderValue::from_static(RETRY_AFTER_SECONDS));
            }
            PageError::TooManyRequests { retry_after } => {
                response
                    .headers_mut()
                    .insert(RETRY_AFTER, HeaderValue::from(retry_after));
            }
            _ => {}
        }
        response
    }
}

/// Why a page request failed on our side, for the page layer to log with the request.
#[derive(Clone)]
pub struct Failure(pub String);

#[cfg(test)]
pub(crate) fn samples() -> Vec<super::templates::Sample> {
    use super::templates::Sample;
    vec![
        Sample::of(NoticePage::new("Declined", "You said <no> & \"no\" it's", None)),
        Sample::of(
            NoticePage::new("Sign-in failed", "The provider refused.", Some("Try again."))
                .with_link("/gh/connect/0190?x=1&y=2", START_AGAIN),
        ),
    ]
}
