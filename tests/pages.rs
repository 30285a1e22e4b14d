//! What every browser-facing response shares, whatever the handler answered: the page security
//! headers (on pages, refusals, errors and redirects alike), and a failure behind a page shown as a
//! generic 500 page while its cause is logged. The landing page lists the configured tools.

mod common;

use std::time::Duration;

use common::raw::trickle_body;
use common::{
    Backend, Browser, HEADER_IDENTITY, Page, TestDatabase, TestServer, assert_lists_tools, captured_logs, logged_text,
};
use reqwest::StatusCode;
use sqlx::Connection;

/// A user-scoped form, so /connections has something to list and a replace page to cancel.
const CONFIG: &str = r#"
[[forms]]
id = "key"
title = "API key"
[[forms.fields]]
name = "api_key"
label = "API key"
type = "secret"
"#;

fn assert_page_headers(what: &str, page: &Page) {
    let header = |name: &str| {
        page.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_else(|| panic!("{what} ({}): no {name} header", page.status))
            .to_owned()
    };
    let csp = header("content-security-policy");
    assert!(
        csp.contains("frame-ancestors 'none'") && csp.contains("default-src 'none'"),
        "{what}: {csp}"
    );
    assert_eq!(header("x-frame-options"), "DENY", "{what}");
    assert_eq!(header("cache-control"), "no-store", "{what}");
    assert_eq!(header("referrer-policy"), "same-origin", "{what}");
    assert_eq!(header("x-content-type-options"), "nosniff", "{what}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_refusals_and_redirects_all_carry_the_security_headers() {
    let database = TestDatabase::new(Backend::Sqlite).await;
    let server = TestServer::start(&database, CONFIG).await;
    let base = server.base();
    let browser = Browser::new();

    let landing = browser.get(&format!("{base}/")).await;
    assert_eq!(landing.status, StatusCode::OK);
    assert_page_headers("landing page", &landing);

    let unknown = browser.get(&format!("{base}/connect/not-an-id")).await;
    assert_eq!(unknown.status, StatusCode::NOT_FOUND);
    assert!(unknown.body.contains("This link does not lead to any request."));
    assert_page_headers("unknown link", &unknown);

    let no_state = browser.get(&format!("{base}/oauth/callback?code=abc")).await;
    assert_eq!(no_state.status, StatusCode::BAD_REQUEST);
    assert!(no_state.body.contains("Nothing was stored."));
    assert_page_headers("refused callback", &no_state);

    let forged = browser
        .post_form(
            &format!("{base}/connections"),
            &base,
            &[("action", "disconnect"), ("csrf", "forged")],
        )
        .await;
    assert_eq!(forged.status, StatusCode::FORBIDDEN);
    assert_page_headers("forged post", &forged);

    let replace = browser.get(&format!("{base}/connections/forms/key")).await;
    assert_eq!(replace.status, StatusCode::OK);
    let cancelled = browser
        .post_form(
            &format!("{base}/connections/forms/key"),
            &base,
            &[("action", "cancel"), ("csrf", &replace.csrf())],
        )
        .await;
    assert_eq!(cancelled.status, StatusCode::SEE_OTHER);
    assert_eq!(cancelled.location(), "/connections");
    assert_page_headers("redirect", &cancelled);

    let health = browser.get(&format!("{base}/healthz")).await;
    assert_eq!(health.body, "ok");
    server.stop().await;
}

/// A configuration's own tools, one described with markup the landing page must escape.
const TOOLS: &str = r#"
[[tools]]
name = "forecast"
title = "Weather forecast"
description = "Tomorrow's <weather> & wind, from the met office"
http = { url = "https://met.example/forecast" }

[[tools]]
name = "tides"
description = "High and low water at a harbour"
http = { url = "https://met.example/tides" }
"#;

/// Outside the demo the landing page lists the configuration's tools, each with the description
/// `tools/list` gives it (escaped), and suggests none to try first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_landing_page_lists_the_configured_tools_with_their_descriptions() {
    let database = TestDatabase::new(Backend::Sqlite).await;
    let server = TestServer::start(&database, TOOLS).await;
    let landing = Browser::new().get(&format!("{}/", server.base())).await;
    assert_eq!(landing.status, StatusCode::OK);
    let mut client = server.client();
    client.initialize().await;
    let listed = client.call("tools/list", serde_json::json!({})).await;
    assert_lists_tools(&landing, &listed);
    for name in ["forecast", "tides"] {
        assert!(
            landing.body.contains(&format!("<code>{name}</code>")),
            "{}",
            landing.body
        );
    }
    assert!(
        landing.body.contains(
            "<dt><code>forecast</code> Weather forecast</dt>\n  <dd>Tomorrow&#39;s &#60;weather&#62; &#38; wind"
        ),
        "its title, and its description escaped: {}",
        landing.body
    );
    assert!(
        !landing.body.contains("demo_") && !landing.body.contains("first:"),
        "{}",
        landing.body
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_error_behind_a_page_is_logged_and_shown_as_a_generic_500() {
    captured_logs();
    let database = TestDatabase::new(Backend::Sqlite).await;
    let server = TestServer::start(&database, CONFIG).await;
    let base = server.base();
    let browser = Browser::new();
    assert_eq!(browser.get(&format!("{base}/connections")).await.status, StatusCode::OK);

    // The database loses a table the page reads: a fault on our side, not the user's.
    let mut conn = sqlx::SqliteConnection::connect(&database.url).await.expect("connect");
    sqlx::query("DROP TABLE form_values")
        .execute(&mut conn)
        .await
        .expect("drop table");
    conn.close().await.expect("close");

    let failed = browser.get(&format!("{base}/connections")).await;
    assert_eq!(failed.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert!(
        failed.body.contains("Something went wrong on our side"),
        "a generic message: {}",
        failed.body
    );
    assert!(
        !failed.body.contains("form_values") && !failed.body.contains("no such table"),
        "the cause is not shown: {}",
        failed.body
    );
    assert_page_headers("error page", &failed);
    let logs = logged_text();
    let logged = logs
        .lines()
        .find(|line| line.contains("a page request failed"))
        .unwrap_or_else(|| panic!("the failure is logged: {logs}"));
    assert!(logged.contains("no such table"), "with its cause: {logged}");
    assert!(logged.contains("/connections"), "and the request it broke: {logged}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_post_accepts_the_loopback_aliases_that_mcp_accepts() {
    let database = TestDatabase::new(Backend::Sqlite).await;
    let server = TestServer::start(&database, CONFIG).await;
    let base = server.base();
    let port = server.addr.port();
    let browser = Browser::new();
    let url = format!("{base}/connections/forms/key");

    for origin in [format!("http://localhost:{port}"), format!("http://[::1]:{port}")] {
        let replace = browser.get(&url).await;
        assert_eq!(replace.status, StatusCode::OK);
        let cancelled = browser
            .post_form(&url, &origin, &[("action", "cancel"), ("csrf", &replace.csrf())])
            .await;
        assert_eq!(cancelled.status, StatusCode::SEE_OTHER, "{origin}: {}", cancelled.body);
        assert_eq!(cancelled.location(), "/connections");
    }

    for origin in [
        "https://evil.example".to_owned(),
        format!("http://localhost:{}", port.wrapping_add(1)),
        "null".to_owned(),
    ] {
        let replace = browser.get(&url).await;
        let refused = browser
            .post_form(&url, &origin, &[("action", "cancel"), ("csrf", &replace.csrf())])
            .await;
        assert_eq!(refused.status, StatusCode::FORBIDDEN, "{origin}");
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_oauth_callback_query_is_never_logged() {
    captured_logs();
    let database = TestDatabase::new(Backend::Sqlite).await;
    let server = TestServer::start(&database, CONFIG).await;
    let base = server.base();
    let browser = Browser::new();
    let answered = browser
        .get(&format!(
            "{base}/oauth/callback?code=SECRETCODE123&state=SECRETSTATE456"
        ))
        .await;
    assert!(
        answered.status.is_client_error(),
        "an unknown flow is refused: {}",
        answered.status
    );
    server.stop().await;
    let logs = logged_text();
    assert!(logs.contains("/oauth/callback"), "the request is logged: {logs}");
    assert!(
        !logs.contains("SECRETCODE123") && !logs.contains("SECRETSTATE456"),
        "neither the code nor the state is logged: {logs}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loopback_server_refuses_pages_for_a_foreign_host() {
    let database = TestDatabase::new(Backend::Sqlite).await;
    let server = TestServer::start(&database, CONFIG).await;
    let base = server.base();
    let port = server.addr.port();
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client");
    for (host, allowed) in [
        ("evil.example".to_owned(), false),
        ("evil.example:80".to_owned(), false),
        (format!("127.0.0.1:{port}"), true),
        (format!("localhost:{port}"), true),
    ] {
        let response = http
            .get(format!("{base}/connections"))
            .header("host", &host)
            .send()
            .await
            .expect("GET /connections");
        let status = response.status();
        let body = response.text().await.expect("body");
        if allowed {
            assert_eq!(status, StatusCode::OK, "host {host}: {body}");
            assert!(body.contains("<h1>Your connections</h1>"), "host {host}: {body}");
        } else {
            assert_eq!(status, StatusCode::FORBIDDEN, "host {host}: {body}");
            assert!(body.contains("This server does not answer to that name."), "{body}");
            assert!(
                !body.contains("<h1>Your connections</h1>") && !body.contains("csrf"),
                "nothing about the user: {body}"
            );
        }
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_view_of_a_form_gets_its_own_csrf_token() {
    let database = TestDatabase::new(Backend::Sqlite).await;
    let server = TestServer::start(&database, CONFIG).await;
    let base = server.base();
    let browser = Browser::new();
    let url = format!("{base}/connections/forms/key");

    let first = browser.get(&url).await.csrf();
    let second = browser.get(&url).await.csrf();
    assert_ne!(first, second, "two views, two tokens");

    let (nonce, mac) = first.split_once('.').expect("a token is nonce.mac");
    let first_char = if nonce.starts_with('A') { "B" } else { "A" };
    let other_nonce = format!("{first_char}{}", &nonce[1..]);
    let forged = browser
        .press(&url, &base, "cancel", &format!("{other_nonce}.{mac}"))
        .await;
    assert_eq!(
        forged.status,
        StatusCode::FORBIDDEN,
        "another nonce under the same MAC: {}",
        forged.body
    );

    for token in [&first, &second] {
        let cancelled = browser.press(&url, &base, "cancel", token).await;
        assert_eq!(cancelled.status, StatusCode::SEE_OTHER, "{token}: {}", cancelled.body);
        assert_eq!(cancelled.location(), "/connections");
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_post_trickled_in_is_cut_off_with_408() {
    let database = TestDatabase::new(Backend::Sqlite).await;
    let server = TestServer::start(&database, &format!("[server]\nrequest_body_timeout = \"1s\"\n{CONFIG}")).await;
    for path in ["/connections", "/connections/forms/key"] {
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/x-www-form-urlencoded\r\n\
             Content-Length: 10000",
            server.addr
        );
        let answer = trickle_body(server.addr, &head, Duration::from_millis(100)).await;
        assert!(answer.starts_with("HTTP/1.1 408"), "{path}: {answer}");
        assert!(answer.contains("The form did not arrive in time."), "{path}: {answer}");
    }
    server.stop().await;
}

/// With the default body deadline (30 s, longer than a test waits), an answer at all shows that
/// the server did not wait for the body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_post_is_refused_before_its_body_is_read() {
    let database = TestDatabase::new(Backend::Sqlite).await;
    let server = TestServer::start(&database, &format!("{HEADER_IDENTITY}{CONFIG}")).await;
    let some_id = "0190b8e0-1c2d-7000-8000-000000000000";
    let paths = [
        "/connections".to_owned(),
        "/connections/forms/key".to_owned(),
        format!("/connect/{some_id}"),
        format!("/forms/{some_id}"),
    ];
    for path in &paths {
        let head = |extra: &str| {
            format!(
                "POST {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/x-www-form-urlencoded\r\n\
                 Content-Length: 1000000000{extra}",
                server.addr
            )
        };
        let anonymous = trickle_body(server.addr, &head(""), Duration::from_millis(100)).await;
        assert!(anonymous.starts_with("HTTP/1.1 401"), "{path}: {anonymous}");
        let cross_site = trickle_body(
            server.addr,
            &head("\r\nX-Forwarded-User: alice\r\nOrigin: https://evil.example"),
            Duration::from_millis(100),
        )
        .await;
        assert!(cross_site.starts_with("HTTP/1.1 403"), "{path}: {cross_site}");
    }
    server.stop().await;
}
