//! The pages' browser sessions in `oauth` mode: a cookie of 256 random bits naming a stored
//! session by its SHA-256 (the store never holds the cookie itself); made at sign-in, looked up by
//! every page, ended by sign-out, by expiry, or by the principal's newer sessions beyond
//! [`MAX_PER_PRINCIPAL`].

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue};
use chrono::Utc;

use super::cookies;
use super::error::PageError;
use super::state::PagesState;
use crate::clock::after;
use crate::domain::Principal;
use crate::gate::{random_token, sha256_hex};
use crate::identity::Claims;
use crate::identity::oidc::SignedIn;
use crate::store::BrowserSessionRecord;

/// Sessions kept per principal (browsers, devices); a new one ends the oldest beyond this.
pub const MAX_PER_PRINCIPAL: usize = 16;
const COOKIE: &str = "gatehouse-session";
/// The cookie's length: 32 bytes in base64url without padding.
const COOKIE_LEN: usize = 43;

/// A signed-in browser.
pub struct BrowserSession {
    /// The stored id: the cookie's hash.
    pub id: String,
    pub principal: Principal,
    pub claims: Claims,
}

impl BrowserSession {
    /// Who the browser is signed in as, in words: the display name and the principal.
    pub fn signed_in_as(&self) -> String {
        match self.claims.display_name() {
            Some(name) => format!("{name} ({})", self.principal),
            None => self.principal.to_string(),
        }
    }
}

fn cookie_name(state: &PagesState) -> String {
    state.public_url.cookie_name(COOKIE)
}

/// The browser's live session, when its cookie names one.
pub async fn find(state: &PagesState, headers: &HeaderMap) -> Result<Option<BrowserSession>, PageError> {
    let Some(value) = cookies::read(headers, &cookie_name(state)) else {
        return Ok(None);
    };
    // Only a value gatehouse could have made is looked up.
    if value.len() != COOKIE_LEN
        || !value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        return Ok(None);
    }
    let Some(record) = state.store.browser_session(&sha256_hex(value), Utc::now()).await? else {
        return Ok(None);
    };
    let claims = record.claims.as_object().map(Claims::from_token).unwrap_or_default();
    Ok(Some(BrowserSession {
        id: record.id,
        principal: record.principal,
        claims,
    }))
}

/// Starts a session for who signed in; returns the `Set-Cookie` that hands it to the browser.
pub async fn start(state: &PagesState, signed_in: &SignedIn) -> Result<HeaderValue, PageError> {
    let value = random_token();
    let ttl = state.config.identity.browser_session_ttl;
    let now = Utc::now();
    let record = BrowserSessionRecord {
        id: sha256_hex(&value),
        principal: signed_in.principal.clone(),
        claims: signed_in.claims.to_json(),
        created_at: now,
        expires_at: after(now, ttl),
    };
    state.store.create_browser_session(&record, MAX_PER_PRINCIPAL).await?;
    cookies::set(state, &cookie_name(state), &value, ttl)
}

/// Ends the session; returns the `Set-Cookie` that drops its cookie.
pub async fn end(state: &PagesState, session: &BrowserSession) -> Result<HeaderValue, PageError> {
    state.store.delete_browser_session(&session.id).await?;
    dropped(state)
}

/// The `Set-Cookie` that drops the session cookie.
pub fn dropped(state: &PagesState) -> Result<HeaderValue, PageError> {
    cookies::expire(state, &cookie_name(state))
}

/// The browser's live session, if any, as an extractor.
pub struct CurrentSession(pub Option<BrowserSession>);

impl FromRequestParts<PagesState> for CurrentSession {
    type Rejection = PageError;

    async fn from_request_parts(parts: &mut Parts, state: &PagesState) -> Result<Self, Self::Rejection> {
        find(state, &parts.headers).await.map(CurrentSession)
    }
}
