//! Presets against fakes that answer the way their providers do: Slack's OAuth v2 user tokens
//! (`user_scope`, tokens under `authed_user`, refreshes at the top level, errors as HTTP 200 with
//! `"ok": false`), on PostgreSQL and SQLite.

mod common;

use std::collections::HashMap;

use common::fake_oauth::fake_slack::BOT_TOKEN;
use common::fake_oauth::{ClientAuth, Dialect, FakeOptions, FakeProvider};
use common::{
    Backend, Browser, McpClient, SseStream, TestDatabase, TestServer, WAIT, captured_logs, elicitations, logged_text,
    url_of,
};
use reqwest::StatusCode;
use serde_json::{Value, json};

/// The fake in its Slack dialect, with `edit` applied to Slack's defaults: client secret in the
/// body, comma-joined scopes, token rotation on (access tokens that live 30 s: within gatehouse's
/// refresh margin, so every call refreshes first).
async fn fake_slack(edit: impl FnOnce(&mut FakeOptions)) -> FakeProvider {
    let mut options = FakeOptions {
        dialect: Dialect::Slack,
        client_auth: ClientAuth::Post,
        scope_separator: ',',
        access_token_ttl: Some(30),
        ..FakeOptions::default()
    };
    edit(&mut options);
    FakeProvider::start(options).await
}

/// gatehouse with the Slack preset pointed at `fake`, and an initialized client with its stream.
async fn start(backend: Backend, fake: &FakeProvider) -> (TestDatabase, TestServer, McpClient, SseStream) {
    captured_logs();
    let database = TestDatabase::new(backend).await;
    let server = TestServer::start(&database, &fake.configure(include_str!("fixtures/slack.toml"))).await;
    let mut client = server.client();
    client.initialize().await;
    let stream = client.open_stream(None).await;
    (database, server, client, stream)
}

/// [`start`] with a fake without token rotation (Slack's user token then never expires and comes
/// without a refresh token), signed in.
async fn start_without_rotation(backend: Backend) -> (FakeProvider, TestDatabase, TestServer, McpClient, SseStream) {
    let fake = fake_slack(|options| {
        options.access_token_ttl = None;
        options.refresh_tokens = false;
    })
    .await;
    let (database, server, client, mut stream) = start(backend, &fake).await;
    signs_in(&client, &mut stream).await;
    (fake, database, server, client, stream)
}

/// A call of `post` with this text.
fn post(text: &str) -> Value {
    json!({"name": "post", "arguments": {"channel": "C123", "text": text}})
}

/// A post elicits the Slack sign-in; the browser completes it and the client is told.
async fn signs_in(client: &McpClient, stream: &mut SseStream) {
    let elicitation = elicitations(&client.request("tools/call", post("hello")).await).remove(0);
    let page = Browser::new().sign_in(&url_of(&elicitation)).await;
    assert_eq!(page.status, StatusCode::OK, "callback page: {}", page.body);
    stream.next_message(WAIT).await.expect("completion notification");
}

backend_test!(
    /// The Slack preset signs in for a user token (Slack's OAuth v2, not "Sign in with Slack"), so a
    /// tool that posts as the user gets the user's token, never the app's bot token; with token
    /// rotation on it is refreshed, and a refusal (`ok: false`) breaks the connection.
    async fn slack_tools_get_the_users_token_and_its_refreshes(backend: Backend) {
        let fake = fake_slack(|_| {}).await;
        let (database, server, client, mut stream) = start(backend, &fake).await;
        signs_in(&client, &mut stream).await;

        let authorize: HashMap<_, _> = fake.stats().last_authorize_query.into_iter().collect();
        assert_eq!(authorize["user_scope"], "channels:history,chat:write");
        assert!(!authorize.contains_key("scope"), "no bot scopes asked: {authorize:?}");

        let result = client.call("tools/call", post("hello")).await;
        assert_eq!(result["isError"], false, "{result}");
        assert_eq!(result["structuredContent"]["ok"], true, "{result}");
        let stats = fake.stats();
        assert!(stats.refreshes >= 1, "the expiring user token was refreshed first");
        assert_eq!(
            stats.api_bearer_tokens.last(),
            stats.issued_access_tokens.last(),
            "the tool sent the user's latest token"
        );
        assert!(!stats.api_bearer_tokens.iter().any(|t| t == BOT_TOKEN));

        let whoami = client.call("tools/call", json!({"name": "whoami"})).await;
        let connection = &whoami["structuredContent"]["connections"][0];
        assert_eq!(connection["account"], "octocat", "{whoami}");
        assert_eq!(connection["scopes"], json!(["channels:history", "chat:write"]));

        // Slack refuses the refresh with HTTP 200 and ok=false: the user must sign in again.
        fake.revoke_everything();
        let again = elicitations(&client.request("tools/call", post("hello again")).await);
        assert_eq!(again.len(), 1, "a refused refresh elicits again");
        assert_eq!(
            database
                .query_count("SELECT COUNT(*) FROM connections WHERE status = 'broken'")
                .await,
            1
        );
        assert!(logged_text().contains("invalid_refresh_token"));
        server.stop().await;
    }
);

backend_test!(
    /// Without token rotation Slack's user token never expires and comes without a refresh token;
    /// a code exchange Slack refuses (`ok: false` in an HTTP 200) fails the sign-in plainly and
    /// stores nothing.
    async fn slack_without_rotation_and_refused_exchanges(backend: Backend) {
        let (fake, database, server, client, _stream) = start_without_rotation(backend).await;
        let result = client.call("tools/call", post("hello")).await;
        assert_eq!(result["isError"], false, "{result}");
        assert_eq!(fake.stats().refreshes, 0);
        assert_eq!(
            fake.stats().api_bearer_tokens.last(),
            fake.stats().issued_access_tokens.first()
        );

        fake.set_options(|options| options.client_secret = "rotated-secret".into());
        let disconnected = client
            .call(
                "tools/call",
                json!({"name": "disconnect", "arguments": {"provider": "slack"}}),
            )
            .await;
        assert_eq!(disconnected["isError"], false, "{disconnected}");
        let elicitation = elicitations(&client.request("tools/call", post("hello")).await).remove(0);
        let page = Browser::new().sign_in(&url_of(&elicitation)).await;
        assert_eq!(page.status, StatusCode::BAD_GATEWAY, "{}", page.body);
        assert!(
            page.body.contains("Slack answered with an error") && page.body.contains("(invalid_client_id)"),
            "{}",
            page.body
        );
        assert_eq!(database.query_count("SELECT COUNT(*) FROM connections").await, 0);
        let logs = logged_text();
        assert!(
            logs.lines().any(|line| line.contains("WARN")
                && line.contains("the provider refused the code exchange")
                && line.contains("invalid_client_id")),
            "{logs}"
        );
        server.stop().await;
    }
);

backend_test!(
    /// Slack's Web API refuses a revoked token with HTTP 200 and `"error": "invalid_auth"`, not a
    /// 401: the preset's `token_refused_when` makes that a refusal, so the connection breaks, the
    /// call elicits a sign-in (its answer never reaches the model), and after it the call works.
    async fn a_token_the_slack_api_refuses_breaks_the_connection(backend: Backend) {
        let (fake, database, server, client, mut stream) = start_without_rotation(backend).await;
        let result = client.call("tools/call", post("hello")).await;
        assert_eq!(result["structuredContent"]["ok"], true, "{result}");

        fake.revoke_everything();
        let refused = client.request("tools/call", post("hello again")).await;
        assert!(!refused.body.to_string().contains("invalid_auth"), "{}", refused.body);
        let again = elicitations(&refused);
        assert_eq!(again.len(), 1, "an `invalid_auth` answer elicits again");
        assert_eq!(
            database
                .query_count("SELECT COUNT(*) FROM connections WHERE status = 'broken'")
                .await,
            1
        );
        let whoami = client.call("tools/call", json!({"name": "whoami"})).await;
        assert_eq!(whoami["structuredContent"]["connections"][0]["status"], "needs sign-in");

        let page = Browser::new().sign_in(&url_of(&again[0])).await;
        assert_eq!(page.status, StatusCode::OK, "callback page: {}", page.body);
        stream.next_message(WAIT).await.expect("completion notification");
        let result = client.call("tools/call", post("hello again")).await;
        assert_eq!(result["isError"], false, "{result}");
        assert_eq!(result["structuredContent"]["ok"], true, "{result}");
        assert_eq!(
            fake.stats().api_bearer_tokens.last(),
            fake.stats().issued_access_tokens.last(),
            "the call used the new sign-in's token"
        );
        server.stop().await;
    }
);
