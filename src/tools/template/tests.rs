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
