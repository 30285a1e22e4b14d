//! Unit tests of the templates: every file of templates/ is built in and renders, with the sample
//! pages of every module (strictly: no undefined variable, nothing printed that a page would show
//! as a Rust value's serialized form), and the prefix reaches every page, built-in or replaced.

use std::collections::BTreeSet;

use minijinja::{ErrorKind, UndefinedBehavior};

use super::*;
use crate::web::error::NoticePage;

/// The parts other templates include or extend, rendered only through them.
const PARTS: &[&str] = &["base.html", "admin_nav.html", "admin_pager.html"];

/// Every module's sample pages.
fn samples() -> Vec<Sample> {
    [
        super::super::samples(),
        super::super::error::samples(),
        super::super::connect::samples(),
        super::super::forms::samples(),
        super::super::connections::samples(),
        super::super::approvals::samples(),
        super::super::sign_in::samples(),
        super::super::admin::samples(),
        crate::demo::samples(),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// The built-in templates, strict: an undefined variable fails, and so does printing none, a
/// boolean, a list or a map (a page must not show `none`, `True` or `[...]`, a Rust value's
/// serialized form, where its text belonged).
fn strict() -> Templates {
    let mut templates = Templates::built_in().expect("the built-in templates parse");
    templates.environment.set_undefined_behavior(UndefinedBehavior::Strict);
    templates.environment.set_formatter(|out, state, value| {
        if value.is_none()
            || matches!(
                value.kind(),
                minijinja::value::ValueKind::Bool | minijinja::value::ValueKind::Seq | minijinja::value::ValueKind::Map
            )
        {
            return Err(minijinja::Error::new(
                ErrorKind::InvalidOperation,
                format!("a page prints {value:?} as it is"),
            ));
        }
        escape_html(out, state, value)
    });
    templates
}

#[test]
fn every_template_file_is_built_in_and_every_page_among_them() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("templates");
    let files: BTreeSet<String> = std::fs::read_dir(&dir)
        .expect("templates/")
        .map(|entry| entry.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    let built_in: BTreeSet<String> = BUILT_IN.iter().map(|(name, _)| (*name).to_owned()).collect();
    assert_eq!(files, built_in, "templates/ and BUILT_IN list the same files");
    for name in PAGE_NAMES {
        assert!(built_in.contains(*name), "{name} is a built-in template");
    }
}

#[test]
fn every_built_in_template_renders_its_sample_pages() {
    let templates = strict();
    let mut rendered = BTreeSet::new();
    for sample in samples() {
        let html = templates
            .render_variables(sample.name, sample.variables.clone(), "/gh")
            .unwrap_or_else(|e| panic!("{}: {e:#}", sample.name));
        assert!(!html.contains("{{") && !html.contains("{%"), "{}: {html}", sample.name);
        assert!(
            html.contains(r#"<a href="/gh/connections">"#),
            "{}: the base wraps it",
            sample.name
        );
        rendered.insert(sample.name);
    }
    for (name, _) in BUILT_IN {
        assert!(
            rendered.contains(name) || PARTS.contains(name),
            "{name} has no sample page"
        );
    }
}

#[test]
fn printed_values_are_escaped_once_and_urls_kept_readable() {
    let page = NoticePage::new("Done", "<b>\"x\" & 'y'</b>", None).with_link("/gh/a?b=1&c=2", "On");
    let html = Templates::built_in()
        .expect("built-in")
        .render(&page, "/gh")
        .expect("render");
    assert!(
        html.contains("<p>&#60;b&#62;&#34;x&#34; &#38; &#39;y&#39;&#60;/b&#62;</p>"),
        "{html}"
    );
    assert!(html.contains(r#"<a href="/gh/a?b=1&#38;c=2">On</a>"#), "{html}");
}

#[test]
fn every_page_gets_the_prefix_built_in_or_replaced() {
    let page = NoticePage::new("Done", "All done.", None);
    let built_in = Templates::load(None)
        .expect("built-in")
        .render(&page, "/gh")
        .expect("built-in");
    assert!(built_in.contains(r#"<a href="/gh/connections">"#), "{built_in}");

    let dir = tempfile::tempdir().expect("dir");
    let notice =
        r#"{% extends "base.html" %}{% block content %}<a href="{{ prefix }}/x">{{ heading }}</a>{% endblock %}"#;
    std::fs::write(dir.path().join("notice.html"), notice).expect("write");
    let replaced = Templates::load(Some(dir.path()))
        .expect("load")
        .render(&page, "/gh")
        .expect("operator");
    assert!(replaced.contains(r#"<a href="/gh/x">Done</a>"#), "{replaced}");
    assert!(
        replaced.contains(r#"<a href="/gh/connections">"#),
        "the built-in base: {replaced}"
    );

    std::fs::write(
        dir.path().join("base.html"),
        r#"<nav>{{ prefix }}</nav>{% block content %}{% endblock %}"#,
    )
    .expect("write");
    std::fs::remove_file(dir.path().join("notice.html")).expect("remove");
    let wrapped = Templates::load(Some(dir.path()))
        .expect("load")
        .render(&page, "/gh")
        .expect("wrapped");
    assert!(wrapped.starts_with("<nav>/gh</nav>"), "{wrapped}");
    assert!(wrapped.contains("<h1>Done</h1>"), "the built-in page inside: {wrapped}");
}
