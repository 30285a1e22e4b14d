//! What every page opened from an elicitation checks before it does anything: who the browser is
//! (`Browser`), whether the request behind the link is theirs and still open
//! (`OwnedElicitation`), and whether a form post came from our own page (CSRF token and Origin).

use std::net::SocketAddr;

use axum::Form;
use axum::extract::rejection::FormRejection;
use axum::extract::{ConnectInfo, FromRequestParts, Path};
use axum::http::header::ORIGIN;
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chrono::{DateTime, Utc};
use rand::RngCore;

use super::error::PageError;
use crate::domain::{ElicitationId, Principal};
use crate::state::AppState;
use crate::store::{ElicitationRecord, ElicitationStatus};

/// The browser's principal, by the configured identity mode.
pub struct Browser(pub Principal);

impl Browser {
    pub fn from_parts(state: &AppState, headers: &HeaderMap, peer: SocketAddr) -> Result<Self, PageError> {
        state.identity.principal(headers, peer).map(Browser).map_err(|e| {
            tracing::info!(%peer, reason = %e, "unidentified browser");
            PageError::SignInRequired
        })
    }
}

impl FromRequestParts<AppState> for Browser {
    type Rejection = PageError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        let Some(ConnectInfo(peer)) = parts.extensions.get::<ConnectInfo<SocketAddr>>().copied() else {
            return Err(PageError::Internal(
                "a page request without the peer address (not served by gatehouse::serve)".into(),
            ));
        };
        Self::from_parts(state, &parts.headers, peer)
    }
}

/// The elicitation behind a `/…/{id}` link, which must be the browser's and still pending.
pub struct OwnedElicitation {
    pub principal: Principal,
    pub elicitation: ElicitationRecord,
}

impl FromRequestParts<AppState> for OwnedElicitation {
    type Rejection = PageError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        let Browser(principal) = Browser::from_request_parts(parts, state).await?;
        let Path(id) = Path::<String>::from_request_parts(parts, state)
            .await
            .map_err(|_| PageError::UnknownLink)?;
        let id: ElicitationId = id.parse().map_err(|_| PageError::UnknownLink)?;
        let elicitation = state
            .gate
            .elicitations()
            .get(&id)
            .await?
            .ok_or(PageError::UnknownLink)?;
        if elicitation.principal != principal {
            tracing::warn!(elicitation = %id, browser = %principal, "a request was opened by another user");
            return Err(PageError::NotYours);
        }
        match elicitation.status {
            ElicitationStatus::Pending if elicitation.expires_at > Utc::now() => Ok(Self { principal, elicitation }),
            ElicitationStatus::Pending => Err(PageError::Closed(ElicitationStatus::Expired)),
            status => Err(PageError::Closed(status)),
        }
    }
}

/// What a page's CSRF token binds its form to: a purpose and the thing it acts on (and, in the
/// token, the principal). Each rendered form gets its own token, `nonce.mac`: a fresh random
/// nonce, and a MAC over the principal, the subject and that nonce, so a token seen once (in a
/// log, a referrer, a cached page) says nothing about the next one.
pub struct CsrfBinding {
    purpose: &'static str,
    subject: String,
}

/// 128 random bits per form view.
const NONCE_BYTES: usize = 16;
/// Their base64url length, without padding.
const NONCE_LEN: usize = 22;

impl CsrfBinding {
    pub fn new(purpose: &'static str, subject: impl ToString) -> Self {
        Self {
            purpose,
            subject: subject.to_string(),
        }
    }

    fn message(&self, principal: &Principal, nonce: &str) -> String {
        format!("{principal}\n{}\n{nonce}", self.subject)
    }

    /// A fresh token for one rendering of the page's form, bound to the principal too.
    pub fn token(&self, state: &AppState, principal: &Principal) -> String {
        let mut bytes = [0u8; NONCE_BYTES];
        rand::rng().fill_bytes(&mut bytes);
        let nonce = URL_SAFE_NO_PAD.encode(bytes);
        let mac = state
            .vault
            .mac(self.purpose, self.message(principal, &nonce).as_bytes());
        format!("{nonce}.{mac}")
    }

    /// A post came from our own page: no `Origin` that `/mcp` would refuse, and a token one of
    /// the page's renderings carried.
    pub fn check(
        &self,
        state: &AppState,
        headers: &HeaderMap,
        principal: &Principal,
        token: &str,
    ) -> Result<(), PageError> {
        // The same rule as `/mcp`: our public origin, a configured one, or a loopback alias of
        // the bound port when bound to loopback.
        let cross_site = headers
            .get(ORIGIN)
            .is_some_and(|o| !o.to_str().is_ok_and(|o| state.origin_allowed(o)));
        let signed = token.split_once('.').is_some_and(|(nonce, mac)| {
            nonce.len() == NONCE_LEN
                && state
                    .vault
                    .verify_mac(self.purpose, self.message(principal, nonce).as_bytes(), mac)
        });
        if cross_site || !signed {
            return Err(PageError::Forged);
        }
        Ok(())
    }
}

/// A posted form's body, or why it could not be read.
pub fn posted<T>(body: Result<Form<T>, FormRejection>) -> Result<T, PageError> {
    match body {
        Ok(Form(value)) => Ok(value),
        Err(rejection) if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE => Err(PageError::TooLarge),
        Err(rejection) => {
            tracing::info!(reason = %rejection.body_text(), "unreadable form post");
            Err(PageError::Unreadable)
        }
    }
}

/// A time as pages show it.
pub fn when(at: DateTime<Utc>) -> String {
    at.format("%Y-%m-%d %H:%M UTC").to_string()
}
