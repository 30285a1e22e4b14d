//! What the page template needs for each field, decided here so the template holds no logic about
//! secrets, ids or accessibility wiring.

use std::collections::BTreeSet;

use serde::Serialize;

use super::{Field, FieldErrors, FieldKind, Form};

/// Everything the HTML template needs for one field.
#[derive(Debug, Clone, Serialize)]
pub struct FieldView {
    pub name: String,
    pub id: String,
    pub label: String,
    pub help: Option<String>,
    pub help_id: String,
    pub error: Option<String>,
    pub error_id: String,
    pub describedby: String,
    /// `input`, `textarea`, `select` or `checkbox`.
    pub control: &'static str,
    /// The `type` attribute: empty for a textarea or select, `checkbox` for a checkbox.
    pub input_type: &'static str,
    /// False for a secret that is already stored: leaving it blank keeps it.
    pub required: bool,
    /// For a checkbox, the value it posts when ticked (`true`), so the template may render it or leave
    /// the browser's `on`: both are accepted.
    pub value: String,
    pub checked: bool,
    pub options: Vec<OptionView>,
    pub min: Option<String>,
    pub max: Option<String>,
    pub step: Option<String>,
    pub minlength: Option<usize>,
    pub maxlength: Option<usize>,
    pub secret_stored: bool,
    pub autocomplete: &'static str,
}

#[derive(Debug, Clone, Serialize)]
pub struct OptionView {
    pub value: String,
    pub label: String,
    pub selected: bool,
}

/// The value a ticked box posts. Any value the page gives the box must be one `validate` accepts.
const CHECKED: &str = "true";
const SECRET_STORED: &str = "stored, hidden";

impl Form {
    /// What the page shows for each field. `typed`: what the user just posted (re-render after errors);
    /// otherwise `stored` (the user's saved non-secret values, when replacing); otherwise the field
    /// default. A field missing from `stored` shows empty, not its default: a saved submission leaves
    /// out exactly the fields the user cleared, and showing the default would quietly put it back.
    /// Secret fields never carry a value into a view: a page, its cache or a screenshot must not
    /// hold the secret, even the one the user just typed.
    pub fn views(
        &self,
        typed: Option<&[(String, String)]>,
        stored: Option<&serde_json::Map<String, serde_json::Value>>,
        errors: &FieldErrors,
        stored_secrets: &BTreeSet<String>,
    ) -> Vec<FieldView> {
        let typed = typed.map(|input| self.first_values(input));
        self.fields
            .iter()
            .map(|field| {
                let current = match (&typed, stored) {
                    (Some(typed), _) => typed.get(field.name.as_str()).map(|value| (*value).to_owned()),
                    (None, Some(stored)) => stored.get(&field.name).map(|value| stored_text(field, value)),
                    (None, None) => field.default.clone(),
                };
                let secret_stored = field.is_secret() && stored_secrets.contains(&field.name);
                view(
                    field,
                    current.unwrap_or_default(),
                    errors.get(&field.name),
                    secret_stored,
                )
            })
            .collect()
    }

    /// Non-secret stored values as (label, value) lines for the user's connections page, in field order.
    /// Empty optional fields are left out; a stored secret shows only that it exists.
    pub fn summary(
        &self,
        values: &serde_json::Map<String, serde_json::Value>,
        stored_secrets: &BTreeSet<String>,
    ) -> Vec<(String, String)> {
        self.fields
            .iter()
            .filter_map(|field| {
                if field.is_secret() {
                    return stored_secrets
                        .contains(&field.name)
                        .then(|| (field.label.clone(), SECRET_STORED.to_owned()));
                }
                let value = values.get(&field.name)?;
                let text = match (&field.kind, value) {
                    (FieldKind::Boolean, value) => match value.as_bool() {
                        Some(true) => "Yes".to_owned(),
                        _ => "No".to_owned(),
                    },
                    // A value no longer among the options (the config changed) still shows as saved.
                    (FieldKind::Select(options), serde_json::Value::String(chosen)) => options
                        .iter()
                        .find(|option| &option.value == chosen)
                        .map_or_else(|| chosen.clone(), |option| option.label.clone()),
                    _ => stored_text(field, value),
                };
                Some((field.label.clone(), text))
            })
            .collect()
    }
}

/// A stored JSON value as the text its control would hold.
fn stored_text(field: &Field, value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::String(text) => text.clone(),
        serde_json::Value::Bool(true) => CHECKED.to_owned(),
        serde_json::Value::Bool(false) | serde_json::Value::Null => String::new(),
        // A number input wants `3`, not the `3.0` a stored f64 would print as JSON.
        serde_json::Value::Number(number) => match (&field.kind, number.as_i64(), number.as_f64()) {
            (FieldKind::Number, _, Some(float)) => float.to_string(),
            (_, Some(integer), _) => integer.to_string(),
            _ => number.to_string(),
        },
        other => other.to_string(),
    }
}

fn view(field: &Field, current: String, error: Option<&str>, secret_stored: bool) -> FieldView {
    let id = format!("field-{}", field.name);
    let help_id = format!("{id}-help");
    let error_id = format!("{id}-error");
    let describedby = [
        field.help.as_ref().map(|_| help_id.as_str()),
        error.map(|_| error_id.as_str()),
    ]
    .into_iter()
    .flatten()
    .collect::<Vec<_>>()
    .join(" ");
    let (control, input_type) = match field.kind {
        FieldKind::Text => ("input", "text"),
        FieldKind::Textarea => ("textarea", ""),
        FieldKind::Email => ("input", "email"),
        FieldKind::Url => ("input", "url"),
        FieldKind::Number | FieldKind::Integer => ("input", "number"),
        FieldKind::Boolean => ("checkbox", "checkbox"),
        FieldKind::Select(_) => ("select", ""),
        FieldKind::Date => ("input", "date"),
        FieldKind::Secret => ("input", "password"),
    };
    let checked = field.kind == FieldKind::Boolean && matches!(current.as_str(), "true" | "on");
    let value = match field.kind {
        FieldKind::Secret => String::new(),
        // The box posts this when ticked; its state is `checked`.
        FieldKind::Boolean => CHECKED.to_owned(),
        _ => current,
    };
    let options = match &field.kind {
        FieldKind::Select(options) => options
            .iter()
            .map(|option| OptionView {
                value: option.value.clone(),
                label: option.label.clone(),
                selected: option.value == value,
            })
            .collect(),
        _ => Vec::new(),
    };
    let step = match field.kind {
        FieldKind::Number => Some("any".to_owned()),
        FieldKind::Integer => Some("1".to_owned()),
        _ => None,
    };
    let takes_length = field.kind.takes_length();
    FieldView {
        name: field.name.clone(),
        id,
        label: field.label.clone(),
        help: field.help.clone(),
        help_id,
        error: error.map(str::to_owned),
        error_id,
        describedby,
        control,
        input_type,
        // Leaving a stored secret blank keeps it, so the page must not mark the field as needing input.
        required: field.required && !secret_stored,
        value,
        checked,
        options,
        min: field.min.map(|bound| bound.to_string()),
        max: field.max.map(|bound| bound.to_string()),
        step,
        minlength: field.min_length.filter(|_| takes_length),
        maxlength: takes_length.then_some(field.max_length),
        secret_stored,
        // Browsers ignore "off" on password inputs; "new-password" stops them filling in a saved login.
        autocomplete: if field.is_secret() { "new-password" } else { "on" },
    }
}

#[cfg(test)]
mod tests;
