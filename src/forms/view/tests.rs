//! Unit tests of field views: ids and ARIA wiring, controls per kind, which value a page shows,
//! and that secrets never reach a view.

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

use super::FieldView;
use crate::forms::testing::{EVERY_KIND, none, one, post};
use crate::forms::{FieldErrors, Form};

/// Form `t` of the fixture: one field of every kind, with help, defaults and limits.
fn form() -> Form {
    crate::forms::testing::form(EVERY_KIND, "t")
}

fn object(value: Value) -> Map<String, Value> {
    value.as_object().cloned().expect("object")
}

fn by_name<'a>(views: &'a [FieldView], name: &str) -> &'a FieldView {
    views.iter().find(|view| view.name == name).expect("view")
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
    let stored = object(json!({
        "api_key": "sk-should-never-be-here",
        "org": "acme",
        "ratio": 1.0,
        "count": 7,
        "agree": false,
        "day": "2026-03-04",
    }));
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
    let values = object(json!({
        "org": "acme",
        "name": "<b>Ada</b>",
        "ratio": 1.0,
        "count": 7,
        "agree": true,
        "day": "2026-03-04",
    }));
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
