//! The pages a user opens from an elicitation: `/connect/{id}` (what is asked, Continue or
//! Decline) and the OAuth callback. Every page checks that the browser's principal is the one
//! the elicitation was issued to, so a forwarded or edited link changes nothing.

use std::net::SocketAddr;

use askama::Template;
use axum::Form;
use axum::Router;
use axum::extract::rejection::FormRejection;
use axum::extract::{ConnectInfo, Path, RawQuery, State};
use axum::http::header::{COOKIE, LOCATION, SET_COOKIE};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::{Deserialize, Serialize};

use super::browser::{
    browser_elicitation, browser_principal, csrf_token, declined, forged_post, genuine_post, notice, when,
};
use super::page;
use super::pages::page as page_template;
use crate::error::AppError;
use crate::gate::{CALLBACK_PATH, CallbackOutcome, CallbackRefusal};
use crate::state::AppState;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/connect/{id}", get(show).post(act))
        .route(CALLBACK_PATH, get(callback))
}

#[derive(Template, Serialize)]
#[template(path = "connect.html", blocks = ["title", "content"])]
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
page_template!(ConnectPage, "connect.html");

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
            &state,
            StatusCode::NOT_FOUND,
            "Unknown request",
            "This request names nothing gatehouse can do.",
            None,
        );
    };
    page(
        &state,
        &ConnectPage {
            id: elicitation.id.to_string(),
            provider: provider.name.clone(),
            client_name: elicitation.client_name.clone(),
            scopes,
            destination: provider.authorize_url.host_str().unwrap_or_default().to_owned(),
            principal: principal.to_string(),
            created: when(elicitation.created_at),
            expires: when(elicitation.expires_at),
            csrf: csrf_token(&state, "connect", &principal, &elicitation.id.to_string()),
        },
    )
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
    let subject = elicitation.id.to_string();
    let Some(Form(form)) = form
        .ok()
        .filter(|f| genuine_post(&state, &headers, "connect", &principal, &subject, &f.csrf))
    else {
        return forged_post(&state);
    };
    match form.action.as_str() {
        "decline" => declined(&state, &elicitation, "Declined", "declined").await,
        "continue" => {
            let secure = state.config.public_url().scheme() == "https";
            let Some(flow) = state.gate.start_flow(&elicitation, secure).await? else {
                return notice(
                    &state,
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
            &state,
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
            &state,
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
            &state,
            StatusCode::OK,
            "Connected",
            match account_label {
                Some(label) => format!("Your {provider_name} account {label} is connected."),
                None => format!("Your {provider_name} account is connected."),
            },
            Some(format!("You can close this window and return to {client_name}.")),
        )?,
        CallbackOutcome::Declined { provider_name } => notice(
            &state,
            StatusCode::OK,
            "Declined",
            format!("You declined at {provider_name}. Your assistant has been told."),
            Some("You can close this window.".into()),
        )?,
        CallbackOutcome::Failed { provider_name } => notice(
            &state,
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
