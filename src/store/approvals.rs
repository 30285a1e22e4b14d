//! Approvers' votes on approval requests (an elicitation asking for `approval:ID`): one per
//! approver and request, never changed, and taken only while the request waits; the record and
//! the store trait.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::Value;

use super::{FormAnswerRecord, StoreError};
use crate::domain::{ElicitationId, Principal};

/// One approver's decision on one request.
#[derive(Debug, Clone, PartialEq)]
pub struct VoteRecord {
    pub elicitation_id: ElicitationId,
    pub approver: Principal,
    pub approve: bool,
    /// What the approver wrote, bounded; empty when nothing.
    pub reason: String,
    pub decided_at: DateTime<Utc>,
}

#[async_trait]
pub trait ApprovalStore: Send + Sync {
    /// Stores the vote if its request is pending and unexpired at the vote's time and this
    /// approver has not voted on it yet (false otherwise).
    async fn record_vote(&self, vote: &VoteRecord) -> Result<bool, StoreError>;

    /// Decides a request, once: in one transaction, completes it if it is still pending and
    /// unexpired at `now` (the compare-and-swap that makes one decision), stores `vote` when the
    /// vote is what decides (a denial), the decision as the call's `answer`, and the completion
    /// `notification` in its session's log. False, with nothing stored, when the request was
    /// decided (or ended) already or this approver had voted.
    async fn decide(
        &self,
        vote: Option<&VoteRecord>,
        answer: &FormAnswerRecord,
        notification: &Value,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError>;

    /// A request's votes, oldest first.
    async fn votes(&self, elicitation: &ElicitationId) -> Result<Vec<VoteRecord>, StoreError>;
}
