//! `/admin/audit`: the audit trail, newest first, filtered by principal, action and time range
//! (a GET form, so a filtered view is a link), a page at a time.

use axum::extract::{Query, State};
use chrono::{DateTime, NaiveDate, NaiveDateTime, Utc};
use serde::{Deserialize, Serialize};

use super::{NavItem, Operating, Pager, nav, page_number, window};
use crate::domain::Principal;
use crate::routes;
use crate::store::{AuditAction, AuditSearch};
use crate::web::error::PageError;
use crate::web::page::PageResponse;
use crate::web::state::PagesState;
use crate::web::templates::Page;

#[derive(Serialize)]
struct EntryRow {
    at: String,
    principal: String,
    action: &'static str,
    subject: String,
    address: Option<String>,
    client: Option<String>,
    detail: String,
}

#[derive(Serialize)]
struct ActionChoice {
    name: &'static str,
    selected: bool,
}

#[derive(Serialize)]
struct AuditPage {
    operator: String,
    nav: Vec<NavItem>,
    /// What was wrong with the filters, if anything (those filters are left out).
    problems: Vec<String>,
    principal: String,
    actions: Vec<ActionChoice>,
    since: String,
    until: String,
    entries: Vec<EntryRow>,
    pager: Pager,
}
impl Page for AuditPage {
    const NAME: &'static str = "admin_audit.html";
}

#[derive(Deserialize)]
pub struct AuditFilters {
    principal: Option<String>,
    action: Option<String>,
    since: Option<String>,
    until: Option<String>,
    page: Option<String>,
}

pub async fn show(
    State(state): State<PagesState>,
    admin: Operating,
    Query(filters): Query<AuditFilters>,
) -> Result<PageResponse, PageError> {
    let text = |value: &Option<String>| value.as_deref().map(str::trim).unwrap_or_default().to_owned();
    let (principal, action, since, until) = (
        text(&filters.principal),
        text(&filters.action),
        text(&filters.since),
        text(&filters.until),
    );
    let mut problems = Vec::new();
    let mut search = AuditSearch::default();
    if !principal.is_empty() {
        match Principal::parse(&principal) {
            Ok(p) => search.principal = Some(p),
            Err(_) => problems.push(format!("{principal:?} is not a principal.")),
        }
    }
    if !action.is_empty() {
        match AuditAction::named(&action) {
            Some(a) => search.action = Some(a),
            None => problems.push(format!("{action:?} is not an action.")),
        }
    }
    for (name, value, slot) in [
        ("From", &since, &mut search.since),
        ("Until", &until, &mut search.until),
    ] {
        if !value.is_empty() {
            match parse_time(value) {
                Some(at) => *slot = Some(at),
                None => problems.push(format!(
                    "{name} {value:?} is not a time like 2026-11-27 or 2026-11-27T14:30 (UTC)."
                )),
            }
        }
    }
    let page = page_number(filters.page.as_deref());
    let window = window(page);
    search.offset = window.offset;
    search.limit = window.limit;
    let mut records = state.store.search_audit(&search).await?;
    let query = [
        ("principal", principal.clone()),
        ("action", action.clone()),
        ("since", since.clone()),
        ("until", until.clone()),
    ];
    let pager = Pager::cut(&state, routes::ADMIN_AUDIT, &query, page, &mut records);
    let entries = records
        .into_iter()
        .map(|r| {
            let e = r.entry;
            EntryRow {
                at: e.at.format("%Y-%m-%d %H:%M:%S UTC").to_string(),
                principal: e.principal.to_string(),
                action: e.action.as_str(),
                subject: e.subject,
                address: e.client_address,
                client: e.client_name,
                detail: e.detail.to_string(),
            }
        })
        .collect();
    Ok(PageResponse::new(AuditPage {
        operator: admin.shown(),
        nav: nav(&state, routes::ADMIN_AUDIT),
        problems,
        actions: AuditAction::ALL
            .iter()
            .map(|a| ActionChoice {
                name: a.as_str(),
                selected: a.as_str() == action,
            })
            .collect(),
        principal,
        since,
        until,
        entries,
        pager,
    }))
}

/// A time in UTC as the filter takes it: a date, a date and time (`T` or a space between, as
/// `datetime-local` inputs send it), or RFC 3339.
fn parse_time(text: &str) -> Option<DateTime<Utc>> {
    if let Ok(at) = DateTime::parse_from_rfc3339(text) {
        return Some(at.with_timezone(&Utc));
    }
    for format in [
        "%Y-%m-%dT%H:%M",
        "%Y-%m-%d %H:%M",
        "%Y-%m-%dT%H:%M:%S",
        "%Y-%m-%d %H:%M:%S",
    ] {
        if let Ok(at) = NaiveDateTime::parse_from_str(text, format) {
            return Some(at.and_utc());
        }
    }
    NaiveDate::parse_from_str(text, "%Y-%m-%d")
        .ok()
        .and_then(|date| date.and_hms_opt(0, 0, 0))
        .map(|at| at.and_utc())
}

#[cfg(test)]
pub(super) fn samples() -> Vec<crate::web::templates::Sample> {
    let entry = |address: Option<&str>, client: Option<&str>| EntryRow {
        at: "2026-12-03 10:00:00 UTC".to_owned(),
        principal: "a@b".to_owned(),
        action: "connect",
        subject: "github <x>".to_owned(),
        address: address.map(str::to_owned),
        client: client.map(str::to_owned),
        detail: "{\"scopes\":[\"repo\"]}".to_owned(),
    };
    let page = |problems: Vec<String>, entries: Vec<EntryRow>| AuditPage {
        operator: "root@example.com".to_owned(),
        nav: super::sample_nav("Audit trail"),
        problems,
        principal: "a@b".to_owned(),
        actions: vec![
            ActionChoice {
                name: "connect",
                selected: true,
            },
            ActionChoice {
                name: "disconnect",
                selected: false,
            },
        ],
        since: "2026-11-27".to_owned(),
        until: String::new(),
        pager: super::sample_pager(!entries.is_empty()),
        entries,
    };
    vec![
        crate::web::templates::Sample::of(page(
            Vec::new(),
            vec![
                entry(Some("192.0.2.1"), Some("Claude \"Code\"")),
                entry(None, Some("cli")),
                entry(Some("::1"), None),
                entry(None, None),
            ],
        )),
        crate::web::templates::Sample::of(page(vec!["\"x\" is not an action.".to_owned()], Vec::new())),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filter_times_read_as_utc() {
        let at = |text| parse_time(text).map(|t| t.to_rfc3339());
        assert_eq!(at("2026-11-27").as_deref(), Some("2026-11-27T00:00:00+00:00"));
        assert_eq!(at("2026-11-27T14:30").as_deref(), Some("2026-11-27T14:30:00+00:00"));
        assert_eq!(at("2026-11-27 14:30:05").as_deref(), Some("2026-11-27T14:30:05+00:00"));
        assert_eq!(
            at("2026-11-27T14:30:00+01:00").as_deref(),
            Some("2026-11-27T13:30:00+00:00")
        );
        assert_eq!(at("yesterday"), None);
        assert_eq!(at("2026-13-01"), None);
    }
}
