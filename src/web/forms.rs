//! Hosted forms: `/forms/{elicitation id}` answers an elicitation, `/connections/forms/{form id}`
//! replaces a user's stored values. The page checks the owner like the connect page, validates on
//! the server only (the form is `novalidate`, so every browser gets the same messages) and answers
//! 422 with the page again, keeping what was typed except secrets.

use std::collections::BTreeSet;
use std::net::SocketAddr;

use askama::Template;
use axum::Form as PostedForm;
use axum::Router;
use axum::extract::rejection::FormRejection;
use axum::extract::{ConnectInfo, DefaultBodyLimit, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::Serialize;
use serde_json::{Map, Value};

use super::browser::{
    browser_elicitation, browser_principal, csrf_token, declined, forged_post, genuine_post, notice, refusal, when,
};
use super::page;
use super::pages::page as page_template;
use crate::domain::Principal;
use crate::error::AppError;
use crate::forms::{FieldErrors, FieldView, Form, FormScope, Submission};
use crate::state::AppState;
use crate::store::ElicitationRecord;

/// Largest form post: a 20,000-character textarea percent-encoded, and then some.
const MAX_FORM_BYTES: usize = 512 * 1024;
const ELICITATION_PURPOSE: &str = "form";
const REPLACE_PURPOSE: &str = "replace-form";

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/forms/{id}", get(show).post(submit))
        .route("/connections/forms/{form}", get(show_stored).post(replace))
        .layer(DefaultBodyLimit::max(MAX_FORM_BYTES))
}

#[derive(Serialize)]
struct ErrorLink {
    id: String,
    label: String,
    message: String,
}

#[derive(Template, Serialize)]
#[template(path = "form.html", blocks = ["title", "content"])]
struct FormPage {
    title: String,
    description: Option<String>,
    client_name: Option<String>,
    action: String,
    csrf: String,
    fields: Vec<FieldView>,
    has_errors: bool,
    errors: Vec<ErrorLink>,
    submit_label: String,
    principal: String,
    expires: Option<String>,
}
page_template!(FormPage, "form.html");

/// What a form page is for: an elicitation, or replacing stored values.
struct Target<'a> {
    form: &'a Form,
    elicitation: Option<&'a ElicitationRecord>,
    principal: &'a Principal,
}

impl Target<'_> {
    fn action(&self) -> String {
        match self.elicitation {
            Some(elicitation) => format!("/forms/{}", elicitation.id),
            None => format!("/connections/forms/{}", self.form.id),
        }
    }

    /// What the page's CSRF token is bound to: the elicitation, or the form being replaced.
    fn csrf_binding(&self) -> (&'static str, String) {
        match self.elicitation {
            Some(elicitation) => (ELICITATION_PURPOSE, elicitation.id.to_string()),
            None => (REPLACE_PURPOSE, self.form.id.clone()),
        }
    }

    fn csrf(&self, state: &AppState) -> String {
        let (purpose, subject) = self.csrf_binding();
        csrf_token(state, purpose, self.principal, &subject)
    }

    fn genuine(&self, state: &AppState, headers: &HeaderMap, token: &str) -> bool {
        let (purpose, subject) = self.csrf_binding();
        genuine_post(state, headers, purpose, self.principal, &subject, token)
    }
}

/// The form page, with the user's input and messages after a refused post.
fn render(
    state: &AppState,
    target: &Target<'_>,
    typed: Option<&[(String, String)]>,
    stored: Option<&Map<String, Value>>,
    stored_secrets: &BTreeSet<String>,
    errors: &FieldErrors,
) -> Result<Response, AppError> {
    let form = target.form;
    let fields = form.views(typed, stored, errors, stored_secrets);
    let error_links: Vec<ErrorLink> = fields
        .iter()
        .filter_map(|f| {
            f.error.as_ref().map(|message| ErrorLink {
                id: f.id.clone(),
                label: f.label.clone(),
                message: message.clone(),
            })
        })
        .collect();
    let description = match target.elicitation {
        Some(elicitation) if form.scope == FormScope::Call => elicitation.detail.clone(),
        _ => form.description.clone(),
    };
    let mut response = page(
        state,
        &FormPage {
            title: form.title.clone(),
            description,
            client_name: target.elicitation.map(|e| e.client_name.clone()),
            action: target.action(),
            csrf: target.csrf(state),
            fields,
            has_errors: !error_links.is_empty(),
            errors: error_links,
            submit_label: form.submit_label.clone(),
            principal: target.principal.to_string(),
            expires: target.elicitation.map(|e| when(e.expires_at)),
        },
    )?;
    if !errors.is_empty() {
        *response.status_mut() = StatusCode::UNPROCESSABLE_ENTITY;
    }
    Ok(response)
}

/// The saved values of the target's form when it is user-scoped: the non-secret ones, and the
/// names of the stored secrets (a blank secret then keeps the stored one).
async fn stored(
    state: &AppState,
    target: &Target<'_>,
) -> Result<(Option<Map<String, Value>>, BTreeSet<String>), AppError> {
    if target.form.scope == FormScope::Call {
        return Ok((None, BTreeSet::new()));
    }
    let (values, secrets) = state.gate.stored_form(target.principal, &target.form.id).await?.unzip();
    Ok((values, secrets.unwrap_or_default()))
}

/// The form as first shown: what is saved already, or the defaults.
async fn fresh_page(state: &AppState, target: &Target<'_>) -> Result<Response, AppError> {
    let (values, secrets) = stored(state, target).await?;
    render(state, target, None, values.as_ref(), &secrets, &FieldErrors::none())
}

/// The posted values, checked; or the form again (422) with what was typed and the messages.
async fn validated(
    state: &AppState,
    target: &Target<'_>,
    posted: &Posted,
) -> Result<Result<Submission, Response>, AppError> {
    let (_, secrets) = stored(state, target).await?;
    Ok(match target.form.validate(&posted.pairs, &secrets) {
        Ok(submission) => Ok(submission),
        Err(errors) => Err(render(state, target, Some(&posted.pairs), None, &secrets, &errors)?),
    })
}

fn unknown_form(state: &AppState) -> Box<Response> {
    refusal(
        state,
        StatusCode::NOT_FOUND,
        "Unknown form",
        "This link does not lead to any form.",
        None,
    )
}

/// The posted pairs and the button pressed.
struct Posted {
    pairs: Vec<(String, String)>,
    action: String,
}

/// The post, if it came from our page; otherwise the page to answer with (nothing changed).
fn posted(
    state: &AppState,
    headers: &HeaderMap,
    target: &Target<'_>,
    form: Result<PostedForm<Vec<(String, String)>>, FormRejection>,
) -> Result<Posted, Box<Response>> {
    let pairs = match form {
        Ok(PostedForm(pairs)) => pairs,
        Err(rejection) if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            return Err(refusal(
                state,
                StatusCode::PAYLOAD_TOO_LARGE,
                "Too much text",
                "The form was larger than gatehouse accepts. Nothing was saved.",
                Some("Go back and shorten what you entered.".into()),
            ));
        }
        Err(rejection) => {
            tracing::info!(reason = %rejection.body_text(), "unreadable form post");
            return Err(refusal(
                state,
                StatusCode::BAD_REQUEST,
                "Unreadable form",
                "The form could not be read. Nothing was saved.",
                Some("Open the link from your assistant again.".into()),
            ));
        }
    };
    let first = |name: &str| pairs.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
    if !target.genuine(state, headers, &first("csrf").unwrap_or_default()) {
        return Err(Box::new(forged_post(state).unwrap_or_else(IntoResponse::into_response)));
    }
    Ok(Posted {
        action: first("action").unwrap_or_else(|| "submit".to_owned()),
        pairs,
    })
}

async fn show(
    State(state): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, AppError> {
    let (principal, elicitation, form) = match open_elicitation(&state, &headers, peer, &id).await {
        Ok(opened) => opened,
        Err(page) => return Ok(*page),
    };
    let target = Target {
        form,
        elicitation: Some(&elicitation),
        principal: &principal,
    };
    fresh_page(&state, &target).await
}

async fn submit(
    State(state): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Result<PostedForm<Vec<(String, String)>>, FormRejection>,
) -> Result<Response, AppError> {
    let (principal, elicitation, form) = match open_elicitation(&state, &headers, peer, &id).await {
        Ok(opened) => opened,
        Err(page) => return Ok(*page),
    };
    let target = Target {
        form,
        elicitation: Some(&elicitation),
        principal: &principal,
    };
    let posted = match posted(&state, &headers, &target, body) {
        Ok(posted) => posted,
        Err(page) => return Ok(*page),
    };
    match posted.action.as_str() {
        "cancel" => declined(&state, &elicitation, "Cancelled", "cancelled").await,
        "submit" => {
            let submission = match validated(&state, &target, &posted).await? {
                Ok(submission) => submission,
                Err(page) => return Ok(page),
            };
            let completed = match form.scope {
                FormScope::User => {
                    state
                        .gate
                        .save_user_form(&principal, form, submission, Some(&elicitation))
                        .await?
                }
                FormScope::Call => state.gate.answer_call_form(&elicitation, submission).await?,
            };
            if !completed {
                return notice(
                    &state,
                    StatusCode::GONE,
                    "Request closed",
                    "This request ended while you were filling in the form.",
                    Some("Ask your assistant to try again if you still need it.".into()),
                );
            }
            done(&state, form, &elicitation.client_name)
        }
        _ => notice(
            &state,
            StatusCode::BAD_REQUEST,
            "Unknown action",
            "Choose Submit or Cancel.",
            None,
        ),
    }
}

fn done(state: &AppState, form: &Form, client_name: &str) -> Result<Response, AppError> {
    let message = match form.scope {
        FormScope::User => format!("Your answers to \"{}\" are saved.", form.title),
        FormScope::Call => format!("Your answer to \"{}\" was sent.", form.title),
    };
    notice(
        state,
        StatusCode::OK,
        "Saved",
        message,
        Some(format!("You can close this window and return to {client_name}.")),
    )
}

/// The browser's principal, the elicitation behind the link (theirs and pending) and the form it
/// asks for; or the page to show instead.
async fn open_elicitation<'s>(
    state: &'s AppState,
    headers: &HeaderMap,
    peer: SocketAddr,
    id: &str,
) -> Result<(Principal, ElicitationRecord, &'s Form), Box<Response>> {
    let (principal, elicitation) = browser_elicitation(state, headers, peer, id).await?;
    match state.gate.form_of(&elicitation) {
        Some(form) => Ok((principal, elicitation, form)),
        None => Err(unknown_form(state)),
    }
}

/// The browser's principal and a user-scoped form they may fill in from /connections; or the
/// page to show instead.
fn open_stored<'s>(
    state: &'s AppState,
    headers: &HeaderMap,
    peer: SocketAddr,
    form: &str,
) -> Result<(Principal, &'s Form), Box<Response>> {
    let principal = browser_principal(state, headers, peer)?;
    match state.gate.forms().get(form).filter(|f| f.scope == FormScope::User) {
        Some(form) => Ok((principal, form)),
        None => Err(unknown_form(state)),
    }
}

async fn show_stored(
    State(state): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Path(form): Path<String>,
    headers: HeaderMap,
) -> Result<Response, AppError> {
    let (principal, form) = match open_stored(&state, &headers, peer, &form) {
        Ok(opened) => opened,
        Err(page) => return Ok(*page),
    };
    let target = Target {
        form,
        elicitation: None,
        principal: &principal,
    };
    fresh_page(&state, &target).await
}

async fn replace(
    State(state): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Path(form): Path<String>,
    headers: HeaderMap,
    body: Result<PostedForm<Vec<(String, String)>>, FormRejection>,
) -> Result<Response, AppError> {
    let (principal, form) = match open_stored(&state, &headers, peer, &form) {
        Ok(opened) => opened,
        Err(page) => return Ok(*page),
    };
    let target = Target {
        form,
        elicitation: None,
        principal: &principal,
    };
    let posted = match posted(&state, &headers, &target, body) {
        Ok(posted) => posted,
        Err(page) => return Ok(*page),
    };
    if posted.action == "cancel" {
        return super::connections::redirect_to_connections();
    }
    let submission = match validated(&state, &target, &posted).await? {
        Ok(submission) => submission,
        Err(page) => return Ok(page),
    };
    state.gate.save_user_form(&principal, form, submission, None).await?;
    super::connections::redirect_to_connections()
}
