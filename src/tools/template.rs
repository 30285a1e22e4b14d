//! `{{args.NAME}}` and `{{form.FORM.FIELD}}` templates in HTTP tool URLs, headers and bodies, and
//! in call-scoped form descriptions. Parsed and checked against the tool's input schema and the
//! forms it requires at start, so a typo fails the configuration, not a user's call. A rendered
//! URL keeps its template's path: a value cannot add, remove or climb path segments.

use std::collections::{BTreeSet, HashMap};
use std::ops::Range;

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use serde_json::{Map, Value};
use url::Url;

use crate::config::ConfigError;
use crate::forms::{Form, Submission};

#[derive(Debug, Clone, PartialEq)]
enum Part {
    Literal(String),
    Arg(String),
    Form { form: String, field: String, secret: bool },
}

/// What a template may name: the tool's arguments and the fields of the forms it requires.
pub struct Placeholders<'a> {
    pub arguments: &'a BTreeSet<String>,
    pub forms: &'a [&'a Form],
}

/// What placeholders are filled with: the call's arguments and the forms' submitted values.
pub struct Values<'a> {
    pub arguments: &'a Map<String, Value>,
    pub forms: &'a HashMap<String, Submission>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Template {
    parts: Vec<Part>,
}

/// How a value is written into its place.
#[derive(Debug, Clone, Copy)]
pub enum Encoding {
    /// Percent-encoded as one URL component: a value cannot add path segments or parameters.
    UrlComponent,
    /// A header value: line breaks are refused so a value cannot add headers.
    Header,
    /// As is (text bodies).
    Text,
    /// JSON-escaped, for a place inside a JSON string (string bodies that are JSON): a value cannot
    /// end the string.
    JsonString,
    /// Text a person reads (call-scoped form descriptions): bidi controls and invisible characters
    /// are written as their code points, so a value cannot display as something else.
    Shown,
}

/// Where a placeholder's value landed in the rendered text, and what it is ("argument `x`").
struct Span {
    what: String,
    range: Range<usize>,
}

/// Everything but RFC 3986's unreserved characters is encoded.
const COMPONENT: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');

impl Template {
    /// Parses `text`; `key` names it in errors.
    pub fn parse(text: &str, key: &str, names: &Placeholders<'_>) -> Result<Self, ConfigError> {
        let mut parts = Vec::new();
        let mut rest = text;
        while let Some(start) = rest.find("{{") {
            if start > 0 {
                parts.push(Part::Literal(rest[..start].to_owned()));
            }
            let after = &rest[start + 2..];
            let end = after
                .find("}}")
                .ok_or_else(|| ConfigError::key(key, format!("`{{{{` without a closing `}}}}` in {text:?}")))?;
            let name = after[..end].trim();
            parts.push(placeholder(name, key, names)?);
            rest = &after[end + 2..];
        }
        if !rest.is_empty() {
            parts.push(Part::Literal(rest.to_owned()));
        }
        Ok(Self { parts })
    }

    /// The literal text before the first placeholder.
    pub fn static_prefix(&self) -> &str {
        match self.parts.first() {
            Some(Part::Literal(text)) => text,
            _ => "",
        }
    }

    pub fn has_placeholders(&self) -> bool {
        self.parts.iter().any(|p| !matches!(p, Part::Literal(_)))
    }

    /// Whether a secret form field is used (such templates may not build URLs).
    pub fn uses_secrets(&self) -> bool {
        self.parts.iter().any(|p| matches!(p, Part::Form { secret: true, .. }))
    }

    pub fn is_single_placeholder(&self) -> bool {
        matches!(self.parts.as_slice(), [Part::Arg(_) | Part::Form { .. }])
    }

    /// The value when the whole template is one placeholder: JSON bodies keep its type (null when
    /// it has none).
    pub fn single_value(&self, values: &Values<'_>) -> Option<Value> {
        match self.parts.as_slice() {
            [Part::Arg(name)] => Some(values.arguments.get(name).cloned().unwrap_or(Value::Null)),
            [part @ Part::Form { .. }] => Some(form_value(part, values).unwrap_or(Value::Null)),
            _ => None,
        }
    }

    pub fn render(&self, values: &Values<'_>, encoding: Encoding) -> Result<String, String> {
        self.render_with(encoding, |part| filled(part, values))
            .map(|(text, _)| text)
    }

    /// Renders a URL template, placeholders percent-encoded, and checks that the URL still has the
    /// template's path: a value that makes a `.` or `..` segment (which URL parsing removes) is
    /// refused, and the parsed path must start with the template's literal path and have as many
    /// segments as the template.
    pub fn render_url(&self, values: &Values<'_>) -> Result<Url, String> {
        let (text, spans) = self.render_with(Encoding::UrlComponent, |part| filled(part, values))?;
        self.keeps_path(&text, &spans)
    }

    /// At start: a URL template must keep its own path with every placeholder filled in, so a
    /// literal `.` or `..` segment (which parsing removes) cannot make every call fail.
    pub fn check_url(&self) -> Result<(), String> {
        let (text, spans) = self.render_with(Encoding::UrlComponent, |_| (String::new(), "x".to_owned()))?;
        self.keeps_path(&text, &spans).map(|_| ())
    }

    /// The template's text with the placeholder at each index written as `marker(index, name)`,
    /// where `name` is what the template has between `{{` and `}}` (`args.x`).
    pub fn with_markers(&self, mut marker: impl FnMut(usize, &str) -> String) -> String {
        let mut index = 0;
        let mut out = String::new();
        for part in &self.parts {
            let name = match part {
                Part::Literal(text) => {
                    out.push_str(text);
                    continue;
                }
                Part::Arg(name) => format!("args.{name}"),
                Part::Form { form, field, .. } => format!("form.{form}.{field}"),
            };
            out.push_str(&marker(index, &name));
            index += 1;
        }
        out
    }

    /// The rendered text and where each placeholder's value went; `fill` gives a placeholder's
    /// description and value.
    fn render_with(
        &self,
        encoding: Encoding,
        fill: impl Fn(&Part) -> (String, String),
    ) -> Result<(String, Vec<Span>), String> {
        let mut out = String::new();
        let mut spans = Vec::new();
        for part in &self.parts {
            if let Part::Literal(text) = part {
                out.push_str(text);
                continue;
            }
            let (what, value) = fill(part);
            let start = out.len();
            match encoding {
                Encoding::UrlComponent => out.extend(utf8_percent_encode(&value, COMPONENT)),
                Encoding::Header if value.chars().any(|c| c.is_control()) => {
                    return Err(format!(
                        "{what} contains control characters, which a header cannot carry"
                    ));
                }
                Encoding::Header | Encoding::Text => out.push_str(&value),
                Encoding::JsonString => {
                    let quoted = Value::String(value).to_string();
                    out.push_str(&quoted[1..quoted.len() - 1]);
                }
                Encoding::Shown => out.push_str(&crate::text::shown(&value)),
            }
            spans.push(Span {
                what,
                range: start..out.len(),
            });
        }
        Ok((out, spans))
    }

    /// Parses `text`, rendered from this template with `spans`, and checks it keeps the template's
    /// path. Hand-written because no URL crate answers "did this value change the path's shape".
    fn keeps_path(&self, text: &str, spans: &[Span]) -> Result<Url, String> {
        let url = Url::parse(text).map_err(|e| format!("the arguments make an invalid URL: {e}"))?;
        let path = path_range(text);
        let mut start = path.start;
        for segment in text[path.clone()].split(['/', '\\']) {
            let end = start + segment.len();
            if is_dot_segment(segment) {
                return Err(
                    match spans.iter().find(|s| s.range.start <= end && s.range.end >= start) {
                        Some(span) => format!(
                            "{} is not allowed: it would make the path segment `{segment}`, which moves \
                             the request to another path",
                            span.what
                        ),
                        None => format!("the URL has the path segment `{segment}`, which parsing removes"),
                    },
                );
            }
            start = end + 1;
        }
        let segments = text[path].matches(['/', '\\']).count().max(1);
        let prefix = Url::parse(self.static_prefix()).map_err(|e| format!("the URL's prefix is invalid: {e}"))?;
        if !url.path().starts_with(prefix.path()) || url.path().matches('/').count() != segments {
            return Err("the URL would not keep its template's path".into());
        }
        Ok(url)
    }
}

/// A placeholder's description and the text of its value.
fn filled(part: &Part, values: &Values<'_>) -> (String, String) {
    match part {
        Part::Arg(name) => (
            format!("argument `{name}`"),
            values.arguments.get(name).map(value_text).unwrap_or_default(),
        ),
        Part::Form { form, field, .. } => (
            format!("form field `{form}.{field}`"),
            form_value(part, values).as_ref().map(value_text).unwrap_or_default(),
        ),
        Part::Literal(text) => (String::new(), text.clone()),
    }
}

/// The byte range of a URL's path in `text`: after the authority, up to the query or fragment.
/// `\` ends the authority as `/` does, as http(s) URL parsing treats it.
fn path_range(text: &str) -> Range<usize> {
    let authority = text.find("://").map_or(0, |i| i + 3);
    let start = text[authority..]
        .find(['/', '\\', '?', '#'])
        .map_or(text.len(), |i| authority + i);
    let end = text[start..].find(['?', '#']).map_or(text.len(), |i| start + i);
    start..end
}

/// `.` or `..`, also percent-encoded (`%2e`, any case), which URL parsing removes with the segment
/// before it.
fn is_dot_segment(segment: &str) -> bool {
    let lower = segment.to_ascii_lowercase();
    matches!(lower.as_str(), "." | "%2e" | ".." | ".%2e" | "%2e." | "%2e%2e")
}

/// Parses one placeholder's name.
fn placeholder(name: &str, key: &str, names: &Placeholders<'_>) -> Result<Part, ConfigError> {
    let refuse = |why: &str| ConfigError::key(key, format!("placeholder `{{{{{name}}}}}` {why}"));
    if let Some(argument) = name.strip_prefix("args.") {
        if !names.arguments.contains(argument) {
            return Err(refuse("names no property of the tool's input_schema"));
        }
        return Ok(Part::Arg(argument.to_owned()));
    }
    if let Some(path) = name.strip_prefix("form.") {
        let (form_id, field_name) = path
            .split_once('.')
            .ok_or_else(|| refuse("is not of the form {{form.FORM.FIELD}}"))?;
        let form = names
            .forms
            .iter()
            .find(|f| f.id == form_id)
            .ok_or_else(|| refuse("names a form the tool does not require (add \"form:ID\" to requires)"))?;
        let field = form
            .field(field_name)
            .ok_or_else(|| refuse(&format!("names no field of form `{form_id}`")))?;
        return Ok(Part::Form {
            form: form_id.to_owned(),
            field: field_name.to_owned(),
            secret: field.is_secret(),
        });
    }
    Err(refuse("is not of the form {{args.NAME}} or {{form.FORM.FIELD}}"))
}

/// A form field's submitted value; secrets as strings.
fn form_value(part: &Part, values: &Values<'_>) -> Option<Value> {
    let Part::Form { form, field, secret } = part else {
        return None;
    };
    let submission = values.forms.get(form)?;
    if *secret {
        submission.secrets.get(field).map(|s| Value::String(s.expose().clone()))
    } else {
        submission.values.get(field).cloned()
    }
}

/// Text of a JSON value as it goes into a template: strings bare, the rest as JSON.
fn value_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests;
