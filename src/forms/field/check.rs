//! Checking one posted value against a [`Field`]'s rules, with the sentence shown next to the
//! field when it is refused.

use chrono::NaiveDate;

use super::{Bound, Field, FieldKind};

const REQUIRED: &str = "This field is required.";
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

/// What one field contributes to a valid submission.
#[derive(Debug, PartialEq)]
pub(in crate::forms) enum Outcome {
    Absent,
    Value(serde_json::Value),
    Secret(String),
}

impl Field {
    /// Checks the first posted value for this field (`None`: not posted at all). The error is the
    /// sentence shown next to the field; it never repeats the value, which may be a secret.
    pub(in crate::forms) fn check(&self, raw: Option<&str>, secret_stored: bool) -> Result<Outcome, String> {
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
                self.check_range(Bound::Number(number))?;
                serde_json::Number::from_f64(number)
                    .map(|n| Outcome::Value(n.into()))
                    .ok_or_else(|| NUMBER.to_owned())
            }
            FieldKind::Integer => {
                let number = raw.trim().parse::<i64>().map_err(|_| INTEGER.to_owned())?;
                self.check_range(Bound::Integer(number))?;
                Ok(Outcome::Value(number.into()))
            }
            FieldKind::Date => {
                let value = raw.trim();
                let date = parse_date(value).ok_or_else(|| DATE.to_owned())?;
                self.check_range(Bound::Date(date))?;
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

    fn check_range(&self, value: Bound) -> Result<(), String> {
        let below = self.min.is_some_and(|min| min.exceeds(value));
        let above = self.max.is_some_and(|max| value.exceeds(max));
        if below || above {
            Err(self.range_message())
        } else {
            Ok(())
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
pub(super) fn parse_date(value: &str) -> Option<NaiveDate> {
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

#[cfg(test)]
mod tests;
