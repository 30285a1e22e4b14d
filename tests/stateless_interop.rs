//! Protocol 2026-07-28 with clients nobody here wrote, beside a 2025-11-25 one on the same
//! endpoint: each completes a gated call through input_required, the browser (scripted over
//! HTTP, on the other replica) and the held retry.

mod common;

use common::fake_oauth::{FakeOptions, FakeProvider};
use common::python::{PythonScript, python_sdk};
use common::stateless::StatelessClient;
use common::{Backend, Browser, TestDatabase, TestServer};
use reqwest::StatusCode;
use serde_json::{Value, json};

/// The browser part of a sign-in that the client was sent to on replica `a`, done on `b`.
async fn sign_in_on(url: &str, a: &TestServer, b: &TestServer) {
    let browser = Browser::new();
    let authorize = browser.continue_to_provider(&url.replace(&a.base(), &b.base())).await;
    let callback = browser.authorize(&authorize).await.replace(&a.base(), &b.base());
    assert_eq!(browser.get(&callback).await.status, StatusCode::OK);
}

/// Runs `script` with `args` against `a`, signing in on `b` for every link it is given; every
/// event it printed.
async fn run(python: &std::path::Path, script: &str, args: &[&str], a: &TestServer, b: &TestServer) -> Vec<Value> {
    let mut script = PythonScript::start(python, script, args);
    let mut events = Vec::new();
    while let Some(event) = script.next().await {
        if event["event"] == "elicitation" {
            sign_in_on(event["url"].as_str().expect("url"), a, b).await;
        }
        events.push(event);
    }
    script.succeeded().await;
    events
}

postgres_test!(
    async fn python_clients_of_both_eras_complete_gated_calls_across_replicas() {
        let Some(python) = python_sdk().await else {
            return;
        };
        let fake = FakeProvider::start(FakeOptions::default()).await;
        let database = TestDatabase::new(Backend::Postgres).await;
        let toml = fake.configure(include_str!("fixtures/fake_hub.toml"));
        let a = TestServer::start(&database, &toml).await;
        let b = TestServer::start(&database, &toml).await;
        let stateless = "tests/interop/python_stateless.py";

        // 2025-11-25: -32042, the completion notification on the session's stream, the retry.
        let legacy = run(
            &python,
            "tests/interop/python_elicitation.py",
            &["--url", &a.url, "--call", "me", "--timeout", "60"],
            &a,
            &b,
        )
        .await;
        let kinds: Vec<&str> = legacy.iter().filter_map(|e| e["event"].as_str()).collect();
        assert_eq!(kinds, ["elicitation", "completed", "result"], "{legacy:?}");
        let disconnected = StatelessClient::new(&a.url)
            .result(
                "tools/call",
                json!({"name": "disconnect", "arguments": {"provider": "fake"}}),
            )
            .await;
        assert_eq!(disconnected["isError"], false, "{disconnected}");

        // 2026-07-28, pinned and by discovery: input_required, the browser on B, the held retry on A.
        for (mode, tool) in [("2026-07-28", "me"), ("auto", "me_write")] {
            let args = ["--url", &a.url, "--call", tool, "--mode", mode, "--timeout", "60"];
            let events = run(&python, stateless, &args, &a, &b).await;
            let kinds: Vec<&str> = events.iter().filter_map(|e| e["event"].as_str()).collect();
            assert_eq!(kinds, ["elicitation", "result"], "{mode}: {events:?}");
            assert_eq!(events[0]["mode"], "url", "{events:?}");
            assert_eq!(events[1]["protocolVersion"], "2026-07-28", "{mode}: {events:?}");
            assert_eq!(events[1]["result"]["isError"], false, "{mode}: {events:?}");
            assert_eq!(
                events[1]["result"]["structuredContent"]["login"], "octocat",
                "{events:?}"
            );
        }
        // No session left: the 2025-11-25 client ended its own, the others never had one.
        assert_eq!(database.query_count("SELECT COUNT(*) FROM sessions").await, 0);
        a.stop().await;
        b.stop().await;
    }
);
