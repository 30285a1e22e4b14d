//! An upstream that cannot work until the operator changes something is told apart from one that
//! may come back: a stdio program that is not found or may not be run, a URL that answers 404, a
//! TLS certificate that is refused. For those the model is told that the operator must fix the
//! upstream (and nothing about trying again); a refused connection or a 503 keeps "try again in a
//! moment". Real processes, real HTTP and TLS servers on loopback.

mod common;

use axum::Router;
use axum::routing::post;
use common::upstream::serve;
use common::{Backend, HEADER_IDENTITY, McpClient, TestDatabase, TestServer, text};
use reqwest::StatusCode;
use serde_json::json;

const OPERATOR: &str = "the gatehouse operator must fix";
const TRY_AGAIN: &str = "Try again in a moment";

/// `[[upstreams]]` with `id`, then `transport` (its `url = ...` or `command = [...]` line), and
/// the tool name `t` standing in before any listing.
fn upstream(id: &str, transport: &str) -> String {
    format!("\n[[upstreams]]\nid = \"{id}\"\n{transport}\ntools = [\"t\"]\ntimeout = \"5s\"\n")
}

async fn call_t(client: &McpClient, id: &str) -> String {
    let result = client
        .call("tools/call", json!({"name": format!("{id}_t"), "arguments": {}}))
        .await;
    assert_eq!(result["isError"], true, "{id}: {result}");
    text(&result)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fault_the_operator_must_fix_says_so_and_one_that_may_pass_says_try_again() {
    let database = TestDatabase::new(Backend::Sqlite).await;
    let dir = tempfile::tempdir().expect("dir");
    let plain = dir.path().join("plain-file");
    std::fs::write(&plain, "#!/bin/sh\n").expect("write a file without execute permission");
    // Answers 404 at every path, /mcp too.
    let nothing_there = serve(Router::new()).await;
    let wrong_name = common::tls::wrong_name_server();
    let failing = serve(Router::new().route(
        "/mcp",
        post(|| async { (StatusCode::SERVICE_UNAVAILABLE, "down for maintenance") }),
    ))
    .await;
    let closed = common::free_port();

    let permanent = [
        ("absent", "command = [\"gatehouse-test-no-such-program\"]".to_owned()),
        ("plain", format!("command = [{:?}]", plain.display().to_string())),
        ("gone", format!("url = \"http://{nothing_there}/mcp\"")),
        ("tls", format!("url = \"https://{wrong_name}/mcp\"")),
    ];
    let temporary = [
        ("down", format!("url = \"http://127.0.0.1:{closed}/mcp\"")),
        ("failing", format!("url = \"http://{failing}/mcp\"")),
    ];
    let mut toml = HEADER_IDENTITY.to_owned();
    for (id, transport) in permanent.iter().chain(&temporary) {
        toml.push_str(&upstream(id, transport));
    }
    let server = TestServer::start(&database, &toml).await;
    let mut alice = server.client().with_user("x-forwarded-user", "alice");
    alice.initialize().await;

    for (id, what) in [
        ("absent", "not installed"),
        ("plain", "may not be run"),
        ("gone", "HTTP 404"),
        ("tls", "TLS certificate is refused"),
    ] {
        let said = call_t(&alice, id).await;
        assert!(said.contains(OPERATOR), "{id}: the operator must fix it: {said}");
        assert!(said.contains(what), "{id}: says what is wrong ({what}): {said}");
        assert!(
            !said.contains(TRY_AGAIN) && !said.to_lowercase().contains("try again"),
            "{id}: no retry can help: {said}"
        );
        assert!(said.contains(&format!("`{id}`")), "{id}: names the upstream: {said}");
    }
    for id in ["down", "failing"] {
        let said = call_t(&alice, id).await;
        assert!(said.contains(TRY_AGAIN), "{id}: may pass: {said}");
        assert!(!said.contains("operator"), "{id}: nothing for the operator: {said}");
    }
    server.stop().await;
}
