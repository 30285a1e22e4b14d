//! Unit tests of compiling field configuration: every refusal names its key and says why.

use crate::forms::testing::{compile, field_refusal, one, refusal, try_one};

/// Each field `spec` is refused at `key` with a message containing `fragment`.
fn assert_refusals(cases: &[(&str, &str, &str)]) {
    for (spec, expected_key, fragment) in cases {
        let (key, message) = field_refusal(spec);
        assert_eq!(key, *expected_key, "{spec}");
        assert!(message.contains(fragment), "{spec}: {message}");
    }
}

#[test]
fn field_names_and_labels_are_checked() {
    let (key, _) = field_refusal("type = \"text\"\n[[forms.fields]]\nname = \"g h\"\nlabel = \"G\"\ntype = \"text\"");
    assert_eq!(key, "forms[0].fields[1].name");

    let (key, message) =
        field_refusal("type = \"text\"\n[[forms.fields]]\nname = \"f\"\nlabel = \"G\"\ntype = \"email\"");
    assert_eq!(key, "forms[0].fields[1].name");
    assert!(message.contains("forms[0].fields[0]"), "{message}");

    let (key, _) = refusal(compile(
        "[[forms]]\nid = \"a\"\ntitle = \"A\"\n[[forms.fields]]\nname = \"f\"\nlabel = \"\"\ntype = \"text\"\n",
    ));
    assert_eq!(key, "forms[0].fields[0].label");

    let (key, message) = field_refusal("type = \"password\"");
    assert_eq!(key, "forms[0].fields[0].type");
    assert!(message.contains("`password`"), "{message}");
    for kind in [
        "text", "textarea", "email", "url", "number", "integer", "boolean", "select", "date", "secret",
    ] {
        assert!(message.contains(kind), "{message} lists {kind}");
    }
}

#[test]
fn min_and_max_are_checked() {
    let cases = [
        (
            "type = \"text\"\nmin = 1",
            "forms[0].fields[0].min",
            "only number, integer and date",
        ),
        (
            "type = \"select\"\noptions = [{ value = \"a\", label = \"A\" }]\nmax = 1",
            "forms[0].fields[0].max",
            "only number",
        ),
        (
            "type = \"number\"\nmin = \"1\"",
            "forms[0].fields[0].min",
            "finite number",
        ),
        (
            "type = \"number\"\nmax = nan",
            "forms[0].fields[0].max",
            "finite number",
        ),
        (
            "type = \"number\"\nmax = inf",
            "forms[0].fields[0].max",
            "finite number",
        ),
        ("type = \"integer\"\nmin = 1.5", "forms[0].fields[0].min", "integer"),
        ("type = \"integer\"\nmax = \"9\"", "forms[0].fields[0].max", "integer"),
        (
            "type = \"integer\"\nmin = 10\nmax = 9",
            "forms[0].fields[0].min",
            "greater than max",
        ),
        (
            "type = \"number\"\nmin = 1.5\nmax = 1",
            "forms[0].fields[0].min",
            "greater than max",
        ),
        (
            "type = \"date\"\nmin = \"2026-13-01\"",
            "forms[0].fields[0].min",
            "date like",
        ),
        (
            "type = \"date\"\nmin = \"31/01/2026\"",
            "forms[0].fields[0].min",
            "date like",
        ),
        (
            "type = \"date\"\nmax = 2026-01-31T10:00:00",
            "forms[0].fields[0].max",
            "date like",
        ),
        ("type = \"date\"\nmax = 20260131", "forms[0].fields[0].max", "date like"),
        (
            "type = \"date\"\nmin = \"2026-02-01\"\nmax = 2026-01-31",
            "forms[0].fields[0].min",
            "greater than max",
        ),
    ];
    assert_refusals(&cases);
    one("type = \"number\"\nmin = 1\nmax = 2.5");
    one("type = \"integer\"\nmin = -3\nmax = -3");
    one("type = \"date\"\nmin = \"2026-01-01\"\nmax = 2026-12-31");
}

#[test]
fn lengths_are_checked() {
    let cases = [
        (
            "type = \"number\"\nmin_length = 1",
            "forms[0].fields[0].min_length",
            "only text, textarea",
        ),
        (
            "type = \"boolean\"\nmax_length = 1",
            "forms[0].fields[0].max_length",
            "only text, textarea",
        ),
        (
            "type = \"text\"\nmin_length = 5\nmax_length = 4",
            "forms[0].fields[0].min_length",
            "greater than",
        ),
        (
            "type = \"text\"\nmin_length = 2049",
            "forms[0].fields[0].min_length",
            "greater than",
        ),
        (
            "type = \"text\"\nmax_length = 2049",
            "forms[0].fields[0].max_length",
            "at most 2048",
        ),
        (
            "type = \"secret\"\nmax_length = 5000",
            "forms[0].fields[0].max_length",
            "at most 2048",
        ),
        (
            "type = \"textarea\"\nmax_length = 20001",
            "forms[0].fields[0].max_length",
            "at most 20000",
        ),
        (
            "type = \"text\"\nmax_length = 0",
            "forms[0].fields[0].max_length",
            "at least 1",
        ),
        (
            "type = \"email\"\nmin_length = 255",
            "forms[0].fields[0].min_length",
            "maximum length 254",
        ),
    ];
    assert_refusals(&cases);
    one("type = \"textarea\"\nmax_length = 20000\nmin_length = 20000");
    one("type = \"url\"\nmin_length = 10\nmax_length = 10");
}

#[test]
fn patterns_are_checked() {
    let (key, message) = field_refusal("type = \"url\"\npattern = \"https://.*\"");
    assert_eq!(key, "forms[0].fields[0].pattern");
    assert!(message.contains("only text, textarea, email and secret"), "{message}");
    let (key, _) = field_refusal("type = \"number\"\npattern = \"[0-9]+\"");
    assert_eq!(key, "forms[0].fields[0].pattern");

    let (key, message) = field_refusal("type = \"text\"\npattern = \"[a-z\"");
    assert_eq!(key, "forms[0].fields[0].pattern");
    assert!(message.contains("regular expression"), "{message}");

    // Valid once wrapped in `^(?:…)$`, but not alone: would otherwise escape the anchors.
    let (key, _) = field_refusal("type = \"text\"\npattern = \"a)|(?:b\"");
    assert_eq!(key, "forms[0].fields[0].pattern");

    // A counted repetition that would compile to far more than the size limit.
    let (key, message) = field_refusal("type = \"text\"\npattern = '(\\w{1000}){1000}'");
    assert_eq!(key, "forms[0].fields[0].pattern");
    assert!(message.contains("size limit"), "{message}");

    one("type = \"textarea\"\npattern = '(?s).*'");
    one("type = \"secret\"\npattern = 'sk-[A-Za-z0-9]{20,}'");
}

#[test]
fn options_are_checked() {
    let cases = [
        ("type = \"select\"", "forms[0].fields[0].options", "at least one option"),
        (
            "type = \"select\"\noptions = []",
            "forms[0].fields[0].options",
            "at least one option",
        ),
        (
            "type = \"text\"\noptions = [{ value = \"a\", label = \"A\" }]",
            "forms[0].fields[0].options",
            "only select",
        ),
        (
            "type = \"select\"\noptions = [{ value = \"a\", label = \"A\" }, { value = \" \", label = \"B\" }]",
            "forms[0].fields[0].options[1].value",
            "empty",
        ),
        (
            "type = \"select\"\noptions = [{ value = \"a\", label = \"A\" }, { value = \"a\", label = \"B\" }]",
            "forms[0].fields[0].options[1].value",
            "option 0",
        ),
        (
            "type = \"select\"\noptions = [{ value = \"a\", label = \"\" }]",
            "forms[0].fields[0].options[0].label",
            "empty",
        ),
        (
            "type = \"select\"\noptions = [{ value = \"a\\nb\", label = \"A\" }]",
            "forms[0].fields[0].options[0].value",
            "control",
        ),
    ];
    assert_refusals(&cases);
}

#[test]
fn defaults_are_checked() {
    let options = "options = [{ value = \"a\", label = \"A\" }]";
    let cases = [
        ("type = \"secret\"\ndefault = \"sk-123\"", "cannot have a default"),
        ("type = \"text\"\ndefault = true", "must be a string"),
        ("type = \"text\"\ndefault = 5", "must be a string"),
        ("type = \"boolean\"\ndefault = \"true\"", "true or false"),
        ("type = \"integer\"\ndefault = \"5\"", "integer"),
        ("type = \"integer\"\ndefault = 5.0", "integer"),
        ("type = \"number\"\ndefault = \"5\"", "finite number"),
        ("type = \"number\"\ndefault = nan", "finite number"),
        ("type = \"date\"\ndefault = 5", "date like"),
        ("type = \"date\"\ndefault = 2026-01-31T08:00:00Z", "date like"),
        (
            "type = \"date\"\ndefault = \"tomorrow\"",
            "Enter a date like 2026-01-31.",
        ),
        (
            "type = \"date\"\nmin = \"2026-01-01\"\ndefault = \"2025-12-31\"",
            "on or after 2026-01-01",
        ),
        (
            "type = \"text\"\nmin_length = 5\ndefault = \"abc\"",
            "Enter at least 5 characters.",
        ),
        (
            "type = \"text\"\npattern = '[0-9]+'\ndefault = \"abc\"",
            "expected format",
        ),
        ("type = \"text\"\ndefault = \"two\\nlines\"", "one line"),
        ("type = \"text\"\nrequired = true\ndefault = \"\"", "required"),
        ("type = \"number\"\nmax = 10\ndefault = 10.5", "at most 10"),
        ("type = \"integer\"\nmin = 1\ndefault = 0", "at least 1"),
        ("type = \"email\"\ndefault = \"nobody\"", "email address"),
        ("type = \"url\"\ndefault = \"ftp://example.com\"", "web address"),
        ("type = \"boolean\"\nrequired = true\ndefault = false", "Tick this box"),
    ];
    for (spec, expected_message) in cases {
        let (key, message) = field_refusal(spec);
        assert_eq!(key, "forms[0].fields[0].default", "{spec}");
        assert!(message.contains(expected_message), "{spec}: {message}");
    }
    let (key, message) = field_refusal(&format!("type = \"select\"\n{options}\ndefault = \"b\""));
    assert_eq!(key, "forms[0].fields[0].default");
    assert!(message.contains("Choose one of the options."), "{message}");

    for spec in [
        "type = \"text\"\ndefault = \"<b>hi</b>\"",
        "type = \"textarea\"\ndefault = \"a\\nb\"",
        "type = \"email\"\ndefault = \"a@example.com\"",
        "type = \"url\"\ndefault = \"https://example.com\"",
        "type = \"number\"\ndefault = 2",
        "type = \"number\"\ndefault = 2.5",
        "type = \"integer\"\ndefault = -2",
        "type = \"boolean\"\ndefault = true",
        "type = \"date\"\ndefault = \"2026-01-31\"",
        "type = \"date\"\ndefault = 2026-01-31",
        "type = \"select\"\noptions = [{ value = \"a\", label = \"A\" }]\ndefault = \"a\"",
    ] {
        one(spec);
    }
}

#[test]
fn refusals_render_with_the_key() {
    let error = try_one("type = \"text\"\nmin = 1").expect_err("refused");
    assert!(
        error.to_string().starts_with("config key `forms[0].fields[0].min`: "),
        "{error}"
    );
}
