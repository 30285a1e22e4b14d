//! `/admin/upstreams`: per configured upstream, its catalogue's size and age, the sessions and
//! processes open on this replica, and the last error this replica met with it.

use askama::Template;
use axum::extract::State;
use chrono::Utc;
use serde::Serialize;

use super::{NavItem, Operating, nav};
use crate::routes;
use crate::web::error::PageError;
use crate::web::extract::when;
use crate::web::page::PageResponse;
use crate::web::state::PagesState;
use crate::web::templates::impl_page;

#[derive(Serialize)]
struct UpstreamRow {
    id: String,
    transport: &'static str,
    tools: usize,
    /// When it was listed and how long ago, or that it was not yet.
    listed: String,
    sessions: usize,
    processes: usize,
    /// When and what, or nothing.
    last_error: Option<(String, String)>,
}

#[derive(Template, Serialize)]
#[template(path = "admin_upstreams.html", blocks = ["title", "content"])]
struct UpstreamsPage {
    operator: String,
    nav: Vec<NavItem>,
    upstreams: Vec<UpstreamRow>,
}
impl_page!(UpstreamsPage, "admin_upstreams.html");

pub async fn show(State(state): State<PagesState>, admin: Operating) -> Result<PageResponse, PageError> {
    let now = Utc::now();
    let upstreams = state
        .upstreams
        .status()
        .await?
        .into_iter()
        .map(|u| UpstreamRow {
            id: u.id,
            transport: u.transport,
            tools: u.tools,
            listed: u.listed_at.map_or_else(
                || "not listed yet".to_owned(),
                |at| {
                    let age = (now - at).to_std().unwrap_or_default();
                    let age = std::time::Duration::from_secs(age.as_secs());
                    format!("{} ({} ago)", when(at), humantime::format_duration(age))
                },
            ),
            sessions: u.sessions,
            processes: u.processes,
            last_error: u.last_error.map(|f| (when(f.at), f.what)),
        })
        .collect();
    Ok(PageResponse::new(UpstreamsPage {
        operator: admin.shown(),
        nav: nav(&state, routes::ADMIN_UPSTREAMS),
        upstreams,
    }))
}
