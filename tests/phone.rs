//! The pages on a phone: headless Chromium at 390 x 844 (a current phone's screen in CSS pixels)
//! opens the landing page, `/approvals`, approvals' pages and every `/admin` view, filled first
//! with what real use puts there: several approvals whose arguments hold a 200-character unbroken
//! string, a URL and a JSON object, principals as long as email addresses and opaque subjects get,
//! scopes that are URLs, a saved form, sessions, pending requests, an unreachable upstream, the
//! audit trail all of that leaves, the key ring's counts and the server's checks. Each page must
//! fit the screen's width (walk.mjs's `expect_fits_viewport`): the document no wider than the
//! screen, no box hiding what overflows it, every element within the width unless inside a box
//! that scrolls horizontally itself, and every argument value and long name on the page shown,
//! wrapped or within reach of its box's scrolling. Layout does not depend on the database, so
//! SQLite alone. The check itself is checked on small pages that break each of its rules.

mod common;

use common::browser::{artifact_dir, browser_available, walk};
use common::fake_oauth::{FakeOptions, FakeProvider};
use common::{Backend, Browser, McpClient, TestDatabase, TestServer, elicitations, url_of};
use serde_json::{Value, json};

/// The screen: an iPhone 14's, in CSS pixels.
const VIEWPORT: (u32, u32) = (390, 844);

/// A caller whose principal is an email address as long as real ones get.
const CALLER: &str = "alexandra.konstantinopoulou-featherstonehaugh@research.example-university.ac.uk";
/// A caller named by an opaque subject: one unbroken word.
const SERVICE: &str = "auth0|65a1f3c9e4b0d2a7f8c6e19b3d5a7c9e-payments-reconciliation-batch-worker";
/// Their accounts at the provider, shown on the users view.
const LOGINS: [&str; 2] = [
    "alexandra-konstantinopoulou-featherstonehaugh",
    "svc-payments-reconciliation-batch-worker-eu-central-1",
];
/// Scopes as some providers name them: URLs.
const SCOPES: [&str; 3] = [
    "read",
    "https://www.googleapis.com/auth/spreadsheets.readonly",
    "https://www.googleapis.com/auth/drive.metadata.readonly",
];
/// An upstream's id at the longest gatehouse allows (64).
const UPSTREAM: &str = "payments-ledger-reconciliation-service-eu-central-1-production1";

/// Header identity with groups: bob is in `finance` (approves) and `ops` (operates); payments
/// need an approval; the fake provider's tools and a user-scoped form give the users view
/// connections and saved answers; an upstream nobody listens at gives the upstreams view an error.
fn config(addr: &str, fake: &FakeProvider, down: &str) -> String {
    let identity = common::header_identity_with_groups();
    let hub = fake.configure(include_str!("fixtures/fake_hub.toml"));
    let tracker = fake.configure(include_str!("fixtures/tracker_form.toml"));
    format!(
        r#"{identity}
[admin]
allow = {{ groups = ["ops"] }}

[[approvals]]
id = "payments"
title = "Payment approval"
approvers = {{ groups = ["finance"] }}
ttl = "1h"

[[tools]]
name = "pay"
description = "Pays an invoice, once finance approves"
requires = ["approval:payments"]
http = {{ url = "http://{addr}/healthz" }}

{tracker}

[[upstreams]]
id = "{UPSTREAM}"
url = "{down}"
tools = ["reconcile"]
timeout = "1s"

{hub}"#
    )
}

/// The arguments of the `n`th payment: an unbroken 200-character reference, a URL with a query,
/// and a nested JSON object.
fn payment(n: usize) -> Value {
    let reference: String = format!("INV{n:04}")
        .chars()
        .chain("0123456789ABCDEF".chars().cycle())
        .take(200)
        .collect();
    json!({
        "amount": format!("{}.00", 1250 + n),
        "reference": reference,
        "invoice": format!(
            "https://billing.example-supplier.com/invoices/2026/11/INV-{n:06}?customer=research-example-university&format=pdf&download=true"
        ),
        "beneficiary": {
            "name": "Müller & Söhne Maschinenbau GmbH",
            "iban": "DE89370400440532013000",
            "address": {"street": "Industriestraße 114", "city": "Baden-Baden", "country": "DE"},
        },
    })
}

/// How a page prints each value of `arguments` (the JSON text of every string, number and
/// boolean, nested ones included): what must be on an approver's screen.
fn printed_values(arguments: &Value) -> Vec<String> {
    match arguments {
        Value::Object(map) => map.values().flat_map(printed_values).collect(),
        Value::Array(items) => items.iter().flat_map(printed_values).collect(),
        leaf => vec![leaf.to_string()],
    }
}

/// `principal`'s call of `tool` with `arguments`: the URL of the one request it asks for.
async fn asked(client: &McpClient, tool: &str, arguments: &Value) -> String {
    let reply = client
        .request("tools/call", json!({"name": tool, "arguments": arguments}))
        .await;
    let listed = elicitations(&reply);
    assert_eq!(listed.len(), 1, "{}", reply.body);
    url_of(&listed[0])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approvals_and_operator_pages_fit_a_phone() {
    if !browser_available() {
        return;
    }
    let fake = FakeProvider::start(FakeOptions {
        granted_scopes: Some(SCOPES.iter().map(|s| (*s).to_owned()).collect()),
        ..FakeOptions::default()
    })
    .await;
    let database = TestDatabase::new(Backend::Sqlite).await;
    let down = format!(
        "http://127.0.0.1:{}/mcp/v1/organizations/research-example-university/workspaces/payments/servers/ledger",
        common::free_port()
    );
    let server = TestServer::start_addressed(&database, |addr| config(addr, &fake, &down)).await;
    let base = server.base();

    // Both callers sign in at the provider (their connections), three payments of the first and
    // one of the second wait for approval, the first saves a form and leaves a sign-in with more
    // scopes pending, and a call through the unreachable upstream leaves its error.
    let mut payments = Vec::new();
    for (principal, login) in [CALLER, SERVICE].into_iter().zip(LOGINS) {
        let client = server.eliciting_client(principal).await;
        fake.set_next_user(login);
        let connect = asked(&client, "me", &json!({})).await;
        let done = Browser::as_user("x-forwarded-user", principal).sign_in(&connect).await;
        assert_eq!(done.status, reqwest::StatusCode::OK, "{}", done.body);
        let count = if principal == CALLER { 3 } else { 1 };
        for _ in 0..count {
            let arguments = payment(payments.len());
            let url = asked(&client, "pay", &arguments).await;
            payments.push((url, arguments));
        }
    }
    let caller = server.eliciting_client(CALLER).await;
    server
        .fill_in_token(&caller, CALLER, "tracker_me", "tracker-secret-0123456789")
        .await;
    asked(&caller, "me_write", &json!({})).await;
    let unreachable = caller
        .request(
            "tools/call",
            json!({"name": format!("{UPSTREAM}_reconcile"), "arguments": {}}),
        )
        .await;
    assert_eq!(unreachable.body["result"]["isError"], true, "{}", unreachable.body);
    server.state.audit.flush().await;

    let callers = strings(&[CALLER, SERVICE]);
    let every_value: Vec<String> = payments.iter().flat_map(|(_, a)| printed_values(a)).collect();
    let opaque = &payments[3];
    let steps = [
        page(
            &format!("{base}/"),
            "landing",
            strings(&[
                &format!("{UPSTREAM}_reconcile"),
                "Pays an invoice, once finance approves",
            ]),
        ),
        page(
            &format!("{base}/approvals"),
            "approvals",
            [every_value, callers.clone()].concat(),
        ),
        page(
            &payments[0].0,
            "approval",
            [printed_values(&payments[0].1), strings(&[CALLER])].concat(),
        ),
        page(
            &opaque.0,
            "approval-opaque-caller",
            [printed_values(&opaque.1), strings(&[SERVICE])].concat(),
        ),
        page(
            &format!("{base}/admin"),
            "admin",
            [callers.clone(), strings(&LOGINS), strings(&SCOPES)].concat(),
        ),
        page(
            &format!("{base}/admin/users?sort=provider"),
            "admin-users",
            [callers.clone(), strings(&LOGINS)].concat(),
        ),
        page(
            &format!("{base}/admin/users?principal={}", encoded(CALLER)),
            "admin-user",
            strings(&[CALLER, "Tracker token"]),
        ),
        page(
            &format!("{base}/admin/elicitations"),
            "admin-elicitations",
            [callers.clone(), strings(&["approval:payments"])].concat(),
        ),
        page(
            &format!("{base}/admin/upstreams"),
            "admin-upstreams",
            strings(&[UPSTREAM, &down]),
        ),
        page(&format!("{base}/admin/audit"), "admin-audit", callers),
        page(
            &format!("{base}/admin/health"),
            "admin-health",
            strings(&["secrets.keys[0] (encrypts)", &down]),
        ),
    ];
    // One walk per page, so a failure names every page that does not fit, not only the first.
    let failures: Vec<String> =
        tokio::task::spawn_blocking(move || steps.iter().filter_map(|plan| walk(plan).err()).collect())
            .await
            .expect("walk");
    assert!(
        failures.is_empty(),
        "{} pages do not fit a phone's screen:\n{}",
        failures.len(),
        failures.join("\n")
    );
    server.stop().await;
}

/// The walk of one page, as bob (an approver and an operator) on a phone: `url` answers 200 and
/// fits the screen with each of `visible` shown; its screenshot is kept as `phone-NAME/NAME.png`.
fn page(url: &str, name: &str, visible: Vec<String>) -> Value {
    json!({
        "screenshots": artifact_dir(&format!("phone-{name}")),
        "viewport": {"width": VIEWPORT.0, "height": VIEWPORT.1},
        "headers": {"X-Forwarded-User": "bob", "X-Forwarded-Groups": "finance, ops"},
        "steps": [{
            "goto": url,
            "expect_status": 200,
            "expect_fits_viewport": {"visible": visible},
            "screenshot": format!("{name}.png"),
        }],
    })
}

fn strings(texts: &[&str]) -> Vec<String> {
    texts.iter().map(|t| (*t).to_owned()).collect()
}

/// `text` as a query's value.
fn encoded(text: &str) -> String {
    url::form_urlencoded::byte_serialize(text.as_bytes()).collect()
}

/// The check itself, on pages made to break each of its rules (and one that keeps them all): it
/// fails each broken one for its reason, and passes the page that fits.
#[tokio::test]
async fn the_fit_check_fails_each_way_a_page_can_not_fit() {
    if !browser_available() {
        return;
    }
    let wide = "x".repeat(120);
    let fits = format!(
        "<div style=\"overflow-x: auto\"><table><tr><td style=\"white-space: nowrap\">{wide} FAR</td></tr></table></div>\
         <p style=\"overflow-wrap: anywhere\">{wide}</p>"
    );
    let cases = [
        (fits, "FAR", None),
        (
            format!("<table><tr><td>{wide}</td></tr></table>"),
            "",
            Some("the document is"),
        ),
        (
            format!("<div style=\"overflow-x: hidden\"><p style=\"width: 600px\">{wide}</p></div>"),
            "",
            Some("hides what overflows it (overflow-x: hidden)"),
        ),
        (
            format!("<p style=\"white-space: nowrap; overflow: auto; text-overflow: ellipsis\">{wide}</p>"),
            "",
            Some("cuts its text with an ellipsis"),
        ),
        (
            "<div style=\"overflow-x: auto\"><p style=\"margin-left: -500px\">OUT OF REACH</p></div>".to_owned(),
            "OUT OF REACH",
            Some("\"OUT OF REACH\" in <p> \"OUT OF REACH\" is cut off by <div>"),
        ),
        (
            "<p style=\"margin-left: -200px\">OFF TO THE LEFT</p>".to_owned(),
            "",
            Some("<p> \"OFF TO THE LEFT\" spans -"),
        ),
        (
            "<p style=\"visibility: hidden\">INVISIBLE</p>".to_owned(),
            "INVISIBLE",
            Some("\"INVISIBLE\" in <p> \"INVISIBLE\" is not rendered"),
        ),
        (String::new(), "ABSENT", Some("\"ABSENT\" is not on the page")),
    ];
    let outcomes = tokio::task::spawn_blocking(move || {
        cases
            .into_iter()
            .map(|(body, visible, failure)| (walk(&fit_check(&body, visible)), failure))
            .collect::<Vec<_>>()
    })
    .await
    .expect("walk");
    for (outcome, failure) in outcomes {
        match (outcome, failure) {
            (Ok(_), None) => {}
            (Err(error), Some(reason)) => assert!(error.contains(reason), "expected {reason:?}: {error}"),
            (outcome, failure) => panic!("expected {failure:?}, got {outcome:?}"),
        }
    }
}

/// A walk of a page with `body` (as a data: URL) at the phone's width, expecting it to fit and
/// show `visible` (if not empty).
fn fit_check(body: &str, visible: &str) -> Value {
    use base64::Engine;
    let html = format!("<!doctype html><meta name=\"viewport\" content=\"width=device-width\"><h1>Case</h1>{body}");
    let visible: Vec<&str> = [visible].into_iter().filter(|v| !v.is_empty()).collect();
    json!({
        "screenshots": artifact_dir("phone-fit-check"),
        "viewport": {"width": VIEWPORT.0, "height": VIEWPORT.1},
        "steps": [{
            "goto": format!("data:text/html;base64,{}", base64::engine::general_purpose::STANDARD.encode(html)),
            "expect_fits_viewport": {"visible": visible},
        }],
    })
}
