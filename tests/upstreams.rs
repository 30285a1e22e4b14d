//! gatehouse in front of real upstream MCP servers: one built on the official Python SDK that
//! demands a bearer token valid at the fake OAuth provider (as GitHub's does), on PostgreSQL and
//! SQLite. Assertions are on what the upstream itself saw.

mod common;

use common::fake_oauth::{FakeOptions, FakeProvider};
use common::mcp_upstreams::BearerServer;
use common::{
    Backend, Browser, HEADER_IDENTITY, McpClient, TestDatabase, TestServer, WAIT, captured_logs, elicitations,
    eventually, text, url_of,
};
use reqwest::StatusCode;
use serde_json::{Value, json};

/// gatehouse with Fake Hub and the bearer upstream as `gh`, plus `extra` TOML for the upstream.
fn gatehouse_config(fake: &FakeProvider, upstream: &BearerServer, extra: &str) -> String {
    let mut toml = fake.configure(include_str!("fixtures/fake_hub.toml"));
    toml.push_str(HEADER_IDENTITY);
    toml.push_str(&format!(
        "\n[[upstreams]]\nid = \"gh\"\nurl = \"{}\"\nrequires = [\"fake\"]\ntimeout = \"5s\"\n{extra}\n",
        upstream.url()
    ));
    toml
}

struct Setup {
    fake: FakeProvider,
    upstream: BearerServer,
    database: TestDatabase,
    server: TestServer,
}

async fn setup(backend: Backend, scope_for: &[(&str, &str)], extra: &str) -> Option<Setup> {
    captured_logs();
    let fake = FakeProvider::start(FakeOptions::default()).await;
    let upstream = BearerServer::start_with(&fake.base_url, scope_for, &["--cache-seconds", "0"]).await?;
    let database = TestDatabase::new(backend).await;
    let server = TestServer::start(&database, &gatehouse_config(&fake, &upstream, extra)).await;
    Some(Setup {
        fake,
        upstream,
        database,
        server,
    })
}

async fn call(client: &McpClient, tool: &str, arguments: Value) -> common::Reply {
    client
        .request("tools/call", json!({"name": tool, "arguments": arguments}))
        .await
}

/// `user` signs in to Fake Hub through the elicitation `tool` answers with; the provider names
/// the account `user` too.
async fn sign_in(s: &Setup, client: &McpClient, user: &str, tool: &str, arguments: Value) -> Value {
    let reply = call(client, tool, arguments).await;
    let listed = elicitations(&reply);
    assert_eq!(listed.len(), 1, "one sign-in is asked for: {}", reply.body);
    s.fake.set_next_user(user);
    let page = Browser::as_user("x-forwarded-user", user)
        .sign_in(&url_of(&listed[0]))
        .await;
    assert_eq!(page.status, StatusCode::OK, "callback page: {}", page.body);
    listed[0].clone()
}

/// `caller` starts `gh_slow` (on the replica it talks to) and `canceller` cancels it: the call
/// ends with a tool error and the upstream is told.
async fn cancel_a_slow_call(s: &Setup, caller: &McpClient, canceller: &McpClient) {
    let id = caller.next_id.load(std::sync::atomic::Ordering::Relaxed);
    let mut stream = caller
        .request_stream(
            "tools/call",
            json!({"name": "gh_slow", "arguments": {"seconds": 30}, "_meta": {"progressToken": 1}}),
        )
        .await;
    eventually("the upstream runs the call", async || {
        s.upstream
            .seen()
            .await
            .iter()
            .any(|e| e["kind"] == "tool" && e["name"] == "slow")
            .then_some(())
    })
    .await;
    let status = canceller
        .notify(
            "notifications/cancelled",
            json!({"requestId": id, "reason": "changed my mind"}),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let (_, answer) = stream.next_message(WAIT).await.expect("the answer");
    assert_eq!(answer["result"]["isError"], true, "{answer}");
    assert!(
        text(&answer["result"]).contains("cancelled"),
        "ended by the cancellation: {answer}"
    );
    eventually("the upstream is told", async || {
        s.upstream
            .seen()
            .await
            .iter()
            .any(|e| e["kind"] == "cancelled")
            .then_some(())
    })
    .await;
}

/// The first user connects through `gh_connect`, which then lists the upstream's tools.
async fn connect_first(s: &Setup, client: &McpClient, user: &str) {
    sign_in(s, client, user, "gh_connect", json!({})).await;
    let connected = client
        .call("tools/call", json!({"name": "gh_connect", "arguments": {}}))
        .await;
    assert!(text(&connected).contains("gh_whoami"), "{connected}");
}

fn tool_names(result: &Value) -> Vec<String> {
    result["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .map(|t| t["name"].as_str().expect("name").to_owned())
        .collect()
}

backend_test!(
    async fn the_allow_list_stands_in_until_a_user_lists_and_the_catalogue_is_kept(backend: Backend) {
        let Some(s) = setup(backend, &[], "tools = [\"whoami\", \"count\"]").await else {
            return;
        };
        let alice = s.server.eliciting_client("alice").await;
        let before = alice.call("tools/list", json!({})).await;
        let names = tool_names(&before);
        assert!(
            names.contains(&"gh_whoami".to_owned()) && names.contains(&"gh_count".to_owned()),
            "{names:?}"
        );
        assert!(
            !names.contains(&"gh_slow".to_owned()),
            "the allow-list filters: {names:?}"
        );
        let stand_in = before["tools"]
            .as_array()
            .expect("tools")
            .iter()
            .find(|t| t["name"] == "gh_count")
            .expect("count");
        assert!(
            stand_in["description"]
                .as_str()
                .expect("text")
                .contains("once a user has connected")
        );

        sign_in(&s, &alice, "alice", "gh_whoami", json!({})).await;
        let result = alice
            .call("tools/call", json!({"name": "gh_whoami", "arguments": {}}))
            .await;
        assert_eq!(result["structuredContent"]["login"], "alice", "{result}");

        // The user's session listed the catalogue: the upstream's own descriptions and schemas.
        let listed = eventually("the listed catalogue", async || {
            let tools = alice.call("tools/list", json!({})).await;
            let count = tools["tools"]
                .as_array()?
                .iter()
                .find(|t| t["name"] == "gh_count")?
                .clone();
            count["description"].as_str()?.contains("progress").then_some(count)
        })
        .await;
        assert_eq!(listed["inputSchema"]["properties"]["n"]["type"], "integer", "{listed}");

        // Kept across a restart (and shared with any replica): a new server lists it at once.
        s.server.stop().await;
        let server = TestServer::start(
            &s.database,
            &gatehouse_config(&s.fake, &s.upstream, "tools = [\"whoami\", \"count\"]"),
        )
        .await;
        let bob = server.eliciting_client("bob").await;
        let tools = bob.call("tools/list", json!({})).await;
        let count = tools["tools"]
            .as_array()
            .expect("tools")
            .iter()
            .find(|t| t["name"] == "gh_count")
            .expect("count")
            .clone();
        assert!(
            count["description"].as_str().expect("text").contains("progress"),
            "{count}"
        );
    }
);

backend_test!(
    async fn each_users_calls_reach_the_upstream_with_their_own_token(backend: Backend) {
        let Some(s) = setup(backend, &[], "").await else {
            return;
        };
        let alice = s.server.eliciting_client("alice").await;
        let bob = s.server.eliciting_client("bob").await;
        let before = tool_names(&alice.call("tools/list", json!({})).await);
        assert!(
            before.contains(&"gh_connect".to_owned()) && !before.contains(&"gh_whoami".to_owned()),
            "{before:?}"
        );
        connect_first(&s, &alice, "alice").await;
        sign_in(&s, &bob, "bob", "gh_whoami", json!({})).await;
        for (client, user) in [(&alice, "alice"), (&bob, "bob"), (&alice, "alice")] {
            let result = client
                .call("tools/call", json!({"name": "gh_whoami", "arguments": {}}))
                .await;
            assert_eq!(result["structuredContent"]["login"], user, "{result}");
        }
        let seen = s.upstream.seen().await;
        let requests: Vec<&Value> = seen.iter().filter(|e| e["kind"] == "request").collect();
        // Nothing of the client's own credentials or gatehouse's identity header goes upstream.
        for request in &requests {
            let headers = request["headers"].as_object().expect("headers");
            assert!(!headers.contains_key("x-forwarded-user"), "{request}");
            assert!(!headers.contains_key("cookie"), "{request}");
        }
        // One upstream session per user, reused: alice's second call used her first session.
        let sessions_of = |login: &str| {
            requests
                .iter()
                .filter(|r| r["login"] == login && r["method"] == "tools/call")
                .map(|r| r["session"].clone())
                .collect::<Vec<_>>()
        };
        let alices = sessions_of("alice");
        assert_eq!(alices.len(), 2);
        assert_eq!(alices[0], alices[1], "alice's calls share her session");
        assert_ne!(alices[0], sessions_of("bob")[0], "bob has a session of his own");
    }
);

backend_test!(
    async fn progress_and_log_messages_reach_the_caller_and_cancellation_reaches_the_upstream(backend: Backend) {
        let Some(s) = setup(backend, &[], "").await else {
            return;
        };
        let alice = s.server.eliciting_client("alice").await;
        connect_first(&s, &alice, "alice").await;

        let mut stream = alice
            .request_stream(
                "tools/call",
                json!({"name": "gh_count", "arguments": {"n": 3}, "_meta": {"progressToken": "mine"}}),
            )
            .await;
        let mut progress = Vec::new();
        let answer = loop {
            let (_, message) = stream.next_message(WAIT).await.expect("a message");
            if message["method"] == "notifications/progress" {
                progress.push(message["params"].clone());
            } else {
                break message;
            }
        };
        assert_eq!(text(&answer["result"]), "counted 3");
        // Every progress notification the upstream sent before its answer, in order, with the
        // client's own token.
        let steps: Vec<Value> = (1..=3)
            .map(|i| json!({"progressToken": "mine", "progress": f64::from(i), "total": 3.0, "message": format!("step {i}")}))
            .collect();
        assert_eq!(progress, steps);

        alice.call("logging/setLevel", json!({"level": "info"})).await;
        let mut stream = alice
            .request_stream(
                "tools/call",
                json!({"name": "gh_shout", "arguments": {"text": "hello"}}),
            )
            .await;
        let (_, log) = stream.next_message(WAIT).await.expect("the log message");
        assert_eq!(log["method"], "notifications/message", "{log}");
        assert_eq!(log["params"]["data"], "hello");
        let (_, answer) = stream.next_message(WAIT).await.expect("the answer");
        assert_eq!(text(&answer["result"]), "HELLO");

        cancel_a_slow_call(&s, &alice, &alice).await;
    }
);

backend_test!(
    async fn an_upstream_elicitation_goes_to_the_client_and_the_answer_back(backend: Backend) {
        let Some(s) = setup(backend, &[], "").await else {
            return;
        };
        let alice = s.server.eliciting_client("alice").await;
        connect_first(&s, &alice, "alice").await;
        let mut stream = alice
            .request_stream("tools/call", json!({"name": "gh_ask_color", "arguments": {}}))
            .await;
        let (_, request) = stream.next_message(WAIT).await.expect("the relayed elicitation");
        assert_eq!(request["method"], "elicitation/create", "{request}");
        assert_eq!(request["params"]["mode"], "form");
        assert!(
            request["params"]["requestedSchema"]["properties"]["color"].is_object(),
            "{request}"
        );
        let answer = alice
            .post_raw(
                &json!({"jsonrpc": "2.0", "id": request["id"], "result": {"action": "accept", "content": {"color": "teal"}}}),
                &[],
            )
            .await;
        assert_eq!(answer.status, StatusCode::ACCEPTED);
        let (_, result) = stream.next_message(WAIT).await.expect("the answer");
        assert_eq!(text(&result["result"]), "you chose teal", "{result}");

        // The upstream's own -32042 is passed on with its URL.
        let reply = call(&alice, "gh_needs_url", json!({})).await;
        let listed = elicitations(&reply);
        assert_eq!(listed[0]["url"], "http://127.0.0.1:9/finish", "{}", reply.body);
    }
);

backend_test!(
    async fn a_refused_token_asks_for_a_new_sign_in_and_missing_scopes_for_a_step_up(backend: Backend) {
        let Some(s) = setup(backend, &[("delete_repository", "delete_repo")], "").await else {
            return;
        };
        let alice = s.server.eliciting_client("alice").await;
        connect_first(&s, &alice, "alice").await;
        assert_eq!(
            alice
                .call("tools/call", json!({"name": "gh_whoami", "arguments": {}}))
                .await["structuredContent"]["login"],
            "alice"
        );

        // The upstream answers 403 insufficient_scope: the user is asked to grant delete_repo.
        let step_up = sign_in(&s, &alice, "alice", "gh_delete_repository", json!({"name": "demo"})).await;
        assert!(
            step_up["message"].as_str().expect("message").contains("delete_repo"),
            "{step_up}"
        );
        let result = alice
            .call(
                "tools/call",
                json!({"name": "gh_delete_repository", "arguments": {"name": "demo"}}),
            )
            .await;
        assert_eq!(text(&result), "deleted demo", "{result}");

        // The provider stops honouring every token: the upstream answers 401, the user signs in again.
        s.fake.revoke_everything();
        let again = sign_in(&s, &alice, "alice", "gh_whoami", json!({})).await;
        assert!(
            again["message"].as_str().expect("message").contains("Fake Hub"),
            "{again}"
        );
        let result = alice
            .call("tools/call", json!({"name": "gh_whoami", "arguments": {}}))
            .await;
        assert_eq!(result["structuredContent"]["login"], "alice", "{result}");
    }
);

backend_test!(
    async fn whoami_says_which_upstreams_the_user_can_use(backend: Backend) {
        let Some(s) = setup(backend, &[], "").await else {
            return;
        };
        let alice = s.server.eliciting_client("alice").await;
        let before = alice
            .call("tools/call", json!({"name": "whoami", "arguments": {}}))
            .await;
        let upstream = &before["structuredContent"]["upstreams"][0];
        assert_eq!(
            (upstream["upstream"].as_str(), upstream["ready"].as_bool()),
            (Some("gh"), Some(false)),
            "{before}"
        );
        assert!(
            upstream["needs"][0].as_str().expect("need").contains("Fake Hub"),
            "{before}"
        );
        connect_first(&s, &alice, "alice").await;
        let after = alice
            .call("tools/call", json!({"name": "whoami", "arguments": {}}))
            .await;
        assert_eq!(after["structuredContent"]["upstreams"][0]["ready"], true, "{after}");
    }
);

backend_test!(
    async fn a_session_the_upstream_forgot_is_initialized_again(backend: Backend) {
        let Some(s) = setup(backend, &[], "").await else {
            return;
        };
        let alice = s.server.eliciting_client("alice").await;
        connect_first(&s, &alice, "alice").await;
        alice
            .call("tools/call", json!({"name": "gh_whoami", "arguments": {}}))
            .await;
        let session = s
            .upstream
            .seen()
            .await
            .iter()
            .rev()
            .find(|e| e["method"] == "tools/call")
            .expect("a call")["session"]
            .as_str()
            .expect("session")
            .to_owned();
        // The upstream ends the session (as a restart would): its next request there gets 404.
        let token = s.fake.issue_token("alice", &["read"]);
        let ended = reqwest::Client::new()
            .delete(s.upstream.url())
            .bearer_auth(&token)
            .header("mcp-session-id", &session)
            .header("mcp-protocol-version", "2025-11-25")
            .send()
            .await
            .expect("DELETE");
        assert!(ended.status().is_success(), "{}", ended.status());
        let result = alice
            .call("tools/call", json!({"name": "gh_whoami", "arguments": {}}))
            .await;
        assert_eq!(result["structuredContent"]["login"], "alice", "{result}");
        let seen = s.upstream.seen().await;
        let last = seen.iter().rev().find(|e| e["method"] == "tools/call").expect("a call");
        assert_ne!(last["session"], session, "the call went on a new session");
    }
);

postgres_test!(
    async fn a_catalogue_listed_on_one_replica_reaches_the_clients_of_another() {
        let Some(s) = setup(Backend::Postgres, &[], "").await else {
            return;
        };
        let b = TestServer::start(&s.database, &gatehouse_config(&s.fake, &s.upstream, "")).await;
        let bob = b.eliciting_client("bob").await;
        let mut stream = bob.open_stream(None).await;
        let listed_on_b = || async { tool_names(&bob.call("tools/list", json!({})).await) };
        assert!(!listed_on_b().await.contains(&"gh_whoami".to_owned()));

        // Alice connects on replica A, which lists the upstream's tools.
        let alice = s.server.eliciting_client("alice").await;
        connect_first(&s, &alice, "alice").await;
        let changed = next_list_changed(&mut stream).await;
        assert_eq!(changed["method"], "notifications/tools/list_changed", "{changed}");
        let names = listed_on_b().await;
        assert!(
            names.contains(&"gh_whoami".to_owned()) && !names.contains(&"gh_connect".to_owned()),
            "{names:?}"
        );

        // The upstream says its list changed: gatehouse lists it again, and B's clients hear of it.
        let grew = alice
            .call(
                "tools/call",
                json!({"name": "gh_grow", "arguments": {"stream": "request"}}),
            )
            .await;
        assert_eq!(text(&grew), "grew");
        next_list_changed(&mut stream).await;
        assert!(listed_on_b().await.contains(&"gh_grown".to_owned()));
    }
);

/// The next `notifications/tools/list_changed` on a session's stream.
async fn next_list_changed(stream: &mut common::SseStream) -> Value {
    loop {
        let (_, message) = stream.next_message(WAIT).await.expect("a list_changed notification");
        if message["method"] == "notifications/tools/list_changed" {
            return message;
        }
    }
}

postgres_test!(
    async fn a_cancellation_and_an_answer_sent_to_another_replica_reach_the_call() {
        let Some(s) = setup(Backend::Postgres, &[], "").await else {
            return;
        };
        let b = TestServer::start(&s.database, &gatehouse_config(&s.fake, &s.upstream, "")).await;
        let alice = s.server.eliciting_client("alice").await;
        connect_first(&s, &alice, "alice").await;
        let alice_on_b = alice.on(&b);

        // The call runs on A; the client's answer to the relayed elicitation reaches B.
        let mut stream = alice
            .request_stream("tools/call", json!({"name": "gh_ask_color", "arguments": {}}))
            .await;
        let (_, request) = stream.next_message(WAIT).await.expect("the relayed elicitation");
        let answer = alice_on_b
            .post_raw(
                &json!({"jsonrpc": "2.0", "id": request["id"], "result": {"action": "accept", "content": {"color": "plum"}}}),
                &[],
            )
            .await;
        assert_eq!(answer.status, StatusCode::ACCEPTED);
        let (_, result) = stream.next_message(WAIT).await.expect("the answer");
        assert_eq!(text(&result["result"]), "you chose plum", "{result}");

        // The call runs on A; the client's cancellation reaches B.
        cancel_a_slow_call(&s, &alice, &alice_on_b).await;
    }
);

backend_test!(
    /// A 2026-07-28 call of an upstream's tool: its progress comes on the request's own stream,
    /// a request it makes of the client is refused at once (never sent on the stream), and its own
    /// -32042 becomes input_required with its link.
    async fn a_stateless_call_relays_progress_and_never_sends_requests(backend: Backend) {
        let Some(s) = setup(backend, &[], "").await else {
            return;
        };
        let alice = s.server.eliciting_client("alice").await;
        connect_first(&s, &alice, "alice").await;
        let stateless = common::stateless::StatelessClient::new(&s.server.url)
            .with_user("x-forwarded-user", "alice")
            .with_capabilities(json!({"elicitation": {"form": {}, "url": {}}}));

        let messages = stateless
            .stream(
                "tools/call",
                json!({"name": "gh_count", "arguments": {"n": 3}, "_meta": {"progressToken": "mine"}}),
            )
            .await;
        let (answer, progress) = messages.split_last().expect("an answer");
        assert!(
            progress.iter().all(|m| m["method"] == "notifications/progress"),
            "{messages:?}"
        );
        assert_eq!(progress.len(), 3, "{messages:?}");
        assert_eq!(answer["result"]["resultType"], "complete", "{answer}");
        assert_eq!(text(&answer["result"]), "counted 3");

        let messages = stateless
            .stream(
                "tools/call",
                json!({"name": "gh_ask_color", "arguments": {}, "_meta": {"progressToken": 7}}),
            )
            .await;
        assert!(
            messages
                .iter()
                .all(|m| m.get("id").is_none() || m.get("method").is_none()),
            "{messages:?}"
        );
        let answer = messages.last().expect("an answer");
        assert!(
            answer.get("result").is_some() || answer.get("error").is_some(),
            "{answer}"
        );

        let needs_url = stateless
            .result("tools/call", json!({"name": "gh_needs_url", "arguments": {}}))
            .await;
        assert_eq!(needs_url["resultType"], "input_required", "{needs_url}");
        let requests = needs_url["inputRequests"].as_object().expect("inputRequests");
        let request = requests.values().next().expect("one");
        assert_eq!(request["params"]["url"], "http://127.0.0.1:9/finish", "{needs_url}");
        assert_eq!(s.database.query_count("SELECT COUNT(*) FROM sessions").await, 1);
    }
);
