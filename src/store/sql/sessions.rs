//! The [`Store`] trait for both backends: sessions and their event logs, elicitations, OAuth flows.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::types::Json;

use super::{NEXT_EVENTS, Sql, ask_rows};
use crate::domain::{ElicitationId, LogLevel, SessionId};
use crate::store::rows::{ELICITATION_COLUMNS, FLOW_COLUMNS, Native, SESSION_COLUMNS, Stored, parse_session_id};
use crate::store::{
    AskKey, Backend, ElicitationRecord, ElicitationStatus, Ending, NOTIFY_CHANNEL, Notice, OAuthFlowRecord, PoolStats,
    SessionRecord, Store, StoreError, StoredEvent, TakenEvents,
};

/// The principal's sessions beyond the newest ones (the count is bound at `$3`), but the new one.
static END_OLDEST_SESSIONS: Sql = Sql::new(|syntax| {
    syntax.notifying(
        &format!(
            "DELETE FROM sessions WHERE id IN ({}) RETURNING id",
            super::sessions_past_cap("$1", "$2", "$3")
        ),
        &Notice::changed_sql("id"),
    )
});

static DELETE_SESSION: Sql = Sql::new(|syntax| {
    syntax.notifying(
        "DELETE FROM sessions WHERE id = $1 RETURNING id",
        &Notice::changed_sql("id"),
    )
});

static SET_LOG_LEVEL: Sql = Sql::new(|syntax| {
    syntax.notifying(
        "UPDATE sessions SET log_level = $2 WHERE id = $1 RETURNING id",
        &Notice::changed_sql("id"),
    )
});

static DELETE_IDLE_SESSIONS: Sql = Sql::new(|syntax| {
    syntax.notifying(
        "DELETE FROM sessions WHERE last_seen_at < $1 RETURNING id",
        &Notice::changed_sql("id"),
    )
});

static TAKE_UNREPORTED_ENDING: Sql = Sql::new(|syntax| {
    format!(
        "UPDATE elicitations SET reported = TRUE WHERE id = (
             SELECT id FROM elicitations
             WHERE {} AND status = $5 AND NOT reported
             ORDER BY completed_at DESC LIMIT 1 {})
         AND NOT reported RETURNING {ELICITATION_COLUMNS}",
        ask_rows("", "$6"),
        syntax.skip_locked("elicitations")
    )
});

static SESSION: Sql = Sql::new(|_| format!("SELECT {SESSION_COLUMNS} FROM sessions WHERE id = $1"));

/// The events after a cursor, and a row of nulls if the session exists.
static EVENTS_AFTER: Sql = Sql::new(|_| {
    format!(
        "SELECT seq, message, created_at FROM ({NEXT_EVENTS}) events
         UNION ALL SELECT NULL, NULL, NULL FROM sessions WHERE id = $1 ORDER BY seq"
    )
});

static ELICITATION: Sql = Sql::new(|_| format!("SELECT {ELICITATION_COLUMNS} FROM elicitations WHERE id = $1"));

/// Inserts the elicitation unless its principal already has `$16` pending and unexpired (at `$9`,
/// its creation): the count and the insertion in one statement.
static INSERT_ELICITATION: Sql = Sql::new(|_| {
    format!(
        "INSERT INTO elicitations ({ELICITATION_COLUMNS})
         SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15
         WHERE (SELECT count(*) FROM elicitations WHERE principal = $2 AND status = 'pending' AND expires_at > $9) < $16
         RETURNING {ELICITATION_COLUMNS}"
    )
});

static EXPIRE_ELICITATIONS: Sql = Sql::new(|_| {
    format!(
        "UPDATE elicitations SET status = 'expired' WHERE status = 'pending' AND expires_at <= $1
         RETURNING {ELICITATION_COLUMNS}"
    )
});

/// This ask's pending elicitations past their expiry (bound at `$5`; the client at `$6`).
fn overdue_ask() -> String {
    format!(
        "UPDATE elicitations SET status = 'expired'
         WHERE {} AND status = 'pending' AND expires_at <= $5",
        ask_rows("", "$6")
    )
}

static OVERDUE_ASK: Sql = Sql::new(|_| overdue_ask());

static EXPIRE_OVERDUE_ASK: Sql = Sql::new(|_| format!("{} RETURNING {ELICITATION_COLUMNS}", overdue_ask()));

static INSERT_FLOW: Sql = Sql::new(|_| {
    format!("INSERT INTO oauth_flows ({FLOW_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)")
});

static FLOW: Sql = Sql::new(|_| format!("SELECT {FLOW_COLUMNS} FROM oauth_flows WHERE state_hash = $1"));

shared! {
    impl Store {
        fn backend(&self) -> Backend {
            D::BACKEND
        }

        fn pool_stats(&self) -> PoolStats {
            PoolStats {
                open: self.pool.size(),
                idle: self.pool.num_idle(),
                max: self.pool.options().get_max_connections(),
            }
        }

        async fn migrate(&self) -> Result<(), StoreError> {
            D::migrate(&self.pool).await
        }

        async fn check_ready(&self) -> Result<(), StoreError> {
            D::check_ready(&self.pool).await
        }

        async fn create_session(
            &self,
            session: &SessionRecord,
            max_per_principal: usize,
        ) -> Result<Vec<SessionId>, StoreError> {
            let mut tx = self.pool.begin().await?;
            D::lock_principal(&mut *tx, "sessions", &session.principal).await?;
            let over_cap = crate::store::sql_count(max_per_principal.saturating_sub(1));
            let ended = if let Some(one) = D::one_statement() {
                Self::new_session_query(one.create_session.as_str(), session)
                    .bind(over_cap)
                    .bind(NOTIFY_CHANNEL)
                    .fetch_all(&mut *tx)
                    .await?
            } else {
                Self::new_session_query(super::INSERT_SESSION.as_str(), session)
                    .fetch_all(&mut *tx)
                    .await?;
                sqlx::query_as(END_OLDEST_SESSIONS.of::<D>())
                    .bind(session.principal.as_str())
                    .bind(session.id.as_str())
                    .bind(over_cap)
                    .fetch_all(&mut *tx)
                    .await?
            };
            tx.commit().await?;
            ended.iter().map(|(id,)| parse_session_id(id)).collect()
        }

        async fn session(&self, id: &SessionId) -> Result<Option<SessionRecord>, StoreError> {
            self.record(sqlx::query_as(SESSION.of::<D>()).bind(id.as_str())).await
        }

        async fn delete_session(&self, id: &SessionId) -> Result<bool, StoreError> {
            let deleted: Option<(String,)> = sqlx::query_as(DELETE_SESSION.of::<D>())
                .bind(id.as_str())
                .fetch_optional(&self.pool)
                .await?;
            Ok(deleted.is_some())
        }

        async fn set_log_level(&self, id: &SessionId, level: LogLevel) -> Result<bool, StoreError> {
            let updated: Option<(String,)> = sqlx::query_as(SET_LOG_LEVEL.of::<D>())
                .bind(id.as_str())
                .bind(level.as_str())
                .fetch_optional(&self.pool)
                .await?;
            Ok(updated.is_some())
        }

        async fn touch_sessions(&self, ids: &[SessionId], at: DateTime<Utc>) -> Result<(), StoreError> {
            D::touch_sessions(&self.pool, ids, at).await
        }

        async fn count_sessions(&self) -> Result<i64, StoreError> {
            let (count,): (i64,) = sqlx::query_as("SELECT count(*) FROM sessions").fetch_one(&self.pool).await?;
            Ok(count)
        }

        async fn delete_idle_sessions(&self, cutoff: DateTime<Utc>) -> Result<Vec<SessionId>, StoreError> {
            let rows: Vec<(String,)> = sqlx::query_as(DELETE_IDLE_SESSIONS.of::<D>())
                .bind(D::stored(cutoff))
                .fetch_all(&self.pool)
                .await?;
            rows.iter().map(|(id,)| parse_session_id(id)).collect()
        }

        async fn append_event(&self, session: &SessionId, message: &Value) -> Result<Option<i64>, StoreError> {
            if let Some(one) = D::one_statement() {
                // One statement, so one round trip: number, store and announce the event atomically.
                let seq: Option<(i64,)> = sqlx::query_as(one.append_event.as_str())
                    .bind(session.as_str())
                    .bind(Json(message))
                    .bind(NOTIFY_CHANNEL)
                    .bind(Notice::Appended(session.clone()).encode())
                    .fetch_optional(&self.pool)
                    .await?;
                return Ok(seq.map(|(seq,)| seq));
            }
            let mut tx = self.pool.begin().await?;
            let seq = Self::append_in(&mut *tx, session, message).await?;
            if seq.is_some() {
                tx.commit().await?;
            }
            Ok(seq)
        }

        async fn events_after(
            &self,
            session: &SessionId,
            after: i64,
            limit: i64,
        ) -> Result<Option<Vec<StoredEvent>>, StoreError> {
            // The events (read in the log's index order, up to the limit), and a row of nulls if
            // the session exists: no rows at all when it is gone.
            let rows: Vec<EventRow<D>> = sqlx::query_as(EVENTS_AFTER.of::<D>())
                .bind(session.as_str())
                .bind(after)
                .bind(limit)
                .fetch_all(&self.pool)
                .await?;
            if rows.is_empty() {
                return Ok(None);
            }
            stored_events::<D>(rows).map(Some)
        }

        async fn take_events_after(
            &self,
            session: &SessionId,
            after: i64,
            limit: i64,
        ) -> Result<Option<TakenEvents>, StoreError> {
            let Some(one) = D::one_statement() else {
                let Some(events) = self.events_after(session, after, limit).await? else {
                    return Ok(None);
                };
                let claimed = match events.last() {
                    Some(last) => self.claim_delivery(session, after, last.seq).await?,
                    None => false,
                };
                return Ok(Some(TakenEvents { events, claimed }));
            };
            // The events, then the session's row (last: its `seq` is null) saying whether the
            // claim took; no rows at all when the session is gone.
            let mut rows: Vec<(Option<i64>, Option<D::Json>, Option<D::Time>, Option<bool>)> =
                sqlx::query_as(one.take_events_after.as_str())
                    .bind(session.as_str())
                    .bind(after)
                    .bind(limit)
                    .fetch_all(&self.pool)
                    .await?;
            let Some((None, _, _, claimed)) = rows.pop() else {
                return Ok(None);
            };
            let events = stored_events::<D>(rows.into_iter().map(|(seq, message, at, _)| (seq, message, at)))?;
            Ok(Some(TakenEvents {
                events,
                claimed: claimed.unwrap_or(false),
            }))
        }

        async fn delivered_seq(&self, session: &SessionId) -> Result<Option<i64>, StoreError> {
            let row: Option<(i64,)> = sqlx::query_as("SELECT delivered_seq FROM sessions WHERE id = $1")
                .bind(session.as_str())
                .fetch_optional(&self.pool)
                .await?;
            Ok(row.map(|(seq,)| seq))
        }

        async fn insert_elicitation(
            &self,
            e: &ElicitationRecord,
            max_pending: usize,
        ) -> Result<Option<ElicitationRecord>, StoreError> {
            let mut tx = self.pool.begin().await?;
            D::lock_principal(&mut *tx, "elicitations", &e.principal).await?;
            // A pending row past its expiry that the sweeper has not reached yet would hold the
            // unique index and be handed out again (its link answers 410), so it is expired first:
            // the same update the sweeper makes, taken early. On SQLite this first write takes the
            // write lock, so insertions take turns and the count below is exact.
            let ask = e.ask_key();
            sqlx::query(OVERDUE_ASK.of::<D>())
                .bind(ask.principal.as_str())
                .bind(ask.scope.session())
                .bind(ask.requirement)
                .bind(ask.call_key)
                .bind(D::stored(e.created_at))
                .bind(ask.scope.client())
                .execute(&mut *tx)
                .await?;
            let pending = Self::pending_query(e.ask_key(), e.created_at)
                .fetch_optional(&mut *tx)
                .await?
                .map(ElicitationRecord::read::<D>)
                .transpose()?;
            if pending.is_some() {
                // Another call inserted it first: the one still pending is the answer.
                tx.commit().await?;
                return Ok(pending);
            }
            let inserted = sqlx::query_as(INSERT_ELICITATION.of::<D>())
                .bind(e.id.to_string())
                .bind(e.principal.as_str())
                .bind(e.session_id.as_str())
                .bind(e.requirement.as_str())
                .bind(e.status.as_str())
                .bind(e.message.as_str())
                .bind(e.url.as_str())
                .bind(e.client_name.as_str())
                .bind(D::stored(e.created_at))
                .bind(D::stored(e.expires_at))
                .bind(e.completed_at.map(D::stored))
                .bind(e.call_key.as_deref())
                .bind(e.detail.as_deref())
                .bind(e.bound.as_ref().and_then(|b| b.client.as_deref()))
                .bind(e.bound.as_ref().map(|b| b.sealed_arguments.as_slice()))
                .bind(crate::store::sql_count(max_pending))
                .fetch_optional(&mut *tx)
                .await?;
            tx.commit().await?;
            // No row: the principal has as many pending as allowed.
            inserted.map(ElicitationRecord::read::<D>).transpose()
        }

        async fn pending_elicitation(
            &self,
            ask: AskKey<'_>,
            now: DateTime<Utc>,
        ) -> Result<Option<ElicitationRecord>, StoreError> {
            self.record(Self::pending_query(ask, now)).await
        }

        async fn elicitation(&self, id: &ElicitationId) -> Result<Option<ElicitationRecord>, StoreError> {
            self.record(sqlx::query_as(ELICITATION.of::<D>()).bind(id.to_string())).await
        }

        async fn finish_elicitation(&self, ending: Ending<'_>, status: ElicitationStatus) -> Result<bool, StoreError> {
            let mut tx = self.pool.begin().await?;
            if !Self::finish_in(&mut *tx, ending.elicitation, status, ending.notification, ending.at).await? {
                return Ok(false);
            }
            tx.commit().await?;
            Ok(true)
        }

        async fn take_unreported_decline(&self, ask: AskKey<'_>) -> Result<Option<ElicitationRecord>, StoreError> {
            self.take_unreported_ending(ask, ElicitationStatus::Declined).await
        }

        async fn take_unreported_expiry(&self, ask: AskKey<'_>) -> Result<Option<ElicitationRecord>, StoreError> {
            self.take_unreported_ending(ask, ElicitationStatus::Expired).await
        }

        async fn expire_elicitations(&self, now: DateTime<Utc>) -> Result<Vec<ElicitationRecord>, StoreError> {
            self.records(sqlx::query_as(EXPIRE_ELICITATIONS.of::<D>()).bind(D::stored(now))).await
        }

        async fn expire_overdue_ask(
            &self,
            ask: AskKey<'_>,
            now: DateTime<Utc>,
        ) -> Result<Vec<ElicitationRecord>, StoreError> {
            let query = sqlx::query_as(EXPIRE_OVERDUE_ASK.of::<D>())
                .bind(ask.principal.as_str())
                .bind(ask.scope.session())
                .bind(ask.requirement)
                .bind(ask.call_key)
                .bind(D::stored(now))
                .bind(ask.scope.client());
            self.records(query).await
        }

        async fn insert_flow(&self, flow: &OAuthFlowRecord) -> Result<(), StoreError> {
            sqlx::query(INSERT_FLOW.of::<D>())
                .bind(flow.state_hash.as_str())
                .bind(flow.elicitation_id.to_string())
                .bind(flow.principal.as_str())
                .bind(flow.provider.as_str())
                .bind(flow.scopes.join(" "))
                .bind(flow.pkce_verifier.as_slice())
                .bind(flow.browser_hash.as_str())
                .bind(D::stored(flow.created_at))
                .bind(D::stored(flow.expires_at))
                .bind(flow.used_at.map(D::stored))
                .bind(flow.issuer.as_deref())
                .execute(&self.pool)
                .await?;
            Ok(())
        }

        async fn flow(&self, state_hash: &str) -> Result<Option<OAuthFlowRecord>, StoreError> {
            self.record(sqlx::query_as(FLOW.of::<D>()).bind(state_hash)).await
        }

        async fn consume_flow(&self, state_hash: &str, now: DateTime<Utc>) -> Result<bool, StoreError> {
            let result = sqlx::query(
                "UPDATE oauth_flows SET used_at = $2 WHERE state_hash = $1 AND used_at IS NULL AND expires_at > $2",
            )
            .bind(state_hash)
            .bind(D::stored(now))
            .execute(&self.pool)
            .await?;
            Ok(D::rows_affected(&result) == 1)
        }

        async fn delete_stale_flows(&self, cutoff: DateTime<Utc>) -> Result<u64, StoreError> {
            let result = sqlx::query("DELETE FROM oauth_flows WHERE expires_at < $1")
                .bind(D::stored(cutoff))
                .execute(&self.pool)
                .await?;
            Ok(D::rows_affected(&result))
        }

        async fn delete_untaken_answers(&self, cutoff: DateTime<Utc>) -> Result<u64, StoreError> {
            let result = sqlx::query("DELETE FROM form_answers WHERE created_at < $1")
                .bind(D::stored(cutoff))
                .execute(&self.pool)
                .await?;
            Ok(D::rows_affected(&result))
        }

        async fn broadcast(&self, payload: &str) -> Result<(), StoreError> {
            D::broadcast(&self.pool, payload).await
        }

        async fn claim_delivery(&self, session: &SessionId, from: i64, to: i64) -> Result<bool, StoreError> {
            let result = sqlx::query("UPDATE sessions SET delivered_seq = $3 WHERE id = $1 AND delivered_seq = $2")
                .bind(session.as_str())
                .bind(from)
                .bind(to)
                .execute(&self.pool)
                .await?;
            Ok(D::rows_affected(&result) == 1)
        }
    }
}

shared! {
    impl {
        /// The newest elicitation of this ask that ended `status` and no call reported yet, now
        /// marked reported.
        async fn take_unreported_ending(
            &self,
            ask: AskKey<'_>,
            status: ElicitationStatus,
        ) -> Result<Option<ElicitationRecord>, StoreError> {
            let query = sqlx::query_as(TAKE_UNREPORTED_ENDING.of::<D>())
                .bind(ask.principal.as_str())
                .bind(ask.scope.session())
                .bind(ask.requirement)
                .bind(ask.call_key)
                .bind(status.as_str())
                .bind(ask.scope.client());
            self.record(query).await
        }
    }
}

/// A row of a read of a session's log: an event, or (all null) the row saying the session exists.
type EventRow<D> = (Option<i64>, Option<<D as Native>::Json>, Option<<D as Native>::Time>);

/// The events among a log read's rows, in their order.
fn stored_events<D: Native>(rows: impl IntoIterator<Item = EventRow<D>>) -> Result<Vec<StoredEvent>, StoreError> {
    rows.into_iter()
        .filter_map(|(seq, message, created_at)| Some((seq?, message?, created_at?)))
        .map(|(seq, message, created_at)| {
            Ok(StoredEvent {
                seq,
                message: D::json(message, "event message")?,
                created_at: D::time(created_at)?,
            })
        })
        .collect()
}
