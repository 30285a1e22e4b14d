//! Retention: leases that let one replica at a time do background work, and the bounded deletes
//! of rows kept past their retention period (delivered events, ended elicitations, audit rows).
//! Each delete removes at most `limit` rows in one statement, so a sweep never holds long locks;
//! what a pending flow still needs (a pending elicitation with its flow and answers, an event no
//! stream has been written yet) is never due. The statements are the same on both backends but
//! for placeholders and times; `retention_store!` implements them for each.

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

/// Takes a lease: inserted when new, else taken over when it ran out or renewed by its holder.
pub(super) const TAKE_LEASE: &str = "INSERT INTO leases (name, holder, held_until) VALUES (?1, ?2, ?3)
     ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, held_until = excluded.held_until
         WHERE leases.held_until < ?4 OR leases.holder = excluded.holder";
pub(super) const RELEASE_LEASE: &str = "DELETE FROM leases WHERE name = ?1 AND holder = ?2";
/// Events at or below their session's delivered mark, appended before the cutoff.
pub(super) const DELETE_DELIVERED_EVENTS: &str = "DELETE FROM session_events WHERE (session_id, seq) IN (
     SELECT e.session_id, e.seq FROM session_events e JOIN sessions s ON s.id = e.session_id
     WHERE e.created_at < ?1 AND e.seq <= s.delivered_seq LIMIT ?2)";
/// Flows and answers go with their elicitation (`ON DELETE CASCADE`).
pub(super) const DELETE_ENDED_ELICITATIONS: &str = "DELETE FROM elicitations WHERE id IN (
     SELECT id FROM elicitations WHERE status <> 'pending' AND COALESCE(completed_at, expires_at) < ?1 LIMIT ?2)";
pub(super) const DELETE_AUDIT: &str =
    "DELETE FROM audit WHERE id IN (SELECT id FROM audit WHERE at < ?1 ORDER BY at LIMIT ?2)";

/// `sql` with its `?N` placeholders written the backend's way (`$N` on PostgreSQL).
pub(super) fn placeheld(sql: &str, placeholder: char) -> String {
    sql.replace('?', placeholder.encode_utf8(&mut [0; 4]))
}

/// Implements [`RetentionStore`] for a backend whose pool is `self.pool`, given its placeholder
/// character and how it binds a time. The statements are the same in both backends but for
/// these; this writes the code that runs them once.
macro_rules! retention_store {
    ($store:ty, $placeholder:expr, $time:path) => {
        #[async_trait::async_trait]
        impl $crate::store::retention::RetentionStore for $store {
            async fn take_lease(&self, lease: $crate::store::retention::Lease<'_>) -> Result<bool, StoreError> {
                use $crate::store::retention::{TAKE_LEASE, placeheld};
                let result = sqlx::query(sqlx::AssertSqlSafe(placeheld(TAKE_LEASE, $placeholder)))
                    .bind(lease.name)
                    .bind(lease.holder)
                    .bind($time(lease.until))
                    .bind($time(lease.now))
                    .execute(&self.pool)
                    .await?;
                Ok(result.rows_affected() == 1)
            }

            async fn release_lease(&self, name: &str, holder: &str) -> Result<(), StoreError> {
                use $crate::store::retention::{RELEASE_LEASE, placeheld};
                sqlx::query(sqlx::AssertSqlSafe(placeheld(RELEASE_LEASE, $placeholder)))
                    .bind(name)
                    .bind(holder)
                    .execute(&self.pool)
                    .await?;
                Ok(())
            }

            async fn delete_delivered_events(
                &self,
                cutoff: chrono::DateTime<chrono::Utc>,
                limit: usize,
            ) -> Result<u64, StoreError> {
                self.delete_before($crate::store::retention::DELETE_DELIVERED_EVENTS, cutoff, limit)
                    .await
            }

            async fn delete_ended_elicitations(
                &self,
                cutoff: chrono::DateTime<chrono::Utc>,
                limit: usize,
            ) -> Result<u64, StoreError> {
                self.delete_before($crate::store::retention::DELETE_ENDED_ELICITATIONS, cutoff, limit)
                    .await
            }

            async fn delete_audit_before(
                &self,
                cutoff: chrono::DateTime<chrono::Utc>,
                limit: usize,
            ) -> Result<u64, StoreError> {
                self.delete_before($crate::store::retention::DELETE_AUDIT, cutoff, limit)
                    .await
            }
        }

        impl $store {
            /// Runs one of the retention deletes: a cutoff (`?1`) and a limit (`?2`).
            async fn delete_before(
                &self,
                sql: &str,
                cutoff: chrono::DateTime<chrono::Utc>,
                limit: usize,
            ) -> Result<u64, StoreError> {
                let result = sqlx::query(sqlx::AssertSqlSafe($crate::store::retention::placeheld(
                    sql,
                    $placeholder,
                )))
                .bind($time(cutoff))
                .bind($crate::store::sql_count(limit))
                .execute(&self.pool)
                .await?;
                Ok(result.rows_affected())
            }
        }
    };
}
