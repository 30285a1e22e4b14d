//! `/admin/health`: which key protects how many stored values per table (as `gatehouse keys
//! status` counts them) and the checks of `gatehouse doctor` that make sense inside a running
//! server (`crate::diagnosis::running`).

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
use crate::web::templates::Page;

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

#[derive(Serialize)]
struct HealthPage {
    operator: String,
    nav: Vec<NavItem>,
    tables: Vec<&'static str>,
    keys: Vec<KeyRow>,
    findings: Vec<FindingRow>,
}
impl Page for HealthPage {
    const NAME: &'static str = "admin_health.html";
}

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

#[cfg(test)]
pub(super) fn samples() -> Vec<crate::web::templates::Sample> {
    let finding = |status: &'static str, fix: Option<(Option<&str>, &str)>| FindingRow {
        status,
        check: "public URL".to_owned(),
        message: "reaches <this> server".to_owned(),
        fix: fix.map(|(key, hint)| (key.map(str::to_owned), hint.to_owned())),
    };
    vec![crate::web::templates::Sample::of(HealthPage {
        operator: "root@example.com".to_owned(),
        nav: super::sample_nav("Keys and checks"),
        tables: vec!["connections", "form_values"],
        keys: vec![KeyRow {
            key: "k1".to_owned(),
            configured_as: "secrets.keys[0] (encrypts)".to_owned(),
            counts: vec![3, 0],
            total: 3,
        }],
        findings: vec![
            finding("ok", None),
            finding(
                "warning",
                Some((Some("server.public_url"), "Set it to the URL users open.")),
            ),
            finding("problem", Some((None, "Start the database & retry."))),
        ],
    })]
}
