//! `auth = "mcp"` against a hostile or broken remote server (the fake of `fake_mcp_auth`): metadata
//! that names another resource, an authorization server whose metadata names another issuer than
//! the resource metadata, a `resource_metadata` URL more internal than the server, an `iss` that
//! is not the authorization server's, and a registration that redirects or names other redirect
//! URIs. Each is refused with an error naming the reason, and nothing is stored: no registration,
//! no connection, no elicitation, and nothing sent to the authorization server's token endpoint.
//! A token endpoint whose name resolves to loopback after discovery gets nothing either. A proxy
//! for these requests is `[outbound] proxy` only: the environment's `HTTP(S)_PROXY` is ignored.

mod common;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use common::fake_mcp_auth::{FakeMcpAuth, FakeMcpAuthSetup, IssMode, McpAuthOptions, RegisterAnswer};
use common::recording_proxy::RecordingProxy;
use common::replica::Replica;
use common::{
    Backend, Browser, HEADER_IDENTITY, McpClient, TEST_KEY, TestDatabase, TestServer, elicitations, free_port, url_of,
};
use serde_json::{Value, json};

fn config(url: &str) -> String {
    format!(
        "{HEADER_IDENTITY}\n[[upstreams]]\nid = \"notes\"\nurl = \"{url}\"\nauth = \"mcp\"\ntools = [\"whoami\"]\ntimeout = \"10s\"\n"
    )
}

/// What alice's call to the upstream's tool answers, on a gatehouse of its own.
async fn call(database: &TestDatabase, fake: &FakeMcpAuth) -> (TestServer, common::mcp::Reply) {
    let server = TestServer::start(database, &config(&fake.mcp_url())).await;
    let client = server.eliciting_client("alice").await;
    let reply = client
        .request("tools/call", json!({"name": "notes_whoami", "arguments": {}}))
        .await;
    (server, reply)
}

/// The tool error of a refused call, which must name `reason`.
fn refused_with(reply: &common::mcp::Reply, reason: &str) {
    let result = &reply.body["result"];
    assert_eq!(result["isError"], json!(true), "{}", reply.body);
    let text = result["content"][0]["text"].as_str().unwrap_or_default();
    assert!(text.contains(reason), "{reason:?} not in {text:?}");
}

/// Nothing of the sign-in was kept, here or at the authorization server.
async fn nothing_stored(database: &TestDatabase, fake: &FakeMcpAuth) {
    for (table, sql) in [
        ("registrations", "SELECT COUNT(*) FROM oauth_registrations"),
        ("connections", "SELECT COUNT(*) FROM connections"),
        ("flows", "SELECT COUNT(*) FROM oauth_flows"),
    ] {
        assert_eq!(database.query_count(sql).await, 0, "{table}");
    }
    let stats = fake.stats();
    assert!(stats.token_requests.is_empty(), "{:?}", stats.token_requests);
    assert!(stats.mcp_methods.is_empty(), "{:?}", stats.mcp_methods);
}

/// What a probe changes in the fake.
type Setting = Box<dyn FnOnce(&mut McpAuthOptions)>;

/// A fake on 127.0.0.1 set up by `options`.
async fn fake_with(options: impl FnOnce(&mut McpAuthOptions)) -> FakeMcpAuth {
    let fake = FakeMcpAuth::start().await;
    fake.set_options(options);
    fake
}

/// This machine's first address that is not loopback, from `hostname -I`.
fn outside_address() -> Option<IpAddr> {
    let output = std::process::Command::new("hostname").arg("-I").output().ok()?;
    String::from_utf8_lossy(&output.stdout)
        .split_whitespace()
        .filter_map(|word| word.parse::<IpAddr>().ok())
        .find(|ip| ip.is_ipv4() && !ip.is_loopback())
}

/// A fake on this machine's address outside loopback (skipped loudly when there is none).
async fn fake_outside() -> Option<(IpAddr, FakeMcpAuth)> {
    let Some(host) = outside_address() else {
        common::python::unavailable("an address outside loopback", "`hostname -I` names none");
        return None;
    };
    let fake = FakeMcpAuth::start_with(FakeMcpAuthSetup {
        host: Some(host),
        ..FakeMcpAuthSetup::default()
    })
    .await;
    Some((host, fake))
}

backend_test!(
    async fn hostile_metadata_is_refused_before_anything_is_stored(backend: Backend) {
        let cases: [(&str, Setting); 4] = [
            (
                "is for \"http://127.0.0.1:1/mcp\"",
                Box::new(|o| {
                    o.prm_overrides
                        .insert("resource".into(), json!("http://127.0.0.1:1/mcp"));
                }),
            ),
            (
                "names the issuer \"http://127.0.0.1:9\"",
                Box::new(|o| {
                    o.as_metadata_overrides
                        .insert("issuer".into(), json!("http://127.0.0.1:9"));
                }),
            ),
            (
                "answered a redirect",
                Box::new(|o| o.register_answer = RegisterAnswer::RedirectElsewhere),
            ),
            (
                "redirect URIs other than gatehouse's own",
                Box::new(|o| o.register_answer = RegisterAnswer::AttackerRedirectUris),
            ),
        ];
        for (reason, options) in cases {
            let database = TestDatabase::new(backend).await;
            let fake = fake_with(options).await;
            let (server, reply) = call(&database, &fake).await;
            refused_with(&reply, reason);
            nothing_stored(&database, &fake).await;
            assert_eq!(
                database.query_count("SELECT COUNT(*) FROM elicitations").await,
                0,
                "{reason}"
            );
            server.stop().await;
        }
    }
);

backend_test!(
    /// A server on an address outside loopback whose 401 points its `resource_metadata` at
    /// gatehouse's own loopback: refused before it is fetched.
    async fn resource_metadata_more_internal_than_the_server_is_not_fetched(backend: Backend) {
        let Some((_, fake)) = fake_outside().await else {
            return;
        };
        // Refused before it is fetched, so no server need listen there.
        let inside = "http://127.0.0.1:9/.well-known/oauth-protected-resource/mcp".to_owned();
        fake.set_options(|o| o.resource_metadata_url = Some(inside));
        let database = TestDatabase::new(backend).await;
        let (server, reply) = call(&database, &fake).await;
        refused_with(&reply, "is on a loopback address, but the server is on a");
        nothing_stored(&database, &fake).await;
        assert!(
            fake.stats().discovery_requests.is_empty(),
            "{:?}",
            fake.stats().discovery_requests
        );
        server.stop().await;
    }
);

backend_test!(
    /// The authorization server's redirect names another issuer (RFC 9207 mix-up): the callback
    /// is refused, the code is never exchanged, no connection is stored and the request stays
    /// open for another try.
    async fn an_iss_that_is_not_the_authorization_servers_is_refused(backend: Backend) {
        let fake = fake_with(|o| o.iss = IssMode::Wrong).await;
        let database = TestDatabase::new(backend).await;
        let (server, reply) = call(&database, &fake).await;
        let asked = elicitations(&reply);
        let page = Browser::as_user("x-forwarded-user", "alice")
            .sign_in(&url_of(&asked[0]))
            .await;
        assert!(
            page.body
                .contains("The answer did not come from the expected provider."),
            "{}",
            page.body
        );
        assert_eq!(database.query_count("SELECT COUNT(*) FROM connections").await, 0);
        let stats = fake.stats();
        assert!(stats.token_requests.is_empty(), "{:?}", stats.token_requests);
        let pending = database
            .query_count("SELECT COUNT(*) FROM elicitations WHERE status = 'pending'")
            .await;
        assert_eq!(pending, 1);
        server.stop().await;
    }
);

/// Answers `rebind.test` with `first` until flipped, then with 127.0.0.1: a name that passes the
/// check at discovery and points at loopback later.
struct Rebinding {
    first: IpAddr,
    flipped: AtomicBool,
}

impl reqwest::dns::Resolve for Rebinding {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let answer = if self.flipped.load(Ordering::SeqCst) {
            IpAddr::V4(Ipv4Addr::LOCALHOST)
        } else {
            self.first
        };
        let known = name.as_str() == "rebind.test";
        Box::pin(async move {
            if !known {
                return Err("only rebind.test is known here".into());
            }
            let addrs: reqwest::dns::Addrs = Box::new(std::iter::once(SocketAddr::new(answer, 0)));
            Ok(addrs)
        })
    }
}

backend_test!(
    /// The authorization server's token endpoint is named by a name that resolves to the
    /// server's own (outside) address at discovery and to loopback at the code exchange: the
    /// exchange is refused, and nothing listening on loopback at that port is ever connected to.
    async fn a_token_endpoint_rebound_to_loopback_never_gets_the_code(backend: Backend) {
        let Some((host, fake)) = fake_outside().await else {
            return;
        };
        let port = url::Url::parse(fake.base_url()).expect("url").port().expect("a port");
        let inside = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, port))
            .await
            .expect("the fake's port is free on loopback too");
        let reached = Arc::new(AtomicUsize::new(0));
        let counted = reached.clone();
        let listening = tokio::spawn(async move {
            while let Ok((_stream, _)) = inside.accept().await {
                counted.fetch_add(1, Ordering::SeqCst);
            }
        });
        let token_endpoint = format!("http://rebind.test:{port}/token");
        fake.set_options(|o| {
            o.as_metadata_overrides
                .insert("token_endpoint".into(), json!(token_endpoint));
        });
        let resolver = Arc::new(Rebinding {
            first: host,
            flipped: AtomicBool::new(false),
        });
        let database = TestDatabase::new(backend).await;
        let server = TestServer::start_resolving(&database, &config(&fake.mcp_url()), resolver.clone()).await;
        let client = server.eliciting_client("alice").await;
        let reply = client
            .request("tools/call", json!({"name": "notes_whoami", "arguments": {}}))
            .await;
        let asked = elicitations(&reply);
        resolver.flipped.store(true, Ordering::SeqCst);
        Browser::as_user("x-forwarded-user", "alice")
            .sign_in(&url_of(&asked[0]))
            .await;
        assert_eq!(reached.load(Ordering::SeqCst), 0, "loopback got a connection");
        assert_eq!(database.query_count("SELECT COUNT(*) FROM connections").await, 0);
        assert!(fake.stats().token_requests.is_empty());
        listening.abort();
        server.stop().await;
    }
);

/// `gatehouse serve` of `database` with `toml` and `env`, on a port of its own.
async fn replica(database: &TestDatabase, toml: &str, env: &[(&str, &str)]) -> Replica {
    let port = free_port();
    let public_url = format!("http://127.0.0.1:{port}");
    Replica::start_with_env(&database.url, toml, port, &public_url, TEST_KEY, env).await
}

/// Alice calls the fake's tool through `replica`, signs in in the browser and calls again: the
/// tool's result.
async fn signed_in_through(replica: &Replica) -> Value {
    let mut client = McpClient::new(&replica.mcp()).with_user("x-forwarded-user", "alice");
    client
        .initialize_with("2025-11-25", json!({"elicitation": {"form": {}, "url": {}}}))
        .await;
    let call = json!({"name": "notes_whoami", "arguments": {}});
    let asked = elicitations(&client.request("tools/call", call.clone()).await);
    let page = Browser::as_user("x-forwarded-user", "alice")
        .sign_in(&url_of(&asked[0]))
        .await;
    assert_eq!(page.status, reqwest::StatusCode::OK, "{}", page.body);
    client.call("tools/call", call).await
}

/// What `proxy` carried of the sign-in at `fake`: discovery, registration, code exchange.
fn sign_in_requests(proxy: &RecordingProxy, fake: &FakeMcpAuth) -> Vec<String> {
    let endpoints = ["/.well-known/", "/register", "/token"];
    proxy
        .seen()
        .into_iter()
        .filter(|line| line.contains(fake.base_url()) && endpoints.iter().any(|e| line.contains(e)))
        .collect()
}

backend_test!(
    /// `HTTP_PROXY`, `HTTPS_PROXY` and `ALL_PROXY` in gatehouse's environment name a recording
    /// proxy: the sign-in's discovery, registration and code exchange never go through it (the
    /// MCP requests to the configured URL do). With `[outbound] proxy` naming it, each of them does.
    async fn sign_in_requests_go_through_the_configured_proxy_never_the_environments(backend: Backend) {
        let proxy = RecordingProxy::start().await;
        let fake = FakeMcpAuth::start().await;
        let database = TestDatabase::new(backend).await;
        let env: Vec<(&str, &str)> = gatehouse::outbound::ENVIRONMENT_PROXIES
            .iter()
            .map(|name| (*name, proxy.url.as_str()))
            .collect();
        let gatehouse = replica(&database, &config(&fake.mcp_url()), &env).await;
        let result = signed_in_through(&gatehouse).await;
        assert_ne!(result["isError"], true, "{result}");
        let stats = fake.stats();
        assert!(!stats.discovery_requests.is_empty() && stats.token_requests.len() == 1);
        assert_eq!(stats.registrations.len(), 1);
        let through = sign_in_requests(&proxy, &fake);
        assert!(through.is_empty(), "through the environment's proxy: {through:?}");
        // The environment was in force: the calls to the upstream's MCP endpoint itself (the
        // operator's own URL, not one a remote server named) went through its proxy.
        let mcp = format!("POST {} ", fake.mcp_url());
        assert!(
            proxy.seen().iter().any(|line| line.starts_with(&mcp)),
            "{:?}",
            proxy.seen()
        );
        gatehouse.stop().await;

        let fake = FakeMcpAuth::start().await;
        let database = TestDatabase::new(backend).await;
        let toml = format!("{}\n[outbound]\nproxy = \"{}\"\n", config(&fake.mcp_url()), proxy.url);
        let gatehouse = replica(&database, &toml, &[]).await;
        let result = signed_in_through(&gatehouse).await;
        assert_ne!(result["isError"], true, "{result}");
        let through = sign_in_requests(&proxy, &fake);
        for endpoint in [
            "/.well-known/oauth-protected-resource",
            "/.well-known/oauth-authorization-server",
            "/register",
            "/token",
        ] {
            assert!(
                through.iter().any(|line| line.contains(endpoint)),
                "{endpoint} not through [outbound] proxy: {:?}",
                proxy.seen()
            );
        }
        gatehouse.stop().await;
    }
);
