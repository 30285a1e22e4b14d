//! The official reference server (`@modelcontextprotocol/server-everything`, npm) behind gatehouse,
//! over stdio and over HTTP, driven by the official Python SDK client: what the server asks of the
//! client during a call (`sampling/createMessage`, `roots/list`) reaches the client of that call,
//! and the answer goes back; a client that did not declare it gets the upstream's error, not a hang.

mod common;

use std::path::Path;
use std::time::Duration;

use common::mcp_upstreams::{server_everything, server_everything_http};
use common::python::python_sdk;
use common::{Backend, TestDatabase, TestServer, eventually_within, repo};
use serde_json::{Value, json};
use tokio::process::Command;

/// The Python SDK client (`tests/interop/python_client.py`) calling `tool` with `arguments`,
/// with more of its flags in `extra`: its JSON report.
async fn python_call(python: &Path, server: &TestServer, tool: &str, arguments: Value, extra: &[&str]) -> Value {
    let output = Command::new(python)
        .arg(repo().join("tests/interop/python_client.py"))
        .args(["--url", &server.url, "--call", tool, "--args", &arguments.to_string()])
        .args(extra)
        .output()
        .await
        .expect("run the Python client");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "the Python client failed on {tool}: {stderr}");
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| panic!("one JSON report ({e}): {stderr}"))
}

fn text_of(report: &Value) -> String {
    report["result"]["content"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["text"].as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sampling_and_roots_requests_reach_the_calling_client_and_the_answers_go_back() {
    let Some(everything) = server_everything().await else {
        return;
    };
    let Some(python) = python_sdk().await else {
        return;
    };
    let (http_url, _http) = server_everything_http(&everything).await;
    let stdio = format!("[\"node\", {:?}, \"stdio\"]", everything.to_string_lossy());
    let database = TestDatabase::new(Backend::Sqlite).await;
    // Local identity (one user): the Python client names none.
    let toml =
        format!("[[upstreams]]\nid = \"se\"\ncommand = {stdio}\n\n[[upstreams]]\nid = \"sh\"\nurl = \"{http_url}\"\n");
    let server = TestServer::start(&database, &toml).await;
    let mut client = server.client();
    client.initialize().await;
    // gatehouse declares sampling and roots, so the server offers its tools that use them.
    eventually_within(Duration::from_secs(60), "both catalogues", async || {
        let tools = client.call("tools/list", json!({})).await.to_string();
        [
            "se_trigger-sampling-request",
            "sh_trigger-sampling-request",
            "se_get-roots-list",
            "sh_get-roots-list",
        ]
        .iter()
        .all(|name| tools.contains(name))
        .then_some(())
    })
    .await;

    for upstream in ["se", "sh"] {
        let sampling = format!("{upstream}_trigger-sampling-request");
        let asked = json!({"prompt": "name a colour", "maxTokens": 10});
        let report = python_call(
            &python,
            &server,
            &sampling,
            asked.clone(),
            &["--sampling-reply", "teal, says the model"],
        )
        .await;
        assert_eq!(report["result"]["isError"], false, "{report}");
        let said = text_of(&report);
        assert!(
            said.contains("teal, says the model") && said.contains("interop-model"),
            "{said}"
        );
        let sampled = &report["sampled"][0];
        assert!(
            sampled["messages"][0]["content"]["text"]
                .as_str()
                .is_some_and(|t| t.contains("name a colour")),
            "the client got the server's request: {report}"
        );

        let roots = format!("{upstream}_get-roots-list");
        let report = python_call(
            &python,
            &server,
            &roots,
            json!({}),
            &["--root", "file:///srv/gatehouse-root"],
        )
        .await;
        assert_eq!(report["result"]["isError"], false, "{report}");
        assert!(text_of(&report).contains("file:///srv/gatehouse-root"), "{report}");
        assert!(report["rootsAsked"].as_u64() >= Some(1), "{report}");

        // A client that declared no sampling: the upstream is told at once, and says so.
        let report = python_call(&python, &server, &sampling, asked, &[]).await;
        assert_eq!(report["result"]["isError"], true, "{report}");
        assert!(text_of(&report).contains("cannot answer sampling requests"), "{report}");
    }
}
