//! Behind a real proxy, as docker-compose.yml deploys gatehouse: Debian's Caddy runs the
//! repository's own deploy/Caddyfile, or deploy/Caddyfile.prefixed (gatehouse under /gatehouse/,
//! which `handle_path` strips), adapted to this machine (tests/common/caddy.rs), in front of two
//! replicas on PostgreSQL in header identity mode. The official SDK clients sign in through it
//! with basic auth, every URL and cookie path of the sign-in and of a form flow carries the
//! prefix, a forged identity header is replaced, and requests alternate between the replicas.
//! Without `caddy` on PATH the tests skip loudly (and fail under `CI=true`).

mod common;

use std::path::Path;

use common::caddy::{Caddy, DEMO_PASSWORD, DEMO_USER, adapt, basic_auth, caddy_binary, deploy_caddyfile};
use common::fake_oauth::{FakeOptions, FakeProvider};
use common::mcp_upstreams::stage_ts_sdk;
use common::python::{PythonScript, python_sdk};
use common::replica::Replica;
use common::web::{assert_cookie_path, assert_footer_under, assert_form_action, query_of};
use common::{Backend, Browser, McpClient, TEST_KEY, TestDatabase, elicitations, free_port, upstream, url_of};
use reqwest::StatusCode;
use serde_json::json;

/// The replicas as docker-compose.yml configures them (its GATEHOUSE_IDENTITY__* and
/// GATEHOUSE_SERVER__TRUSTED_PROXIES), Caddy's address being loopback here.
const BEHIND_CADDY: &str = r#"
[identity]
mode = "header"
header = "X-Forwarded-User"
[server]
trusted_proxies = ["127.0.0.1/32"]
"#;

/// Which of deploy/'s Caddyfiles runs, and so the path prefix of the replicas' public URL.
#[derive(Clone, Copy, Debug)]
enum Layout {
    /// deploy/Caddyfile: gatehouse is the whole site.
    Root,
    /// deploy/Caddyfile.prefixed: gatehouse under /gatehouse/, which `handle_path` strips.
    Prefixed,
}

impl Layout {
    fn caddyfile(self) -> String {
        deploy_caddyfile(match self {
            Layout::Root => "Caddyfile",
            Layout::Prefixed => "Caddyfile.prefixed",
        })
    }

    /// The path of the public URL: nothing, or `/gatehouse`.
    fn prefix(self) -> &'static str {
        match self {
            Layout::Root => "",
            Layout::Prefixed => "/gatehouse",
        }
    }

    /// The `Path` of the pages' cookies.
    fn cookie_path(self) -> &'static str {
        match self {
            Layout::Root => "/",
            Layout::Prefixed => "/gatehouse",
        }
    }
}

/// Caddy in front of replicas A and B of one PostgreSQL database, with the fake provider's `me`.
struct Deployment {
    layout: Layout,
    caddy: Caddy,
    /// The replicas' public URL: Caddy's address and the layout's prefix.
    public: String,
    a: Replica,
    b: Replica,
    _fake: FakeProvider,
    _database: TestDatabase,
}

/// The deployment of `layout`, the replicas configured with `more` besides, or None when there
/// is no `caddy` (after a loud skip).
async fn deploy(layout: Layout, more: &str) -> Option<Deployment> {
    let caddy = caddy_binary()?;
    let fake = FakeProvider::start(FakeOptions::default()).await;
    let database = TestDatabase::new(Backend::Postgres).await;
    let config = format!(
        "{BEHIND_CADDY}{}\n{more}",
        fake.configure(include_str!("fixtures/fake_provider.toml"))
    );
    let (proxy_port, a_port, b_port) = (free_port(), free_port(), free_port());
    let public = format!("http://127.0.0.1:{proxy_port}{}", layout.prefix());
    let a = Replica::start(&database.url, &config, a_port, &public, TEST_KEY).await;
    let b = Replica::start(&database.url, &config, b_port, &public, TEST_KEY).await;
    let upstreams = [format!("127.0.0.1:{a_port}"), format!("127.0.0.1:{b_port}")];
    let caddyfile = adapt(
        &layout.caddyfile(),
        proxy_port,
        &upstreams.each_ref().map(String::as_str),
    );
    let caddy = Caddy::start(&caddy, &caddyfile, proxy_port).await;
    Some(Deployment {
        layout,
        caddy,
        public,
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
    /// The MCP endpoint through Caddy.
    fn mcp(&self) -> String {
        format!("{}/mcp", self.public)
    }

    /// A browser that sends the demo user's basic auth with every request.
    fn browser(&self) -> Browser {
        Browser::as_user("authorization", &demo())
    }

    /// A raw MCP client with the demo user's basic auth, initialized.
    async fn client(&self) -> McpClient {
        let mut client = McpClient::new(&self.mcp()).with_user("authorization", &demo());
        client.initialize().await;
        client
    }

    /// An official SDK client (`interpreter` running `script`, `sdk_args` before the common
    /// arguments) calls `me` through Caddy with basic auth, is sent one URL, is told it was done
    /// and its retry has the result. Both replicas answered it.
    async fn an_sdk_signs_in(&self, interpreter: &Path, script: &str, sdk_args: &[&str]) {
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

    /// A browser signs in at the connect page `url` through Caddy, to the fake provider and back:
    /// the page, the form's action, the flow cookie's path, the redirect_uri sent to the provider
    /// and the callback it sends the browser to all carry the layout's prefix.
    async fn sign_in(&self, url: &str) {
        let prefix = self.layout.prefix();
        let id = url
            .strip_prefix(&format!("{}/connect/", self.public))
            .unwrap_or_else(|| panic!("the link goes through Caddy to {}/connect/: {url}", self.public));
        let browser = self.browser();
        let page = browser.get(url).await;
        assert_eq!(page.status, StatusCode::OK, "{}", page.body);
        assert_form_action(&page, &format!("{prefix}/connect/{id}"));
        let continued = browser.press(url, &self.caddy.base, "continue", &page.csrf()).await;
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

    /// Requests answered so far by A and by B.
    async fn answered(&self) -> (u64, u64) {
        (self.a.mcp_requests().await, self.b.mcp_requests().await)
    }
}

/// The official Python SDK, with basic auth, signs in through Caddy laid out as `layout`: -32042,
/// the browser, the completion notification on its GET stream, the retry.
async fn the_python_sdk_signs_in(layout: Layout) {
    let Some(python) = python_sdk().await else {
        return;
    };
    let Some(deployment) = deploy(layout, "").await else {
        return;
    };
    deployment
        .an_sdk_signs_in(&python, "tests/interop/python_elicitation.py", &[])
        .await;
}

/// The official TypeScript SDK, with basic auth in its requestInit headers, the same way.
async fn the_typescript_sdk_signs_in(layout: Layout) {
    let Some(stage) = stage_ts_sdk().await else {
        return;
    };
    let Some(deployment) = deploy(layout, "").await else {
        return;
    };
    let stage = stage.to_str().expect("UTF-8 path");
    deployment
        .an_sdk_signs_in(Path::new("node"), "tests/interop/ts_elicitation.mjs", &["--sdk", stage])
        .await;
}

postgres_test!(
    async fn the_python_sdk_signs_in_through_caddy() {
        the_python_sdk_signs_in(Layout::Root).await;
    }
);

postgres_test!(
    async fn the_python_sdk_signs_in_through_caddy_under_a_prefix() {
        the_python_sdk_signs_in(Layout::Prefixed).await;
    }
);

postgres_test!(
    async fn the_typescript_sdk_signs_in_through_caddy() {
        the_typescript_sdk_signs_in(Layout::Root).await;
    }
);

postgres_test!(
    async fn the_typescript_sdk_signs_in_through_caddy_under_a_prefix() {
        the_typescript_sdk_signs_in(Layout::Prefixed).await;
    }
);

postgres_test!(
    /// A form under /gatehouse/ through Caddy: the elicitation's URL, the page's action and
    /// footer carry the prefix, the answer lets the retried call through; replacing the values
    /// from /connections answers 303 to the prefixed list, and the next call has the new key.
    async fn a_form_flow_through_caddy_under_a_prefix() {
        let (upstream, seen) = upstream::recording().await;
        let forms = include_str!("fixtures/forms.toml").replace("UPSTREAM", &upstream.to_string());
        let Some(deployment) = deploy(Layout::Prefixed, &forms).await else {
            return;
        };
        let (public, origin) = (&deployment.public, &deployment.caddy.base);
        let prefix = Layout::Prefixed.prefix();
        let client = deployment.client().await;
        let keyed = json!({"name": "keyed", "arguments": {}});
        let last_key = || {
            let log = seen.lock().expect("log");
            let last = log.last().expect("a request upstream");
            last.header("authorization").map(str::to_owned)
        };

        let elicitation = elicitations(&client.request("tools/call", keyed.clone()).await).remove(0);
        let id = elicitation["elicitationId"].as_str().expect("id");
        let form_url = format!("{public}/forms/{id}");
        assert_eq!(url_of(&elicitation), form_url);
        let browser = deployment.browser();
        let page = browser.get(&form_url).await;
        assert_eq!(page.status, StatusCode::OK, "{}", page.body);
        assert_form_action(&page, &format!("{prefix}/forms/{id}"));
        assert_footer_under(&page, prefix);
        let csrf = page.csrf();
        let answers = [
            ("csrf", csrf.as_str()),
            ("org", "acme"),
            ("team", "Red Team"),
            ("api_key", "sk-behind-caddy"),
            ("action", "submit"),
        ];
        let saved = browser.post_form(&form_url, origin, &answers).await;
        assert_eq!(saved.status, StatusCode::OK, "{}", saved.body);
        assert!(saved.body.contains("<h1>Saved</h1>"), "{}", saved.body);
        let ran = client.call("tools/call", keyed.clone()).await;
        assert_eq!(ran["isError"], false, "{ran}");
        assert_eq!(last_key().as_deref(), Some("Bearer sk-behind-caddy"));

        let listed = browser.get(&format!("{public}/connections")).await;
        assert_eq!(listed.status, StatusCode::OK, "{}", listed.body);
        let replace_url = format!("{public}/connections/forms/key");
        assert!(
            listed
                .body
                .contains(&format!("<a href=\"{prefix}/connections/forms/key\">")),
            "{}",
            listed.body
        );
        let replace = browser.get(&replace_url).await;
        assert_form_action(&replace, &format!("{prefix}/connections/forms/key"));
        let csrf = replace.csrf();
        let replaced = browser
            .post_form(
                &replace_url,
                origin,
                &[
                    ("csrf", csrf.as_str()),
                    ("org", "personal"),
                    ("team", "Blue Team"),
                    ("api_key", "sk-replaced"),
                    ("action", "submit"),
                ],
            )
            .await;
        assert_eq!(replaced.status, StatusCode::SEE_OTHER, "{}", replaced.body);
        assert_eq!(replaced.location(), format!("{prefix}/connections"));
        let back = browser.get(&format!("{origin}{}", replaced.location())).await;
        assert_eq!(back.status, StatusCode::OK, "{}", back.body);
        let ran = client.call("tools/call", keyed).await;
        assert_eq!(ran["isError"], false, "{ran}");
        assert_eq!(last_key().as_deref(), Some("Bearer sk-replaced"));
    }
);

postgres_test!(
    /// deploy/Caddyfile.prefixed: the bare prefix redirects to gatehouse's landing page, which
    /// names the prefixed endpoint; the site's root is not gatehouse (`/mcp` there is Caddy's 404,
    /// reaching no replica).
    async fn the_prefixed_caddyfile_serves_only_the_prefix() {
        let Some(deployment) = deploy(Layout::Prefixed, "").await else {
            return;
        };
        let base = &deployment.caddy.base;
        let browser = deployment.browser();
        let bare = browser.get(&format!("{base}/gatehouse")).await;
        assert!(bare.status.is_redirection(), "{}: {}", bare.status, bare.body);
        assert_eq!(bare.location(), "/gatehouse/");
        let landing = browser.get(&format!("{base}{}", bare.location())).await;
        assert_eq!(landing.status, StatusCode::OK, "{}", landing.body);
        assert!(landing.body.contains(&deployment.mcp()), "{}", landing.body);

        let before = deployment.answered().await;
        let http = reqwest::Client::new();
        let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
        for request in [
            http.get(format!("{base}/mcp")),
            http.post(format!("{base}/mcp"))
                .header("content-type", "application/json")
                .header("accept", "application/json, text/event-stream")
                .body(initialize.to_string()),
        ] {
            let response = request.header("authorization", demo()).send().await.expect("/mcp");
            assert_eq!(response.status(), StatusCode::NOT_FOUND);
        }
        assert_eq!(
            deployment.answered().await,
            before,
            "/mcp at the root reaches no replica"
        );
    }
);

postgres_test!(
    /// A client that authenticates as demo but claims to be mallory in X-Forwarded-User is demo
    /// on either replica; without basic auth, or with a wrong password, Caddy answers 401 itself.
    async fn a_forged_identity_header_is_replaced_and_basic_auth_is_required() {
        let Some(deployment) = deploy(Layout::Root, "").await else {
            return;
        };
        let mut forger = McpClient::new(&deployment.mcp())
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
            let mut anonymous = McpClient::new(&deployment.mcp());
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
        let Some(deployment) = deploy(Layout::Root, "").await else {
            return;
        };
        let client = deployment.client().await;
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

/// The substitutions match both of the repository's files even on a machine without `caddy`.
#[test]
fn the_deploy_caddyfiles_adapt() {
    for layout in [Layout::Root, Layout::Prefixed] {
        let adapted = adapt(&layout.caddyfile(), 18080, &["127.0.0.1:1", "127.0.0.1:2"]);
        for expected in [
            "\tbasicauth {\n",
            "\tadmin off\n",
            "\n:18080 {\n",
            "reverse_proxy 127.0.0.1:1 127.0.0.1:2 {",
        ] {
            assert!(adapted.contains(expected), "{layout:?}: {expected:?} in:\n{adapted}");
        }
        assert!(!adapted.contains("stream_close_delay"), "{layout:?}: {adapted}");
    }
    let prefixed = adapt(&Layout::Prefixed.caddyfile(), 18080, &["127.0.0.1:1", "127.0.0.1:2"]);
    assert!(prefixed.contains("\thandle_path /gatehouse/* {\n"), "{prefixed}");
}

/// A Caddyfile the substitutions no longer fit is refused, not half adapted.
#[test]
#[should_panic(expected = "the Caddyfile changed")]
fn a_caddyfile_the_substitutions_do_not_fit_is_refused() {
    adapt(
        &Layout::Root.caddyfile().replace("\n:8080 {", "\n:9090 {"),
        18080,
        &["127.0.0.1:1", "127.0.0.1:2"],
    );
}
