//! `{{args.NAME}}` templates in HTTP tool URLs, headers and bodies. Parsed and checked against the
//! tool's input schema at start, so a typo fails the configuration, not a user's call.

use std::collections::BTreeSet;

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use serde_json::{Map, Value};

use crate::config::ConfigError;

#[derive(Debug, Clone, PartialEq)]
enum Part {
    Literal(String),
    Arg(String),
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
}

/// Everything but RFC 3986's unreserved characters is encoded.
const COMPONENT: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');

impl Template {
    /// Parses `text`; `key` names it in errors, `arguments` are the input schema's properties.
    pub fn parse(text: &str, key: &str, arguments: &BTreeSet<String>) -> Result<Self, ConfigError> {
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
            let argument = name.strip_prefix("args.").ok_or_else(|| {
                ConfigError::key(
                    key,
                    format!("placeholder `{{{{{name}}}}}` is not of the form {{{{args.NAME}}}}"),
                )
            })?;
            if !arguments.contains(argument) {
                return Err(ConfigError::key(
                    key,
                    format!("placeholder `{{{{{name}}}}}` names no property of the tool's input_schema"),
                ));
            }
            parts.push(Part::Arg(argument.to_owned()));
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
        self.parts.iter().any(|p| matches!(p, Part::Arg(_)))
    }

    /// The argument name when the whole template is one placeholder (JSON bodies keep its type).
    pub fn single_argument(&self) -> Option<&str> {
        match self.parts.as_slice() {
            [Part::Arg(name)] => Some(name),
            _ => None,
        }
    }

    pub fn render(&self, arguments: &Map<String, Value>, encoding: Encoding) -> Result<String, String> {
        let mut out = String::new();
        for part in &self.parts {
            match part {
                Part::Literal(text) => out.push_str(text),
                Part::Arg(name) => {
                    let value = arguments.get(name).map(value_text).unwrap_or_default();
                    match encoding {
                        Encoding::UrlComponent => out.extend(utf8_percent_encode(&value, COMPONENT)),
                        Encoding::Header if value.chars().any(|c| c.is_control()) => {
                            return Err(format!(
                                "argument `{name}` contains control characters, which a header cannot carry"
                            ));
                        }
                        Encoding::Header | Encoding::Text => out.push_str(&value),
                    }
                }
            }
        }
        Ok(out)
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
    use serde_json::json;

    fn names(list: &[&str]) -> BTreeSet<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    fn args(value: Value) -> Map<String, Value> {
        value.as_object().expect("object").clone()
    }

    #[test]
    fn url_components_cannot_escape_their_place() {
        let t = Template::parse(
            "https://api.test/users/{{args.user}}?q={{ args.q }}",
            "k",
            &names(&["user", "q"]),
        )
        .expect("template");
        let url = t
            .render(
                &args(json!({"user": "../admin?x=1#", "q": "a b&c=d"})),
                Encoding::UrlComponent,
            )
            .expect("render");
        assert_eq!(url, "https://api.test/users/..%2Fadmin%3Fx%3D1%23?q=a%20b%26c%3Dd");
        assert_eq!(t.static_prefix(), "https://api.test/users/");
    }

    #[test]
    fn values_render_by_type_and_missing_ones_are_empty() {
        let t = Template::parse(
            "{{args.n}}/{{args.b}}/{{args.o}}/{{args.missing}}",
            "k",
            &names(&["n", "b", "o", "missing"]),
        )
        .expect("template");
        let text = t
            .render(&args(json!({"n": 4, "b": true, "o": {"a": 1}})), Encoding::Text)
            .expect("render");
        assert_eq!(text, "4/true/{\"a\":1}/");
    }

    #[test]
    fn headers_refuse_line_breaks() {
        let t = Template::parse("Bearer {{args.token}}", "k", &names(&["token"])).expect("template");
        assert!(
            t.render(&args(json!({"token": "x\r\nX-Evil: 1"})), Encoding::Header)
                .is_err()
        );
    }

    #[test]
    fn configuration_errors_name_the_key() {
        for (text, fragment) in [
            ("{{args.nope}}", "names no property"),
            ("{{form.x}}", "not of the form"),
            ("a {{args.x", "without a closing"),
        ] {
            let error = Template::parse(text, "tools[0].http.url", &names(&["x"]))
                .expect_err(text)
                .to_string();
            assert!(
                error.contains("tools[0].http.url") && error.contains(fragment),
                "{error}"
            );
        }
        let single = Template::parse("{{args.x}}", "k", &names(&["x"])).expect("template");
        assert_eq!(single.single_argument(), Some("x"));
    }
}
