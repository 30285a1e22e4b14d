//! One field: what a compiled field is (its kind and its rules). Compiling a `[[forms.fields]]`
//! entry into these rules lives in `compile`, checking one posted value against them in `check`.
//!
//! A default is checked with the very same code as a posted value, so a configuration cannot offer
//! the user a value that the form would then refuse.

mod check;
mod compile;

use std::fmt;

use chrono::NaiveDate;
use regex::Regex;

pub(super) use check::Outcome;

/// Bounds every single-line value, so a post cannot make us store (or scan twice) megabytes.
const SINGLE_LINE_CAP: usize = 2048;
/// Bounds a textarea: room for a pasted key file or a note, not for a document.
const TEXTAREA_CAP: usize = 20_000;
/// RFC 5321 limits a forward path to 256 octets, which leaves 254 for the address itself.
const EMAIL_CAP: usize = 254;

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

impl Bound {
    /// Whether `self` is greater than `other`; bounds of different types never compare (the config
    /// check gives a field's min, max and values one type).
    pub(super) fn exceeds(self, other: Bound) -> bool {
        match (self, other) {
            (Bound::Number(this), Bound::Number(other)) => this > other,
            (Bound::Integer(this), Bound::Integer(other)) => this > other,
            (Bound::Date(this), Bound::Date(other)) => this > other,
            _ => false,
        }
    }
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

impl Field {
    pub fn is_secret(&self) -> bool {
        matches!(self.kind, FieldKind::Secret)
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
}

impl FieldKind {
    /// Whether min_length and max_length apply: the kinds typed as free text.
    pub(super) fn takes_length(&self) -> bool {
        matches!(
            self,
            FieldKind::Text | FieldKind::Textarea | FieldKind::Email | FieldKind::Url | FieldKind::Secret
        )
    }
}
