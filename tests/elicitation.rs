//! URL-mode elicitation with third-party OAuth: the whole flow against a fake provider that is a
//! real HTTP server on loopback, on PostgreSQL and SQLite.

mod common;
// The tests by subject, in tests/elicitation/; this file keeps the main flow and what they share.
#[path = "elicitation/callbacks.rs"]
mod callbacks;
#[path = "elicitation/outcomes.rs"]
mod outcomes;
#[path = "elicitation/tokens.rs"]
mod tokens;

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

backend_test!(
    /// A session that declared no URL-mode elicitation gets the link as a result and, once the
    /// user is done, no `notifications/elicitation/complete` on its stream (the TypeScript v1
    /// client and others fail on it): a marker published after the completion is the next event.
    async fn no_completion_notice_for_a_session_without_url_mode(backend: Backend) {
        let s = setup(backend).await;
        let mut plain = s.server.client();
        plain
            .initialize_with("2025-11-25", json!({"elicitation": {"form": {}}}))
            .await;
        let mut stream = plain.open_stream(None).await;
        let result = plain.call("tools/call", json!({"name": "me"})).await;
        assert_eq!(result["isError"], true, "{result}");
        let shown = text(&result);
        let start = shown.find("http").expect("a link in the result");
        let link = shown[start..].split_whitespace().next().expect("the link");
        let page = Browser::new().sign_in(link).await;
        assert_eq!(page.status, StatusCode::OK, "callback page: {}", page.body);
        let completed = "SELECT COUNT(*) FROM elicitations WHERE status = 'completed'";
        assert_eq!(s.database.query_count(completed).await, 1);
        let session = plain.session.clone().expect("session");
        common::publish(&s.server, &session, &common::note(1)).await;
        let (_, message) = stream.next_message(WAIT).await.expect("the marker");
        assert_eq!(message, common::note(1), "the marker comes first, no completion notice");
        s.server.stop().await;
    }
);

backend_test!(
    /// -32042 and URL mode begin with 2025-11-25: a 2025-06-18 session declaring `{form, url}`
    /// (Codex 0.171 does) gets the result with the link.
    async fn a_session_before_2025_11_25_gets_the_link_not_32042(backend: Backend) {
        let s = setup(backend).await;
        let mut older = s.server.client();
        older
            .initialize_with("2025-06-18", json!({"elicitation": {"form": {}, "url": {}}}))
            .await;
        let reply = call(&older, "me").await;
        assert!(reply.body.get("error").is_none(), "no -32042: {}", reply.body);
        let result = &reply.body["result"];
        assert_eq!(result["isError"], true, "{result}");
        assert!(
            text(result).contains(&format!("{}/connect/", s.server.base())),
            "{result}"
        );
        s.server.stop().await;
    }
);
