//! Form values: a principal's saved answers to a user-scoped form, and one-off answers to a
//! call-scoped form kept until the call they were asked for takes them. The records and the store
//! trait.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::Value;

use super::{AskKey, StoreError};
use crate::domain::{ElicitationId, Principal};

/// A principal's saved answers to a user-scoped form. Secret fields are one ciphertext (a JSON
/// object sealed by the key ring).
#[derive(Debug, Clone)]
pub struct FormValuesRecord {
    pub principal: Principal,
    pub form: String,
    pub fields: Value,
    pub secrets: Option<Vec<u8>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// One answer to a call-scoped form, kept until the call it was asked for takes it.
#[derive(Debug, Clone)]
pub struct FormAnswerRecord {
    pub elicitation_id: ElicitationId,
    pub fields: Value,
    pub secrets: Option<Vec<u8>>,
    pub created_at: DateTime<Utc>,
}

/// Form values, user-scoped and call-scoped answers.
#[async_trait]
pub trait FormStore: Send + Sync {
    /// Saves the principal's values for a form (replacing earlier ones; created_at kept from the
    /// first save) and, when `elicitation` is given and still pending and unexpired at `now`,
    /// completes it and appends `notification` to its session's log, in one transaction (on
    /// PostgreSQL one statement that also announces the event, like `save_connection`). Returns
    /// whether the elicitation was completed; the values are saved either way.
    async fn save_form_values(
        &self,
        values: &FormValuesRecord,
        elicitation: Option<&ElicitationId>,
        notification: &Value,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError>;

    async fn form_values(&self, principal: &Principal, form: &str) -> Result<Option<FormValuesRecord>, StoreError>;

    /// Every form the principal has values for, ordered by form id.
    async fn all_form_values(&self, principal: &Principal) -> Result<Vec<FormValuesRecord>, StoreError>;

    /// False when there was nothing to delete.
    async fn delete_form_values(&self, principal: &Principal, form: &str) -> Result<bool, StoreError>;

    /// Only when the answer's elicitation is pending and unexpired at `now`: stores the answer,
    /// completes the elicitation and appends `notification`, in one transaction. False, and
    /// nothing stored, otherwise: an elicitation is answered once.
    async fn save_form_answer(
        &self,
        answer: &FormAnswerRecord,
        notification: &Value,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError>;

    /// The newest answer still kept for a completed elicitation of this ask (which names its
    /// call; a key without a call key matches nothing), deleted as it is returned: each answer is
    /// used by exactly one call, even when two calls race for it.
    async fn take_form_answer(&self, ask: AskKey<'_>) -> Result<Option<FormAnswerRecord>, StoreError>;
}
