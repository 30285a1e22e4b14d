//! Behind a real proxy, as docker-compose.yml deploys gatehouse: Debian's Caddy runs the
//! repository's own deploy/Caddyfile (adapted to this machine, tests/common/caddy.rs) in front of
//! two replicas on PostgreSQL in header identity mode. The official SDK clients sign in through
//! it with basic auth, a forged identity header is replaced, and requests alternate between the
//! replicas. Without `caddy` on PATH the tests skip loudly (and fail under `CI=true`).

mod common;

use std::path::Path;

use common::caddy::{Caddy, DEMO_PASSWORD, DEMO_USER, adapt, basic_auth, caddy_binary, deploy_caddyfile};
use common::fake_oauth::{FakeOptions, FakeProvider};
use common::mcp_upstreams::stage_ts_sdk;
use common::python::{PythonScript, python_sdk};
use common::replica::Replica;
use common::{Backend, Browser, McpClient, TEST_KEY, TestDatabase, free_port};
use reqwest::StatusCode;
use serde_json::{Value, json};

/// The replicas as docker-compose.yml configures them (its GATEHOUSE_IDENTITY__* and
/// GATEHOUSE_SERVER__TRUSTED_PROXIES), Caddy's address being loopback here.
const BEHIND_CADDY: &str = r#"
[identity]
mode = "header"
header = "X-Forwarded-User"
[server]
trusted_proxies = ["127.0.0.1/32"]
"#;

/// Caddy in front of replicas A and B of one PostgreSQL database, with the fake provider's `me`.
struct Deployment {
    caddy: Caddy,
    a: Replica,
    b: Replica,
    _fake: FakeProvider,
    _database: TestDatabase,
}

/// The deployment, or None when there is no `caddy` (after a loud skip).
async fn deploy() -> Option<Deployment> {
    let caddy = caddy_binary()?;
    let fake = FakeProvider::start(FakeOptions::default()).await;
    let database = TestDatabase::new(Backend::Postgres).await;
    let config = format!(
        "{BEHIND_CADDY}{}",
        fake.configure(include_str!("fixtures/fake_provider.toml"))
    );
    let (proxy_port, a_port, b_port) = (free_port(), free_port(), free_port());
    let public_url = format!("http://127.0.0.1:{proxy_port}");
    let a = Replica::start(&database.url, &config, a_port, &public_url, TEST_KEY).await;
    let b = Replica::start(&database.url, &config, b_port, &public_url, TEST_KEY).await;
    let upstreams = [format!("127.0.0.1:{a_port}"), format!("127.0.0.1:{b_port}")];
    let caddyfile = adapt(
        &deploy_caddyfile(),
        proxy_port,
        &upstreams.each_ref().map(String::as_str),
    );
    let caddy = Caddy::start(&caddy, &caddyfile, proxy_port).await;
    Some(Deployment {
        caddy,
        a,
        b,
        _fake: fake,
        _database: database,
    })
}

/// `Authorization` for the Caddyfile's demo user.
fn demo() -> String {
    basic_auth(DEMO_USER, DEMO_PASSWORD)
}

impl Deployment {
    /// Runs a client script (`interpreter` `script` `args`) that meets -32042; a browser with the
    /// demo user's basic auth signs in at every URL it is given, through Caddy to the fake provider
    /// and back. Every event the script printed.
    async fn run(&self, interpreter: &Path, script: &str, args: &[&str]) -> Vec<Value> {
        let mut script = PythonScript::start(interpreter, script, args);
        let mut events = Vec::new();
        while let Some(event) = script.next().await {
            if event["event"] == "elicitation" {
                let url = event["url"].as_str().expect("url");
                assert!(
                    url.starts_with(&format!("{}/", self.caddy.base)),
                    "the link goes through Caddy: {url}"
                );
                let page = Browser::as_user("authorization", &demo()).sign_in(url).await;
                assert_eq!(page.status, StatusCode::OK, "{}", page.body);
            }
            events.push(event);
        }
        script.succeeded().await;
        events
    }

    /// Requests answered so far by A and by B.
    async fn answered(&self) -> (u64, u64) {
        (self.a.mcp_requests().await, self.b.mcp_requests().await)
    }
}

/// The client was sent one URL, was told it was done, and its retry had the result.
fn assert_signed_in(events: &[Value]) {
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["event"].as_str()).collect();
    assert_eq!(kinds, ["elicitation", "completed", "result"], "{events:?}");
    assert_eq!(events[0]["elicitationId"], events[1]["elicitationId"]);
    assert_eq!(events[2]["result"]["isError"], false, "{events:?}");
    assert_eq!(events[2]["result"]["structuredContent"]["login"], "octocat");
}

postgres_test!(
    /// The official Python SDK, with basic auth, signs in through Caddy: -32042, the browser, the
    /// completion notification on its GET stream, the retry. Both replicas took part.
    async fn the_python_sdk_signs_in_through_caddy() {
        let Some(python) = python_sdk().await else {
            return;
        };
        let Some(deployment) = deploy().await else {
            return;
        };
        let credentials = format!("{DEMO_USER}:{DEMO_PASSWORD}");
        let mcp = deployment.caddy.mcp();
        let events = deployment
            .run(
                &python,
                "tests/interop/python_elicitation.py",
                &[
                    "--url",
                    &mcp,
                    "--basic-auth",
                    &credentials,
                    "--call",
                    "me",
                    "--timeout",
                    "60",
                ],
            )
            .await;
        assert_signed_in(&events);
        let (a, b) = deployment.answered().await;
        assert!(a > 0 && b > 0, "both replicas answered the client: A {a}, B {b}");
    }
);

postgres_test!(
    /// The official TypeScript SDK, with basic auth in its requestInit headers, signs in through
    /// Caddy the same way.
    async fn the_typescript_sdk_signs_in_through_caddy() {
        let Some(stage) = stage_ts_sdk().await else {
            return;
        };
        let Some(deployment) = deploy().await else {
            return;
        };
        let credentials = format!("{DEMO_USER}:{DEMO_PASSWORD}");
        let mcp = deployment.caddy.mcp();
        let stage = stage.to_str().expect("UTF-8 path");
        let events = deployment
            .run(
                Path::new("node"),
                "tests/interop/ts_elicitation.mjs",
                &[
                    "--sdk",
                    stage,
                    "--url",
                    &mcp,
                    "--basic-auth",
                    &credentials,
                    "--call",
                    "me",
                    "--timeout",
                    "60",
                ],
            )
            .await;
        assert_signed_in(&events);
        let (a, b) = deployment.answered().await;
        assert!(a > 0 && b > 0, "both replicas answered the client: A {a}, B {b}");
    }
);

postgres_test!(
    /// A client that authenticates as demo but claims to be mallory in X-Forwarded-User is demo
    /// on either replica; without basic auth, or with a wrong password, Caddy answers 401 itself.
    async fn a_forged_identity_header_is_replaced_and_basic_auth_is_required() {
        let Some(deployment) = deploy().await else {
            return;
        };
        let mut forger = McpClient::new(&deployment.caddy.mcp())
            .with_user("authorization", &demo())
            .with_header("X-Forwarded-User", "mallory");
        forger.initialize().await;
        for _ in 0..2 {
            let whoami = forger
                .call("tools/call", json!({"name": "whoami", "arguments": {}}))
                .await;
            assert_eq!(whoami["structuredContent"]["principal"], "demo", "{whoami}");
        }

        let (before_a, before_b) = deployment.answered().await;
        for authorization in [None, Some(basic_auth(DEMO_USER, "not-the-password"))] {
            let mut anonymous = McpClient::new(&deployment.caddy.mcp());
            if let Some(authorization) = &authorization {
                anonymous = anonymous.with_user("authorization", authorization);
            }
            let reply = anonymous
                .with_header("X-Forwarded-User", "demo")
                .request("tools/list", json!({}))
                .await;
            assert_eq!(reply.status, StatusCode::UNAUTHORIZED, "{authorization:?}");
            assert!(
                reply
                    .headers
                    .get("www-authenticate")
                    .and_then(|v| v.to_str().ok())
                    .is_some_and(|v| v.starts_with("Basic")),
                "{:?}",
                reply.headers
            );
        }
        assert_eq!(
            deployment.answered().await,
            (before_a, before_b),
            "refused requests reach no replica"
        );
    }
);

postgres_test!(
    /// Caddy's round_robin: one session's requests go to A and B in turn, any replica serving any
    /// request of it (sessions live in PostgreSQL).
    async fn requests_alternate_between_the_replicas() {
        let Some(deployment) = deploy().await else {
            return;
        };
        let mut client = McpClient::new(&deployment.caddy.mcp()).with_user("authorization", &demo());
        client.initialize().await;
        let (before_a, before_b) = deployment.answered().await;
        for _ in 0..10 {
            let whoami = client
                .call("tools/call", json!({"name": "whoami", "arguments": {}}))
                .await;
            assert_eq!(whoami["structuredContent"]["principal"], "demo", "{whoami}");
        }
        let (a, b) = deployment.answered().await;
        assert_eq!((a - before_a, b - before_b), (5, 5), "ten calls, five on each replica");
    }
);

/// The substitutions match the repository's file even on a machine without `caddy`.
#[test]
fn the_deploy_caddyfile_adapts() {
    let adapted = adapt(&deploy_caddyfile(), 18080, &["127.0.0.1:1", "127.0.0.1:2"]);
    for expected in [
        "\tbasicauth {\n",
        "\tadmin off\n",
        "\n:18080 {\n",
        "reverse_proxy 127.0.0.1:1 127.0.0.1:2 {",
    ] {
        assert!(adapted.contains(expected), "{expected:?} in:\n{adapted}");
    }
    assert!(!adapted.contains("stream_close_delay"), "{adapted}");
}

/// A Caddyfile the substitutions no longer fit is refused, not half adapted.
#[test]
#[should_panic(expected = "the Caddyfile changed")]
fn a_caddyfile_the_substitutions_do_not_fit_is_refused() {
    adapt(
        &deploy_caddyfile().replace("\n:8080 {", "\n:9090 {"),
        18080,
        &["127.0.0.1:1", "127.0.0.1:2"],
    );
}
