//! Unit tests of whole forms: compiling a set of forms, form-level refusals, and validating a
//! submission across fields.

use std::collections::BTreeSet;

use serde_json::json;

use super::testing::{EXAMPLE, FIELD_ORDER, Root, compile, form, none, one, post, refusal};
use super::{FieldErrors, FieldKind, FormScope, SelectOption};

#[test]
fn the_documented_example_compiles() {
    let forms = compile(EXAMPLE).expect("example is valid");
    let ids: Vec<_> = forms.iter().map(|form| form.id.as_str()).collect();
    assert_eq!(ids, ["openai", "pay"]);
    let openai = forms.get("openai").expect("openai");
    assert_eq!(openai.submit_label, "Save");
    assert_eq!(openai.scope, FormScope::User);
    assert!(openai.field("api_key").expect("api_key").is_secret());
    assert!(!openai.field("org").expect("org").is_secret());
    assert_eq!(
        openai.field("org").expect("org").kind,
        FieldKind::Select(vec![
            SelectOption {
                value: "personal".into(),
                label: "Personal".into()
            },
            SelectOption {
                value: "acme".into(),
                label: "ACME Inc.".into()
            },
        ])
    );
    let pay = forms.get("pay").expect("pay");
    assert_eq!(pay.scope, FormScope::Call);
    assert!(pay.fields.is_empty());
    assert!(forms.get("missing").is_none());
    assert!(openai.field("missing").is_none());
}

#[test]
fn scope_and_submit_label_have_defaults() {
    let form = one("type = \"text\"");
    assert_eq!(form.scope, FormScope::User);
    assert_eq!(form.submit_label, "Submit");
}

#[test]
fn a_call_scoped_form_without_fields_validates_to_nothing() {
    let forms = compile(EXAMPLE).expect("example is valid");
    let pay = forms.get("pay").expect("pay");
    let submission = pay
        .validate(&post(&[("csrf", "x"), ("action", "approve")]), &BTreeSet::new())
        .expect("valid");
    assert!(submission.values.is_empty() && submission.secrets.is_empty());
}

#[test]
fn no_forms_is_fine() {
    assert_eq!(compile("").expect("empty").iter().count(), 0);
}

#[test]
fn unknown_keys_are_refused_by_serde() {
    let root: Result<Root, _> = toml::from_str("[[forms]]\nid = \"a\"\ntitle = \"A\"\ncolour = \"red\"\n");
    assert!(root.is_err());
    let root: Result<Root, _> = toml::from_str(
        "[[forms]]\nid = \"a\"\ntitle = \"A\"\n[[forms.fields]]\nname = \"f\"\nlabel = \"F\"\ntype = \"text\"\nplaceholder = \"x\"\n",
    );
    assert!(root.is_err());
    let root: Result<Root, _> = toml::from_str("[[forms]]\nid = \"a\"\ntitle = \"A\"\nscope = \"session\"\n");
    assert!(root.is_err());
}

#[test]
fn form_level_refusals_name_the_key() {
    let form = |id: &str, rest: &str| format!("[[forms]]\nid = \"{id}\"\ntitle = \"T\"\n{rest}\n");
    let field = "[[forms.fields]]\nname = \"f\"\nlabel = \"F\"\ntype = \"text\"\n";

    let (key, message) = refusal(compile(&form("bad id", field)));
    assert_eq!(key, "forms[0].id");
    assert!(message.contains("letters, digits"), "{message}");

    let (key, message) = refusal(compile(&(form("a", field) + &form("a", field))));
    assert_eq!(key, "forms[1].id");
    assert!(message.contains("forms[0]"), "{message}");

    let (key, _) = refusal(compile(
        "[[forms]]\nid = \"a\"\ntitle = \"  \"\n[[forms.fields]]\nname = \"f\"\nlabel = \"F\"\ntype = \"text\"\n",
    ));
    assert_eq!(key, "forms[0].title");

    let (key, message) = refusal(compile(&(form("a", field) + &form("b", ""))));
    assert_eq!(key, "forms[1].fields");
    assert!(message.contains("at least one field"), "{message}");

    let (key, message) = refusal(compile(&form(
        "a",
        &format!("description = \"Pay {{{{args.amount}}}}\"\n{field}"),
    )));
    assert_eq!(key, "forms[0].description");
    assert!(
        message.contains("only call-scoped forms can show tool arguments"),
        "{message}"
    );

    let (key, _) = refusal(compile(&form("a", &format!("submit_label = \" \"\n{field}"))));
    assert_eq!(key, "forms[0].submit_label");

    // The same description is fine on a call-scoped form.
    compile(&form("a", "scope = \"call\"\ndescription = \"Pay {{args.amount}}\"")).expect("call form");
}

#[test]
fn refusals_reach_fields_of_later_forms() {
    let toml = format!(
        "{EXAMPLE}\n[[forms]]\nid = \"c\"\ntitle = \"C\"\n[[forms.fields]]\nname = \"a\"\nlabel = \"A\"\ntype = \"text\"\n[[forms.fields]]\nname = \"b\"\nlabel = \"B\"\ntype = \"text\"\npattern = \"(\"\n"
    );
    let (key, message) = refusal(compile(&toml));
    assert_eq!(key, "forms[2].fields[1].pattern");
    assert!(message.contains("regular expression"), "{message}");
}

#[test]
fn every_error_is_reported_in_field_order() {
    let form = form(FIELD_ORDER, "t");
    let errors = form
        .validate(&post(&[("mail", "nope"), ("zeta", "1.5")]), &none())
        .expect_err("invalid");
    let listed: Vec<_> = errors.iter().collect();
    assert_eq!(
        listed,
        [
            ("zeta", "Enter a whole number."),
            ("alpha", "This field is required."),
            ("mail", "Enter an email address like name@example.com."),
        ]
    );
    assert!(!errors.is_empty());
    assert_eq!(errors.get("ok"), None);
    assert!(FieldErrors::none().is_empty());

    let submission = form
        .validate(&post(&[("zeta", "3"), ("alpha", "x"), ("mail", "")]), &none())
        .expect("valid");
    assert_eq!(
        serde_json::Value::Object(submission.values),
        json!({ "zeta": 3, "alpha": "x", "ok": false })
    );
}
