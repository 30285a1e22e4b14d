//! What users typed into hosted forms. User-scoped values are kept per principal and form and
//! reused by later calls; a call-scoped answer belongs to the one call that asked (same tool, same
//! arguments) and is taken once. Non-secret values are stored as JSON; secret fields are one
//! ciphertext, sealed by the key ring and bound to the principal and form (or the elicitation).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde_json::{Map, Value, json};

use super::{Backing, Elicitations, GateError, Requirement};
use crate::audit::Origin;
use crate::domain::{ElicitationId, Principal, SessionId};
use crate::forms::{Form, Forms, Submission};
use crate::secret::Secret;
use crate::store::{
    AskKey, AskScope, AuditAction, ElicitationRecord, ElicitationStatus, FormAnswerRecord, FormValuesRecord, StoreError,
};

/// A user's saved values as pages may show them: the non-secret values and the names of the
/// stored secrets (never their values).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StoredValues {
    pub values: Map<String, Value>,
    pub secret_names: BTreeSet<String>,
}

impl From<Submission> for StoredValues {
    fn from(submission: Submission) -> Self {
        Self {
            values: submission.values,
            secret_names: submission.secrets.into_keys().collect(),
        }
    }
}

pub struct FormValues {
    backing: Backing,
    elicitations: Arc<Elicitations>,
    forms: Arc<Forms>,
}

/// What a user-scoped form's sealed secrets are bound to.
pub(super) fn user_form_context(principal: &Principal, form: &str) -> String {
    format!("form:{principal}:{form}:secrets")
}

/// What a call-scoped answer's sealed secrets are bound to.
pub(super) fn answer_context(elicitation: &ElicitationId) -> String {
    format!("answer:{elicitation}:secrets")
}

/// The answer stored for exactly this call of `principal` (in the session, or bound to the
/// caller, as `scope` says) to what asked for `requirement` (a call-scoped form, an approval),
/// taken: an answer is used once.
pub(super) async fn take_answer(
    backing: &Backing,
    principal: &Principal,
    scope: AskScope<'_>,
    requirement: &Requirement,
    call_key: &str,
) -> Result<Option<FormAnswerRecord>, GateError> {
    let requirement = requirement.to_string();
    Ok(backing
        .store
        .take_form_answer(AskKey {
            principal,
            scope,
            requirement: &requirement,
            call_key: Some(call_key),
        })
        .await?)
}

impl FormValues {
    pub fn new(backing: Backing, elicitations: Arc<Elicitations>, forms: Arc<Forms>) -> Self {
        Self {
            backing,
            elicitations,
            forms,
        }
    }

    pub fn forms(&self) -> &Forms {
        &self.forms
    }

    /// The form an elicitation asks for.
    pub fn form_of(&self, elicitation: &ElicitationRecord) -> Option<&Form> {
        match Requirement::parse(&elicitation.requirement).ok()? {
            Requirement::Form { form } => self.forms.get(&form),
            Requirement::Provider { .. } | Requirement::Approval { .. } => None,
        }
    }

    /// The principal's values for a user-scoped form, secrets unsealed, for a call to use.
    pub async fn user_values(&self, principal: &Principal, form: &str) -> Result<Option<Submission>, GateError> {
        let Some(record) = self.backing.store.form_values(principal, form).await? else {
            return Ok(None);
        };
        self.unseal_submission(
            &record.fields,
            record.secrets.as_deref(),
            &user_form_context(principal, form),
        )
        .map(Some)
    }

    /// The answer to a call-scoped form given for exactly this call, taken (it is used once).
    pub async fn take_call_answer(
        &self,
        principal: &Principal,
        session: &SessionId,
        form: &str,
        call_key: &str,
    ) -> Result<Option<Submission>, GateError> {
        let requirement = Requirement::Form { form: form.to_owned() };
        let scope = AskScope::Session(session);
        let Some(answer) = take_answer(&self.backing, principal, scope, &requirement, call_key).await? else {
            return Ok(None);
        };
        self.unseal_submission(
            &answer.fields,
            answer.secrets.as_deref(),
            &answer_context(&answer.elicitation_id),
        )
        .map(Some)
    }

    /// The principal's saved values for a user-scoped form, as pages may show them.
    pub async fn stored(&self, principal: &Principal, form: &str) -> Result<Option<StoredValues>, GateError> {
        Ok(self.user_values(principal, form).await?.map(StoredValues::from))
    }

    /// Every configured form the principal has saved values for.
    pub async fn all_stored(&self, principal: &Principal) -> Result<Vec<(&Form, StoredValues)>, GateError> {
        let mut stored = Vec::new();
        for record in self.backing.store.all_form_values(principal).await? {
            // Values of a form no longer configured stay stored, but nothing can show them.
            let Some(form) = self.forms.get(&record.form) else {
                continue;
            };
            let context = user_form_context(principal, &form.id);
            let submission = self.unseal_submission(&record.fields, record.secrets.as_deref(), &context)?;
            stored.push((form, submission.into()));
        }
        Ok(stored)
    }

    /// Saves a user-scoped form's values; secrets left blank keep their stored value. With an
    /// elicitation, completes it in the same transaction. Returns whether it was completed (false
    /// without one, or when it was no longer pending); the values are saved either way.
    pub async fn save_user(
        &self,
        principal: &Principal,
        form: &Form,
        mut submission: Submission,
        elicitation: Option<&ElicitationRecord>,
        from: &Origin,
    ) -> Result<bool, GateError> {
        let context = user_form_context(principal, &form.id);
        let store = &self.backing.store;
        let now = Utc::now();
        let existing = store.form_values(principal, &form.id).await?;
        if let Some(existing) = &existing {
            let stored = self.unseal_submission(&existing.fields, existing.secrets.as_deref(), &context)?;
            for (name, value) in stored.secrets {
                submission.secrets.entry(name).or_insert(value);
            }
        }
        let action = match existing {
            Some(_) => AuditAction::FormReplaced,
            None => AuditAction::FormSaved,
        };
        let record = FormValuesRecord {
            principal: principal.clone(),
            form: form.id.clone(),
            fields: Value::Object(submission.values),
            secrets: self.seal_secrets(&submission.secrets, &context)?,
            created_at: existing.map_or(now, |e| e.created_at),
            updated_at: now,
        };
        let record = &record;
        let completed = match elicitation {
            Some(elicitation) => {
                self.elicitations
                    .finish_with(
                        elicitation,
                        ElicitationStatus::Completed,
                        from,
                        |notification| async move {
                            store
                                .save_form_values(record, Some(&elicitation.id), &notification, now)
                                .await
                        },
                    )
                    .await?
            }
            None => store.save_form_values(record, None, &Value::Null, now).await?,
        };
        tracing::info!(principal = %principal, form = %form.id, "form values saved");
        // The names of the fields saved, never their values.
        let fields: Vec<&String> = record
            .fields
            .as_object()
            .map(|f| f.keys().collect())
            .unwrap_or_default();
        let from = elicitation.map_or_else(|| from.clone(), |e| from.for_client(&e.client_name));
        let secret_fields: Vec<&String> = submission.secrets.keys().collect();
        let detail = json!({ "fields": fields, "secret_fields": secret_fields });
        self.backing.audit.record(principal, action, &form.id, &from, detail);
        Ok(completed)
    }

    /// Stores the answer to a call-scoped form for the call that asked, completing its
    /// elicitation. False (nothing stored) when the elicitation was no longer pending.
    pub async fn answer_call(
        &self,
        elicitation: &ElicitationRecord,
        submission: Submission,
        from: &Origin,
    ) -> Result<bool, GateError> {
        let answer = FormAnswerRecord {
            elicitation_id: elicitation.id,
            fields: Value::Object(submission.values),
            secrets: self.seal_secrets(&submission.secrets, &answer_context(&elicitation.id))?,
            created_at: Utc::now(),
        };
        let (store, answer) = (&self.backing.store, &answer);
        let completed = self
            .elicitations
            .finish_with(
                elicitation,
                ElicitationStatus::Completed,
                from,
                |notification| async move { store.save_form_answer(answer, &notification, Utc::now()).await },
            )
            .await?;
        if completed {
            tracing::info!(elicitation = %elicitation.id, "call form answered");
        }
        Ok(completed)
    }

    /// Deletes the principal's values for a form; false when there were none.
    pub async fn delete(&self, principal: &Principal, form: &str, from: &Origin) -> Result<bool, GateError> {
        let deleted = self.backing.store.delete_form_values(principal, form).await?;
        if deleted {
            tracing::info!(principal = %principal, form, "form values deleted");
            self.backing
                .audit
                .record(principal, AuditAction::FormDeleted, form, from, json!({}));
        }
        Ok(deleted)
    }

    /// Forgets call answers that no call took before `cutoff`.
    pub async fn drop_untaken_answers(&self, cutoff: DateTime<Utc>) -> Result<u64, GateError> {
        Ok(self.backing.store.delete_untaken_answers(cutoff).await?)
    }

    /// Submitted values from their stored form: the non-secret JSON and the sealed secrets.
    fn unseal_submission(&self, fields: &Value, sealed: Option<&[u8]>, context: &str) -> Result<Submission, GateError> {
        let Value::Object(values) = fields else {
            return Err(StoreError::Corrupt("form values are not a JSON object".into()).into());
        };
        let secrets = match sealed {
            None => BTreeMap::new(),
            Some(sealed) => {
                let opened = Secret::new(self.backing.vault.decrypt(sealed, context)?);
                serde_json::from_slice::<BTreeMap<String, String>>(opened.expose())
                    .map_err(|e| StoreError::Corrupt(format!("sealed form secrets: {e}")))?
                    .into_iter()
                    .map(|(name, value)| (name, Secret::new(value)))
                    .collect()
            }
        };
        Ok(Submission {
            values: values.clone(),
            secrets,
        })
    }

    /// Seals a submission's secrets as one ciphertext (None when it has none).
    fn seal_secrets(
        &self,
        secrets: &BTreeMap<String, Secret<String>>,
        context: &str,
    ) -> Result<Option<Vec<u8>>, GateError> {
        if secrets.is_empty() {
            return Ok(None);
        }
        let plain: BTreeMap<&str, &str> = secrets
            .iter()
            .map(|(name, value)| (name.as_str(), value.expose().as_str()))
            .collect();
        let json = Secret::new(
            serde_json::to_vec(&plain).map_err(|e| StoreError::Corrupt(format!("sealing form secrets: {e}")))?,
        );
        Ok(Some(self.backing.vault.encrypt(json.expose(), context)))
    }
}

#[cfg(test)]
mod tests;
