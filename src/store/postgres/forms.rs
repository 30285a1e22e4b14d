//! PostgreSQL: form values and call-scoped answers.

use super::*;

#[async_trait]
impl FormStore for PostgresStore {
    async fn save_form_values(
        &self,
        v: &FormValuesRecord,
        elicitation: Option<&ElicitationId>,
        notification: &Value,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        // One statement (atomic, one round trip), as in save_connection: save the values, complete
        // the elicitation if given and still pending, append the notification and announce it.
        let (completed,): (bool,) = sqlx::query_as(sql!(
            "WITH saved AS (
                 INSERT INTO form_values ({FORM_VALUES_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6)
                 ON CONFLICT (principal, form) DO UPDATE SET fields = EXCLUDED.fields, secrets = EXCLUDED.secrets,
                     updated_at = EXCLUDED.updated_at),
             completed AS (UPDATE elicitations SET status = 'completed', completed_at = $8
                 WHERE id = $7 AND status = 'pending' AND expires_at > $8 RETURNING session_id),
             {}
             SELECT EXISTS (SELECT 1 FROM completed), {}",
            append_to_completed(9),
            announce_completed(10),
        ))
        .bind(v.principal.as_str())
        .bind(&v.form)
        .bind(&v.fields)
        .bind(&v.secrets)
        .bind(v.created_at)
        .bind(v.updated_at)
        .bind(elicitation.map(ElicitationId::to_string))
        .bind(now)
        .bind(notification)
        .bind(NOTIFY_CHANNEL)
        .fetch_one(&self.pool)
        .await?;
        Ok(completed)
    }

    async fn form_values(&self, principal: &Principal, form: &str) -> Result<Option<FormValuesRecord>, StoreError> {
        let query = sqlx::query_as(sql!(
            "SELECT {FORM_VALUES_COLUMNS} FROM form_values WHERE principal = $1 AND form = $2"
        ))
        .bind(principal.as_str())
        .bind(form);
        self.record(query).await
    }

    async fn all_form_values(&self, principal: &Principal) -> Result<Vec<FormValuesRecord>, StoreError> {
        let query = sqlx::query_as(sql!(
            "SELECT {FORM_VALUES_COLUMNS} FROM form_values WHERE principal = $1 ORDER BY form"
        ))
        .bind(principal.as_str());
        self.records(query).await
    }

    async fn delete_form_values(&self, principal: &Principal, form: &str) -> Result<bool, StoreError> {
        let result = sqlx::query("DELETE FROM form_values WHERE principal = $1 AND form = $2")
            .bind(principal.as_str())
            .bind(form)
            .execute(&self.pool)
            .await?;
        Ok(result.rows_affected() > 0)
    }

    async fn save_form_answer(
        &self,
        answer: &FormAnswerRecord,
        notification: &Value,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let mut tx = self.pool.begin().await?;
        // Completing first decides, under the row lock, whether this answer is the one kept.
        if !finish_in(
            &mut tx,
            &answer.elicitation_id,
            ElicitationStatus::Completed,
            notification,
            now,
        )
        .await?
        {
            return Ok(false);
        }
        sqlx::query(sql!(
            "INSERT INTO form_answers ({FORM_ANSWER_COLUMNS}) VALUES ($1, $2, $3, $4)"
        ))
        .bind(answer.elicitation_id.to_string())
        .bind(&answer.fields)
        .bind(&answer.secrets)
        .bind(answer.created_at)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(true)
    }

    async fn take_form_answer(&self, ask: AskKey<'_>) -> Result<Option<FormAnswerRecord>, StoreError> {
        // A racing call skips the answer locked by another and finds an older one, or nothing; the
        // DELETE itself makes sure no answer is returned twice.
        let query = sqlx::query_as(sql!(
            "DELETE FROM form_answers WHERE elicitation_id = (
                 SELECT answer.elicitation_id FROM form_answers answer
                 JOIN elicitations e ON e.id = answer.elicitation_id
                 WHERE e.principal = $1 AND e.session_id = $2 AND e.requirement = $3 AND e.call_key = $4
                     AND e.status = 'completed'
                 ORDER BY e.completed_at DESC, e.id DESC LIMIT 1 FOR UPDATE OF answer SKIP LOCKED)
             RETURNING {FORM_ANSWER_COLUMNS}"
        ))
        .bind(ask.principal.as_str())
        .bind(ask.session.as_str())
        .bind(ask.requirement)
        .bind(ask.call_key);
        self.record(query).await
    }
}
