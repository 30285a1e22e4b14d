//! The pages a user opens from an elicitation: `/connect/{id}` (what is asked, Continue or
//! Decline) and the OAuth callback. Every page checks that the browser's principal is the one
//! the elicitation was issued to, so a forwarded or edited link changes nothing.

use std::net::SocketAddr;

use askama::Template;
use axum::Form;
use axum::Router;
use axum::extract::rejection::FormRejection;
use axum::extract::{ConnectInfo, Path, RawQuery, State};
use axum::http::header::{COOKIE, LOCATION, ORIGIN, SET_COOKIE};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use chrono::{DateTime, Utc};
use serde::Deserialize;

use super::page;
use crate::domain::{ElicitationId, Principal};
use crate::error::AppError;
use crate::gate::{CALLBACK_PATH, CallbackOutcome, CallbackRefusal};
use crate::state::AppState;
use crate::store::{ElicitationRecord, ElicitationStatus};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/connect/{id}", get(show).post(act))
        .route(CALLBACK_PATH, get(callback))
}

#[derive(Template)]
#[template(path = "connect.html")]
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

#[derive(Template)]
#[template(path = "notice.html")]
struct Notice {
    heading: String,
    message: String,
    next_step: Option<String>,
}

/// A page with a heading, a message and the status it is sent with.
fn notice(
    status: StatusCode,
    heading: &str,
    message: impl Into<String>,
    next_step: Option<String>,
) -> Result<Response, AppError> {
    let mut response = page(&Notice {
        heading: heading.into(),
        message: message.into(),
        next_step,
    })?;
    *response.status_mut() = status;
    Ok(response)
}

fn when(at: DateTime<Utc>) -> String {
    at.format("%Y-%m-%d %H:%M UTC").to_string()
}

/// A refusal page, boxed because handlers pass it back up instead of what they asked for.
fn refusal(status: StatusCode, heading: &str, message: &str, next_step: Option<String>) -> Box<Response> {
    Box::new(notice(status, heading, message, next_step).unwrap_or_else(IntoResponse::into_response))
}

/// The browser's principal, or the page to show instead.
fn browser_principal(state: &AppState, headers: &HeaderMap, peer: SocketAddr) -> Result<Principal, Box<Response>> {
    state.identity.principal(headers, peer).map_err(|e| {
        tracing::info!(%peer, reason = %e, "unidentified browser");
        refusal(
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
        StatusCode::GONE,
        heading,
        message,
        Some("Ask your assistant to try again if you still need it.".into()),
    ))
}

/// The browser's principal and the elicitation behind the link, which must be theirs; or the
/// page to show instead.
async fn browser_elicitation(
    state: &AppState,
    headers: &HeaderMap,
    peer: SocketAddr,
    id: &str,
) -> Result<(Principal, ElicitationRecord), Box<Response>> {
    let principal = browser_principal(state, headers, peer)?;
    let elicitation = owned_elicitation(state, id, &principal).await?;
    Ok((principal, elicitation))
}

fn csrf_message(principal: &Principal, id: &ElicitationId) -> Vec<u8> {
    format!("{principal}\n{id}").into_bytes()
}

async fn show(
    State(state): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, AppError> {
    let (principal, elicitation) = match browser_elicitation(&state, &headers, peer, &id).await {
        Ok(found) => found,
        Err(page) => return Ok(*page),
    };
    let Some((provider, scopes)) = state.gate.provider_of(&elicitation) else {
        return notice(
            StatusCode::NOT_FOUND,
            "Unknown request",
            "This request names nothing gatehouse can do.",
            None,
        );
    };
    page(&ConnectPage {
        id: elicitation.id.to_string(),
        provider: provider.name.clone(),
        client_name: elicitation.client_name.clone(),
        scopes,
        destination: provider.authorize_url.host_str().unwrap_or_default().to_owned(),
        principal: principal.to_string(),
        created: when(elicitation.created_at),
        expires: when(elicitation.expires_at),
        csrf: state
            .gate
            .vault()
            .mac("connect", &csrf_message(&principal, &elicitation.id)),
    })
}

#[derive(Deserialize)]
struct ConnectForm {
    action: String,
    csrf: String,
}

async fn act(
    State(state): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Path(id): Path<String>,
    headers: HeaderMap,
    form: Result<Form<ConnectForm>, FormRejection>,
) -> Result<Response, AppError> {
    let (principal, elicitation) = match browser_elicitation(&state, &headers, peer, &id).await {
        Ok(found) => found,
        Err(page) => return Ok(*page),
    };
    let public_origin = state.config.public_url().origin().ascii_serialization();
    let cross_site = headers
        .get(ORIGIN)
        .is_some_and(|o| o.as_bytes() != public_origin.as_bytes());
    let Some(Form(form)) = form.ok().filter(|f| {
        !cross_site
            && state
                .gate
                .vault()
                .verify_mac("connect", &csrf_message(&principal, &elicitation.id), &f.csrf)
    }) else {
        return notice(
            StatusCode::FORBIDDEN,
            "Request refused",
            "This form was not submitted from this page. Nothing was changed.",
            Some("Open the link from your assistant again.".into()),
        );
    };
    match form.action.as_str() {
        "decline" => {
            state.gate.finish(&elicitation, ElicitationStatus::Declined).await?;
            notice(
                StatusCode::OK,
                "Declined",
                format!("You declined. {} has been told.", elicitation.client_name),
                Some("You can close this window.".into()),
            )
        }
        "continue" => {
            let secure = state.config.public_url().scheme() == "https";
            let Some(flow) = state.gate.start_flow(&elicitation, secure).await? else {
                return notice(
                    StatusCode::NOT_FOUND,
                    "Unknown request",
                    "This request names nothing gatehouse can do.",
                    None,
                );
            };
            let mut cookie = format!(
                "{}={}; Path=/; HttpOnly; SameSite=Lax; Max-Age=600",
                flow.cookie_name, flow.cookie_value
            );
            if secure {
                cookie.push_str("; Secure");
            }
            let mut response = StatusCode::SEE_OTHER.into_response();
            response
                .headers_mut()
                .insert(LOCATION, HeaderValue::from_str(flow.authorize_url.as_str())?);
            response
                .headers_mut()
                .insert(SET_COOKIE, HeaderValue::from_str(&cookie)?);
            Ok(response)
        }
        _ => notice(
            StatusCode::BAD_REQUEST,
            "Unknown action",
            "Choose Continue or Decline.",
            None,
        ),
    }
}

/// The value of cookie `name`, from any Cookie header.
fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value)
}

async fn callback(
    State(state): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Result<Response, AppError> {
    let params: Vec<(String, String)> = url::form_urlencoded::parse(query.unwrap_or_default().as_bytes())
        .into_owned()
        .collect();
    let param = |name: &str| params.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str());
    let refused = |refusal: CallbackRefusal| {
        tracing::info!(%peer, reason = %refusal, "OAuth callback refused");
        notice(
            StatusCode::BAD_REQUEST,
            "Sign-in not completed",
            refusal.to_string(),
            Some("Nothing was stored.".into()),
        )
    };
    let Some(state_param) = param("state").filter(|s| !s.is_empty() && s.len() <= 512) else {
        return refused(CallbackRefusal::UnknownState);
    };
    let principal = match browser_principal(&state, &headers, peer) {
        Ok(principal) => principal,
        Err(page) => return Ok(*page),
    };
    let secure = state.config.public_url().scheme() == "https";
    let Some((flow, cookie_name)) = state.gate.flow_for_state(state_param, secure).await? else {
        return refused(CallbackRefusal::UnknownState);
    };
    let elicitation = match state
        .gate
        .check_callback(&flow, cookie(&headers, &cookie_name), &principal, param("iss"))
        .await
    {
        Ok(elicitation) => elicitation,
        Err(refusal) => return refused(refusal),
    };
    let outcome = match state
        .gate
        .complete_callback(&flow, &elicitation, param("code"), param("error"))
        .await?
    {
        Ok(outcome) => outcome,
        Err(refusal) => return refused(refusal),
    };
    let mut response = match outcome {
        CallbackOutcome::Connected {
            provider_name,
            account_label,
            client_name,
        } => notice(
            StatusCode::OK,
            "Connected",
            match account_label {
                Some(label) => format!("Your {provider_name} account {label} is connected."),
                None => format!("Your {provider_name} account is connected."),
            },
            Some(format!("You can close this window and return to {client_name}.")),
        )?,
        CallbackOutcome::Declined { provider_name } => notice(
            StatusCode::OK,
            "Declined",
            format!("You declined at {provider_name}. Your assistant has been told."),
            Some("You can close this window.".into()),
        )?,
        CallbackOutcome::Failed { provider_name } => notice(
            StatusCode::BAD_GATEWAY,
            "Sign-in failed",
            format!("{provider_name} did not complete the sign-in."),
            Some("Ask your assistant to try again.".into()),
        )?,
    };
    // The flow is used up: drop its cookie.
    let expired = format!(
        "{cookie_name}=; Path=/; HttpOnly; SameSite=Lax; Max-Age=0{}",
        if secure { "; Secure" } else { "" }
    );
    response
        .headers_mut()
        .insert(SET_COOKIE, HeaderValue::from_str(&expired)?);
    Ok(response)
}
