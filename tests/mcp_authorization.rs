//! MCP authorization, resource-server side, against a real (fake) identity provider on loopback:
//! the 401 challenge and Protected Resource Metadata, bearer JWTs verified against the provider's
//! keys (rotation, and a flood of made-up key ids that must not hammer it), a token that cannot be
//! checked now (broken keys, a key not at hand yet) answered 503 and recovered from at once, tokens
//! as long as gatehouse reads, every kind of bad token refused with the right status and nothing
//! stored, opaque tokens by introspection,
//! sessions bound to the token's principal, and tools hidden by `allow` rules.

mod common;

use common::fake_idp::{FakeIdp, FakeIdpOptions, JwksFault, Signer, TestClient, TestUser};
use common::mcp::{McpClient, Reply};
use common::{Backend, TestDatabase, TestServer, eventually};
use reqwest::StatusCode;
use serde_json::{Value, json};

const SCOPE: &str = "mcp";

fn user(sub: &str, groups: &[&str]) -> TestUser {
    TestUser {
        sub: sub.to_owned(),
        name: format!("{sub} Example"),
        email: format!("{sub}@acme.test"),
        groups: groups.iter().map(|g| (*g).to_owned()).collect(),
    }
}

async fn idp(options: FakeIdpOptions) -> FakeIdp {
    let idp = FakeIdp::start(options).await;
    idp.add_user(user("alice", &["eng"]));
    idp.add_user(user("mallory", &["sales"]));
    idp
}

/// gatehouse in `oauth` mode at `idp`, its audience the default (its own `/mcp`), with a tool only
/// the group `eng` may see. `extra` goes into `[identity]`.
async fn server(database: &TestDatabase, idp: &FakeIdp, extra: &str) -> TestServer {
    let issuer = idp.issuer();
    TestServer::start_addressed(database, |addr| {
        format!(
            r#"
[identity]
mode = "oauth"
issuer = "{issuer}"
scopes = ["{SCOPE}"]
client_id = "gatehouse"
client_secret = "gatehouse-secret"
{extra}

[[tools]]
name = "eng_only"
description = "For engineers"
allow = {{ groups = ["eng"] }}
http = {{ method = "GET", url = "http://{addr}/healthz" }}
"#
        )
    })
    .await
}

fn bearer(server: &TestServer, token: &str) -> McpClient {
    server.client().with_user("Authorization", &format!("Bearer {token}"))
}

/// `initialize` with `token`, without asserting success.
async fn try_initialize(server: &TestServer, token: Option<&str>) -> Reply {
    let client = match token {
        Some(token) => bearer(server, token),
        None => server.client(),
    };
    let body = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    client.post_raw(&body, &[]).await
}

fn challenge(reply: &Reply) -> String {
    reply
        .headers
        .get("www-authenticate")
        .map(|v| v.to_str().expect("ascii").to_owned())
        .unwrap_or_default()
}

#[tokio::test]
async fn unauthenticated_requests_learn_where_to_get_a_token() {
    let idp = idp(FakeIdpOptions::default()).await;
    let database = TestDatabase::new(Backend::Sqlite).await;
    let server = server(&database, &idp, "").await;
    let base = server.base();

    let reply = try_initialize(&server, None).await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
    assert_eq!(
        challenge(&reply),
        format!(r#"Bearer resource_metadata="{base}/.well-known/oauth-protected-resource/mcp", scope="mcp""#)
    );
    for path in [
        "/.well-known/oauth-protected-resource/mcp",
        "/.well-known/oauth-protected-resource",
    ] {
        let response = reqwest::get(format!("{base}{path}")).await.expect("metadata");
        assert_eq!(response.status(), StatusCode::OK, "{path}");
        let document: Value = response.json().await.expect("json");
        assert_eq!(document["resource"], json!(format!("{base}/mcp")));
        assert_eq!(document["authorization_servers"], json!([idp.issuer()]));
        assert_eq!(document["scopes_supported"], json!(["mcp"]));
        assert_eq!(document["bearer_methods_supported"], json!(["header"]));
    }
    assert_eq!(database.query_count("SELECT COUNT(*) FROM sessions").await, 0);
    server.stop().await;
}

/// A 401 sent before the body has arrived says in its head that the connection closes (hyper
/// closes it anyway, the body being unread), so a client that retries at once with its token, as
/// httpx does, opens a new connection instead of writing into one that is going away. An answer
/// to a request whose body was read keeps the connection.
#[tokio::test]
async fn a_refusal_before_the_body_says_the_connection_closes() {
    let idp = idp(FakeIdpOptions::default()).await;
    let database = TestDatabase::new(Backend::Sqlite).await;
    let server = server(&database, &idp, "").await;
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: {}\r\nAccept: application/json, text/event-stream\r\n\
         Content-Type: application/json\r\nContent-Length: 100",
        server.addr
    );
    let answer = common::raw::head_without_body(server.addr, &head).await;
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
    let lowered = answer.to_ascii_lowercase();
    assert!(lowered.contains("\r\nconnection: close\r\n"), "{answer}");

    let token = idp.access_token("alice", &server.url, SCOPE);
    let reply = try_initialize(&server, Some(&token)).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    assert_ne!(
        reply.headers.get("connection").and_then(|v| v.to_str().ok()),
        Some("close")
    );
    server.stop().await;
}

#[tokio::test]
async fn a_valid_token_names_the_caller_and_binds_the_session() {
    let idp = idp(FakeIdpOptions::default()).await;
    let database = TestDatabase::new(Backend::Sqlite).await;
    let server = server(&database, &idp, "").await;
    let alice_token = idp.access_token("alice", &server.url, SCOPE);
    let mut alice = bearer(&server, &alice_token);
    alice.initialize().await;
    let whoami = alice.call("tools/call", json!({"name": "whoami"})).await;
    let principal = format!("{}#alice", idp.issuer());
    assert!(common::mcp::text(&whoami).contains(&principal), "{whoami}");

    // Verified once, then served from the cache: the keys were fetched once for all requests.
    for _ in 0..5 {
        alice.call("tools/list", json!({})).await;
    }
    assert_eq!(idp.stats().jwks_fetches, 1);

    // Mallory's valid token on alice's session: refused, and the session stays alice's.
    let mallory_token = idp.access_token("mallory", &server.url, SCOPE);
    let session = alice.session.clone().expect("alice's session");
    let reply = bearer(&server, &mallory_token)
        .post_raw(
            &json!({"jsonrpc": "2.0", "id": 9, "method": "tools/list"}),
            &[("Mcp-Session-Id", &session)],
        )
        .await;
    assert_eq!(reply.status, StatusCode::FORBIDDEN, "{}", reply.body);
    alice.call("tools/list", json!({})).await;
    server.stop().await;
}

#[tokio::test]
async fn bad_tokens_are_refused_and_leave_nothing_behind() {
    let idp = idp(FakeIdpOptions::default()).await;
    let database = TestDatabase::new(Backend::Sqlite).await;
    let server = server(&database, &idp, "").await;
    let valid = || idp.claims("alice", &server.url, SCOPE);
    let with = |change: &dyn Fn(&mut Value)| {
        let mut claims = valid();
        change(&mut claims);
        claims
    };
    let now = common::unix_seconds() as i64;
    let kid = idp.current_kid();
    let probes: Vec<(&str, String)> = vec![
        (
            "wrong audience",
            idp.sign(
                Signer::Current,
                None,
                with(&|c| c["aud"] = json!("https://elsewhere.test/mcp")),
            ),
        ),
        (
            "expired",
            idp.sign(Signer::Current, None, with(&|c| c["exp"] = json!(now - 3600))),
        ),
        (
            "not yet valid",
            idp.sign(Signer::Current, None, with(&|c| c["nbf"] = json!(now + 3600))),
        ),
        ("alg none", idp.sign(Signer::NoneAlg, Some(&kid), valid())),
        (
            "HS256 keyed with the public key",
            idp.sign(Signer::Hs256WithPublicKey, None, valid()),
        ),
        (
            "a known kid, another key",
            idp.sign(Signer::Stranger, Some(&kid), valid()),
        ),
        (
            "another issuer",
            idp.sign(
                Signer::Current,
                None,
                with(&|c| c["iss"] = json!("https://evil.test/realms/test")),
            ),
        ),
        (
            "no exp",
            idp.sign(
                Signer::Current,
                None,
                with(&|c| {
                    c.as_object_mut().expect("object").remove("exp");
                }),
            ),
        ),
        ("not a JWT", "opaque-but-introspection-is-off".to_owned()),
        ("garbage", "a.b.c".to_owned()),
    ];
    for (what, token) in &probes {
        let reply = try_initialize(&server, Some(token)).await;
        assert_eq!(reply.status, StatusCode::UNAUTHORIZED, "{what}: {}", reply.body);
        let challenge = challenge(&reply);
        assert!(
            challenge.starts_with(r#"Bearer error="invalid_token""#),
            "{what}: {challenge}"
        );
        assert!(challenge.contains("resource_metadata="), "{what}: {challenge}");
    }
    // A valid token without the scope: 403 naming the scope.
    let unscoped = idp.access_token("alice", &server.url, "openid profile");
    let reply = try_initialize(&server, Some(&unscoped)).await;
    assert_eq!(reply.status, StatusCode::FORBIDDEN, "{}", reply.body);
    let challenge = challenge(&reply);
    assert!(
        challenge.starts_with(r#"Bearer error="insufficient_scope""#) && challenge.contains(r#"scope="mcp""#),
        "{challenge}"
    );
    // ES256 from a published key is fine: the algorithm follows the key.
    let es256 = idp.sign(Signer::Es256, None, valid());
    assert_eq!(try_initialize(&server, Some(&es256)).await.status, StatusCode::OK);
    assert_eq!(
        database.query_count("SELECT COUNT(*) FROM sessions").await,
        1,
        "only the ES256 caller's"
    );
    server.stop().await;
}

#[tokio::test]
async fn keys_rotate_but_made_up_key_ids_cannot_hammer_the_provider() {
    let idp = idp(FakeIdpOptions::default()).await;
    let database = TestDatabase::new(Backend::Sqlite).await;
    // The default interval (30s) is longer than this test: at most one refetch happens in it.
    let server = server(&database, &idp, "").await;
    let token = idp.access_token("alice", &server.url, SCOPE);
    assert_eq!(try_initialize(&server, Some(&token)).await.status, StatusCode::OK);
    assert_eq!(idp.stats().jwks_fetches, 1);

    let flood: Vec<_> = (0..200)
        .map(|i| {
            let token = idp.sign(
                Signer::Current,
                Some(&format!("made-up-{i}")),
                idp.claims("alice", &server.url, SCOPE),
            );
            let server = &server;
            async move { try_initialize(server, Some(&token)).await }
        })
        .collect();
    // Each was made after the set was fetched, so its key may have been published since: it
    // cannot be checked until the set may be fetched again. Not now (503), not a dead token.
    for reply in futures::future::join_all(flood).await {
        assert_cannot_verify_now(&reply);
    }
    assert_eq!(idp.stats().jwks_fetches, 1);

    // A real rotation right after that fetch: the same, the client keeps its token.
    idp.rotate_keys(true);
    let rotated = idp.access_token("alice", &server.url, SCOPE);
    assert_cannot_verify_now(&try_initialize(&server, Some(&rotated)).await);
    // A token issued well before the set was fetched, or expired, under a key it lacks is bad.
    let now = common::unix_seconds();
    let mut before_the_fetch = idp.claims("alice", &server.url, SCOPE);
    before_the_fetch["iat"] = json!(now - 600);
    let mut expired = idp.claims("alice", &server.url, SCOPE);
    expired["exp"] = json!(now - 600);
    for claims in [before_the_fetch, expired] {
        let token = idp.sign(Signer::Current, Some("made-up"), claims);
        let reply = try_initialize(&server, Some(&token)).await;
        assert_eq!(reply.status, StatusCode::UNAUTHORIZED, "{}", reply.body);
        assert!(challenge(&reply).starts_with(r#"Bearer error="invalid_token""#));
    }
    assert_eq!(idp.stats().jwks_fetches, 1);
    server.stop().await;

    // With a short interval, a rotated key is picked up: the new kid fetches the set again.
    let server = server_with_interval(&database, &idp).await;
    let before = idp.stats().jwks_fetches;
    let token = idp.access_token("alice", &server.url, SCOPE);
    assert_eq!(try_initialize(&server, Some(&token)).await.status, StatusCode::OK);
    idp.rotate_keys(false);
    let rotated = idp.access_token("alice", &server.url, SCOPE);
    eventually("the rotated key is accepted", async || {
        (try_initialize(&server, Some(&rotated)).await.status == StatusCode::OK).then_some(())
    })
    .await;
    // The old key left the set: its tokens, issued before, are refused once they are not cached.
    let mut claims = idp.claims("alice", &server.url, SCOPE);
    claims["iat"] = json!(common::unix_seconds() - 600);
    let old_key_token = idp.sign(Signer::Current, Some("key-1"), claims);
    assert_eq!(
        try_initialize(&server, Some(&old_key_token)).await.status,
        StatusCode::UNAUTHORIZED
    );
    assert!(idp.stats().jwks_fetches > before);
    server.stop().await;
}

async fn server_with_interval(database: &TestDatabase, idp: &FakeIdp) -> TestServer {
    server(database, idp, r#"jwks_refresh_interval = "100ms""#).await
}

/// A token that cannot be checked now: 503 with `Retry-After` and no challenge, so the client
/// keeps its token and tries again.
fn assert_cannot_verify_now(reply: &Reply) {
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE, "{}", reply.body);
    assert!(reply.headers.contains_key("retry-after"), "{:?}", reply.headers);
    assert!(!reply.headers.contains_key("www-authenticate"), "{:?}", reply.headers);
}

/// Asks with `token` until it is accepted (within a few seconds, well inside the 30 s refresh
/// interval), every answer before that a 503.
async fn accepted_once_the_keys_answer(server: &TestServer, token: &str) {
    common::eventually_within(
        std::time::Duration::from_secs(5),
        "the token is accepted once the keys answer",
        async || {
            let reply = try_initialize(server, Some(token)).await;
            if reply.status == StatusCode::OK {
                return Some(());
            }
            assert_cannot_verify_now(&reply);
            None
        },
    )
    .await;
}

#[tokio::test]
async fn while_the_key_set_is_broken_valid_tokens_are_503_and_work_once_it_answers() {
    let idp = idp(FakeIdpOptions::default()).await;
    let database = TestDatabase::new(Backend::Sqlite).await;
    // The default refresh interval (30 s): recovery must not wait for it.
    let server = server(&database, &idp, "").await;
    let token = idp.access_token("alice", &server.url, SCOPE);
    for fault in [JwksFault::Unavailable, JwksFault::Garbage, JwksFault::NoKeys] {
        idp.break_jwks(Some(fault));
        let before = idp.stats().jwks_fetches;
        // Every request is a 503, also after a fetch has failed (that fetch's own, and the next
        // ones' that may not fetch again yet).
        eventually(&format!("the keys are fetched while {fault:?}"), async || {
            assert_cannot_verify_now(&try_initialize(&server, Some(&token)).await);
            (idp.stats().jwks_fetches > before).then_some(())
        })
        .await;
        for _ in 0..3 {
            assert_cannot_verify_now(&try_initialize(&server, Some(&token)).await);
        }
    }
    idp.break_jwks(None);
    accepted_once_the_keys_answer(&server, &token).await;

    // Broken again, with the keys at hand: tokens under a known key are verified as before; one
    // under a key rotated in meanwhile cannot be, until the set answers again.
    idp.break_jwks(Some(JwksFault::Unavailable));
    let known = idp.access_token("alice", &server.url, SCOPE);
    assert_eq!(try_initialize(&server, Some(&known)).await.status, StatusCode::OK);
    idp.rotate_keys(true);
    let rotated = idp.access_token("alice", &server.url, SCOPE);
    assert_cannot_verify_now(&try_initialize(&server, Some(&rotated)).await);
    server.stop().await;

    // With a short refresh interval the set is asked again while it is broken, and a rotated
    // key is accepted as soon as it answers.
    let server = server_with_interval(&database, &idp).await;
    let known = idp.access_token("alice", &server.url, SCOPE);
    let before = idp.stats().jwks_fetches;
    eventually("the keys are fetched while broken", async || {
        assert_cannot_verify_now(&try_initialize(&server, Some(&known)).await);
        (idp.stats().jwks_fetches >= before + 2).then_some(())
    })
    .await;
    idp.break_jwks(None);
    accepted_once_the_keys_answer(&server, &known).await;
    idp.break_jwks(Some(JwksFault::Garbage));
    idp.rotate_keys(true);
    let rotated = idp.access_token("alice", &server.url, SCOPE);
    let before = idp.stats().jwks_fetches;
    eventually("the keys are fetched while broken", async || {
        assert_cannot_verify_now(&try_initialize(&server, Some(&rotated)).await);
        (idp.stats().jwks_fetches >= before + 2).then_some(())
    })
    .await;
    idp.break_jwks(None);
    accepted_once_the_keys_answer(&server, &rotated).await;
    server.stop().await;
}

/// A valid token for `sub` of `length` bytes or at most three fewer: its claims padded.
fn token_of_length(idp: &FakeIdp, server: &TestServer, sub: &str, length: usize) -> String {
    let sign = |pad: usize| {
        let mut claims = idp.claims(sub, &server.url, SCOPE);
        claims["pad"] = json!("p".repeat(pad));
        idp.sign(Signer::Current, None, claims)
    };
    let unpadded = sign(0).len();
    assert!(unpadded <= length, "{sub}'s token alone is {unpadded} bytes");
    // Base64 makes four bytes of three.
    let mut pad = (length - unpadded) * 3 / 4;
    let mut token = sign(pad);
    while token.len() > length {
        pad -= 1;
        token = sign(pad);
    }
    assert!(token.len() + 3 >= length, "{} bytes for {length}", token.len());
    token
}

/// Entra ID puts up to 200 group ids in a token; with the rest of a request head the token must
/// fit, and so must any token up to the 16 KiB gatehouse reads. Longer ones, up to well beyond,
/// are refused as invalid tokens with the challenge, not by the HTTP layer (431, or a connection
/// cut while the client still writes).
#[tokio::test]
async fn large_tokens_fit_the_request_head_and_longer_ones_are_invalid_tokens() {
    let idp = idp(FakeIdpOptions::default()).await;
    let groups: Vec<String> = (0..200).map(|i| format!("{i:08x}-5b0c-4f7e-9a3d-{i:012x}")).collect();
    let groups: Vec<&str> = groups.iter().map(String::as_str).collect();
    idp.add_user(user("entra", &groups));
    let database = TestDatabase::new(Backend::Sqlite).await;
    let server = server(&database, &idp, "").await;
    // What else a request carries through a proxy or two.
    let forwarded = format!("for=203.0.113.7;proto=https, {}", "for=198.51.100.9".repeat(100));
    let extra = [
        ("Forwarded", forwarded.as_str()),
        ("User-Agent", "claude-code/2.1 (external, cli) node/22"),
        ("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
        ("MCP-Protocol-Version", "2025-11-25"),
    ];
    let initialize = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});

    let groups_token = idp.access_token("entra", &server.url, SCOPE);
    assert!(groups_token.len() > 10_000, "{} bytes", groups_token.len());
    let longest = token_of_length(&idp, &server, "entra", 16 * 1024);
    for token in [&groups_token, &longest] {
        let reply = bearer(&server, token).post_raw(&initialize, &extra).await;
        assert_eq!(reply.status, StatusCode::OK, "{} bytes: {}", token.len(), reply.body);
    }
    let mut entra = bearer(&server, &longest);
    entra.initialize().await;
    let whoami = entra.call("tools/call", json!({"name": "whoami"})).await;
    assert!(common::mcp::text(&whoami).contains("#entra"), "{whoami}");

    for length in [16 * 1024 + 8, 24 * 1024, 30 * 1024] {
        let token = token_of_length(&idp, &server, "entra", length);
        let reply = bearer(&server, &token).post_raw(&initialize, &extra).await;
        assert_eq!(reply.status, StatusCode::UNAUTHORIZED, "{length} bytes: {}", reply.body);
        let challenge = challenge(&reply);
        assert!(
            challenge.starts_with(r#"Bearer error="invalid_token""#) && challenge.contains("resource_metadata="),
            "{length} bytes: {challenge}"
        );
    }
    server.stop().await;
}

#[tokio::test]
async fn opaque_tokens_are_introspected_once_and_cached() {
    let options = FakeIdpOptions {
        opaque_access_tokens: true,
        ..FakeIdpOptions::default()
    };
    let idp = idp(options).await;
    let database = TestDatabase::new(Backend::Sqlite).await;
    let server = server(&database, &idp, "introspection = true").await;
    // Introspection asks as the pages' confidential client.
    idp.register_client(TestClient {
        id: "gatehouse".into(),
        secret: Some("gatehouse-secret".into()),
        redirect_uris: vec![format!("{}/login/callback", server.base())],
    });
    let token = idp.access_token("alice", &server.url, SCOPE);
    let mut alice = bearer(&server, &token);
    alice.initialize().await;
    for _ in 0..3 {
        alice.call("tools/list", json!({})).await;
    }
    assert_eq!(idp.stats().introspections, 1);
    let unknown = try_initialize(&server, Some("not-a-token-the-provider-issued")).await;
    assert_eq!(unknown.status, StatusCode::UNAUTHORIZED);
    server.stop().await;
}

#[tokio::test]
async fn an_unreachable_provider_is_a_503_not_a_401() {
    let idp = idp(FakeIdpOptions::default()).await;
    let token = idp.access_token("alice", "http://127.0.0.1:1/mcp", SCOPE);
    let database = TestDatabase::new(Backend::Sqlite).await;
    let closed = format!("http://127.0.0.1:{}/realms/test", common::local::free_port());
    let server = TestServer::start(
        &database,
        &format!("[identity]\nmode = \"oauth\"\nissuer = \"{closed}\"\nclient_id = \"gatehouse\"\n"),
    )
    .await;
    let reply = try_initialize(&server, Some(&token)).await;
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE, "{}", reply.body);
    assert!(reply.headers.get("www-authenticate").is_none());
    server.stop().await;
}

#[tokio::test]
async fn allow_rules_hide_tools_from_callers_they_do_not_match() {
    let idp = idp(FakeIdpOptions::default()).await;
    let database = TestDatabase::new(Backend::Sqlite).await;
    let server = server(&database, &idp, "").await;
    let names = |list: &Value| -> Vec<String> {
        list["tools"]
            .as_array()
            .expect("tools")
            .iter()
            .map(|t| t["name"].as_str().expect("name").to_owned())
            .collect()
    };
    let mut alice = bearer(&server, &idp.access_token("alice", &server.url, SCOPE));
    alice.initialize().await;
    assert!(names(&alice.call("tools/list", json!({})).await).contains(&"eng_only".to_owned()));
    let result = alice.call("tools/call", json!({"name": "eng_only"})).await;
    assert_ne!(result["isError"], json!(true), "{result}");

    let mut mallory = bearer(&server, &idp.access_token("mallory", &server.url, SCOPE));
    mallory.initialize().await;
    assert!(!names(&mallory.call("tools/list", json!({})).await).contains(&"eng_only".to_owned()));
    let refused = mallory.request("tools/call", json!({"name": "eng_only"})).await;
    assert_eq!(refused.body["error"]["message"], json!("Unknown tool: eng_only"));
    server.stop().await;
}
