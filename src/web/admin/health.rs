//! `/admin/health`: which key protects how many stored values per table (as `gatehouse keys
//! status` counts them) and the checks of `gatehouse doctor` that make sense inside a running
//! server (`crate::diagnosis::running`).

use askama::Template;
use axum::extract::State;
use serde::Serialize;

use super::{NavItem, Operating, nav};
use crate::diagnosis::{self, Status};
use crate::gate::rekey::{self, Sealer};
use crate::routes;
use crate::store::SealedTable;
use crate::web::error::PageError;
use crate::web::page::PageResponse;
use crate::web::state::PagesState;
use crate::web::templates::impl_page;

#[derive(Serialize)]
struct KeyRow {
    key: String,
    configured_as: String,
    counts: Vec<u64>,
    total: u64,
}

#[derive(Serialize)]
struct FindingRow {
    status: &'static str,
    check: String,
    message: String,
    /// The key to fix (unless no key can) and the hint, for a warning or a problem.
    fix: Option<(Option<String>, String)>,
}

#[derive(Template, Serialize)]
#[template(path = "admin_health.html", blocks = ["title", "content"])]
struct HealthPage {
    operator: String,
    nav: Vec<NavItem>,
    tables: Vec<&'static str>,
    keys: Vec<KeyRow>,
    findings: Vec<FindingRow>,
}
impl_page!(HealthPage, "admin_health.html");

pub async fn show(State(state): State<PagesState>, admin: Operating) -> Result<PageResponse, PageError> {
    let status = rekey::status(&*state.store, &state.vault).await?;
    let keys = status
        .sealers
        .into_iter()
        .map(|(sealer, rows)| {
            let (key, configured_as) = match sealer {
                Sealer::Key(id, Some(0)) => (id.to_string(), "secrets.keys[0] (encrypts)".to_owned()),
                Sealer::Key(id, Some(index)) => (id.to_string(), format!("secrets.keys[{index}]")),
                Sealer::Key(id, None) => (id.to_string(), "unknown key".to_owned()),
                Sealer::UnknownFormat => ("-".to_owned(), "unknown format".to_owned()),
            };
            KeyRow {
                key,
                configured_as,
                total: rows.iter().map(|(_, count)| count).sum(),
                counts: rows.into_iter().map(|(_, count)| count).collect(),
            }
        })
        .collect();
    let findings = diagnosis::running(&state.config, &*state.store, &state.outbound)
        .await
        .into_iter()
        .map(|f| FindingRow {
            status: match f.status {
                Status::Ok => "ok",
                Status::Warning => "warning",
                Status::Problem => "problem",
            },
            fix: f.hint.map(|hint| (f.key, hint)),
            check: f.check,
            message: f.message,
        })
        .collect();
    Ok(PageResponse::new(HealthPage {
        operator: admin.shown(),
        nav: nav(&state, routes::ADMIN_HEALTH),
        tables: SealedTable::ALL.iter().map(|t| t.name()).collect(),
        keys,
        findings,
    }))
}
