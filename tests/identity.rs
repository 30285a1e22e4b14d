//! Header identity mode as a reverse proxy exercises it: the identity header must occur exactly
//! once (a proxy that appends leaves the client's own value in front), and may name a user in any
//! printable Unicode, sent as UTF-8 bytes.

mod common;

use common::{Backend, HEADER_IDENTITY, TestDatabase, TestServer};
use reqwest::StatusCode;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::{Value, json};

const USER: HeaderName = HeaderName::from_static("x-forwarded-user");

/// Headers carrying each of `users` as its own `X-Forwarded-User` line, as raw bytes.
fn identity_headers(users: &[&str]) -> HeaderMap {
    let mut headers = HeaderMap::new();
    for user in users {
        headers.append(USER, HeaderValue::from_bytes(user.as_bytes()).expect("header value"));
    }
    headers
}

/// POSTs `initialize` to /mcp with `users`; the status and the session id, if one was made.
async fn initialize(server: &TestServer, users: &[&str]) -> (StatusCode, Option<String>) {
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25"}});
    let response = reqwest::Client::new()
        .post(&server.url)
        .header("accept", common::mcp::ACCEPT_BOTH)
        .header("content-type", "application/json")
        .headers(identity_headers(users))
        .body(init.to_string())
        .send()
        .await
        .expect("POST /mcp");
    let session = response
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    (response.status(), session)
}

/// GETs /connections with `users`; the status and the page.
async fn connections(server: &TestServer, users: &[&str]) -> (StatusCode, String) {
    let response = reqwest::Client::new()
        .get(format!("{}/connections", server.base()))
        .headers(identity_headers(users))
        .send()
        .await
        .expect("GET /connections");
    (response.status(), response.text().await.expect("page"))
}

async fn whoami(server: &TestServer, session: &str, user: &str) -> Value {
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "whoami"}});
    let response = reqwest::Client::new()
        .post(&server.url)
        .header("accept", common::mcp::ACCEPT_BOTH)
        .header("content-type", "application/json")
        .header("mcp-protocol-version", "2025-11-25")
        .header("mcp-session-id", session)
        .headers(identity_headers(&[user]))
        .body(call.to_string())
        .send()
        .await
        .expect("POST /mcp");
    assert_eq!(response.status(), StatusCode::OK);
    response.json::<Value>().await.expect("JSON")["result"]["structuredContent"]["principal"].clone()
}

backend_test!(
    /// One identity header is believed; two, equal or not, are refused on /mcp and on the pages,
    /// and nothing is stored for them.
    async fn a_repeated_identity_header_is_refused(backend: Backend) {
        let database = TestDatabase::new(backend).await;
        let server = TestServer::start(&database, HEADER_IDENTITY).await;

        let (status, session) = initialize(&server, &["alice"]).await;
        assert_eq!(status, StatusCode::OK);
        assert!(session.is_some());
        assert_eq!(connections(&server, &["alice"]).await.0, StatusCode::OK);

        for users in [&["mallory", "alice"][..], &["alice", "alice"][..]] {
            let (status, session) = initialize(&server, users).await;
            assert_eq!(status, StatusCode::UNAUTHORIZED, "POST /mcp with {users:?}");
            assert_eq!(session, None);
            let (status, page) = connections(&server, users).await;
            assert_eq!(status, StatusCode::UNAUTHORIZED, "GET /connections with {users:?}");
            assert!(
                !page.contains("mallory") && !page.contains("Signed in here as"),
                "{page}"
            );
        }
        assert_eq!(database.query_count("SELECT COUNT(*) FROM sessions").await, 1);
        server.stop().await;
    }
);

backend_test!(
    /// A user named in UTF-8 (`José`, `李雷`) is who the proxy says, on /mcp and on the pages, in
    /// the mode's normal form: NFKC, case folded (`ＪＯＳÉ` is `josé`).
    async fn a_utf8_user_name_is_accepted(backend: Backend) {
        let database = TestDatabase::new(backend).await;
        let server = TestServer::start(&database, HEADER_IDENTITY).await;
        for (user, principal) in [("José", "josé"), ("ＪＯＳÉ", "josé"), ("李雷", "李雷")] {
            let (status, session) = initialize(&server, &[user]).await;
            assert_eq!(status, StatusCode::OK, "initialize as {user}");
            assert_eq!(whoami(&server, &session.expect("session"), user).await, principal);
            let (status, page) = connections(&server, &[user]).await;
            assert_eq!(status, StatusCode::OK, "/connections as {user}");
            assert!(page.contains(&format!("Signed in here as {principal}")), "{page}");
        }
        let (status, _) = initialize(&server, &["eve\u{202e}ecila"]).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "a bidi control is refused");
        server.stop().await;
    }
);

/// oauth2-proxy's groups and email headers feed `allow` rules in header mode: a tool for the group
/// `eng` or anyone at acme.com is listed and callable for them, and for nobody else.
#[tokio::test]
async fn allow_rules_read_the_proxys_groups_and_email_headers() {
    let database = TestDatabase::new(Backend::Sqlite).await;
    let server = TestServer::start_addressed(&database, |addr| {
        format!(
            r#"
[identity]
mode = "header"
groups_header = "X-Forwarded-Groups"
email_header = "X-Forwarded-Email"

[server]
trusted_proxies = ["127.0.0.1/32"]

[[tools]]
name = "eng_only"
description = "For engineers and acme staff"
allow = {{ groups = ["eng"], email = ["*@acme.com"] }}
http = {{ method = "GET", url = "http://{addr}/healthz" }}
"#
        )
    })
    .await;
    let lists_it = async |user: &str, extra: &[(&str, &str)]| -> bool {
        let mut client = server.client().with_user("X-Forwarded-User", user);
        for (name, value) in extra {
            client = client.with_header(name, value);
        }
        client.initialize().await;
        let listed = client.call("tools/list", json!({})).await;
        let listed = listed["tools"]
            .as_array()
            .expect("tools")
            .iter()
            .any(|t| t["name"] == "eng_only");
        let called = client.request("tools/call", json!({"name": "eng_only"})).await;
        assert_eq!(
            listed,
            called.body.get("result").is_some(),
            "{user}: listed and callable agree: {}",
            called.body
        );
        listed
    };
    assert!(lists_it("alice", &[("X-Forwarded-Groups", "ops,eng")]).await);
    assert!(lists_it("bob", &[("X-Forwarded-Email", "Bob@Acme.com")]).await);
    assert!(
        !lists_it(
            "carol",
            &[
                ("X-Forwarded-Groups", "sales"),
                ("X-Forwarded-Email", "carol@acme.com.evil")
            ]
        )
        .await
    );
    assert!(!lists_it("dave", &[]).await);
    server.stop().await;
}
