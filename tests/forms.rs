//! Hosted forms end to end: a tool that requires a form answers -32042 with a `/forms/{id}` link,
//! a browser fills the form in over real HTTP, and the retried call sends the values to a real
//! upstream on loopback. Also: secrets, hostile input, call-scoped confirmations, the owner and
//! CSRF checks, `/connections`, and operator templates. Every test runs on PostgreSQL and SQLite
//! unless it only checks configuration.

mod common;
// The tests by subject, in tests/forms/; this file keeps what they share.
#[path = "forms/confirmation.rs"]
mod confirmation;
#[path = "forms/connections.rs"]
mod connections;
#[path = "forms/fields.rs"]
mod fields;
#[path = "forms/hostile.rs"]
mod hostile;
#[path = "forms/owner.rs"]
mod owner;
#[path = "forms/secrets.rs"]
mod secrets;
#[path = "forms/templates.rs"]
mod templates;

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
// Answers more than one subject uses
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

/// An answer to the `key` form (which the `keyed` tool needs) with `secret` as its API key.
fn key_answers(secret: &str) -> Fields {
    fields(&[("org", "acme"), ("team", "Red Team"), ("api_key", secret)])
}

/// Markup, quotes, ampersands, an emoji and right-to-left text (with an override character).
const HOSTILE: &str = "<script>alert(1)</script> \"O'Brien\" & Co 🦀 مرحبا \u{202E}gnp.exe";
