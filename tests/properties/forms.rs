//! Form validation: any posted input is checked without panic; what is accepted obeys the field's
//! rules (and is stored as the rules say: trimmed, typed, secrets apart), values generated inside
//! the rules are accepted and values generated outside them are refused, with a message that never
//! repeats the value.

use std::collections::BTreeSet;

use chrono::{Days, NaiveDate};
use gatehouse::config::{FieldConfig, FormConfig, FormScope, OptionConfig};
use gatehouse::forms::{FieldErrors, Form, Forms, Submission};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::select;
use serde_json::Value;

use crate::strategies::hostile_text;

/// The documented bounds on text (docs/src/gating/forms.md): 2,048 characters on one line,
/// 20,000 in a textarea.
const SINGLE_LINE_CAP: usize = 2048;
const TEXTAREA_CAP: usize = 20_000;
/// The longest deliverable email address.
const EMAIL_CAP: usize = 254;
/// The pattern of `Rules::Pattern` fields.
const PATTERN: &str = "[a-z]{2,8}";

/// One field's kind and rules, as generated; the field is always `f` of form `t`.
#[derive(Debug, Clone)]
enum Rules {
    /// `text`, `textarea` or `secret`, with optional length limits.
    Text {
        kind: &'static str,
        min_length: Option<usize>,
        max_length: Option<usize>,
    },
    Pattern,
    Email,
    Url,
    Integer {
        min: Option<i64>,
        max: Option<i64>,
    },
    Number {
        min: Option<f64>,
        max: Option<f64>,
    },
    Date {
        min: Option<NaiveDate>,
        max: Option<NaiveDate>,
    },
    Boolean,
    Select(Vec<String>),
}

#[derive(Debug, Clone)]
struct Spec {
    rules: Rules,
    required: bool,
}

impl Spec {
    fn form(&self) -> Form {
        let mut field = FieldConfig {
            name: "f".into(),
            label: "F".into(),
            kind: String::new(),
            help: None,
            required: self.required,
            default: None,
            min: None,
            max: None,
            min_length: None,
            max_length: None,
            pattern: None,
            options: None,
        };
        match &self.rules {
            Rules::Text {
                kind,
                min_length,
                max_length,
            } => {
                field.kind = (*kind).into();
                (field.min_length, field.max_length) = (*min_length, *max_length);
            }
            Rules::Pattern => (field.kind, field.pattern) = ("text".into(), Some(PATTERN.into())),
            Rules::Email => field.kind = "email".into(),
            Rules::Url => field.kind = "url".into(),
            Rules::Integer { min, max } => {
                field.kind = "integer".into();
                (field.min, field.max) = (min.map(toml::Value::Integer), max.map(toml::Value::Integer));
            }
            Rules::Number { min, max } => {
                field.kind = "number".into();
                (field.min, field.max) = (min.map(toml::Value::Float), max.map(toml::Value::Float));
            }
            Rules::Date { min, max } => {
                field.kind = "date".into();
                let date = |d: NaiveDate| toml::Value::String(d.format("%Y-%m-%d").to_string());
                (field.min, field.max) = (min.map(date), max.map(date));
            }
            Rules::Boolean => field.kind = "boolean".into(),
            Rules::Select(options) => {
                field.kind = "select".into();
                field.options = Some(
                    options
                        .iter()
                        .map(|value| OptionConfig {
                            value: value.clone(),
                            label: value.to_uppercase(),
                        })
                        .collect(),
                );
            }
        }
        let config = FormConfig {
            id: "t".into(),
            title: "T".into(),
            description: None,
            submit_label: None,
            scope: FormScope::User,
            fields: vec![field],
        };
        let forms = Forms::from_config(&[config]).expect("generated rules are valid");
        forms.get("t").cloned().expect("form t")
    }
}

fn validate(spec: &Spec, post: &[(String, String)]) -> Result<Submission, FieldErrors> {
    spec.form().validate(post, &BTreeSet::new())
}

/// `(low, high)` with low <= high, each possibly absent.
fn ordered<T: Strategy + Clone>(values: T) -> impl Strategy<Value = (Option<T::Value>, Option<T::Value>)>
where
    T::Value: PartialOrd + Clone + std::fmt::Debug,
{
    (proptest::option::of(values.clone()), proptest::option::of(values)).prop_map(|(a, b)| match (a, b) {
        (Some(a), Some(b)) if a > b => (Some(b), Some(a)),
        pair => pair,
    })
}

fn date() -> impl Strategy<Value = NaiveDate> + Clone {
    let first = NaiveDate::from_ymd_opt(1000, 1, 1).expect("date");
    (0u64..3_000_000).prop_map(move |days| first + Days::new(days))
}

fn spec() -> impl Strategy<Value = Spec> {
    let text = (select(&["text", "textarea", "secret"][..]), ordered(1usize..60)).prop_map(
        |(kind, (min_length, max_length))| Rules::Text {
            kind,
            min_length,
            max_length,
        },
    );
    let rules = prop_oneof![
        3 => text,
        1 => Just(Rules::Pattern),
        1 => Just(Rules::Email),
        1 => Just(Rules::Url),
        1 => ordered(any::<i64>()).prop_map(|(min, max)| Rules::Integer { min, max }),
        1 => ordered(-1e6f64..1e6).prop_map(|(min, max)| Rules::Number { min, max }),
        1 => ordered(date()).prop_map(|(min, max)| Rules::Date { min, max }),
        1 => Just(Rules::Boolean),
        1 => proptest::collection::btree_set("[a-z]{1,6}", 1..4).prop_map(|options| Rules::Select(options.into_iter().collect())),
    ];
    (rules, any::<bool>()).prop_map(|(rules, required)| Spec { rules, required })
}

/// Checks that what `validate` accepted for `raw` (the first value posted for `f`) obeys `spec`.
fn check_accepted(spec: &Spec, raw: Option<&str>, submission: &Submission) -> Result<(), TestCaseError> {
    let value = submission.values.get("f");
    let secret = submission.secrets.get("f").map(|s| s.expose().as_str());
    if let Rules::Boolean = spec.rules {
        let ticked = matches!(raw, Some("true" | "on"));
        prop_assert!(ticked || (raw.is_none() && !spec.required), "{raw:?}");
        prop_assert_eq!(value, Some(&Value::Bool(ticked)));
        return Ok(());
    }
    let raw = raw.unwrap_or("");
    let multiline = matches!(spec.rules, Rules::Text { kind: "textarea", .. });
    prop_assert!(
        raw.chars()
            .all(|c| !c.is_control() || (multiline && matches!(c, '\n' | '\r' | '\t'))),
        "control characters accepted: {raw:?}"
    );
    if raw.trim().is_empty() {
        prop_assert!(
            !spec.required && value.is_none() && secret.is_none(),
            "blank accepted: {raw:?}"
        );
        return Ok(());
    }
    let trimmed = raw.trim();
    let text = value.and_then(Value::as_str);
    match &spec.rules {
        Rules::Text {
            kind,
            min_length,
            max_length,
        } => {
            let stored = if *kind == "secret" { secret } else { text };
            prop_assert_eq!(stored, Some(raw));
            let cap = if multiline { TEXTAREA_CAP } else { SINGLE_LINE_CAP };
            let length = raw.chars().count();
            prop_assert!(
                length <= max_length.unwrap_or(cap) && length >= min_length.unwrap_or(0),
                "{length} chars"
            );
        }
        Rules::Pattern => {
            prop_assert_eq!(text, Some(raw));
            prop_assert!(
                (2..=8).contains(&raw.len()) && raw.bytes().all(|b| b.is_ascii_lowercase()),
                "{raw:?}"
            );
        }
        Rules::Email => {
            prop_assert_eq!(text, Some(trimmed));
            let (local, domain) = trimmed.split_once('@').expect("an accepted address has an @");
            prop_assert!(
                !local.is_empty() && domain.contains('.') && !domain.contains('@'),
                "{trimmed:?}"
            );
            prop_assert!(trimmed.chars().count() <= EMAIL_CAP && !trimmed.contains(char::is_whitespace));
        }
        Rules::Url => {
            prop_assert_eq!(text, Some(trimmed));
            let url = url::Url::parse(trimmed).expect("an accepted URL parses");
            prop_assert!(matches!(url.scheme(), "http" | "https") && url.host_str().is_some_and(|h| !h.is_empty()));
        }
        Rules::Integer { min, max } => {
            let n = trimmed.parse::<i64>().expect("an accepted integer parses");
            prop_assert_eq!(value.and_then(Value::as_i64), Some(n));
            prop_assert!(min.is_none_or(|m| n >= m) && max.is_none_or(|m| n <= m), "{n}");
        }
        Rules::Number { min, max } => {
            let n = trimmed.parse::<f64>().expect("an accepted number parses");
            prop_assert!(n.is_finite());
            prop_assert_eq!(value.and_then(Value::as_f64), Some(n));
            prop_assert!(min.is_none_or(|m| n >= m) && max.is_none_or(|m| n <= m), "{n}");
        }
        Rules::Date { min, max } => {
            prop_assert_eq!(text, Some(trimmed));
            prop_assert!(trimmed.len() == 10, "{trimmed:?}");
            let d = NaiveDate::parse_from_str(trimmed, "%Y-%m-%d").expect("an accepted date parses");
            prop_assert!(min.is_none_or(|m| d >= m) && max.is_none_or(|m| d <= m), "{d}");
        }
        Rules::Select(options) => {
            prop_assert_eq!(text, Some(raw));
            prop_assert!(options.iter().any(|o| o == raw));
        }
        Rules::Boolean => unreachable!("answered above"),
    }
    Ok(())
}

/// A refusal names field `f` only, with a sentence that does not repeat the value.
fn check_refused(errors: &FieldErrors, raw: Option<&str>) -> Result<(), TestCaseError> {
    let listed: Vec<(&str, &str)> = errors.iter().collect();
    prop_assert_eq!(listed.len(), 1);
    let (name, message) = listed[0];
    prop_assert_eq!(name, "f");
    prop_assert!(!message.is_empty());
    if let Some(raw) = raw.filter(|raw| raw.trim().len() >= 12) {
        prop_assert!(
            !message.contains(raw.trim()),
            "the message repeats the value: {message}"
        );
    }
    Ok(())
}

/// Text to post: hostile, long (around the caps) or shaped like a number, a date or an address.
fn posted_text() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => hostile_text(),
        1 => (0usize..3, select(&[SINGLE_LINE_CAP, TEXTAREA_CAP, EMAIL_CAP][..]), select(&["a", "é", " "][..]))
            .prop_map(|(extra, cap, c)| c.repeat(cap - 1 + extra)),
        1 => "-?[0-9]{1,20}(\\.[0-9]{0,4})?(e-?[0-9]{1,3})?",
        1 => "[0-9]{4}-[0-9]{1,2}-[0-9]{1,3}",
        1 => "[a-z+. ]{0,4}@[a-z.-]{0,6}",
        1 => select(&["true", "on", "NaN", "inf", "-0", " 1 ", "https://a.test", "ftp://a.test"][..]).prop_map(str::to_owned),
    ]
}

/// A post: field `f` (any number of times) among other names.
fn post() -> impl Strategy<Value = Vec<(String, String)>> {
    vec(
        (
            select(&["f", "f", "F", "other", ""][..]).prop_map(str::to_owned),
            posted_text(),
        ),
        0..4,
    )
}

/// A value inside `rules` and what is stored for it.
fn valid(rules: &Rules, required: bool) -> BoxedStrategy<(Option<String>, Value)> {
    match rules.clone() {
        Rules::Text {
            kind,
            min_length,
            max_length,
        } => {
            let low = min_length.unwrap_or(1).max(1);
            let high = max_length.unwrap_or(if kind == "textarea" {
                TEXTAREA_CAP
            } else {
                SINGLE_LINE_CAP
            });
            let chars: &[char] = if kind == "textarea" {
                &['a', 'Z', ' ', '\n', 'é', '🦀', '<']
            } else {
                &['a', 'Z', ' ', 'é', '🦀', '<', '"']
            };
            let lengths = prop_oneof![low..=high.min(low + 40), Just(high)];
            // Starts with a letter, so it is never blank.
            (lengths, vec(select(chars), 0..40))
                .prop_map(move |(length, chars)| {
                    let text: String = std::iter::once('x')
                        .chain(chars)
                        .chain(std::iter::repeat('a'))
                        .take(length)
                        .collect();
                    (Some(text.clone()), Value::String(text))
                })
                .boxed()
        }
        Rules::Pattern => PATTERN.prop_map(|s| (Some(s.clone()), Value::String(s))).boxed(),
        Rules::Email => ("[a-z0-9+_.]{1,10}@[a-z0-9-]{1,8}\\.[a-z]{2,6}", select(&["", " "][..]))
            .prop_map(|(address, pad)| (Some(format!("{pad}{address}{pad}")), Value::String(address)))
            .boxed(),
        Rules::Url => "https?://[a-z]{1,10}\\.test(/[a-z0-9]{0,6})?"
            .prop_map(|u| (Some(u.clone()), Value::String(u)))
            .boxed(),
        Rules::Integer { min, max } => (min.unwrap_or(i64::MIN)..=max.unwrap_or(i64::MAX))
            .prop_map(|n| (Some(n.to_string()), Value::from(n)))
            .boxed(),
        Rules::Number { min, max } => (min.unwrap_or(-1e12)..=max.unwrap_or(1e12))
            .prop_map(|n| (Some(n.to_string()), Value::from(n)))
            .boxed(),
        Rules::Date { min, max } => {
            let first = min.unwrap_or(NaiveDate::from_ymd_opt(1000, 1, 1).expect("date"));
            let last = max.unwrap_or(NaiveDate::from_ymd_opt(9999, 12, 31).expect("date"));
            let span = (last - first).num_days() as u64;
            (0..=span)
                .prop_map(move |days| {
                    let text = (first + Days::new(days)).format("%Y-%m-%d").to_string();
                    (Some(text.clone()), Value::String(text))
                })
                .boxed()
        }
        Rules::Boolean => {
            let ticked = select(&["true", "on"][..]).prop_map(|s| (Some(s.to_owned()), Value::Bool(true)));
            if required {
                ticked.boxed()
            } else {
                prop_oneof![ticked, Just((None, Value::Bool(false)))].boxed()
            }
        }
        Rules::Select(options) => select(options)
            .prop_map(|o| (Some(o.clone()), Value::String(o)))
            .boxed(),
    }
}

/// A value outside `rules` (or blank for a required field).
fn invalid(rules: &Rules, required: bool) -> BoxedStrategy<String> {
    let outside: BoxedStrategy<String> = match rules.clone() {
        Rules::Text {
            kind,
            min_length,
            max_length,
        } => {
            let cap = if kind == "textarea" {
                TEXTAREA_CAP
            } else {
                SINGLE_LINE_CAP
            };
            let too_long = "x".repeat(max_length.unwrap_or(cap) + 1);
            let control = if kind == "textarea" { "a\u{0}b" } else { "a\nb" };
            let mut choices = vec![too_long, control.to_owned(), "a\u{1b}[0m".to_owned()];
            if let Some(min) = min_length.filter(|&m| m > 1) {
                choices.push("y".repeat(min - 1));
            }
            select(choices).boxed()
        }
        Rules::Pattern => prop_oneof!["[A-Z0-9]{1,5}", "[a-z]{9,12}", Just("a".to_owned())].boxed(),
        Rules::Email => select(
            &[
                "name",
                "a@b",
                "a b@c.test",
                "@c.test",
                "a@b@c.test",
                "a@.test",
                "a@b..test",
            ][..],
        )
        .prop_map(str::to_owned)
        .boxed(),
        Rules::Url => select(
            &[
                "ftp://a.test",
                "a.test",
                "https://",
                "javascript:alert(1)",
                "http//a.test",
            ][..],
        )
        .prop_map(str::to_owned)
        .boxed(),
        Rules::Integer { min, max } => {
            let mut choices = vec!["1.5".to_owned(), "abc".to_owned(), "99999999999999999999".to_owned()];
            choices.extend(min.and_then(|m| m.checked_sub(1)).map(|n| n.to_string()));
            choices.extend(max.and_then(|m| m.checked_add(1)).map(|n| n.to_string()));
            select(choices).boxed()
        }
        Rules::Number { min, max } => {
            let mut choices = vec!["NaN".to_owned(), "inf".to_owned(), "1e999".to_owned(), "1,5".to_owned()];
            choices.extend(min.map(|m| (m - 1.0).to_string()));
            choices.extend(max.map(|m| (m + 1.0).to_string()));
            select(choices).boxed()
        }
        Rules::Date { min, max } => {
            let mut choices = vec![
                "2026-1-05".to_owned(),
                "2026-01-5".to_owned(),
                "2026-02-30".to_owned(),
                "26-01-01".to_owned(),
                "2026/01/05".to_owned(),
            ];
            choices.extend(min.and_then(|d| d.pred_opt()).map(|d| d.format("%Y-%m-%d").to_string()));
            choices.extend(max.and_then(|d| d.succ_opt()).map(|d| d.format("%Y-%m-%d").to_string()));
            select(choices).boxed()
        }
        Rules::Boolean => select(&["yes", "1", "false", "True", ""][..])
            .prop_map(str::to_owned)
            .boxed(),
        Rules::Select(options) => {
            let first = options[0].clone();
            select(vec![
                format!("{first} "),
                format!(" {first}"),
                first.to_uppercase(),
                "zzzzzzz".to_owned(),
            ])
            .boxed()
        }
    };
    if required && !matches!(rules, Rules::Boolean) {
        prop_oneof![3 => outside, 1 => select(&["", "  "][..]).prop_map(str::to_owned)].boxed()
    } else {
        outside
    }
}

fn spec_and_valid() -> impl Strategy<Value = (Spec, (Option<String>, Value))> {
    spec().prop_flat_map(|spec| {
        let valid = valid(&spec.rules, spec.required);
        (Just(spec), valid)
    })
}

fn spec_and_invalid() -> impl Strategy<Value = (Spec, String)> {
    spec().prop_flat_map(|spec| {
        let invalid = invalid(&spec.rules, spec.required);
        (Just(spec), invalid)
    })
}

proptest! {
    #[test]
    fn any_post_is_checked_against_the_fields_rules(spec in spec(), post in post()) {
        let first = post.iter().find(|(name, _)| name == "f").map(|(_, value)| value.as_str());
        match validate(&spec, &post) {
            Ok(submission) => check_accepted(&spec, first, &submission)?,
            Err(errors) => check_refused(&errors, first)?,
        }
    }

    #[test]
    fn values_inside_the_rules_are_accepted((spec, (raw, stored)) in spec_and_valid(), later in posted_text()) {
        // The first value posted counts: a value appended to the post changes nothing.
        let mut post: Vec<(String, String)> = raw.iter().map(|raw| ("f".to_owned(), raw.clone())).collect();
        post.push(("f".into(), later));
        let post = if raw.is_some() { post } else { Vec::new() };
        let submission = validate(&spec, &post).map_err(|e| TestCaseError::fail(format!("{raw:?} refused: {e:?}")))?;
        check_accepted(&spec, raw.as_deref(), &submission)?;
        let kept = match &spec.rules {
            Rules::Text { kind: "secret", .. } => submission.secrets.get("f").map(|s| Value::String(s.expose().clone())),
            _ => submission.values.get("f").cloned(),
        };
        prop_assert_eq!(kept, Some(stored));
    }

    #[test]
    fn values_outside_the_rules_are_refused((spec, raw) in spec_and_invalid()) {
        let post = vec![("f".to_owned(), raw.clone()), ("f".to_owned(), "x".to_owned())];
        match validate(&spec, &post) {
            Ok(submission) => prop_assert!(false, "{raw:?} accepted as {submission:?}"),
            Err(errors) => check_refused(&errors, Some(&raw))?,
        }
    }
}
