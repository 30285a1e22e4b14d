//! `/connections`: what the signed-in user has given gatehouse (connected accounts and saved form
//! answers), with the means to take it back. Secrets are never shown, only that they are stored.

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::http::header::LOCATION;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::{Deserialize, Serialize};

use super::error::PageError;
use super::extract::{Browser, CsrfBinding, Posted, when};
use super::page::PageResponse;
use super::state::PagesState;
use super::templates::Page;
use crate::forms::FormScope;
use crate::gate::Disconnected;
use crate::routes;
use crate::tools::Offerings;

const PURPOSE: &str = "connections";

pub fn router() -> Router<PagesState> {
    Router::new().route(routes::CONNECTIONS, get(show).post(act))
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

/// An upstream MCP server and what the user still lacks for its tools.
#[derive(Serialize)]
struct UpstreamRow {
    id: String,
    tools: usize,
    needs: Vec<String>,
}

#[derive(Serialize)]
struct ConnectionsPage {
    principal: String,
    /// In `oauth` mode the pages have their own sign-in, and so a sign-out.
    sign_out: bool,
    status: Option<String>,
    connections: Vec<ConnectionRow>,
    forms: Vec<FormRow>,
    upstreams: Vec<UpstreamRow>,
    csrf: String,
}
impl Page for ConnectionsPage {
    const NAME: &'static str = "connections.html";
}

/// After a change: back to the list (303, so a reload does not post again).
pub fn redirect_to_connections(state: &PagesState) -> Result<Response, PageError> {
    let location = super::cookies::header_value(&state.public_url.path(routes::CONNECTIONS))?;
    Ok((StatusCode::SEE_OTHER, [(LOCATION, location)]).into_response())
}

fn csrf() -> CsrfBinding {
    CsrfBinding::new(PURPOSE, routes::CONNECTIONS)
}

async fn render(state: &PagesState, browser: &Browser, status: Option<String>) -> Result<PageResponse, PageError> {
    let principal = &browser.principal;
    let connections = state
        .gate
        .connections()
        .summaries(principal)
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
    let values = state.gate.form_values();
    let stored = values.all_stored(principal).await?;
    let forms = values
        .forms()
        .iter()
        .filter(|f| f.scope == FormScope::User)
        .map(|form| {
            let saved = stored.iter().find(|(f, _)| f.id == form.id).map(|(_, values)| values);
            FormRow {
                id: form.id.clone(),
                title: form.title.clone(),
                stored: saved.is_some(),
                lines: saved.map_or_else(Vec::new, |saved| form.summary(&saved.values, &saved.secret_names)),
            }
        })
        .collect();
    let mut upstreams = Vec::new();
    for offering in state.upstreams.offerings() {
        upstreams.push(UpstreamRow {
            needs: state.gate.unmet(principal, &offering.requires).await?,
            id: offering.id,
            tools: offering.tools,
        });
    }
    Ok(PageResponse::new(ConnectionsPage {
        principal: browser.signed_in_as.clone().unwrap_or_else(|| principal.to_string()),
        sign_out: browser.signed_in_as.is_some(),
        status,
        connections,
        forms,
        upstreams,
        csrf: csrf().token(state, principal),
    }))
}

async fn show(State(state): State<PagesState>, browser: Browser) -> Result<PageResponse, PageError> {
    render(&state, &browser, None).await
}

#[derive(Deserialize)]
struct Action {
    csrf: String,
    action: String,
    provider: Option<String>,
    form: Option<String>,
}

async fn act(
    State(state): State<PagesState>,
    browser: Browser,
    Posted(action): Posted<Action>,
) -> Result<PageResponse, PageError> {
    let principal = &browser.principal;
    csrf().check(&state, principal, &action.csrf)?;
    let status = match (action.action.as_str(), action.provider, action.form) {
        ("disconnect", Some(provider), _) => match state
            .gate
            .connections()
            .disconnect(principal, &provider, &browser.from)
            .await?
        {
            Disconnected::NothingConnected => format!("Nothing was connected at {provider}."),
            Disconnected::RevocationFailed => format!(
                "Disconnected {provider}. The service did not confirm revoking access; you can also revoke it in \
                 your account settings there."
            ),
            Disconnected::Revoked | Disconnected::NoRevocation => format!("Disconnected {provider}."),
        },
        ("delete-form", _, Some(form)) => {
            let values = state.gate.form_values();
            if values.delete(principal, &form, &browser.from).await? {
                let title = values.forms().get(&form).map_or(form.as_str(), |f| f.title.as_str());
                format!("Deleted your answers to \"{title}\".")
            } else {
                "There was nothing saved to delete.".to_owned()
            }
        }
        _ => return Err(PageError::UnknownAction("Choose Disconnect or Delete.")),
    };
    // Sessions opened with what was just removed end here, at once.
    state.upstreams.end_sessions_of(principal);
    render(&state, &browser, Some(status)).await
}

#[cfg(test)]
pub(crate) fn samples() -> Vec<super::templates::Sample> {
    let connection = |active: bool, account_label: Option<&str>| ConnectionRow {
        provider: "github".to_owned(),
        provider_name: "GitHub <Enterprise>".to_owned(),
        account_label: account_label.map(str::to_owned),
        scopes: vec!["repo".to_owned(), "read:org".to_owned()],
        active,
        connected_at: "2026-12-03 10:00 UTC".to_owned(),
    };
    let form = |stored: bool| FormRow {
        id: if stored { "openai" } else { "pay" }.to_owned(),
        title: "OpenAI & co".to_owned(),
        stored,
        lines: if stored {
            vec![
                ("API key".to_owned(), "stored, hidden".to_owned()),
                ("Team".to_owned(), "<Red> \"Team\"".to_owned()),
            ]
        } else {
            Vec::new()
        },
    };
    let upstream = |needs: &[&str]| UpstreamRow {
        id: "files".to_owned(),
        tools: 3,
        needs: needs.iter().map(|n| (*n).to_owned()).collect(),
    };
    let page = |sign_out: bool, status: Option<&str>, full: bool| ConnectionsPage {
        principal: "alice@example.com".to_owned(),
        sign_out,
        status: status.map(str::to_owned),
        connections: if full {
            vec![connection(true, Some("alice <at> github")), connection(false, None)]
        } else {
            Vec::new()
        },
        forms: if full {
            vec![form(true), form(false)]
        } else {
            Vec::new()
        },
        upstreams: if full {
            vec![upstream(&[]), upstream(&["a GitHub account", "OpenAI's form"])]
        } else {
            Vec::new()
        },
        csrf: "c5rf".to_owned(),
    };
    vec![
        super::templates::Sample::of(page(true, Some("Disconnected GitHub."), true)),
        super::templates::Sample::of(page(false, None, false)),
    ]
}
