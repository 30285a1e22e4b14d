//! `/admin`: the operator pages. Who may open them is `[admin] allow` (the `allow` rule shape of
//! tools, plus `principal`); without it nobody may, in every identity mode. Every `/admin` route,
//! GET or POST, is behind [`admit`], which identifies the browser as every page does and refuses
//! anyone else with 403 before a handler runs or a body is read. Views are server-rendered, sort
//! and page through query parameters, and act through the gate's `Operator` (as `gatehouse admin`
//! does) with a per-view CSRF token; each change is an `admin` entry on the audit trail naming the
//! operator.

mod audit;
mod elicitations;
mod health;
mod upstreams;
mod users;

use axum::extract::{FromRequestParts, Request, State};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::get;
use axum::{Extension, Router};
use serde::Serialize;

use super::error::PageError;
use super::extract::Browser;
use super::state::PagesState;
use crate::audit::Origin;
use crate::domain::Principal;
use crate::gate::{Actor, Operator};
use crate::identity::access::Allow;
use crate::routes;

/// Rows per page of every table.
pub const PAGE_SIZE: usize = 50;
/// The furthest page a query may ask for (an offset the database can still skip to cheaply).
const MAX_PAGE: usize = 10_000;

pub fn router(state: &PagesState) -> Router<PagesState> {
    Router::new()
        .route(routes::ADMIN, get(users::show))
        .route(routes::ADMIN_USERS, get(users::show).post(users::act))
        .route(
            routes::ADMIN_ELICITATIONS,
            get(elicitations::show).post(elicitations::act),
        )
        .route(routes::ADMIN_UPSTREAMS, get(upstreams::show))
        .route(routes::ADMIN_AUDIT, get(audit::show))
        .route(routes::ADMIN_HEALTH, get(health::show))
        // Only the routes above: a `layer` would wrap the merged fallback too, and answer every
        // unknown path 403.
        .route_layer(middleware::from_fn_with_state(state.clone(), admit))
}

/// The operator on an `/admin` page: who, in words, and where from.
#[derive(Clone)]
pub struct Admin {
    pub principal: Principal,
    pub signed_in_as: Option<String>,
    pub from: Origin,
}

impl Admin {
    /// Who acts, for the gate's `Operator` and the audit trail.
    fn actor(&self) -> Actor {
        Actor::page(self.principal.clone(), self.from.clone())
    }

    fn shown(&self) -> String {
        self.signed_in_as.clone().unwrap_or_else(|| self.principal.to_string())
    }
}

/// Lets through only the operators `[admin] allow` names; everyone else gets 403 (and, in `oauth`
/// mode, a browser not signed in is sent to sign in first).
async fn admit(State(state): State<PagesState>, request: Request, next: Next) -> Result<Response, PageError> {
    let (mut parts, body) = request.into_parts();
    let browser = Browser::from_request_parts(&mut parts, &state).await?;
    if !may_operate(&state, &browser) {
        tracing::info!(principal = %browser.principal, path = %parts.uri.path(), "refused an operator page: not in [admin] allow");
        return Err(PageError::NotAnOperator);
    }
    parts.extensions.insert(Admin {
        principal: browser.principal,
        signed_in_as: browser.signed_in_as,
        from: browser.from,
    });
    Ok(next.run(Request::from_parts(parts, body)).await)
}

/// `[admin] allow` names the browser's user: by a claim (groups, email, ...) or its principal.
fn may_operate(state: &PagesState, browser: &Browser) -> bool {
    state
        .config
        .admin
        .allow
        .as_ref()
        .is_some_and(|rule| Allow::from_config(rule).permits(&browser.claims))
}

/// The operator as the admission left it.
pub type Operating = Extension<Admin>;

/// The gate's rooms an operator acts through.
fn operator(state: &PagesState) -> Operator<'_> {
    Operator {
        store: &*state.store,
        bus: &state.bus,
        elicitations: state.gate.elicitations(),
        connections: state.gate.connections(),
        form_values: state.gate.form_values(),
        audit: &state.audit,
    }
}

/// The views, for the shared navigation.
#[derive(Serialize)]
pub struct NavItem {
    href: String,
    label: &'static str,
    current: bool,
}

fn nav(state: &PagesState, current: &str) -> Vec<NavItem> {
    [
        (routes::ADMIN_USERS, "Users"),
        (routes::ADMIN_ELICITATIONS, "Pending requests"),
        (routes::ADMIN_UPSTREAMS, "Upstreams"),
        (routes::ADMIN_AUDIT, "Audit trail"),
        (routes::ADMIN_HEALTH, "Keys and checks"),
    ]
    .into_iter()
    .map(|(path, label)| NavItem {
        href: state.public_url.path(path),
        label,
        current: path == current,
    })
    .collect()
}

/// A 1-based page number from a query (`?page=2`); anything else is the first page.
fn page_number(text: Option<&str>) -> usize {
    text.and_then(|t| t.trim().parse::<usize>().ok())
        .filter(|page| *page >= 1)
        .map_or(1, |page| page.min(MAX_PAGE))
}

/// The rows a page shows: one more is asked for, to know whether a next page exists.
fn window(page: usize) -> crate::store::Window {
    crate::store::Window {
        offset: (page - 1) * PAGE_SIZE,
        limit: PAGE_SIZE + 1,
    }
}

/// Links to the previous and next pages of a table, keeping the other query parameters.
#[derive(Serialize, Default)]
pub struct Pager {
    page: usize,
    previous: Option<String>,
    next: Option<String>,
}

impl Pager {
    /// For `rows` read with [`window`]: cuts the extra row, and links the pages around `page`
    /// at `path` with `query` (its other parameters).
    fn cut<T>(state: &PagesState, path: &str, query: &[(&str, String)], page: usize, rows: &mut Vec<T>) -> Self {
        let more = rows.len() > PAGE_SIZE;
        rows.truncate(PAGE_SIZE);
        let link = |page: usize| {
            let mut serializer = url::form_urlencoded::Serializer::new(String::new());
            for (name, value) in query.iter().filter(|(_, value)| !value.is_empty()) {
                serializer.append_pair(name, value);
            }
            serializer.append_pair("page", &page.to_string());
            format!("{}?{}", state.public_url.path(path), serializer.finish())
        };
        Self {
            page,
            previous: (page > 1).then(|| link(page - 1)),
            next: (more && page < MAX_PAGE).then(|| link(page + 1)),
        }
    }
}

/// The operator pages, a few of each (see `templates::Sample`).
#[cfg(test)]
pub(crate) fn samples() -> Vec<super::templates::Sample> {
    [
        users::samples(),
        elicitations::samples(),
        upstreams::samples(),
        audit::samples(),
        health::samples(),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// The navigation of a sample page, on `current`.
#[cfg(test)]
fn sample_nav(current: &str) -> Vec<NavItem> {
    [("/gh/admin/users", "Users"), ("/gh/admin/audit", "Audit trail")]
        .into_iter()
        .map(|(href, label)| NavItem {
            href: href.to_owned(),
            label,
            current: label == current,
        })
        .collect()
}

/// A sample pager: the first page of one, or a middle page of several.
#[cfg(test)]
fn sample_pager(middle: bool) -> Pager {
    if !middle {
        return Pager {
            page: 1,
            ..Pager::default()
        };
    }
    Pager {
        page: 2,
        previous: Some("/gh/admin/users?principal=a%40b&page=1".to_owned()),
        next: Some("/gh/admin/users?principal=a%40b&page=3".to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_numbers_are_bounded_and_default_to_the_first() {
        assert_eq!(page_number(None), 1);
        assert_eq!(page_number(Some("0")), 1);
        assert_eq!(page_number(Some("-3")), 1);
        assert_eq!(page_number(Some("x")), 1);
        assert_eq!(page_number(Some("3")), 3);
        assert_eq!(page_number(Some("99999999")), MAX_PAGE);
        assert_eq!(window(3).offset, 2 * PAGE_SIZE);
    }
}
