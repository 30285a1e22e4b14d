//! The audit trail, domain side: who did what to their access, when, and from where. The gate,
//! the pages and the protocol call [`Audit::record`]; operators read the trail with
//! `gatehouse audit` (`cli/audit.rs`). What goes in is decided here and by the callers, never a
//! secret: an entry names a provider, form, elicitation, tool or upstream, and its detail is a
//! small JSON object of non-secret facts (scopes, a requirement's text, an outcome), cut to a
//! bounded size.
//!
//! Recording never holds up the user's action: an entry is stamped with the time of the action,
//! queued, and written by one writer task per replica in batches (one transaction each). A full
//! queue, or a batch the database refuses (it went away in between), is logged with everything
//! the entries held; the action stands either way. At shutdown the writer writes what is queued
//! before it ends; [`Audit::flush`] waits until everything recorded so far is written.

use std::net::IpAddr;
use std::sync::Arc;

use chrono::Utc;
use serde_json::{Map, Value, json};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::domain::Principal;
use crate::store::{AuditAction, AuditEntry, Store};
use crate::text;

/// Where an action came from: the client's address (after trusted proxies) and the MCP client's
/// name, each when known.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Origin {
    pub address: Option<IpAddr>,
    pub client: Option<String>,
}

impl Origin {
    /// Nobody's request: the sweeper, a background refresh.
    pub const fn unknown() -> Self {
        Self {
            address: None,
            client: None,
        }
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

/// Entries waiting for the writer, per replica; beyond this they are logged and dropped.
const QUEUE: usize = 10_000;
/// Most entries written in one transaction.
const BATCH: usize = 256;

enum Job {
    Entry(AuditEntry),
    /// Answered once every entry queued before it is written (or its write failed).
    Flush(oneshot::Sender<()>),
}

/// The recorder: queues entries for its writer task.
pub struct Audit {
    queue: mpsc::Sender<Job>,
}

impl Audit {
    /// The recorder and its writer task, which ends after `shutdown` once the queue is written.
    pub fn start(store: Arc<dyn Store>, shutdown: CancellationToken) -> (Self, JoinHandle<()>) {
        let (queue, jobs) = mpsc::channel(QUEUE);
        (Self { queue }, tokio::spawn(write(store, jobs, shutdown)))
    }

    /// Queues an entry, stamped now. Never waits and never fails: a full queue (the database is
    /// far behind) drops the entry with an error log holding all of it.
    pub fn record(&self, principal: &Principal, action: AuditAction, subject: &str, origin: &Origin, detail: Value) {
        let entry = entry(principal, action, subject, origin, detail);
        if let Err(error) = self.queue.try_send(Job::Entry(entry)) {
            let reason = match &error {
                mpsc::error::TrySendError::Full(_) => "the audit queue is full",
                mpsc::error::TrySendError::Closed(_) => "the audit writer has stopped",
            };
            if let Job::Entry(entry) = error.into_inner() {
                log_unwritten(&entry, reason);
            }
        }
    }

    /// An operator's command against `principal`'s access: `command` names it (e.g.
    /// `connections revoke`), `subject` what it acted on; the detail says which command.
    pub fn admin(&self, principal: &Principal, command: &str, subject: &str, origin: &Origin, detail: Value) {
        let mut detail = match detail {
            Value::Object(map) => map,
            _ => Map::new(),
        };
        detail.insert(
            "command".to_owned(),
            Value::String(text::bounded(command, MAX_NAME_BYTES)),
        );
        self.record(principal, AuditAction::Admin, subject, origin, Value::Object(detail));
    }

    /// Waits until every entry recorded before it is written (or its write failed and was logged).
    pub async fn flush(&self) {
        let (done, written) = oneshot::channel();
        if self.queue.send(Job::Flush(done)).await.is_ok() {
            // An error means the writer ended: nothing more will be written.
            let _ = written.await;
        }
    }
}

/// The writer: takes what is queued, up to a batch, and writes it in one transaction; after
/// `shutdown`, writes what is left and ends.
async fn write(store: Arc<dyn Store>, mut jobs: mpsc::Receiver<Job>, shutdown: CancellationToken) {
    loop {
        let first = tokio::select! {
            job = jobs.recv() => job,
            () = shutdown.cancelled() => None,
        };
        let stopping = first.is_none();
        let mut batch = Vec::new();
        let mut flushes = Vec::new();
        for job in first.into_iter().chain(std::iter::from_fn(|| jobs.try_recv().ok())) {
            match job {
                Job::Entry(entry) => batch.push(entry),
                Job::Flush(done) => flushes.push(done),
            }
            if batch.len() >= BATCH {
                break;
            }
        }
        if !batch.is_empty()
            && let Err(error) = store.append_audit(&batch).await
        {
            for entry in &batch {
                log_unwritten(entry, &error.to_string());
            }
        }
        for done in flushes {
            let _ = done.send(());
        }
        if stopping && jobs.is_empty() {
            return;
        }
    }
}

/// An entry that will not be written, in the log instead.
fn log_unwritten(entry: &AuditEntry, reason: &str) {
    tracing::error!(
        principal = %entry.principal,
        action = entry.action.as_str(),
        subject = %entry.subject,
        at = %entry.at,
        client_address = entry.client_address.as_deref(),
        client_name = entry.client_name.as_deref(),
        detail = %entry.detail,
        reason,
        "audit entry not written"
    );
}

/// The entry as stored: names cut to size, a detail that is a small object.
fn entry(principal: &Principal, action: AuditAction, subject: &str, origin: &Origin, detail: Value) -> AuditEntry {
    let detail = match detail {
        Value::Object(map) if serde_json::to_string(&map).is_ok_and(|text| text.len() <= MAX_DETAIL_BYTES) => {
            Value::Object(map)
        }
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

    async fn store() -> Arc<dyn Store> {
        let store = crate::store::SqliteStore::connect("sqlite::memory:", 1)
            .await
            .expect("store");
        store.migrate().await.expect("migrate");
        Arc::new(store)
    }

    async fn stored(store: &Arc<dyn Store>) -> Vec<String> {
        let query = crate::store::AuditQuery {
            principal: None,
            since: None,
            limit: 100,
        };
        let records = store.audit(&query).await.expect("list");
        records.into_iter().rev().map(|r| r.entry.subject).collect()
    }

    #[tokio::test]
    async fn flushing_waits_for_what_was_recorded_and_shutdown_writes_the_rest() {
        let store = store().await;
        let shutdown = CancellationToken::new();
        let (audit, writer) = Audit::start(store.clone(), shutdown.clone());
        let record = |subjects: &[&str]| {
            for subject in subjects {
                audit.record(
                    &alice(),
                    AuditAction::CallAllowed,
                    subject,
                    &Origin::unknown(),
                    json!({}),
                );
            }
        };
        record(&["one", "two", "three"]);
        audit.flush().await;
        assert_eq!(stored(&store).await, ["one", "two", "three"], "in order");
        record(&["four", "five"]);
        shutdown.cancel();
        writer.await.expect("writer ends");
        assert_eq!(
            stored(&store).await.len(),
            5,
            "what was queued is written before the writer ends"
        );
        record(&["late"]);
        audit.flush().await;
        assert_eq!(stored(&store).await.len(), 5, "after the writer, only the log");
    }

    #[test]
    fn a_page_names_the_client_that_asked_unless_it_knows_one() {
        let page = Origin::at("192.0.2.7".parse().expect("ip"));
        assert_eq!(page.for_client("Claude").client.as_deref(), Some("Claude"));
        let call = page.for_client("Claude");
        assert_eq!(call.for_client("Other").client.as_deref(), Some("Claude"));
    }
}
