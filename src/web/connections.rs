//! `/connections`: what the signed-in user has given gatehouse (connected accounts and saved form
//! answers), with the means to take it back. Secrets are never shown, only that they are stored.

use std::net::SocketAddr;

use askama::Template;
use axum::Form;
use axum::Router;
use axum::extract::rejection::FormRejection;
use axum::extract::{ConnectInfo, State};
use axum::http::header::LOCATION;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::{Deserialize, Serialize};

use super::browser::{browser_principal, csrf_token, forged_post, genuine_post, notice, when};
use super::page;
use super::pages::page as page_template;
use crate::domain::Principal;
use crate::error::AppError;
use crate::forms::FormScope;
use crate::state::AppState;

pub const CONNECTIONS_PATH: &str = "/connections";
const PURPOSE: &str = "connections";

pub fn router() -> Router<AppState> {
    Router::new().route(CONNECTIONS_PATH, get(show).post(act))
}

#[derive(Serialize)]
struct ConnectionRow {
    provider: String,
    provider_name: String,
    account_label: Option<String>,
    scopes: Vec<String>,
    active: bool,
    connected_at: String,
}

#[derive(Serialize)]
struct FormRow {
    id: String,
    title: String,
    stored: bool,
    /// (label, value) of each saved answer; secrets only say that they are stored.
    lines: Vec<(String, String)>,
}

#[derive(Template, Serialize)]
#[template(path = "connections.html", blocks = ["title", "content"])]
struct ConnectionsPage {
    principal: String,
    status: Option<String>,
    connections: Vec<ConnectionRow>,
    forms: Vec<FormRow>,
    csrf: String,
}
page_template!(ConnectionsPage, "connections.html");

/// After a change: back to the list (303, so a reload does not post again).
pub fn redirect_to_connections() -> Result<Response, AppError> {
    let mut response = StatusCode::SEE_OTHER.into_response();
    response
        .headers_mut()
        .insert(LOCATION, HeaderValue::from_static(CONNECTIONS_PATH));
    Ok(response)
}

async fn render(state: &AppState, principal: &Principal, status: Option<String>) -> Result<Response, AppError> {
    let connections = state
        .gate
        .connections(principal)
        .await?
        .into_iter()
        .map(|c| ConnectionRow {
            provider: c.provider,
            provider_name: c.provider_name,
            account_label: c.account_label,
            scopes: c.scopes,
            active: c.active,
            connected_at: when(c.connected_at),
        })
        .collect();
    let stored = state.gate.stored_forms(principal).await?;
    let forms = state
        .gate
        .forms()
        .iter()
        .filter(|f| f.scope == FormScope::User)
        .map(|form| {
            let saved = stored.iter().find(|(f, _, _)| f.id == form.id);
            FormRow {
                id: form.id.clone(),
                title: form.title.clone(),
                stored: saved.is_some(),
                lines: saved.map_or_else(Vec::new, |(_, values, secrets)| form.summary(values, secrets)),
            }
        })
        .collect();
    page(
        state,
        &ConnectionsPage {
            principal: principal.to_string(),
            status,
            connections,
            forms,
            csrf: csrf_token(state, PURPOSE, principal, CONNECTIONS_PATH),
        },
    )
}

async fn show(
    State(state): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
) -> Result<Response, AppError> {
    match browser_principal(&state, &headers, peer) {
        Ok(principal) => render(&state, &principal, None).await,
        Err(page) => Ok(*page),
    }
}

#[derive(Deserialize)]
struct Action {
    csrf: String,
    action: String,
    provider: Option<String>,
    form: Option<String>,
}

async fn act(
    State(state): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    body: Result<Form<Action>, FormRejection>,
) -> Result<Response, AppError> {
    let principal = match browser_principal(&state, &headers, peer) {
        Ok(principal) => principal,
        Err(page) => return Ok(*page),
    };
    let Some(Form(action)) = body
        .ok()
        .filter(|f| genuine_post(&state, &headers, PURPOSE, &principal, CONNECTIONS_PATH, &f.csrf))
    else {
        return forged_post(&state);
    };
    let status = match (action.action.as_str(), action.provider, action.form) {
        ("disconnect", Some(provider), _) => match state.gate.disconnect(&principal, &provider).await? {
            None => format!("Nothing was connected at {provider}."),
            Some(Some(false)) => format!(
                "Disconnected {provider}. The service did not confirm revoking access; you can also revoke it in \
                 your account settings there."
            ),
            Some(_) => format!("Disconnected {provider}."),
        },
        ("delete-form", _, Some(form)) => {
            if state.gate.delete_form_values(&principal, &form).await? {
                let title = state
                    .gate
                    .forms()
                    .get(&form)
                    .map_or(form.as_str(), |f| f.title.as_str());
                format!("Deleted your answers to \"{title}\".")
            } else {
                "There was nothing saved to delete.".to_owned()
            }
        }
        _ => {
            return notice(
                &state,
                StatusCode::BAD_REQUEST,
                "Unknown action",
                "Choose Disconnect or Delete.",
                None,
            );
        }
    };
    render(&state, &principal, Some(status)).await
}
