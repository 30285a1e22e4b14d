//! [`RetentionStore`] for both backends: the lease statements and the bounded deletes.

use chrono::{DateTime, Utc};

use crate::store::{Lease, RetentionStore, StoreError};

/// Takes a lease: inserted when new, else taken over when it ran out or renewed by its holder.
const TAKE_LEASE: &str = "INSERT INTO leases (name, holder, held_until) VALUES ($1, $2, $3)
     ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, held_until = excluded.held_until
         WHERE leases.held_until < $4 OR leases.holder = excluded.holder";
const RELEASE_LEASE: &str = "DELETE FROM leases WHERE name = $1 AND holder = $2";
/// Events at or below their session's delivered mark, appended before the cutoff.
const DELETE_DELIVERED_EVENTS: &str = "DELETE FROM session_events WHERE (session_id, seq) IN (
     SELECT e.session_id, e.seq FROM session_events e JOIN sessions s ON s.id = e.session_id
     WHERE e.created_at < $1 AND e.seq <= s.delivered_seq LIMIT $2)";
/// Flows and answers go with their elicitation (`ON DELETE CASCADE`).
const DELETE_ENDED_ELICITATIONS: &str = "DELETE FROM elicitations WHERE id IN (
     SELECT id FROM elicitations WHERE status <> 'pending' AND COALESCE(completed_at, expires_at) < $1 LIMIT $2)";
const DELETE_AUDIT: &str = "DELETE FROM audit WHERE id IN (SELECT id FROM audit WHERE at < $1 ORDER BY at LIMIT $2)";

shared! {
    impl RetentionStore {
        async fn take_lease(&self, lease: Lease<'_>) -> Result<bool, StoreError> {
            let result = sqlx::query(TAKE_LEASE)
                .bind(lease.name)
                .bind(lease.holder)
                .bind(D::stored(lease.until))
                .bind(D::stored(lease.now))
                .execute(&self.pool)
                .await?;
            Ok(D::rows_affected(&result) == 1)
        }

        async fn release_lease(&self, name: &str, holder: &str) -> Result<(), StoreError> {
            sqlx::query(RELEASE_LEASE).bind(name).bind(holder).execute(&self.pool).await?;
            Ok(())
        }

        async fn delete_delivered_events(&self, cutoff: DateTime<Utc>, limit: usize) -> Result<u64, StoreError> {
            self.delete_before(DELETE_DELIVERED_EVENTS, cutoff, limit).await
        }

        async fn delete_ended_elicitations(&self, cutoff: DateTime<Utc>, limit: usize) -> Result<u64, StoreError> {
            self.delete_before(DELETE_ENDED_ELICITATIONS, cutoff, limit).await
        }

        async fn delete_audit_before(&self, cutoff: DateTime<Utc>, limit: usize) -> Result<u64, StoreError> {
            self.delete_before(DELETE_AUDIT, cutoff, limit).await
        }
    }
}

shared! {
    impl {
        /// Runs one of the retention deletes: a cutoff (`$1`) and a limit (`$2`).
        async fn delete_before(&self, sql: &'static str, cutoff: DateTime<Utc>, limit: usize) -> Result<u64, StoreError> {
            let result = sqlx::query(sql)
                .bind(D::stored(cutoff))
                .bind(crate::store::sql_count(limit))
                .execute(&self.pool)
                .await?;
            Ok(D::rows_affected(&result))
        }
    }
}
