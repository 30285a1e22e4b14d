//! The pages' own sign-in in `oauth` mode: `/login` sends the browser to the identity provider,
//! `/login/callback` turns its answer into a browser session and returns to the page first asked
//! for, `/logout` ends the session. What a sign-in in progress must remember (state, nonce, PKCE
//! verifier, where to return) travels in a short-lived cookie sealed with the key ring, one per
//! sign-in: nothing is stored for a visitor who never comes back.

use std::collections::HashMap;
use std::time::Duration;

use axum::Router;
use axum::extract::{RawQuery, State};
use axum::http::header::{LOCATION, SET_COOKIE};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{AppendHeaders, IntoResponse, Response};
use axum::routing::get;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chrono::Utc;
use serde::{Deserialize, Serialize};

use super::browser_sessions::{self, CurrentSession};
use super::cookies;
use super::error::{NoticePage, PageError};
use super::extract::{CsrfBinding, Posted};
use super::page::PageResponse;
use super::state::PagesState;
use super::templates::Page;
use crate::config::IdentityMode;
use crate::gate::sha256_hex;
use crate::identity::oidc::{SignIn, SignInError};
use crate::routes;

/// How long a browser may take at the identity provider.
const LOGIN_LIFETIME: Duration = Duration::from_secs(600);
/// The sealed flow's associated context: a cookie sealed for anything else does not open here.
const SEAL_CONTEXT: &str = "browser-login";
/// The longest `next` kept; a longer one returns to `/`.
const MAX_NEXT: usize = 2048;
const LOGOUT_PURPOSE: &str = "logout";

pub fn router() -> Router<PagesState> {
    Router::new()
        .route(routes::LOGIN, get(login))
        .route(routes::LOGIN_CALLBACK, get(callback))
        .route(routes::LOGOUT, get(confirm_logout).post(logout))
}

/// Where a page sends a browser to sign in and come back to `path` (a route's path with its
/// query, without the public URL's prefix), as the browser sees it: under the prefix.
fn login_path(state: &PagesState, path: &str) -> String {
    state.public_url.path(&routes::login(path))
}

/// `next` when it is a path on this server, else `/`: never `//host` or `/\host`, which browsers
/// read as another site. A route's path: the public URL's prefix is put before it on the way back.
fn local_path(next: Option<&str>) -> String {
    match next {
        Some(path)
            if path.starts_with('/')
                && !path.starts_with("//")
                && !path.starts_with("/\\")
                && path.len() <= MAX_NEXT
                && path.bytes().all(|b| b.is_ascii_graphic()) =>
        {
            path.to_owned()
        }
        _ => "/".to_owned(),
    }
}

/// The pages' sign-in, or who signs users in instead outside `oauth` mode.
fn sign_in(state: &PagesState) -> Result<&SignIn, PageError> {
    state.sign_in.as_deref().ok_or(match state.config.identity.mode {
        IdentityMode::Header => PageError::SignInElsewhere(
            "gatehouse does not sign you in or out itself: the sign-in service in front of it does.",
        ),
        _ => PageError::SignInElsewhere("gatehouse serves the one user at this computer: there is no sign-in."),
    })
}

/// A sign-in in progress, sealed into its cookie.
#[derive(Serialize, Deserialize)]
struct LoginFlow {
    state: String,
    nonce: String,
    pkce_verifier: String,
    next: String,
    /// Unix seconds.
    expires_at: i64,
}

impl LoginFlow {
    fn seal(&self, state: &PagesState) -> Result<String, PageError> {
        let json = serde_json::to_vec(self).map_err(|e| PageError::Internal(format!("sealing a sign-in: {e}")))?;
        Ok(URL_SAFE_NO_PAD.encode(state.vault.encrypt(&json, SEAL_CONTEXT)))
    }

    /// The flow in `sealed`, when gatehouse sealed it and it has not expired.
    fn open(state: &PagesState, sealed: &str) -> Option<Self> {
        let bytes = URL_SAFE_NO_PAD.decode(sealed).ok()?;
        let json = state.vault.decrypt(&bytes, SEAL_CONTEXT).ok()?;
        let flow: Self = serde_json::from_slice(&json).ok()?;
        (flow.expires_at > Utc::now().timestamp()).then_some(flow)
    }
}

/// One cookie per sign-in, named after its state, so sign-ins in two tabs do not overwrite each
/// other.
fn flow_cookie_name(state: &PagesState, oauth_state: &str) -> String {
    state
        .public_url
        .cookie_name(&format!("gatehouse-login-{}", &sha256_hex(oauth_state)[..16]))
}

async fn login(State(state): State<PagesState>, RawQuery(query): RawQuery) -> Result<Response, PageError> {
    let next = query.as_deref().and_then(|query| {
        url::form_urlencoded::parse(query.as_bytes())
            .find(|(key, _)| key == "next")
            .map(|(_, value)| value.into_owned())
    });
    let started = sign_in(&state)?.start().await.map_err(unavailable)?;
    let flow = LoginFlow {
        state: started.state.expose().clone(),
        nonce: started.nonce.expose().clone(),
        pkce_verifier: started.pkce_verifier.expose().clone(),
        next: local_path(next.as_deref()),
        expires_at: Utc::now().timestamp() + LOGIN_LIFETIME.as_secs() as i64,
    };
    let name = flow_cookie_name(&state, &flow.state);
    let cookie = cookies::set(&state, &name, &flow.seal(&state)?, LOGIN_LIFETIME)?;
    Ok((
        StatusCode::FOUND,
        [
            (LOCATION, cookies::header_value(started.url.as_str())?),
            (SET_COOKIE, cookie),
        ],
    )
        .into_response())
}

/// The provider could not be reached: logged here, a 502 page for the browser.
fn unavailable(error: SignInError) -> PageError {
    match error {
        SignInError::Unavailable(reason) => {
            tracing::warn!(%reason, "the pages' sign-in cannot reach the identity provider");
            PageError::ProviderUnavailable
        }
        SignInError::Refused(reason) => PageError::SignInFailed { reason, retry: None },
    }
}

async fn callback(
    State(state): State<PagesState>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Result<Response, PageError> {
    let sign_in = sign_in(&state)?;
    let mut params = HashMap::new();
    for (key, value) in url::form_urlencoded::parse(query.as_deref().unwrap_or_default().as_bytes()) {
        params.entry(key.into_owned()).or_insert_with(|| value.into_owned());
    }
    let Some(oauth_state) = params.get("state") else {
        return Err(refused(
            "The answer from the identity provider does not say which sign-in it is for.",
            None,
        ));
    };
    // The flow ends here whatever the outcome: its cookie goes.
    let name = flow_cookie_name(&state, oauth_state);
    let dropped = cookies::expire(&state, &name)?;
    let finished = finish(&state, sign_in, &params, cookies::read(&headers, &name)).await;
    // Appended: a session's cookie may be set already.
    Ok((AppendHeaders([(SET_COOKIE, dropped)]), finished).into_response())
}

/// Checks the answer against the sealed flow, then has `sign_in` finish it into a session.
async fn finish(
    state: &PagesState,
    sign_in: &SignIn,
    params: &HashMap<String, String>,
    sealed: Option<&str>,
) -> Result<Response, PageError> {
    let flow = sealed
        .and_then(|sealed| LoginFlow::open(state, sealed))
        .filter(|flow| params.get("state") == Some(&flow.state))
        .ok_or_else(|| {
            refused(
                "This sign-in was not started in this browser, or took longer than ten minutes.",
                None,
            )
        })?;
    let retry = Some(login_path(state, &flow.next));
    if let Some(error) = params.get("error") {
        let reason = match error.as_str() {
            "access_denied" => "The identity provider did not let you sign in (access_denied).".to_owned(),
            other => format!(
                "The identity provider refused the sign-in ({}).",
                other
                    .chars()
                    .filter(char::is_ascii_graphic)
                    .take(64)
                    .collect::<String>()
            ),
        };
        return Err(refused(&reason, retry));
    }
    // RFC 9207: a provider that names itself must be ours (no mix-up with another provider).
    if params
        .get("iss")
        .is_some_and(|iss| iss.trim_end_matches('/') != sign_in.issuer())
    {
        return Err(refused("The answer came from another identity provider.", retry));
    }
    let Some(code) = params.get("code") else {
        return Err(refused("The identity provider sent no sign-in code.", retry));
    };
    let signed_in = match sign_in.finish(code, &flow.nonce, &flow.pkce_verifier).await {
        Ok(signed_in) => signed_in,
        Err(SignInError::Refused(reason)) => {
            tracing::info!(%reason, "a page sign-in was refused");
            return Err(refused(
                "The identity provider's answer did not prove who you are.",
                retry,
            ));
        }
        Err(unreachable) => return Err(self::unavailable(unreachable)),
    };
    tracing::info!(principal = %signed_in.principal, "a browser signed in to the pages");
    let cookie = browser_sessions::start(state, &signed_in).await?;
    Ok((
        StatusCode::SEE_OTHER,
        [
            (LOCATION, cookies::header_value(&state.public_url.path(&flow.next))?),
            (SET_COOKIE, cookie),
        ],
    )
        .into_response())
}

fn refused(reason: &str, retry: Option<String>) -> PageError {
    tracing::info!(reason, "a page sign-in did not finish");
    PageError::SignInFailed {
        reason: reason.to_owned(),
        retry,
    }
}

#[derive(Serialize)]
struct LogoutPage {
    signed_in_as: String,
    csrf: String,
}
impl Page for LogoutPage {
    const NAME: &'static str = "logout.html";
}

async fn confirm_logout(
    State(state): State<PagesState>,
    CurrentSession(session): CurrentSession,
) -> Result<PageResponse, PageError> {
    sign_in(&state)?;
    let Some(session) = session else {
        return Ok(PageResponse::new(
            NoticePage::new("Not signed in", "This browser is not signed in to gatehouse.", None)
                .with_link(login_path(&state, routes::CONNECTIONS), "Sign in"),
        ));
    };
    Ok(PageResponse::new(LogoutPage {
        signed_in_as: session.signed_in_as(),
        csrf: CsrfBinding::new(LOGOUT_PURPOSE, &session.id).token(&state, &session.principal),
    }))
}

#[derive(Deserialize)]
struct LogoutForm {
    csrf: String,
}

async fn logout(
    State(state): State<PagesState>,
    CurrentSession(session): CurrentSession,
    Posted(form): Posted<LogoutForm>,
) -> Result<Response, PageError> {
    sign_in(&state)?;
    let dropped = match session {
        Some(session) => {
            CsrfBinding::new(LOGOUT_PURPOSE, &session.id).check(&state, &session.principal, &form.csrf)?;
            tracing::info!(principal = %session.principal, "a browser signed out of the pages");
            browser_sessions::end(&state, &session).await?
        }
        None => browser_sessions::dropped(&state)?,
    };
    let page = PageResponse::new(NoticePage::new(
        "Signed out",
        "This browser is signed out of gatehouse.",
        Some("You may still be signed in at your identity provider."),
    ));
    Ok(([(SET_COOKIE, dropped)], page).into_response())
}

#[cfg(test)]
pub(crate) fn samples() -> Vec<super::templates::Sample> {
    vec![super::templates::Sample::of(LogoutPage {
        signed_in_as: "Alice O'Neil (alice@example.com)".to_owned(),
        csrf: "c5rf".to_owned(),
    })]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_is_a_path_on_this_server() {
        for (next, kept) in [
            (Some("/connect/abc?x=1"), "/connect/abc?x=1"),
            (Some("/"), "/"),
            (Some("//evil.example/x"), "/"),
            (Some("/\\evil.example"), "/"),
            (Some("https://evil.example/"), "/"),
            (Some("connect/abc"), "/"),
            (Some("/a b"), "/"),
            (Some("/a\r\nSet-Cookie: x=1"), "/"),
            (Some("/é"), "/"),
            (None, "/"),
        ] {
            assert_eq!(local_path(next), kept, "{next:?}");
        }
        assert_eq!(local_path(Some(&format!("/{}", "a".repeat(MAX_NEXT)))), "/");
    }
}
