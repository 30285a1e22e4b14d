//! `gatehouse audit`: the operator reads the audit trail (`crate::audit` records it), newest
//! first, as a table for people (`cli/table.rs`, which shows control and bidi characters as code
//! points) or one JSON object per line for programs.

use std::time::Duration;

use anyhow::Context;
use chrono::{SecondsFormat, Utc};
use clap::Args;
use serde_json::{Value, json};

use crate::Config;
use crate::domain::Principal;
use crate::store::{AuditQuery, AuditRecord};

#[derive(Args)]
pub(super) struct AuditArgs {
    /// Only this principal's entries.
    #[arg(long)]
    principal: Option<String>,
    /// Only entries this recent: a duration as in the configuration (`90m`, `1h`, `7d`).
    #[arg(long, value_parser = crate::config::parse_duration)]
    since: Option<Duration>,
    /// One JSON object per line instead of a table.
    #[arg(long)]
    json: bool,
    /// At most this many entries, the newest.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    limit: u32,
}

pub(super) async fn run(config: Config, args: AuditArgs) -> anyhow::Result<()> {
    let principal = args
        .principal
        .map(|p| Principal::parse(&p).context("--principal"))
        .transpose()?;
    let query = AuditQuery {
        principal,
        since: args.since.map(|since| crate::clock::before(Utc::now(), since)),
        limit: usize::try_from(args.limit).unwrap_or(usize::MAX),
    };
    let database = super::open_database(&config, 1).await?;
    let records = database.store.audit(&query).await?;
    if args.json {
        for record in &records {
            println!("{}", json_line(record));
        }
    } else {
        print!("{}", table(&records));
    }
    Ok(())
}

/// One entry as a JSON object (one line of `--json`).
fn json_line(record: &AuditRecord) -> String {
    let e = &record.entry;
    json!({
        "id": record.id,
        "at": e.at.to_rfc3339_opts(SecondsFormat::Millis, true),
        "principal": e.principal.as_str(),
        "action": e.action.as_str(),
        "subject": e.subject,
        "client_address": e.client_address,
        "client_name": e.client_name,
        "detail": e.detail,
    })
    .to_string()
}

const HEADINGS: [&str; 7] = ["AT", "PRINCIPAL", "ACTION", "SUBJECT", "ADDRESS", "CLIENT", "DETAIL"];

/// The entries as an aligned table with a heading row; the detail, last, is not padded.
fn table(records: &[AuditRecord]) -> String {
    let rows: Vec<Vec<String>> = records.iter().map(row).collect();
    super::table::table(&HEADINGS, &rows)
}

fn row(record: &AuditRecord) -> Vec<String> {
    let e = &record.entry;
    let detail = match &e.detail {
        Value::Object(map) if map.is_empty() => String::new(),
        detail => detail.to_string(),
    };
    vec![
        e.at.to_rfc3339_opts(SecondsFormat::Secs, true),
        e.principal.as_str().to_owned(),
        e.action.as_str().to_owned(),
        e.subject.clone(),
        e.client_address.clone().unwrap_or_else(|| "-".to_owned()),
        e.client_name.clone().unwrap_or_else(|| "-".to_owned()),
        detail,
    ]
}

#[cfg(test)]
mod tests {
    use chrono::{TimeZone, Utc};

    use super::*;
    use crate::domain::Principal;
    use crate::store::{AuditAction, AuditEntry};

    fn record(principal: &str, client: Option<&str>) -> AuditRecord {
        AuditRecord {
            id: 7,
            entry: AuditEntry {
                at: Utc.with_ymd_and_hms(2026, 11, 26, 9, 30, 0).single().expect("time"),
                principal: Principal::parse(principal).expect("principal"),
                action: AuditAction::ConnectionCreated,
                subject: "github".to_owned(),
                client_address: Some("192.0.2.7".to_owned()),
                client_name: client.map(str::to_owned),
                detail: json!({ "scopes": ["repo"] }),
            },
        }
    }

    #[test]
    fn the_table_aligns_columns_under_their_headings() {
        let text = table(&[record("alice", Some("Claude")), record("bob@example.com", None)]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3);
        let column = |heading: &str| lines[0].find(heading).expect("heading");
        for line in &lines[1..] {
            assert_eq!(line.find("connection.created"), Some(column("ACTION")));
            assert_eq!(line.find("github"), Some(column("SUBJECT")));
        }
        assert!(lines[1].ends_with(r#"{"scopes":["repo"]}"#));
        assert!(lines[2].contains("  -  "), "no client name shows as -");
    }

    #[test]
    fn control_characters_never_reach_the_terminal() {
        let text = table(&[record("alice", Some("evil\u{1b}[2J\nfake row"))]);
        assert!(!text.contains('\u{1b}'));
        assert_eq!(text.lines().count(), 2);
    }

    #[test]
    fn a_json_line_is_one_object() {
        let line = json_line(&record("alice", Some("Claude")));
        assert!(!line.contains('\n'));
        let value: Value = serde_json::from_str(&line).expect("json");
        assert_eq!(value["action"], "connection.created");
        assert_eq!(value["at"], "2026-11-26T09:30:00.000Z");
        assert_eq!(value["client_name"], "Claude");
        assert_eq!(value["detail"]["scopes"][0], "repo");
    }
}
