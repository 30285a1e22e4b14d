//! [`ApprovalStore`] for both backends: a vote is inserted once per approver and request.

use super::Sql;
use crate::domain::ElicitationId;
use crate::store::rows::VOTE_COLUMNS;
use crate::store::{ApprovalStore, StoreError, VoteRecord};

static VOTES: Sql = Sql::new(|_| {
    format!("SELECT {VOTE_COLUMNS} FROM approval_votes WHERE elicitation_id = $1 ORDER BY decided_at, approver")
});

static INSERT_VOTE: Sql = Sql::new(|_| {
    format!(
        "INSERT INTO approval_votes ({VOTE_COLUMNS}) VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT (elicitation_id, approver) DO NOTHING"
    )
});

shared! {
    impl ApprovalStore {
        async fn record_vote(&self, v: &VoteRecord) -> Result<bool, StoreError> {
            let inserted = sqlx::query(INSERT_VOTE.of::<D>())
                .bind(v.elicitation_id.to_string())
                .bind(v.approver.as_str())
                .bind(v.approve)
                .bind(v.reason.as_str())
                .bind(D::stored(v.decided_at))
                .execute(&self.pool)
                .await?;
            Ok(D::rows_affected(&inserted) > 0)
        }

        async fn votes(&self, elicitation: &ElicitationId) -> Result<Vec<VoteRecord>, StoreError> {
            self.records(sqlx::query_as(VOTES.of::<D>()).bind(elicitation.to_string())).await
        }
    }
}
