//! The template renderer: for any argument and form values, a rendered URL is refused or keeps its
//! template's origin, literal path prefix and path segments (a placeholder's segment decodes to its
//! value); a header never carries a control character (so no CR/LF); text and body rendering never
//! fail and write values exactly (inside their JSON string in a string body that is JSON); and every
//! output stays within a bound of the template and values.

use std::collections::{BTreeSet, HashMap};

use gatehouse::config::FormConfig;
use gatehouse::forms::{Form, Forms, Submission};
use gatehouse::secret::Secret;
use gatehouse::tools::{Encoding, Placeholders, Template, Values};
use icu_properties::CodePointSetData;
use icu_properties::props::DefaultIgnorableCodePoint;
use percent_encoding::percent_decode_str;
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::select;
use reqwest::header::HeaderValue;
use serde_json::{Map, Value};
use url::Url;

use crate::strategies::{HOSTILE, hostile_text, json_value};

/// The tool's arguments: `a0`, `a1`, `a2`.
const ARGUMENTS: usize = 3;
/// Percent-encoding writes a byte as at most three characters.
const ENCODED_PER_BYTE: usize = 3;
/// An invisible character (2 to 4 bytes) is shown as `U+XXXX` (6) or `U+XXXXX` (7).
const SHOWN_PER_BYTE: usize = 3;
/// Where every generated URL template starts.
const BASE: &str = "https://api.test/base";

/// Form `k`: a plain field `org` and a secret `key`.
const FORM: &str = r#"
id = "k"
title = "Key"
fields = [
  { name = "org", label = "Org", type = "text" },
  { name = "key", label = "Key", type = "secret" },
]
"#;

fn form() -> Form {
    let config: FormConfig = toml::from_str(FORM).expect("form config");
    let forms = Forms::from_config(&[config]).expect("valid form");
    forms.get("k").cloned().expect("form k")
}

fn parse(text: &str, form: &Form) -> Result<Template, String> {
    let arguments: BTreeSet<String> = (0..ARGUMENTS).map(|i| format!("a{i}")).collect();
    Template::parse(
        text,
        "tools[0].http",
        &Placeholders {
            arguments: &arguments,
            forms: &[form],
        },
    )
    .map_err(|e| e.to_string())
}

/// The placeholders a template may hold and what fills them.
#[derive(Debug, Clone)]
struct Filling {
    arguments: Vec<Value>,
    org: Value,
    key: String,
}

const PLACEHOLDERS: &[&str] = &[
    "{{args.a0}}",
    "{{args.a1}}",
    "{{ args.a2 }}",
    "{{form.k.org}}",
    "{{form.k.key}}",
];

impl Filling {
    fn arguments(&self) -> Map<String, Value> {
        self.arguments
            .iter()
            .enumerate()
            .map(|(i, value)| (format!("a{i}"), value.clone()))
            .collect()
    }

    fn forms(&self) -> HashMap<String, Submission> {
        let mut submission = Submission::default();
        submission.values.insert("org".into(), self.org.clone());
        submission.secrets.insert("key".into(), Secret::new(self.key.clone()));
        HashMap::from([("k".to_owned(), submission)])
    }

    /// The text placeholder `index` of `PLACEHOLDERS` stands for: strings bare, null as nothing,
    /// the rest as JSON (the documented rule, docs/src/gating/http-tools.md).
    fn text(&self, index: usize) -> String {
        let value = match index {
            3 => &self.org,
            4 => return self.key.clone(),
            i => &self.arguments[i],
        };
        match value {
            Value::String(s) => s.clone(),
            Value::Null => String::new(),
            other => other.to_string(),
        }
    }
}

/// Dot segments, encoded or not, and what might pass for one.
#[rustfmt::skip]
const DOTS: &[&str] = &[".", "..", "%2e", "%2E%2e", ".%2e", "%2e.", "\\..", "..\\", "../", "...", "\u{ff0e}\u{ff0e}"];

/// Mostly hostile strings, often a single hostile piece (`..` alone is what moves a path),
/// sometimes any JSON value.
fn value() -> impl Strategy<Value = Value> {
    prop_oneof![
        4 => hostile_text().prop_map(Value::String),
        1 => select(HOSTILE).prop_map(Value::from),
        1 => select(DOTS).prop_map(Value::from),
        1 => json_value(),
    ]
}

fn filling() -> impl Strategy<Value = Filling> {
    (vec(value(), ARGUMENTS), value(), hostile_text()).prop_map(|(arguments, org, key)| Filling { arguments, org, key })
}

/// Renders `template` with `filling`, as a tool call does.
fn render(template: &Template, filling: &Filling, encoding: Encoding) -> Result<String, String> {
    let (arguments, forms) = (filling.arguments(), filling.forms());
    template.render(
        &Values {
            arguments: &arguments,
            forms: &forms,
        },
        encoding,
    )
}

fn render_url(template: &Template, filling: &Filling) -> Result<Url, String> {
    let (arguments, forms) = (filling.arguments(), filling.forms());
    template.render_url(&Values {
        arguments: &arguments,
        forms: &forms,
    })
}

/// One path segment of a URL template.
#[derive(Debug, Clone)]
enum Segment {
    Literal(String),
    /// A whole segment that is one argument.
    Argument(usize),
    /// An argument between literal text: `v{{args.a0}}.git`.
    Inside(String, usize, String),
}

fn literal_segment() -> impl Strategy<Value = String> {
    // A literal dot segment is refused at start; mapped rather than filtered, so no case is rejected.
    "[a-zA-Z0-9_~.-]{1,6}".prop_map(|s| if s == "." || s == ".." { format!("{s}x") } else { s })
}

fn segment() -> impl Strategy<Value = Segment> {
    prop_oneof![
        literal_segment().prop_map(Segment::Literal),
        (0..ARGUMENTS).prop_map(Segment::Argument),
        (literal_segment(), 0..ARGUMENTS, literal_segment()).prop_map(|(a, i, b)| Segment::Inside(a, i, b)),
    ]
}

/// A URL template below `BASE` with its segments and an optional query parameter from an argument.
#[derive(Debug, Clone)]
struct UrlTemplate {
    segments: Vec<Segment>,
    query: Option<usize>,
}

impl UrlTemplate {
    fn text(&self) -> String {
        let path: String = self
            .segments
            .iter()
            .map(|segment| match segment {
                Segment::Literal(text) => format!("/{text}"),
                Segment::Argument(i) => format!("/{{{{args.a{i}}}}}"),
                Segment::Inside(before, i, after) => format!("/{before}{{{{args.a{i}}}}}{after}"),
            })
            .collect();
        let query = self
            .query
            .map(|i| format!("?q={{{{args.a{i}}}}}&fixed=1"))
            .unwrap_or_default();
        format!("{BASE}{path}{query}")
    }

    /// Each segment's text once its placeholders are filled (before encoding).
    fn filled_segments(&self, filling: &Filling) -> Vec<String> {
        self.segments
            .iter()
            .map(|segment| match segment {
                Segment::Literal(text) => text.clone(),
                Segment::Argument(i) => filling.text(*i),
                Segment::Inside(before, i, after) => format!("{before}{}{after}", filling.text(*i)),
            })
            .collect()
    }

    /// Bytes of values written into the URL.
    fn value_bytes(&self, filling: &Filling) -> usize {
        let in_path: usize = self
            .segments
            .iter()
            .map(|segment| match segment {
                Segment::Literal(_) => 0,
                Segment::Argument(i) | Segment::Inside(_, i, _) => filling.text(*i).len(),
            })
            .sum();
        in_path + self.query.map_or(0, |i| filling.text(i).len())
    }
}

fn url_template() -> impl Strategy<Value = UrlTemplate> {
    (vec(segment(), 0..5), proptest::option::of(0..ARGUMENTS))
        .prop_map(|(segments, query)| UrlTemplate { segments, query })
}

/// Pieces of an arbitrary URL template after `BASE`: separators, dot segments and their
/// encodings, query and fragment marks, placeholders.
#[rustfmt::skip]
const URL_PIECES: &[&str] = &[
    "/", "\\", ".", "..", "%2e", "%2E%2e", "%2f", "%5C", "?", "#", "&", "=", "a", "b1", "@", ":", "é", " ", "%",
    "{{args.a0}}", "{{args.a1}}", "{{args.a2}}", "{{form.k.org}}",
];

/// Literal text of header and body templates (no braces, so no accidental placeholder).
fn literal_text() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9 ,;=/:.\"-]{0,8}"
}

/// A piece of a header or body template: literal text or the index of a placeholder.
#[derive(Debug, Clone)]
enum Piece {
    Literal(String),
    Placeholder(usize),
}

/// A header or body template: literal text around placeholders, and its pieces.
fn text_template() -> impl Strategy<Value = (String, Vec<Piece>)> {
    (literal_text(), vec((0..PLACEHOLDERS.len(), literal_text()), 0..4)).prop_map(|(first, parts)| {
        let mut text = first.clone();
        let mut pieces = vec![Piece::Literal(first)];
        for (placeholder, literal) in parts {
            text.push_str(PLACEHOLDERS[placeholder]);
            text.push_str(&literal);
            pieces.push(Piece::Placeholder(placeholder));
            pieces.push(Piece::Literal(literal));
        }
        (text, pieces)
    })
}

/// What rendering `pieces` writes as text: literals and each placeholder's value as is.
fn expected_text(pieces: &[Piece], filling: &Filling) -> String {
    pieces
        .iter()
        .map(|piece| match piece {
            Piece::Literal(text) => text.clone(),
            Piece::Placeholder(index) => filling.text(*index),
        })
        .collect()
}

/// What a page displays as nothing (Unicode's Default_Ignorable_Code_Point, which holds every
/// bidi control): a shown value must carry none of it.
fn is_invisible(c: char) -> bool {
    CodePointSetData::new::<DefaultIgnorableCodePoint>().contains(c)
}

proptest! {
    /// Refused exactly when a value would make a `.` or `..` segment; otherwise each literal
    /// segment is where the template put it and each placeholder's segment decodes to its text.
    #[test]
    fn rendered_urls_keep_their_templates_path(template in url_template(), filling in filling()) {
        let form = form();
        let text = template.text();
        let parsed = parse(&text, &form).map_err(TestCaseError::fail)?;
        prop_assert!(parsed.check_url().is_ok(), "{text} refused at start");
        let filled = template.filled_segments(&filling);
        let makes_dot_segment = filled.iter().any(|s| s == "." || s == "..");
        match render_url(&parsed, &filling) {
            Err(why) => prop_assert!(makes_dot_segment, "{text} refused {filling:?}: {why}"),
            Ok(url) => {
                prop_assert!(!makes_dot_segment, "{text} rendered {url} from a dot segment");
                prop_assert!(url.as_str().starts_with(parsed.static_prefix()), "{url} left {}", parsed.static_prefix());
                let segments: Vec<String> = url
                    .path_segments()
                    .expect("an http URL has a path")
                    .map(|s| percent_decode_str(s).decode_utf8_lossy().into_owned())
                    .collect();
                prop_assert_eq!(&segments[0], "base");
                prop_assert_eq!(&segments[1..], &filled[..]);
                if let Some(i) = template.query {
                    let q = url.query_pairs().find(|(name, _)| name == "q").map(|(_, v)| v.into_owned());
                    prop_assert_eq!(q, Some(filling.text(i)));
                    prop_assert!(url.query_pairs().any(|(name, v)| name == "fixed" && v == "1"));
                }
                prop_assert!(url.fragment().is_none());
                let bound = text.len() + ENCODED_PER_BYTE * template.value_bytes(&filling);
                prop_assert!(url.as_str().len() <= bound, "{} > {bound}", url.as_str().len());
            }
        }
    }

    /// Any template that passes the start-up check, with any values: same origin, the literal
    /// path prefix kept, as many path segments as with harmless values.
    #[test]
    fn arbitrary_url_templates_never_move_the_request(
        pieces in vec(select(URL_PIECES), 0..10),
        filling in filling(),
    ) {
        let form = form();
        let text = format!("{BASE}/{}", pieces.concat());
        let template = parse(&text, &form).map_err(TestCaseError::fail)?;
        if template.check_url().is_err() {
            return Ok(());
        }
        let prefix = Url::parse(template.static_prefix()).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let harmless = Filling {
            arguments: vec![Value::from("x"); ARGUMENTS],
            org: Value::from("x"),
            key: "x".into(),
        };
        let expected = render_url(&template, &harmless).map_err(TestCaseError::fail)?;
        if let Ok(url) = render_url(&template, &filling) {
            prop_assert_eq!(url.origin(), prefix.origin());
            prop_assert!(url.path().starts_with(prefix.path()), "{url} left {prefix}");
            prop_assert_eq!(url.path_segments().map(Iterator::count), expected.path_segments().map(Iterator::count));
            let values: usize = (0..PLACEHOLDERS.len()).map(|i| filling.text(i).len()).sum();
            // The template's own non-ASCII letters are percent-encoded by URL parsing too.
            let bound = ENCODED_PER_BYTE * (text.len() + values * pieces.len());
            prop_assert!(url.as_str().len() <= bound, "{} > {bound}", url.as_str().len());
        }
    }

    /// A header is refused exactly when a value holds a control character; otherwise it is the
    /// values written as is, and a valid header value (no CR or LF).
    #[test]
    fn headers_never_carry_control_characters((text, pieces) in text_template(), filling in filling()) {
        let form = form();
        let template = parse(&text, &form).map_err(TestCaseError::fail)?;
        let expected = expected_text(&pieces, &filling);
        let has_control = pieces.iter().any(|piece| {
            matches!(piece, Piece::Placeholder(index) if filling.text(*index).chars().any(char::is_control))
        });
        match render(&template, &filling, Encoding::Header) {
            Ok(header) => {
                prop_assert!(!has_control);
                prop_assert!(!header.contains(['\r', '\n', '\0']));
                prop_assert!(HeaderValue::from_str(&header).is_ok(), "{header:?}");
                prop_assert_eq!(header, expected);
            }
            Err(why) => {
                prop_assert!(has_control, "refused: {why}");
                prop_assert!(filling.key.len() < 12 || !why.contains(&filling.key), "the refusal repeats the secret: {why}");
            }
        }
    }

    /// In a string body that is JSON, a value stays inside its JSON string whatever it holds (quotes,
    /// backslashes, line breaks): the body parses, and the string is the values written exactly.
    #[test]
    fn json_string_bodies_keep_values_inside_their_string((text, pieces) in text_template(), filling in filling()) {
        let form = form();
        let unquote = |text: &str| text.replace('"', "'");
        let body = format!("{{\"k\": \"{}\"}}", unquote(&text));
        let template = parse(&body, &form).map_err(TestCaseError::fail)?;
        let rendered = render(&template, &filling, Encoding::JsonString).map_err(TestCaseError::fail)?;
        let parsed: Value = serde_json::from_str(&rendered)?;
        let pieces: Vec<Piece> = pieces
            .into_iter()
            .map(|piece| match piece {
                Piece::Literal(text) => Piece::Literal(unquote(&text)),
                placeholder => placeholder,
            })
            .collect();
        prop_assert_eq!(parsed, serde_json::json!({"k": expected_text(&pieces, &filling)}));
    }

    /// Text bodies are the values written exactly; a body that is one placeholder keeps its value's
    /// type; shown text makes invisible characters visible, within a bound.
    #[test]
    fn bodies_and_shown_text_render_every_value((text, pieces) in text_template(), filling in filling()) {
        let form = form();
        let template = parse(&text, &form).map_err(TestCaseError::fail)?;
        let expected = expected_text(&pieces, &filling);
        prop_assert_eq!(render(&template, &filling, Encoding::Text).map_err(TestCaseError::fail)?, expected.clone());

        let shown = render(&template, &filling, Encoding::Shown).map_err(TestCaseError::fail)?;
        prop_assert!(!shown.contains(is_invisible), "{shown:?}");
        prop_assert!(shown.len() <= SHOWN_PER_BYTE * expected.len(), "{} > 3 x {}", shown.len(), expected.len());

        let (arguments, forms) = (filling.arguments(), filling.forms());
        let values = Values { arguments: &arguments, forms: &forms };
        match pieces.as_slice() {
            [Piece::Literal(first), Piece::Placeholder(index), Piece::Literal(last)] if first.is_empty() && last.is_empty() => {
                prop_assert!(template.is_single_placeholder());
                let kept = match *index {
                    3 => filling.org.clone(),
                    4 => Value::String(filling.key.clone()),
                    i => filling.arguments[i].clone(),
                };
                prop_assert_eq!(template.single_value(&values), Some(kept));
            }
            _ => prop_assert_eq!(template.single_value(&values), None),
        }
    }
}
