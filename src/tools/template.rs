//! `{{args.NAME}}` and `{{form.FORM.FIELD}}` templates in HTTP tool URLs, headers and bodies, and
//! in call-scoped form descriptions. Parsed and checked against the tool's input schema and the
//! forms it requires at start, so a typo fails the configuration, not a user's call. A rendered
//! URL keeps its template's path: a value cannot add, remove or climb path segments.

use std::collections::{BTreeSet, HashMap};
use std::ops::Range;

use icu_properties::CodePointSetData;
use icu_properties::props::DefaultIgnorableCodePoint;
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
                Encoding::Shown => shown(&value, &mut out),
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

/// Writes `value` with every bidi control and invisible character as its code point (`U+202E`):
/// they could make a shown value read differently (`"\u{202e}0001\u{202c}"` displays as "1000").
fn shown(value: &str, out: &mut String) {
    for c in value.chars() {
        if is_invisible(c) {
            out.push_str(&format!("U+{:04X}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
}

/// Characters that display as nothing: Unicode's `Default_Ignorable_Code_Point` (which holds every
/// bidi control), so also zero-width spaces and joiners, variation selectors, fillers, soft hyphen
/// and tag characters (text hidden in plain sight).
fn is_invisible(c: char) -> bool {
    CodePointSetData::new::<DefaultIgnorableCodePoint>().contains(c)
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
mod tests {
    use super::*;
    use crate::forms::Forms;
    use crate::forms::testing::{EXAMPLE, compile};
    use crate::secret::Secret;
    use serde_json::json;

    /// `openai` (a secret `api_key`, a plain `org`) and `pay`, both required by the tool.
    fn forms() -> Forms {
        compile(EXAMPLE).expect("forms")
    }

    fn parse(text: &str, arguments: &[&str]) -> Result<Template, ConfigError> {
        let forms = forms();
        let arguments: BTreeSet<String> = arguments.iter().map(|s| (*s).to_owned()).collect();
        let required: Vec<&Form> = forms.iter().collect();
        Template::parse(
            text,
            "tools[0].http.url",
            &Placeholders {
                arguments: &arguments,
                forms: &required,
            },
        )
    }

    fn render(template: &Template, arguments: Value, encoding: Encoding) -> Result<String, String> {
        let mut submission = Submission::default();
        submission
            .secrets
            .insert("api_key".into(), Secret::new("sk-secret\r\nX: 1".into()));
        submission.values.insert("org".into(), json!("ACME & Co"));
        let forms = HashMap::from([("openai".to_owned(), submission)]);
        let arguments = arguments.as_object().expect("object").clone();
        template.render(
            &Values {
                arguments: &arguments,
                forms: &forms,
            },
            encoding,
        )
    }

    #[test]
    fn url_components_cannot_escape_their_place() {
        let t = parse("https://api.test/users/{{args.user}}?q={{ args.q }}", &["user", "q"]).expect("template");
        let url = render(
            &t,
            json!({"user": "../admin?x=1#", "q": "a b&c=d"}),
            Encoding::UrlComponent,
        )
        .expect("render");
        assert_eq!(url, "https://api.test/users/..%2Fadmin%3Fx%3D1%23?q=a%20b%26c%3Dd");
        assert_eq!(t.static_prefix(), "https://api.test/users/");
    }

    fn render_url(template: &Template, arguments: Value) -> Result<Url, String> {
        let arguments = arguments.as_object().expect("object").clone();
        let forms = HashMap::new();
        template.render_url(&Values {
            arguments: &arguments,
            forms: &forms,
        })
    }

    #[test]
    fn url_values_cannot_make_dot_segments() {
        let t = parse(
            "https://api.test/api/repos/{{args.owner}}/{{args.repo}}?q={{args.q}}",
            &["owner", "repo", "q"],
        )
        .expect("template");
        for (owner, repo, refused) in [
            ("..", "me", "owner"),
            (".", "me", "owner"),
            ("octo", "..", "repo"),
            ("octo", ".", "repo"),
        ] {
            let error = render_url(&t, json!({"owner": owner, "repo": repo})).expect_err(owner);
            assert!(
                error.contains(&format!("argument `{refused}` is not allowed")),
                "{owner}/{repo}: {error}"
            );
        }
        let fine = render_url(&t, json!({"owner": "octo", "repo": "hello", "q": ".."})).expect("dots in a query");
        assert_eq!(fine.as_str(), "https://api.test/api/repos/octo/hello?q=..");

        // A segment made of a literal and a value is checked whole.
        let t = parse("https://api.test/files/.{{args.name}}/raw", &["name"]).expect("template");
        assert!(render_url(&t, json!({"name": "."})).is_err());
        assert!(render_url(&t, json!({})).is_err(), "an empty value leaves `.`");
        assert_eq!(
            render_url(&t, json!({"name": "git"})).expect("render").path(),
            "/files/.git/raw"
        );
    }

    #[test]
    fn encoded_dots_and_backslashes_stay_inside_their_segment() {
        let t = parse("https://api.test/api/repos/{{args.owner}}/me", &["owner"]).expect("template");
        for (owner, segment) in [
            ("%2e%2e", "%252e%252e"),
            ("%2E.", "%252E."),
            (".%2E", ".%252E"),
            ("..\\..", "..%5C.."),
            ("\\..", "%5C.."),
            ("../..", "..%2F.."),
            (".\t.", ".%09."),
            ("..%2f..", "..%252f.."),
            ("\u{ff0e}\u{ff0e}", "%EF%BC%8E%EF%BC%8E"),
            ("...", "..."),
        ] {
            let url = render_url(&t, json!({ "owner": owner })).expect(owner);
            assert_eq!(url.path(), format!("/api/repos/{segment}/me"), "{owner:?}");
        }
    }

    #[test]
    fn url_templates_that_parsing_rewrites_are_refused_at_start() {
        for text in [
            "https://api.test/a/../{{args.x}}",
            "https://api.test/a/./{{args.x}}",
            "https://api.test/a/%2E%2e/{{args.x}}",
        ] {
            let t = parse(text, &["x"]).expect("template");
            assert!(t.check_url().is_err(), "{text}");
        }
        for text in [
            "https://api.test/a/{{args.x}}",
            "https://api.test/a/{{args.x}}.git?q={{args.x}}",
            "https://api.test/a//{{args.x}}/",
            "https://api.test/{{args.x}}",
            "https://api.test/a\\{{args.x}}",
        ] {
            let t = parse(text, &["x"]).expect("template");
            t.check_url().unwrap_or_else(|e| panic!("{text}: {e}"));
        }
    }

    #[test]
    fn shown_values_make_bidi_controls_and_invisible_characters_visible() {
        let t = parse("Pay {{args.amount}} EUR to {{args.payee}}?", &["amount", "payee"]).expect("template");
        let text = render(
            &t,
            json!({"amount": "\u{202e}0001\u{202c}", "payee": "Bob\u{200b}\u{2066}\u{feff}\u{061c} مرحبا 🦀"}),
            Encoding::Shown,
        )
        .expect("render");
        assert_eq!(
            text,
            "Pay U+202E0001U+202C EUR to BobU+200BU+2066U+FEFFU+061C مرحبا 🦀?"
        );
        for c in [
            '\u{200e}',
            '\u{200f}',
            '\u{202a}',
            '\u{2069}',
            '\u{200d}',
            '\u{2060}',
            '\u{e0041}',
            '\u{fe0f}',
            '\u{3164}',
        ] {
            let text = render(&t, json!({ "amount": c.to_string() }), Encoding::Shown).expect("render");
            assert!(
                !text.contains(c) && text.contains(&format!("U+{:04X}", u32::from(c))),
                "{text}"
            );
        }
    }

    #[test]
    fn values_render_by_type_and_missing_ones_are_empty() {
        let t = parse(
            "{{args.n}}/{{args.b}}/{{args.o}}/{{args.missing}}",
            &["n", "b", "o", "missing"],
        )
        .expect("template");
        let text = render(&t, json!({"n": 4, "b": true, "o": {"a": 1}}), Encoding::Text).expect("render");
        assert_eq!(text, "4/true/{\"a\":1}/");
    }

    #[test]
    fn headers_refuse_line_breaks() {
        let t = parse("Bearer {{args.token}}", &["token"]).expect("template");
        assert!(render(&t, json!({"token": "x\r\nX-Evil: 1"}), Encoding::Header).is_err());
        let secret = parse("Bearer {{form.openai.api_key}}", &[]).expect("template");
        let error = render(&secret, json!({}), Encoding::Header).expect_err("line break");
        assert!(
            error.contains("openai.api_key") && !error.contains("sk-secret"),
            "{error}"
        );
    }

    #[test]
    fn form_fields_render_and_secrets_are_marked() {
        let t = parse("org={{form.openai.org}}", &[]).expect("template");
        assert!(!t.uses_secrets());
        assert_eq!(render(&t, json!({}), Encoding::Text).expect("render"), "org=ACME & Co");
        let secret = parse("{{ form.openai.api_key }}", &[]).expect("template");
        assert!(secret.uses_secrets());
        let forms = HashMap::new();
        let arguments = Map::new();
        let empty = Values {
            arguments: &arguments,
            forms: &forms,
        };
        assert_eq!(secret.single_value(&empty), Some(Value::Null));
    }

    #[test]
    fn configuration_errors_name_the_key() {
        for (text, fragment) in [
            ("{{args.nope}}", "names no property"),
            ("{{forms.x}}", "is not of the form"),
            ("{{form.openai}}", "is not of the form {{form.FORM.FIELD}}"),
            ("{{form.other.x}}", "does not require"),
            ("{{form.openai.nope}}", "names no field"),
            ("a {{args.x", "without a closing"),
        ] {
            let error = parse(text, &["x"]).expect_err(text).to_string();
            assert!(
                error.contains("tools[0].http.url") && error.contains(fragment),
                "{error}"
            );
        }
        let single = parse("{{args.x}}", &["x"]).expect("template");
        let arguments = json!({"x": [1, 2]}).as_object().expect("object").clone();
        let forms = HashMap::new();
        let values = Values {
            arguments: &arguments,
            forms: &forms,
        };
        assert_eq!(single.single_value(&values), Some(json!([1, 2])));
    }
}
