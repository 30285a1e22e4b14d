//! `/admin/upstreams`: per configured upstream, its catalogue's size and age, the sessions and
//! processes open on this replica, and the last error this replica met with it.

use axum::extract::State;
use chrono::Utc;
use serde::Serialize;

use super::{NavItem, Operating, nav};
use crate::routes;
use crate::web::error::PageError;
use crate::web::extract::when;
use crate::web::page::PageResponse;
use crate::web::state::PagesState;
use crate::web::templates::Page;

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

#[derive(Serialize)]
struct UpstreamsPage {
    operator: String,
    nav: Vec<NavItem>,
    upstreams: Vec<UpstreamRow>,
}
impl Page for UpstreamsPage {
    const NAME: &'static str = "admin_upstreams.html";
}

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

#[cfg(test)]
pub(super) fn samples() -> Vec<crate::web::templates::Sample> {
    let row = |last_error: Option<(&str, &str)>| UpstreamRow {
        id: "files".to_owned(),
        transport: "stdio",
        tools: 12,
        listed: "2026-12-03 10:00 UTC (5m ago)".to_owned(),
        sessions: 2,
        processes: 1,
        last_error: last_error.map(|(at, what)| (at.to_owned(), what.to_owned())),
    };
    let page = |upstreams: Vec<UpstreamRow>| UpstreamsPage {
        operator: "root@example.com".to_owned(),
        nav: super::sample_nav("Upstreams"),
        upstreams,
    };
    vec![
        crate::web::templates::Sample::of(page(vec![
            row(None),
            row(Some((
                "2026-12-03 10:01 UTC",
                "the process exited: <code 1> & \"more\"",
            ))),
        ])),
        crate::web::templates::Sample::of(page(Vec::new())),
    ]
}
