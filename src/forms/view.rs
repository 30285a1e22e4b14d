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
    let takes_length = matches!(
        field.kind,
        FieldKind::Text | FieldKind::Textarea | FieldKind::Email | FieldKind::Url | FieldKind::Secret
    );
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
mod tests {
    use std::collections::BTreeSet;

    use serde_json::{Map, Value, json};

    use super::super::tests::{compile, one, post};
    use super::super::{FieldErrors, Form};
    use super::*;

    const FORM: &str = r#"
[[forms]]
id = "t"
title = "T"
[[forms.fields]]
name = "api_key"
label = "API key"
type = "secret"
help = "Starts with sk-"
required = true
min_length = 20
[[forms.fields]]
name = "org"
label = "Organization"
type = "select"
options = [{ value = "personal", label = "Personal" }, { value = "acme", label = "ACME Inc." }]
default = "personal"
[[forms.fields]]
name = "name"
label = "Name"
type = "text"
default = "Ada"
max_length = 40
[[forms.fields]]
name = "notes"
label = "Notes"
type = "textarea"
[[forms.fields]]
name = "mail"
label = "Email"
type = "email"
[[forms.fields]]
name = "site"
label = "Site"
type = "url"
[[forms.fields]]
name = "ratio"
label = "Ratio"
type = "number"
min = 0
max = 1.5
default = 0.5
[[forms.fields]]
name = "count"
label = "Count"
type = "integer"
min = 1
default = 3
[[forms.fields]]
name = "agree"
label = "I agree"
type = "boolean"
default = true
[[forms.fields]]
name = "day"
label = "Day"
type = "date"
min = 2026-01-01
"#;

    fn form() -> Form {
        compile(FORM).expect("valid").get("t").cloned().expect("t")
    }

    fn by_name<'a>(views: &'a [FieldView], name: &str) -> &'a FieldView {
        views.iter().find(|view| view.name == name).expect("view")
    }

    fn none() -> BTreeSet<String> {
        BTreeSet::new()
    }

    #[test]
    fn ids_and_describedby_link_help_and_error() {
        let form = form();
        let views = form.views(None, None, &FieldErrors::none(), &none());
        let key = by_name(&views, "api_key");
        assert_eq!(
            (key.id.as_str(), key.help_id.as_str(), key.error_id.as_str()),
            ("field-api_key", "field-api_key-help", "field-api_key-error")
        );
        assert_eq!(key.describedby, "field-api_key-help");
        assert_eq!(by_name(&views, "name").describedby, "");
        assert_eq!(by_name(&views, "name").error, None);

        let errors = form
            .validate(&post(&[("api_key", "short"), ("count", "x")]), &none())
            .expect_err("invalid");
        let views = form.views(None, None, &errors, &none());
        let key = by_name(&views, "api_key");
        assert_eq!(key.error.as_deref(), Some("Enter at least 20 characters."));
        assert_eq!(key.describedby, "field-api_key-help field-api_key-error");
        let count = by_name(&views, "count");
        assert_eq!(count.error.as_deref(), Some("Enter a whole number."));
        assert_eq!(count.describedby, "field-count-error");
    }

    #[test]
    fn controls_match_the_kind() {
        let form = form();
        let views = form.views(None, None, &FieldErrors::none(), &none());
        let shape: Vec<_> = views
            .iter()
            .map(|view| (view.name.as_str(), view.control, view.input_type))
            .collect();
        assert_eq!(
            shape,
            [
                ("api_key", "input", "password"),
                ("org", "select", ""),
                ("name", "input", "text"),
                ("notes", "textarea", ""),
                ("mail", "input", "email"),
                ("site", "input", "url"),
                ("ratio", "input", "number"),
                ("count", "input", "number"),
                ("agree", "checkbox", "checkbox"),
                ("day", "input", "date"),
            ]
        );
        let ratio = by_name(&views, "ratio");
        assert_eq!(
            (ratio.min.as_deref(), ratio.max.as_deref(), ratio.step.as_deref()),
            (Some("0"), Some("1.5"), Some("any"))
        );
        let count = by_name(&views, "count");
        assert_eq!(
            (count.min.as_deref(), count.max.as_deref(), count.step.as_deref()),
            (Some("1"), None, Some("1"))
        );
        let day = by_name(&views, "day");
        assert_eq!((day.min.as_deref(), day.step.as_deref()), (Some("2026-01-01"), None));
        let key = by_name(&views, "api_key");
        assert_eq!(
            (key.minlength, key.maxlength, key.autocomplete),
            (Some(20), Some(2048), "new-password")
        );
        assert!(key.required);
        assert_eq!(by_name(&views, "name").maxlength, Some(40));
        assert_eq!(by_name(&views, "notes").maxlength, Some(20_000));
        assert_eq!(by_name(&views, "mail").maxlength, Some(254));
        assert_eq!(by_name(&views, "count").maxlength, None);
        assert_eq!(by_name(&views, "name").autocomplete, "on");
        assert!(!by_name(&views, "name").required);
    }

    #[test]
    fn defaults_fill_a_fresh_form() {
        let form = form();
        let views = form.views(None, None, &FieldErrors::none(), &none());
        assert_eq!(by_name(&views, "name").value, "Ada");
        assert_eq!(by_name(&views, "ratio").value, "0.5");
        assert_eq!(by_name(&views, "count").value, "3");
        assert_eq!(by_name(&views, "notes").value, "");
        assert!(by_name(&views, "agree").checked);
        assert_eq!(by_name(&views, "agree").value, "true");
        let org = by_name(&views, "org");
        assert_eq!(org.value, "personal");
        let selected: Vec<_> = org
            .options
            .iter()
            .map(|option| (option.value.as_str(), option.label.as_str(), option.selected))
            .collect();
        assert_eq!(selected, [("personal", "Personal", true), ("acme", "ACME Inc.", false)]);
        assert!(!by_name(&views, "day").checked);
    }

    #[test]
    fn typed_values_are_kept_exactly_but_never_secrets() {
        let form = form();
        let hostile = "\"><script>alert(1)</script> 🔑 \u{202E}";
        let typed = post(&[
            ("api_key", "sk-typed-but-never-echoed"),
            ("name", hostile),
            ("name", "second"),
            ("org", "acme"),
            ("count", "not a number"),
            ("csrf", "token"),
        ]);
        let errors = form.validate(&typed, &none()).expect_err("count is invalid");
        let views = form.views(Some(&typed), None, &errors, &none());
        assert_eq!(by_name(&views, "name").value, hostile);
        assert_eq!(by_name(&views, "count").value, "not a number");
        assert_eq!(by_name(&views, "org").value, "acme");
        assert!(
            by_name(&views, "org")
                .options
                .iter()
                .any(|option| option.value == "acme" && option.selected)
        );
        // Typed input replaces defaults, including an unticked box and an emptied field.
        assert_eq!(by_name(&views, "ratio").value, "");
        assert!(!by_name(&views, "agree").checked);
        let key = by_name(&views, "api_key");
        assert_eq!(key.value, "");
        assert!(!key.secret_stored);
        let json = serde_json::to_string(&views).expect("serializes");
        assert!(!json.contains("sk-typed"), "{json}");
    }

    #[test]
    fn stored_values_fill_a_replacement_form() {
        let form = form();
        let stored: Map<String, Value> = json!({
            "api_key": "sk-should-never-be-here",
            "org": "acme",
            "ratio": 1.0,
            "count": 7,
            "agree": false,
            "day": "2026-03-04",
        })
        .as_object()
        .cloned()
        .expect("object");
        let secrets: BTreeSet<String> = ["api_key".to_owned()].into();
        let views = form.views(None, Some(&stored), &FieldErrors::none(), &secrets);
        assert_eq!(by_name(&views, "org").value, "acme");
        assert_eq!(by_name(&views, "ratio").value, "1");
        assert_eq!(by_name(&views, "count").value, "7");
        assert_eq!(by_name(&views, "day").value, "2026-03-04");
        assert!(!by_name(&views, "agree").checked);
        // Absent from what was saved: the user left it empty, so the default does not come back.
        assert_eq!(by_name(&views, "name").value, "");
        let key = by_name(&views, "api_key");
        assert_eq!(key.value, "");
        assert!(key.secret_stored);
        assert!(!key.required, "blank keeps the stored secret");
    }

    #[test]
    fn what_the_page_shows_is_accepted_back() {
        let form = form();
        let views = form.views(None, None, &FieldErrors::none(), &none());
        // A browser posts every control's value, and a checkbox only when ticked.
        let posted: Vec<(String, String)> = views
            .iter()
            .filter(|view| view.control != "checkbox" || view.checked)
            .map(|view| (view.name.clone(), view.value.clone()))
            .collect();
        let stored: BTreeSet<String> = ["api_key".to_owned()].into();
        let submission = form.validate(&posted, &stored).expect("defaults are valid");
        assert_eq!(
            Value::Object(submission.values),
            json!({ "org": "personal", "name": "Ada", "ratio": 0.5, "count": 3, "agree": true })
        );
    }

    #[test]
    fn summary_shows_labels_and_hides_secrets() {
        let form = form();
        let values: Map<String, Value> = json!({
            "org": "acme",
            "name": "<b>Ada</b>",
            "ratio": 1.0,
            "count": 7,
            "agree": true,
            "day": "2026-03-04",
        })
        .as_object()
        .cloned()
        .expect("object");
        let stored: BTreeSet<String> = ["api_key".to_owned()].into();
        let lines = form.summary(&values, &stored);
        let expected = [
            ("API key", "stored, hidden"),
            ("Organization", "ACME Inc."),
            ("Name", "<b>Ada</b>"),
            ("Ratio", "1"),
            ("Count", "7"),
            ("I agree", "Yes"),
            ("Day", "2026-03-04"),
        ];
        assert_eq!(
            lines,
            expected.map(|(label, value)| (label.to_owned(), value.to_owned()))
        );

        let mut values = values;
        values.insert("agree".into(), json!(false));
        values.insert("org".into(), json!("retired"));
        let lines = form.summary(&values, &none());
        assert!(!lines.iter().any(|(label, _)| label == "API key"));
        assert!(lines.contains(&("I agree".to_owned(), "No".to_owned())));
        assert!(lines.contains(&("Organization".to_owned(), "retired".to_owned())));
    }

    #[test]
    fn a_single_secret_field_view() {
        let form = one("type = \"secret\"\nhelp = \"From the dashboard\"");
        let stored: BTreeSet<String> = ["f".to_owned()].into();
        let errors = form.validate(&post(&[("f", "a\0b")]), &stored).expect_err("NUL");
        let views = form.views(Some(&post(&[("f", "a\0b")])), None, &errors, &stored);
        let view = &views[0];
        assert_eq!(view.value, "");
        assert!(view.secret_stored);
        assert_eq!(view.describedby, "field-f-help field-f-error");
        assert_eq!(view.error.as_deref(), Some("Remove the NUL character from this value."));
    }
}
