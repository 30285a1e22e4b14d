//! The real upstream MCP servers of the gateway tests (`common::mcp_upstreams`) do what those
//! tests rely on: the bearer server checks tokens at the fake OAuth provider and per-tool scopes
//! and records what it saw, its tools behave for the official Python SDK's client, the stdio
//! server answers over stdin/stdout, and the TypeScript SDK's example server lists its tools.

mod common;

use std::process::Stdio;

use common::fake_oauth::{FakeOptions, FakeProvider};
use common::line_peer::LinePeer;
use common::mcp_upstreams::{BearerServer, TS_EXAMPLE_TOOLS, TsExampleServer, jsonrpc, stdio_server_command};
use common::python::python_sdk;
use common::{eventually, repo, text};
use reqwest::StatusCode;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

const VERSION: &str = "2025-11-25";

fn initialize() -> Value {
    json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": VERSION, "capabilities": {},
        "clientInfo": {"name": "gatehouse-tests", "version": "1.0"}}})
}

/// A session with a Streamable HTTP server, over plain JSON-RPC POSTs.
struct Session {
    url: String,
    bearer: Option<String>,
    id: String,
}

impl Session {
    /// Initializes (and sends `initialized`), with `token` as the bearer when given.
    async fn open(url: &str, token: Option<&str>) -> Session {
        let bearer = token.map(|t| format!("Bearer {t}"));
        let headers: Vec<(&str, &str)> = bearer.iter().map(|b| ("authorization", b.as_str())).collect();
        let reply = jsonrpc(url, &headers, &initialize()).await;
        assert_eq!(reply.status, StatusCode::OK, "initialize: {}", reply.body);
        assert_eq!(reply.answer(0)["result"]["protocolVersion"], VERSION, "{}", reply.body);
        let id = reply.header("mcp-session-id").expect("Mcp-Session-Id").to_owned();
        let session = Session {
            url: url.to_owned(),
            bearer,
            id,
        };
        let initialized = session
            .post(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        assert_eq!(initialized.status, StatusCode::ACCEPTED, "{}", initialized.body);
        session
    }

    async fn post(&self, body: &Value) -> common::mcp_upstreams::UpstreamReply {
        let mut headers = vec![("mcp-session-id", self.id.as_str()), ("mcp-protocol-version", VERSION)];
        headers.extend(self.bearer.iter().map(|b| ("authorization", b.as_str())));
        jsonrpc(&self.url, &headers, body).await
    }

    /// A request that must be answered with a result; the result.
    async fn call(&self, id: i64, method: &str, params: Value) -> Value {
        let reply = self
            .post(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        assert_eq!(reply.status, StatusCode::OK, "{method}: {}", reply.body);
        let answer = reply.answer(id);
        assert!(answer.get("error").is_none(), "{method}: {answer}");
        answer["result"].clone()
    }
}

fn names(tools: &Value) -> Vec<String> {
    tools["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .map(|t| t["name"].as_str().expect("name").to_owned())
        .collect()
}

const BEARER_TOOLS: [&str; 9] = [
    "whoami",
    "count",
    "slow",
    "ask_color",
    "open_link",
    "needs_url",
    "shout",
    "delete_repository",
    "grow",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bearer_server_refuses_requests_without_a_valid_token() {
    let fake = FakeProvider::start(FakeOptions::default()).await;
    let Some(upstream) = BearerServer::start(&fake.base_url, &[]).await else {
        return;
    };
    let missing = jsonrpc(upstream.url(), &[], &initialize()).await;
    assert_eq!(missing.status, StatusCode::UNAUTHORIZED, "{}", missing.body);
    assert_eq!(missing.header("www-authenticate"), Some("Bearer realm=\"upstream\""));

    let invalid = jsonrpc(
        upstream.url(),
        &[("authorization", "Bearer not-a-token")],
        &initialize(),
    )
    .await;
    assert_eq!(invalid.status, StatusCode::UNAUTHORIZED, "{}", invalid.body);
    assert_eq!(
        invalid.header("www-authenticate"),
        Some("Bearer realm=\"upstream\", error=\"invalid_token\"")
    );
    assert_eq!(
        fake.stats().api_bearer_tokens,
        ["not-a-token"],
        "checked at the provider"
    );
    assert!(upstream.seen().await.is_empty(), "nothing reached the MCP server");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bearer_server_serves_each_user_with_their_own_token_and_records_it() {
    let fake = FakeProvider::start(FakeOptions::default()).await;
    let Some(upstream) = BearerServer::start(&fake.base_url, &[]).await else {
        return;
    };
    let ada = fake.issue_token("ada", &["repo", "read:org"]);
    let bob = fake.issue_token("bob", &["repo"]);

    let session = Session::open(upstream.url(), Some(&ada)).await;
    assert_eq!(names(&session.call(1, "tools/list", json!({})).await), BEARER_TOOLS);
    let whoami = session
        .call(2, "tools/call", json!({"name": "whoami", "arguments": {}}))
        .await;
    assert_eq!(
        whoami["structuredContent"],
        json!({"login": "ada", "scopes": ["repo", "read:org"]})
    );
    let bobs = Session::open(upstream.url(), Some(&bob)).await;
    let whoami = bobs
        .call(1, "tools/call", json!({"name": "whoami", "arguments": {}}))
        .await;
    assert_eq!(whoami["structuredContent"]["login"], "bob");

    let seen = upstream.seen().await;
    let requests: Vec<(&str, &str)> = seen
        .iter()
        .filter(|e| e["kind"] == "request")
        .map(|e| {
            (
                e["method"].as_str().expect("method"),
                e["login"].as_str().expect("login"),
            )
        })
        .collect();
    assert_eq!(
        requests,
        [
            ("initialize", "ada"),
            ("tools/list", "ada"),
            ("tools/call", "ada"),
            ("initialize", "bob"),
            ("tools/call", "bob")
        ]
    );
    let first = &seen[0];
    assert_eq!(first["authorization"], format!("Bearer {ada}"));
    assert_eq!(first["headers"]["authorization"], format!("Bearer {ada}"));
    assert_eq!(first["session"], Value::Null, "initialize comes before the session");
    let list = seen.iter().find(|e| e["method"] == "tools/list").expect("tools/list");
    assert_eq!(list["session"], session.id);
    assert_eq!(list["headers"]["mcp-protocol-version"], VERSION);
    let tools: Vec<&Value> = seen.iter().filter(|e| e["kind"] == "tool").collect();
    assert_eq!(
        tools,
        [
            &json!({"kind": "tool", "name": "whoami", "login": "ada", "arguments": {}}),
            &json!({"kind": "tool", "name": "whoami", "login": "bob", "arguments": {}})
        ]
    );

    // A revoked token stops working once the server's short cache (at most 1 s) lets go of it.
    fake.revoke_everything();
    let request = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/list", "params": {}});
    let refused = eventually("the revoked token is refused", async || {
        let reply = session.post(&request).await;
        (reply.status == StatusCode::UNAUTHORIZED).then_some(reply)
    })
    .await;
    assert_eq!(
        refused.header("www-authenticate"),
        Some("Bearer realm=\"upstream\", error=\"invalid_token\"")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bearer_server_wants_the_scope_named_for_a_tool() {
    let fake = FakeProvider::start(FakeOptions::default()).await;
    let Some(upstream) = BearerServer::start(&fake.base_url, &[("delete_repository", "delete_repo")]).await else {
        return;
    };
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "delete_repository", "arguments": {"name": "octo/demo"}}});

    let narrow = Session::open(upstream.url(), Some(&fake.issue_token("ada", &["repo"]))).await;
    let refused = narrow.post(&call).await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN, "{}", refused.body);
    assert_eq!(
        refused.header("www-authenticate"),
        Some("Bearer error=\"insufficient_scope\", scope=\"delete_repo\"")
    );
    let other = narrow
        .call(2, "tools/call", json!({"name": "shout", "arguments": {"text": "hi"}}))
        .await;
    assert_eq!(text(&other), "HI", "other tools need no extra scope");

    let wide = Session::open(upstream.url(), Some(&fake.issue_token("ada", &["repo", "delete_repo"]))).await;
    let deleted = wide.post(&call).await;
    assert_eq!(deleted.status, StatusCode::OK, "{}", deleted.body);
    assert_eq!(text(&deleted.answer(1)["result"]), "deleted octo/demo");

    let seen = upstream.seen().await;
    let deletions = seen
        .iter()
        .filter(|e| e["kind"] == "tool" && e["name"] == "delete_repository")
        .count();
    assert_eq!(deletions, 1, "the refused call never reached the tool: {seen:?}");
    let calls = seen
        .iter()
        .filter(|e| e["kind"] == "request" && e["method"] == "tools/call")
        .count();
    assert_eq!(calls, 3, "every request is recorded, refused or not");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bearer_server_tools_behave_for_the_python_sdk_client() {
    let fake = FakeProvider::start(FakeOptions::default()).await;
    let Some(upstream) = BearerServer::start(&fake.base_url, &[]).await else {
        return;
    };
    let Some(python) = python_sdk().await else {
        return;
    };
    let token = fake.issue_token("ada", &["repo"]);
    let output = tokio::process::Command::new(python)
        .arg(repo().join("tests/upstreams/exercise_bearer.py"))
        .args(["--url", upstream.url(), "--token", &token])
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .expect("run exercise_bearer.py");
    assert!(
        output.status.success(),
        "exercise_bearer.py: {}\nserver: {}",
        String::from_utf8_lossy(&output.stderr),
        upstream.stderr()
    );
    let report: Value = serde_json::from_slice(&output.stdout).expect("one JSON report");

    assert_eq!(report["tools"], json!(BEARER_TOOLS));
    assert_eq!(report["whoami"], json!({"login": "ada", "scopes": ["repo"]}));
    assert_eq!(
        report["progress"],
        json!([[1.0, 3.0, "step 1"], [2.0, 3.0, "step 2"], [3.0, 3.0, "step 3"]])
    );
    assert_eq!(report["count"], "counted 3");
    assert_eq!(report["logs"], json!([["info", "hello"]]));
    assert_eq!(report["shout"], "HELLO");
    assert_eq!(report["form"]["mode"], "form");
    assert_eq!(report["form"]["schema"]["properties"]["color"]["type"], "string");
    assert_eq!(report["ask_color"], "you chose teal");
    assert_eq!(report["url"]["mode"], "url");
    assert_eq!(report["url"]["url"], "http://127.0.0.1:9/open");
    assert_eq!(report["open_link"], "accept");
    assert_eq!(report["completed"], json!([report["url"]["elicitationId"]]));
    assert_eq!(report["needs_url"]["code"], -32042);
    let elicitations = &report["needs_url"]["data"]["elicitations"];
    assert_eq!(elicitations[0]["mode"], "url");
    assert_eq!(elicitations[0]["url"], "http://127.0.0.1:9/finish");
    assert!(elicitations[0]["elicitationId"].is_string(), "{elicitations}");
    assert_eq!(report["grow"], "grew");
    assert_eq!(report["list_changed"], 1);
    assert_eq!(report["tools_after_grow"].as_array().map(Vec::len), Some(10));
    assert_eq!(report["tools_after_grow"][9], "grown");
    assert_eq!(report["slow"], "cancelled");

    // The cancellation reached the server for the call of `slow`, and stopped it.
    let seen = upstream.seen().await;
    let slow = seen
        .iter()
        .rev()
        .find(|e| e["kind"] == "request" && e["method"] == "tools/call")
        .expect("the call of slow");
    let cancelled = seen.iter().find(|e| e["kind"] == "cancelled").expect("cancelled");
    assert_eq!(cancelled["requestId"], slow["id"]);
    assert_eq!(cancelled["login"], "ada");
    eventually("slow was interrupted", async || {
        let seen = upstream.seen().await;
        seen.iter()
            .any(|e| *e == json!({"kind": "interrupted", "name": "slow", "login": "ada"}))
            .then_some(())
    })
    .await;
}

/// The stdio server, started with `env`, as a line-oriented JSON-RPC peer.
struct StdioPeer(LinePeer);

impl StdioPeer {
    async fn start(command: &[String], env: &[(&str, &str)]) -> StdioPeer {
        let mut program = tokio::process::Command::new(&command[0]);
        program
            .args(&command[1..])
            .env_remove("API_TOKEN")
            .envs(env.iter().copied());
        let mut server = LinePeer::spawn(program, "stdio_server.py");
        let answer = server.request(0, "initialize", initialize()["params"].clone()).await;
        assert_eq!(answer["result"]["protocolVersion"], VERSION, "{answer}");
        server
            .send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        StdioPeer(server)
    }

    async fn tool(&mut self, id: i64, name: &str) -> String {
        let answer = self
            .0
            .request(id, "tools/call", json!({"name": name, "arguments": {}}))
            .await;
        text(&answer["result"])
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_server_reads_its_token_from_the_environment() {
    let Some(command) = stdio_server_command().await else {
        return;
    };
    let mut server = StdioPeer::start(&command, &[("API_TOKEN", "s3cret-token")]).await;
    let expected: String = Sha256::digest(b"s3cret-token")
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(server.tool(1, "token_hash").await, expected);
    let pid = server.tool(2, "pid").await;
    assert_eq!(
        pid.parse::<u32>().ok(),
        server.0.child.id(),
        "no wrapper process in between"
    );
    assert_eq!(server.tool(3, "leak").await, "ok");

    // `crash` exits at once with status 3, unanswered; stderr holds what `leak` wrote.
    server
        .0
        .send(&json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call",
            "params": {"name": "crash", "arguments": {}}}))
        .await;
    let after_crash = server.0.next_line().await;
    assert_eq!(after_crash, None, "crash answers nothing and closes stdout");
    let status = tokio::time::timeout(common::WAIT, server.0.child.wait())
        .await
        .expect("exits in time")
        .expect("wait");
    assert_eq!(status.code(), Some(3));
    let stderr = &server.0.stderr;
    eventually("stderr holds what leak wrote", async || {
        stderr.text().contains("the token is s3cret-token").then_some(())
    })
    .await;

    let mut unset = StdioPeer::start(&command, &[]).await;
    assert_eq!(unset.tool(1, "token_hash").await, "unset");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typescript_example_server_lists_its_tools() {
    let Some(upstream) = TsExampleServer::start().await else {
        return;
    };
    let session = Session::open(upstream.url(), None).await;
    let tools = session.call(1, "tools/list", json!({})).await;
    assert_eq!(names(&tools), TS_EXAMPLE_TOOLS, "stderr: {}", upstream.stderr());
    let greeting = session
        .call(2, "tools/call", json!({"name": "greet", "arguments": {"name": "Ada"}}))
        .await;
    assert_eq!(text(&greeting), "Hello, Ada!");
}
