//! Operator templates (`server.template_dir`): a base template wraps every page, a form template
//! replaces the form page, and broken ones stop the start.

use super::*;

/// A template directory holding `files`.
fn template_dir(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    for (name, text) in files {
        std::fs::write(dir.path().join(name), text).expect("write template");
    }
    dir
}

fn template_prelude(dir: &Path) -> String {
    format!("[server]\ntemplate_dir = \"{}\"\n", dir.display())
}

const BRANDED_BASE: &str = "<!doctype html><html><head><title>{% block title %}{% endblock %}</title></head>\
<body><div id=\"brand\">ACME</div>{% block content %}{% endblock %}</body></html>";

backend_test!(
    /// An operator's base.html wraps every page (form, 422, notices, /connections) around the
    /// built-in content, which is escaped once, as without it.
    async fn an_operator_base_template_wraps_every_page(backend: Backend) {
        let dir = template_dir(&[("base.html", BRANDED_BASE)]);
        let s = setup_as(backend, &template_prelude(dir.path()), None).await;
        let url = url_of(&elicitation_of(&s.call("keyed", json!({})).await));
        let browser = Browser::new();
        let branded = |page: &Page| {
            assert!(page.body.contains("<div id=\"brand\">ACME</div>"), "{}", page.body);
            assert!(
                !page.body.contains("<footer>gatehouse ·"),
                "the built-in base is replaced"
            );
        };

        let form = browser.get(&url).await;
        assert_eq!(form.status, StatusCode::OK);
        branded(&form);
        assert!(
            form.body.contains("<title>Service key · gatehouse</title>"),
            "{}",
            form.body
        );
        assert!(form.body.contains("<h1>Service key</h1>"));
        let invalid = press(
            &browser,
            &url,
            &s.base(),
            &form.csrf(),
            "submit",
            &fields(&[("team", HOSTILE), ("api_key", "short")]),
        )
        .await;
        assert_eq!(invalid.status, StatusCode::UNPROCESSABLE_ENTITY);
        branded(&invalid);
        assert_eq!(
            field_error(&invalid.body, "api_key").as_deref(),
            Some("Enter at least 8 characters.")
        );
        assert!(!invalid.body.contains("<script>"), "still escaped");
        assert_eq!(shown_value(&invalid.body, "team"), HOSTILE, "escaped once, not twice");
        let saved = press(
            &browser,
            &url,
            &s.base(),
            &form.csrf(),
            "submit",
            &key_answers("sk-branded"),
        )
        .await;
        assert_saved(&saved);
        branded(&saved);
        let unknown = browser.get(&s.url(&format!("/forms/{}", uuid::Uuid::now_v7()))).await;
        assert_eq!(unknown.status, StatusCode::NOT_FOUND);
        branded(&unknown);
        assert!(unknown.body.contains("Unknown link"));
        let connections = browser.get(&s.url("/connections")).await;
        branded(&connections);
        assert!(connections.body.contains("<h1>Your connections</h1>"));
        assert_eq!(
            saved_lines(&connections.body, "key")[1],
            ("Team".to_owned(), "Red Team".to_owned())
        );
        s.server.stop().await;
    }
);

/// Uses the form page's variables: title, action, csrf, submit_label and each field's view.
const OPERATOR_FORM: &str = r#"{% extends "base.html" %}{% block title %}Custom {{ title }}{% endblock %}
{% block content %}<h1 id="custom">{{ title }} ({{ fields|length }} fields)</h1>
<form method="post" action="{{ action }}"><input type="hidden" name="csrf" value="{{ csrf }}">
{% for field in fields %}<label for="{{ field.id }}">{{ field.label }}</label>
<input id="{{ field.id }}" name="{{ field.name }}" value="{{ field.value }}"{% if field.error %} aria-invalid="true"{% endif %}>
{% if field.error %}<p id="{{ field.error_id }}" class="error">{{ field.error }}</p>{% endif %}
{% endfor %}<button name="action" value="submit">{{ submit_label }}</button></form>{% endblock %}"#;

backend_test!(
    /// An operator's form.html replaces the built-in form page, gets the same variables (so its
    /// posts work), and escapes values itself.
    async fn an_operator_form_template_replaces_the_form_page(backend: Backend) {
        let dir = template_dir(&[("form.html", OPERATOR_FORM)]);
        let s = setup_as(backend, &template_prelude(dir.path()), None).await;
        let url = url_of(&elicitation_of(&s.call("keyed", json!({})).await));
        let browser = Browser::new();
        let page = browser.get(&url).await;
        assert_eq!(page.status, StatusCode::OK, "{}", page.body);
        assert!(
            page.body.contains("<h1 id=\"custom\">Service key (3 fields)</h1>"),
            "{}",
            page.body
        );
        assert!(page.body.contains("<title>Custom Service key</title>"));
        assert!(!page.body.contains("<legend>"), "not the built-in form page");
        assert!(page.body.contains("<footer>gatehouse ·"), "inside the built-in base");
        assert_eq!(
            shown_value(&page.body, "org"),
            "personal",
            "field views carry the default"
        );

        let invalid = press(
            &browser,
            &url,
            &s.base(),
            &page.csrf(),
            "submit",
            &fields(&[("org", "acme"), ("team", HOSTILE), ("api_key", "short")]),
        )
        .await;
        assert_eq!(invalid.status, StatusCode::UNPROCESSABLE_ENTITY);
        assert!(invalid.body.contains("id=\"custom\""));
        assert_eq!(
            field_error(&invalid.body, "api_key").as_deref(),
            Some("Enter at least 8 characters.")
        );
        assert!(
            control_tag(&invalid.body, "api_key")
                .0
                .contains("aria-invalid=\"true\"")
        );
        assert!(
            !invalid.body.contains("<script>"),
            "the operator's template escapes too"
        );
        assert_eq!(shown_value(&invalid.body, "team"), HOSTILE);

        let saved = press(
            &browser,
            &url,
            &s.base(),
            &page.csrf(),
            "submit",
            &fields(&[("org", "acme"), ("team", "Ops"), ("api_key", "sk-operator")]),
        )
        .await;
        assert_saved(&saved);
        s.run("keyed", json!({})).await;
        assert_eq!(s.last_request().query, "org=acme&team=Ops");
        s.server.stop().await;
    }
);

/// The reason `Templates::load` refuses a directory holding `files`.
fn template_refusal(files: &[(&str, &str)]) -> String {
    let dir = template_dir(files);
    match gatehouse::web::templates::Templates::load(Some(dir.path())) {
        Ok(_) => panic!("should be refused: {files:?}"),
        Err(error) => error.to_string(),
    }
}

/// A template that replaces no page, or one that does not compile or resolve, stops the start
/// with an error naming `server.template_dir` and the file, not a user's request.
#[tokio::test]
async fn broken_operator_templates_are_configuration_errors() {
    let cases = [
        (vec![("bogus.html", "<p>hi</p>")], "bogus.html"),
        (vec![("form.html", "{% block content %}unclosed")], "form.html"),
        (vec![("base.html", "{{ broken")], "base.html"),
        (
            vec![(
                "notice.html",
                "{% extends \"layout.html\" %}{% block content %}{% endblock %}",
            )],
            "notice.html",
        ),
    ];
    for (files, named) in cases {
        let error = template_refusal(&files);
        assert!(error.contains("`server.template_dir`"), "{error}");
        assert!(error.contains(named), "{error} should name {named}");
    }
    // The same through the whole start, as `gatehouse serve` does it.
    let broken = template_dir(&[("bogus.html", "x")]);
    let database = tempfile::tempdir().expect("temp dir");
    let database_url = format!("sqlite://{}", database.path().join("g.db").display());
    let config = common::config(
        &template_prelude(broken.path()),
        &[
            ("GATEHOUSE_DATABASE__URL", &database_url),
            ("GATEHOUSE_SECRETS__KEYS", common::TEST_KEY),
        ],
    );
    let shutdown = tokio_util::sync::CancellationToken::new();
    match gatehouse::App::build(config, shutdown).await {
        Ok(_) => panic!("a broken template directory must not start"),
        Err(error) => assert!(error.to_string().contains("`server.template_dir`"), "{error}"),
    }
    // Files that are not pages' templates are left alone, and good templates load.
    let fine = template_dir(&[
        ("README.txt", "notes"),
        ("base.html", BRANDED_BASE),
        ("form.html", OPERATOR_FORM),
    ]);
    assert!(gatehouse::web::templates::Templates::load(Some(fine.path())).is_ok());
}
