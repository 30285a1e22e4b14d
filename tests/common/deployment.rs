//! gatehouse as the deployment chapter deploys it, behind whichever reverse proxy a test starts in
//! front of it (Caddy, nginx): two replicas on one PostgreSQL database in header identity mode
//! with the fake provider's `me`, and what tests check through any such proxy: an official SDK
//! signs in, a browser signs in under the layout's prefix, a forged identity header is replaced,
//! and which replica answered.

use std::path::Path;

use reqwest::StatusCode;
use serde_json::json;

use super::caddy::{DEMO_PASSWORD, DEMO_USER, basic_auth};
use super::fake_oauth::{FakeOptions, FakeProvider};
use super::python::PythonScript;
use super::replica::Replica;
use super::web::{assert_cookie_path, assert_form_action, query_of};
use super::{Backend, Browser, McpClient, TEST_KEY, TestDatabase, free_port};

/// The replicas as docker-compose.yml configures them (its GATEHOUSE_IDENTITY__* and
/// GATEHOUSE_SERVER__TRUSTED_PROXIES), the proxy's address being loopback here.
pub const BEHIND_A_PROXY: &str = r#"
[identity]
mode = "header"
header = "X-Forwarded-User"
[server]
trusted_proxies = ["127.0.0.1/32"]
"#;

/// Where the proxy serves gatehouse, and so the path prefix of the replicas' public URL.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// gatehouse is the whole site (deploy/Caddyfile, deploy/nginx/gatehouse.conf).
    Root,
    /// gatehouse under /gatehouse/, which the proxy strips (deploy/Caddyfile.prefixed,
    /// deploy/nginx/gatehouse-prefixed.conf).
    Prefixed,
}

impl Layout {
    /// The path of the public URL: nothing, or `/gatehouse`.
    pub fn prefix(self) -> &'static str {
        match self {
            Layout::Root => "",
            Layout::Prefixed => "/gatehouse",
        }
    }

    /// The `Path` of the pages' cookies.
    pub fn cookie_path(self) -> &'static str {
        match self {
            Layout::Root => "/",
            Layout::Prefixed => "/gatehouse",
        }
    }
}

/// A proxy in front of replicas A and B of one PostgreSQL database, with the fake provider's `me`.
pub struct Deployment {
    pub layout: Layout,
    /// The proxy's origin, `http://127.0.0.1:PORT`.
    pub base: String,
    /// The replicas' public URL: the proxy's origin and the layout's prefix.
    pub public: String,
    pub a: Replica,
    pub b: Replica,
    /// The proxy's process, stopped when the deployment is dropped.
    _proxy: Box<dyn Send + Sync>,
    _fake: FakeProvider,
    _database: TestDatabase,
}

/// `Authorization` for the demo user of the repository's proxy configurations.
pub fn demo() -> String {
    basic_auth(DEMO_USER, DEMO_PASSWORD)
}

impl Deployment {
    /// Starts the replicas with `config` (identity, trusted proxies: [`BEHIND_A_PROXY`], and
    /// whatever else the test needs) and `env` besides, and then the proxy: `proxy` gets the port
    /// it must listen on and the replicas' `host:port`, and returns its running process.
    pub async fn start<P: Send + Sync + 'static>(
        layout: Layout,
        config: &str,
        env: &[(&str, &str)],
        proxy: impl AsyncFnOnce(u16, [&str; 2]) -> P,
    ) -> Self {
        let fake = FakeProvider::start(FakeOptions::default()).await;
        let database = TestDatabase::new(Backend::Postgres).await;
        let config = format!(
            "{config}\n{}",
            fake.configure(include_str!("../fixtures/fake_provider.toml"))
        );
        let (proxy_port, a_port, b_port) = (free_port(), free_port(), free_port());
        let base = format!("http://127.0.0.1:{proxy_port}");
        let public = format!("{base}{}", layout.prefix());
        let a = Replica::start_with_env(&database.url, &config, a_port, &public, TEST_KEY, env).await;
        let b = Replica::start_with_env(&database.url, &config, b_port, &public, TEST_KEY, env).await;
        let upstreams = [format!("127.0.0.1:{a_port}"), format!("127.0.0.1:{b_port}")];
        let proxy = proxy(proxy_port, upstreams.each_ref().map(String::as_str)).await;
        Self {
            layout,
            base,
            public,
            a,
            b,
            _proxy: Box::new(proxy),
            _fake: fake,
            _database: database,
        }
    }

    /// The MCP endpoint through the proxy.
    pub fn mcp(&self) -> String {
        format!("{}/mcp", self.public)
    }

    /// A browser that sends the demo user's basic auth with every request.
    pub fn browser(&self) -> Browser {
        Browser::as_user("authorization", &demo())
    }

    /// A raw MCP client with the demo user's basic auth, initialized.
    pub async fn client(&self) -> McpClient {
        let mut client = McpClient::new(&self.mcp()).with_user("authorization", &demo());
        client.initialize().await;
        client
    }

    /// An official SDK client (`interpreter` running `script`, `sdk_args` before the common
    /// arguments) calls `me` through the proxy with basic auth, is sent one URL, is told it was
    /// done and its retry has the result. Both replicas answered it.
    pub async fn an_sdk_signs_in(&self, interpreter: &Path, script: &str, sdk_args: &[&str]) {
        let credentials = format!("{DEMO_USER}:{DEMO_PASSWORD}");
        let mcp = self.mcp();
        let mut args = sdk_args.to_vec();
        args.extend([
            "--url",
            &mcp,
            "--basic-auth",
            &credentials,
            "--call",
            "me",
            "--timeout",
            "60",
        ]);
        let mut script = PythonScript::start(interpreter, script, &args);
        let mut events = Vec::new();
        while let Some(event) = script.next().await {
            if event["event"] == "elicitation" {
                self.sign_in(event["url"].as_str().expect("url")).await;
            }
            events.push(event);
        }
        script.succeeded().await;

        let kinds: Vec<&str> = events.iter().filter_map(|e| e["event"].as_str()).collect();
        assert_eq!(kinds, ["elicitation", "completed", "result"], "{events:?}");
        assert_eq!(events[0]["elicitationId"], events[1]["elicitationId"]);
        assert_eq!(events[2]["result"]["isError"], false, "{events:?}");
        assert_eq!(events[2]["result"]["structuredContent"]["login"], "octocat");
        let (a, b) = self.answered().await;
        assert!(a > 0 && b > 0, "both replicas answered the client: A {a}, B {b}");
    }

    /// A browser signs in at the connect page `url` through the proxy, to the fake provider and
    /// back: the page, the form's action, the flow cookie's path, the redirect_uri sent to the
    /// provider and the callback it sends the browser to all carry the layout's prefix.
    pub async fn sign_in(&self, url: &str) {
        let prefix = self.layout.prefix();
        let id = url
            .strip_prefix(&format!("{}/connect/", self.public))
            .unwrap_or_else(|| panic!("the link goes through the proxy to {}/connect/: {url}", self.public));
        let browser = self.browser();
        let page = browser.get(url).await;
        assert_eq!(page.status, StatusCode::OK, "{}", page.body);
        assert_form_action(&page, &format!("{prefix}/connect/{id}"));
        let continued = browser.press(url, &self.base, "continue", &page.csrf()).await;
        assert_eq!(continued.status, StatusCode::SEE_OTHER, "{}", continued.body);
        assert_cookie_path(&continued, self.layout.cookie_path());
        let authorize = continued.location();
        let query = query_of(&authorize);
        assert_eq!(query["redirect_uri"], format!("{}/oauth/callback", self.public));
        let callback = browser.authorize(&authorize).await;
        assert!(
            callback.starts_with(&format!("{}/oauth/callback?", self.public)),
            "{callback}"
        );
        let done = browser.get(&callback).await;
        assert_eq!(done.status, StatusCode::OK, "{}", done.body);
        assert!(done.body.contains("<h1>Connected</h1>"), "{}", done.body);
        assert_cookie_path(&done, self.layout.cookie_path());
    }

    /// A client that authenticates as demo but claims to be mallory in X-Forwarded-User is demo on
    /// either replica; without basic auth, or with a wrong password, the proxy answers 401 (Basic)
    /// itself, and no replica sees the request.
    pub async fn a_forged_identity_header_is_replaced_and_sign_in_is_required(&self) {
        let mut forger = McpClient::new(&self.mcp())
            .with_user("authorization", &demo())
            .with_header("X-Forwarded-User", "mallory");
        forger.initialize().await;
        for _ in 0..2 {
            let whoami = forger
                .call("tools/call", json!({"name": "whoami", "arguments": {}}))
                .await;
            assert_eq!(whoami["structuredContent"]["principal"], "demo", "{whoami}");
        }

        let before = self.answered().await;
        let http = reqwest::Client::new();
        let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}});
        for authorization in [None, Some(basic_auth(DEMO_USER, "not-the-password"))] {
            let mut request = http
                .post(self.mcp())
                .header("content-type", "application/json")
                .header("accept", "application/json, text/event-stream")
                .header("x-forwarded-user", "demo")
                .body(list.to_string());
            if let Some(authorization) = &authorization {
                request = request.header("authorization", authorization);
            }
            let reply = request.send().await.expect("POST /mcp");
            assert_eq!(reply.status(), StatusCode::UNAUTHORIZED, "{authorization:?}");
            assert!(
                reply
                    .headers()
                    .get("www-authenticate")
                    .and_then(|v| v.to_str().ok())
                    .is_some_and(|v| v.starts_with("Basic")),
                "{:?}",
                reply.headers()
            );
        }
        assert_eq!(self.answered().await, before, "refused requests reach no replica");
    }

    /// Requests answered so far by A and by B.
    pub async fn answered(&self) -> (u64, u64) {
        (self.a.mcp_requests().await, self.b.mcp_requests().await)
    }
}
