//! One field: its configuration compiled into rules, and the check of one posted value against them.
//!
//! A default is checked with the very same code as a posted value, so a configuration cannot offer
//! the user a value that the form would then refuse.

use std::fmt;

use chrono::NaiveDate;
use regex::{Regex, RegexBuilder};

use crate::config::{ConfigError, FieldConfig, OptionConfig};
use crate::domain::is_identifier;

/// Bounds every single-line value, so a post cannot make us store (or scan twice) megabytes.
pub(super) const SINGLE_LINE_CAP: usize = 2048;
/// Bounds a textarea: room for a pasted key file or a note, not for a document.
pub(super) const TEXTAREA_CAP: usize = 20_000;
/// RFC 5321 limits a forward path to 256 octets, which leaves 254 for the address itself.
const EMAIL_CAP: usize = 254;
/// A configured pattern runs on every post: a megabyte of compiled program is plenty for any sane
/// pattern and stops a counted repetition like `(a{1000}){1000}` from taking the service's memory.
const PATTERN_SIZE_LIMIT: usize = 1 << 20;

const KIND_NAMES: &str = "text, textarea, email, url, number, integer, boolean, select, date, secret";

pub(super) const REQUIRED: &str = "This field is required.";
const TICK: &str = "Tick this box to continue.";
const CHECKBOX: &str = "This box can only be ticked or left empty.";
const NUL: &str = "Remove the NUL character from this value.";
const LINE_BREAK: &str = "Enter this on one line, without line breaks.";
const CONTROL: &str = "Remove the invisible control characters from this value.";
const PATTERN: &str = "Enter a value in the expected format.";
const EMAIL: &str = "Enter an email address like name@example.com.";
const URL: &str = "Enter a web address starting with https:// or http://.";
const NUMBER: &str = "Enter a number.";
const INTEGER: &str = "Enter a whole number.";
const DATE: &str = "Enter a date like 2026-01-31.";
const CHOOSE: &str = "Choose one of the options.";

#[derive(Debug, Clone)]
pub struct Field {
    pub name: String,
    pub label: String,
    pub help: Option<String>,
    pub required: bool,
    pub kind: FieldKind,
    pub(super) min_length: Option<usize>,
    /// The configured max_length or the kind's cap, whichever is lower: always set, so every value is bounded.
    pub(super) max_length: usize,
    pub(super) pattern: Option<Regex>,
    pub(super) min: Option<Bound>,
    pub(super) max: Option<Bound>,
    /// The default as the text a browser would post (`"true"` for a ticked box, none for an unticked one),
    /// so showing it and checking it need no per-kind conversion.
    pub(super) default: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum FieldKind {
    Text,
    Textarea,
    Email,
    Url,
    Number,
    Integer,
    Boolean,
    Select(Vec<SelectOption>),
    Date,
    Secret,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SelectOption {
    pub value: String,
    pub label: String,
}

/// A min or max, already of the field kind's type (the config check guarantees the pairing).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Bound {
    Number(f64),
    Integer(i64),
    Date(NaiveDate),
}

impl fmt::Display for Bound {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Number(n) => write!(f, "{n}"),
            Self::Integer(n) => write!(f, "{n}"),
            Self::Date(d) => write!(f, "{}", d.format("%Y-%m-%d")),
        }
    }
}

/// What one field contributes to a valid submission.
#[derive(Debug, PartialEq)]
pub(super) enum Outcome {
    Absent,
    Value(serde_json::Value),
    Secret(String),
}

impl Field {
    pub fn is_secret(&self) -> bool {
        matches!(self.kind, FieldKind::Secret)
    }

    /// `key` names the field in errors, e.g. `forms[0].fields[1]`.
    pub(super) fn compile(config: &FieldConfig, key: &str) -> Result<Self, ConfigError> {
        if !is_identifier(&config.name) {
            return Err(ConfigError::key(
                format!("{key}.name"),
                "must be 1 to 64 letters, digits, `-` or `_` (it is the name posted by the page)",
            ));
        }
        if config.label.trim().is_empty() {
            return Err(ConfigError::key(format!("{key}.label"), "must not be empty"));
        }
        let kind = match config.kind.as_str() {
            "text" => FieldKind::Text,
            "textarea" => FieldKind::Textarea,
            "email" => FieldKind::Email,
            "url" => FieldKind::Url,
            "number" => FieldKind::Number,
            "integer" => FieldKind::Integer,
            "boolean" => FieldKind::Boolean,
            "date" => FieldKind::Date,
            "secret" => FieldKind::Secret,
            "select" => FieldKind::Select(compile_options(config.options.as_deref(), key)?),
            other => {
                return Err(ConfigError::key(
                    format!("{key}.type"),
                    format!("`{other}` is not a field type; use one of {KIND_NAMES}"),
                ));
            }
        };
        if config.options.is_some() && !matches!(kind, FieldKind::Select(_)) {
            return Err(ConfigError::key(
                format!("{key}.options"),
                "only select fields take options",
            ));
        }

        let takes_range = matches!(kind, FieldKind::Number | FieldKind::Integer | FieldKind::Date);
        let bound = |value: &Option<toml::Value>, name: &str| match value {
            None => Ok(None),
            Some(_) if !takes_range => Err(ConfigError::key(
                format!("{key}.{name}"),
                "only number, integer and date fields take min and max (use min_length and max_length for text)",
            )),
            Some(value) => compile_bound(&kind, value, &format!("{key}.{name}")).map(Some),
        };
        let min = bound(&config.min, "min")?;
        let max = bound(&config.max, "max")?;
        if let (Some(low), Some(high)) = (min, max)
            && exceeds(low, high)
        {
            return Err(ConfigError::key(
                format!("{key}.min"),
                format!("{low} is greater than max {high}: no value could be accepted"),
            ));
        }

        let takes_length = matches!(
            kind,
            FieldKind::Text | FieldKind::Textarea | FieldKind::Email | FieldKind::Url | FieldKind::Secret
        );
        let cap = match kind {
            FieldKind::Textarea => TEXTAREA_CAP,
            _ => SINGLE_LINE_CAP,
        };
        for (value, name) in [(config.min_length, "min_length"), (config.max_length, "max_length")] {
            if value.is_some() && !takes_length {
                return Err(ConfigError::key(
                    format!("{key}.{name}"),
                    "only text, textarea, email, url and secret fields take min_length and max_length",
                ));
            }
        }
        if let Some(max_length) = config.max_length {
            if max_length == 0 {
                return Err(ConfigError::key(format!("{key}.max_length"), "must be at least 1"));
            }
            if max_length > cap {
                return Err(ConfigError::key(
                    format!("{key}.max_length"),
                    format!("must be at most {cap}, the limit for a {} field", config.kind),
                ));
            }
        }
        let max_length = config.max_length.unwrap_or(cap);
        // Longer addresses cannot be delivered, whatever the configuration allows.
        let max_length = match kind {
            FieldKind::Email => max_length.min(EMAIL_CAP),
            _ => max_length,
        };
        if let Some(min_length) = config.min_length
            && min_length > max_length
        {
            return Err(ConfigError::key(
                format!("{key}.min_length"),
                format!("{min_length} is greater than the maximum length {max_length}"),
            ));
        }

        let pattern = match &config.pattern {
            None => None,
            Some(_)
                if !matches!(
                    kind,
                    FieldKind::Text | FieldKind::Textarea | FieldKind::Email | FieldKind::Secret
                ) =>
            {
                return Err(ConfigError::key(
                    format!("{key}.pattern"),
                    "only text, textarea, email and secret fields take a pattern",
                ));
            }
            Some(pattern) => Some(compile_pattern(pattern, &format!("{key}.pattern"))?),
        };

        let mut field = Self {
            name: config.name.clone(),
            label: config.label.clone(),
            help: config.help.clone(),
            required: config.required,
            kind,
            min_length: config.min_length,
            max_length,
            pattern,
            min,
            max,
            default: None,
        };
        if let Some(default) = &config.default {
            let default_key = format!("{key}.default");
            let text = field.default_text(default, &default_key)?;
            field
                .check(text.as_deref(), false)
                .map_err(|message| ConfigError::key(&default_key, format!("is not valid for this field: {message}")))?;
            field.default = text;
        }
        Ok(field)
    }

    /// The default as posted text, refusing a TOML type that does not fit the kind.
    fn default_text(&self, value: &toml::Value, key: &str) -> Result<Option<String>, ConfigError> {
        let wrong = |expected: &str| {
            Err(ConfigError::key(
                key,
                format!("must be {expected} for a {} field", self.kind_name()),
            ))
        };
        match (&self.kind, value) {
            (FieldKind::Secret, _) => Err(ConfigError::key(
                key,
                "a secret field cannot have a default: a secret written in the config is not the user's",
            )),
            (FieldKind::Boolean, toml::Value::Boolean(checked)) => Ok(checked.then(|| "true".to_owned())),
            (FieldKind::Boolean, _) => wrong("true or false"),
            (FieldKind::Integer, toml::Value::Integer(n)) => Ok(Some(n.to_string())),
            (FieldKind::Integer, _) => wrong("an integer"),
            (FieldKind::Number, toml::Value::Integer(n)) => Ok(Some(n.to_string())),
            (FieldKind::Number, toml::Value::Float(n)) if n.is_finite() => Ok(Some(n.to_string())),
            (FieldKind::Number, _) => wrong("a finite number"),
            (FieldKind::Date, toml::Value::Datetime(_)) => match toml_local_date(value) {
                Some(date) => Ok(Some(date.format("%Y-%m-%d").to_string())),
                None => wrong("a date like 2026-01-31 (without a time)"),
            },
            (_, toml::Value::String(text)) => Ok(Some(text.clone())),
            (FieldKind::Date, _) => wrong("a date like \"2026-01-31\""),
            _ => wrong("a string"),
        }
    }

    fn kind_name(&self) -> &'static str {
        match self.kind {
            FieldKind::Text => "text",
            FieldKind::Textarea => "textarea",
            FieldKind::Email => "email",
            FieldKind::Url => "url",
            FieldKind::Number => "number",
            FieldKind::Integer => "integer",
            FieldKind::Boolean => "boolean",
            FieldKind::Select(_) => "select",
            FieldKind::Date => "date",
            FieldKind::Secret => "secret",
        }
    }

    /// Checks the first posted value for this field (`None`: not posted at all). The error is the
    /// sentence shown next to the field; it never repeats the value, which may be a secret.
    pub(super) fn check(&self, raw: Option<&str>, secret_stored: bool) -> Result<Outcome, String> {
        if self.kind == FieldKind::Boolean {
            // A browser posts an unticked box as nothing at all and a ticked one as its value.
            return match raw {
                None if self.required => Err(TICK.to_owned()),
                None => Ok(Outcome::Value(false.into())),
                Some("true" | "on") => Ok(Outcome::Value(true.into())),
                Some(_) => Err(CHECKBOX.to_owned()),
            };
        }
        let raw = raw.unwrap_or("");
        check_characters(raw, self.kind == FieldKind::Textarea)?;
        if raw.trim().is_empty() {
            // The caller keeps a stored secret when the user leaves it blank.
            return if self.required && !(self.is_secret() && secret_stored) {
                Err(REQUIRED.to_owned())
            } else {
                Ok(Outcome::Absent)
            };
        }
        match &self.kind {
            // Kept exactly as typed: leading spaces may be part of a passphrase or of a note's layout.
            FieldKind::Text | FieldKind::Textarea | FieldKind::Secret => {
                self.check_length(raw)?;
                self.check_pattern(raw)?;
                Ok(match self.kind {
                    FieldKind::Secret => Outcome::Secret(raw.to_owned()),
                    _ => Outcome::Value(raw.into()),
                })
            }
            FieldKind::Email => {
                let value = raw.trim();
                self.check_length(value)?;
                if !is_email(value) {
                    return Err(EMAIL.to_owned());
                }
                self.check_pattern(value)?;
                Ok(Outcome::Value(value.into()))
            }
            FieldKind::Url => {
                let value = raw.trim();
                self.check_length(value)?;
                match url::Url::parse(value) {
                    Ok(url)
                        if matches!(url.scheme(), "http" | "https")
                            && url.host_str().is_some_and(|h| !h.is_empty()) =>
                    {
                        Ok(Outcome::Value(value.into()))
                    }
                    _ => Err(URL.to_owned()),
                }
            }
            FieldKind::Number => {
                let value = raw.trim();
                let number = value
                    .parse::<f64>()
                    .ok()
                    .filter(|n| n.is_finite())
                    .ok_or_else(|| NUMBER.to_owned())?;
                if let Some(Bound::Number(min)) = self.min
                    && number < min
                {
                    return Err(self.range_message());
                }
                if let Some(Bound::Number(max)) = self.max
                    && number > max
                {
                    return Err(self.range_message());
                }
                serde_json::Number::from_f64(number)
                    .map(|n| Outcome::Value(n.into()))
                    .ok_or_else(|| NUMBER.to_owned())
            }
            FieldKind::Integer => {
                let number = raw.trim().parse::<i64>().map_err(|_| INTEGER.to_owned())?;
                if let Some(Bound::Integer(min)) = self.min
                    && number < min
                {
                    return Err(self.range_message());
                }
                if let Some(Bound::Integer(max)) = self.max
                    && number > max
                {
                    return Err(self.range_message());
                }
                Ok(Outcome::Value(number.into()))
            }
            FieldKind::Date => {
                let value = raw.trim();
                let date = parse_date(value).ok_or_else(|| DATE.to_owned())?;
                if let Some(Bound::Date(min)) = self.min
                    && date < min
                {
                    return Err(self.range_message());
                }
                if let Some(Bound::Date(max)) = self.max
                    && date > max
                {
                    return Err(self.range_message());
                }
                Ok(Outcome::Value(value.into()))
            }
            // Compared exactly: an option value is a token chosen by the configuration, not typed text.
            FieldKind::Select(options) => match options.iter().any(|option| option.value == raw) {
                true => Ok(Outcome::Value(raw.into())),
                false => Err(CHOOSE.to_owned()),
            },
            // Answered before the character checks, which a checkbox's fixed values never need.
            FieldKind::Boolean => Err(CHECKBOX.to_owned()),
        }
    }

    fn check_length(&self, value: &str) -> Result<(), String> {
        // Counted in chars: a limit in bytes would let an emoji count four times.
        let length = value.chars().count();
        if length > self.max_length {
            return Err(format!("Enter at most {}.", characters(self.max_length)));
        }
        if let Some(min_length) = self.min_length
            && length < min_length
        {
            return Err(format!("Enter at least {}.", characters(min_length)));
        }
        Ok(())
    }

    fn check_pattern(&self, value: &str) -> Result<(), String> {
        match &self.pattern {
            Some(pattern) if !pattern.is_match(value) => Err(PATTERN.to_owned()),
            _ => Ok(()),
        }
    }

    fn range_message(&self) -> String {
        let (on_or_after, on_or_before, from) = match self.kind {
            FieldKind::Date => (
                "Enter a date on or after",
                "Enter a date on or before",
                "Enter a date from",
            ),
            FieldKind::Integer => (
                "Enter a whole number of at least",
                "Enter a whole number of at most",
                "Enter a whole number from",
            ),
            _ => (
                "Enter a number of at least",
                "Enter a number of at most",
                "Enter a number from",
            ),
        };
        match (self.min, self.max) {
            (Some(min), Some(max)) => format!("{from} {min} to {max}."),
            (Some(min), None) => format!("{on_or_after} {min}."),
            (None, Some(max)) => format!("{on_or_before} {max}."),
            (None, None) => NUMBER.to_owned(),
        }
    }
}

fn characters(count: usize) -> String {
    match count {
        1 => "1 character".to_owned(),
        _ => format!("{count} characters"),
    }
}

/// Control characters are invisible on the page and in logs, and NUL truncates strings in C-based
/// stores, so none is accepted; a textarea keeps its line breaks and tabs.
fn check_characters(value: &str, multiline: bool) -> Result<(), String> {
    for c in value.chars() {
        match c {
            '\0' => return Err(NUL.to_owned()),
            '\n' | '\r' | '\t' if multiline => {}
            '\n' | '\r' => return Err(LINE_BREAK.to_owned()),
            c if c.is_control() => return Err(CONTROL.to_owned()),
            _ => {}
        }
    }
    Ok(())
}

/// A plausibility check, not RFC 5322: enough to catch typos without refusing real addresses. The local
/// part may hold quotes and `+`; the domain only what a (possibly internationalised) host name can.
fn is_email(value: &str) -> bool {
    let Some((local, domain)) = value.split_once('@') else {
        return false;
    };
    !local.is_empty()
        && !domain.contains('@')
        && !value.chars().any(char::is_whitespace)
        && domain.contains('.')
        && domain
            .split('.')
            .all(|label| !label.is_empty() && label.chars().all(|c| c.is_alphanumeric() || c == '-'))
}

/// Strictly `YYYY-MM-DD`, what a date input posts; chrono alone would also take `2026-1-5`.
fn parse_date(value: &str) -> Option<NaiveDate> {
    let bytes = value.as_bytes();
    let shaped = bytes.len() == 10
        && bytes.iter().enumerate().all(|(i, b)| {
            if i == 4 || i == 7 {
                *b == b'-'
            } else {
                b.is_ascii_digit()
            }
        });
    if !shaped {
        return None;
    }
    NaiveDate::parse_from_str(value, "%Y-%m-%d").ok()
}

fn toml_local_date(value: &toml::Value) -> Option<NaiveDate> {
    match value {
        toml::Value::Datetime(toml::value::Datetime {
            date: Some(date),
            time: None,
            offset: None,
        }) => NaiveDate::from_ymd_opt(date.year.into(), date.month.into(), date.day.into()),
        _ => None,
    }
}

fn compile_bound(kind: &FieldKind, value: &toml::Value, key: &str) -> Result<Bound, ConfigError> {
    let bound = match (kind, value) {
        (FieldKind::Integer, toml::Value::Integer(n)) => Some(Bound::Integer(*n)),
        (FieldKind::Integer, _) => return Err(ConfigError::key(key, "must be an integer for an integer field")),
        (FieldKind::Number, toml::Value::Integer(n)) => Some(Bound::Number(*n as f64)),
        (FieldKind::Number, toml::Value::Float(n)) if n.is_finite() => Some(Bound::Number(*n)),
        (FieldKind::Number, _) => return Err(ConfigError::key(key, "must be a finite number for a number field")),
        (_, toml::Value::String(text)) => parse_date(text).map(Bound::Date),
        _ => toml_local_date(value).map(Bound::Date),
    };
    bound.ok_or_else(|| ConfigError::key(key, "must be a date like 2026-01-31 for a date field"))
}

fn exceeds(low: Bound, high: Bound) -> bool {
    match (low, high) {
        (Bound::Number(low), Bound::Number(high)) => low > high,
        (Bound::Integer(low), Bound::Integer(high)) => low > high,
        (Bound::Date(low), Bound::Date(high)) => low > high,
        _ => false,
    }
}

fn compile_pattern(pattern: &str, key: &str) -> Result<Regex, ConfigError> {
    let build = |source: &str| {
        RegexBuilder::new(source)
            .size_limit(PATTERN_SIZE_LIMIT)
            .dfa_size_limit(PATTERN_SIZE_LIMIT)
            .build()
            .map_err(|e| ConfigError::key(key, format!("is not a usable regular expression: {e}")))
    };
    // Compiled alone first: `a)|(b` is invalid alone but balanced once wrapped, and would then match
    // any value starting with `a` instead of being refused.
    build(pattern)?;
    build(&format!("^(?:{pattern})$"))
}

fn compile_options(options: Option<&[OptionConfig]>, key: &str) -> Result<Vec<SelectOption>, ConfigError> {
    let options = options.unwrap_or_default();
    if options.is_empty() {
        return Err(ConfigError::key(
            format!("{key}.options"),
            "a select field needs at least one option",
        ));
    }
    let mut compiled: Vec<SelectOption> = Vec::with_capacity(options.len());
    for (index, option) in options.iter().enumerate() {
        let option_key = format!("{key}.options[{index}]");
        // A blank value would read as "nothing chosen", and a control character could never be posted back.
        if option.value.trim().is_empty() {
            return Err(ConfigError::key(format!("{option_key}.value"), "must not be empty"));
        }
        if option.value.chars().any(char::is_control) {
            return Err(ConfigError::key(
                format!("{option_key}.value"),
                "must not contain control characters",
            ));
        }
        if let Some(first) = compiled.iter().position(|known| known.value == option.value) {
            return Err(ConfigError::key(
                format!("{option_key}.value"),
                format!("`{}` is already the value of option {first}", option.value),
            ));
        }
        if option.label.trim().is_empty() {
            return Err(ConfigError::key(format!("{option_key}.label"), "must not be empty"));
        }
        compiled.push(SelectOption {
            value: option.value.clone(),
            label: option.label.clone(),
        });
    }
    Ok(compiled)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use serde_json::{Value, json};

    use super::super::Form;
    use super::super::tests::{one, post};

    const HOSTILE: [&str; 6] = [
        "<script>alert(1)</script>",
        "\"double\" and 'single' quotes; DROP TABLE users; --",
        "emoji 👩‍💻🔑 and accents éàü",
        "مرحبا بالعالم \u{202E}reversed\u{202C} עברית",
        "   leading and trailing spaces   ",
        "${jndi:ldap://x} {{args.amount}} %00 \\0",
    ];

    fn none() -> BTreeSet<String> {
        BTreeSet::new()
    }

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

    #[test]
    fn every_error_is_reported_in_field_order() {
        let forms = super::super::tests::compile(
            r#"
[[forms]]
id = "t"
title = "T"
[[forms.fields]]
name = "zeta"
label = "Z"
type = "integer"
[[forms.fields]]
name = "alpha"
label = "A"
type = "text"
required = true
[[forms.fields]]
name = "ok"
label = "OK"
type = "boolean"
[[forms.fields]]
name = "mail"
label = "M"
type = "email"
"#,
        )
        .expect("valid");
        let form = forms.get("t").expect("t");
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
        assert!(super::super::FieldErrors::none().is_empty());

        let submission = form
            .validate(&post(&[("zeta", "3"), ("alpha", "x"), ("mail", "")]), &none())
            .expect("valid");
        assert_eq!(
            serde_json::Value::Object(submission.values),
            json!({ "zeta": 3, "alpha": "x", "ok": false })
        );
    }
}
