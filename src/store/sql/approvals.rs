//! [`ApprovalStore`] for both backends: a vote is inserted once per approver and request, and
//! only while the request waits; a decision completes the request by compare-and-swap, with the
//! deciding vote and the call's answer in the same transaction.

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::Sql;
use crate::domain::ElicitationId;
use crate::store::rows::VOTE_COLUMNS;
use crate::store::{ApprovalStore, FormAnswerRecord, StoreError, VoteRecord};

static VOTES: Sql = Sql::new(|_| {
    format!("SELECT {VOTE_COLUMNS} FROM approval_votes WHERE elicitation_id = $1 ORDER BY decided_at, approver")
});

/// The vote, if its request is pending and unexpired at the vote's time (`$5`).
static INSERT_VOTE: Sql = Sql::new(|_| {
    format!(
        "INSERT INTO approval_votes ({VOTE_COLUMNS}) SELECT $1, $2, $3, $4, $5
         WHERE EXISTS (SELECT 1 FROM elicitations WHERE id = $1 AND status = 'pending' AND expires_at > $5)
         ON CONFLICT (elicitation_id, approver) DO NOTHING"
    )
});

shared! {
    impl ApprovalStore {
        async fn record_vote(&self, v: &VoteRecord) -> Result<bool, StoreError> {
            Self::insert_vote_in(&mut *self.pool.acquire().await?, v).await
        }

        async fn decide(
            &self,
            vote: Option<&VoteRecord>,
            answer: &FormAnswerRecord,
            notification: &Value,
            now: DateTime<Utc>,
        ) -> Result<bool, StoreError> {
            let mut tx = self.pool.begin().await?;
            // The vote first, while the request still waits; then the swap out of pending, which
            // one decision wins. A loser's vote goes with its rolled-back transaction.
            if let Some(vote) = vote
                && !Self::insert_vote_in(&mut *tx, vote).await?
            {
                return Ok(false);
            }
            if !Self::answer_in(&mut *tx, answer, notification, now).await? {
                return Ok(false);
            }
            tx.commit().await?;
            Ok(true)
        }

        async fn votes(&self, elicitation: &ElicitationId) -> Result<Vec<VoteRecord>, StoreError> {
            self.records(sqlx::query_as(VOTES.of::<D>()).bind(elicitation.to_string())).await
        }
    }
}

shared! {
    impl {
        /// Stores the vote while its request waits, in the transaction (or connection) `conn`.
        async fn insert_vote_in(conn: &mut D::Connection, v: &VoteRecord) -> Result<bool, StoreError> {
            let inserted = sqlx::query(INSERT_VOTE.of::<D>())
                .bind(v.elicitation_id.to_string())
                .bind(v.approver.as_str())
                .bind(v.approve)
                .bind(v.reason.as_str())
                .bind(D::stored(v.decided_at))
                .execute(&mut *conn)
                .await?;
            Ok(D::rows_affected(&inserted) > 0)
        }
    }
}
