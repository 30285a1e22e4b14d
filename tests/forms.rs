//! Hosted forms end to end: a tool that requires a form answers -32042 with a `/forms/{id}` link,
//! a browser fills the form in over real HTTP, and the retried call sends the values to a real
//! upstream on loopback. Also: secrets, hostile input, call-scoped confirmations, the owner and
//! CSRF checks, `/connections`, and operator templates. Every test runs on PostgreSQL and SQLite
//! unless it only checks configuration.

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use common::upstream::{self, Log, Seen};
use common::{
    Backend, Browser, HEADER_IDENTITY, McpClient, Page, Reply, SseStream, TestDatabase, TestServer, captured_logs,
    description, elicitations, logged_text, text, unescape, url_of,
};
use reqwest::StatusCode;
use serde_json::{Value, json};

// ---------------------------------------------------------------------------------------------
// Configuration
// ---------------------------------------------------------------------------------------------

/// The forms and tools every test runs against; `UPSTREAM` becomes the recording upstream's
/// address.
const FORMS: &str = include_str!("fixtures/forms.toml");

const IDENTITY_HEADER: &str = "x-forwarded-user";

fn gatehouse_toml(upstream: SocketAddr, prelude: &str) -> String {
    format!("{prelude}\n{}", FORMS.replace("UPSTREAM", &upstream.to_string()))
}

// ---------------------------------------------------------------------------------------------
// Setup and MCP helpers
// ---------------------------------------------------------------------------------------------

struct Setup {
    database: TestDatabase,
    server: TestServer,
    client: McpClient,
    upstream: Log,
}

/// Local identity (one user, `local`), an initialized client that can open URLs.
async fn setup(backend: Backend) -> Setup {
    setup_as(backend, "", None).await
}

/// `prelude` goes before the forms (`[server]`, `[identity]`); `user` is sent as the identity
/// header on every MCP request (header identity mode).
async fn setup_as(backend: Backend, prelude: &str, user: Option<&str>) -> Setup {
    captured_logs();
    let (addr, upstream) = upstream::recording().await;
    let database = TestDatabase::new(backend).await;
    let server = TestServer::start(&database, &gatehouse_toml(addr, prelude)).await;
    let mut client = server.client();
    if let Some(user) = user {
        client = client.with_user(IDENTITY_HEADER, user);
    }
    client.initialize().await;
    Setup {
        database,
        server,
        client,
        upstream,
    }
}

impl Setup {
    fn base(&self) -> String {
        self.server.base()
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base())
    }

    async fn call(&self, tool: &str, arguments: Value) -> Reply {
        self.client
            .request("tools/call", json!({"name": tool, "arguments": arguments}))
            .await
    }

    /// A call that must run (no elicitation); returns its result.
    async fn run(&self, tool: &str, arguments: Value) -> Value {
        let result = self
            .client
            .call("tools/call", json!({"name": tool, "arguments": arguments}))
            .await;
        assert_eq!(result["isError"], false, "{tool} should run: {result}");
        result
    }

    fn requests(&self) -> usize {
        self.upstream.lock().expect("log").len()
    }

    fn last_request(&self) -> Seen {
        self.upstream
            .lock()
            .expect("log")
            .last()
            .cloned()
            .expect("a request upstream")
    }

    async fn count(&self, sql: &'static str) -> i64 {
        self.database.query_count(sql).await
    }

    /// Presses Delete on /connections for the saved answers to `form`, with the page token `csrf`.
    async fn delete_answers(&self, browser: &Browser, csrf: &str, form: &str) -> Page {
        let form = fields(&[("form", form)]);
        press(
            browser,
            &self.url("/connections"),
            &self.base(),
            csrf,
            "delete-form",
            &form,
        )
        .await
    }
}

/// The one elicitation of a -32042 answer.
fn elicitation_of(reply: &Reply) -> Value {
    let listed = elicitations(reply);
    assert_eq!(listed.len(), 1, "{}", reply.body);
    listed[0].clone()
}

/// Every message the stream delivers within `wait`.
async fn drain(stream: &mut SseStream, wait: Duration) -> Vec<Value> {
    let mut messages = Vec::new();
    while let Some((_, message)) = stream.next_message(wait).await {
        messages.push(message);
    }
    messages
}

// ---------------------------------------------------------------------------------------------
// Browser helpers
// ---------------------------------------------------------------------------------------------

type Fields = Vec<(String, String)>;

fn fields(pairs: &[(&str, &str)]) -> Fields {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
}

/// `fields` with `name` set to `value` (added when absent), or left out with None: a browser
/// posts nothing for an unticked box.
fn with_field(fields: &Fields, name: &str, value: Option<&str>) -> Fields {
    let mut changed: Fields = fields.iter().filter(|(k, _)| k != name).cloned().collect();
    if let Some(value) = value {
        changed.push((name.to_owned(), value.to_owned()));
    }
    changed
}

/// Posts a form as a browser does: the page's CSRF token, the fields, then the button pressed.
async fn press(browser: &Browser, url: &str, origin: &str, csrf: &str, action: &str, fields: &Fields) -> Page {
    let mut pairs: Vec<(&str, &str)> = vec![("csrf", csrf)];
    pairs.extend(fields.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    pairs.push(("action", action));
    browser.post_form(url, origin, &pairs).await
}

/// Opens a form page (which must answer 200) and submits `fields` with its token.
async fn fill_in(browser: &Browser, url: &str, origin: &str, fields: &Fields) -> Page {
    let page = browser.get(url).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    press(browser, url, origin, &page.csrf(), "submit", fields).await
}

fn assert_saved(page: &Page) {
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    assert!(page.body.contains("<h1>Saved</h1>"), "{}", page.body);
}

// ---------------------------------------------------------------------------------------------
// Reading pages: just enough HTML parsing for the built-in templates (and the operator template
// below, which uses the same ids).
// ---------------------------------------------------------------------------------------------

/// The opening tag of the control `id="field-NAME"`, and where it ends in `body`.
fn control_tag<'a>(body: &'a str, name: &str) -> (&'a str, usize) {
    let marker = format!("id=\"field-{name}\"");
    let at = body
        .find(&marker)
        .unwrap_or_else(|| panic!("no control for {name} in {body}"));
    let start = body[..at].rfind('<').expect("tag start");
    let end = at + body[at..].find('>').expect("tag end") + 1;
    (&body[start..end], end)
}

fn attribute(tag: &str, name: &str) -> Option<String> {
    let marker = format!(" {name}=\"");
    let start = tag.find(&marker)? + marker.len();
    let end = start + tag[start..].find('"')?;
    Some(unescape(&tag[start..end]))
}

/// What the page shows in a field's control, as the text the browser would post: a textarea's
/// content, a select's chosen option, `true` for a ticked box ("" unticked), an input's value.
fn shown_value(body: &str, name: &str) -> String {
    let (tag, end) = control_tag(body, name);
    let after = &body[end..];
    if tag.starts_with("<textarea") {
        return unescape(&after[..after.find("</textarea>").expect("textarea end")]);
    }
    if tag.starts_with("<select") {
        let options = &after[..after.find("</select>").expect("select end")];
        return options
            .split("<option")
            .find(|option| option.contains(" selected"))
            .and_then(|option| attribute(option, "value"))
            .unwrap_or_default();
    }
    if attribute(tag, "type").as_deref() == Some("checkbox") {
        return if tag.contains(" checked") {
            "true".into()
        } else {
            String::new()
        };
    }
    attribute(tag, "value").unwrap_or_default()
}

/// The message in `id="field-NAME-error"`.
fn field_error(body: &str, name: &str) -> Option<String> {
    let marker = format!("id=\"field-{name}-error\"");
    let at = body.find(&marker)?;
    let start = at + body[at..].find('>')? + 1;
    let end = start + body[start..].find("</")?;
    Some(unescape(&body[start..end]))
}

/// The (label, value) lines of the saved answers of `form` on /connections.
fn saved_lines(body: &str, form: &str) -> Vec<(String, String)> {
    let marker = format!("aria-labelledby=\"form-{form}\"");
    let start = body.find(&marker).unwrap_or_else(|| panic!("no section for {form}"));
    let section = &body[start..start + body[start..].find("</section>").expect("section end")];
    section
        .split("<dt>")
        .skip(1)
        .map(|line| {
            let (label, rest) = line.split_once("</dt><dd>").expect("dd");
            let value = rest.split_once("</dd>").expect("dd end").0;
            (unescape(label), unescape(value))
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// 1. Every field type and rule, through real posts
// ---------------------------------------------------------------------------------------------

/// A valid answer to every `profile` field as a browser posts it: the unticked newsletter box is
/// absent, the agree box posts the browser's `on`, and some values carry spaces a field trims.
fn valid_profile(secret: &str) -> Fields {
    fields(&[
        ("name", "Ada Lovelace"),
        ("bio", "Line one\nLine two"),
        ("email", " ada@example.com "),
        ("site", "https://example.com/ada"),
        ("ratio", " 2.5"),
        ("count", "7"),
        ("agree", "on"),
        ("plan", "pro"),
        ("start", "2026-03-14"),
        ("api_key", secret),
    ])
}

const PROFILE_FIELDS: &[&str] = &[
    "name", "bio", "email", "site", "ratio", "count", "agree", "news", "plan", "start", "api_key",
];

/// What the re-rendered page must show for a posted value: boxes show ticked or not, a select
/// shows only a value among its options, and a secret is never shown.
fn redisplayed(field: &str, posted: Option<&str>) -> String {
    let posted = posted.unwrap_or("");
    match field {
        "agree" | "news" => if matches!(posted, "true" | "on") { "true" } else { "" }.to_owned(),
        "plan" if !matches!(posted, "free" | "pro") => String::new(),
        "api_key" => String::new(),
        _ => posted.to_owned(),
    }
}

/// (field, posted value or None for not posted, expected message fragment), one case a line.
#[rustfmt::skip]
fn invalid_profile_answers() -> Vec<(&'static str, Option<String>, &'static str)> {
    let some = |s: &str| Some(s.to_owned());
    vec![
        ("name", some(""), "This field is required."),
        ("name", some("   "), "This field is required."),
        ("name", some("A"), "Enter at least 2 characters."),
        ("name", Some("A".repeat(21)), "Enter at most 20 characters."),
        ("name", some("Ada 1"), "Enter a value in the expected format."),
        ("name", some("Ada\nL"), "Enter this on one line, without line breaks."),
        ("name", some("Ada\u{7}"), "Remove the invisible control characters"),
        ("name", some("Ada\0"), "Remove the NUL character"),
        ("bio", Some("b".repeat(51)), "Enter at most 50 characters."),
        ("bio", some("tabs\tand\nbreaks\0"), "Remove the NUL character"),
        ("email", None, "This field is required."),
        ("email", some("ada.example.com"), "Enter an email address like name@example.com."),
        ("email", some("ada@example"), "Enter an email address like name@example.com."),
        ("email", some("ada lovelace@example.com"), "Enter an email address like"),
        ("site", some("ftp://example.com"), "Enter a web address starting with https:// or http://."),
        ("site", some("example.com"), "Enter a web address starting with https://"),
        ("ratio", some("lots"), "Enter a number."),
        ("ratio", some("inf"), "Enter a number."),
        ("ratio", some("0.4"), "Enter a number from 0.5 to 10."),
        ("ratio", some("10.01"), "Enter a number from 0.5 to 10."),
        ("count", some("7.5"), "Enter a whole number."),
        ("count", some("0"), "Enter a whole number from 1 to 100."),
        ("count", some("101"), "Enter a whole number from 1 to 100."),
        ("agree", None, "Tick this box to continue."),
        ("agree", some("yes"), "This box can only be ticked or left empty."),
        ("news", some("1"), "This box can only be ticked or left empty."),
        ("plan", some(""), "This field is required."),
        ("plan", some("enterprise"), "Choose one of the options."),
        ("start", some("14/03/2026"), "Enter a date like 2026-01-31."),
        ("start", some("2026-3-14"), "Enter a date like 2026-01-31."),
        ("start", some("2026-02-30"), "Enter a date like 2026-01-31."),
        ("start", some("2025-12-31"), "Enter a date from 2026-01-01 to 2026-12-31."),
        ("start", some("2027-01-01"), "Enter a date from 2026-01-01 to 2026-12-31."),
        ("api_key", some(""), "This field is required."),
        ("api_key", some("sk-abc"), "Enter at least 10 characters."),
        ("api_key", some("pk-abcdefghij"), "Enter a value in the expected format."),
    ]
}

backend_test!(
    /// Each rule refuses its bad value on the server with its own message next to its own field
    /// (and only there), keeps everything typed but the secret, and stores nothing; a valid post
    /// completes the elicitation, and the retried call sends typed values upstream.
    async fn every_field_type_and_rule_is_checked_over_http(backend: Backend) {
        let s = setup(backend).await;
        let mut stream = s.client.open_stream(None).await;
        let reply = s.call("profile", json!({})).await;
        let elicitation = elicitation_of(&reply);
        let id = elicitation["elicitationId"].as_str().expect("id").to_owned();
        let url = url_of(&elicitation);
        assert_eq!(url, s.url(&format!("/forms/{id}")));
        assert_eq!(
            elicitation["message"],
            "Please fill in \"Your profile\" in your browser."
        );
        assert_eq!(s.requests(), 0, "nothing runs without the values");

        let browser = Browser::new();
        let page = browser.get(&url).await;
        assert_eq!(page.status, StatusCode::OK, "{}", page.body);
        assert!(page.body.contains("novalidate"), "the server alone validates");
        assert_eq!(shown_value(&page.body, "count"), "5", "the configured default");
        assert_eq!(shown_value(&page.body, "plan"), "", "no default: nothing chosen");
        assert_eq!(shown_value(&page.body, "news"), "", "unticked");
        for field in PROFILE_FIELDS {
            assert!(field_error(&page.body, field).is_none(), "no message before a post");
        }
        let csrf = page.csrf();
        let secret = format!("sk-{}", uuid::Uuid::now_v7().simple());
        let valid = valid_profile(&secret);

        for (field, value, message) in invalid_profile_answers() {
            let posted = with_field(&valid, field, value.as_deref());
            let page = press(&browser, &url, &s.base(), &csrf, "submit", &posted).await;
            let case = format!("{field} = {value:?}");
            assert_eq!(page.status, StatusCode::UNPROCESSABLE_ENTITY, "{case}: {}", page.body);
            let shown = field_error(&page.body, field).unwrap_or_else(|| panic!("{case}: no message for {field}"));
            assert!(shown.contains(message), "{case}: {shown:?} should say {message:?}");
            assert_eq!(page.body.matches("class=\"error\">").count(), 1, "{case}: one message");
            assert!(page.body.contains("Please correct 1 answer"), "{case}: summary");
            assert!(
                control_tag(&page.body, field).0.contains("aria-invalid=\"true\""),
                "{case}: the field is marked invalid"
            );
            assert_eq!(
                page.body.matches("aria-invalid=\"true\"").count(),
                1,
                "{case}: only that field"
            );
            for other in PROFILE_FIELDS {
                let typed = posted.iter().find(|(k, _)| k == other).map(|(_, v)| v.as_str());
                assert_eq!(
                    shown_value(&page.body, other),
                    redisplayed(other, typed),
                    "{case}: what was typed in {other} is shown again"
                );
            }
            assert!(!page.body.contains(&secret), "{case}: the typed secret is not echoed");
        }
        assert_eq!(
            s.count("SELECT COUNT(*) FROM form_values").await,
            0,
            "refused posts store nothing"
        );
        assert_eq!(
            s.count("SELECT COUNT(*) FROM elicitations WHERE status = 'pending'")
                .await,
            1
        );

        let saved = press(&browser, &url, &s.base(), &csrf, "submit", &valid).await;
        assert_saved(&saved);
        assert_eq!(stream.next_completion().await, id);
        assert_eq!(
            s.count("SELECT COUNT(*) FROM elicitations WHERE status = 'completed'")
                .await,
            1
        );

        s.run("profile", json!({})).await;
        let seen = s.last_request();
        assert_eq!(seen.path, "/profile");
        assert_eq!(
            seen.json(),
            json!({
                "name": "Ada Lovelace",
                "bio": "Line one\nLine two",
                "email": "ada@example.com",
                "site": "https://example.com/ada",
                "ratio": 2.5,
                "count": 7,
                "agree": true,
                "news": false,
                "plan": "pro",
                "start": "2026-03-14",
            }),
            "typed values, trimmed where the field trims"
        );
        assert_eq!(seen.header("authorization"), Some(format!("Bearer {secret}").as_str()));
        s.server.stop().await;
    }
);

// ---------------------------------------------------------------------------------------------
// 2. Secrets
// ---------------------------------------------------------------------------------------------

backend_test!(
    /// A secret typed into a form reaches the upstream's header and nothing else: not the database
    /// (only ciphertext), no page (not even the 422 re-render), no MCP message, no log line; an
    /// upstream echoing it back is scrubbed.
    async fn a_secret_reaches_only_the_upstream(backend: Backend) {
        let s = setup(backend).await;
        s.client.call("logging/setLevel", json!({"level": "debug"})).await;
        let mut stream = s.client.open_stream(None).await;
        let secret = format!("sk-{}", uuid::Uuid::now_v7().simple());
        let refused_secret = format!("pk-{}", uuid::Uuid::now_v7().simple());
        let mut received = Vec::new();

        let reply = s.call("profile", json!({})).await;
        received.push(reply.body.clone());
        let url = url_of(&elicitation_of(&reply));
        let browser = Browser::new();
        let page = browser.get(&url).await;
        let csrf = page.csrf();
        let valid = valid_profile(&secret);
        let mut pages = Vec::new();
        for posted in [
            with_field(&valid, "email", Some("nope")),
            with_field(&valid, "api_key", Some(&refused_secret)),
        ] {
            let refused = press(&browser, &url, &s.base(), &csrf, "submit", &posted).await;
            assert_eq!(refused.status, StatusCode::UNPROCESSABLE_ENTITY);
            assert_eq!(shown_value(&refused.body, "api_key"), "");
            pages.push(refused.body);
        }
        let saved = press(&browser, &url, &s.base(), &csrf, "submit", &valid).await;
        assert_saved(&saved);
        pages.push(saved.body);
        stream.next_completion().await;

        let result = s.run("profile", json!({})).await;
        received.push(result.clone());
        assert_eq!(
            s.last_request().header("authorization"),
            Some(format!("Bearer {secret}").as_str()),
            "the upstream did get it"
        );
        assert!(
            text(&result).contains("Bearer [redacted]"),
            "the upstream's echo is scrubbed: {result}"
        );

        let connections = browser.get(&s.url("/connections")).await;
        assert!(
            saved_lines(&connections.body, "profile").contains(&("API key".into(), "stored, hidden".into())),
            "{}",
            connections.body
        );
        let replace = browser.get(&s.url("/connections/forms/profile")).await;
        assert_eq!(replace.status, StatusCode::OK);
        assert!(replace.body.contains("A value is stored. Leave this empty to keep it."));
        assert_eq!(shown_value(&replace.body, "api_key"), "");
        assert_eq!(
            shown_value(&replace.body, "name"),
            "Ada Lovelace",
            "non-secret values are shown"
        );
        pages.extend([connections.body, replace.body]);

        received.extend(drain(&mut stream, Duration::from_millis(500)).await);
        assert!(
            received.iter().any(|m| m["method"] == "notifications/message"),
            "debug log messages reached the stream, so it was checked too"
        );

        let stored = s.database.everything_stored().await;
        let stored_text = String::from_utf8_lossy(&stored);
        assert!(stored_text.contains("Ada Lovelace"), "the dump includes form values");
        assert_eq!(
            s.count("SELECT COUNT(*) FROM form_values WHERE secrets IS NOT NULL AND length(secrets) > 40")
                .await,
            1,
            "the secret is stored, sealed"
        );
        let logs = logged_text();
        assert!(logs.contains("form values saved"), "logs are captured");
        let messages = received.iter().map(Value::to_string).collect::<String>();
        for value in [&secret, &refused_secret] {
            assert!(
                !stored.windows(value.len()).any(|w| w == value.as_bytes()),
                "a secret is stored in plaintext"
            );
            for page in &pages {
                assert!(!page.contains(value.as_str()), "a page shows a secret: {page}");
            }
            assert!(!messages.contains(value.as_str()), "an MCP message carries a secret");
            assert!(!logs.contains(value.as_str()), "a secret reached the logs");
        }
        s.server.stop().await;
    }
);

// ---------------------------------------------------------------------------------------------
// 3. Hostile values
// ---------------------------------------------------------------------------------------------

/// Markup, quotes, ampersands, an emoji and right-to-left text (with an override character).
const HOSTILE: &str = "<script>alert(1)</script> \"O'Brien\" & Co 🦀 مرحبا \u{202E}gnp.exe";

backend_test!(
    /// Tool arguments shown on a call-scoped form are escaped, not interpreted, and arrive whole.
    async fn hostile_arguments_are_shown_escaped(backend: Backend) {
        let s = setup(backend).await;
        let payee = format!("{HOSTILE} {}", "x".repeat(5000));
        let elicitation = elicitation_of(&s.call("pay", json!({"payee": payee, "amount": 12.5})).await);
        let page = Browser::new().get(&url_of(&elicitation)).await;
        assert_eq!(page.status, StatusCode::OK);
        assert!(!page.body.contains("<script>"), "{}", page.body);
        assert!(
            page.body.contains("&#60;script&#62;alert(1)&#60;/script&#62;"),
            "shown escaped"
        );
        assert!(!page.body.contains("\"O'Brien\""), "quotes are escaped too");
        assert_eq!(
            description(&page.body),
            format!("Pay 12.5 EUR to {}?", payee.replace('\u{202E}', "U+202E")),
            "shown whole, the override character as its code point"
        );
        s.server.stop().await;
    }
);

backend_test!(
    /// Bidi controls and invisible characters in the arguments are shown as their code points on a
    /// call-scoped confirmation, so a payee cannot display as something else (`"\u{202e}0001\u{202c}"`
    /// reads "1000").
    async fn bidi_controls_in_arguments_are_shown_as_code_points(backend: Backend) {
        let s = setup(backend).await;
        let payee = "Bob \u{202e}0001\u{202c}\u{200b}\u{2066}x\u{2069}\u{feff}";
        let elicitation = elicitation_of(&s.call("pay", json!({"payee": payee, "amount": 12})).await);
        let page = Browser::new().get(&url_of(&elicitation)).await;
        assert_eq!(page.status, StatusCode::OK);
        assert_eq!(
            description(&page.body),
            "Pay 12 EUR to Bob U+202E0001U+202CU+200BU+2066xU+2069U+FEFF?"
        );
        for c in ['\u{202e}', '\u{202c}', '\u{200b}', '\u{2066}', '\u{2069}', '\u{feff}'] {
            assert!(!page.body.contains(c), "{c:?} is on the page");
        }
        s.server.stop().await;
    }
);

backend_test!(
    /// The same values typed into a form are stored exactly and shown escaped; what a field cannot
    /// hold (over its length, a NUL) is refused with a message and the typed value shown safely.
    async fn hostile_form_input_is_kept_intact_or_refused(backend: Backend) {
        let s = setup(backend).await;
        let url = url_of(&elicitation_of(&s.call("note", json!({})).await));
        let browser = Browser::new();
        let page = browser.get(&url).await;
        let csrf = page.csrf();
        let long_text = format!("{HOSTILE}\r\n{}", "é".repeat(5000));

        let refusals = [
            (
                fields(&[("line", &"y".repeat(5000)), ("text", HOSTILE)]),
                "line",
                "Enter at most 2048 characters.",
            ),
            (
                fields(&[("line", "a\0b"), ("text", HOSTILE)]),
                "line",
                "Remove the NUL character from this value.",
            ),
            (
                fields(&[("line", HOSTILE), ("text", "a\0b")]),
                "text",
                "Remove the NUL character from this value.",
            ),
            (
                fields(&[("line", HOSTILE), ("text", &"z".repeat(20_001))]),
                "text",
                "Enter at most 20000 characters.",
            ),
        ];
        for (posted, field, message) in refusals {
            let page = press(&browser, &url, &s.base(), &csrf, "submit", &posted).await;
            assert_eq!(page.status, StatusCode::UNPROCESSABLE_ENTITY, "{field}");
            assert_eq!(field_error(&page.body, field).as_deref(), Some(message));
            assert!(
                !page.body.contains("<script>"),
                "typed markup is escaped on the re-render"
            );
            let other = if field == "line" { "text" } else { "line" };
            assert_eq!(
                shown_value(&page.body, other),
                HOSTILE,
                "kept whole, attribute not broken"
            );
        }
        assert_eq!(s.count("SELECT COUNT(*) FROM form_values").await, 0);

        let saved = press(
            &browser,
            &url,
            &s.base(),
            &csrf,
            "submit",
            &fields(&[("line", HOSTILE), ("text", &long_text)]),
        )
        .await;
        assert_saved(&saved);
        s.run("note", json!({})).await;
        assert_eq!(
            s.last_request().json(),
            json!({"line": HOSTILE, "text": long_text}),
            "stored and sent exactly as typed"
        );
        let connections = browser.get(&s.url("/connections")).await;
        assert!(!connections.body.contains("<script>"));
        let saved = saved_lines(&connections.body, "note");
        assert_eq!(saved[0], ("Line".to_owned(), HOSTILE.to_owned()));
        assert_eq!(saved[1], ("Text".to_owned(), long_text.clone()));
        s.server.stop().await;
    }
);

// ---------------------------------------------------------------------------------------------
// 4. Call-scoped confirmation
// ---------------------------------------------------------------------------------------------

backend_test!(
    /// A confirmation answers exactly one call: the one with the same tool and arguments, once.
    /// Cancelling is reported once, to that call only, and then it asks again.
    async fn a_confirmation_answers_one_call_once(backend: Backend) {
        let s = setup(backend).await;
        let mut stream = s.client.open_stream(None).await;
        let ten = json!({"payee": "Bob's Bakery", "amount": 10});
        let eleven = json!({"payee": "Bob's Bakery", "amount": 11});
        let first = elicitation_of(&s.call("pay", ten.clone()).await);
        assert_eq!(first["message"], "Please confirm in your browser: Confirm payment.");
        let pending = elicitation_of(&s.call("pay", ten.clone()).await);
        assert_eq!(
            pending["elicitationId"], first["elicitationId"],
            "a pending request is reused"
        );
        let other = elicitation_of(&s.call("pay", eleven.clone()).await);
        assert_ne!(
            other["elicitationId"], first["elicitationId"],
            "other arguments, other request"
        );

        let browser = Browser::new();
        let page = browser.get(&url_of(&first)).await;
        assert_eq!(description(&page.body), "Pay 10 EUR to Bob's Bakery?");
        assert!(page.body.contains(">Pay</button>"), "the configured submit label");
        let other_page = browser.get(&url_of(&other)).await;
        assert_eq!(description(&other_page.body), "Pay 11 EUR to Bob's Bakery?");

        let unticked = press(&browser, &url_of(&first), &s.base(), &page.csrf(), "submit", &vec![]).await;
        assert_eq!(unticked.status, StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(
            field_error(&unticked.body, "sure").as_deref(),
            Some("Tick this box to continue.")
        );
        let sent = press(
            &browser,
            &url_of(&first),
            &s.base(),
            &page.csrf(),
            "submit",
            &fields(&[("sure", "true")]),
        )
        .await;
        assert_eq!(sent.status, StatusCode::OK, "{}", sent.body);
        assert!(sent.body.contains("<h1>Saved</h1>") && sent.body.contains("was sent"));
        assert_eq!(
            stream.next_completion().await,
            first["elicitationId"].as_str().expect("id")
        );
        assert_eq!(s.count("SELECT COUNT(*) FROM form_answers").await, 1);

        // Another call's confirmation is not this one.
        let still = elicitation_of(&s.call("pay", eleven.clone()).await);
        assert_eq!(still["elicitationId"], other["elicitationId"]);
        assert_eq!(s.requests(), 0);

        // The confirmed call, its arguments in another order, runs once.
        let reordered = s
            .client
            .post_bytes(
                br#"{"jsonrpc":"2.0","id":900,"method":"tools/call","params":{"name":"pay","arguments":{"payee":"Bob's Bakery","amount":10}}}"#
                    .to_vec(),
                &[],
            )
            .await;
        assert_eq!(reordered.body["result"]["isError"], false, "{}", reordered.body);
        assert_eq!(
            s.last_request().json(),
            json!({"payee": "Bob's Bakery", "amount": 10, "confirmed": true})
        );
        assert_eq!(s.count("SELECT COUNT(*) FROM form_answers").await, 0, "used up");
        let third = elicitation_of(&s.call("pay", ten.clone()).await);
        assert_ne!(
            third["elicitationId"], first["elicitationId"],
            "single use: asked again"
        );
        assert_eq!(s.requests(), 1);

        // Cancel the other call's request.
        let cancelled = press(
            &browser,
            &url_of(&other),
            &s.base(),
            &other_page.csrf(),
            "cancel",
            &vec![],
        )
        .await;
        assert_eq!(cancelled.status, StatusCode::OK);
        assert!(cancelled.body.contains("<h1>Cancelled</h1>"), "{}", cancelled.body);
        assert_eq!(
            stream.next_completion().await,
            other["elicitationId"].as_str().expect("id")
        );
        assert_eq!(
            s.count("SELECT COUNT(*) FROM elicitations WHERE status = 'declined'")
                .await,
            1
        );
        let unrelated = elicitation_of(&s.call("pay", ten.clone()).await);
        assert_eq!(
            unrelated["elicitationId"], third["elicitationId"],
            "the decline is not this call's"
        );
        let declined = s
            .client
            .call("tools/call", json!({"name": "pay", "arguments": eleven.clone()}))
            .await;
        assert_eq!(declined["isError"], true, "{declined}");
        assert!(text(&declined).contains("declined"), "{declined}");
        let asked_again = elicitation_of(&s.call("pay", eleven).await);
        assert_ne!(
            asked_again["elicitationId"], other["elicitationId"],
            "reported once, then asks again"
        );
        assert_eq!(s.requests(), 1, "nothing was paid twice or without confirmation");
        s.server.stop().await;
    }
);

// ---------------------------------------------------------------------------------------------
// 5. Owner, CSRF and Origin checks
// ---------------------------------------------------------------------------------------------

fn key_answers(secret: &str) -> Fields {
    fields(&[("org", "acme"), ("team", "Red Team"), ("api_key", secret)])
}

backend_test!(
    /// Only the user the request was issued to, posting from the page itself, can answer it; every
    /// other post is refused before anything changes, and a finished or expired request is gone.
    async fn only_the_owner_can_answer_from_the_page(backend: Backend) {
        let s = setup_as(backend, HEADER_IDENTITY, Some("alice")).await;
        let elicitation = elicitation_of(&s.call("keyed", json!({})).await);
        let url = url_of(&elicitation);
        let alice = Browser::as_user(IDENTITY_HEADER, "alice");
        let bob = Browser::as_user(IDENTITY_HEADER, "bob");
        let base = s.base();
        let alices_page = alice.get(&url).await;
        assert_eq!(alices_page.status, StatusCode::OK);
        assert!(alices_page.body.contains("signed in here as alice"));
        let csrf = alices_page.csrf();
        let answers = key_answers("sk-alice-0001");

        let bobs_view = bob.get(&url).await;
        assert_eq!(bobs_view.status, StatusCode::FORBIDDEN);
        assert!(bobs_view.body.contains("another user"), "{}", bobs_view.body);
        for action in ["submit", "cancel"] {
            let post = press(&bob, &url, &base, &csrf, action, &answers).await;
            assert_eq!(
                post.status,
                StatusCode::FORBIDDEN,
                "Bob's {action}, even with Alice's token"
            );
        }
        let alices_replace_csrf = alice.get(&s.url("/connections/forms/key")).await.csrf();
        let forged = [
            ("a missing token", None, base.as_str()),
            ("an empty token", Some(""), base.as_str()),
            ("a made-up token", Some("forged"), base.as_str()),
            (
                "another page's token",
                Some(alices_replace_csrf.as_str()),
                base.as_str(),
            ),
            ("a foreign Origin", Some(csrf.as_str()), "https://evil.example"),
        ];
        for (what, token, origin) in forged {
            let mut pairs: Vec<(&str, &str)> = answers.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            pairs.push(("action", "submit"));
            if let Some(token) = token {
                pairs.insert(0, ("csrf", token));
            }
            let post = alice.post_form(&url, origin, &pairs).await;
            assert_eq!(post.status, StatusCode::FORBIDDEN, "{what}");
            assert!(post.body.contains("Nothing was changed"), "{what}");
        }
        assert_eq!(
            Browser::new().get(&url).await.status,
            StatusCode::UNAUTHORIZED,
            "no identity, no page"
        );
        assert_eq!(s.count("SELECT COUNT(*) FROM form_values").await, 0, "nothing stored");
        assert_eq!(
            s.count("SELECT COUNT(*) FROM elicitations WHERE status = 'pending'")
                .await,
            1,
            "nothing declined"
        );

        assert_saved(&press(&alice, &url, &base, &csrf, "submit", &answers).await);
        assert_eq!(
            s.count("SELECT COUNT(*) FROM form_values WHERE principal = 'alice'")
                .await,
            1
        );
        assert_eq!(alice.get(&url).await.status, StatusCode::GONE, "a completed request");
        let again = press(&alice, &url, &base, &csrf, "submit", &key_answers("sk-alice-0002")).await;
        assert_eq!(again.status, StatusCode::GONE);
        assert_eq!(bob.get(&url).await.status, StatusCode::FORBIDDEN, "still not Bob's");
        let unknown = format!("{base}/forms/{}", uuid::Uuid::now_v7());
        assert_eq!(alice.get(&unknown).await.status, StatusCode::NOT_FOUND);
        assert_eq!(
            alice.get(&s.url("/forms/not-an-id")).await.status,
            StatusCode::NOT_FOUND
        );
        s.run("keyed", json!({})).await;
        assert_eq!(s.last_request().header("authorization"), Some("Bearer sk-alice-0001"));

        // Bob's /connections knows nothing of Alice's answers, and his tokens and actions reach only his.
        let bobs_connections = bob.get(&s.url("/connections")).await;
        assert!(!bobs_connections.body.contains("Red Team"));
        assert!(saved_lines(&bobs_connections.body, "key").is_empty());
        let replace_url = s.url("/connections/forms/key");
        let bobs_replace = bob.get(&replace_url).await;
        assert_eq!(shown_value(&bobs_replace.body, "team"), "");
        let with_alices_token = press(
            &bob,
            &replace_url,
            &base,
            &alices_replace_csrf,
            "submit",
            &key_answers("sk-bob-00001"),
        )
        .await;
        assert_eq!(
            with_alices_token.status,
            StatusCode::FORBIDDEN,
            "Alice's token is not Bob's"
        );
        let bobs_own = press(
            &bob,
            &replace_url,
            &base,
            &bobs_replace.csrf(),
            "submit",
            &fields(&[("org", "personal"), ("team", "Bob's"), ("api_key", "sk-bob-00001")]),
        )
        .await;
        assert_eq!(bobs_own.status, StatusCode::SEE_OTHER);
        let alices_connections = alice.get(&s.url("/connections")).await;
        let alices_connections_csrf = alices_connections.csrf();
        let bobs_connections = bob.get(&s.url("/connections")).await;
        let refused = s.delete_answers(&bob, &alices_connections_csrf, "key").await;
        assert_eq!(refused.status, StatusCode::FORBIDDEN, "Alice's token is not Bob's");
        let deleted = s.delete_answers(&bob, &bobs_connections.csrf(), "key").await;
        assert_eq!(deleted.status, StatusCode::OK);
        assert!(deleted.body.contains("Deleted your answers to"), "{}", deleted.body);
        assert_eq!(
            s.count("SELECT COUNT(*) FROM form_values WHERE principal = 'alice'")
                .await,
            1,
            "Alice's answers are untouched"
        );
        assert_eq!(s.count("SELECT COUNT(*) FROM form_values").await, 1, "Bob's are gone");
        s.run("keyed", json!({})).await;
        assert_eq!(s.last_request().header("authorization"), Some("Bearer sk-alice-0001"));

        // An expired request is gone too, and a post to it stores nothing.
        let deleted = s.delete_answers(&alice, &alices_connections_csrf, "key").await;
        assert_eq!(deleted.status, StatusCode::OK);
        let expiring = url_of(&elicitation_of(&s.call("keyed", json!({})).await));
        let token = alice.get(&expiring).await.csrf();
        s.database.expire_elicitations().await;
        assert_eq!(alice.get(&expiring).await.status, StatusCode::GONE);
        let late = press(&alice, &expiring, &base, &token, "submit", &answers).await;
        assert_eq!(late.status, StatusCode::GONE);
        assert_eq!(s.count("SELECT COUNT(*) FROM form_values").await, 0);
        s.server.stop().await;
    }
);

// ---------------------------------------------------------------------------------------------
// 6. /connections
// ---------------------------------------------------------------------------------------------

/// Saves `key` answers through the elicitation a `keyed` call asks for.
async fn save_key_answers(s: &Setup, stream: &mut SseStream, answers: &Fields) {
    let url = url_of(&elicitation_of(&s.call("keyed", json!({})).await));
    assert_saved(&fill_in(&Browser::new(), &url, &s.base(), answers).await);
    stream.next_completion().await;
}

backend_test!(
    /// /connections lists saved answers (secrets only as stored), replaces them (a blank secret keeps
    /// the stored one) and deletes them, after which the tool asks again.
    async fn connections_list_replace_and_delete_saved_answers(backend: Backend) {
        let s = setup(backend).await;
        let mut stream = s.client.open_stream(None).await;
        let browser = Browser::new();
        let empty = browser.get(&s.url("/connections")).await;
        assert_eq!(empty.status, StatusCode::OK);
        assert!(
            empty
                .body
                .contains("<a href=\"/connections/forms/key\">Fill in now</a>")
        );
        assert!(
            !empty.body.contains("Confirm payment"),
            "call-scoped forms keep nothing"
        );

        save_key_answers(&s, &mut stream, &key_answers("sk-old-secret")).await;
        s.run("keyed", json!({})).await;
        let seen = s.last_request();
        assert_eq!(seen.query, "org=acme&team=Red%20Team");
        assert_eq!(seen.header("authorization"), Some("Bearer sk-old-secret"));

        let listed = browser.get(&s.url("/connections")).await;
        assert_eq!(
            saved_lines(&listed.body, "key"),
            fields(&[
                ("Organization", "ACME Inc."),
                ("Team", "Red Team"),
                ("API key", "stored, hidden")
            ])
        );
        assert!(!listed.body.contains("sk-old-secret"));

        let replace_url = s.url("/connections/forms/key");
        let form = browser.get(&replace_url).await;
        assert_eq!(form.status, StatusCode::OK);
        assert_eq!(shown_value(&form.body, "org"), "acme", "stored, not the default");
        assert_eq!(shown_value(&form.body, "team"), "Red Team");
        assert_eq!(shown_value(&form.body, "api_key"), "");
        assert!(
            !control_tag(&form.body, "api_key").0.contains("aria-required"),
            "a stored secret may be left blank"
        );
        let csrf = form.csrf();
        let keep_secret = fields(&[("org", "personal"), ("team", "Blue Team"), ("api_key", "")]);
        let replaced = press(&browser, &replace_url, &s.base(), &csrf, "submit", &keep_secret).await;
        assert_eq!(replaced.status, StatusCode::SEE_OTHER, "{}", replaced.body);
        assert_eq!(replaced.location(), "/connections");
        s.run("keyed", json!({})).await;
        let seen = s.last_request();
        assert_eq!(seen.query, "org=personal&team=Blue%20Team", "the other fields changed");
        assert_eq!(
            seen.header("authorization"),
            Some("Bearer sk-old-secret"),
            "the blank secret kept"
        );

        let invalid = press(
            &browser,
            &replace_url,
            &s.base(),
            &csrf,
            "submit",
            &fields(&[("org", "acme"), ("team", "Green"), ("api_key", "short")]),
        )
        .await;
        assert_eq!(invalid.status, StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(
            field_error(&invalid.body, "api_key").as_deref(),
            Some("Enter at least 8 characters.")
        );
        let cancelled = press(&browser, &replace_url, &s.base(), &csrf, "cancel", &keep_secret).await;
        assert_eq!(cancelled.status, StatusCode::SEE_OTHER);
        let new_secret = fields(&[("org", "acme"), ("team", ""), ("api_key", "sk-new-secret")]);
        let replaced = press(&browser, &replace_url, &s.base(), &csrf, "submit", &new_secret).await;
        assert_eq!(replaced.status, StatusCode::SEE_OTHER);
        s.run("keyed", json!({})).await;
        let seen = s.last_request();
        assert_eq!(
            seen.query, "org=acme&team=",
            "neither the refused nor the cancelled post counted"
        );
        assert_eq!(seen.header("authorization"), Some("Bearer sk-new-secret"));
        let listed = browser.get(&s.url("/connections")).await;
        assert_eq!(
            saved_lines(&listed.body, "key"),
            fields(&[("Organization", "ACME Inc."), ("API key", "stored, hidden")]),
            "a cleared optional field is not listed"
        );

        let deleted = s.delete_answers(&browser, &listed.csrf(), "key").await;
        assert_eq!(deleted.status, StatusCode::OK);
        assert!(deleted.body.contains("Deleted your answers to"), "{}", deleted.body);
        assert!(
            deleted
                .body
                .contains("<a href=\"/connections/forms/key\">Fill in now</a>")
        );
        assert_eq!(s.count("SELECT COUNT(*) FROM form_values").await, 0);
        elicitation_of(&s.call("keyed", json!({})).await);
        let blank = press(
            &browser,
            &replace_url,
            &s.base(),
            &csrf,
            "submit",
            &fields(&[("org", "acme"), ("api_key", "")]),
        )
        .await;
        assert_eq!(
            blank.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "no stored secret to keep"
        );
        assert_eq!(
            field_error(&blank.body, "api_key").as_deref(),
            Some("This field is required.")
        );

        for path in ["/connections/forms/confirm_pay", "/connections/forms/nope"] {
            assert_eq!(browser.get(&s.url(path)).await.status, StatusCode::NOT_FOUND, "{path}");
        }
        s.server.stop().await;
    }
);

// ---------------------------------------------------------------------------------------------
// 7. Operator templates
// ---------------------------------------------------------------------------------------------

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

backend_test!(
    /// A secret asked for one call: sealed while it waits, sent once, then gone from the database.
    async fn a_call_scoped_secret_is_used_once_and_not_kept(backend: Backend) {
        const CODE: &str = "493817-one-time";
        let s = setup(backend).await;
        let mut stream = s.client.open_stream(None).await;
        let arguments = json!({"to": "ACME"});
        let elicitation = elicitation_of(&s.call("transfer", arguments.clone()).await);
        let browser = Browser::new();
        let page = browser.get(&url_of(&elicitation)).await;
        assert_eq!(
            description(&page.body),
            "Enter the code your bank sent for the transfer to ACME."
        );
        let short = press(
            &browser,
            &url_of(&elicitation),
            &s.base(),
            &page.csrf(),
            "submit",
            &fields(&[("code", "123")]),
        )
        .await;
        assert_eq!(short.status, StatusCode::UNPROCESSABLE_ENTITY);
        assert!(!short.body.contains("123\""), "the typed secret is not echoed");
        assert_saved(
            &press(
                &browser,
                &url_of(&elicitation),
                &s.base(),
                &page.csrf(),
                "submit",
                &fields(&[("code", CODE)]),
            )
            .await,
        );
        stream.next_completion().await;

        let stored = s.database.everything_stored().await;
        assert!(
            !stored.windows(CODE.len()).any(|w| w == CODE.as_bytes()),
            "sealed at rest"
        );
        assert_eq!(
            s.count("SELECT COUNT(*) FROM form_answers WHERE secrets IS NOT NULL")
                .await,
            1,
            "the sealed answer waits for its call"
        );
        let result = s.run("transfer", arguments.clone()).await;
        assert!(
            !text(&result).contains(CODE) && text(&result).contains("OTP [redacted]"),
            "the upstream's echo is redacted: {result}"
        );
        assert_eq!(
            s.last_request().header("authorization"),
            Some(format!("OTP {CODE}").as_str())
        );
        assert_eq!(s.count("SELECT COUNT(*) FROM form_answers").await, 0, "taken and gone");
        assert!(!logged_text().contains(CODE), "not in the logs");
        let again = elicitation_of(&s.call("transfer", arguments).await);
        assert_ne!(
            again["elicitationId"], elicitation["elicitationId"],
            "one code, one call"
        );
    }
);

backend_test!(
    /// Oversized and unreadable posts get their own answers, and change nothing.
    async fn oversized_and_unreadable_posts_are_refused(backend: Backend) {
        let s = setup(backend).await;
        let url = url_of(&elicitation_of(&s.call("keyed", json!({})).await));
        let browser = Browser::new();
        let csrf = browser.get(&url).await.csrf();
        let huge = "x".repeat(600 * 1024);
        let oversized = browser
            .post_form(
                &url,
                &s.base(),
                &[("csrf", &csrf), ("action", "submit"), ("key", &huge)],
            )
            .await;
        assert_eq!(oversized.status, StatusCode::PAYLOAD_TOO_LARGE, "{}", oversized.body);
        assert!(oversized.body.contains("Nothing was saved"));
        let http = reqwest::Client::new();
        let unreadable = http
            .post(&url)
            .header("content-type", "application/json")
            .header("origin", s.base())
            .body("{\"csrf\": 1}")
            .send()
            .await
            .expect("post");
        assert_eq!(unreadable.status(), StatusCode::BAD_REQUEST);
        assert!(unreadable.text().await.expect("body").contains("could not be read"));
        assert_eq!(s.count("SELECT COUNT(*) FROM form_values").await, 0, "nothing stored");
        assert_eq!(
            s.count("SELECT COUNT(*) FROM elicitations WHERE status = 'pending'")
                .await,
            1,
            "still pending"
        );
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
