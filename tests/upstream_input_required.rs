//! The official reference server (`@modelcontextprotocol/server-everything`, over stdio) behind
//! gatehouse, called by a 2026-07-28 client: what the server asks of the client during a call
//! (sampling, a form elicitation, roots) becomes the call's `input_required`, and the answers of
//! the retry go back to the server's waiting request, on whichever replica the retry lands. A
//! client that did not declare what the server asks for gets the server's error in the result.
//! Retries waiting for a call parked on a replica that went away are bounded per user.
//! Driven by hand (raw requests) and by the official Python SDK's 2026-07-28 `Client`.

mod common;

use std::time::Duration;

use common::mcp_upstreams::server_everything;
use common::python::{PythonScript, python_sdk};
use common::stateless::{STATELESS, StatelessClient};
use common::{Backend, TestDatabase, TestServer, eventually_within};
use serde_json::{Map, Value, json};

/// Declares everything server-everything may ask for.
fn capable(url: &str) -> StatelessClient {
    StatelessClient::new(url).with_capabilities(json!({"sampling": {}, "elicitation": {"form": {}}, "roots": {}}))
}

/// gatehouse with server-everything as the stdio upstream `se`, once its tools are listed.
async fn start(database: &TestDatabase) -> Option<TestServer> {
    let everything = server_everything().await?;
    let stdio = format!("[\"node\", {:?}, \"stdio\"]", everything.to_string_lossy());
    let server = TestServer::start(database, &format!("[[upstreams]]\nid = \"se\"\ncommand = {stdio}\n")).await;
    wait_for_tools(&server).await;
    Some(server)
}

async fn wait_for_tools(server: &TestServer) {
    let client = StatelessClient::new(&server.url);
    eventually_within(Duration::from_secs(60), "server-everything's tools", async || {
        let tools = client.result("tools/list", json!({})).await.to_string();
        [
            "se_trigger-sampling-request",
            "se_trigger-elicitation-request",
            "se_get-roots-list",
        ]
        .iter()
        .all(|name| tools.contains(name))
        .then_some(())
    })
    .await;
}

/// The one input request of an `input_required` result: its key, the request, and the state.
fn asked(result: &Value) -> (String, Value, String) {
    assert_eq!(result["resultType"], "input_required", "{result}");
    let requests = result["inputRequests"].as_object().expect("inputRequests");
    assert_eq!(requests.len(), 1, "{result}");
    let (key, request) = requests.iter().next().expect("one");
    let state = result["requestState"].as_str().expect("requestState");
    (key.clone(), request.clone(), state.to_owned())
}

/// The retry of `tool` with `arguments`, answering `key` with `response`.
fn retry(tool: &str, arguments: &Value, key: &str, response: Value, state: &str) -> Value {
    let mut responses = Map::new();
    responses.insert(key.to_owned(), response);
    json!({"name": tool, "arguments": arguments, "inputResponses": responses, "requestState": state})
}

/// A complete, successful result's text.
fn completed(result: &Value) -> String {
    assert_eq!(result["resultType"], "complete", "{result}");
    result["content"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["text"].as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Calls `tool`, which asks the client `method`; answers with `response` through `retrier` (the
/// same replica, or another): the final result's text.
async fn asked_and_answered(
    caller: &StatelessClient,
    retrier: &StatelessClient,
    tool: &str,
    arguments: Value,
    method: &str,
    response: Value,
) -> (Value, String) {
    let first = caller
        .result("tools/call", json!({"name": tool, "arguments": arguments}))
        .await;
    let (key, request, state) = asked(&first);
    assert_eq!(request["method"], method, "{first}");
    let last = retrier
        .result("tools/call", retry(tool, &arguments, &key, response, &state))
        .await;
    assert_eq!(last["isError"], false, "{last}");
    (request, completed(&last))
}

fn sampled(text: &str) -> Value {
    json!({"role": "assistant", "content": {"type": "text", "text": text}, "model": "interop-model", "stopReason": "endTurn"})
}

backend_test!(
    async fn sampling_elicitation_and_roots_asked_during_a_call_become_input_required(backend: Backend) {
        let database = TestDatabase::new(backend).await;
        let Some(server) = start(&database).await else { return };
        let client = capable(&server.url);

        let sampling = "se_trigger-sampling-request";
        let (request, said) = asked_and_answered(
            &client,
            &client,
            sampling,
            json!({"prompt": "name a colour", "maxTokens": 10}),
            "sampling/createMessage",
            sampled("teal, says the model"),
        )
        .await;
        let prompt = request["params"]["messages"][0]["content"]["text"]
            .as_str()
            .unwrap_or_default();
        assert!(prompt.contains("name a colour"), "{request}");
        assert!(
            said.contains("teal, says the model") && said.contains("interop-model"),
            "{said}"
        );

        let elicitation = "se_trigger-elicitation-request";
        let accepted = json!({"action": "accept", "content": {"name": "Ada Lovelace", "check": true}});
        let (request, said) =
            asked_and_answered(&client, &client, elicitation, json!({}), "elicitation/create", accepted).await;
        assert_eq!(request["params"]["mode"], "form", "{request}");
        let message = request["params"]["message"].as_str().unwrap_or_default();
        assert!(
            message.starts_with("The se server asks: "),
            "marked as the upstream's: {message}"
        );
        assert!(
            request["params"]["requestedSchema"]["properties"]["name"].is_object(),
            "{request}"
        );
        assert!(said.contains("Name: Ada Lovelace"), "{said}");

        let declined = json!({"action": "decline"});
        let (_, said) =
            asked_and_answered(&client, &client, elicitation, json!({}), "elicitation/create", declined).await;
        assert!(said.contains("User declined"), "the server got the decline: {said}");

        let roots = json!({"roots": [{"uri": "file:///srv/gatehouse-root", "name": "root"}]});
        let (_, said) = asked_and_answered(&client, &client, "se_get-roots-list", json!({}), "roots/list", roots).await;
        assert!(said.contains("file:///srv/gatehouse-root"), "{said}");

        // A client that declared no sampling: the server is told at once, and says so.
        let without = StatelessClient::new(&server.url).with_capabilities(json!({"elicitation": {"form": {}}}));
        let arguments = json!({"prompt": "name a colour", "maxTokens": 10});
        let result = without
            .result("tools/call", json!({"name": sampling, "arguments": arguments}))
            .await;
        assert_eq!(result["resultType"], "complete", "{result}");
        assert_eq!(result["isError"], true, "{result}");
        assert!(
            result.to_string().contains("cannot answer sampling requests"),
            "{result}"
        );
        // The same client declared form elicitation: that request still reaches it.
        let first = without
            .result("tools/call", json!({"name": elicitation, "arguments": {}}))
            .await;
        assert_eq!(asked(&first).1["method"], "elicitation/create", "{first}");
        server.stop().await;
    }
);

postgres_test!(
    /// The call parks on replica A; its retry lands on B, which passes the answers to A over the
    /// bus and answers with the result A's call ends with.
    async fn a_retry_on_another_replica_reaches_the_call_parked_on_the_first() {
        let database = TestDatabase::new(Backend::Postgres).await;
        let Some(a) = start(&database).await else { return };
        let Some(b) = start(&database).await else { return };
        let on_a = capable(&a.url);
        let on_b = on_a.at(&b.url);
        let (_, said) = asked_and_answered(
            &on_a,
            &on_b,
            "se_trigger-sampling-request",
            json!({"prompt": "name a colour", "maxTokens": 10}),
            "sampling/createMessage",
            sampled("ochre, from replica B's client"),
        )
        .await;
        assert!(said.contains("ochre, from replica B's client"), "{said}");

        let accepted = json!({"action": "accept", "content": {"name": "Grace Hopper"}});
        let (_, said) = asked_and_answered(
            &on_b,
            &on_a,
            "se_trigger-elicitation-request",
            json!({}),
            "elicitation/create",
            accepted,
        )
        .await;
        assert!(said.contains("Name: Grace Hopper"), "{said}");
        a.stop().await;
        b.stop().await;
    }
);

/// Retries one user may have held at once in [`retries_of_a_dead_replicas_call_are_bounded_per_user`].
const HELD: usize = 2;

/// gatehouse with `tests/upstreams/asking_server.py` as the stdio upstream `asker` (its `ask`
/// tool asks the client's model), one user's held retries bounded to [`HELD`], once its tools
/// are listed.
async fn start_asking(database: &TestDatabase) -> TestServer {
    let script = common::repo().join("tests/upstreams/asking_server.py");
    let config = format!(
        "[limits]\nheld_retries_per_principal = {HELD}\n\n[[upstreams]]\nid = \"asker\"\n\
         command = [\"python3\", {:?}]\ntimeout = \"1s\"\n",
        script.to_string_lossy()
    );
    let server = TestServer::start(database, &config).await;
    let client = StatelessClient::new(&server.url);
    eventually_within(Duration::from_secs(60), "the asking server's tools", async || {
        let tools = client.result("tools/list", json!({})).await.to_string();
        tools.contains("asker_ask").then_some(())
    })
    .await;
    server
}

postgres_test!(
    /// A call parks on replica A, which then goes away; one user's retries of it on B each wait
    /// for an answer that never comes. At most `limits.held_retries_per_principal` of them wait:
    /// one more is refused at once, saying why, while the others are still held.
    async fn retries_of_a_dead_replicas_call_are_bounded_per_user() {
        let database = TestDatabase::new(Backend::Postgres).await;
        let a = start_asking(&database).await;
        let b = start_asking(&database).await;
        let on_a = StatelessClient::new(&a.url).with_capabilities(json!({"sampling": {}}));
        let on_b = on_a.at(&b.url);
        let first = on_a
            .result("tools/call", json!({"name": "asker_ask", "arguments": {}}))
            .await;
        let (key, request, state) = asked(&first);
        assert_eq!(request["method"], "sampling/createMessage", "{first}");
        a.stop().await;

        let retried = retry("asker_ask", &json!({}), &key, sampled("crimson"), &state);
        let held: Vec<_> = (0..HELD)
            .map(|_| {
                let (client, retried) = (on_b.clone(), retried.clone());
                tokio::spawn(async move { client.result("tools/call", retried).await })
            })
            .collect();
        let calls = b.mcp.calls.clone();
        eventually_within(common::WAIT, "the user's retries are held", async || {
            (calls.held_now() == HELD).then_some(())
        })
        .await;

        let beyond = on_b.result("tools/call", retried.clone()).await;
        assert_eq!(beyond["resultType"], "complete", "{beyond}");
        assert_eq!(beyond["isError"], true, "{beyond}");
        let said = beyond.to_string();
        assert!(
            said.contains("Refused at once") && said.contains("limits.held_retries_per_principal"),
            "{beyond}"
        );
        assert_eq!(calls.held_now(), HELD, "the others are still held");
        assert!(held.iter().all(|h| !h.is_finished()), "the others still wait");

        for waiting in held {
            let result = waiting.await.expect("a held retry");
            assert_eq!(result["isError"], true, "{result}");
            assert!(result.to_string().contains("did not answer"), "{result}");
        }
        assert_eq!(calls.held_now(), 0);
        b.stop().await;
    }
);

/// The Python SDK's 2026-07-28 client (`tests/interop/python_stateless.py`) calling `tool` with
/// `flags`: the events it printed (its callbacks', then the result).
async fn python_call(python: &std::path::Path, server: &TestServer, tool: &str, flags: &[&str]) -> Vec<Value> {
    let mut args = vec![
        "--url",
        server.url.as_str(),
        "--call",
        tool,
        "--mode",
        STATELESS,
        "--timeout",
        "30",
    ];
    args.extend_from_slice(flags);
    let mut script = PythonScript::start(python, "tests/interop/python_stateless.py", &args);
    let mut events = Vec::new();
    while let Some(event) = script.next().await {
        events.push(event);
    }
    script.succeeded().await;
    let result = events.last().expect("a result");
    assert_eq!(result["protocolVersion"], STATELESS, "{events:?}");
    assert_eq!(result["result"]["isError"], false, "{events:?}");
    events
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_answers_what_the_server_asks_through_input_required() {
    let Some(python) = python_sdk().await else { return };
    let database = TestDatabase::new(Backend::Sqlite).await;
    let Some(server) = start(&database).await else { return };
    let text = |events: &[Value]| {
        events
            .last()
            .map(|e| e["result"]["content"].to_string())
            .unwrap_or_default()
    };

    let sampling = [
        "--args",
        r#"{"prompt": "name a colour", "maxTokens": 10}"#,
        "--sampling-reply",
        "teal, says the model",
    ];
    let events = python_call(&python, &server, "se_trigger-sampling-request", &sampling).await;
    assert_eq!(events[0]["event"], "sampling", "{events:?}");
    assert!(events[0]["params"].to_string().contains("name a colour"), "{events:?}");
    assert!(text(&events).contains("teal, says the model"), "{events:?}");

    let form = ["--form-content", r#"{"name": "Ada Lovelace"}"#];
    let events = python_call(&python, &server, "se_trigger-elicitation-request", &form).await;
    assert_eq!(events[0]["event"], "elicitation", "{events:?}");
    assert_eq!(events[0]["mode"], "form", "{events:?}");
    assert!(text(&events).contains("Name: Ada Lovelace"), "{events:?}");

    let roots = ["--root", "file:///srv/gatehouse-root"];
    let events = python_call(&python, &server, "se_get-roots-list", &roots).await;
    assert_eq!(events[0]["event"], "roots", "{events:?}");
    assert!(text(&events).contains("file:///srv/gatehouse-root"), "{events:?}");
    server.stop().await;
}
