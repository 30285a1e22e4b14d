//! Unit tests of checking posted values, kind by kind, with the message each refusal shows.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use crate::forms::Form;
use crate::forms::testing::{none, one, post};

const HOSTILE: [&str; 6] = [
    "<script>alert(1)</script>",
    "\"double\" and 'single' quotes; DROP TABLE users; --",
    "emoji 👩‍💻🔑 and accents éàü",
    "مرحبا بالعالم \u{202E}reversed\u{202C} עברית",
    "   leading and trailing spaces   ",
    "${jndi:ldap://x} {{args.amount}} %00 \\0",
];

/// The outcome for field `f` when it is posted as `value` (`None`: not posted).
fn check(form: &Form, value: Option<&str>) -> Result<Option<Value>, String> {
    let input = value.map(|value| post(&[("f", value)])).unwrap_or_default();
    match form.validate(&input, &none()) {
        Ok(submission) => {
            assert!(submission.secrets.is_empty());
            Ok(submission.values.get("f").cloned())
        }
        Err(errors) => Err(errors.get("f").expect("error for f").to_owned()),
    }
}

fn accepted(form: &Form, value: &str) -> Value {
    match check(form, Some(value)) {
        Ok(Some(value)) => value,
        other => panic!("{value:?} should be accepted, got {other:?}"),
    }
}

fn refused(form: &Form, value: &str) -> String {
    match check(form, Some(value)) {
        Err(message) => message,
        other => panic!("{value:?} should be refused, got {other:?}"),
    }
}

#[test]
fn text_keeps_hostile_input_intact() {
    let form = one("type = \"text\"");
    for value in HOSTILE {
        assert_eq!(accepted(&form, value), json!(value));
    }
}

#[test]
fn text_refuses_nul_line_breaks_and_control_characters() {
    let form = one("type = \"text\"");
    assert_eq!(refused(&form, "abc\0def"), "Remove the NUL character from this value.");
    assert_eq!(refused(&form, "\0"), "Remove the NUL character from this value.");
    assert_eq!(
        refused(&form, "line\nbreak"),
        "Enter this on one line, without line breaks."
    );
    assert_eq!(
        refused(&form, "carriage\rreturn"),
        "Enter this on one line, without line breaks."
    );
    assert_eq!(
        refused(&form, "header\r\nX-Injected: 1"),
        "Enter this on one line, without line breaks."
    );
    for value in ["tab\there", "bell\u{7}", "escape\u{1b}[31m", "delete\u{7f}", "c1\u{85}"] {
        assert_eq!(
            refused(&form, value),
            "Remove the invisible control characters from this value.",
            "{value:?}"
        );
    }
}

#[test]
fn required_means_not_blank() {
    let form = one("type = \"text\"\nrequired = true");
    assert_eq!(check(&form, None), Err("This field is required.".to_owned()));
    assert_eq!(refused(&form, ""), "This field is required.");
    assert_eq!(refused(&form, " \u{3000} "), "This field is required.");
    assert_eq!(accepted(&form, " x "), json!(" x "));
}

#[test]
fn optional_blank_fields_are_absent() {
    for spec in [
        "type = \"text\"",
        "type = \"textarea\"",
        "type = \"email\"",
        "type = \"url\"",
        "type = \"number\"",
        "type = \"integer\"",
        "type = \"date\"",
        "type = \"secret\"",
        "type = \"select\"\noptions = [{ value = \"a\", label = \"A\" }]",
    ] {
        let form = one(spec);
        assert_eq!(check(&form, None), Ok(None), "{spec}");
        assert_eq!(check(&form, Some("")), Ok(None), "{spec}");
        assert_eq!(check(&form, Some("   ")), Ok(None), "{spec}");
    }
}

#[test]
fn single_line_values_are_capped_in_chars() {
    let form = one("type = \"text\"");
    assert_eq!(refused(&form, &"a".repeat(10_000)), "Enter at most 2048 characters.");
    assert_eq!(accepted(&form, &"a".repeat(2048)), json!("a".repeat(2048)));
    // 2048 emoji are 8192 bytes but 2048 characters.
    assert_eq!(accepted(&form, &"🔑".repeat(2048)), json!("🔑".repeat(2048)));
    assert_eq!(refused(&form, &"🔑".repeat(2049)), "Enter at most 2048 characters.");
    for kind in ["secret", "url"] {
        let form = one(&format!("type = \"{kind}\""));
        assert_eq!(
            refused(&form, &"a".repeat(10_000)),
            "Enter at most 2048 characters.",
            "{kind}"
        );
    }
}

#[test]
fn configured_lengths_count_chars() {
    let form = one("type = \"text\"\nmin_length = 3\nmax_length = 5");
    assert_eq!(refused(&form, "ab"), "Enter at least 3 characters.");
    assert_eq!(refused(&form, "abcdef"), "Enter at most 5 characters.");
    assert_eq!(accepted(&form, "ééé"), json!("ééé"));
    assert_eq!(accepted(&form, "👍👍👍👍👍"), json!("👍👍👍👍👍"));
    let form = one("type = \"text\"\nmin_length = 1\nmax_length = 1");
    assert_eq!(refused(&form, "ab"), "Enter at most 1 character.");
}

#[test]
fn patterns_must_match_the_whole_value() {
    let form = one("type = \"text\"\npattern = '[a-z]+'");
    assert_eq!(accepted(&form, "abc"), json!("abc"));
    for value in ["abc1", "1abc", "ABC", "abc\u{0}"] {
        assert!(check(&form, Some(value)).is_err(), "{value:?}");
    }
    assert_eq!(refused(&form, "abc1"), "Enter a value in the expected format.");
    // Anchoring wraps the whole alternation, not just its ends.
    let form = one("type = \"text\"\npattern = 'a|b'");
    assert_eq!(accepted(&form, "a"), json!("a"));
    assert_eq!(refused(&form, "ab"), "Enter a value in the expected format.");
    assert_eq!(refused(&form, "xb"), "Enter a value in the expected format.");
}

#[test]
fn textarea_keeps_line_breaks_and_tabs() {
    let form = one("type = \"textarea\"");
    let note = "first line\r\nsecond\tline\n\n<script>alert(1)</script>\n";
    assert_eq!(accepted(&form, note), json!(note));
    assert_eq!(refused(&form, "a\0b"), "Remove the NUL character from this value.");
    assert_eq!(
        refused(&form, "a\u{1b}b"),
        "Remove the invisible control characters from this value."
    );
    assert_eq!(accepted(&form, &"x".repeat(10_000)), json!("x".repeat(10_000)));
    assert_eq!(accepted(&form, &"x".repeat(20_000)), json!("x".repeat(20_000)));
    assert_eq!(refused(&form, &"x".repeat(20_001)), "Enter at most 20000 characters.");
    let form = one("type = \"textarea\"\nmax_length = 10\npattern = '(?s)[a-z\\n]*'");
    assert_eq!(accepted(&form, "ab\ncd"), json!("ab\ncd"));
    assert_eq!(refused(&form, "ab\ncd\nefghi"), "Enter at most 10 characters.");
    assert_eq!(refused(&form, "AB"), "Enter a value in the expected format.");
}

#[test]
fn email_is_trimmed_and_plausible() {
    let form = one("type = \"email\"");
    assert_eq!(accepted(&form, "  ada@example.com "), json!("ada@example.com"));
    assert_eq!(
        accepted(&form, "o'brien+tag@mail.example.co.uk"),
        json!("o'brien+tag@mail.example.co.uk")
    );
    assert_eq!(accepted(&form, "jürgen@bücher-shop.de"), json!("jürgen@bücher-shop.de"));
    for value in [
        "ada",
        "@example.com",
        "ada@",
        "ada@example",
        "ada@@example.com",
        "a@b@example.com",
        "ada lovelace@example.com",
        "ada@exa mple.com",
        "ada@.com",
        "ada@example.",
        "ada@example..com",
        "<script>@x.y</script>",
        "ada@example.com/path",
    ] {
        assert_eq!(
            refused(&form, value),
            "Enter an email address like name@example.com.",
            "{value:?}"
        );
    }
    assert_eq!(
        refused(&form, "ada@example.com\nBcc: x@y.z"),
        "Enter this on one line, without line breaks."
    );
    let long = format!("{}@example.com", "a".repeat(243));
    assert_eq!(long.chars().count(), 255);
    assert_eq!(refused(&form, &long), "Enter at most 254 characters.");
    assert_eq!(accepted(&form, &long[1..]), json!(&long[1..]));
}

#[test]
fn email_takes_lengths_and_pattern() {
    let form = one("type = \"email\"\nmax_length = 20\npattern = '.*@example\\.com'");
    assert_eq!(accepted(&form, "ada@example.com"), json!("ada@example.com"));
    assert_eq!(
        refused(&form, "ada@example.org"),
        "Enter a value in the expected format."
    );
    assert_eq!(refused(&form, "lovelace1@example.com"), "Enter at most 20 characters.");
}

#[test]
fn url_needs_http_or_https_and_a_host() {
    let form = one("type = \"url\"");
    assert_eq!(
        accepted(&form, " https://example.com/path?q=<x> "),
        json!("https://example.com/path?q=<x>")
    );
    assert_eq!(accepted(&form, "http://127.0.0.1:8080"), json!("http://127.0.0.1:8080"));
    for value in [
        "example.com",
        "ftp://example.com",
        "javascript:alert(1)",
        "data:text/html,<script>alert(1)</script>",
        "file:///etc/passwd",
        "mailto:ada@example.com",
        "http://",
        "https://exa mple.com",
    ] {
        assert_eq!(
            refused(&form, value),
            "Enter a web address starting with https:// or http://.",
            "{value:?}"
        );
    }
    let form = one("type = \"url\"\nmax_length = 20");
    assert_eq!(
        refused(&form, "https://example.com/long"),
        "Enter at most 20 characters."
    );
}

#[test]
fn number_parses_finite_floats() {
    let form = one("type = \"number\"");
    assert_eq!(accepted(&form, " 3.5 "), json!(3.5));
    assert_eq!(accepted(&form, "-2"), json!(-2.0));
    assert_eq!(accepted(&form, "1e3"), json!(1000.0));
    assert!(accepted(&form, "7").is_f64(), "a number field stores an f64");
    for value in [
        "NaN",
        "inf",
        "-infinity",
        "1e400",
        "abc",
        "1,5",
        "0x10",
        "1 000",
        "3.5abc",
    ] {
        assert_eq!(refused(&form, value), "Enter a number.", "{value:?}");
    }
}

#[test]
fn number_min_and_max_accept_integers_and_floats() {
    let form = one("type = \"number\"\nmin = 1\nmax = 2.5");
    assert_eq!(accepted(&form, "1"), json!(1.0));
    assert_eq!(accepted(&form, "2.5"), json!(2.5));
    assert_eq!(refused(&form, "0.99"), "Enter a number from 1 to 2.5.");
    assert_eq!(refused(&form, "2.51"), "Enter a number from 1 to 2.5.");
    assert_eq!(
        refused(&one("type = \"number\"\nmin = 0.5"), "0"),
        "Enter a number of at least 0.5."
    );
    assert_eq!(
        refused(&one("type = \"number\"\nmax = 10"), "11"),
        "Enter a number of at most 10."
    );
}

#[test]
fn integer_parses_i64() {
    let form = one("type = \"integer\"");
    assert_eq!(accepted(&form, " 42 "), json!(42));
    assert_eq!(accepted(&form, "-7"), json!(-7));
    assert_eq!(accepted(&form, "9223372036854775807"), json!(i64::MAX));
    assert!(accepted(&form, "7").is_i64(), "an integer field stores an i64");
    for value in ["1.5", "1e3", "9223372036854775808", "abc", "4 2", "٤٢"] {
        assert_eq!(refused(&form, value), "Enter a whole number.", "{value:?}");
    }
    let form = one("type = \"integer\"\nmin = 1\nmax = 10");
    assert_eq!(accepted(&form, "10"), json!(10));
    assert_eq!(refused(&form, "0"), "Enter a whole number from 1 to 10.");
    assert_eq!(refused(&form, "11"), "Enter a whole number from 1 to 10.");
    assert_eq!(
        refused(&one("type = \"integer\"\nmin = 18"), "17"),
        "Enter a whole number of at least 18."
    );
    assert_eq!(
        refused(&one("type = \"integer\"\nmax = -1"), "0"),
        "Enter a whole number of at most -1."
    );
}

#[test]
fn boolean_is_a_checkbox() {
    let form = one("type = \"boolean\"");
    assert_eq!(check(&form, None), Ok(Some(json!(false))));
    assert_eq!(check(&form, Some("true")), Ok(Some(json!(true))));
    assert_eq!(check(&form, Some("on")), Ok(Some(json!(true))));
    for value in ["false", "yes", "1", "", "TRUE", "on ", "<script>"] {
        assert_eq!(
            refused(&form, value),
            "This box can only be ticked or left empty.",
            "{value:?}"
        );
    }
    let form = one("type = \"boolean\"\nrequired = true");
    assert_eq!(check(&form, None), Err("Tick this box to continue.".to_owned()));
    assert_eq!(check(&form, Some("on")), Ok(Some(json!(true))));
}

#[test]
fn select_takes_only_an_option_value() {
    let form = one(
        "type = \"select\"\noptions = [{ value = \"personal\", label = \"Personal\" }, { value = \"acme\", label = \"ACME\" }]",
    );
    assert_eq!(accepted(&form, "acme"), json!("acme"));
    for value in [
        "ACME",
        " acme",
        "ACME Inc.",
        "other",
        "<script>alert(1)</script>",
        "acme\0",
    ] {
        assert!(check(&form, Some(value)).is_err(), "{value:?}");
    }
    assert_eq!(refused(&form, "other"), "Choose one of the options.");
    let form = one("type = \"select\"\nrequired = true\noptions = [{ value = \"a\", label = \"A\" }]");
    assert_eq!(refused(&form, ""), "This field is required.");
    assert_eq!(check(&form, None), Err("This field is required.".to_owned()));
}

#[test]
fn date_is_strict_iso() {
    let form = one("type = \"date\"");
    assert_eq!(accepted(&form, " 2026-01-31 "), json!("2026-01-31"));
    assert_eq!(accepted(&form, "2024-02-29"), json!("2024-02-29"));
    for value in [
        "2026-02-30",
        "2025-02-29",
        "2026-1-5",
        "2026-13-01",
        "31/01/2026",
        "+2026-01-31",
        "2026-01-31T00:00",
        "tomorrow",
    ] {
        assert_eq!(refused(&form, value), "Enter a date like 2026-01-31.", "{value:?}");
    }
}

#[test]
fn date_min_and_max_accept_strings_and_toml_dates() {
    let form = one("type = \"date\"\nmin = \"2026-01-01\"\nmax = 2026-12-31");
    assert_eq!(accepted(&form, "2026-01-01"), json!("2026-01-01"));
    assert_eq!(accepted(&form, "2026-12-31"), json!("2026-12-31"));
    assert_eq!(
        refused(&form, "2025-12-31"),
        "Enter a date from 2026-01-01 to 2026-12-31."
    );
    assert_eq!(
        refused(&form, "2027-01-01"),
        "Enter a date from 2026-01-01 to 2026-12-31."
    );
    assert_eq!(
        refused(&one("type = \"date\"\nmin = 2026-01-01"), "2025-06-01"),
        "Enter a date on or after 2026-01-01."
    );
    assert_eq!(
        refused(&one("type = \"date\"\nmax = \"2026-01-01\""), "2026-06-01"),
        "Enter a date on or before 2026-01-01."
    );
}

#[test]
fn secrets_are_kept_apart_and_intact() {
    let form = one("type = \"secret\"\nrequired = true\nmin_length = 10\npattern = 'sk-.*'");
    let value = "sk-\"<script>alert(1)</script>' 🔑 ";
    let submission = form.validate(&post(&[("f", value)]), &none()).expect("valid");
    assert!(
        submission.values.is_empty(),
        "a secret never lands among the plain values"
    );
    assert_eq!(
        submission.secrets.get("f").map(|secret| secret.expose().as_str()),
        Some(value)
    );
    assert!(!format!("{submission:?}").contains("sk-"), "Debug redacts the secret");

    let refused = |value: &str| form.validate(&post(&[("f", value)]), &none()).expect_err("refused");
    assert_eq!(refused("sk-short").get("f"), Some("Enter at least 10 characters."));
    assert_eq!(
        refused("pk-1234567890").get("f"),
        Some("Enter a value in the expected format.")
    );
    assert_eq!(
        refused("sk-1234567890\n").get("f"),
        Some("Enter this on one line, without line breaks.")
    );
    assert_eq!(
        refused(&"s".repeat(3000)).get("f"),
        Some("Enter at most 2048 characters.")
    );
    // The message never repeats the value.
    assert!(!refused("sk-short").get("f").unwrap_or_default().contains("sk-"));
}

#[test]
fn a_stored_secret_may_be_left_blank() {
    let form = one("type = \"secret\"\nrequired = true");
    let stored: BTreeSet<String> = ["f".to_owned()].into();
    for input in [post(&[]), post(&[("f", "")]), post(&[("f", "   ")])] {
        let submission = form.validate(&input, &stored).expect("blank keeps the stored secret");
        assert!(submission.secrets.is_empty() && submission.values.is_empty());
        let errors = form.validate(&input, &none()).expect_err("nothing stored");
        assert_eq!(errors.get("f"), Some("This field is required."));
    }
    let submission = form
        .validate(&post(&[("f", "new-value")]), &stored)
        .expect("replacement");
    assert_eq!(
        submission.secrets.get("f").map(|secret| secret.expose().as_str()),
        Some("new-value")
    );
    // A stored secret does not excuse an invalid replacement.
    let errors = form.validate(&post(&[("f", "a\0b")]), &stored).expect_err("NUL");
    assert_eq!(errors.get("f"), Some("Remove the NUL character from this value."));
    // Only secret fields are excused by the stored set.
    let text = one("type = \"text\"\nrequired = true");
    assert!(text.validate(&post(&[]), &stored).is_err());
}

#[test]
fn the_first_value_counts_and_other_names_are_ignored() {
    let form = one("type = \"text\"");
    let input = post(&[
        ("csrf", "token"),
        ("f", "first"),
        ("action", "save"),
        ("f", "second"),
        ("F", "x"),
    ]);
    let submission = form.validate(&input, &none()).expect("valid");
    assert_eq!(submission.values.len(), 1);
    assert_eq!(submission.values.get("f"), Some(&json!("first")));
    // An invalid first value is not rescued by a valid later one.
    let errors = form
        .validate(&post(&[("f", "a\nb"), ("f", "ok")]), &none())
        .expect_err("first counts");
    assert!(errors.get("f").is_some());
}
