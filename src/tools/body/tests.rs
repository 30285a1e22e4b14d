use std::collections::{BTreeSet, HashMap};

use serde_json::{Map, json};

use super::*;

fn body(config: Value, content_type: Option<&str>) -> Result<Body, ConfigError> {
    let arguments: BTreeSet<String> = ["t", "n", "k"].iter().map(|s| (*s).to_owned()).collect();
    Body::from_config(
        &config,
        "tools[0].http.body",
        &Placeholders {
            arguments: &arguments,
            forms: &[],
        },
        content_type,
    )
}

fn render(body: &Body, arguments: Value) -> (String, Option<&'static str>) {
    let arguments: Map<String, Value> = arguments.as_object().expect("object").clone();
    let forms = HashMap::new();
    body.render(&Values {
        arguments: &arguments,
        forms: &forms,
    })
    .expect("render")
}

fn refusal(config: &str) -> String {
    match body(json!(config), None) {
        Ok(_) => panic!("should be refused: {config}"),
        Err(error) => error.to_string(),
    }
}

/// Values that would end a JSON string and add fields if inserted as they are.
const HOSTILE: &str = "x\", \"admin\": true, \"y\": \"\\\n\u{1}</script>";

#[test]
fn a_json_string_body_escapes_values_inside_its_strings() {
    let body = body(
        json!("{\"title\": \"Re: {{args.t}}\", \"n\": 1, \"list\": [\"{{args.n}}\"]}"),
        None,
    )
    .expect("body");
    let (text, content_type) = render(&body, json!({"t": HOSTILE, "n": 4}));
    let sent: Value = serde_json::from_str(&text).expect("still JSON");
    assert_eq!(sent, json!({"title": format!("Re: {HOSTILE}"), "n": 1, "list": ["4"]}));
    assert_eq!(content_type, Some("application/json"));
}

#[test]
fn a_json_string_body_with_a_placeholder_outside_a_string_is_refused() {
    for config in [
        "{\"n\": {{args.n}}}",
        "[{{args.n}}, 2]",
        "{\"n\": -{{args.n}}.5}",
        "{\"n\": {{args.n}}{{args.t}}}",
        "{\"a\": \"{{args.t}}\", \"n\": {{ args.n }}}",
    ] {
        let error = refusal(config);
        assert!(
            error.contains("tools[0].http.body")
                && error.contains("outside a string value")
                && error.contains("args.n"),
            "{config}: {error}"
        );
    }
    for config in ["{\"{{args.k}}\": 1}", "{\"a\": {\"x-{{args.k}}\": \"{{args.t}}\"}}"] {
        let error = refusal(config);
        assert!(
            error.contains("in an object key") && error.contains("args.k"),
            "{config}: {error}"
        );
    }
}

#[test]
fn other_string_bodies_are_text_or_form_encoded() {
    let form = "message={{args.t}}&n={{args.n}}";
    let (text, content_type) = render(&body(json!(form), None).expect("body"), json!({"t": "a&b=c d", "n": 1}));
    assert_eq!(
        (text.as_str(), content_type),
        ("message=a&b=c d&n=1", None),
        "text: as it is"
    );
    for content_type in [
        "application/x-www-form-urlencoded",
        "Application/X-WWW-Form-Urlencoded; charset=utf-8",
    ] {
        let body = body(json!(form), Some(content_type)).expect("body");
        let (text, _) = render(&body, json!({"t": "a&b=c d", "n": 1}));
        assert_eq!(text, "message=a%26b%3Dc%20d&n=1", "{content_type}");
    }
    // A string that is one placeholder, or JSON but not an object or array, is text.
    for config in ["{{args.t}}", "\"{{args.t}}\"", "{ not json {{args.t}} }"] {
        let body = body(json!(config), None).expect(config);
        assert!(matches!(body, Body::Text(_, Encoding::Text)), "{config}");
    }
    let error = body(json!(3), None).err().expect("a number is refused").to_string();
    assert!(error.contains("must be a string or a table"), "{error}");
}
