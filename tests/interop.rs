//! Interoperability with clients nobody here wrote: the official Python MCP SDK and the official
//! MCP conformance suite. Each test sets up its peer under `target/` on first use.

mod common;

use std::net::SocketAddr;
use std::process::Command;

use axum::Router;
use axum::extract::Path as UrlPath;
use axum::routing::get;
use common::python::{PythonScript, python_sdk, unavailable};
use common::upstream::serve;
use common::{Backend, TestDatabase, TestServer, confirm_payment, pay_arguments, pay_tool, repo, text};
use serde_json::{Value, json};

/// An upstream that greets whoever its path names.
async fn upstream() -> SocketAddr {
    serve(Router::new().route(
        "/greet/{name}",
        get(|UrlPath(name): UrlPath<String>| async move { format!("Hello, {name}!") }),
    ))
    .await
}

backend_test!(
    async fn python_sdk_lists_tools_and_calls_an_http_tool(backend: Backend) {
        let Some(python) = python_sdk().await else {
            return;
        };
        let addr = upstream().await;
        let database = TestDatabase::new(backend).await;
        let tools = include_str!("fixtures/greet_tool.toml").replace("UPSTREAM", &addr.to_string());
        let server = TestServer::start(&database, &tools).await;
        let script = repo().join("tests/interop/python_client.py");
        let call = |tool: &'static str, args: Value| {
            let python = python.clone();
            let script = script.clone();
            let url = server.url.clone();
            tokio::task::spawn_blocking(move || {
                Command::new(python)
                    .arg(script)
                    .args([
                        "--url",
                        &url,
                        "--call",
                        tool,
                        "--args",
                        &args.to_string(),
                        "--expect-tool",
                        "whoami",
                        "--expect-tool",
                        "greet",
                    ])
                    .output()
                    .expect("run the Python client")
            })
        };
        let output = call("greet", json!({"name": "Ada Lovelace"})).await.expect("join");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "Python client failed: {stderr}");
        let report: Value = serde_json::from_slice(&output.stdout).expect("one JSON report");
        assert_eq!(report["protocolVersion"], "2025-11-25");
        assert_eq!(report["serverName"], "gatehouse");
        assert_eq!(
            report["tools"],
            json!(["whoami", "disconnect", "greet"]),
            "pages followed with page_size = 1"
        );
        assert_eq!(report["result"]["isError"], false);
        assert_eq!(report["result"]["content"][0]["text"], "Hello, Ada Lovelace!");

        let output = call("whoami", json!({})).await.expect("join");
        let report: Value = serde_json::from_slice(&output.stdout).expect("report");
        assert_eq!(report["result"]["structuredContent"]["principal"], "local");
        assert_eq!(
            report["result"]["structuredContent"]["session"]["client"]["name"],
            "gatehouse-interop-python"
        );
        // The SDK ends its session with DELETE when it closes.
        assert_eq!(
            database.query_count("SELECT COUNT(*) FROM sessions").await,
            0,
            "sessions were ended by the client"
        );
        server.stop().await;
    }
);

/// The scenarios the conformance suite must pass on the production build (tests/conformance.rs
/// runs the whole 2025-11-25 requirement set against the fixtures of `gatehouse-conformance`).
const SCENARIOS: [&str; 6] = [
    "server-initialize",
    "ping",
    "tools-list",
    "logging-set-level",
    "server-sse-multiple-streams",
    "dns-rebinding-protection",
];

fn conformance(url: &str, scenario: &str) -> Result<String, String> {
    let script = repo().join("tests/conformance/run.sh");
    let output = Command::new("bash")
        .arg(script)
        .args([url, scenario])
        .output()
        .map_err(|e| e.to_string())?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    if output.status.success() { Ok(text) } else { Err(text) }
}

fn have(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

backend_test!(
    async fn conformance_suite_passes(backend: Backend) {
        if !have("node") || !have("npm") {
            return unavailable("Node.js and npm", "not installed");
        }
        let database = TestDatabase::new(backend).await;
        let server = TestServer::start(&database, "").await;
        let mut failures = Vec::new();
        for scenario in SCENARIOS {
            let url = server.url.clone();
            match tokio::task::spawn_blocking(move || conformance(&url, scenario))
                .await
                .expect("join")
            {
                Ok(output) => assert!(
                    output.contains("Passed:") && output.contains(", 0 failed"),
                    "{scenario}:\n{output}"
                ),
                Err(output) => failures.push(format!("--- {scenario} ---\n{output}")),
            }
        }
        assert!(
            failures.is_empty(),
            "conformance scenarios failed:\n{}",
            failures.join("\n")
        );
        server.stop().await;
    }
);

backend_test!(
    /// The Python SDK meets -32042, the test does the browser part over HTTP, the SDK receives the
    /// completion notification on its stream and its retry succeeds.
    async fn python_sdk_completes_a_url_elicitation(backend: Backend) {
        let Some(python) = python_sdk().await else {
            return;
        };
        let fake = common::fake_oauth::FakeProvider::start(common::fake_oauth::FakeOptions::default()).await;
        let database = TestDatabase::new(backend).await;
        let config = fake.configure(include_str!("fixtures/fake_provider.toml"));
        let server = TestServer::start(&database, &config).await;
        let mut script = PythonScript::start(
            &python,
            "tests/interop/python_elicitation.py",
            &["--url", &server.url, "--call", "me", "--timeout", "30"],
        );
        let mut events = Vec::new();
        while let Some(event) = script.next().await {
            if event["event"] == "elicitation" {
                let page = common::Browser::new()
                    .sign_in(event["url"].as_str().expect("url"))
                    .await;
                assert_eq!(page.status, reqwest::StatusCode::OK, "{}", page.body);
            }
            events.push(event);
        }
        script.succeeded().await;
        let kinds: Vec<&str> = events.iter().filter_map(|e| e["event"].as_str()).collect();
        assert_eq!(kinds, ["elicitation", "completed", "result"]);
        assert_eq!(events[0]["elicitationId"], events[1]["elicitationId"]);
        assert_eq!(events[2]["result"]["isError"], false);
        assert_eq!(events[2]["result"]["structuredContent"]["login"], "octocat");
        server.stop().await;
    }
);

backend_test!(
    /// In-call elicitation with the Python SDK: `elicitation/create` (URL mode) arrives on the call's
    /// own SSE stream, the SDK's elicitation callback answers it, the test confirms in the browser,
    /// and the same `call_tool` returns the tool's result; progress notifications for the call reach
    /// the SDK's progress callback meanwhile. A decline from the callback ends the call with a tool
    /// error instead.
    async fn python_sdk_answers_an_elicitation_within_the_call(backend: Backend) {
        let Some(python) = python_sdk().await else {
            return;
        };
        let database = TestDatabase::new(backend).await;
        let server = TestServer::start_addressed(&database, |addr| pay_tool(addr, "30s")).await;
        let arguments = pay_arguments().to_string();
        let script_args = |extra: &[&'static str]| {
            let mut args = vec![
                "--url",
                &server.url,
                "--call",
                "pay",
                "--args",
                &arguments,
                "--timeout",
                "30",
                "--in-call",
            ];
            args.extend_from_slice(extra);
            args.into_iter().map(str::to_owned).collect::<Vec<_>>()
        };

        // Accept, with progress: the browser waits until progress says the server got the accept.
        let args = script_args(&["--progress"]);
        let mut script = PythonScript::start(
            &python,
            "tests/interop/python_elicitation.py",
            &args.iter().map(String::as_str).collect::<Vec<_>>(),
        );
        let mut events = Vec::new();
        let (mut asked, mut accepted) = (None, false);
        while asked.is_none() || !accepted {
            let event = script
                .next()
                .await
                .expect("the elicitation and progress before the result");
            assert_ne!(event["event"], "result", "the call ended before the browser: {event}");
            if event["event"] == "elicitation" {
                assert!(asked.is_none(), "asked once: {event}");
                asked = Some(event.clone());
            }
            accepted |=
                event["event"] == "progress" && event["message"] == "Waiting for the user to finish in the browser.";
            events.push(event);
        }
        let asked = asked.expect("elicitation");
        assert_eq!(asked["mode"], "url", "{asked}");
        let elicitation_id = asked["elicitationId"].as_str().expect("elicitationId");
        let url = asked["url"].as_str().expect("url");
        assert!(url.ends_with(&format!("/forms/{elicitation_id}")), "{asked}");
        assert!(!asked["message"].as_str().unwrap_or_default().is_empty(), "{asked}");

        confirm_payment(url, &server.base()).await;
        while let Some(event) = script.next().await {
            events.push(event);
        }
        script.succeeded().await;
        let (result, before) = events.split_last().expect("events");
        assert_eq!(result["event"], "result", "{events:?}");
        assert_eq!(result["result"]["isError"], false, "{result}");
        assert_eq!(text(&result["result"]), "ok", "the tool ran after the confirmation");
        let progress: Vec<f64> = before
            .iter()
            .filter(|e| e["event"] == "progress")
            .filter_map(|e| e["progress"].as_f64())
            .collect();
        assert!(!progress.is_empty(), "{events:?}");
        assert!(
            progress.windows(2).all(|w| w[0] < w[1]),
            "progress increases: {progress:?}"
        );
        assert_eq!(
            before.iter().filter(|e| e["event"] != "progress").count(),
            1,
            "one elicitation, then progress only: {events:?}"
        );

        // Decline, without progress: the same call asks afresh, and ends with a tool error.
        let args = script_args(&["--action", "decline"]);
        let mut script = PythonScript::start(
            &python,
            "tests/interop/python_elicitation.py",
            &args.iter().map(String::as_str).collect::<Vec<_>>(),
        );
        let mut events = Vec::new();
        while let Some(event) = script.next().await {
            events.push(event);
        }
        script.succeeded().await;
        let kinds: Vec<&str> = events.iter().filter_map(|e| e["event"].as_str()).collect();
        assert_eq!(
            kinds,
            ["elicitation", "result"],
            "no progress without a token: {events:?}"
        );
        assert_ne!(events[0]["elicitationId"], asked["elicitationId"]);
        assert_eq!(events[1]["result"]["isError"], true, "{events:?}");
        assert!(text(&events[1]["result"]).contains("declined"), "{events:?}");

        // The SDK ends its sessions with DELETE, streamed answers or not.
        assert_eq!(database.query_count("SELECT COUNT(*) FROM sessions").await, 0);
        server.stop().await;
    }
);
