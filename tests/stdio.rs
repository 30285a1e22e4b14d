//! `gatehouse stdio`, the real binary: the official Python SDK's stdio client signs in through a
//! URL elicitation whose pages are on the loopback listener, and a raw client checks the
//! transport's rules (only JSON-RPC on stdout, over-long lines refused, a clean exit at EOF).

mod common;

use common::fake_oauth::{FakeOptions, FakeProvider};
use common::line_peer::LinePeer;
use common::python::{PythonScript, python_sdk};
use common::replica::BINARY;
use common::{
    Backend, Browser, TEST_KEY, TestDatabase, WAIT, confirm_payment, eventually, free_port, pay_arguments, pay_tool,
    text,
};
use serde_json::json;
use tokio::process::Command;

/// The largest line the raw tests' gatehouse reads.
const MAX_LINE: usize = 4096;

/// `tests/interop/python_elicitation.py --stdio` with `args`, launching `gatehouse stdio` with
/// `config` (in the directory returned, which must outlive the script) and its pages on `bind`.
fn python_over_stdio(
    python: &std::path::Path,
    database: &TestDatabase,
    config: &str,
    bind: &str,
    args: &[&str],
) -> (PythonScript, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("gatehouse.toml");
    std::fs::write(&path, config).expect("config");
    let mut script_args = vec!["--stdio", BINARY, "--timeout", "30"];
    script_args.extend_from_slice(args);
    let script = PythonScript::start_with_env(
        python,
        "tests/interop/python_elicitation.py",
        &script_args,
        &[
            ("GATEHOUSE_CONFIG", path.to_str().expect("UTF-8 path")),
            ("GATEHOUSE_DATABASE__URL", &database.url),
            ("GATEHOUSE_SECRETS__KEYS", TEST_KEY),
            ("GATEHOUSE_SERVER__BIND", bind),
        ],
    );
    (script, dir)
}

backend_test!(
    /// The Python SDK launches `gatehouse stdio`, lists the tools, meets -32042 with a link to the
    /// loopback pages, the test signs in there, the SDK receives the completion notification on
    /// stdout and its retry succeeds; stdout never carried anything but JSON-RPC (the script
    /// fails otherwise).
    async fn python_sdk_signs_in_over_stdio(backend: Backend) {
        let Some(python) = python_sdk().await else {
            return;
        };
        let fake = FakeProvider::start(FakeOptions::default()).await;
        let database = TestDatabase::new(backend).await;
        let config = fake.configure(include_str!("fixtures/fake_provider.toml"));
        let (mut script, _dir) = python_over_stdio(
            &python,
            &database,
            &config,
            "127.0.0.1:0",
            &["--list-tools", "--call", "me"],
        );
        let mut events = Vec::new();
        while let Some(event) = script.next().await {
            if event["event"] == "elicitation" {
                let url = event["url"].as_str().expect("url");
                assert!(url.starts_with("http://127.0.0.1:"), "the loopback pages: {url}");
                let page = Browser::new().sign_in(url).await;
                assert_eq!(page.status, reqwest::StatusCode::OK, "{}", page.body);
            }
            events.push(event);
        }
        script.succeeded().await;
        let kinds: Vec<&str> = events.iter().filter_map(|e| e["event"].as_str()).collect();
        assert_eq!(kinds, ["tools", "elicitation", "completed", "result"], "{events:?}");
        assert_eq!(events[0]["names"], json!(["whoami", "disconnect", "me"]));
        assert_eq!(events[1]["elicitationId"], events[2]["elicitationId"]);
        assert_eq!(events[3]["result"]["isError"], false, "{}", events[3]);
        assert_eq!(events[3]["result"]["structuredContent"]["login"], "octocat");
    }
);

backend_test!(
    /// In-call elicitation over stdio: `elicitation/create` reaches the SDK's callback on stdout,
    /// its answer goes back on stdin, the test confirms on the loopback page and the same call
    /// returns the tool's result.
    async fn python_sdk_answers_an_elicitation_within_the_call_over_stdio(backend: Backend) {
        let Some(python) = python_sdk().await else {
            return;
        };
        let database = TestDatabase::new(backend).await;
        // The tool calls the pages' own /healthz, so the pages' port is chosen beforehand.
        let addr = format!("127.0.0.1:{}", free_port());
        let arguments = pay_arguments().to_string();
        let (mut script, _dir) = python_over_stdio(
            &python,
            &database,
            &pay_tool(&addr, "30s"),
            &addr,
            &["--call", "pay", "--args", &arguments, "--in-call"],
        );
        let mut events = Vec::new();
        while let Some(event) = script.next().await {
            if event["event"] == "elicitation" {
                assert_eq!(event["mode"], "url", "{event}");
                confirm_payment(event["url"].as_str().expect("url"), &format!("http://{addr}")).await;
            }
            events.push(event);
        }
        script.succeeded().await;
        let kinds: Vec<&str> = events.iter().filter_map(|e| e["event"].as_str()).collect();
        assert_eq!(kinds, ["elicitation", "result"], "{events:?}");
        assert_eq!(events[1]["result"]["isError"], false, "{}", events[1]);
        assert_eq!(text(&events[1]["result"]), "ok", "the tool ran after the confirmation");
    }
);

/// `gatehouse stdio` with `env`, reading lines of at most [`MAX_LINE`].
fn start(database: &TestDatabase, dir: &std::path::Path, env: &[(&str, &str)]) -> LinePeer {
    let mut command = Command::new(BINARY);
    command
        .env_clear()
        .arg("stdio")
        .current_dir(dir)
        .env("GATEHOUSE_DATABASE__URL", &database.url)
        .env("GATEHOUSE_SECRETS__KEYS", TEST_KEY)
        .env("GATEHOUSE_SERVER__BIND", "127.0.0.1:0")
        .env("GATEHOUSE_SERVER__MAX_REQUEST_BYTES", MAX_LINE.to_string())
        .envs(env.iter().copied());
    LinePeer::spawn(command, "gatehouse stdio")
}

backend_test!(
    /// Only JSON-RPC on stdout; an over-long line gets an error and the session goes on; EOF on
    /// stdin ends the process with 0 and the session with it; the pages' address is on stderr.
    async fn stdio_keeps_stdout_clean_bounds_lines_and_exits_at_eof(backend: Backend) {
        let database = TestDatabase::new(backend).await;
        let dir = tempfile::tempdir().expect("dir");
        let mut gatehouse = start(&database, dir.path(), &[]);

        gatehouse
            .send(&json!({"jsonrpc": "2.0", "id": 0, "method": "ping"}))
            .await;
        let early = gatehouse.next_message().await.expect("an answer before initialize");
        assert_eq!(early["error"]["code"], -32600, "{early}");

        let params = json!({
            "protocolVersion": "2025-11-25",
            "capabilities": {"elicitation": {"url": {}}},
            "clientInfo": {"name": "raw", "version": "1"},
        });
        let initialized = gatehouse.request(1, "initialize", params).await;
        assert_eq!(initialized["result"]["protocolVersion"], "2025-11-25", "{initialized}");
        gatehouse
            .send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        assert_eq!(database.query_count("SELECT COUNT(*) FROM sessions").await, 1);

        // Far beyond the limit, in one line: refused without being kept, and the session goes on.
        let long = json!({"jsonrpc": "2.0", "id": 2, "method": "ping", "params": {"pad": "x".repeat(MAX_LINE * 64)}});
        gatehouse.send(&long).await;
        let refused = gatehouse.next_message().await.expect("the long line answered");
        assert_eq!(refused["error"]["code"], -32600, "{refused}");
        assert!(
            refused["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains(&format!("longer than {MAX_LINE} bytes"))),
            "{refused}"
        );
        gatehouse.send_line("not json").await;
        let unparsed = gatehouse.next_message().await.expect("the bad line answered");
        assert_eq!(unparsed["error"]["code"], -32700, "{unparsed}");
        let tools = gatehouse.request(3, "tools/list", json!({})).await;
        assert!(
            tools["result"]["tools"].as_array().is_some_and(|t| !t.is_empty()),
            "{tools}"
        );

        gatehouse.close_input();
        assert_eq!(gatehouse.next_message().await, None, "nothing more on stdout");
        let status = tokio::time::timeout(WAIT, gatehouse.child.wait())
            .await
            .expect("exits in time")
            .expect("wait");
        assert!(status.success(), "{status}: {}", gatehouse.stderr.text());
        let stderr = &gatehouse.stderr;
        eventually("the pages' address on stderr", async || {
            stderr
                .text()
                .contains("gatehouse: pages at http://127.0.0.1:")
                .then_some(())
        })
        .await;
        assert_eq!(
            database.query_count("SELECT COUNT(*) FROM sessions").await,
            0,
            "the session ended with stdin"
        );
    }
);

/// Anything but `local` identity is refused: a stdio client is the one user at this machine.
#[tokio::test]
async fn stdio_refuses_identities_other_than_local() {
    let database = TestDatabase::new(Backend::Sqlite).await;
    let dir = tempfile::tempdir().expect("dir");
    let mut gatehouse = start(
        &database,
        dir.path(),
        &[
            ("GATEHOUSE_IDENTITY__MODE", "header"),
            ("GATEHOUSE_SERVER__TRUSTED_PROXIES", "127.0.0.1/32"),
        ],
    );
    assert_eq!(gatehouse.next_line().await, None, "nothing on stdout");
    let status = tokio::time::timeout(WAIT, gatehouse.child.wait())
        .await
        .expect("exits in time")
        .expect("wait");
    assert!(!status.success(), "{}", gatehouse.stderr.text());
    let stderr = &gatehouse.stderr;
    eventually("the refusal on stderr", async || {
        stderr.text().contains("identity.mode = \"local\"").then_some(())
    })
    .await;
}
