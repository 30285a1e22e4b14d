//! Protocol 2026-07-28 on `/mcp` beside 2025-11-25: stateless requests checked header against
//! body, `server/discover`, and gated calls as `input_required` with a sealed `requestState`,
//! whose retry is held until the user finishes in the browser (on another replica, too); clients
//! that cannot open URLs get the link in a result (or -32021, configured so).

mod common;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use common::fake_oauth::{FakeOptions, FakeProvider};
use common::stateless::{STATELESS, StatelessClient, refused};
use common::{Backend, Browser, HEADER_IDENTITY, TestDatabase, TestServer, WAIT, eventually, text};
use reqwest::StatusCode;
use serde_json::{Value, json};

/// Fake Hub and its tools `me` and `me_write`, with retries held for `hold`.
async fn start(backend: Backend, hold: &str, extra: &str) -> (FakeProvider, TestDatabase, TestServer) {
    start_with(backend, &format!("hold = \"{hold}\""), extra).await
}

/// Fake Hub and its tools `me` and `me_write`, with `elicitation` as the `[elicitation]` section.
async fn start_with(backend: Backend, elicitation: &str, extra: &str) -> (FakeProvider, TestDatabase, TestServer) {
    let fake = FakeProvider::start(FakeOptions::default()).await;
    let database = TestDatabase::new(backend).await;
    let toml = format!(
        "{}\n{extra}\n[elicitation]\n{elicitation}\n",
        fake.configure(include_str!("fixtures/fake_hub.toml"))
    );
    let server = TestServer::start(&database, &toml).await;
    (fake, database, server)
}

/// The `input_required` answer to a call: its one URL-mode elicitation's URL and the state.
fn input_required(result: &Value) -> (String, String) {
    assert_eq!(result["resultType"], "input_required", "{result}");
    let requests = result["inputRequests"].as_object().expect("inputRequests");
    assert_eq!(requests.len(), 1, "{result}");
    let request = requests.values().next().expect("one");
    assert_eq!(request["method"], "elicitation/create", "{result}");
    assert_eq!(request["params"]["mode"], "url", "{result}");
    assert!(request["params"].get("elicitationId").is_none(), "{result}");
    let url = request["params"]["url"].as_str().expect("url").to_owned();
    let state = result["requestState"].as_str().expect("requestState").to_owned();
    (url, state)
}

/// A retry of `tool` with `state`, as the SDKs send it.
fn retry(tool: &str, state: &str) -> Value {
    json!({"name": tool, "arguments": {}, "inputResponses": {"any": {"action": "accept"}}, "requestState": state})
}

backend_test!(
    async fn stateless_requests_discover_list_and_call_beside_sessions(backend: Backend) {
        let database = TestDatabase::new(backend).await;
        let server = TestServer::start(&database, "").await;
        let client = StatelessClient::new(&server.url);

        let discovered = client.result("server/discover", json!({})).await;
        assert_eq!(discovered["resultType"], "complete");
        let versions = discovered["supportedVersions"].as_array().expect("versions");
        assert!(versions.contains(&json!(STATELESS)) && versions.contains(&json!("2025-11-25")));
        assert!(discovered["capabilities"]["tools"].is_object(), "{discovered}");
        assert_eq!(
            discovered["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
            "gatehouse"
        );
        assert!(
            discovered["ttlMs"].is_u64() && discovered["cacheScope"] == "public",
            "{discovered}"
        );
        assert!(
            discovered["instructions"]
                .as_str()
                .is_some_and(|i| !i.contains("-32042"))
        );

        let listed = client.result("tools/list", json!({})).await;
        assert_eq!(listed["resultType"], "complete");
        assert!(
            listed["tools"]
                .as_array()
                .expect("tools")
                .iter()
                .any(|t| t["name"] == "whoami")
        );
        assert!(
            listed["ttlMs"].is_u64() && listed["cacheScope"] == "private",
            "{listed}"
        );

        let whoami = client.result("tools/call", json!({"name": "whoami"})).await;
        assert_eq!(whoami["resultType"], "complete");
        assert_eq!(whoami["isError"], false, "{whoami}");
        assert!(
            text(&whoami).contains("gatehouse-tests"),
            "the client named in _meta: {whoami}"
        );

        // Nothing was stored for them; a 2025-11-25 client on the same endpoint works as before.
        assert_eq!(database.query_count("SELECT COUNT(*) FROM sessions").await, 0);
        let mut legacy = server.client();
        legacy.initialize().await;
        assert_eq!(
            legacy.call("tools/call", json!({"name": "whoami"})).await["isError"],
            false
        );
        assert_eq!(database.query_count("SELECT COUNT(*) FROM sessions").await, 1);
        server.stop().await;
    }
);

#[tokio::test]
async fn headers_and_meta_must_agree_with_the_body() {
    let database = TestDatabase::new(Backend::Sqlite).await;
    let server = TestServer::start(&database, "").await;
    let client = StatelessClient::new(&server.url);
    let call = client.with_meta(json!({"name": "whoami"}));
    let check = async |method: &str, params: &Value, headers: &[(&str, Option<&str>)], status, code| {
        let reply = client.send(method, params.clone(), headers).await;
        let error = refused(&reply, status, code);
        assert!(
            reply.body["id"].is_i64(),
            "errors carry the request's id: {}",
            reply.body
        );
        error
    };
    let bad = StatusCode::BAD_REQUEST;

    check("tools/call", &call, &[("mcp-protocol-version", None)], bad, -32020).await;
    check("tools/call", &json!({"name": "whoami"}), &[], bad, -32602).await;
    let mut no_capabilities = call.clone();
    no_capabilities["_meta"]
        .as_object_mut()
        .expect("meta")
        .remove("io.modelcontextprotocol/clientCapabilities");
    check("tools/call", &no_capabilities, &[], bad, -32602).await;
    let mut future = call.clone();
    future["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!("2099-01-01");
    check("tools/call", &future, &[], bad, -32020).await;
    let unsupported = check(
        "tools/call",
        &future,
        &[("mcp-protocol-version", Some("2099-01-01"))],
        bad,
        -32022,
    )
    .await;
    assert_eq!(unsupported["data"]["requested"], "2099-01-01");
    let supported = unsupported["data"]["supported"].as_array().expect("supported");
    assert!(supported.contains(&json!(STATELESS)) && supported.contains(&json!("2025-11-25")));

    check("tools/call", &call, &[("mcp-method", None)], bad, -32020).await;
    check("tools/call", &call, &[("mcp-method", Some("tools/list"))], bad, -32020).await;
    check("tools/call", &call, &[("mcp-name", None)], bad, -32020).await;
    check("tools/call", &call, &[("mcp-name", Some("other"))], bad, -32020).await;
    // A name that is not ASCII travels base64-encoded; decoded, it matches (there is no such tool).
    let cafe = client.with_meta(json!({"name": "café"}));
    let encoded = "=?base64?Y2Fmw6k=?=";
    let unknown = client.send("tools/call", cafe, &[("mcp-name", Some(encoded))]).await;
    assert_eq!(unknown.status, StatusCode::OK, "{}", unknown.body);
    assert!(
        unknown.body["error"]["message"]
            .as_str()
            .expect("message")
            .contains("Unknown tool: café")
    );

    for method in ["initialize", "ping", "logging/setLevel", "resources/nope"] {
        check(method, &client.with_meta(json!({})), &[], StatusCode::NOT_FOUND, -32601).await;
    }
    let http = reqwest::Client::new();
    for method in [reqwest::Method::GET, reqwest::Method::DELETE] {
        let response = http
            .request(method.clone(), &server.url)
            .header("mcp-protocol-version", STATELESS)
            .header("accept", "text/event-stream")
            .send()
            .await
            .expect("send");
        assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED, "{method}");
    }
    assert_eq!(database.query_count("SELECT COUNT(*) FROM sessions").await, 0);
    server.stop().await;
}

backend_test!(
    /// input_required, the retry held until the hold runs out (same link, fresh state), then the
    /// user signs in while a retry is held: it answers the tool's result at once.
    async fn a_gated_call_asks_for_input_and_its_held_retry_returns_the_result(backend: Backend) {
        let (fake, database, server) = start(backend, "1s", "").await;
        let client = StatelessClient::new(&server.url);
        let first = client
            .result("tools/call", json!({"name": "me", "arguments": {}}))
            .await;
        let (url, state) = input_required(&first);
        assert!(url.starts_with(&format!("{}/connect/", server.base())), "{url}");
        assert_eq!(database.query_count("SELECT COUNT(*) FROM sessions").await, 0);

        // Nobody finished: after the hold, input_required again, same link, a fresh state.
        let again = client.result("tools/call", retry("me", &state)).await;
        let (url_again, state_again) = input_required(&again);
        assert_eq!(url_again, url);
        assert_ne!(state_again, state);
        assert_eq!(
            database
                .query_count("SELECT COUNT(*) FROM elicitations WHERE status = 'pending'")
                .await,
            1
        );
        server.stop().await;

        // A longer hold: the user finishes while the retry waits.
        let server = TestServer::start(
            &database,
            &format!(
                "{}\n[elicitation]\nhold = \"60s\"\n",
                fake.configure(include_str!("fixtures/fake_hub.toml"))
            ),
        )
        .await;
        let client = client.at(&server.url);
        let held = tokio::spawn({
            let client = client.clone();
            async move { client.result("tools/call", retry("me", &state_again)).await }
        });
        let calls = server.mcp.calls.clone();
        eventually("the retry is held", async || (calls.held_now() == 1).then_some(())).await;
        let page = Browser::new()
            .sign_in(&url.replace(&url_base(&url), &server.base()))
            .await;
        assert_eq!(page.status, StatusCode::OK, "{}", page.body);
        let result = held.await.expect("the held retry");
        assert_eq!(result["resultType"], "complete", "{result}");
        assert_eq!(result["isError"], false, "{result}");
        assert_eq!(calls.held_now(), 0);
        server.stop().await;
    }
);

/// A call of `me` on `server` that answers input_required, then its retry, held there: the
/// link, and the retry's answer to come.
async fn a_held_retry(server: &TestServer) -> (String, tokio::task::JoinHandle<Value>) {
    let client = StatelessClient::new(&server.url);
    let first = client
        .result("tools/call", json!({"name": "me", "arguments": {}}))
        .await;
    let (url, state) = input_required(&first);
    let held = tokio::spawn(async move { client.result("tools/call", retry("me", &state)).await });
    let calls = server.mcp.calls.clone();
    eventually("the retry is held", async || (calls.held_now() == 1).then_some(())).await;
    (url, held)
}

backend_test!(
    /// A replica shutting down answers its held retries at once (input_required, so the client
    /// retries elsewhere) instead of holding the shutdown until their holds run out.
    async fn a_held_retry_is_answered_at_once_when_the_replica_shuts_down(backend: Backend) {
        let (_fake, _database, server) = start(backend, "300s", "").await;
        let (url, held) = a_held_retry(&server).await;
        // `stop` fails unless the server is done within its 10 s guard, far inside the hold.
        server.stop().await;
        let answer = held.await.expect("the held retry");
        assert_eq!(input_required(&answer).0, url, "{answer}");
    }
);

/// `http://host:port` of a URL.
fn url_base(url: &str) -> String {
    let parsed = url::Url::parse(url).expect("url");
    parsed.origin().ascii_serialization()
}

postgres_test!(
    /// The retry held on A, the browser on B: the completion reaches A through the database.
    async fn a_retry_held_on_one_replica_is_answered_when_the_user_finishes_on_another() {
        let fake = FakeProvider::start(FakeOptions::default()).await;
        let database = TestDatabase::new(Backend::Postgres).await;
        let toml = fake.configure(include_str!("fixtures/fake_hub.toml"));
        let a = TestServer::start(&database, &toml).await;
        let b = TestServer::start(&database, &toml).await;
        let (url, held) = a_held_retry(&a).await;
        let browser = Browser::new();
        let authorize = browser.continue_to_provider(&url.replace(&a.base(), &b.base())).await;
        let callback = browser.authorize(&authorize).await.replace(&a.base(), &b.base());
        assert_eq!(browser.get(&callback).await.status, StatusCode::OK);
        let result = held.await.expect("the held retry");
        assert_eq!(result["isError"], false, "{result}");
        a.stop().await;
        b.stop().await;
    }
);

backend_test!(
    /// A state that was changed, has expired, or belongs to another user, tool or arguments, is an
    /// error and changes nothing; so is one of the wrong type.
    async fn request_state_is_bound_to_its_user_tool_and_arguments(backend: Backend) {
        let (_fake, database, server) = start(backend, "1s", HEADER_IDENTITY).await;
        let alice = StatelessClient::new(&server.url).with_user("x-forwarded-user", "alice");
        let bob = StatelessClient::new(&server.url).with_user("x-forwarded-user", "bob");
        let first = alice.result("tools/call", json!({"name": "me", "arguments": {}})).await;
        let (_, state) = input_required(&first);
        let stored = database.everything_stored().await;

        let probes = [
            (
                &alice,
                retry("me", &format!("{state}-TAMPERED")),
                "not one this server issued",
            ),
            (&bob, retry("me", &state), "another user"),
            (&alice, retry("me_write", &state), "another tool"),
            (
                &alice,
                json!({"name": "me", "arguments": {"login": "mallory"}, "requestState": state}),
                "other arguments",
            ),
            (&alice, retry("me", &expired(&server, &state)), "has expired"),
            (&alice, json!({"name": "me", "requestState": 42}), "must be a string"),
        ];
        for (client, params, why) in probes {
            let reply = client.request("tools/call", params).await;
            let error = refused(&reply, StatusCode::OK, -32602);
            assert!(
                error["message"].as_str().expect("message").contains(why),
                "{why}: {error}"
            );
        }
        assert_eq!(database.everything_stored().await, stored, "the probes changed nothing");
        server.stop().await;
    }
);

/// `state` as the server would have sealed it had it run out a second ago: opened and sealed
/// again with the server's own key ring (the shortest `elicitation.ttl` is too long to wait for).
fn expired(server: &TestServer, state: &str) -> String {
    const CONTEXT: &str = "mcp requestState v1";
    let sealed = URL_SAFE_NO_PAD.decode(state).expect("base64url state");
    let opened = server
        .state
        .vault
        .decrypt(&sealed, CONTEXT)
        .expect("the server's own state opens");
    let mut fields: Value = serde_json::from_slice(&opened).expect("state JSON");
    let now = chrono::Utc::now().timestamp();
    assert!(
        fields["x"].as_i64().expect("expiry") > now,
        "issued unexpired: {fields}"
    );
    fields["x"] = json!(now - 1);
    let json = serde_json::to_vec(&fields).expect("JSON");
    URL_SAFE_NO_PAD.encode(server.state.vault.encrypt(&json, CONTEXT))
}

backend_test!(
    /// What Claude Code declares on 2026-07-28 (`elicitation: {}`, form mode only) and what a
    /// client without any elicitation declares: a gated call answers a complete error result
    /// naming the link and asking for the call again, the same link for both and on the call's
    /// own stream (the pending elicitation is reused); once the user finished there, the call runs.
    async fn clients_without_url_mode_get_the_link_as_a_result_and_call_again(backend: Backend) {
        let (_fake, database, server) = start(backend, "1s", "").await;
        let claude_code = StatelessClient::new(&server.url).with_capabilities(json!({"elicitation": {}}));
        let bare = StatelessClient::new(&server.url).with_capabilities(json!({}));
        let call = json!({"name": "me", "arguments": {}});
        let first = claude_code.result("tools/call", call.clone()).await;
        let url = link_in(&first);
        assert!(url.starts_with(&format!("{}/connect/", server.base())), "{url}");
        assert!(text(&first).contains("call this tool again"), "{first}");
        assert_eq!(link_in(&bare.result("tools/call", call.clone()).await), url);
        // Asked with a progressToken, the answer comes on the call's own stream: the same result.
        let streamed = json!({"name": "me", "arguments": {}, "_meta": {"progressToken": "p"}});
        let messages = claude_code.stream("tools/call", streamed).await;
        let answer = messages.last().expect("an answer");
        assert_eq!(link_in(&answer["result"]), url, "{messages:?}");

        let browser = Browser::new();
        let authorize = browser.continue_to_provider(&url).await;
        let callback = browser.authorize(&authorize).await;
        assert_eq!(browser.get(&callback).await.status, StatusCode::OK);
        for client in [&claude_code, &bare] {
            let result = client.result("tools/call", call.clone()).await;
            assert_eq!(result["resultType"], "complete", "{result}");
            assert_eq!(result["isError"], false, "{result}");
            assert_eq!(result["structuredContent"]["login"], "octocat", "{result}");
        }
        assert_eq!(database.query_count("SELECT COUNT(*) FROM sessions").await, 0);
        server.stop().await;
    }
);

/// The one link of a complete error result that asks the user to open it (the answer to a client
/// without URL mode).
fn link_in(result: &Value) -> String {
    assert_eq!(result["resultType"], "complete", "{result}");
    assert_eq!(result["isError"], true, "{result}");
    let said = text(result);
    let links: Vec<&str> = said.split_whitespace().filter(|w| w.starts_with("http")).collect();
    assert_eq!(links.len(), 1, "one link: {said}");
    links[0].to_owned()
}

backend_test!(
    /// `without_url_mode = "error"`: a client that cannot open URLs is refused with -32021 naming
    /// the capability it lacks, as the specification words it.
    async fn url_mode_without_the_capability_is_refused_with_its_name_when_configured(backend: Backend) {
        let (_fake, _database, server) = start_with(backend, "without_url_mode = \"error\"", "").await;
        let client = StatelessClient::new(&server.url).with_capabilities(json!({"elicitation": {"form": {}}}));
        let reply = client
            .request("tools/call", json!({"name": "me", "arguments": {}}))
            .await;
        let error = refused(&reply, StatusCode::BAD_REQUEST, -32021);
        assert_eq!(
            error["data"]["requiredCapabilities"],
            json!({"elicitation": {"url": {}}})
        );
        server.stop().await;
    }
);

backend_test!(
    async fn a_declined_elicitation_ends_the_call_with_an_error_result(backend: Backend) {
        let (_fake, _database, server) = start(backend, "1s", "").await;
        let client = StatelessClient::new(&server.url);
        let first = client
            .result("tools/call", json!({"name": "me", "arguments": {}}))
            .await;
        let (url, state) = input_required(&first);
        let browser = Browser::new();
        let page = browser.get(&url).await;
        let declined = browser.press(&url, &server.base(), "decline", &page.csrf()).await;
        assert_eq!(declined.status, StatusCode::OK, "{}", declined.body);
        let result = client.result("tools/call", retry("me", &state)).await;
        assert_eq!(result["resultType"], "complete", "{result}");
        assert_eq!(result["isError"], true, "{result}");
        assert!(text(&result).contains("declined"), "{result}");
        server.stop().await;
    }
);

/// The key of an `input_required` answer's one input request, under which a retry answers it.
fn input_key(result: &Value) -> String {
    let requests = result["inputRequests"].as_object().expect("inputRequests");
    requests.keys().next().expect("one input request").clone()
}

backend_test!(
    /// The client's answer to a link comes in its retry: `decline` ends the call at once (never
    /// held for `elicitation.hold`) with an error result saying the user declined, and the next
    /// call asks afresh with a new link.
    async fn a_link_the_client_declines_ends_the_call_at_once(backend: Backend) {
        let (_fake, database, server) = start(backend, "300s", "").await;
        let client = StatelessClient::new(&server.url);
        let call = json!({"name": "me", "arguments": {}});
        let asked = client.result("tools/call", call.clone()).await;
        let (url, state) = input_required(&asked);
        let retried = json!({"name": "me", "arguments": {},
            "inputResponses": {input_key(&asked): {"action": "decline"}}, "requestState": state});
        let answered = tokio::time::timeout(WAIT, client.result("tools/call", retried))
            .await
            .expect("answered at once, not held");
        assert_eq!(answered["resultType"], "complete", "{answered}");
        assert_eq!(answered["isError"], true, "{answered}");
        assert!(text(&answered).contains("declined"), "{answered}");
        assert_eq!(server.mcp.calls.held_now(), 0);
        let (next, _) = input_required(&client.result("tools/call", call).await);
        assert_ne!(next, url, "a new link");
        let declined = "SELECT COUNT(*) FROM elicitations WHERE status = 'declined'";
        assert_eq!(database.query_count(declined).await, 1);
        server.stop().await;
    }
);

backend_test!(
    /// `cancel` is "not now" (Claude Code in `-p` mode dismisses every link): the retry is
    /// answered at once, not held, with an error result giving the link and the instruction to
    /// call again; the elicitation stays pending, and once the user signed in there a plain new
    /// call runs the tool.
    async fn a_link_the_client_dismisses_is_given_as_a_result(backend: Backend) {
        let (_fake, database, server) = start(backend, "300s", "").await;
        let client = StatelessClient::new(&server.url);
        let call = json!({"name": "me", "arguments": {}});
        let asked = client.result("tools/call", call.clone()).await;
        let (url, state) = input_required(&asked);
        let retried = json!({"name": "me", "arguments": {},
            "inputResponses": {input_key(&asked): {"action": "cancel"}}, "requestState": state});
        let answered = tokio::time::timeout(WAIT, client.result("tools/call", retried))
            .await
            .expect("answered at once, not held");
        assert_eq!(answered["resultType"], "complete", "{answered}");
        assert_eq!(answered["isError"], true, "{answered}");
        let said = text(&answered);
        assert!(said.contains(&url) && said.contains("call this tool again"), "{said}");
        assert!(!said.contains("declined"), "{said}");
        assert_eq!(server.mcp.calls.held_now(), 0);
        let pending = "SELECT COUNT(*) FROM elicitations WHERE status = 'pending'";
        assert_eq!(database.query_count(pending).await, 1, "the link stays open");

        let page = Browser::new().sign_in(&url).await;
        assert_eq!(page.status, StatusCode::OK, "callback page: {}", page.body);
        let ran = client.result("tools/call", call).await;
        assert_eq!(ran["resultType"], "complete", "{ran}");
        assert_eq!(ran["isError"], false, "{ran}");
        server.stop().await;
    }
);

/// `limits.held_retries_per_principal` by default.
const HELD_PER_PRINCIPAL: usize = 16;

backend_test!(
    /// One user re-sending a state at once has at most `held_retries_per_principal` retries held;
    /// one more is answered at once (`input_required`, the same link), and another user's retry is
    /// still held. Each is answered when its user finishes.
    async fn one_user_cannot_take_every_held_retry_place(backend: Backend) {
        let (_fake, _database, server) = start(backend, "60s", HEADER_IDENTITY).await;
        let header = "x-forwarded-user";
        let alice = StatelessClient::new(&server.url).with_user(header, "alice");
        let bob = StatelessClient::new(&server.url).with_user(header, "bob");
        let call = json!({"name": "me", "arguments": {}});
        let (alice_url, alice_state) = input_required(&alice.result("tools/call", call.clone()).await);
        let (bob_url, bob_state) = input_required(&bob.result("tools/call", call).await);
        let held_retry = |client: &StatelessClient, state: &str| {
            let (client, retried) = (client.clone(), retry("me", state));
            tokio::spawn(async move { client.result("tools/call", retried).await })
        };
        let calls = server.mcp.calls.clone();
        let alices: Vec<_> = (0..HELD_PER_PRINCIPAL)
            .map(|_| held_retry(&alice, &alice_state))
            .collect();
        eventually("alice's retries are held", async || {
            (calls.held_now() == HELD_PER_PRINCIPAL).then_some(())
        })
        .await;

        let beyond = tokio::time::timeout(WAIT, alice.result("tools/call", retry("me", &alice_state)))
            .await
            .expect("alice's retry beyond her share is answered at once, not held");
        let (url, _) = input_required(&beyond);
        assert_eq!(url, alice_url);
        assert_eq!(calls.held_now(), HELD_PER_PRINCIPAL, "alice's others are still held");
        let bobs = held_retry(&bob, &bob_state);
        eventually("bob's retry is held beside alice's", async || {
            (calls.held_now() == HELD_PER_PRINCIPAL + 1).then_some(())
        })
        .await;

        for (user, url) in [("alice", &alice_url), ("bob", &bob_url)] {
            let page = Browser::as_user(header, user).sign_in(url).await;
            assert_eq!(page.status, StatusCode::OK, "{user}: {}", page.body);
        }
        for held in alices.into_iter().chain([bobs]) {
            let result = held.await.expect("a held retry");
            assert_eq!(result["resultType"], "complete", "{result}");
            assert_eq!(result["isError"], false, "{result}");
        }
        assert_eq!(calls.held_now(), 0);
        server.stop().await;
    }
);

backend_test!(
    /// A tool that asks within the call on 2025-11-25 (`elicit = "request"`) asks the same way as
    /// any other here: input_required, then the held retry pays once the user confirmed.
    async fn tools_that_ask_within_the_call_use_input_required(backend: Backend) {
        let database = TestDatabase::new(backend).await;
        let server = TestServer::start_addressed(&database, |addr| {
            common::pay_tool(addr, "30s").replace("[elicitation]", "[elicitation]\nhold = \"60s\"")
        })
        .await;
        let client = StatelessClient::new(&server.url);
        let call = json!({"name": "pay", "arguments": common::pay_arguments()});
        let first = client.result("tools/call", call.clone()).await;
        let (url, state) = input_required(&first);
        let mut retried = call;
        retried["requestState"] = json!(state);
        let held = tokio::spawn({
            let client = client.clone();
            async move { client.result("tools/call", retried).await }
        });
        let calls = server.mcp.calls.clone();
        eventually("the retry is held", async || (calls.held_now() == 1).then_some(())).await;
        common::confirm_payment(&url, &server.base()).await;
        let result = held.await.expect("the held retry");
        assert_eq!(result["resultType"], "complete", "{result}");
        assert_eq!(result["isError"], false, "{result}");
        server.stop().await;
    }
);

#[tokio::test]
async fn log_messages_come_on_the_calls_own_stream_when_asked_for() {
    let database = TestDatabase::new(Backend::Sqlite).await;
    let server = TestServer::start(&database, "").await;
    let client = StatelessClient::new(&server.url);
    let meta = |level: Option<&str>| {
        let mut meta = json!({"progressToken": "p"});
        if let Some(level) = level {
            meta["io.modelcontextprotocol/logLevel"] = json!(level);
        }
        json!({"name": "whoami", "arguments": {}, "_meta": meta})
    };
    let messages = client.stream("tools/call", meta(Some("debug"))).await;
    let (answer, notes) = messages.split_last().expect("an answer");
    assert_eq!(answer["result"]["isError"], false, "{answer}");
    assert!(
        notes
            .iter()
            .any(|m| m["method"] == "notifications/message" && m["params"]["data"]["event"] == "tool call"),
        "{messages:?}"
    );
    let quiet = client.stream("tools/call", meta(None)).await;
    assert_eq!(quiet.len(), 1, "no log messages without a logLevel: {quiet:?}");
    assert_eq!(database.query_count("SELECT COUNT(*) FROM sessions").await, 0);
    server.stop().await;
}
