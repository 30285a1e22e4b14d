//! [`FormStore`] for both backends: form values read and deleted, call-scoped answers kept with
//! their elicitation's completion and taken once. Values are saved with an elicitation's
//! completion in one statement where the dialect has it, else in one transaction.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::types::Json;

use sqlx::Row;

use super::{FORM_VALUES_UPSERT, Query, Sql};
use crate::domain::{ElicitationId, Principal};
use crate::store::rows::{FORM_ANSWER_COLUMNS, FORM_VALUES_COLUMNS};
use crate::store::{
    AskKey, ElicitationStatus, FormAnswerRecord, FormStore, FormValuesRecord, NOTIFY_CHANNEL, StoreError,
};

static INSERT_FORM_VALUES: Sql = Sql::new(|_| {
    format!("INSERT INTO form_values ({FORM_VALUES_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6) {FORM_VALUES_UPSERT}")
});

static FORM_VALUES: Sql =
    Sql::new(|_| format!("SELECT {FORM_VALUES_COLUMNS} FROM form_values WHERE principal = $1 AND form = $2"));

static ALL_FORM_VALUES: Sql =
    Sql::new(|_| format!("SELECT {FORM_VALUES_COLUMNS} FROM form_values WHERE principal = $1 ORDER BY form"));

static INSERT_ANSWER: Sql =
    Sql::new(|_| format!("INSERT INTO form_answers ({FORM_ANSWER_COLUMNS}) VALUES ($1, $2, $3, $4)"));

/// The newest answer kept for a completed elicitation of the ask. On PostgreSQL a racing call
/// skips the answer locked by another and finds an older one, or nothing; on SQLite the one
/// writing statement holds the write lock from the search to the delete. Either way the DELETE
/// itself makes sure no answer is returned twice.
static TAKE_ANSWER: Sql = Sql::new(|syntax| {
    format!(
        "DELETE FROM form_answers WHERE elicitation_id = (
             SELECT answer.elicitation_id FROM form_answers answer
             JOIN elicitations e ON e.id = answer.elicitation_id
             WHERE {} AND e.call_key IS NOT NULL AND e.status = 'completed'
             ORDER BY e.completed_at DESC, e.id DESC LIMIT 1 {})
         RETURNING {FORM_ANSWER_COLUMNS}",
        super::ask_rows("e.", "$5"),
        syntax.skip_locked("answer")
    )
});

shared! {
    impl FormStore {
        async fn save_form_values(
            &self,
            v: &FormValuesRecord,
            elicitation: Option<&ElicitationId>,
            notification: &Value,
            now: DateTime<Utc>,
        ) -> Result<bool, StoreError> {
            if let Some(one) = D::one_statement() {
                let row = Self::bind_form_values(sqlx::query(one.save_form_values.as_str()), v)
                    .bind(elicitation.map(ElicitationId::to_string))
                    .bind(D::stored(now))
                    .bind(Json(notification))
                    .bind(NOTIFY_CHANNEL)
                    .fetch_one(&self.pool)
                    .await?;
                return Ok(row.try_get(0)?);
            }
            let mut tx = self.pool.begin().await?;
            Self::bind_form_values(sqlx::query(INSERT_FORM_VALUES.of::<D>()), v)
                .execute(&mut *tx)
                .await?;
            let completed = match elicitation {
                Some(id) => Self::finish_in(&mut *tx, id, ElicitationStatus::Completed, notification, now).await?,
                None => false,
            };
            tx.commit().await?;
            Ok(completed)
        }

        async fn form_values(&self, principal: &Principal, form: &str) -> Result<Option<FormValuesRecord>, StoreError> {
            self.record(sqlx::query_as(FORM_VALUES.of::<D>()).bind(principal.as_str()).bind(form))
                .await
        }

        async fn all_form_values(&self, principal: &Principal) -> Result<Vec<FormValuesRecord>, StoreError> {
            self.records(sqlx::query_as(ALL_FORM_VALUES.of::<D>()).bind(principal.as_str()))
                .await
        }

        async fn delete_form_values(&self, principal: &Principal, form: &str) -> Result<bool, StoreError> {
            let result = sqlx::query("DELETE FROM form_values WHERE principal = $1 AND form = $2")
                .bind(principal.as_str())
                .bind(form)
                .execute(&self.pool)
                .await?;
            Ok(D::rows_affected(&result) > 0)
        }

        async fn save_form_answer(
            &self,
            answer: &FormAnswerRecord,
            notification: &Value,
            now: DateTime<Utc>,
        ) -> Result<bool, StoreError> {
            let mut tx = self.pool.begin().await?;
            if !Self::answer_in(&mut *tx, answer, notification, now).await? {
                return Ok(false);
            }
            tx.commit().await?;
            Ok(true)
        }

        async fn take_form_answer(&self, ask: AskKey<'_>) -> Result<Option<FormAnswerRecord>, StoreError> {
            let query = sqlx::query_as(TAKE_ANSWER.of::<D>())
                .bind(ask.principal.as_str())
                .bind(ask.scope.session())
                .bind(ask.requirement)
                .bind(ask.call_key)
                .bind(ask.scope.client());
            self.record(query).await
        }
    }
}

shared! {
    impl {
        /// Binds the values' columns, in [`FORM_VALUES_COLUMNS`] order, from `$1` on.
        fn bind_form_values<'q>(query: Query<'q, D>, v: &'q FormValuesRecord) -> Query<'q, D> {
            query
                .bind(v.principal.as_str())
                .bind(v.form.as_str())
                .bind(Json(&v.fields))
                .bind(v.secrets.as_deref())
                .bind(D::stored(v.created_at))
                .bind(D::stored(v.updated_at))
        }

        /// Completes the answered elicitation at `now` with `notification` and stores `answer`, in
        /// the transaction on `conn`. Completing first decides, under the row lock (on SQLite, the
        /// write lock), whether this answer is the one kept: false, with nothing stored, when the
        /// elicitation had ended already.
        pub(super) async fn answer_in(
            conn: &mut D::Connection,
            answer: &FormAnswerRecord,
            notification: &Value,
            now: DateTime<Utc>,
        ) -> Result<bool, StoreError> {
            let id = &answer.elicitation_id;
            if !Self::finish_in(&mut *conn, id, ElicitationStatus::Completed, notification, now).await? {
                return Ok(false);
            }
            sqlx::query(INSERT_ANSWER.of::<D>())
                .bind(answer.elicitation_id.to_string())
                .bind(Json(&answer.fields))
                .bind(answer.secrets.as_deref())
                .bind(D::stored(answer.created_at))
                .execute(&mut *conn)
                .await?;
            Ok(true)
        }
    }
}
