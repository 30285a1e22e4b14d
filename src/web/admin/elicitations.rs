//! `/admin/elicitations`: the pending elicitations, newest first and paged, with Expire (its
//! client is told it is over, as `gatehouse admin elicitations expire` does).

use axum::extract::{Query, State};
use serde::{Deserialize, Serialize};

use super::{Admin, NavItem, Operating, Pager, nav, operator, page_number, window};
use crate::domain::ElicitationId;
use crate::gate::Expiry;
use crate::routes;
use crate::web::error::PageError;
use crate::web::extract::{CsrfBinding, Posted, when};
use crate::web::page::PageResponse;
use crate::web::state::PagesState;
use crate::web::templates::Page;

const PURPOSE: &str = "admin-elicitations";

#[derive(Serialize)]
struct ElicitationRow {
    id: String,
    principal: String,
    client: String,
    requirement: String,
    created: String,
    expires: String,
}

#[derive(Serialize)]
struct ElicitationsPage {
    operator: String,
    nav: Vec<NavItem>,
    status: Option<String>,
    elicitations: Vec<ElicitationRow>,
    pager: Pager,
    csrf: String,
}
impl Page for ElicitationsPage {
    const NAME: &'static str = "admin_elicitations.html";
}

#[derive(Deserialize)]
pub struct PageQuery {
    page: Option<String>,
}

fn csrf() -> CsrfBinding {
    CsrfBinding::new(PURPOSE, routes::ADMIN_ELICITATIONS)
}

pub async fn show(
    State(state): State<PagesState>,
    admin: Operating,
    Query(query): Query<PageQuery>,
) -> Result<PageResponse, PageError> {
    render(&state, &admin, page_number(query.page.as_deref()), None).await
}

async fn render(
    state: &PagesState,
    admin: &Admin,
    page: usize,
    status: Option<String>,
) -> Result<PageResponse, PageError> {
    let mut records = state.store.list_elicitations(true, window(page)).await?;
    let pager = Pager::cut(state, routes::ADMIN_ELICITATIONS, &[], page, &mut records);
    let elicitations = records
        .into_iter()
        .map(|e| ElicitationRow {
            id: e.id.to_string(),
            principal: e.principal.to_string(),
            client: e.client_name,
            requirement: e.requirement,
            created: when(e.created_at),
            expires: when(e.expires_at),
        })
        .collect();
    Ok(PageResponse::new(ElicitationsPage {
        operator: admin.shown(),
        nav: nav(state, routes::ADMIN_ELICITATIONS),
        status,
        elicitations,
        pager,
        csrf: csrf().token(state, &admin.principal),
    }))
}

#[derive(Deserialize)]
pub struct Action {
    csrf: String,
    action: String,
    id: String,
}

pub async fn act(
    State(state): State<PagesState>,
    admin: Operating,
    Posted(action): Posted<Action>,
) -> Result<PageResponse, PageError> {
    csrf().check(&state, &admin.principal, &action.csrf)?;
    if action.action != "expire" {
        return Err(PageError::UnknownAction("Choose Expire."));
    }
    let id: ElicitationId = action.id.trim().parse().map_err(|_| PageError::Unreadable)?;
    let status = match operator(&state).expire(&admin.actor(), &id).await? {
        Expiry::Unknown => format!("There is no request {id}."),
        Expiry::NotPending(status) => format!("Request {id} is {} already.", status.as_str()),
        Expiry::EndedMeanwhile => format!("Request {id} ended meanwhile."),
        Expiry::Expired(e) => format!("Expired request {id} of {}; its client was told.", e.principal),
    };
    render(&state, &admin, 1, Some(status)).await
}

#[cfg(test)]
pub(super) fn samples() -> Vec<crate::web::templates::Sample> {
    let page = |elicitations: Vec<ElicitationRow>, status: Option<&str>| ElicitationsPage {
        operator: "root@example.com".to_owned(),
        nav: super::sample_nav("Pending requests"),
        status: status.map(str::to_owned),
        pager: super::sample_pager(!elicitations.is_empty()),
        elicitations,
        csrf: "c5rf".to_owned(),
    };
    let row = ElicitationRow {
        id: "0190b6f4-cccc".to_owned(),
        principal: "a@b".to_owned(),
        client: "Claude <Code>".to_owned(),
        requirement: "form:openai".to_owned(),
        created: "2026-12-03 10:00 UTC".to_owned(),
        expires: "2026-12-03 10:10 UTC".to_owned(),
    };
    vec![
        crate::web::templates::Sample::of(page(vec![row], None)),
        crate::web::templates::Sample::of(page(Vec::new(), Some("Expired request x of a@b; its client was told."))),
    ]
}
