//! Interoperability with clients nobody here wrote: the official Python MCP SDK and the official
//! MCP conformance suite. Each test sets up its peer under `target/` on first use.

mod common;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Mutex;

use axum::Router;
use axum::extract::Path as UrlPath;
use axum::routing::get;
use common::{Backend, TestDatabase, TestServer, repo};
use serde_json::{Value, json};

const PYTHON_SDK: &str = "mcp==2.3.0";

/// A peer that cannot be set up: a loud skip, or a failure under `CI=true`.
fn unavailable(what: &str, why: &str) {
    let message = format!("\n!!! {what} is unavailable ({why}): this interop test is SKIPPED.\n");
    assert!(
        std::env::var("CI").map_or(true, |v| v != "true"),
        "CI=true requires {what}: {message}"
    );
    eprintln!("{message}");
}

fn run(command: &mut Command) -> Result<std::process::Output, String> {
    let output = command.output().map_err(|e| format!("cannot run {command:?}: {e}"))?;
    if output.status.success() {
        Ok(output)
    } else {
        Err(format!(
            "{command:?} failed ({}):\n{}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ))
    }
}

static VENV: Mutex<()> = Mutex::new(());

/// A virtualenv under target/ with the official Python SDK.
fn python_with_sdk() -> Result<PathBuf, String> {
    let _guard = VENV.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let venv = repo().join("target/interop-venv");
    let python = venv.join("bin/python");
    let ready = python.exists()
        && Command::new(&python)
            .args([
                "-c",
                "import importlib.metadata as m; assert m.version('mcp') == '2.3.0'",
            ])
            .status()
            .is_ok_and(|s| s.success());
    if !ready {
        run(Command::new("python3").args(["-m", "venv", "--clear"]).arg(&venv))?;
        run(Command::new(&python).args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            PYTHON_SDK,
        ]))?;
    }
    Ok(python)
}

async fn upstream() -> SocketAddr {
    let app = Router::new().route(
        "/greet/{name}",
        get(|UrlPath(name): UrlPath<String>| async move { format!("Hello, {name}!") }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

async fn python_sdk_lists_tools_and_calls_an_http_tool(backend: Backend) {
    let python = match tokio::task::spawn_blocking(python_with_sdk).await.expect("join") {
        Ok(python) => python,
        Err(why) => return unavailable("the Python MCP SDK", &why),
    };
    let addr = upstream().await;
    let database = TestDatabase::new(backend).await;
    let tools = format!(
        "[mcp]\npage_size = 1\n[[tools]]\nname = \"greet\"\ndescription = \"Greets someone\"\n\
         input_schema = {{ type = \"object\", properties = {{ name = {{ type = \"string\" }} }}, required = [\"name\"] }}\n\
         http = {{ url = \"http://{addr}/greet/{{{{args.name}}}}\" }}\n"
    );
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

/// The scenarios the conformance suite must pass.
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

/// The Python SDK meets -32042, the test does the browser part over HTTP, the SDK receives the
/// completion notification on its stream and its retry succeeds.
async fn python_sdk_completes_a_url_elicitation(backend: Backend) {
    use std::io::BufRead;
    let python = match tokio::task::spawn_blocking(python_with_sdk).await.expect("join") {
        Ok(python) => python,
        Err(why) => return unavailable("the Python MCP SDK", &why),
    };
    let fake = common::fake_oauth::FakeProvider::start(common::fake_oauth::FakeOptions::default()).await;
    let database = TestDatabase::new(backend).await;
    let config = format!(
        "[[providers]]\nid = \"fake\"\nauthorize_url = \"{}\"\ntoken_url = \"{}\"\nclient_id = \"fake-client\"\n\
         client_secret = \"fake-secret\"\nscopes = [\"read\"]\n[[tools]]\nname = \"me\"\ndescription = \"The user\"\n\
         requires = [\"fake\"]\nhttp = {{ url = \"{}\" }}\n",
        fake.authorize_url(),
        fake.token_url(),
        fake.api_url()
    );
    let server = TestServer::start(&database, &config).await;
    let mut child = std::process::Command::new(python)
        .arg(repo().join("tests/interop/python_elicitation.py"))
        .args(["--url", &server.url, "--call", "me", "--timeout", "30"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start the Python client");
    let stdout = child.stdout.take().expect("stdout");
    let (lines_tx, mut lines_rx) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = lines_tx.send(line);
        }
    });
    let mut events = Vec::new();
    while let Some(line) = tokio::time::timeout(std::time::Duration::from_secs(40), lines_rx.recv())
        .await
        .expect("output in time")
    {
        let event: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        if event["event"] == "elicitation" {
            let page = common::Browser::new()
                .sign_in(event["url"].as_str().expect("url"))
                .await;
            assert_eq!(page.status, reqwest::StatusCode::OK, "{}", page.body);
        }
        events.push(event);
    }
    let output = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .expect("join")
        .expect("wait");
    assert!(
        output.status.success(),
        "Python client failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["event"].as_str()).collect();
    assert_eq!(kinds, ["elicitation", "completed", "result"]);
    assert_eq!(events[0]["elicitationId"], events[1]["elicitationId"]);
    assert_eq!(events[2]["result"]["isError"], false);
    assert_eq!(events[2]["result"]["structuredContent"]["login"], "octocat");
    server.stop().await;
}

on_both_backends!(
    python_sdk_lists_tools_and_calls_an_http_tool,
    python_sdk_completes_a_url_elicitation,
    conformance_suite_passes
);
