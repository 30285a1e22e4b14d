//! The audit trail, domain side: who did what to their access, when, and from where. The gate,
//! the pages and the protocol call [`Audit::record`]; operators read the trail with
//! `gatehouse audit`. What goes in is decided here and by the callers, never a secret: an entry
//! names a provider, form, elicitation, tool or upstream, and its detail is a small JSON object
//! of non-secret facts (scopes, a requirement's text, an outcome), cut to a bounded size.
//!
//! An entry is written after the action it records, in its own statement: an audit write that
//! fails (the database went away in between) is logged with everything the entry held and never
//! fails or undoes the user's action.

mod report;

use std::net::IpAddr;
use std::sync::Arc;

use chrono::Utc;
use serde_json::{Map, Value, json};

use crate::domain::Principal;
use crate::store::{AuditAction, AuditEntry, AuditQuery, AuditRecord, Store, StoreError};
use crate::text;

pub use report::{json_line, table};

/// Where an action came from: the client's address (after trusted proxies) and the MCP client's
/// name, each when known.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Origin {
    pub address: Option<IpAddr>,
    pub client: Option<String>,
}

impl Origin {
    /// Nobody's request: the sweeper, a background refresh.
    pub fn unknown() -> Self {
        Self::default()
    }

    /// A request from `address`, by no MCP client (a page, a command).
    pub fn at(address: IpAddr) -> Self {
        Self {
            address: Some(address),
            client: None,
        }
    }

    /// This origin, naming `client` when it names none yet (a page acting on an elicitation
    /// some client asked for).
    pub fn for_client(&self, client: &str) -> Self {
        Self {
            address: self.address,
            client: self.client.clone().or_else(|| Some(client.to_owned())),
        }
    }
}

/// Longest subject and client name kept, in bytes.
const MAX_NAME_BYTES: usize = 200;
/// Longest detail kept, as JSON text; a longer one is replaced by a note that it was cut.
const MAX_DETAIL_BYTES: usize = 2048;

/// The recorder and the reader of the trail.
pub struct Audit {
    store: Arc<dyn Store>,
}

impl Audit {
    pub fn new(store: Arc<dyn Store>) -> Self {
        Self { store }
    }

    /// Appends an entry. A failure is logged, never returned: the action happened either way.
    pub async fn record(
        &self,
        principal: &Principal,
        action: AuditAction,
        subject: &str,
        origin: &Origin,
        detail: Value,
    ) {
        let entry = entry(principal, action, subject, origin, detail);
        if let Err(error) = self.store.append_audit(&entry).await {
            tracing::error!(
                principal = %entry.principal,
                action = entry.action.as_str(),
                subject = %entry.subject,
                client_address = entry.client_address.as_deref(),
                client_name = entry.client_name.as_deref(),
                detail = %entry.detail,
                %error,
                "audit entry not written"
            );
        }
    }

    /// An operator's command against `principal`'s access: `command` names it (e.g.
    /// `connections revoke`), `subject` what it acted on; the detail says which command.
    pub async fn admin(&self, principal: &Principal, command: &str, subject: &str, origin: &Origin, detail: Value) {
        let mut detail = match detail {
            Value::Object(map) => map,
            _ => Map::new(),
        };
        detail.insert(
            "command".to_owned(),
            Value::String(text::bounded(command, MAX_NAME_BYTES)),
        );
        self.record(principal, AuditAction::Admin, subject, origin, Value::Object(detail))
            .await;
    }

    /// The entries matching `query`, newest first.
    pub async fn list(&self, query: &AuditQuery) -> Result<Vec<AuditRecord>, StoreError> {
        self.store.audit(query).await
    }
}

/// The entry as stored: names cut to size, a detail that is a small object.
fn entry(principal: &Principal, action: AuditAction, subject: &str, origin: &Origin, detail: Value) -> AuditEntry {
    let detail = match detail {
        Value::Object(map) if Value::Object(map.clone()).to_string().len() <= MAX_DETAIL_BYTES => Value::Object(map),
        Value::Object(_) => json!({ "cut": true }),
        _ => json!({}),
    };
    AuditEntry {
        at: Utc::now(),
        principal: principal.clone(),
        action,
        subject: text::bounded(subject, MAX_NAME_BYTES),
        client_address: origin.address.map(|address| address.to_string()),
        client_name: origin.client.as_deref().map(|name| text::bounded(name, MAX_NAME_BYTES)),
        detail,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alice() -> Principal {
        Principal::parse("alice").expect("principal")
    }

    #[test]
    fn an_entry_is_bounded() {
        let origin = Origin::at("192.0.2.7".parse().expect("ip")).for_client(&"c".repeat(1000));
        let long = "x".repeat(5000);
        let e = entry(
            &alice(),
            AuditAction::CallAllowed,
            &long,
            &origin,
            json!({ "note": long }),
        );
        assert!(e.subject.len() <= MAX_NAME_BYTES);
        assert!(
            e.client_name
                .as_deref()
                .is_some_and(|name| name.len() <= MAX_NAME_BYTES)
        );
        assert_eq!(e.client_address.as_deref(), Some("192.0.2.7"));
        assert_eq!(e.detail, json!({ "cut": true }));
        let e = entry(
            &alice(),
            AuditAction::CallAllowed,
            "tool",
            &Origin::unknown(),
            json!("not an object"),
        );
        assert_eq!(e.detail, json!({}));
    }

    #[test]
    fn a_page_names_the_client_that_asked_unless_it_knows_one() {
        let page = Origin::at("192.0.2.7".parse().expect("ip"));
        assert_eq!(page.for_client("Claude").client.as_deref(), Some("Claude"));
        let call = page.for_client("Claude");
        assert_eq!(call.for_client("Other").client.as_deref(), Some("Claude"));
    }
}
