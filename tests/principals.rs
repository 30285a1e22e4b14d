//! Principals as rules and comparisons see them: `principal` matches in `approvers` and `allow`
//! in every identity mode; in `header` and `local` mode a principal is NFKC, case folded and
//! trimmed where it enters, so `Carol` is carol for her own request and `Dave` one vote with dave;
//! and rows stored before are rewritten to that form once, colliding ones left apart (doctor's
//! report of them is in tests/doctor.rs).

mod common;

use common::{Backend, Browser, McpClient, TestDatabase, TestServer, elicitations, eventually, url_of};
use reqwest::StatusCode;
use serde_json::json;

/// Header identity with a groups header; `pay` needs approval by `approvers`, `quorum` of them.
fn approval_config(addr: &str, approvers: &str, quorum: u32) -> String {
    format!(
        r#"{}
[[approvals]]
quorum = {quorum}
approvers = {approvers}
id = "spend"
title = "Spending approval"

[[tools]]
name = "pay"
description = "Pays, once approved"
requires = ["approval:spend"]
http = {{ url = "http://{addr}/healthz" }}
"#,
        common::header_identity_with_groups()
    )
}

async fn pay(client: &McpClient) -> common::Reply {
    client
        .request("tools/call", json!({"name": "pay", "arguments": {"amount": "5"}}))
        .await
}

/// The approval page a call's -32042 names.
async fn asked(client: &McpClient) -> String {
    let reply = pay(client).await;
    let listed = elicitations(&reply);
    assert_eq!(listed.len(), 1, "{}", reply.body);
    url_of(&listed[0])
}

/// A CSRF token of the approval page at `url`, as `browser` is shown it.
async fn token(browser: &Browser, url: &str) -> String {
    let page = browser.get(url).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    page.csrf()
}

async fn approve(browser: &Browser, origin: &str, url: &str, csrf: &str) -> common::Page {
    browser
        .post_form(url, origin, &[("csrf", csrf), ("action", "approve"), ("reason", "")])
        .await
}

/// The call runs once its approval has reached it.
async fn runs(client: &McpClient) {
    let ran = eventually("the approval reaches the call", async || {
        pay(client).await.body.get("result").cloned()
    })
    .await;
    assert_eq!(ran["isError"], json!(false), "{ran}");
}

backend_test!(
    /// `approvers = { principal = ["Bob"] }` in header mode: bob (as the proxy names him) sees the
    /// request in /approvals and approves it, and the call runs.
    async fn an_approver_named_by_principal_sees_and_decides(backend: Backend) {
        let database = TestDatabase::new(backend).await;
        let server =
            TestServer::start_addressed(&database, |addr| approval_config(addr, r#"{ principal = ["Bob"] }"#, 1)).await;
        let alice = server.eliciting_client("alice").await;
        let url = asked(&alice).await;
        let own = Browser::as_user("x-forwarded-user", "alice").get(&url).await;
        assert!(own.body.contains("principal: bob"), "{}", own.body);

        let bob = Browser::as_user("x-forwarded-user", "bob");
        let list = bob.get(&format!("{}/approvals", server.base())).await;
        assert_eq!(list.status, StatusCode::OK, "{}", list.body);
        assert!(
            list.body.contains("alice") && list.body.contains("pay"),
            "{}",
            list.body
        );
        let csrf = token(&bob, &url).await;
        let approved = approve(&bob, &server.base(), &url, &csrf).await;
        assert_eq!(approved.status, StatusCode::OK, "{}", approved.body);
        runs(&alice).await;
        server.stop().await;
    }
);

backend_test!(
    /// "Carol" cannot approve carol's request, and "dave", "Dave" and "ＤＡＶＥ" (fullwidth) are one
    /// vote toward a quorum of two; erin's is the second.
    async fn principals_compare_in_their_normal_form(backend: Backend) {
        let database = TestDatabase::new(backend).await;
        let server = TestServer::start_addressed(&database, |addr| {
            approval_config(addr, r#"{ groups = ["finance"] }"#, 2)
        })
        .await;
        let origin = server.base();
        let finance =
            |user: &str| Browser::as_user("x-forwarded-user", user).with_header("x-forwarded-groups", "finance");
        let carol = server.eliciting_client("carol").await;
        let url = asked(&carol).await;

        let own = finance("Carol");
        let csrf = token(&own, &url).await;
        let refused = approve(&own, &origin, &url, &csrf).await;
        assert_eq!(refused.status, StatusCode::FORBIDDEN, "{}", refused.body);

        let dave = finance("dave");
        let (first, second, third) = (
            token(&dave, &url).await,
            token(&dave, &url).await,
            token(&dave, &url).await,
        );
        assert_eq!(approve(&dave, &origin, &url, &first).await.status, StatusCode::OK);
        for (name, csrf) in [("Dave", &second), ("ＤＡＶＥ", &third)] {
            let again = approve(&finance(name), &origin, &url, csrf).await;
            assert_eq!(again.status, StatusCode::CONFLICT, "{name}: {}", again.body);
        }
        let votes = database.query_count("SELECT COUNT(*) FROM approval_votes").await;
        assert_eq!(votes, 1);
        assert_eq!(asked(&carol).await, url, "still waiting for a second approver");

        let erin = finance("erin");
        let csrf = token(&erin, &url).await;
        assert_eq!(approve(&erin, &origin, &url, &csrf).await.status, StatusCode::OK);
        runs(&carol).await;
        server.stop().await;
    }
);

/// `allow = { principal = ["Local"] }` in local mode lists the tool for the local user (whose
/// principal is `local`); a tool for someone else stays hidden.
#[tokio::test]
async fn a_rule_by_principal_keeps_the_tool_listed_in_local_mode() {
    let database = TestDatabase::new(Backend::Sqlite).await;
    let server = TestServer::start_addressed(&database, |addr| {
        format!(
            r#"
[[tools]]
name = "mine"
description = "The local user's"
allow = {{ principal = ["Local"] }}
http = {{ url = "http://{addr}/healthz" }}

[[tools]]
name = "theirs"
description = "Someone else's"
allow = {{ principal = ["someone"] }}
http = {{ url = "http://{addr}/healthz" }}
"#
        )
    })
    .await;
    let mut client = server.client();
    client.initialize().await;
    let listed = client.call("tools/list", json!({})).await;
    let names: Vec<&str> = listed["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(names.contains(&"mine") && !names.contains(&"theirs"), "{names:?}");
    let called = client.request("tools/call", json!({"name": "mine"})).await;
    assert_eq!(called.body["result"]["isError"], json!(false), "{}", called.body);
    server.stop().await;
}

backend_test!(
    /// Rows stored before principals were normalised: at the next start `Carol`'s become carol's
    /// (she finds her session's elicitations and her audit trail), while `Dave` and `dave`, one
    /// user in the normal form, are left as they are, and the form is not recorded as applied.
    async fn stored_principals_are_rewritten_once_and_collisions_left_apart(backend: Backend) {
        let database = TestDatabase::new(backend).await;
        let toml = |addr: &str| approval_config(addr, r#"{ groups = ["finance"] }"#, 1);
        let server = TestServer::start_addressed(&database, toml).await;
        for user in ["carol", "dave", "erin"] {
            let client = server.eliciting_client(user).await;
            asked(&client).await;
        }
        server.stop().await;
        // As an older gatehouse stored them: as the proxy typed them.
        for statement in [
            "UPDATE sessions SET principal = 'Carol' WHERE principal = 'carol'",
            "UPDATE elicitations SET principal = 'Carol' WHERE principal = 'carol'",
            "UPDATE audit SET principal = 'Carol' WHERE principal = 'carol'",
            "UPDATE elicitations SET principal = 'Dave' WHERE principal = 'dave'",
            "DELETE FROM principal_forms",
        ] {
            database.execute(statement).await;
        }

        let server = TestServer::start_addressed(&database, toml).await;
        let count = async |sql: &'static str| database.query_count(sql).await;
        assert_eq!(
            count("SELECT COUNT(*) FROM sessions WHERE principal = 'Carol'").await,
            0
        );
        assert_eq!(
            count("SELECT COUNT(*) FROM elicitations WHERE principal = 'carol'").await,
            1
        );
        assert!(count("SELECT COUNT(*) FROM audit WHERE principal = 'carol'").await > 0);
        assert_eq!(
            count("SELECT COUNT(*) FROM elicitations WHERE principal = 'Dave'").await,
            1
        );
        assert_eq!(count("SELECT COUNT(*) FROM sessions WHERE principal = 'dave'").await, 1);
        assert_eq!(
            count("SELECT COUNT(*) FROM principal_forms").await,
            0,
            "collisions remain"
        );
        server.stop().await;

        // Once the operator removed one of them, the next start renames the rest and records it.
        database
            .execute("DELETE FROM elicitations WHERE principal = 'Dave'")
            .await;
        let server = TestServer::start_addressed(&database, toml).await;
        assert_eq!(count("SELECT COUNT(*) FROM principal_forms").await, 1);
        let erin = count("SELECT COUNT(*) FROM elicitations WHERE principal = 'erin'").await;
        assert_eq!(erin, 1, "normal rows are untouched");
        server.stop().await;
    }
);
