//! Hosted web forms defined in configuration: what a user enters in the browser when a tool needs
//! something only they can give (an API key, a confirmation).
//!
//! Everything is checked at start, so a bad form stops the service with a named key instead of
//! showing users a form they cannot complete. Posted values are checked only here, on the server:
//! the page is `novalidate`, so one set of rules and one set of messages apply to every client.
//!
//! This module owns a form as a whole (compiling `[[forms]]` from `crate::config`, validating a
//! submission field by field); `field` owns one field's rules and checks, `view` what a page shows.

mod field;
mod view;

use std::collections::{BTreeMap, BTreeSet};

use crate::config::{ConfigError, FormConfig};
use crate::domain::is_identifier;
use crate::secret::Secret;

pub use crate::config::FormScope;
pub use field::{Field, FieldKind, SelectOption};
pub use view::{FieldView, OptionView};

use field::Outcome;

const KEY_PREFIX: &str = "forms";
const DEFAULT_SUBMIT_LABEL: &str = "Submit";

/// All configured forms, compiled and checked once at start.
#[derive(Debug, Clone, Default)]
pub struct Forms {
    /// In configuration order, which is the order pages list them in.
    forms: Vec<Form>,
    by_id: BTreeMap<String, usize>,
}

impl Forms {
    pub fn from_config(forms: &[FormConfig]) -> Result<Forms, ConfigError> {
        let mut compiled = Forms::default();
        for (index, config) in forms.iter().enumerate() {
            let key = format!("{KEY_PREFIX}[{index}]");
            let form = Form::compile(config, &key)?;
            if let Some(first) = compiled.by_id.get(&form.id) {
                return Err(ConfigError::key(
                    format!("{key}.id"),
                    format!("`{}` is already the id of {KEY_PREFIX}[{first}]", form.id),
                ));
            }
            compiled.by_id.insert(form.id.clone(), index);
            compiled.forms.push(form);
        }
        Ok(compiled)
    }

    pub fn get(&self, id: &str) -> Option<&Form> {
        self.by_id.get(id).and_then(|&index| self.forms.get(index))
    }

    pub fn iter(&self) -> impl Iterator<Item = &Form> {
        self.forms.iter()
    }
}

#[derive(Debug, Clone)]
pub struct Form {
    pub id: String,
    pub title: String,
    pub description: Option<String>,
    pub submit_label: String,
    pub scope: FormScope,
    pub fields: Vec<Field>,
}

/// What a valid submission holds. Secrets are kept apart so that storing the values as plain JSON
/// can never write a secret in the clear: they go to the vault, the values do not.
#[derive(Debug, Clone, Default)]
pub struct Submission {
    pub values: serde_json::Map<String, serde_json::Value>,
    pub secrets: BTreeMap<String, Secret<String>>,
}

/// Per-field messages, in field order (the order the page shows them, so an error summary reads
/// top to bottom).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldErrors {
    errors: Vec<(String, String)>,
}

impl FieldErrors {
    pub fn none() -> Self {
        Self::default()
    }

    pub fn is_empty(&self) -> bool {
        self.errors.is_empty()
    }

    pub fn get(&self, field: &str) -> Option<&str> {
        self.errors
            .iter()
            .find(|(name, _)| name == field)
            .map(|(_, message)| message.as_str())
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.errors
            .iter()
            .map(|(name, message)| (name.as_str(), message.as_str()))
    }
}

impl Form {
    fn compile(config: &FormConfig, key: &str) -> Result<Form, ConfigError> {
        if !is_identifier(&config.id) {
            return Err(ConfigError::key(
                format!("{key}.id"),
                "must be 1 to 64 letters, digits, `-` or `_` (it appears in URLs and tool requirements)",
            ));
        }
        if config.title.trim().is_empty() {
            return Err(ConfigError::key(format!("{key}.title"), "must not be empty"));
        }
        if let Some(label) = &config.submit_label
            && label.trim().is_empty()
        {
            return Err(ConfigError::key(
                format!("{key}.submit_label"),
                "must not be empty (leave it out for \"Submit\")",
            ));
        }
        if config.scope == FormScope::User {
            // A user's values outlive any one call, so there are no call arguments to show.
            if config.description.as_deref().is_some_and(|text| text.contains("{{")) {
                return Err(ConfigError::key(
                    format!("{key}.description"),
                    "only call-scoped forms can show tool arguments (`{{...}}`); set scope = \"call\" or remove them",
                ));
            }
            if config.fields.is_empty() {
                return Err(ConfigError::key(
                    format!("{key}.fields"),
                    "a user-scoped form needs at least one field (only a call-scoped confirmation may have none)",
                ));
            }
        }
        let mut fields: Vec<Field> = Vec::with_capacity(config.fields.len());
        for (index, field) in config.fields.iter().enumerate() {
            let field_key = format!("{key}.fields[{index}]");
            let field = Field::compile(field, &field_key)?;
            if let Some(first) = fields.iter().position(|known| known.name == field.name) {
                return Err(ConfigError::key(
                    format!("{field_key}.name"),
                    format!("`{}` is already the name of {key}.fields[{first}]", field.name),
                ));
            }
            fields.push(field);
        }
        Ok(Form {
            id: config.id.clone(),
            title: config.title.clone(),
            description: config.description.clone(),
            submit_label: config
                .submit_label
                .clone()
                .unwrap_or_else(|| DEFAULT_SUBMIT_LABEL.to_owned()),
            scope: config.scope,
            fields,
        })
    }

    /// A confirmation: a call-scoped form asking for nothing but tick boxes (or for nothing, Confirm
    /// / Cancel), as "Pay 10 EUR to ACME? [x] I confirm" does.
    pub fn is_confirmation(&self) -> bool {
        self.scope == FormScope::Call && self.fields.iter().all(|field| field.kind == FieldKind::Boolean)
    }

    pub fn field(&self, name: &str) -> Option<&Field> {
        self.fields.iter().find(|field| field.name == name)
    }

    /// Every field is checked, so the page can show all problems at once rather than one per post.
    pub fn validate(
        &self,
        input: &[(String, String)],
        stored_secrets: &BTreeSet<String>,
    ) -> Result<Submission, FieldErrors> {
        let posted = self.first_values(input);
        let mut submission = Submission::default();
        let mut errors = FieldErrors::none();
        for field in &self.fields {
            let raw = posted.get(field.name.as_str()).copied();
            match field.check(raw, stored_secrets.contains(&field.name)) {
                Ok(Outcome::Absent) => {}
                Ok(Outcome::Value(value)) => {
                    submission.values.insert(field.name.clone(), value);
                }
                Ok(Outcome::Secret(secret)) => {
                    submission.secrets.insert(field.name.clone(), Secret::new(secret));
                }
                Err(message) => errors.errors.push((field.name.clone(), message)),
            }
        }
        if errors.is_empty() { Ok(submission) } else { Err(errors) }
    }

    /// The first value posted for each field. The first counts because a browser posts fields in
    /// page order, so a value appended to a crafted URL cannot override what the page sent.
    fn first_values<'a>(&self, input: &'a [(String, String)]) -> BTreeMap<&'a str, &'a str> {
        let mut posted = BTreeMap::new();
        for (name, value) in input {
            if self.field(name).is_some() {
                posted.entry(name.as_str()).or_insert(value.as_str());
            }
        }
        posted
    }
}

#[cfg(test)]
pub(crate) mod testing;
#[cfg(test)]
mod tests;
