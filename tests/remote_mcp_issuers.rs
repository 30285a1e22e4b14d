//! `auth = "mcp"` upstreams and the authorization servers they name (issue 40, items 6 and 7).
//! Mix-up (RFC 9700 4.4): a malicious upstream whose authorization server sends the browser on to
//! an honest one (which sends no `iss`) with gatehouse's client there and the malicious flow's
//! `state` and PKCE challenge never gets the honest server's code or the verifier at its token
//! endpoint. An issuer switch: when an upstream's metadata moves from server X to server Y, Y
//! gets none of X's tokens or codes, and the user is asked to sign in again.

mod common;

use common::fake_mcp_auth::{FakeMcpAuth, IssMode, MixUp};
use common::fake_oauth::s256_challenge;
use common::{Backend, Browser, HEADER_IDENTITY, Page, TestDatabase, TestServer, elicitations, url_of};
use serde_json::{Value, json};

/// gatehouse with header identity at `addr` and the `auth = "mcp"` upstreams `(id, url)`.
fn config(addr: &str, upstreams: &[(&str, &str)]) -> String {
    let identity = HEADER_IDENTITY.replacen("[server]\n", &format!("[server]\npublic_url = \"http://{addr}\"\n"), 1);
    let upstreams: String = upstreams
        .iter()
        .map(|(id, url)| {
            format!("\n[[upstreams]]\nid = \"{id}\"\nurl = \"{url}\"\nauth = \"mcp\"\ntools = [\"whoami\"]\ntimeout = \"10s\"\n")
        })
        .collect();
    format!("{identity}{upstreams}")
}

/// The elicitation alice's call of `tool` is answered with.
async fn asked(server: &TestServer, tool: &str) -> String {
    let client = server.eliciting_client("alice").await;
    let reply = client
        .request("tools/call", json!({"name": tool, "arguments": {}}))
        .await;
    let listed = elicitations(&reply);
    assert_eq!(listed.len(), 1, "{}", reply.body);
    url_of(&listed[0])
}

/// Follows the redirects from `url` (at most five), stopping before `stop_at` when a redirect
/// leads there: the last page, and where it would have gone.
async fn follow(browser: &Browser, mut url: String, stop_at: &str) -> (Page, Option<String>) {
    for _ in 0..5 {
        let page = browser.get(&url).await;
        if !page.status.is_redirection() {
            return (page, None);
        }
        let next = page.location();
        if next.contains(stop_at) {
            return (page, Some(next));
        }
        url = next;
    }
    panic!("more than five redirects from {url}");
}

/// The malicious server `evil` never got a code `honest` issued, nor a verifier of a challenge
/// `honest` was shown.
fn nothing_of(honest: &FakeMcpAuth, evil: &FakeMcpAuth) {
    let honest = honest.stats();
    let challenges: Vec<&str> = honest
        .authorize_requests
        .iter()
        .filter_map(|pairs| common::fake_mcp_auth::find(pairs, "code_challenge"))
        .collect();
    for request in evil.stats().token_requests {
        let code = request.param("code").unwrap_or_default();
        assert!(
            !honest.issued_codes.iter().any(|c| c == code),
            "the honest code reached the malicious server"
        );
        let verifier = request.param("code_verifier").map(s256_challenge).unwrap_or_default();
        assert!(
            !challenges.contains(&verifier.as_str()),
            "the verifier reached the malicious server"
        );
    }
}

/// The malicious server's move at the honest one's authorization endpoint.
fn mix_up(honest: &FakeMcpAuth, client_id: Option<String>, redirect_uri: Option<String>) -> MixUp {
    MixUp {
        authorize_url: format!("{}/authorize", honest.issuer()),
        resource: honest.mcp_url(),
        client_id,
        redirect_uri,
    }
}

backend_test!(
    async fn a_malicious_upstream_never_gets_an_honest_servers_code(backend: Backend) {
        // The honest server takes metadata documents and sends no `iss`.
        let honest = FakeMcpAuth::start().await;
        honest.set_options(|o| {
            o.cimd_supported = true;
            o.iss = IssMode::Omitted;
            o.as_metadata_overrides
                .insert("authorization_response_iss_parameter_supported".into(), json!(false));
        });
        // The malicious one says it takes them and sends no `iss` either; its sign-ins go on to
        // the honest server.
        let evil = FakeMcpAuth::start().await;
        evil.set_options(|o| {
            o.cimd_supported = true;
            o.as_metadata_overrides
                .insert("authorization_response_iss_parameter_supported".into(), json!(false));
            o.mix_up = Some(mix_up(&honest, None, None));
        });
        // Another malicious one says it sends `iss`, so gatehouse signs in there with a document.
        let evil2 = FakeMcpAuth::start().await;
        evil2.set_options(|o| {
            o.cimd_supported = true;
            o.mix_up = Some(mix_up(&honest, None, None));
        });
        let database = TestDatabase::new(backend).await;
        let addr = format!("127.0.0.1:{}", common::free_port());
        let upstreams = [("evil", evil.mcp_url()), ("evil2", evil2.mcp_url())];
        let upstreams: Vec<(&str, &str)> = upstreams.iter().map(|(id, url)| (*id, url.as_str())).collect();
        let server = TestServer::start_on(&database, &config(&addr, &upstreams), &addr).await;
        let base = server.base();
        let browser = Browser::as_user("x-forwarded-user", "alice");

        // The client gatehouse named at the malicious server, and its redirect URI, at the honest one.
        let connect = asked(&server, "evil_whoami").await;
        let authorize = browser.continue_to_provider(&connect).await;
        let (page, _) = follow(&browser, authorize, "/nowhere").await;
        assert!(
            !honest.stats().authorize_requests.is_empty(),
            "the browser reached the honest server"
        );
        nothing_of(&honest, &evil);
        assert!(page.status.is_client_error(), "{} {}", page.status, page.body);

        // The document gatehouse would be known by there: not served, as it signs in with none.
        evil.set_options(|o| {
            o.mix_up = Some(mix_up(
                &honest,
                Some(format!("{base}/oauth/client-metadata/evil")),
                Some(format!("{base}/oauth/callback/evil")),
            ))
        });
        let authorize = browser.continue_to_provider(&connect).await;
        let (page, _) = follow(&browser, authorize, "/nowhere").await;
        assert!(page.body.contains("answered 404"), "{}", page.body);
        nothing_of(&honest, &evil);

        // A document gatehouse does sign in with: the honest server's answer has no `iss`, which
        // that flow requires. At the configured providers' callback it ends the flow at once.
        let connect = asked(&server, "evil2_whoami").await;
        let authorize = browser.continue_to_provider(&connect).await;
        let (_, callback) = follow(&browser, authorize, "/oauth/callback").await;
        let callback = callback.expect("the honest server answered");
        assert!(
            callback.starts_with(&format!("{base}/oauth/callback/evil2?")),
            "{callback}"
        );
        let shared = callback.replacen("/oauth/callback/evil2?", "/oauth/callback?", 1);
        let page = browser.get(&shared).await;
        assert!(page.body.contains("came back to another sign-in"), "{}", page.body);
        let page = browser.get(&callback).await;
        assert!(page.body.contains("already used"), "the flow was ended: {}", page.body);
        let authorize = browser.continue_to_provider(&connect).await;
        let (_, callback) = follow(&browser, authorize, "/oauth/callback").await;
        let page = browser.get(&callback.expect("the honest server answered")).await;
        assert!(page.body.contains("did not say which provider"), "{}", page.body);
        nothing_of(&honest, &evil2);

        for evil in [&evil, &evil2] {
            let exchanges = evil.stats().token_requests.into_iter();
            assert_eq!(exchanges.filter(|t| t.grant_type == "authorization_code").count(), 0);
        }
        assert_eq!(database.query_count("SELECT COUNT(*) FROM connections").await, 0);
        server.stop().await;
    }
);

/// Every token `server` issued.
fn issued(server: &FakeMcpAuth) -> Vec<String> {
    let stats = server.stats();
    [
        stats.issued_access_tokens,
        stats.issued_refresh_tokens,
        stats.issued_codes,
    ]
    .concat()
}

/// Whether anything `y` was sent carries one of `tokens`.
fn carries_any(y: &FakeMcpAuth, tokens: &[String]) -> Vec<Value> {
    let stats = y.stats();
    let sent = stats
        .token_requests
        .iter()
        .flat_map(|t| t.params.iter().map(|(_, v)| v.clone()))
        .chain(stats.revoked_tokens);
    sent.filter(|v| tokens.contains(v)).map(Value::String).collect()
}

backend_test!(
    async fn a_new_authorization_server_gets_none_of_the_old_ones_tokens(backend: Backend) {
        // The upstream and its server X; Y, the server it moves to. Neither sends `iss`.
        let upstream = FakeMcpAuth::start().await;
        let y = FakeMcpAuth::start().await;
        for server in [&upstream, &y] {
            server.set_options(|o| {
                o.iss = IssMode::Omitted;
                o.as_metadata_overrides
                    .insert("authorization_response_iss_parameter_supported".into(), json!(false));
                // Within gatehouse's refresh margin: every use refreshes first.
                o.access_token_ttl = Some(30);
            });
        }
        let database = TestDatabase::new(backend).await;
        let addr = format!("127.0.0.1:{}", common::free_port());
        let toml = config(&addr, &[("notes", upstream.mcp_url().as_str())]);
        let server = TestServer::start_on(&database, &toml, &addr).await;
        let alice = Browser::as_user("x-forwarded-user", "alice");
        let page = alice.sign_in(&asked(&server, "notes_whoami").await).await;
        assert_eq!(page.status, reqwest::StatusCode::OK, "{}", page.body);
        // Bob's sign-in at X is under way when the upstream moves.
        let bob = Browser::as_user("x-forwarded-user", "bob");
        let bob_client = server.eliciting_client("bob").await;
        let reply = bob_client
            .request("tools/call", json!({"name": "notes_whoami", "arguments": {}}))
            .await;
        let authorize = bob.continue_to_provider(&url_of(&elicitations(&reply)[0])).await;
        let bob_callback = bob.authorize(&authorize).await;

        upstream.set_options(|o| {
            o.prm_overrides
                .insert("authorization_servers".into(), json!([y.issuer()]));
        });
        server.stop().await;
        let server = TestServer::start_on(&database, &toml, &addr).await;

        // Alice is asked to sign in again; X's refresh token does not go to Y.
        let again = asked(&server, "notes_whoami").await;
        assert!(again.contains("/connect/"), "{again}");
        assert_eq!(
            carries_any(&y, &issued(&upstream)),
            Vec::<Value>::new(),
            "X's refresh token went to Y"
        );
        // Bob's code from X goes nowhere.
        let page = bob.get(&bob_callback).await;
        assert!(page.body.contains("moved to another sign-in server"), "{}", page.body);
        assert_eq!(
            carries_any(&y, &issued(&upstream)),
            Vec::<Value>::new(),
            "X's code went to Y"
        );
        let exchanges = upstream.stats().token_requests.into_iter();
        assert_eq!(
            exchanges.filter(|t| t.grant_type == "authorization_code").count(),
            1,
            "alice's only"
        );
        // Disconnecting revokes nowhere but at X.
        let disconnected = server
            .eliciting_client("alice")
            .await
            .call(
                "tools/call",
                json!({"name": "disconnect", "arguments": {"provider": "notes"}}),
            )
            .await;
        assert_eq!(disconnected["isError"], false, "{disconnected}");
        assert_eq!(
            carries_any(&y, &issued(&upstream)),
            Vec::<Value>::new(),
            "X's token revoked at Y"
        );
        assert_eq!(database.query_count("SELECT COUNT(*) FROM connections").await, 0);
        server.stop().await;
    }
);
