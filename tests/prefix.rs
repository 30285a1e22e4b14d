//! gatehouse under a path prefix: `server.public_url = "http://127.0.0.1:PORT/gatehouse/"`. The
//! whole OAuth flow, a form flow and `oauth` identity mode's metadata, each through the URLs
//! gatehouse generates, reached directly (every request carries the prefix) and as behind Caddy's
//! `handle_path /gatehouse/*` (the proxy strips it), on PostgreSQL and SQLite. Every generated
//! URL, link, form action, redirect and cookie path must carry the prefix.

mod common;

use std::collections::HashMap;

use common::fake_idp::{FakeIdp, FakeIdpOptions, TestClient, TestUser};
use common::fake_oauth::{FakeOptions, FakeProvider};
use common::web::{assert_cookie_path, assert_footer_under, assert_form_action, query_of};
use common::{Backend, Browser, McpClient, TestDatabase, TestServer, elicitations, eventually, upstream, url_of};
use reqwest::StatusCode;
use serde_json::{Value, json};

const PREFIX: &str = "/gatehouse";

/// How requests reach gatehouse.
#[derive(Clone, Copy, Debug)]
enum Route {
    /// As generated: directly, or through a proxy that keeps the path (`handle /gatehouse/*`).
    Direct,
    /// Through a proxy that strips the prefix (`handle_path /gatehouse/*`).
    Stripped,
}

impl Route {
    /// Where a request for `url`, a URL under the public URL, arrives.
    fn reach(self, url: &str) -> String {
        let parsed = url::Url::parse(url).expect("url");
        assert!(parsed.path().starts_with(PREFIX), "{url} is not under the prefix");
        match self {
            Route::Direct => url.to_owned(),
            Route::Stripped => url.replacen(PREFIX, "", 1),
        }
    }
}

/// gatehouse with `toml`, its public URL under the prefix (written with a trailing slash, which
/// is dropped), on a port known beforehand.
async fn start(database: &TestDatabase, toml: &str) -> TestServer {
    TestServer::start_addressed(database, |addr| {
        format!("[server]\npublic_url = \"http://{addr}{PREFIX}/\"\n{toml}")
    })
    .await
}

/// The public URL as gatehouse writes it: the origin and the prefix.
fn public(server: &TestServer) -> String {
    format!("{}{PREFIX}", server.base())
}

async fn client(server: &TestServer, route: Route) -> McpClient {
    let mut client = McpClient::new(&route.reach(&format!("{}/mcp", public(server))));
    client.initialize().await;
    client
}

async fn the_whole_oauth_flow(backend: Backend, route: Route) {
    let fake = FakeProvider::start(FakeOptions::default()).await;
    let database = TestDatabase::new(backend).await;
    let server = start(&database, &fake.configure(include_str!("fixtures/fake_hub.toml"))).await;
    let public = public(&server);
    let client = client(&server, route).await;

    let me = json!({"name": "me", "arguments": {}});
    let elicitation = elicitations(&client.request("tools/call", me.clone()).await).remove(0);
    let id = elicitation["elicitationId"].as_str().expect("id");
    let connect_url = format!("{public}/connect/{id}");
    assert_eq!(url_of(&elicitation), connect_url);

    let browser = Browser::new();
    let page = browser.get(&route.reach(&connect_url)).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    assert_form_action(&page, &format!("{PREFIX}/connect/{id}"));
    assert_footer_under(&page, PREFIX);
    let continued = browser
        .press(&route.reach(&connect_url), &server.base(), "continue", &page.csrf())
        .await;
    assert_eq!(continued.status, StatusCode::SEE_OTHER, "{}", continued.body);
    assert_cookie_path(&continued, PREFIX);
    let authorize = continued.location();
    let query = query_of(&authorize);
    assert_eq!(query["redirect_uri"], format!("{public}/oauth/callback"));
    let callback = browser.authorize(&authorize).await;
    assert!(callback.starts_with(&format!("{public}/oauth/callback?")), "{callback}");
    let done = browser.get(&route.reach(&callback)).await;
    assert_eq!(done.status, StatusCode::OK, "{}", done.body);
    assert!(done.body.contains("octocat"), "{}", done.body);
    assert!(
        done.body
            .contains(&format!("<a href=\"{PREFIX}/connections\">See your connections</a>")),
        "{}",
        done.body
    );
    assert_cookie_path(&done, PREFIX);

    let retried = client.call("tools/call", me).await;
    assert_eq!(retried["structuredContent"]["login"], "octocat", "{retried}");

    let connections = browser.get(&route.reach(&format!("{public}/connections"))).await;
    assert_eq!(connections.status, StatusCode::OK, "{}", connections.body);
    assert_form_action(&connections, &format!("{PREFIX}/connections"));
    let landing = browser.get(&route.reach(&format!("{public}/"))).await;
    assert!(landing.body.contains(&format!("{public}/mcp")), "{}", landing.body);
    for probe in ["/healthz", "/readyz", "/healthz/instance"] {
        for at in [server.base(), public.clone()] {
            // Readiness may lag on a loaded machine (the bus still connecting, a slow database
            // answer): what counts is that the probe is routed there and comes to say ready.
            let url = format!("{at}{probe}");
            eventually(&format!("{url} answers 200"), async || {
                let answer = reqwest::get(&url).await.ok()?;
                (answer.status() == StatusCode::OK).then_some(())
            })
            .await;
        }
    }
    server.stop().await;
}

backend_test!(
    async fn the_whole_oauth_flow_under_a_prefix_reached_directly(backend: Backend) {
        the_whole_oauth_flow(backend, Route::Direct).await;
    }
);

backend_test!(
    async fn the_whole_oauth_flow_under_a_prefix_the_proxy_strips(backend: Backend) {
        the_whole_oauth_flow(backend, Route::Stripped).await;
    }
);

async fn a_form_flow(backend: Backend, route: Route) {
    let (upstream, seen) = upstream::recording().await;
    let database = TestDatabase::new(backend).await;
    let forms = include_str!("fixtures/forms.toml").replace("UPSTREAM", &upstream.to_string());
    let server = start(&database, &forms).await;
    let public = public(&server);
    let client = client(&server, route).await;

    let keyed = json!({"name": "keyed", "arguments": {}});
    let elicitation = elicitations(&client.request("tools/call", keyed.clone()).await).remove(0);
    let id = elicitation["elicitationId"].as_str().expect("id");
    let form_url = format!("{public}/forms/{id}");
    assert_eq!(url_of(&elicitation), form_url);

    let browser = Browser::new();
    let page = browser.get(&route.reach(&form_url)).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    assert_form_action(&page, &format!("{PREFIX}/forms/{id}"));
    assert_footer_under(&page, PREFIX);
    let answers = [("org", "acme"), ("team", "Red Team"), ("api_key", "sk-prefixed")];
    let mut posted = vec![("csrf", page.csrf())];
    posted.extend(answers.iter().map(|(k, v)| (*k, (*v).to_owned())));
    posted.push(("action", "submit".to_owned()));
    let posted: Vec<(&str, &str)> = posted.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let saved = browser
        .post_form(&route.reach(&form_url), &server.base(), &posted)
        .await;
    assert_eq!(saved.status, StatusCode::OK, "{}", saved.body);
    assert!(saved.body.contains("<h1>Saved</h1>"), "{}", saved.body);
    assert_footer_under(&saved, PREFIX);

    let ran = client.call("tools/call", keyed).await;
    assert_eq!(ran["isError"], false, "{ran}");
    let last = seen.lock().expect("log").last().cloned().expect("a request upstream");
    assert_eq!(last.header("authorization"), Some("Bearer sk-prefixed"));

    let listed = browser.get(&route.reach(&format!("{public}/connections"))).await;
    assert_eq!(listed.status, StatusCode::OK, "{}", listed.body);
    assert!(
        listed
            .body
            .contains(&format!("<a href=\"{PREFIX}/connections/forms/key\">")),
        "{}",
        listed.body
    );
    let replace_url = format!("{public}/connections/forms/key");
    let replace = browser.get(&route.reach(&replace_url)).await;
    assert_form_action(&replace, &format!("{PREFIX}/connections/forms/key"));
    let cancelled = browser
        .post_form(
            &route.reach(&replace_url),
            &server.base(),
            &[("csrf", replace.csrf().as_str()), ("action", "cancel")],
        )
        .await;
    assert_eq!(cancelled.status, StatusCode::SEE_OTHER, "{}", cancelled.body);
    assert_eq!(cancelled.location(), format!("{PREFIX}/connections"));
    server.stop().await;
}

backend_test!(
    async fn a_form_flow_under_a_prefix_reached_directly(backend: Backend) {
        a_form_flow(backend, Route::Direct).await;
    }
);

backend_test!(
    async fn a_form_flow_under_a_prefix_the_proxy_strips(backend: Backend) {
        a_form_flow(backend, Route::Stripped).await;
    }
);

/// `[identity]` in `oauth` mode at `idp`.
fn oauth_identity(idp: &FakeIdp) -> String {
    format!(
        "[identity]\nmode = \"oauth\"\nissuer = \"{}\"\nscopes = [\"mcp\"]\nclient_id = \"gatehouse\"\n\
         client_secret = \"gatehouse-secret\"\n",
        idp.issuer()
    )
}

async fn idp_with_alice() -> FakeIdp {
    let idp = FakeIdp::start(FakeIdpOptions::default()).await;
    idp.add_user(TestUser {
        sub: "alice".to_owned(),
        name: "Alice Example".to_owned(),
        email: "alice@acme.test".to_owned(),
        groups: Vec::new(),
    });
    idp
}

backend_test!(
    /// In `oauth` mode a browser without a session is sent to the prefixed /login, signs in at the
    /// provider with the prefixed callback, and comes back to the prefixed page, its cookies scoped
    /// to the prefix.
    async fn the_pages_sign_in_under_a_prefix(backend: Backend) {
        let idp = idp_with_alice().await;
        idp.sign_in_as("alice");
        let database = TestDatabase::new(backend).await;
        let note = "[[forms]]\nid = \"note\"\ntitle = \"A note\"\n[[forms.fields]]\nname = \"text\"\nlabel = \"Note\"\n\
                    type = \"text\"\n\n[[tools]]\nname = \"noted\"\ndescription = \"Needs a note\"\n\
                    requires = [\"form:note\"]\nhttp = { url = \"http://127.0.0.1:9/\" }\n";
        let server = start(&database, &format!("{}\n{note}", oauth_identity(&idp))).await;
        let public = public(&server);
        idp.register_client(TestClient {
            id: "gatehouse".to_owned(),
            secret: Some("gatehouse-secret".to_owned()),
            redirect_uris: vec![format!("{public}/login/callback")],
        });
        let token = idp.access_token("alice", &format!("{public}/mcp"), "mcp");
        for route in [Route::Direct, Route::Stripped] {
            let mut client = McpClient::new(&route.reach(&format!("{public}/mcp")))
                .with_user("Authorization", &format!("Bearer {token}"));
            client.initialize().await;
            let reply = client.request("tools/call", json!({"name": "noted"})).await;
            let url = url_of(&elicitations(&reply)[0]);
            let id = url.rsplit('/').next().expect("id").to_owned();
            assert_eq!(url, format!("{public}/forms/{id}"));

            let browser = Browser::new();
            let first = browser.get(&route.reach(&url)).await;
            assert_eq!(first.status, StatusCode::SEE_OTHER, "{}", first.body);
            assert_eq!(first.location(), format!("{PREFIX}/login?next=%2Fforms%2F{id}"));
            let login = browser
                .get(&route.reach(&format!("{}{}", server.base(), first.location())))
                .await;
            assert_eq!(login.status, StatusCode::FOUND, "{}", login.body);
            assert_cookie_path(&login, PREFIX);
            let authorize = url::Url::parse(&login.location()).expect("authorize url");
            let query: HashMap<String, String> = authorize.query_pairs().into_owned().collect();
            assert_eq!(query["redirect_uri"], format!("{public}/login/callback"));
            let callback = browser.authorize(authorize.as_str()).await;
            let signed_in = browser.get(&route.reach(&callback)).await;
            assert_eq!(signed_in.status, StatusCode::SEE_OTHER, "{}", signed_in.body);
            assert_eq!(signed_in.location(), format!("{PREFIX}/forms/{id}"));
            assert_cookie_path(&signed_in, PREFIX);
            let form = browser.get(&route.reach(&url)).await;
            assert_eq!(form.status, StatusCode::OK, "{}", form.body);
            assert_form_action(&form, &format!("{PREFIX}/forms/{id}"));
            let logout = browser.get(&route.reach(&format!("{public}/logout"))).await;
            assert_form_action(&logout, &format!("{PREFIX}/logout"));
        }
        server.stop().await;
    }
);

/// In `oauth` identity mode the challenge names metadata under the prefix (which a proxy that
/// forwards only the prefix passes on), RFC 9728's own location at the host's root answers too,
/// and a token for the prefixed `/mcp` is accepted.
#[tokio::test]
async fn oauth_identity_metadata_under_a_prefix() {
    let idp = idp_with_alice().await;
    let database = TestDatabase::new(Backend::Sqlite).await;
    let server = start(&database, &oauth_identity(&idp)).await;
    let public = public(&server);
    let resource = format!("{public}/mcp");
    let metadata_url = format!("{public}/.well-known/oauth-protected-resource/mcp");
    for route in [Route::Direct, Route::Stripped] {
        let anonymous = McpClient::new(&route.reach(&resource));
        let body = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
        let refused = anonymous.post_raw(&body, &[]).await;
        assert_eq!(refused.status, StatusCode::UNAUTHORIZED, "{route:?}");
        let challenge = refused.headers["www-authenticate"].to_str().expect("ascii");
        assert!(
            challenge.contains(&format!("resource_metadata=\"{metadata_url}\"")),
            "{challenge}"
        );
        // RFC 9728 3.1's location, at the host's root, and the same path inside the prefix.
        let rfc_9728 = format!("/.well-known/oauth-protected-resource{PREFIX}/mcp");
        let at_root = format!("{}{rfc_9728}", server.base());
        for url in [
            route.reach(&metadata_url),
            at_root,
            route.reach(&format!("{public}{rfc_9728}")),
        ] {
            let response = reqwest::get(&url).await.expect("metadata");
            assert_eq!(response.status(), StatusCode::OK, "{url}");
            let document: Value = response.json().await.expect("json");
            assert_eq!(document["resource"], json!(resource), "{url}");
        }
        let token = idp.access_token("alice", &resource, "mcp");
        let mut client = McpClient::new(&route.reach(&resource)).with_user("Authorization", &format!("Bearer {token}"));
        client.initialize().await;
    }
    server.stop().await;
}
