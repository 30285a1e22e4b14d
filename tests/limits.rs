//! The `[limits]` section against the real server: elicitations created per principal and minute
//! (a tool error with the retry time, in both protocol eras, nothing stored), sessions per
//! principal under the new key (the least recently used one ends), page requests per client
//! address after trusted proxies (429 with `Retry-After`), and the configuration's checks, each
//! naming its key. Limits are small, so no test waits for a minute to pass.

mod common;

use common::stateless::StatelessClient;
use common::{Backend, McpClient, Reply, TestDatabase, TestServer, elicitations, load_config, refusal, text};
use gatehouse::domain::SessionId;
use reqwest::StatusCode;
use serde_json::{Value, json};

const USER_HEADER: &str = "X-Forwarded-User";

/// A call-scoped confirmation, so every new amount asks anew; its upstream is never reached.
const PAY: &str = include_str!("fixtures/pay_confirmation.toml");

fn header_identity(extra: &str) -> String {
    format!("{}\n{extra}", include_str!("fixtures/header_identity.toml"))
}

async fn user(server: &TestServer, name: &str) -> McpClient {
    let mut client = server.client().with_user(USER_HEADER, name);
    client.initialize().await;
    client
}

fn pay_params(amount: u32) -> Value {
    json!({"name": "pay", "arguments": {"payee": "Alice", "amount": amount}})
}

async fn pay(client: &McpClient, amount: u32) -> Reply {
    client.request("tools/call", pay_params(amount)).await
}

/// A 2026-07-28 call of `pay` by `user`: its result.
async fn pay_stateless(server: &TestServer, user: &str, amount: u32) -> Value {
    StatelessClient::new(&server.url)
        .with_user(USER_HEADER, user)
        .result("tools/call", pay_params(amount))
        .await
}

/// The seconds a refusal tells the model to wait, from "… again in N seconds."
fn retry_seconds(message: &str) -> u64 {
    let (_, rest) = message.split_once("again in ").expect("a retry time");
    rest.split(' ').next().and_then(|n| n.parse().ok()).expect("seconds")
}

backend_test!(
    /// With 2 elicitations a minute, a principal's third new one is refused with a tool error
    /// saying when to retry, and nothing is stored; asking again for a pending one is not counted,
    /// and another principal, under the limit, never sees the refusal. A 2026-07-28 call beyond
    /// the limit gets the same tool error instead of `input_required`.
    async fn elicitations_beyond_the_rate_get_a_tool_error_with_the_retry_time(backend: Backend) {
        let database = TestDatabase::new(backend).await;
        let toml = header_identity(&format!("[limits]\nelicitations_per_minute = 2\n{PAY}"));
        let server = TestServer::start(&database, &toml).await;
        let alice = user(&server, "alice").await;
        let first = elicitations(&pay(&alice, 1).await).remove(0);
        for _ in 0..5 {
            let again = elicitations(&pay(&alice, 1).await).remove(0);
            assert_eq!(
                again["elicitationId"], first["elicitationId"],
                "pending ones are reused"
            );
        }
        elicitations(&pay(&alice, 2).await);

        let refused = pay(&alice, 3).await;
        let result = &refused.body["result"];
        assert_eq!(result["isError"], true, "{}", refused.body);
        let message = text(result);
        assert!(message.contains("2 times within the last minute"), "{message}");
        assert!((1..=30).contains(&retry_seconds(&message)), "{message}");
        assert_eq!(database.query_count("SELECT COUNT(*) FROM elicitations").await, 2);
        let reused = elicitations(&pay(&alice, 1).await).remove(0);
        assert_eq!(
            reused["elicitationId"], first["elicitationId"],
            "pending links still work"
        );

        let modern = pay_stateless(&server, "alice", 4).await;
        assert_eq!(modern["isError"], true, "{modern}");
        assert_eq!(modern["resultType"], "complete", "{modern}");
        assert!((1..=30).contains(&retry_seconds(&text(&modern))), "{modern}");
        assert_eq!(database.query_count("SELECT COUNT(*) FROM elicitations").await, 2);

        let bob = user(&server, "bob").await;
        for amount in [1, 2, 1, 2, 1] {
            elicitations(&pay(&bob, amount).await);
        }
        let asked = pay_stateless(&server, "carol", 1).await;
        assert_eq!(asked["resultType"], "input_required", "{asked}");
        server.stop().await;
    }
);

backend_test!(
    /// `limits.sessions_per_principal = 2`: a third `initialize` ends that principal's least
    /// recently used session (its id then gets 404); another principal with two sessions keeps
    /// both.
    async fn the_session_beyond_the_limit_ends_the_least_recently_used(backend: Backend) {
        let database = TestDatabase::new(backend).await;
        let toml = header_identity("[limits]\nsessions_per_principal = 2\n");
        let server = TestServer::start(&database, &toml).await;
        let bob = [user(&server, "bob").await, user(&server, "bob").await];
        let older = user(&server, "alice").await;
        let lru = user(&server, "alice").await;
        let id = |client: &McpClient| -> SessionId { client.session.clone().expect("session").parse().expect("id") };
        server
            .state
            .store
            .touch_sessions(&[id(&older)], chrono::Utc::now() + chrono::Duration::minutes(1))
            .await
            .expect("touch");
        let newest = user(&server, "alice").await;
        assert_eq!(lru.request("ping", json!({})).await.status, StatusCode::NOT_FOUND);
        for kept in [&older, &newest, &bob[0], &bob[1]] {
            assert_eq!(kept.request("ping", json!({})).await.status, StatusCode::OK);
        }
        assert_eq!(database.query_count("SELECT COUNT(*) FROM sessions").await, 4);
        server.stop().await;
    }
);

/// A page request as a trusted proxy forwards it for `client` (`X-Forwarded-For`).
async fn page(server: &TestServer, path: &str, client: &str) -> reqwest::Response {
    reqwest::Client::new()
        .get(format!("{}{path}", server.base()))
        .header("x-forwarded-for", client)
        .send()
        .await
        .expect("page request")
}

/// With 3 page requests a minute per client address, behind a trusted proxy: the fourth from one
/// address, the OAuth callback included, gets 429 with `Retry-After` and a plain page, whatever
/// the client writes in front of the proxy's `X-Forwarded-For`; other addresses, `/mcp` and the
/// health checks are not limited.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn page_requests_beyond_the_rate_get_429_with_retry_after() {
    let database = TestDatabase::new(Backend::Sqlite).await;
    let toml = "[server]\ntrusted_proxies = [\"127.0.0.1/32\"]\n[limits]\npage_requests_per_minute = 3\n";
    let server = TestServer::start(&database, toml).await;
    for path in ["/", "/connections", "/"] {
        assert_eq!(page(&server, path, "192.0.2.1").await.status(), StatusCode::OK);
    }
    for path in ["/", "/oauth/callback?state=x&code=y", "/connections"] {
        let refused = page(&server, path, "192.0.2.1").await;
        assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS, "{path}");
        let retry_after: u64 = refused.headers()["retry-after"]
            .to_str()
            .expect("ascii")
            .parse()
            .expect("seconds");
        assert!((1..=20).contains(&retry_after), "{retry_after}");
        assert!(refused.headers().contains_key("content-security-policy"));
        let body = refused.text().await.expect("body");
        assert!(body.contains("Too many requests"), "{body}");
        assert!(body.contains(&format!("Try again in {retry_after} seconds")), "{body}");
    }
    for forged in ["203.0.113.1", "203.0.113.2"] {
        let status = page(&server, "/", &format!("{forged}, 192.0.2.1")).await.status();
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "a forged hop counts nothing");
    }
    for path in ["/healthz", "/healthz/instance", "/readyz"] {
        assert_eq!(
            page(&server, path, "192.0.2.1").await.status(),
            StatusCode::OK,
            "{path}"
        );
    }
    let mut client = server.client().with_header("x-forwarded-for", "192.0.2.1");
    client.initialize().await;
    assert_eq!(client.request("ping", json!({})).await.status, StatusCode::OK);
    for path in ["/", "/connections", "/"] {
        assert_eq!(
            page(&server, path, "192.0.2.2").await.status(),
            StatusCode::OK,
            "{path}"
        );
    }
    server.stop().await;
}

#[test]
fn the_limits_are_checked_naming_their_keys() {
    let defaults = load_config("", &[]).expect("defaults");
    assert_eq!(defaults.limits.elicitations_per_minute, 30);
    assert_eq!(defaults.limits.page_requests_per_minute, 120);
    assert_eq!(defaults.sessions_per_principal(), 100);

    let old = load_config("[mcp]\nmax_sessions_per_principal = 7\n", &[]).expect("the old key");
    assert_eq!(old.sessions_per_principal(), 7);
    let both = "[limits]\nsessions_per_principal = 7\n[mcp]\nmax_sessions_per_principal = 7\n";
    assert_eq!(load_config(both, &[]).expect("equal").sessions_per_principal(), 7);
    let (key, message) = refusal(
        "[limits]\nsessions_per_principal = 7\n[mcp]\nmax_sessions_per_principal = 8\n",
        &[],
    );
    assert_eq!(key, "limits.sessions_per_principal");
    assert!(message.contains("mcp.max_sessions_per_principal"), "{message}");

    for (file, key) in [
        (
            "[limits]\nsessions_per_principal = 0\n",
            "limits.sessions_per_principal",
        ),
        (
            "[mcp]\nmax_sessions_per_principal = 0\n",
            "mcp.max_sessions_per_principal",
        ),
        (
            "[limits]\nelicitations_per_minute = -1\n",
            "limits.elicitations_per_minute",
        ),
        (
            "[limits]\npage_requests_per_minute = \"lots\"\n",
            "limits.page_requests_per_minute",
        ),
        (
            "[limits]\nelicitations_per_minute = 5000000000\n",
            "limits.elicitations_per_minute",
        ),
    ] {
        assert_eq!(refusal(file, &[]).0, key, "{file}");
    }

    let off = load_config(
        "[limits]\nelicitations_per_minute = 0\npage_requests_per_minute = 0\n",
        &[],
    )
    .expect("0 turns a rate off");
    assert_eq!(off.limits.elicitations_per_minute, 0);

    let env = load_config(
        "[limits]\nelicitations_per_minute = 3\n",
        &[
            ("GATEHOUSE_LIMITS__ELICITATIONS_PER_MINUTE", "5"),
            ("GATEHOUSE_LIMITS__SESSIONS_PER_PRINCIPAL", "9"),
            ("GATEHOUSE_LIMITS__PAGE_REQUESTS_PER_MINUTE", "0"),
        ],
    )
    .expect("environment overrides");
    assert_eq!(env.limits.elicitations_per_minute, 5);
    assert_eq!(env.sessions_per_principal(), 9);
    assert_eq!(env.limits.page_requests_per_minute, 0);
}
