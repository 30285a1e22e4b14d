//! Protocol 2026-07-28 with clients nobody here wrote (the official Python SDK, the official
//! TypeScript SDK v2 client and rmcp's client), beside a 2025-11-25 one on the same endpoint: each
//! completes a gated call through input_required, the browser (scripted over HTTP, on the other
//! replica) and the held retry; a Python client whose user declines the link is answered at
//! once, one whose user dismisses it is given the link and runs the tool once the user finished
//! there; and a Python client without an elicitation callback is given the link in a result.

mod common;

use std::path::Path;
use std::time::Duration;

use common::fake_oauth::{FakeOptions, FakeProvider};
use common::mcp_upstreams::stage_ts_client_v2;
use common::python::{PythonScript, python_sdk};
use common::stateless::{STATELESS, StatelessClient};
use common::{Backend, Browser, TestDatabase, TestServer, eventually};
use reqwest::StatusCode;
use rmcp::ClientHandler;
use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ClientConfig, ElicitRequestParams, ElicitResult, ElicitationAction,
    ElicitationCapability, ErrorData, Implementation, ProtocolVersion, UrlElicitationCapability,
};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt, RequestContext, RoleClient};
use rmcp::transport::StreamableHttpClientTransport;
use serde_json::{Value, json};
use tokio::sync::mpsc;

/// How long a client may take to reach a step that needs the test: a guard against hanging only.
const STEP: Duration = Duration::from_secs(40);

/// The browser part of a sign-in that the client was sent to on replica `a`, done on `b`.
async fn sign_in_on(url: &str, a: &TestServer, b: &TestServer) {
    let browser = Browser::new();
    let authorize = browser.continue_to_provider(&url.replace(&a.base(), &b.base())).await;
    let callback = browser.authorize(&authorize).await.replace(&a.base(), &b.base());
    assert_eq!(browser.get(&callback).await.status, StatusCode::OK);
}

/// Once the client's retry is held on `a` (it accepted the link and came back with the request
/// state), the browser part of the sign-in, done on `b`.
async fn sign_in_while_held(url: &str, a: &TestServer, b: &TestServer) {
    let calls = a.mcp.calls.clone();
    eventually("the retry is held on A", async || (calls.held_now() == 1).then_some(())).await;
    sign_in_on(url, a, b).await;
    eventually("the held retry is answered", async || {
        (calls.held_now() == 0).then_some(())
    })
    .await;
}

/// Runs `script` with `interpreter` and `args` against `a`, signing in on `b` for every link it is
/// given (once its retry is held on `a` when `held`: a 2026-07-28 client); every event it printed.
async fn run(
    interpreter: &Path,
    script: &str,
    args: &[&str],
    held: bool,
    a: &TestServer,
    b: &TestServer,
) -> Vec<Value> {
    let mut script = PythonScript::start(interpreter, script, args);
    let mut events = Vec::new();
    while let Some(event) = script.next().await {
        if event["event"] == "elicitation" {
            let url = event["url"].as_str().expect("url");
            if held {
                sign_in_while_held(url, a, b).await;
            } else {
                sign_in_on(url, a, b).await;
            }
        }
        events.push(event);
    }
    script.succeeded().await;
    events
}

/// Asserts that a client in `mode` was sent one URL, then had the result of `me` (or `me_write`)
/// on protocol 2026-07-28.
fn assert_completed(mode: &str, events: &[Value]) {
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["event"].as_str()).collect();
    assert_eq!(kinds, ["elicitation", "result"], "{mode}: {events:?}");
    assert_eq!(events[0]["mode"], "url", "{events:?}");
    assert_eq!(events[1]["protocolVersion"], STATELESS, "{mode}: {events:?}");
    assert_eq!(events[1]["result"]["isError"], false, "{mode}: {events:?}");
    assert_eq!(
        events[1]["result"]["structuredContent"]["login"], "octocat",
        "{events:?}"
    );
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
            false,
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
        for (mode, tool) in [(STATELESS, "me"), ("auto", "me_write")] {
            let args = ["--url", &a.url, "--call", tool, "--mode", mode, "--timeout", "60"];
            assert_completed(mode, &run(&python, stateless, &args, true, &a, &b).await);
        }
        // No session left: the 2025-11-25 client ended its own, the others never had one.
        assert_eq!(database.query_count("SELECT COUNT(*) FROM sessions").await, 0);
        a.stop().await;
        b.stop().await;
    }
);

postgres_test!(
    async fn typescript_v2_client_completes_gated_calls_across_replicas() {
        let Some(stage) = stage_ts_client_v2().await else {
            return;
        };
        let stage = stage.to_str().expect("UTF-8 path");
        let fake = FakeProvider::start(FakeOptions::default()).await;
        let database = TestDatabase::new(Backend::Postgres).await;
        let toml = fake.configure(include_str!("fixtures/fake_hub.toml"));
        let a = TestServer::start(&database, &toml).await;
        let b = TestServer::start(&database, &toml).await;
        let script = "tests/interop/ts_stateless.mjs";

        // Pinned, then by discovery (`me_write` asks for one more scope, so a second sign-in).
        for (mode, tool) in [(STATELESS, "me"), ("auto", "me_write")] {
            let args = [
                "--sdk",
                stage,
                "--url",
                &a.url,
                "--call",
                tool,
                "--mode",
                mode,
                "--timeout",
                "60",
            ];
            assert_completed(mode, &run(Path::new("node"), script, &args, true, &a, &b).await);
        }
        assert_eq!(database.query_count("SELECT COUNT(*) FROM sessions").await, 0);
        a.stop().await;
        b.stop().await;
    }
);

backend_test!(
    /// The official Python SDK's user declines the link: the call ends at once with an error
    /// result saying the user declined (the SDK is not held). On the next call they dismiss it
    /// (`cancel`, "not now"): a new link, and the call ends at once with an error result giving it
    /// and the instruction to call again; once the user finished there, the call made again runs
    /// the tool.
    async fn python_client_declining_a_link_ends_the_call_and_dismissing_it_gives_the_link(backend: Backend) {
        let Some(python) = python_sdk().await else {
            return;
        };
        let fake = FakeProvider::start(FakeOptions::default()).await;
        let database = TestDatabase::new(backend).await;
        let server = TestServer::start(&database, &fake.configure(include_str!("fixtures/fake_hub.toml"))).await;
        let call = async |action: &str| {
            let args = [
                "--url",
                &server.url,
                "--call",
                "me",
                "--mode",
                STATELESS,
                "--action",
                action,
                "--timeout",
                "40",
            ];
            let mut script = PythonScript::start(&python, "tests/interop/python_stateless.py", &args);
            let mut events = Vec::new();
            while let Some(event) = script.next().await {
                events.push(event);
            }
            script.succeeded().await;
            events
        };
        let mut links = Vec::new();
        for action in ["decline", "cancel"] {
            let events = call(action).await;
            let kinds: Vec<&str> = events.iter().filter_map(|e| e["event"].as_str()).collect();
            assert_eq!(kinds, ["elicitation", "result"], "{action}: {events:?}");
            let url = events[0]["url"].as_str().expect("url").to_owned();
            assert!(!links.contains(&url), "{action}: a new link, not {links:?}");
            links.push(url.clone());
            let result = &events[1]["result"];
            assert_eq!(result["isError"], true, "{action}: {result}");
            let said = result["content"][0]["text"].as_str().unwrap_or_default();
            if action == "decline" {
                assert!(said.contains("declined"), "{action}: {result}");
            } else {
                assert!(said.contains(&url) && said.contains("call this tool again"), "{result}");
                assert!(!said.contains("declined"), "{result}");
            }
            assert_eq!(server.mcp.calls.held_now(), 0, "{action}: never held");
        }
        // The dismissed link stayed open: the user finishes there, and the call made again runs.
        sign_in_on(&links[1], &server, &server).await;
        let events = call("cancel").await;
        let kinds: Vec<&str> = events.iter().filter_map(|e| e["event"].as_str()).collect();
        assert_eq!(kinds, ["result"], "{events:?}");
        assert_eq!(events[0]["result"]["isError"], false, "{events:?}");
        assert_eq!(
            events[0]["result"]["structuredContent"]["login"], "octocat",
            "{events:?}"
        );
        server.stop().await;
    }
);

backend_test!(
    /// The official Python SDK with no elicitation callback declares no elicitation capability: a
    /// gated call returns (no exception) an error result naming the link; once the user finished
    /// there, the same call returns the tool's result.
    async fn python_client_without_an_elicitation_callback_gets_the_link(backend: Backend) {
        let Some(python) = python_sdk().await else {
            return;
        };
        let fake = FakeProvider::start(FakeOptions::default()).await;
        let database = TestDatabase::new(backend).await;
        let server = TestServer::start(&database, &fake.configure(include_str!("fixtures/fake_hub.toml"))).await;
        let args = [
            "--url",
            &server.url,
            "--call",
            "me",
            "--mode",
            STATELESS,
            "--no-elicitation",
            "--timeout",
            "40",
        ];
        let call = async || {
            let mut script = PythonScript::start(&python, "tests/interop/python_stateless.py", &args);
            let mut events = Vec::new();
            while let Some(event) = script.next().await {
                events.push(event);
            }
            script.succeeded().await;
            let kinds: Vec<&str> = events.iter().filter_map(|e| e["event"].as_str()).collect();
            assert_eq!(kinds, ["result"], "{events:?}");
            assert_eq!(events[0]["protocolVersion"], STATELESS, "{events:?}");
            events[0]["result"].clone()
        };
        let linked = call().await;
        assert_eq!(linked["isError"], true, "{linked}");
        let said = linked["content"][0]["text"].as_str().unwrap_or_default();
        let connect = format!("{}/connect/", server.base());
        let url = said
            .split_whitespace()
            .find(|word| word.starts_with(&connect))
            .unwrap_or_else(|| panic!("the link in {said}"));
        sign_in_on(url, &server, &server).await;
        let result = call().await;
        assert_eq!(result["isError"], false, "{result}");
        assert_eq!(result["structuredContent"]["login"], "octocat", "{result}");
        server.stop().await;
    }
);

/// rmcp's client as an application would write it: it can open URLs, and each URL-mode
/// elicitation it is handed goes to the test (the user) and is answered `accept`.
struct Opener(mpsc::UnboundedSender<String>);

impl ClientHandler for Opener {
    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let ElicitRequestParams::UrlElicitationParams { url, .. } = request else {
            return Ok(ElicitResult::new(ElicitationAction::Decline));
        };
        self.0
            .send(url)
            .map_err(|_| ErrorData::internal_error("the test is gone", None))?;
        Ok(ElicitResult::new(ElicitationAction::Accept))
    }

    fn get_info(&self) -> ClientConfig {
        let mut capabilities = ClientCapabilities::default();
        capabilities.elicitation = Some(ElicitationCapability::new().with_url(UrlElicitationCapability::new()));
        ClientConfig::new(capabilities, Implementation::new("gatehouse-interop-rmcp", "1.0.0"))
    }
}

postgres_test!(
    async fn rmcp_client_completes_gated_calls_across_replicas() {
        // rmcp's reqwest is built without a TLS provider (gatehouse gives its own); plain HTTP here.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let fake = FakeProvider::start(FakeOptions::default()).await;
        let database = TestDatabase::new(Backend::Postgres).await;
        let toml = fake.configure(include_str!("fixtures/fake_hub.toml"));
        let a = TestServer::start(&database, &toml).await;
        let b = TestServer::start(&database, &toml).await;
        let stateless = ProtocolVersion::V_2026_07_28;
        let lifecycles = [
            (
                ClientLifecycleMode::Discover {
                    preferred_versions: vec![stateless.clone()],
                },
                "me",
            ),
            (
                ClientLifecycleMode::Auto {
                    preferred_versions: vec![stateless.clone()],
                    legacy_version: None,
                },
                "me_write",
            ),
        ];

        // rmcp drives the rounds itself (`call_tool`): accept, then the retry, held on A while the
        // user signs in on B.
        for (lifecycle, tool) in lifecycles {
            let (urls_tx, mut urls) = mpsc::unbounded_channel();
            let transport = StreamableHttpClientTransport::from_uri(a.url.as_str());
            let client = Opener(urls_tx)
                .serve_with_lifecycle(transport, lifecycle.clone())
                .await
                .unwrap_or_else(|e| panic!("{lifecycle:?}: {e}"));
            let version = client.peer_info().map(|info| info.protocol_version.clone());
            assert_eq!(version, Some(stateless.clone()), "{lifecycle:?}");
            let user = async {
                let url = tokio::time::timeout(STEP, urls.recv())
                    .await
                    .expect("an elicitation in time")
                    .expect("a URL");
                sign_in_while_held(&url, &a, &b).await;
            };
            let call = tokio::time::timeout(STEP, client.call_tool(CallToolRequestParams::new(tool)));
            let (result, ()) = tokio::join!(call, user);
            let result = result
                .expect("the result in time")
                .unwrap_or_else(|e| panic!("{lifecycle:?}: {e}"));
            assert_eq!(result.is_error, Some(false), "{result:?}");
            let login = result.structured_content.as_ref().map(|c| c["login"].clone());
            assert_eq!(login, Some(json!("octocat")), "{result:?}");
            client.cancel().await.expect("close the client");
            assert!(urls.try_recv().is_err(), "{lifecycle:?}: one URL only");
        }
        assert_eq!(database.query_count("SELECT COUNT(*) FROM sessions").await, 0);
        a.stop().await;
        b.stop().await;
    }
);
