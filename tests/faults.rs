//! Faults, against real `gatehouse` processes on a throwaway PostgreSQL cluster of each test's
//! own (never the shared server): a replica killed mid-flow, the database restarted under open
//! streams, and the database down for a while.

mod common;

use std::time::Duration;

use common::cluster::Cluster;
use common::fake_oauth::{FakeOptions, FakeProvider};
use common::replica::Replica;
use common::{Browser, McpClient, Reply, SseStream, TEST_KEY, WAIT, elicitations, eventually, free_port, url_of};
use reqwest::StatusCode;
use serde_json::{Value, json};

/// How long a request may take while the database is down: twice the pool's acquire timeout
/// (2 s). Before the fix a request waited 5 s and then failed with 500.
const PROMPTLY: Duration = Duration::from_secs(4);

/// The fake provider, and the configuration of its `me` tool.
async fn provider() -> (FakeProvider, String) {
    let fake = FakeProvider::start(FakeOptions::default()).await;
    let config = fake.configure(include_str!("fixtures/fake_provider.toml"));
    (fake, config)
}

/// Proves the completion came once: after it, a log event of a new call arrives next.
async fn next_is_a_new_event(client: &McpClient, stream: &mut SseStream) {
    client.call("logging/setLevel", json!({"level": "debug"})).await;
    let result = client.call("tools/call", json!({"name": "me"})).await;
    assert_eq!(result["isError"], false, "the completed sign-in is used: {result}");
    let (_, next) = stream.next_message(WAIT).await.expect("the call's log event");
    assert_eq!(next["method"], "notifications/message", "no second completion: {next}");
}

/// Replicas A and B behind one public URL (A's address, as a load balancer would give).
async fn two_replicas(cluster: &Cluster, config: &str) -> (Replica, Replica, String) {
    let a_port = free_port();
    let public_url = format!("http://127.0.0.1:{a_port}");
    let a = Replica::start(&cluster.url(), config, a_port, &public_url, TEST_KEY).await;
    let b = Replica::start(&cluster.url(), config, free_port(), &public_url, TEST_KEY).await;
    (a, b, public_url)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_killed_mid_flow_leaves_the_flow_to_the_other() {
    let Some(cluster) = Cluster::start() else {
        return;
    };
    let (_fake, config) = provider().await;
    let (a, b, public_url) = two_replicas(&cluster, &config).await;
    let mut client = McpClient::new(&a.mcp());
    client.initialize().await;
    let mut stream = client.open_stream(None).await;

    // The elicitation is created on A and the browser starts its sign-in there.
    let asked = elicitations(&client.request("tools/call", json!({"name": "me"})).await);
    let browser = Browser::new();
    let authorize = browser.continue_to_provider(&url_of(&asked[0])).await;
    let callback = browser.authorize(&authorize).await;

    // A dies before the callback; its stream ends.
    a.kill().await;
    let mut last_id = None;
    while let Some(event) = stream.next_event(WAIT).await {
        last_id = event.id.or(last_id);
    }
    assert!(stream.ended);

    // The load balancer sends the callback, and the client's reconnect, to B.
    let page = browser.get(&callback.replacen(&public_url, &b.base, 1)).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    let on_b = b.client(&client);
    let mut resumed = on_b.open_stream(last_id.as_deref()).await;
    assert_eq!(resumed.next_completion().await, asked[0]["elicitationId"]);
    next_is_a_new_event(&on_b, &mut resumed).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_recover_from_a_database_restart_by_themselves() {
    let Some(cluster) = Cluster::start() else {
        return;
    };
    let (_fake, config) = provider().await;
    let (a, b, _) = two_replicas(&cluster, &config).await;
    let mut client = McpClient::new(&a.mcp());
    client.initialize().await;
    let mut stream = b.client(&client).open_stream(None).await;
    assert!(stream.next_event(WAIT).await.is_some(), "priming");
    let asked = elicitations(&client.request("tools/call", json!({"name": "me"})).await);

    cluster.restart_server();
    a.wait_ready().await;
    b.wait_ready().await;

    // Completed through A after the restart; the stream on B, open all along, gets it once.
    let page = Browser::new().sign_in(&url_of(&asked[0])).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    assert_eq!(stream.next_completion().await, asked[0]["elicitationId"]);
    next_is_a_new_event(&client, &mut stream).await;
}

/// An `initialize` request of a new client.
fn initialize_body() -> Value {
    json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "faults", "version": "1"}}})
}

/// A 503 with `Retry-After` and the JSON-RPC error "service unavailable", answered promptly.
async fn assert_unavailable(what: &str, reply: impl Future<Output = Reply>) {
    let reply = tokio::time::timeout(PROMPTLY, reply)
        .await
        .unwrap_or_else(|_| panic!("{what}: no answer within {PROMPTLY:?}"));
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE, "{what}: {}", reply.body);
    assert_eq!(reply.headers["retry-after"], "1", "{what}");
    assert_eq!(reply.body["error"]["code"], -32010, "{what}: {}", reply.body);
    assert_eq!(
        reply.body["error"]["message"], "service unavailable, retry shortly",
        "{what}"
    );
}

/// The page is refused with 503 and `Retry-After`, promptly.
async fn assert_page_unavailable(browser: &Browser, url: &str) {
    let page = tokio::time::timeout(PROMPTLY, browser.get(url))
        .await
        .unwrap_or_else(|_| panic!("{url}: no answer within {PROMPTLY:?}"));
    assert_eq!(page.status, StatusCode::SERVICE_UNAVAILABLE, "{url}: {}", page.body);
    assert_eq!(page.headers["retry-after"], "1", "{url}");
    assert!(page.body.contains("Service unavailable"), "{}", page.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_the_database_is_down_requests_get_503_promptly_then_work_again() {
    let Some(cluster) = Cluster::start() else {
        return;
    };
    let (_fake, config) = provider().await;
    let port = free_port();
    let a = Replica::start(
        &cluster.url(),
        &config,
        port,
        &format!("http://127.0.0.1:{port}"),
        TEST_KEY,
    )
    .await;
    let mut client = McpClient::new(&a.mcp());
    client.initialize().await;
    let asked = elicitations(&client.request("tools/call", json!({"name": "me"})).await);
    let connect_url = url_of(&asked[0]);
    let browser = Browser::new();
    let connections_url = format!("{}/connections", a.base);
    let newcomer = McpClient::new(&a.mcp());
    let body = initialize_body();
    let down = async || {
        tokio::join!(
            assert_unavailable("initialize", newcomer.post_raw(&body, &[])),
            assert_unavailable("tools/call", client.request("tools/call", json!({"name": "me"}))),
            assert_page_unavailable(&browser, &connect_url),
            assert_page_unavailable(&browser, &connections_url),
        );
    };

    cluster.stop_server();
    // Before the replica knows: each request fails within the pool's acquire timeout.
    down().await;
    // Once its bus cannot reconnect, even a request that needs no database is refused at once.
    eventually("ping is refused during the outage", async || {
        (client.request("ping", json!({})).await.status == StatusCode::SERVICE_UNAVAILABLE).then_some(())
    })
    .await;
    down().await;

    cluster.start_server();
    let reply = eventually("tools/call works again", async || {
        let reply = client.request("tools/call", json!({"name": "me"})).await;
        (reply.status == StatusCode::OK).then_some(reply)
    })
    .await;
    assert_eq!(elicitations(&reply)[0]["elicitationId"], asked[0]["elicitationId"]);
    McpClient::new(&a.mcp()).initialize().await;
    assert_eq!(browser.get(&connect_url).await.status, StatusCode::OK);
    assert_eq!(browser.get(&connections_url).await.status, StatusCode::OK);
}
