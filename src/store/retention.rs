//! Retention: leases that let one replica at a time do background work, and the bounded deletes
//! of rows kept past their retention period (delivered events, ended elicitations, audit rows).
//! Each delete removes at most `limit` rows in one statement, so a sweep never holds long locks;
//! what a pending flow still needs (a pending elicitation with its flow and answers, an event no
//! stream has been written yet) is never due. The statements, written once for both backends,
//! are in `sql::retention`.

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::StoreError;

/// A lease asked for at `now` by `holder`, to be held until `until`.
#[derive(Debug, Clone, Copy)]
pub struct Lease<'a> {
    pub name: &'a str,
    pub holder: &'a str,
    pub now: DateTime<Utc>,
    pub until: DateTime<Utc>,
}

#[async_trait]
pub trait RetentionStore: Send + Sync {
    /// Takes the lease when nobody holds it, its holder's time ran out before `now`, or `holder`
    /// holds it already (which extends it), in one atomic statement: of replicas asking at once,
    /// exactly one gets it. False while another holder's lease runs.
    async fn take_lease(&self, lease: Lease<'_>) -> Result<bool, StoreError>;

    /// Gives the lease up, when `holder` still holds it, so another replica may take it at once.
    async fn release_lease(&self, name: &str, holder: &str) -> Result<(), StoreError>;

    /// Deletes up to `limit` events appended before `cutoff` that were written to a stream
    /// (at or below their session's delivered mark); returns how many. Events of ended sessions
    /// go with their session.
    async fn delete_delivered_events(&self, cutoff: DateTime<Utc>, limit: usize) -> Result<u64, StoreError>;

    /// Deletes up to `limit` elicitations that ended (finished, or expired) before `cutoff`, with
    /// their flows and answers; returns how many. Pending ones are never deleted.
    async fn delete_ended_elicitations(&self, cutoff: DateTime<Utc>, limit: usize) -> Result<u64, StoreError>;

    /// Deletes up to `limit` audit rows recorded before `cutoff`, oldest first; returns how many.
    async fn delete_audit_before(&self, cutoff: DateTime<Utc>, limit: usize) -> Result<u64, StoreError>;
}
