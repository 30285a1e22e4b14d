//! MCP authorization done by clients nobody here wrote: the official Python and TypeScript MCP
//! SDKs, given only gatehouse's `/mcp` URL, find their way to a token by themselves (the 401
//! challenge, Protected Resource Metadata, the authorization server's metadata, dynamic client
//! registration, PKCE, a token request with `resource`) against the fake identity provider, then
//! call `whoami` as the user who consented. Each SDK is set up under `target/` on first use; one
//! that cannot be is a loud skip (a failure under `CI=true`).

mod common;

use std::time::Duration;

use common::fake_idp::{FakeIdp, FakeIdpOptions, TestUser};
use common::mcp_upstreams::stage_ts_sdk;
use common::python::python_sdk;
use common::{Backend, TestDatabase, TestServer, repo};
use serde_json::Value;
use tokio::process::Command;

/// How long a client script may take in all (it bounds itself a little sooner): a guard against
/// hanging only, generous for a loaded machine.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(90);
/// The `--timeout` the scripts get: they give up, and say where they were, before the guard fires.
const SCRIPT_TIMEOUT: &str = "60";

/// The fake provider with alice signed in, and gatehouse in `oauth` mode at it, its audience the
/// default (its own `/mcp`) and its required scope `mcp`.
async fn setup() -> (FakeIdp, TestDatabase, TestServer) {
    let idp = FakeIdp::start(FakeIdpOptions::default()).await;
    idp.add_user(TestUser {
        sub: "alice".into(),
        name: "Alice Example".into(),
        email: "alice@acme.test".into(),
        groups: vec!["eng".into()],
    });
    idp.sign_in_as("alice");
    let database = TestDatabase::new(Backend::Sqlite).await;
    let issuer = idp.issuer();
    let server = TestServer::start(
        &database,
        &format!(
            r#"
[identity]
mode = "oauth"
issuer = "{issuer}"
scopes = ["mcp"]
client_id = "gatehouse"
client_secret = "gatehouse-secret"
"#
        ),
    )
    .await;
    (idp, database, server)
}

/// Runs a client script to completion within [`CLIENT_TIMEOUT`] (killed when it runs over); the
/// one JSON object it printed.
async fn report(mut command: Command, what: &str) -> Value {
    command.kill_on_drop(true).stdin(std::process::Stdio::null());
    let output = tokio::time::timeout(CLIENT_TIMEOUT, command.output())
        .await
        .unwrap_or_else(|_| panic!("{what} did not finish within {CLIENT_TIMEOUT:?}"))
        .unwrap_or_else(|e| panic!("cannot run {what}: {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "{what} failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{what} printed no JSON report ({e}):\n{stdout}\n{stderr}"))
}

/// What every SDK must have achieved: a token for gatehouse's `/mcp` through one registration and
/// one PKCE code exchange, and a session that is alice's.
async fn assert_authorized(report: &Value, client: &str, idp: &FakeIdp, server: &TestServer, database: &TestDatabase) {
    let principal = format!("{}#alice", idp.issuer());
    assert_eq!(report["protocolVersion"], "2025-11-25", "{report}");
    assert!(
        report["tools"]
            .as_array()
            .is_some_and(|tools| tools.contains(&"whoami".into())),
        "{report}"
    );
    let whoami = &report["result"];
    assert_eq!(whoami["isError"], false, "{report}");
    assert_eq!(whoami["structuredContent"]["principal"], principal.as_str(), "{report}");
    assert_eq!(
        whoami["structuredContent"]["session"]["client"]["name"], client,
        "{report}"
    );

    // The SDK asked for gatehouse as the resource, with the scope the challenge named.
    assert_eq!(report["authorization"]["resource"], server.url.as_str(), "{report}");
    let scope = report["authorization"]["scope"].as_str().unwrap_or_default();
    assert!(scope.split(' ').any(|s| s == "mcp"), "{report}");

    let stats = idp.stats();
    assert_eq!(stats.registrations, 1, "{stats:?}");
    assert_eq!(stats.authorizations, 1, "{stats:?}");
    assert_eq!(stats.token_requests, 1, "{stats:?}");
    let token_request = idp.last_token_request().expect("a token request");
    let field = |name: &str| {
        token_request
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    };
    assert_eq!(field("grant_type"), Some("authorization_code"), "{token_request:?}");
    assert_eq!(field("resource"), Some(server.url.as_str()), "{token_request:?}");
    assert!(
        field("code_verifier").is_some_and(|verifier| (43..=128).contains(&verifier.len())),
        "{token_request:?}"
    );

    // The scripts leave their session open: gatehouse stored exactly one, and it is alice's.
    assert_eq!(database.query_count("SELECT COUNT(*) FROM sessions").await, 1);
    assert_eq!(
        database
            .query_count("SELECT COUNT(*) FROM sessions WHERE principal LIKE 'http://127.0.0.1:%/realms/test#alice'")
            .await,
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_authorizes_itself_and_calls_whoami() {
    let Some(python) = python_sdk().await else {
        return;
    };
    let (idp, database, server) = setup().await;
    let mut command = Command::new(python);
    command.arg(repo().join("tests/interop/python_oauth.py")).args([
        "--url",
        &server.url,
        "--call",
        "whoami",
        "--timeout",
        SCRIPT_TIMEOUT,
    ]);
    let report = report(command, "tests/interop/python_oauth.py").await;
    assert_authorized(&report, "gatehouse-interop-python-oauth", &idp, &server, &database).await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_typescript_sdk_authorizes_itself_and_calls_whoami() {
    let Some(stage) = stage_ts_sdk().await else {
        return;
    };
    let (idp, database, server) = setup().await;
    let mut command = Command::new("node");
    command
        .arg(repo().join("tests/interop/ts_oauth.mjs"))
        .arg("--sdk")
        .arg(&stage)
        .args(["--url", &server.url, "--call", "whoami", "--timeout", SCRIPT_TIMEOUT]);
    let report = report(command, "tests/interop/ts_oauth.mjs").await;
    assert_authorized(&report, "gatehouse-interop-ts-oauth", &idp, &server, &database).await;
    server.stop().await;
}
