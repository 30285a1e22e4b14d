//! What every page opened from an elicitation checks before it does anything: who the browser is
//! (`Browser`), whether the request behind the link is theirs and still open
//! (`OwnedElicitation`), a posted form, read only after those (`Posted`), and whether it came from
//! our own page (the CSRF token; the `Origin` was checked before the body was read, by the edge's
//! `AllowedPostOrigin`, see `web::router`).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Form;
use axum::extract::{FromRequest, FromRequestParts, Path, Request};
use axum::http::request::Parts;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chrono::{DateTime, Utc};
use rand::RngCore;
use serde::de::DeserializeOwned;

use super::browser_sessions;
use super::error::PageError;
use super::state::PagesState;
use crate::audit::Origin;
use crate::domain::{ElicitationId, Principal};
use crate::edge::{self, Peer, client_address};
use crate::identity::{Claims, Identity};
use crate::routes;
use crate::store::{ElicitationRecord, ElicitationStatus};

/// The browser's principal, by the configured identity mode.
pub struct Browser {
    pub principal: Principal,
    /// What `allow` rules read of the browser's user: the proxy's headers in `header` mode, the
    /// sign-in's claims in `oauth` mode.
    pub claims: Arc<Claims>,
    /// In `oauth` mode, who the browser signed in as, in words (name and principal).
    pub signed_in_as: Option<String>,
    /// Where the request came from (the client's address after trusted proxies).
    pub from: Origin,
}

impl Browser {
    /// `method` and `uri` are the page's: where a browser that must sign in first returns to.
    pub async fn from_parts(
        state: &PagesState,
        method: &Method,
        uri: &Uri,
        headers: &HeaderMap,
        peer: SocketAddr,
    ) -> Result<Self, PageError> {
        identify(state, method, uri, headers, peer)
            .await
            .map(|(principal, claims, signed_in_as)| Browser {
                principal,
                claims,
                signed_in_as,
                from: Origin::at(client_address(state, headers, peer)),
            })
    }
}

/// The browser's principal, in `oauth` mode who it signed in as in words, and its claims. There a
/// browser without a session is sent to sign in and come back (a page), or told to (a post).
async fn identify(
    state: &PagesState,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    peer: SocketAddr,
) -> Result<(Principal, Arc<Claims>, Option<String>), PageError> {
    if let Identity::OAuth(_) = &*state.identity {
        return match browser_sessions::find(state, headers).await? {
            Some(session) => {
                let signed_in_as = session.signed_in_as();
                let claims = Arc::new(session.claims.with_principal(&session.principal));
                Ok((session.principal, claims, Some(signed_in_as)))
            }
            None => {
                let page = uri.path_and_query().map_or("/", |p| p.as_str());
                Err(PageError::NotSignedIn {
                    login: state.public_url.path(&routes::login(page)),
                    redirect: *method == Method::GET || *method == Method::HEAD,
                })
            }
        };
    }
    let caller = edge::caller(state, headers, peer)
        .await
        .map_err(|error| PageError::unidentified(&error, peer))?;
    Ok((caller.principal, caller.claims, None))
}

impl FromRequestParts<PagesState> for Browser {
    type Rejection = PageError;

    async fn from_request_parts(parts: &mut Parts, state: &PagesState) -> Result<Self, Self::Rejection> {
        let Peer(peer) = Peer::from_request_parts(parts, state).await?;
        Self::from_parts(state, &parts.method, &parts.uri, &parts.headers, peer).await
    }
}

/// The elicitation behind a `/…/{id}` link, which must be the browser's and still pending.
pub struct OwnedElicitation {
    pub principal: Principal,
    pub elicitation: ElicitationRecord,
    /// Where the request came from (the client's address after trusted proxies).
    pub from: Origin,
}

impl FromRequestParts<PagesState> for OwnedElicitation {
    type Rejection = PageError;

    async fn from_request_parts(parts: &mut Parts, state: &PagesState) -> Result<Self, Self::Rejection> {
        let Peer(peer) = Peer::from_request_parts(parts, state).await?;
        let (principal, _, signed_in_as) = identify(state, &parts.method, &parts.uri, &parts.headers, peer).await?;
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
            return Err(PageError::NotYours {
                signed_in_as,
                sign_out: state.public_url.path(routes::LOGOUT),
            });
        }
        match elicitation.status {
            ElicitationStatus::Pending if elicitation.expires_at > Utc::now() => Ok(Self {
                principal,
                elicitation,
                from: Origin::at(client_address(state, &parts.headers, peer)),
            }),
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
    pub fn token(&self, state: &PagesState, principal: &Principal) -> String {
        let mut bytes = [0u8; NONCE_BYTES];
        rand::rng().fill_bytes(&mut bytes);
        let nonce = URL_SAFE_NO_PAD.encode(bytes);
        let mac = state
            .vault
            .mac(self.purpose, self.message(principal, &nonce).as_bytes());
        format!("{nonce}.{mac}")
    }

    /// A post carried a token one of the page's renderings carried.
    pub fn check(&self, state: &PagesState, principal: &Principal, token: &str) -> Result<(), PageError> {
        let signed = token.split_once('.').is_some_and(|(nonce, mac)| {
            nonce.len() == NONCE_LEN
                && state
                    .vault
                    .verify_mac(self.purpose, self.message(principal, nonce).as_bytes(), mac)
        });
        if !signed {
            return Err(PageError::Forged);
        }
        Ok(())
    }
}

/// A posted form. As a body extractor it runs after every other one of its handler (identity, the
/// elicitation's owner), so nobody unidentified makes the server wait for a body; and the body
/// must arrive whole within `server.request_body_timeout`.
pub struct Posted<T>(pub T);

impl<T: DeserializeOwned + Send> FromRequest<PagesState> for Posted<T> {
    type Rejection = PageError;

    async fn from_request(request: Request, state: &PagesState) -> Result<Self, Self::Rejection> {
        let deadline = state.config.server.request_body_timeout;
        let read = tokio::time::timeout(deadline, Form::<T>::from_request(request, state))
            .await
            .map_err(|_| {
                tracing::info!(?deadline, "a form post's body did not arrive in time");
                PageError::TooSlow
            })?;
        match read {
            Ok(Form(value)) => Ok(Posted(value)),
            Err(rejection) if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE => Err(PageError::TooLarge),
            Err(rejection) => {
                tracing::info!(reason = %rejection.body_text(), "unreadable form post");
                Err(PageError::Unreadable)
            }
        }
    }
}

/// A time as pages show it.
pub fn when(at: DateTime<Utc>) -> String {
    at.format("%Y-%m-%d %H:%M UTC").to_string()
}
