//! Hosted forms: `/forms/{elicitation id}` answers an elicitation, `/connections/forms/{form id}`
//! replaces a user's stored values. The page checks the owner like the connect page, validates on
//! the server only (the form is `novalidate`, so every browser gets the same messages) and answers
//! 422 with the page again, keeping what was typed except secrets.

use std::collections::BTreeSet;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::Serialize;

use super::connect::declined;
use super::connections::redirect_to_connections;
use super::error::{NoticePage, PageError};
use super::extract::{Browser, CsrfBinding, OwnedElicitation, Posted, when};
use super::page::PageResponse;
use super::state::PagesState;
use super::templates::Page;
use crate::domain::Principal;
use crate::forms::{FieldErrors, FieldView, Form, FormScope, Submission};
use crate::gate::StoredValues;
use crate::routes;
use crate::store::ElicitationRecord;

/// Largest form post: a 20,000-character textarea percent-encoded, and then some.
const MAX_FORM_BYTES: usize = 512 * 1024;
const ELICITATION_PURPOSE: &str = "form";
const REPLACE_PURPOSE: &str = "replace-form";

pub fn router() -> Router<PagesState> {
    Router::new()
        .route(routes::FORM, get(show).post(submit))
        .route(routes::STORED_FORM, get(show_stored).post(replace))
        .layer(DefaultBodyLimit::max(MAX_FORM_BYTES))
}

#[derive(Serialize)]
struct ErrorLink {
    id: String,
    label: String,
    message: String,
}

#[derive(Serialize)]
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
impl Page for FormPage {
    const NAME: &'static str = "form.html";
}

/// What a form page is for: an elicitation, or replacing stored values.
struct Target<'a> {
    form: &'a Form,
    elicitation: Option<&'a ElicitationRecord>,
    principal: &'a Principal,
}

impl<'a> Target<'a> {
    /// The form an elicitation the browser owns asks for.
    fn answering(state: &'a PagesState, owned: &'a OwnedElicitation) -> Result<Self, PageError> {
        let form = state
            .gate
            .form_values()
            .form_of(&owned.elicitation)
            .ok_or(PageError::UnknownForm)?;
        Ok(Self {
            form,
            elicitation: Some(&owned.elicitation),
            principal: &owned.principal,
        })
    }

    fn action(&self) -> String {
        match self.elicitation {
            Some(elicitation) => routes::form(elicitation.id),
            None => routes::stored_form(&self.form.id),
        }
    }

    /// What the page's CSRF token is bound to: the elicitation, or the form being replaced.
    fn csrf(&self) -> CsrfBinding {
        match self.elicitation {
            Some(elicitation) => CsrfBinding::new(ELICITATION_PURPOSE, elicitation.id),
            None => CsrfBinding::new(REPLACE_PURPOSE, &self.form.id),
        }
    }
}

/// The form page, with the user's input and messages after a refused post (then 422).
fn render(
    state: &PagesState,
    target: &Target<'_>,
    typed: Option<&[(String, String)]>,
    stored: Option<&StoredValues>,
    errors: &FieldErrors,
) -> PageResponse {
    let form = target.form;
    let no_secrets = BTreeSet::new();
    let secret_names = stored.map_or(&no_secrets, |s| &s.secret_names);
    let values = if typed.is_some() {
        None
    } else {
        stored.map(|s| &s.values)
    };
    let fields = form.views(typed, values, errors, secret_names);
    let error_links = error_links(&fields);
    let description = match target.elicitation {
        Some(elicitation) if form.scope == FormScope::Call => elicitation.detail.clone(),
        _ => form.description.clone(),
    };
    let page = PageResponse::new(FormPage {
        title: form.title.clone(),
        description,
        client_name: target.elicitation.map(|e| e.client_name.clone()),
        action: state.public_url.path(&target.action()),
        csrf: target.csrf().token(state, target.principal),
        fields,
        has_errors: !error_links.is_empty(),
        errors: error_links,
        submit_label: form.submit_label.clone(),
        principal: target.principal.to_string(),
        expires: target.elicitation.map(|e| when(e.expires_at)),
    });
    if errors.is_empty() {
        page
    } else {
        page.with_status(StatusCode::UNPROCESSABLE_ENTITY)
    }
}

/// The error summary's links, one per field in error.
fn error_links(fields: &[FieldView]) -> Vec<ErrorLink> {
    fields
        .iter()
        .filter_map(|f| {
            f.error.as_ref().map(|message| ErrorLink {
                id: f.id.clone(),
                label: f.label.clone(),
                message: message.clone(),
            })
        })
        .collect()
}

/// The saved values of the target's form when it is user-scoped (a blank secret then keeps the
/// stored one).
async fn stored(state: &PagesState, target: &Target<'_>) -> Result<Option<StoredValues>, PageError> {
    if target.form.scope == FormScope::Call {
        return Ok(None);
    }
    Ok(state
        .gate
        .form_values()
        .stored(target.principal, &target.form.id)
        .await?)
}

/// The form as first shown: what is saved already, or the defaults.
async fn fresh_page(state: &PagesState, target: &Target<'_>) -> Result<PageResponse, PageError> {
    let stored = stored(state, target).await?;
    Ok(render(state, target, None, stored.as_ref(), &FieldErrors::none()))
}

/// What the user sent: checked values, or the form again with what was typed and the messages.
enum Checked {
    Valid(Submission),
    Invalid(PageResponse),
}

async fn validated(state: &PagesState, target: &Target<'_>, posted: &Answers) -> Result<Checked, PageError> {
    let stored = stored(state, target).await?;
    let no_secrets = BTreeSet::new();
    let secret_names = stored.as_ref().map_or(&no_secrets, |s| &s.secret_names);
    Ok(match target.form.validate(&posted.pairs, secret_names) {
        Ok(submission) => Checked::Valid(submission),
        Err(errors) => Checked::Invalid(render(state, target, Some(&posted.pairs), stored.as_ref(), &errors)),
    })
}

/// The posted pairs and the button pressed.
struct Answers {
    pairs: Vec<(String, String)>,
    action: String,
}

/// The post, if it came from our page.
fn read_post(state: &PagesState, target: &Target<'_>, pairs: Vec<(String, String)>) -> Result<Answers, PageError> {
    let first = |name: &str| pairs.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
    target
        .csrf()
        .check(state, target.principal, &first("csrf").unwrap_or_default())?;
    Ok(Answers {
        action: first("action").unwrap_or_else(|| "submit".to_owned()),
        pairs,
    })
}

async fn show(State(state): State<PagesState>, owned: OwnedElicitation) -> Result<PageResponse, PageError> {
    fresh_page(&state, &Target::answering(&state, &owned)?).await
}

async fn submit(
    State(state): State<PagesState>,
    owned: OwnedElicitation,
    Posted(pairs): Posted<Vec<(String, String)>>,
) -> Result<PageResponse, PageError> {
    let target = Target::answering(&state, &owned)?;
    let (form, elicitation, principal) = (target.form, &owned.elicitation, &owned.principal);
    let posted = read_post(&state, &target, pairs)?;
    match posted.action.as_str() {
        "cancel" => declined(&state, elicitation, &owned.from, "Cancelled", "cancelled").await,
        "submit" => {
            let submission = match validated(&state, &target, &posted).await? {
                Checked::Valid(submission) => submission,
                Checked::Invalid(page) => return Ok(page),
            };
            let values = state.gate.form_values();
            let completed = match form.scope {
                FormScope::User => {
                    values
                        .save_user(principal, form, submission, Some(elicitation), &owned.from)
                        .await?
                }
                FormScope::Call => values.answer_call(elicitation, submission, &owned.from).await?,
            };
            if !completed {
                return Err(PageError::EndedMeanwhile);
            }
            Ok(done(form, &elicitation.client_name))
        }
        _ => Err(PageError::UnknownAction("Choose Submit or Cancel.")),
    }
}

/// The page after a valid answer: a user-scoped form's answers are saved; a call-scoped form's
/// answer goes to the one call that asked and is kept no longer, so it is sent, or, for a
/// confirmation, confirmed.
fn done(form: &Form, client_name: &str) -> PageResponse {
    let (heading, message) = match form.scope {
        FormScope::User => ("Saved", format!("Your answers to \"{}\" are saved.", form.title)),
        FormScope::Call if form.is_confirmation() => ("Confirmed", format!("You confirmed \"{}\".", form.title)),
        FormScope::Call => ("Sent", format!("Your answer to \"{}\" was sent.", form.title)),
    };
    PageResponse::new(NoticePage::new(
        heading,
        message,
        Some(&format!("You can close this window and return to {client_name}.")),
    ))
}

/// A user-scoped form the browser's user may fill in from /connections.
fn user_form<'s>(state: &'s PagesState, form: &str) -> Result<&'s Form, PageError> {
    state
        .gate
        .form_values()
        .forms()
        .get(form)
        .filter(|f| f.scope == FormScope::User)
        .ok_or(PageError::UnknownForm)
}

async fn show_stored(
    State(state): State<PagesState>,
    Browser { principal, .. }: Browser,
    Path(form): Path<String>,
) -> Result<PageResponse, PageError> {
    let target = Target {
        form: user_form(&state, &form)?,
        elicitation: None,
        principal: &principal,
    };
    fresh_page(&state, &target).await
}

async fn replace(
    State(state): State<PagesState>,
    Browser { principal, from, .. }: Browser,
    Path(form): Path<String>,
    Posted(pairs): Posted<Vec<(String, String)>>,
) -> Result<Response, PageError> {
    let form = user_form(&state, &form)?;
    let target = Target {
        form,
        elicitation: None,
        principal: &principal,
    };
    let posted = read_post(&state, &target, pairs)?;
    if posted.action == "cancel" {
        return redirect_to_connections(&state);
    }
    let submission = match validated(&state, &target, &posted).await? {
        Checked::Valid(submission) => submission,
        Checked::Invalid(page) => return Ok(page.into_response()),
    };
    state
        .gate
        .form_values()
        .save_user(&principal, form, submission, None, &from)
        .await?;
    redirect_to_connections(&state)
}

#[cfg(test)]
pub(crate) fn samples() -> Vec<super::templates::Sample> {
    use crate::forms::testing::{EVERY_KIND, form, none, post};
    let form = form(EVERY_KIND, "t");
    let typed = post(&[
        ("api_key", "short"),
        ("name", "<Ada> & \"Bob\""),
        ("count", "x"),
        ("agree", "on"),
    ]);
    let Err(errors) = form.validate(&typed, &none()) else {
        panic!("the sample post is invalid");
    };
    let page = |fields: Vec<FieldView>, elicited: bool| {
        let errors = error_links(&fields);
        FormPage {
            title: "Service <key>".to_owned(),
            description: elicited.then(|| "Paste the key from https://example.com/keys?a=1&b=2.".to_owned()),
            client_name: elicited.then(|| "Claude \"Code\"".to_owned()),
            action: "/gh/forms/0190b6f4".to_owned(),
            csrf: "c5rf".to_owned(),
            fields,
            has_errors: !errors.is_empty(),
            errors,
            submit_label: "Save".to_owned(),
            principal: "alice@example.com".to_owned(),
            expires: elicited.then(|| "2026-12-03 10:10 UTC".to_owned()),
        }
    };
    let one_wrong = post(&[("api_key", "short")]);
    let Err(one_error) = form.validate(&one_wrong, &none()) else {
        panic!("the sample post is invalid");
    };
    let stored_secret = ["api_key".to_owned()].into_iter().collect();
    vec![
        super::templates::Sample::of(page(form.views(None, None, &FieldErrors::none(), &none()), false)),
        super::templates::Sample::of(page(form.views(Some(&typed), None, &errors, &none()), true)),
        super::templates::Sample::of(page(form.views(None, None, &FieldErrors::none(), &stored_secret), true)),
        super::templates::Sample::of(page(form.views(Some(&one_wrong), None, &one_error, &none()), false)),
    ]
}
