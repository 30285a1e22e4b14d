//! The pages a user opens from a sign-in elicitation: `/connect/{id}` (what is asked, Continue or
//! Decline) and the OAuth callback. Both check that the browser's principal is the one the
//! elicitation was issued to, so a forwarded or edited link changes nothing.

use std::time::Duration;

use axum::Router;
use axum::extract::{Path, RawQuery, State};
use axum::http::header::{LOCATION, SET_COOKIE};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::{Deserialize, Serialize};

use super::cookies;
use super::error::{NoticePage, PageError, START_AGAIN};
use super::extract::{Browser, CsrfBinding, OwnedElicitation, Posted, when};
use super::page::PageResponse;
use super::state::PagesState;
use super::templates::Page;
use crate::audit::Origin;
use crate::edge::Peer;
use crate::gate::{CallbackOutcome, CallbackParams, ProviderErrorCode};
use crate::routes;
use crate::store::{ElicitationRecord, ElicitationStatus};

const PURPOSE: &str = "connect";
/// How long a browser may take at the provider.
const FLOW_COOKIE_LIFETIME: Duration = Duration::from_secs(600);

pub fn router() -> Router<PagesState> {
    Router::new()
        .route(routes::CONNECT, get(show).post(act))
        .route(routes::OAUTH_CALLBACK, get(callback))
        .route(routes::REMOTE_CALLBACK, get(remote_callback))
}

#[derive(Serialize)]
struct ConnectPage {
    id: String,
    provider: String,
    client_name: String,
    scopes: Vec<String>,
    destination: String,
    principal: String,
    created: String,
    expires: String,
    csrf: String,
}
impl Page for ConnectPage {
    const NAME: &'static str = "connect.html";
}

async fn show(
    State(state): State<PagesState>,
    OwnedElicitation {
        principal, elicitation, ..
    }: OwnedElicitation,
) -> Result<PageResponse, PageError> {
    let (provider, scopes) = state
        .gate
        .connections()
        .provider_of(&elicitation)
        .await?
        .ok_or(PageError::UnknownRequest)?;
    Ok(PageResponse::new(ConnectPage {
        id: elicitation.id.to_string(),
        provider: provider.name.clone(),
        client_name: elicitation.client_name.clone(),
        scopes,
        destination: provider.authorize_url.host_str().unwrap_or_default().to_owned(),
        principal: principal.to_string(),
        created: when(elicitation.created_at),
        expires: when(elicitation.expires_at),
        csrf: CsrfBinding::new(PURPOSE, elicitation.id).token(&state, &principal),
    })
    .with_form_target(&provider.authorize_url))
}

#[derive(Deserialize)]
struct ConnectForm {
    action: String,
    csrf: String,
}

async fn act(
    State(state): State<PagesState>,
    OwnedElicitation {
        principal,
        elicitation,
        from,
    }: OwnedElicitation,
    Posted(form): Posted<ConnectForm>,
) -> Result<Response, PageError> {
    CsrfBinding::new(PURPOSE, elicitation.id).check(&state, &principal, &form.csrf)?;
    match form.action.as_str() {
        "decline" => Ok(declined(&state, &elicitation, &from, "Declined", "declined")
            .await?
            .into_response()),
        "continue" => {
            let flow = state
                .gate
                .connections()
                .start_flow(&elicitation)
                .await?
                .ok_or(PageError::UnknownRequest)?;
            let cookie = cookies::set(&state, &flow.cookie_name, &flow.cookie_value, FLOW_COOKIE_LIFETIME)?;
            Ok((
                StatusCode::SEE_OTHER,
                [
                    (LOCATION, cookies::header_value(flow.authorize_url.as_str())?),
                    (SET_COOKIE, cookie),
                ],
            )
                .into_response())
        }
        _ => Err(PageError::UnknownAction("Choose Continue or Decline.")),
    }
}

/// The user said no on a page: the elicitation is declined and its client told.
pub async fn declined(
    state: &PagesState,
    elicitation: &ElicitationRecord,
    from: &Origin,
    heading: &str,
    verb: &str,
) -> Result<PageResponse, PageError> {
    state
        .gate
        .elicitations()
        .finish(elicitation, ElicitationStatus::Declined, from)
        .await?;
    Ok(PageResponse::new(NoticePage::new(
        heading,
        format!("You {verb}. {} has been told.", elicitation.client_name),
        Some("You can close this window."),
    )))
}

/// The configured providers' callback: a remote MCP server's sign-in arriving here ends (the
/// gate refuses it as another sign-in's).
async fn callback(
    State(state): State<PagesState>,
    Peer(peer): Peer,
    uri: Uri,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Result<Response, PageError> {
    answer(&state, peer, &uri, query.as_deref(), &headers, None).await
}

/// A remote MCP server's authorization server's own callback.
async fn remote_callback(
    State(state): State<PagesState>,
    Peer(peer): Peer,
    Path(upstream): Path<String>,
    uri: Uri,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Result<Response, PageError> {
    answer(&state, peer, &uri, query.as_deref(), &headers, Some(&upstream)).await
}

/// A provider's answer at the callback of key `at` (None: the configured providers').
async fn answer(
    state: &PagesState,
    peer: std::net::SocketAddr,
    uri: &Uri,
    query: Option<&str>,
    headers: &HeaderMap,
    at: Option<&str>,
) -> Result<Response, PageError> {
    let refused = |refusal, retry| {
        tracing::info!(%peer, reason = %refusal, "OAuth callback refused");
        PageError::CallbackRefused { refusal, retry }
    };
    let params = CallbackParams::from_query(query.unwrap_or_default()).map_err(|refusal| refused(refusal, None))?;
    let params = match at {
        Some(key) => params.arrived_at(key),
        None => params,
    };
    let Browser { principal, from, .. } = Browser::from_parts(state, &Method::GET, uri, headers, peer).await?;
    let connections = state.gate.connections();
    let cookie_name = connections.flow_cookie_name(&params);
    let page = match connections
        .callback(&principal, &params, cookies::read(headers, &cookie_name), &from)
        .await?
    {
        CallbackOutcome::Refused { refusal, retry } => return Err(refused(refusal, retry)),
        CallbackOutcome::Connected {
            provider_name,
            account_label,
            client_name,
        } => PageResponse::new(
            NoticePage::new(
                "Connected",
                match account_label {
                    Some(label) => format!("Your {provider_name} account {label} is connected."),
                    None => format!("Your {provider_name} account is connected."),
                },
                Some(&format!("You can close this window and return to {client_name}.")),
            )
            .with_link(state.public_url.path(routes::CONNECTIONS), "See your connections"),
        ),
        CallbackOutcome::Declined { provider_name } => PageResponse::new(NoticePage::new(
            "Declined",
            format!("You declined at {provider_name}. Your assistant has been told."),
            Some("You can close this window."),
        )),
        CallbackOutcome::ProviderFailed {
            provider_name,
            error,
            retry,
        } => PageResponse::new(
            NoticePage::new(
                "Sign-in failed",
                match error {
                    Some(code) => format!(
                        "{provider_name} answered with an error: {}. Nothing was stored.",
                        in_words(&code)
                    ),
                    None => format!("{provider_name} could not be reached to finish the sign-in. Nothing was stored."),
                },
                Some("This is often temporary: try again."),
            )
            .with_link(retry, START_AGAIN),
        )
        .with_status(StatusCode::BAD_GATEWAY),
        CallbackOutcome::Unfinished {
            provider_name,
            retry,
            outage,
        } => PageResponse::new(
            NoticePage::new(
                "Sign-in did not finish",
                format!("gatehouse could not record the answer from {provider_name}, so the sign-in did not finish."),
                Some("Your request is still open: start again in a moment."),
            )
            .with_link(retry, START_AGAIN),
        )
        .with_status(if outage {
            StatusCode::SERVICE_UNAVAILABLE
        } else {
            StatusCode::INTERNAL_SERVER_ERROR
        }),
    };
    // The flow is used up: drop its cookie.
    Ok(([(SET_COOKIE, cookies::expire(state, &cookie_name)?)], page).into_response())
}

/// A provider's OAuth error code in plain words, the code itself kept for whoever reports it.
fn in_words(code: &ProviderErrorCode) -> String {
    let words = match code.as_str() {
        "server_error" => "it had a problem on its side",
        "temporarily_unavailable" => "it is busy or down for a moment",
        "invalid_scope" => "it does not grant the permissions asked for",
        "invalid_grant" => "it did not accept the sign-in code",
        "invalid_client" | "unauthorized_client" => "it does not accept gatehouse's registration",
        _ => "it refused the sign-in",
    };
    format!("{words} ({code})")
}

#[cfg(test)]
pub(crate) fn samples() -> Vec<super::templates::Sample> {
    let page = |scopes: &[&str]| ConnectPage {
        id: "0190b6f4-aaaa".to_owned(),
        provider: "GitHub <Enterprise>".to_owned(),
        client_name: "Claude \"Code\"".to_owned(),
        scopes: scopes.iter().map(|s| (*s).to_owned()).collect(),
        destination: "github.example".to_owned(),
        principal: "alice@example.com".to_owned(),
        created: "2026-12-03 10:00 UTC".to_owned(),
        expires: "2026-12-03 10:10 UTC".to_owned(),
        csrf: "c5rf/t0k+n".to_owned(),
    };
    vec![
        super::templates::Sample::of(page(&["repo", "read:org"])),
        super::templates::Sample::of(page(&[])),
    ]
}
