//! URL-mode elicitation with third-party OAuth: the whole flow against a fake provider that is a
//! real HTTP server on loopback, on PostgreSQL and SQLite.

mod common;

use std::time::Duration;

use common::fake_oauth::{AuthorizeOutcome, FakeOptions, FakeProvider};
use common::{
    Backend, Browser, HEADER_IDENTITY, McpClient, Reply, SseStream, TestDatabase, TestServer, WAIT, captured_logs,
    elicitations, logged_text, text, url_of,
};
use reqwest::StatusCode;
use serde_json::{Value, json};

/// Fake Hub (the fake provider) and the tools `me` and `me_write`, which need it.
fn gatehouse_config(fake: &FakeProvider) -> String {
    fake.configure(include_str!("fixtures/fake_hub.toml"))
}

struct Setup {
    database: TestDatabase,
    server: TestServer,
    fake: FakeProvider,
    client: McpClient,
}

/// The fake provider, and gatehouse on a database of its own with Fake Hub's configuration
/// adjusted by `edit`. The server stops answering sign-ins when the provider is dropped.
async fn start(
    backend: Backend,
    options: FakeOptions,
    edit: impl FnOnce(String) -> String,
) -> (FakeProvider, TestDatabase, TestServer) {
    captured_logs();
    let fake = FakeProvider::start(options).await;
    let database = TestDatabase::new(backend).await;
    let server = TestServer::start(&database, &edit(gatehouse_config(&fake))).await;
    (fake, database, server)
}

/// [`start`] with an initialized client.
async fn setup_with(backend: Backend, options: FakeOptions, edit: impl FnOnce(String) -> String) -> Setup {
    let (fake, database, server) = start(backend, options, edit).await;
    let mut client = server.client();
    client.initialize().await;
    Setup {
        database,
        server,
        fake,
        client,
    }
}

async fn setup(backend: Backend) -> Setup {
    setup_with(backend, FakeOptions::default(), |toml| toml).await
}

/// A setup whose user has signed in to Fake Hub through the `me` tool, with the client's stream
/// open.
async fn signed_in(backend: Backend, options: FakeOptions) -> (Setup, SseStream) {
    let s = setup_with(backend, options, |toml| toml).await;
    let mut stream = s.client.open_stream(None).await;
    connect(&s, &mut stream, "me").await;
    (s, stream)
}

async fn call(client: &McpClient, tool: &str) -> Reply {
    client
        .request("tools/call", json!({"name": tool, "arguments": {}}))
        .await
}

/// The first elicitation a call of `tool` answers with.
async fn elicitation_for(client: &McpClient, tool: &str) -> Value {
    elicitations(&call(client, tool).await).remove(0)
}

/// A new browser signs in through the elicitation's link; the callback page must answer 200.
async fn sign_in(elicitation: &Value) {
    let page = Browser::new().sign_in(&url_of(elicitation)).await;
    assert_eq!(page.status, StatusCode::OK, "callback page: {}", page.body);
}

/// Calls the built-in `disconnect` tool for Fake Hub.
async fn disconnect(client: &McpClient) -> Value {
    client
        .call(
            "tools/call",
            json!({"name": "disconnect", "arguments": {"provider": "fake"}}),
        )
        .await
}

/// Runs the tool until it needs a sign-in, signs in with a new browser, and waits for the
/// completion notification on `stream`. Returns the elicitation id.
async fn connect(setup: &Setup, stream: &mut SseStream, tool: &str) -> String {
    let elicitation = elicitation_for(&setup.client, tool).await;
    sign_in(&elicitation).await;
    let id = elicitation["elicitationId"].as_str().expect("id").to_owned();
    let (_, message) = stream.next_message(WAIT).await.expect("completion notification");
    assert_eq!(
        message,
        json!({"jsonrpc": "2.0", "method": "notifications/elicitation/complete", "params": {"elicitationId": id}})
    );
    id
}

backend_test!(
    async fn the_whole_flow_runs_the_tool_with_the_users_token(backend: Backend) {
        let s = setup(backend).await;
        let mut stream = s.client.open_stream(None).await;
        let first = call(&s.client, "me").await;
        let listed = elicitations(&first);
        assert_eq!(listed.len(), 1);
        let elicitation = &listed[0];
        assert_eq!(elicitation["mode"], "url");
        let id = elicitation["elicitationId"].as_str().expect("id");
        assert_eq!(uuid::Uuid::parse_str(id).expect("a UUID").get_version_num(), 7);
        assert_eq!(elicitation["url"], format!("{}/connect/{id}", s.server.base()));
        assert!(elicitation["message"].as_str().is_some_and(|m| m.contains("Fake Hub")));
        // Asking again while it is pending reuses it.
        let again = elicitations(&call(&s.client, "me").await);
        assert_eq!(again[0]["elicitationId"], elicitation["elicitationId"]);

        let browser = Browser::new();
        let page = browser.get(&url_of(elicitation)).await;
        assert_eq!(page.status, StatusCode::OK);
        for header in [
            "content-security-policy",
            "cache-control",
            "referrer-policy",
            "x-frame-options",
        ] {
            assert!(page.headers.contains_key(header), "the connect page sends {header}");
        }
        assert!(
            page.headers["content-security-policy"]
                .to_str()
                .expect("csp")
                .contains("frame-ancestors 'none'")
        );
        assert!(
            page.body.contains("gatehouse-tests") && page.body.contains("Fake Hub") && page.body.contains("127.0.0.1")
        );
        let page = browser.sign_in(&url_of(elicitation)).await;
        assert_eq!(page.status, StatusCode::OK, "{}", page.body);
        assert!(
            page.body.contains("octocat") && page.body.contains("gatehouse-tests"),
            "{}",
            page.body
        );

        let (event, message) = stream.next_message(WAIT).await.expect("completion notification");
        assert!(event.id.is_some());
        assert_eq!(message["method"], "notifications/elicitation/complete");
        assert_eq!(message["params"]["elicitationId"], id);

        let retried = s
            .client
            .call("tools/call", json!({"name": "me", "arguments": {}}))
            .await;
        assert_eq!(retried["isError"], false, "{retried}");
        assert_eq!(retried["structuredContent"]["login"], "octocat");
        let stats = s.fake.stats();
        assert_eq!(
            stats.api_bearer_tokens.last(),
            stats.issued_access_tokens.first(),
            "the API saw the user's token"
        );
        let authorize: std::collections::HashMap<_, _> = stats.last_authorize_query.iter().cloned().collect();
        assert_eq!(authorize["code_challenge_method"], "S256");
        assert_eq!(authorize["scope"], "read");
        assert_eq!(authorize["redirect_uri"], format!("{}/oauth/callback", s.server.base()));

        let whoami = s.client.call("tools/call", json!({"name": "whoami"})).await;
        let connection = &whoami["structuredContent"]["connections"][0];
        assert_eq!(
            (connection["provider"].clone(), connection["account"].clone()),
            (json!("fake"), json!("octocat"))
        );
        assert_eq!(connection["scopes"], json!(["read"]));

        // No token in plaintext at rest, in any MCP answer, or in a log line.
        let secrets: Vec<String> = stats
            .issued_access_tokens
            .iter()
            .chain(&stats.issued_refresh_tokens)
            .cloned()
            .collect();
        assert!(!secrets.is_empty());
        let stored = s.database.everything_stored().await;
        let answers = format!("{}{}{}{}", first.body, retried, whoami, message);
        let logs = logged_text();
        for secret in &secrets {
            assert!(
                !stored.windows(secret.len()).any(|w| w == secret.as_bytes()),
                "a token is stored in plaintext"
            );
            assert!(!answers.contains(secret.as_str()), "a token reached an MCP answer");
            assert!(!logs.contains(secret.as_str()), "a token reached the logs");
        }
        s.server.stop().await;
    }
);

backend_test!(
    async fn clients_without_url_mode_get_a_result_with_the_link(backend: Backend) {
        let s = setup(backend).await;
        let mut plain = s.server.client();
        plain.initialize_with("2025-06-18", json!({"elicitation": {}})).await;
        let result = plain.call("tools/call", json!({"name": "me"})).await;
        assert_eq!(result["isError"], true);
        let shown = text(&result);
        assert!(
            shown.contains(&format!("{}/connect/", s.server.base())) && shown.contains("call this tool again"),
            "{shown}"
        );
        s.server.stop().await;
    }
);

backend_test!(
    async fn another_users_browser_is_refused_and_nothing_is_bound(backend: Backend) {
        let (_fake, database, server) = start(backend, FakeOptions::default(), |toml| {
            format!("{toml}{HEADER_IDENTITY}")
        })
        .await;
        let alice = server.client();
        let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {"elicitation": {"url": {}}}}});
        let reply = alice.post_raw(&init, &[("x-forwarded-user", "alice")]).await;
        let alice = McpClient {
            session: Some(reply.headers["mcp-session-id"].to_str().expect("id").to_owned()),
            ..alice
        };
        let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "me"}});
        let elicitation = elicitations(&alice.post_raw(&call, &[("x-forwarded-user", "alice")]).await).remove(0);
        let url = &url_of(&elicitation);

        let bob = Browser::as_user("x-forwarded-user", "bob");
        let page = bob.get(url).await;
        assert_eq!(page.status, StatusCode::FORBIDDEN);
        assert!(page.body.contains("another user"));
        let alices_page = Browser::as_user("x-forwarded-user", "alice").get(url).await;
        let post = bob.press(url, &server.base(), "continue", &alices_page.csrf()).await;
        assert_eq!(post.status, StatusCode::FORBIDDEN, "even with a valid form token");
        let decline = bob.press(url, &server.base(), "decline", &alices_page.csrf()).await;
        assert_eq!(decline.status, StatusCode::FORBIDDEN);
        assert_eq!(
            database.query_count("SELECT COUNT(*) FROM oauth_flows").await,
            0,
            "no flow was started"
        );
        assert_eq!(
            database
                .query_count("SELECT COUNT(*) FROM elicitations WHERE status = 'pending'")
                .await,
            1
        );
        // Alice's own forged form (no valid token, or from another site) is refused too.
        let alice_browser = Browser::as_user("x-forwarded-user", "alice");
        let forged = alice_browser.press(url, &server.base(), "continue", "forged").await;
        assert_eq!(forged.status, StatusCode::FORBIDDEN);
        let cross_site = alice_browser
            .press(url, "https://evil.example", "continue", &alices_page.csrf())
            .await;
        assert_eq!(cross_site.status, StatusCode::FORBIDDEN);
        assert_eq!(
            Browser::new().get(url).await.status,
            StatusCode::UNAUTHORIZED,
            "no identity, no page"
        );
        assert_eq!(database.query_count("SELECT COUNT(*) FROM oauth_flows").await, 0);

        // A callback started by Alice cannot be finished by Bob's browser, even with her cookie.
        let authorize = alice_browser.continue_to_provider(url).await;
        let callback = alice_browser.authorize(&authorize).await;
        let cookie = alice_browser.cookie_header();
        let stolen = reqwest::Client::new()
            .get(&callback)
            .header("cookie", cookie)
            .header("x-forwarded-user", "bob")
            .send()
            .await
            .expect("callback");
        assert_eq!(stolen.status(), StatusCode::BAD_REQUEST);
        assert_eq!(
            database.query_count("SELECT COUNT(*) FROM connections").await,
            0,
            "nothing bound to Bob or Alice"
        );
        assert_eq!(
            alice_browser.get(&callback).await.status,
            StatusCode::OK,
            "Alice can still finish"
        );
        assert_eq!(
            database
                .query_count("SELECT COUNT(*) FROM connections WHERE principal = 'alice'")
                .await,
            1
        );
        let replayed = Browser::as_user("x-forwarded-user", "bob").get(&callback).await;
        assert_eq!(
            replayed.status,
            StatusCode::BAD_REQUEST,
            "Bob learns nothing of Alice's sign-in"
        );
        assert!(!replayed.body.contains("connected"), "{}", replayed.body);
        server.stop().await;
    }
);

backend_test!(
    async fn tampered_replayed_and_unbound_callbacks_are_refused(backend: Backend) {
        let s = setup(backend).await;
        let elicitation = elicitation_for(&s.client, "me").await;
        let url = &url_of(&elicitation);
        let browser = Browser::new();
        let authorize = browser.continue_to_provider(url).await;
        let callback = browser.authorize(&authorize).await;

        let stranger = Browser::new();
        let no_cookie = stranger.get(&callback).await;
        assert_eq!(no_cookie.status, StatusCode::BAD_REQUEST);
        assert!(no_cookie.body.contains("another browser"));
        let parsed = url::Url::parse(&callback).expect("callback url");
        let cookie_name = browser.cookie_header().split('=').next().expect("cookie").to_owned();
        let wrong_cookie = reqwest::Client::new()
            .get(&callback)
            .header("cookie", format!("{cookie_name}=forged"))
            .send()
            .await
            .expect("get");
        assert_eq!(wrong_cookie.status(), StatusCode::BAD_REQUEST);
        let mut tampered = parsed.clone();
        tampered
            .query_pairs_mut()
            .clear()
            .append_pair("state", "tampered")
            .append_pair("code", "x");
        assert_eq!(browser.get(tampered.as_str()).await.status, StatusCode::BAD_REQUEST);
        assert_eq!(
            browser.get(&format!("{}/oauth/callback", s.server.base())).await.status,
            StatusCode::BAD_REQUEST
        );
        assert_eq!(
            s.database.query_count("SELECT COUNT(*) FROM connections").await,
            0,
            "nothing stored"
        );
        assert_eq!(
            s.fake.stats().code_exchanges,
            0,
            "no code was exchanged for a refused callback"
        );

        assert_eq!(browser.get(&callback).await.status, StatusCode::OK);
        let replay = reqwest::Client::new()
            .get(&callback)
            .header("cookie", format!("{cookie_name}={}", "x"))
            .send()
            .await
            .expect("get");
        // A replay changes nothing; to the flow's own user it says what is true (issue 9, item 15).
        assert_eq!(replay.status(), StatusCode::OK);
        assert!(replay.text().await.expect("body").contains("is connected"));
        let replay_same_browser = Browser::new();
        let again = replay_same_browser.get(&callback).await;
        assert_eq!(again.status, StatusCode::OK);
        assert_eq!(s.fake.stats().code_exchanges, 1, "a replayed state exchanges nothing");

        assert_eq!(
            browser
                .get(&format!("{}/connect/not-a-uuid", s.server.base()))
                .await
                .status,
            StatusCode::NOT_FOUND
        );
        let unknown = format!("{}/connect/{}", s.server.base(), uuid::Uuid::now_v7());
        assert_eq!(browser.get(&unknown).await.status, StatusCode::NOT_FOUND);
        assert_eq!(
            browser.get(url).await.status,
            StatusCode::GONE,
            "a completed elicitation"
        );
        s.server.stop().await;
    }
);

backend_test!(
    async fn expired_elicitations_are_refused(backend: Backend) {
        let s = setup(backend).await;
        let elicitation = elicitation_for(&s.client, "me").await;
        let url = url_of(&elicitation);
        let browser = Browser::new();
        let authorize = browser.continue_to_provider(&url).await;
        let callback = browser.authorize(&authorize).await;
        s.database.expire_elicitations().await;
        assert_eq!(browser.get(&url).await.status, StatusCode::GONE);
        let late = browser.get(&callback).await;
        assert_eq!(late.status, StatusCode::BAD_REQUEST);
        assert!(late.body.contains("expired"));
        assert_eq!(s.database.query_count("SELECT COUNT(*) FROM connections").await, 0);
        // The sweeper marks it expired; the next call asks afresh.
        s.server.state.gate.sweep().await.expect("sweep");
        assert_eq!(
            s.database
                .query_count("SELECT COUNT(*) FROM elicitations WHERE status = 'expired'")
                .await,
            1
        );
        let fresh = elicitation_for(&s.client, "me").await;
        assert_ne!(fresh["elicitationId"], elicitation["elicitationId"]);
        s.server.stop().await;
    }
);

backend_test!(
    async fn forged_identity_headers_from_untrusted_addresses_are_refused(backend: Backend) {
        let untrusted = HEADER_IDENTITY.replace("127.0.0.1/32", "10.9.9.9/32");
        let (_fake, database, server) =
            start(backend, FakeOptions::default(), |toml| format!("{toml}{untrusted}")).await;
        let page = Browser::as_user("x-forwarded-user", "alice")
            .get(&format!("{}/connect/{}", server.base(), uuid::Uuid::now_v7()))
            .await;
        assert_eq!(page.status, StatusCode::UNAUTHORIZED);
        let callback = Browser::as_user("x-forwarded-user", "alice")
            .get(&format!("{}/oauth/callback?state=x&code=y", server.base()))
            .await;
        assert_eq!(callback.status, StatusCode::UNAUTHORIZED);
        assert_eq!(database.query_count("SELECT COUNT(*) FROM oauth_flows").await, 0);
        server.stop().await;
    }
);

backend_test!(
    async fn declining_reports_once_then_asks_again(backend: Backend) {
        let s = setup(backend).await;
        let mut stream = s.client.open_stream(None).await;
        let elicitation = elicitation_for(&s.client, "me").await;
        let url = &url_of(&elicitation);
        let browser = Browser::new();
        let page = browser.get(url).await;
        let declined = browser.press(url, &s.server.base(), "decline", &page.csrf()).await;
        assert_eq!(declined.status, StatusCode::OK);
        let (_, message) = stream
            .next_message(WAIT)
            .await
            .expect("completion notification for a decline");
        assert_eq!(message["params"]["elicitationId"], elicitation["elicitationId"]);
        let retried = s.client.call("tools/call", json!({"name": "me"})).await;
        assert_eq!(retried["isError"], true);
        assert!(text(&retried).contains("declined"), "{retried}");
        let later = elicitation_for(&s.client, "me").await;
        assert_ne!(
            later["elicitationId"], elicitation["elicitationId"],
            "a later call elicits afresh"
        );
        // Declining twice changes and sends nothing the second time.
        let second = browser.press(url, &s.server.base(), "decline", &page.csrf()).await;
        assert_eq!(second.status, StatusCode::GONE);
        assert!(stream.next_message(Duration::from_millis(500)).await.is_none());
        s.server.stop().await;
    }
);

backend_test!(
    /// A decline at the provider ends the elicitation. Any other error (issue 9, item 10), at the
    /// callback or at the token endpoint, is the provider's fault: logged at WARN with the provider
    /// and the error code, a plain page naming the provider and linking back to the connect page,
    /// which still works: nothing was stored and the request is still open.
    async fn provider_errors_leave_the_request_open_with_the_way_back(backend: Backend) {
        let s = setup(backend).await;
        let mut stream = s.client.open_stream(None).await;
        let browser = Browser::new();
        s.fake.set_authorize_outcome(AuthorizeOutcome::Deny);
        let denied = elicitation_for(&s.client, "me").await;
        let page = browser.sign_in(&url_of(&denied)).await;
        assert_eq!(page.status, StatusCode::OK);
        assert!(page.body.contains("declined"));
        let (_, message) = stream.next_message(WAIT).await.expect("completion notification");
        assert_eq!(message["params"]["elicitationId"], denied["elicitationId"]);
        assert_eq!(
            s.database
                .query_count("SELECT COUNT(*) FROM elicitations WHERE status = 'declined'")
                .await,
            1
        );
        let reported = s.client.call("tools/call", json!({"name": "me"})).await;
        assert_eq!(reported["isError"], true);

        s.fake.set_authorize_outcome(AuthorizeOutcome::Fail);
        let failing = elicitation_for(&s.client, "me").await;
        let connect_url = url_of(&failing);
        let page = browser.sign_in(&connect_url).await;
        assert_eq!(page.status, StatusCode::BAD_GATEWAY);
        assert!(
            page.body
                .contains("Fake Hub answered with an error: it had a problem on its side (server_error)."),
            "{}",
            page.body
        );
        assert!(
            page.body.contains(&format!("<a href=\"{connect_url}\">")),
            "the way back: {}",
            page.body
        );
        let id = failing["elicitationId"].as_str().expect("id");
        let logs = logged_text();
        let logged = logs
            .lines()
            .find(|line| line.contains("the provider answered the sign-in with an error") && line.contains(id))
            .unwrap_or_else(|| panic!("the provider's error is logged: {logs}"));
        assert!(
            logged.contains("WARN") && logged.contains("provider=fake") && logged.contains("error=server_error"),
            "{logged}"
        );
        let ours = logs.lines().find(|line| {
            line.contains("ERROR") && line.contains("response failed") && line.contains("502 Bad Gateway")
        });
        assert!(ours.is_none(), "a provider's error is not logged as ours: {ours:?}");

        // The token endpoint refuses the code: the same page, with its error.
        s.fake.set_authorize_outcome(AuthorizeOutcome::Approve);
        s.fake.set_options(|o| o.client_secret = "rotated".into());
        let page = browser.sign_in(&connect_url).await;
        assert_eq!(page.status, StatusCode::BAD_GATEWAY);
        assert!(page.body.contains("(invalid_client)"), "{}", page.body);
        assert!(
            page.body.contains(&format!("<a href=\"{connect_url}\">")),
            "{}",
            page.body
        );
        assert_eq!(s.database.query_count("SELECT COUNT(*) FROM connections").await, 0);
        assert_eq!(
            s.database
                .query_count("SELECT COUNT(*) FROM elicitations WHERE status = 'pending'")
                .await,
            1
        );

        // The way back works: the same request, signed in, and the client told.
        assert!(
            stream.next_message(Duration::from_millis(500)).await.is_none(),
            "the client is told nothing while the request is open"
        );
        s.fake.set_options(|o| o.client_secret = "fake-secret".into());
        let page = browser.sign_in(&connect_url).await;
        assert_eq!(page.status, StatusCode::OK, "{}", page.body);
        let (_, message) = stream.next_message(WAIT).await.expect("completion notification");
        assert_eq!(message["params"]["elicitationId"], failing["elicitationId"]);
        s.server.stop().await;
    }
);

backend_test!(
    /// Issue 9, item 14: the sweeper expires the elicitation while a callback that started in time
    /// waits for a slow code exchange. The connection is saved with the elicitation's completion:
    /// the page says connected and the client is told, exactly once.
    async fn a_sign_in_that_started_in_time_completes_its_elicitation(backend: Backend) {
        let s = setup(backend).await;
        let mut stream = s.client.open_stream(None).await;
        let elicitation = elicitation_for(&s.client, "me").await;
        let browser = Browser::new();
        let authorize = browser.continue_to_provider(&url_of(&elicitation)).await;
        let callback = browser.authorize(&authorize).await;
        let hold = s.fake.hold_code_exchanges();
        let page = tokio::spawn(async move { browser.get(&callback).await });
        hold.arrived().await;
        s.database.expire_during_callback().await;
        hold.release();
        let page = page.await.expect("callback");
        assert_eq!(page.status, StatusCode::OK, "{}", page.body);
        assert!(page.body.contains("is connected"), "{}", page.body);
        let (_, message) = stream.next_message(WAIT).await.expect("completion notification");
        assert_eq!(message["params"]["elicitationId"], elicitation["elicitationId"]);
        assert!(
            stream.next_message(Duration::from_millis(500)).await.is_none(),
            "told once"
        );
        assert_eq!(s.database.query_count("SELECT COUNT(*) FROM connections").await, 1);
        assert_eq!(
            s.database
                .query_count("SELECT COUNT(*) FROM elicitations WHERE status = 'completed'")
                .await,
            1
        );
        s.server.stop().await;
    }
);

backend_test!(
    /// Issue 9, item 15: a reload of the callback after the sign-in (the page lost, the server
    /// killed after the commit) says what is true: connected.
    async fn a_reloaded_callback_after_a_sign_in_says_connected(backend: Backend) {
        let s = setup(backend).await;
        let elicitation = elicitation_for(&s.client, "me").await;
        let browser = Browser::new();
        let authorize = browser.continue_to_provider(&url_of(&elicitation)).await;
        let callback = browser.authorize(&authorize).await;
        let cookie = browser.cookie_header();
        let first = browser.get(&callback).await;
        assert_eq!(first.status, StatusCode::OK, "{}", first.body);
        // The browser's cookie is dropped with the first answer; one that never got it keeps it.
        for (what, reload) in [
            ("reload", browser.get(&callback).await),
            ("retry with the cookie", with_cookie(&callback, &cookie).await),
        ] {
            assert_eq!(reload.status, StatusCode::OK, "{what}: {}", reload.body);
            assert!(reload.body.contains("is connected"), "{what}: {}", reload.body);
            assert!(
                reload
                    .body
                    .contains("<a href=\"/connections\">See your connections</a>"),
                "{what}: {}",
                reload.body
            );
        }
        s.server.stop().await;
    }
);

/// A GET carrying exactly this Cookie header, as a browser that never saw the answer would send.
async fn with_cookie(url: &str, cookie: &str) -> common::Page {
    let response = reqwest::Client::new()
        .get(url)
        .header("cookie", cookie)
        .send()
        .await
        .expect("request");
    let status = response.status();
    let headers = response.headers().clone();
    let body = response.text().await.expect("body");
    common::Page { status, headers, body }
}

backend_test!(
    /// Issue 9, item 15: the database fails after the flow was used. The page says the sign-in did
    /// not finish and links back to the connect page; a reload says nothing was stored, with the
    /// same way back, which works once the database does.
    async fn a_sign_in_the_database_failed_to_finish_says_so_with_the_way_back(backend: Backend) {
        let s = setup(backend).await;
        let mut stream = s.client.open_stream(None).await;
        let elicitation = elicitation_for(&s.client, "me").await;
        let connect_url = url_of(&elicitation);
        let way_back = format!("<a href=\"{connect_url}\">Start the sign-in again</a>");
        let browser = Browser::new();
        let authorize = browser.continue_to_provider(&connect_url).await;
        let callback = browser.authorize(&authorize).await;
        let hold = s.fake.hold_code_exchanges();
        let pending = {
            let callback = callback.clone();
            tokio::spawn(async move { (browser.get(&callback).await, browser) })
        };
        hold.arrived().await;
        s.database
            .execute("ALTER TABLE connections RENAME TO connections_away")
            .await;
        hold.release();
        let (page, browser) = pending.await.expect("callback");
        // A failed statement is ours (500); only a database outage answers 503.
        assert_eq!(page.status, StatusCode::INTERNAL_SERVER_ERROR, "{}", page.body);
        assert!(page.body.contains("the sign-in did not finish"), "{}", page.body);
        assert!(page.body.contains(&way_back), "{}", page.body);
        s.database
            .execute("ALTER TABLE connections_away RENAME TO connections")
            .await;

        let reload = browser.get(&callback).await;
        assert_eq!(reload.status, StatusCode::BAD_REQUEST, "{}", reload.body);
        assert!(reload.body.contains("already used"), "{}", reload.body);
        assert!(reload.body.contains("Nothing was stored."), "{}", reload.body);
        assert!(reload.body.contains(&way_back), "{}", reload.body);

        // The next exchange goes through at once.
        hold.release();
        let page = browser.sign_in(&connect_url).await;
        assert_eq!(page.status, StatusCode::OK, "{}", page.body);
        let (_, message) = stream.next_message(WAIT).await.expect("completion notification");
        assert_eq!(message["params"]["elicitationId"], elicitation["elicitationId"]);
        s.server.stop().await;
    }
);

backend_test!(
    async fn expired_tokens_are_refreshed_once_at_a_time(backend: Backend) {
        let options = FakeOptions {
            access_token_ttl: Some(1),
            refresh_delay_ms: 300,
            rotate_refresh_tokens: false,
            ..FakeOptions::default()
        };
        let (s, _stream) = signed_in(backend, options).await;
        let calls: Vec<_> = (0..4)
            .map(|_| {
                let client = s.client.clone();
                tokio::spawn(async move { client.call("tools/call", json!({"name": "me"})).await })
            })
            .collect();
        for call in calls {
            let result = call.await.expect("join");
            assert_eq!(result["isError"], false, "{result}");
        }
        let stats = s.fake.stats();
        assert!(stats.refreshes >= 1);
        assert_eq!(stats.concurrent_refresh_peak, 1, "one refresh per connection at a time");
        assert_eq!(
            stats.issued_refresh_tokens.len(),
            1,
            "the provider sent no new refresh token; the old one was kept"
        );
        let last_seen = stats.api_bearer_tokens.last().expect("a bearer token");
        assert_ne!(
            Some(last_seen),
            stats.issued_access_tokens.first(),
            "calls used a refreshed token"
        );
        s.server.stop().await;
    }
);

backend_test!(
    async fn a_refused_token_or_refresh_breaks_the_connection_and_elicits_again(backend: Backend) {
        let (s, _stream) = signed_in(backend, FakeOptions::default()).await;
        s.fake.revoke_everything();
        let again = elicitations(&call(&s.client, "me").await);
        assert_eq!(again.len(), 1, "a provider 401 makes the call elicit again");
        assert_eq!(
            s.database
                .query_count("SELECT COUNT(*) FROM connections WHERE status = 'broken'")
                .await,
            1
        );
        let whoami = s.client.call("tools/call", json!({"name": "whoami"})).await;
        assert_eq!(whoami["structuredContent"]["connections"][0]["status"], "needs sign-in");

        let options = FakeOptions {
            access_token_ttl: Some(1),
            ..FakeOptions::default()
        };
        let (s, _stream) = signed_in(backend, options).await;
        s.fake.revoke_everything();
        assert_eq!(
            elicitations(&call(&s.client, "me").await).len(),
            1,
            "a refused refresh elicits again"
        );
        s.server.stop().await;
    }
);

backend_test!(
    async fn more_scopes_ask_for_the_union(backend: Backend) {
        let (s, _stream) = signed_in(backend, FakeOptions::default()).await;
        let step_up = elicitation_for(&s.client, "me_write").await;
        assert!(
            step_up["message"]
                .as_str()
                .is_some_and(|m| m.contains("read") && m.contains("write")),
            "{step_up}"
        );
        sign_in(&step_up).await;
        let authorize: std::collections::HashMap<_, _> = s.fake.stats().last_authorize_query.into_iter().collect();
        assert_eq!(authorize["scope"], "read write");
        assert_eq!(
            s.client.call("tools/call", json!({"name": "me_write"})).await["isError"],
            false
        );
        assert_eq!(
            s.client.call("tools/call", json!({"name": "me"})).await["isError"],
            false,
            "the union covers both"
        );
        s.server.stop().await;
    }
);

backend_test!(
    async fn disconnect_removes_and_revokes(backend: Backend) {
        let (s, _stream) = signed_in(backend, FakeOptions::default()).await;
        let result = disconnect(&s.client).await;
        assert_eq!(result["isError"], false, "{result}");
        assert!(text(&result).contains("revoked"));
        assert_eq!(s.fake.stats().revocations, 1);
        assert_eq!(s.database.query_count("SELECT COUNT(*) FROM connections").await, 0);
        let none = disconnect(&s.client).await;
        assert_eq!(none["isError"], true);
        assert_eq!(elicitations(&call(&s.client, "me").await).len(), 1);
        s.server.stop().await;
    }
);

backend_test!(
    async fn a_client_away_at_completion_gets_the_notification_when_it_returns(backend: Backend) {
        let s = setup(backend).await;
        let elicitation = elicitation_for(&s.client, "me").await;
        sign_in(&elicitation).await;
        let mut stream = s.client.open_stream(None).await;
        let (_, message) = stream
            .next_message(WAIT)
            .await
            .expect("the notification queued while away");
        assert_eq!(message["params"]["elicitationId"], elicitation["elicitationId"]);
        s.server.stop().await;
    }
);

backend_test!(
    async fn form_encoded_token_answers_and_client_secret_post_work(backend: Backend) {
        use common::fake_oauth::{ClientAuth, TokenFormat};
        let options = FakeOptions {
            client_auth: ClientAuth::Post,
            token_format: TokenFormat::Form,
            scope_separator: ',',
            refresh_tokens: false,
            ..FakeOptions::default()
        };
        let s = setup_with(backend, options, |toml| {
            toml.replace(
                "client_auth = \"basic\"",
                "client_auth = \"post\"\nscope_separator = \",\"",
            )
            .replace("scopes = [\"read\"]", "scopes = [\"read\", \"gist\"]")
        })
        .await;
        let mut stream = s.client.open_stream(None).await;
        connect(&s, &mut stream, "me").await;
        let authorize: std::collections::HashMap<_, _> = s.fake.stats().last_authorize_query.into_iter().collect();
        assert_eq!(
            authorize["scope"], "gist,read",
            "scopes joined with the provider's separator"
        );
        assert_eq!(
            s.client.call("tools/call", json!({"name": "me"})).await["isError"],
            false
        );
        let whoami = s.client.call("tools/call", json!({"name": "whoami"})).await;
        assert_eq!(
            whoami["structuredContent"]["connections"][0]["scopes"],
            json!(["gist", "read"]),
            "granted scopes parsed from a form answer"
        );
        s.server.stop().await;
    }
);

/// The sign-in through `me`'s elicitation ends at a callback refused with `why`: nothing stored,
/// no code exchanged. Stops the server.
async fn refused_sign_in(s: Setup, why: &str) {
    let elicitation = elicitation_for(&s.client, "me").await;
    let page = Browser::new().sign_in(&url_of(&elicitation)).await;
    assert_eq!(page.status, StatusCode::BAD_REQUEST);
    assert!(page.body.contains(why), "{}", page.body);
    assert_eq!(s.database.query_count("SELECT COUNT(*) FROM connections").await, 0);
    assert_eq!(s.fake.stats().code_exchanges, 0);
    s.server.stop().await;
}

backend_test!(
    async fn the_issuer_is_checked_when_the_provider_sends_one(backend: Backend) {
        let options = FakeOptions {
            issuer: Some("https://fake.example".into()),
            ..FakeOptions::default()
        };
        let wrong = setup_with(backend, options.clone(), |toml| {
            toml.replace("scopes = [", "issuer = \"https://other.example\"\nscopes = [")
        })
        .await;
        refused_sign_in(wrong, "expected provider").await;

        let right = setup_with(backend, options, |toml| {
            toml.replace("scopes = [", "issuer = \"https://fake.example\"\nscopes = [")
        })
        .await;
        let elicitation = elicitation_for(&right.client, "me").await;
        sign_in(&elicitation).await;
        right.server.stop().await;
    }
);

backend_test!(
    async fn a_callback_without_its_issuer_or_with_another_providers_is_refused(backend: Backend) {
        // The provider has an issuer, but the answer names none.
        let silent = setup_with(backend, FakeOptions::default(), |toml| {
            toml.replace("scopes = [", "issuer = \"https://fake.example\"\nscopes = [")
        })
        .await;
        refused_sign_in(silent, "did not say which provider").await;

        // Mix-up: Fake Hub has no issuer, and the answer on the shared redirect URI names another
        // configured provider's.
        let options = FakeOptions {
            issuer: Some("https://other.example".into()),
            ..FakeOptions::default()
        };
        let mixed = setup_with(backend, options, |toml| {
            format!(
                "{toml}\n[[providers]]\nid = \"other\"\nauthorize_url = \"https://other.example/authorize\"\n\
                 token_url = \"https://other.example/token\"\nclient_id = \"c\"\nclient_secret = \"s\"\n\
                 issuer = \"https://other.example\"\n"
            )
        })
        .await;
        refused_sign_in(mixed, "expected provider").await;
    }
);

backend_test!(
    async fn https_deployments_bind_the_browser_with_host_cookies(backend: Backend) {
        let s = setup_with(backend, FakeOptions::default(), |toml| {
            format!("[server]\npublic_url = \"https://gh.example\"\n{toml}")
        })
        .await;
        let elicitation = elicitation_for(&s.client, "me").await;
        let url = &url_of(&elicitation);
        assert!(url.starts_with("https://gh.example/connect/"));
        let local = url.replace("https://gh.example", &s.server.base());
        let browser = Browser::new();
        let page = browser.get(&local).await;
        let response = browser
            .press(&local, "https://gh.example", "continue", &page.csrf())
            .await;
        assert_eq!(response.status, StatusCode::SEE_OTHER);
        let cookie = response.headers["set-cookie"].to_str().expect("cookie");
        assert!(cookie.starts_with("__Host-gatehouse-flow-"), "{cookie}");
        for attribute in ["; Secure", "; HttpOnly", "; SameSite=Lax", "; Path=/"] {
            assert!(cookie.contains(attribute), "{cookie} lacks {attribute}");
        }
        assert!(!cookie.contains("Domain"), "__Host- cookies have no Domain");
        let from_elsewhere = Browser::new();
        let page = from_elsewhere.get(&local).await;
        let refused = from_elsewhere
            .press(&local, &s.server.base(), "continue", &page.csrf())
            .await;
        assert_eq!(
            refused.status,
            StatusCode::FORBIDDEN,
            "a form posted from another origin than the public one"
        );
        s.server.stop().await;
    }
);

backend_test!(
    async fn hostile_values_are_escaped_on_pages(backend: Backend) {
        let s = setup(backend).await;
        let mut hostile = s.server.client();
        let evil = "<script>alert(\"x\")</script>&'";
        let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25",
            "capabilities": {"elicitation": {"url": {}}}, "clientInfo": {"name": evil, "version": "1"}}});
        let reply = McpClient::new(&s.server.url).post_raw(&init, &[]).await;
        hostile.session = Some(reply.headers["mcp-session-id"].to_str().expect("id").to_owned());
        let elicitation = elicitation_for(&hostile, "me").await;
        let url = &url_of(&elicitation);
        let browser = Browser::new();
        let page = browser.get(url).await;
        assert!(!page.body.contains("<script>alert"), "{}", page.body);
        assert!(
            page.body.contains("&#60;script&#62;alert(&#34;x&#34;)"),
            "shown escaped: {}",
            page.body
        );
        s.fake.set_next_user("<img src=x onerror=alert(1)>");
        let done = browser.sign_in(url).await;
        assert_eq!(done.status, StatusCode::OK);
        assert!(
            !done.body.contains("<img src=x") && done.body.contains("&#60;img src=x"),
            "{}",
            done.body
        );
        s.server.stop().await;
    }
);

postgres_test!(
    /// Two replicas: the client's stream on A, the browser and callback on B.
    async fn the_notification_crosses_replicas() {
        let fake = FakeProvider::start(FakeOptions::default()).await;
        let database = TestDatabase::new(Backend::Postgres).await;
        let a = TestServer::start(&database, &gatehouse_config(&fake)).await;
        let b = TestServer::start(&database, &gatehouse_config(&fake)).await;
        let mut client = a.client();
        client.initialize().await;
        let mut stream = client.open_stream(None).await;
        let elicitation = elicitation_for(&client, "me").await;
        let on_b = url_of(&elicitation).replace(&a.base(), &b.base());
        let browser = Browser::new();
        let authorize = browser.continue_to_provider(&on_b).await;
        // The provider redirects to the public callback (A's); the proxy sends it to B.
        let callback = browser.authorize(&authorize).await.replace(&a.base(), &b.base());
        assert_eq!(browser.get(&callback).await.status, StatusCode::OK);
        let (_, message) = stream.next_message(WAIT).await.expect("notification on A's stream");
        assert_eq!(message["params"]["elicitationId"], elicitation["elicitationId"]);
        assert_eq!(client.call("tools/call", json!({"name": "me"})).await["isError"], false);
        a.stop().await;
        b.stop().await;
    }
);

postgres_test!(
    /// Calls served by two replicas refresh the same connection one at a time.
    async fn refreshes_are_serialized_across_replicas() {
        let options = FakeOptions {
            access_token_ttl: Some(1),
            refresh_delay_ms: 200,
            ..FakeOptions::default()
        };
        let fake = FakeProvider::start(options).await;
        let database = TestDatabase::new(Backend::Postgres).await;
        let a = TestServer::start(&database, &gatehouse_config(&fake)).await;
        let b = TestServer::start(&database, &gatehouse_config(&fake)).await;
        let mut client = a.client();
        client.initialize().await;
        let elicitation = elicitation_for(&client, "me").await;
        sign_in(&elicitation).await;
        let on_b = client.on(&b);
        let calls: Vec<_> = (0..6)
            .map(|n| {
                let client = if n % 2 == 0 { client.clone() } else { on_b.clone() };
                tokio::spawn(async move { client.call("tools/call", json!({"name": "me"})).await })
            })
            .collect();
        for call in calls {
            assert_eq!(call.await.expect("join")["isError"], false);
        }
        let stats = fake.stats();
        assert!(stats.refreshes >= 2, "both replicas needed fresh tokens");
        assert_eq!(
            stats.concurrent_refresh_peak, 1,
            "never two refreshes of one connection at once"
        );
        a.stop().await;
        b.stop().await;
    }
);
