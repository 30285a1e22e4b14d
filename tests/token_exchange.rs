//! `auth = "token_exchange"` (RFC 8693) against the fake identity provider: gatehouse in
//! `identity.mode = "oauth"` exchanges the caller's own access token for one whose `aud` is the
//! upstream, reuses it while it lasts, exchanges again once it expires (reopening the upstream
//! session with the new token), and turns a refused exchange into a tool error naming the
//! provider's `error`; an exchange answer the upstream could replay at gatehouse (the caller's
//! own token echoed, one for gatehouse's audience, of another kind) is refused. The upstream is the bearer-checking MCP server, which asks the provider
//! about every token it gets and records what it saw.

mod common;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use common::fake_idp::{ExchangeMisbehaviour, FakeIdp, FakeIdpOptions, TestClient, TestUser};
use common::mcp_upstreams::BearerServer;
use common::{Backend, Browser, McpClient, TestDatabase, TestServer, elicitations, eventually, url_of};
use serde_json::{Value, json};

/// What gatehouse asks for in exchange.
const UPSTREAM_SCOPE: &str = "docs:read";

struct Setup {
    idp: FakeIdp,
    upstream: BearerServer,
    _database: TestDatabase,
    server: TestServer,
}

/// The fake provider (exchanged tokens living `lifetime`), the upstream checking tokens with it,
/// and gatehouse in `oauth` mode with the upstream as `docs`, reached by token exchange.
async fn setup(backend: Backend, lifetime: std::time::Duration) -> Option<Setup> {
    let idp = FakeIdp::start(FakeIdpOptions {
        exchanged_token_lifetime: lifetime,
        ..FakeIdpOptions::default()
    })
    .await;
    idp.add_user(TestUser {
        sub: "alice".into(),
        name: "Alice Example".into(),
        email: "alice@acme.test".into(),
        groups: vec!["eng".into()],
    });
    idp.register_client(TestClient {
        id: "gatehouse".into(),
        secret: Some("gatehouse-secret".into()),
        redirect_uris: Vec::new(),
    });
    let upstream = BearerServer::start_with(&idp.issuer(), &[], &["--cache-seconds", "0"]).await?;
    let database = TestDatabase::new(backend).await;
    let toml = format!(
        r#"
[identity]
mode = "oauth"
issuer = "{issuer}"
scopes = ["mcp"]
client_id = "gatehouse"
client_secret = "gatehouse-secret"

[[upstreams]]
id = "docs"
url = "{url}"
auth = "token_exchange"
scopes = ["{UPSTREAM_SCOPE}"]
tools = ["whoami"]
timeout = "5s"
"#,
        issuer = idp.issuer(),
        url = upstream.url(),
    );
    let server = TestServer::start(&database, &toml).await;
    Some(Setup {
        idp,
        upstream,
        _database: database,
        server,
    })
}

/// alice's MCP client, initialized with her own access token for gatehouse.
async fn alice(s: &Setup) -> (McpClient, String) {
    let token = s.idp.access_token("alice", &s.server.url, "mcp");
    let mut client = s.server.client().with_user("Authorization", &format!("Bearer {token}"));
    client.initialize().await;
    (client, token)
}

async fn whoami(client: &McpClient) -> Value {
    client
        .call("tools/call", json!({"name": "docs_whoami", "arguments": {}}))
        .await
}

/// The bearer tokens of the `tools/call` requests the upstream saw, in order.
async fn upstream_call_tokens(upstream: &BearerServer) -> Vec<String> {
    upstream
        .seen()
        .await
        .iter()
        .filter(|e| e["kind"] == "request" && e["method"] == "tools/call")
        .filter_map(|e| e["authorization"].as_str()?.strip_prefix("Bearer ").map(str::to_owned))
        .collect()
}

/// A JWT's claims, unverified (the upstream's provider checked it).
fn claims(jwt: &str) -> Value {
    let payload = jwt.split('.').nth(1).expect("a JWT");
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload).expect("base64url")).expect("JSON claims")
}

fn error_text(result: &Value) -> String {
    assert_eq!(result["isError"], json!(true), "{result}");
    result["content"][0]["text"].as_str().unwrap_or_default().to_owned()
}

backend_test!(
    async fn the_upstream_gets_a_token_exchanged_for_it_never_the_callers_own(backend: Backend) {
        let Some(s) = setup(backend, std::time::Duration::from_secs(3600)).await else {
            return;
        };
        let (client, own) = alice(&s).await;
        for _ in 0..2 {
            let result = whoami(&client).await;
            assert_ne!(result["isError"], json!(true), "{result}");
        }
        let tokens = upstream_call_tokens(&s.upstream).await;
        assert_eq!(tokens.len(), 2, "both calls reached the upstream");
        for token in &tokens {
            assert_ne!(token, &own, "the caller's own token never goes upstream");
            let claims = claims(token);
            assert_eq!(claims["aud"], json!(s.upstream.url()), "{claims}");
            assert_eq!(claims["sub"], json!("alice"), "{claims}");
            assert_eq!(claims["scope"], json!(UPSTREAM_SCOPE), "{claims}");
        }
        assert_eq!(tokens[0], tokens[1], "the second call reuses the exchanged token");
        assert_eq!(s.idp.stats().token_exchanges, 1, "one exchange for both calls");
        let asked: std::collections::HashMap<String, String> = s
            .idp
            .last_token_request()
            .expect("a token request")
            .into_iter()
            .collect();
        assert_eq!(asked["grant_type"], "urn:ietf:params:oauth:grant-type:token-exchange");
        assert_eq!(asked["subject_token"], own);
        assert_eq!(
            asked["subject_token_type"],
            "urn:ietf:params:oauth:token-type:access_token"
        );
        assert_eq!(asked["audience"], s.upstream.url());
        assert_eq!(asked["resource"], s.upstream.url());
        // Nothing of the caller's own token reaches the upstream in any header either.
        for event in s.upstream.seen().await {
            assert!(!event.to_string().contains(&own), "{event}");
        }
    }
);

backend_test!(
    async fn an_expired_exchanged_token_is_exchanged_again(backend: Backend) {
        // Held until a quarter of its lifetime before it ends; whole seconds at the provider
        // leave it valid there for at least 4 s of the 5.
        let Some(s) = setup(backend, std::time::Duration::from_secs(5)).await else {
            return;
        };
        let (client, own) = alice(&s).await;
        let result = whoami(&client).await;
        assert_ne!(result["isError"], json!(true), "{result}");
        assert_eq!(s.idp.stats().token_exchanges, 1);
        eventually("a second exchange once the first token expires", async || {
            let result = whoami(&client).await;
            assert_ne!(result["isError"], json!(true), "{result}");
            (s.idp.stats().token_exchanges >= 2).then_some(())
        })
        .await;
        let tokens = upstream_call_tokens(&s.upstream).await;
        let (first, last) = (&tokens[0], tokens.last().expect("calls"));
        assert_ne!(first, last, "the last call went with the new token");
        assert!(!tokens.contains(&own));
        assert_eq!(claims(last)["aud"], json!(s.upstream.url()));
        let sessions: std::collections::HashSet<String> = s
            .upstream
            .seen()
            .await
            .iter()
            .filter(|e| e["kind"] == "request" && e["method"] == "tools/call")
            .filter_map(|e| e["session"].as_str().map(str::to_owned))
            .collect();
        assert_eq!(sessions.len(), 2, "the session reopened with the new token");
    }
);

backend_test!(
    async fn a_refused_exchange_is_a_tool_error_naming_the_providers_error(backend: Backend) {
        let Some(s) = setup(backend, std::time::Duration::from_secs(3600)).await else {
            return;
        };
        let (client, _) = alice(&s).await;
        s.idp.refuse_exchanges(Some("unauthorized_client"));
        let text = error_text(&whoami(&client).await);
        assert!(text.contains("unauthorized_client") && text.contains("docs"), "{text}");
        assert!(
            upstream_call_tokens(&s.upstream).await.is_empty(),
            "nothing reached the upstream"
        );

        s.idp.refuse_exchanges(None);
        let result = whoami(&client).await;
        assert_ne!(result["isError"], json!(true), "{result}");
        assert_eq!(s.idp.stats().token_exchanges, 2);
    }
);

backend_test!(
    /// The identity provider answers an exchange with a token that must not go upstream: each is
    /// refused with a tool error telling what the operator must change, and the upstream sees
    /// nothing; once the provider answers rightly the call goes through.
    async fn an_exchange_answer_the_upstream_could_replay_is_refused(backend: Backend) {
        common::captured_logs();
        let Some(s) = setup(backend, std::time::Duration::from_secs(3600)).await else {
            return;
        };
        let (client, own) = alice(&s).await;
        let upstream = s.upstream.url().to_owned();
        let cases = [
            (ExchangeMisbehaviour::EchoSubject, "the caller's own token"),
            (
                ExchangeMisbehaviour::Audience(json!(s.server.url)),
                "names gatehouse itself",
            ),
            (
                ExchangeMisbehaviour::Audience(json!([upstream, s.server.url])),
                "names gatehouse itself",
            ),
            (
                ExchangeMisbehaviour::Audience(json!("https://elsewhere.example/mcp")),
                "does not name the upstream",
            ),
            (
                ExchangeMisbehaviour::IssuedTokenType("urn:ietf:params:oauth:token-type:refresh_token"),
                "neither an access token nor a JWT",
            ),
            (ExchangeMisbehaviour::TokenType("mac"), "is `mac`, not `Bearer`"),
        ];
        for (misbehaviour, reason) in cases {
            s.idp.misbehave_in_exchanges(Some(misbehaviour.clone()));
            let text = error_text(&whoami(&client).await);
            assert!(
                text.contains("issued a token gatehouse cannot use for the docs server")
                    && text.contains(reason)
                    && text.contains("The operator must"),
                "{misbehaviour:?}: {text}"
            );
            assert!(!text.contains(&own), "{text}");
        }
        assert!(
            upstream_call_tokens(&s.upstream).await.is_empty(),
            "no call reached the upstream"
        );
        for event in s.upstream.seen().await {
            assert!(!event.to_string().contains(&own), "{event}");
        }
        assert!(common::logged_text().contains("token exchange answer is refused"));

        s.idp.misbehave_in_exchanges(None);
        let result = whoami(&client).await;
        assert_ne!(result["isError"], json!(true), "{result}");
        let tokens = upstream_call_tokens(&s.upstream).await;
        assert_eq!(tokens.len(), 1);
        assert_ne!(tokens[0], own);
    }
);

/// Follows the pages' own sign-in from `url` (redirects by hand: /login, the identity provider,
/// /login/callback, back), so `browser` holds a session of whoever is signed in at the provider.
async fn sign_in_to_the_pages(browser: &Browser, base: &str, url: &str) {
    let mut next = url.to_owned();
    for _ in 0..6 {
        let page = browser.get(&next).await;
        if !page.status.is_redirection() {
            assert_eq!(page.status, reqwest::StatusCode::OK, "{}", page.body);
            return;
        }
        let location = page.location();
        next = if location.starts_with('/') {
            format!("{base}{location}")
        } else {
            location
        };
    }
    panic!("the pages' sign-in did not end within six redirects");
}

backend_test!(
    /// The identity provider wants interaction before it exchanges (`interaction_required`): the
    /// user is sent through a sign-in at it for the upstream, a URL elicitation like any other,
    /// and the call runs with the token that sign-in got, whose `aud` is the upstream.
    async fn interaction_required_sends_the_user_through_a_sign_in(backend: Backend) {
        let Some(s) = setup(backend, std::time::Duration::from_secs(3600)).await else {
            return;
        };
        let base = s.server.base();
        s.idp.register_client(TestClient {
            id: "gatehouse".into(),
            secret: Some("gatehouse-secret".into()),
            redirect_uris: vec![format!("{base}/login/callback"), format!("{base}/oauth/callback")],
        });
        s.idp.sign_in_as("alice");
        s.idp.refuse_exchanges(Some("interaction_required"));
        let own = s.idp.access_token("alice", &s.server.url, "mcp");
        let mut client = s.server.client().with_user("Authorization", &format!("Bearer {own}"));
        client
            .initialize_with("2025-11-25", json!({"elicitation": {"url": {}}}))
            .await;
        let asked = client
            .request("tools/call", json!({"name": "docs_whoami", "arguments": {}}))
            .await;
        let url = url_of(&elicitations(&asked)[0]);
        let browser = Browser::new();
        sign_in_to_the_pages(&browser, &base, &url).await;
        let page = browser.sign_in(&url).await;
        assert_eq!(page.status, reqwest::StatusCode::OK, "{}", page.body);

        let result = whoami(&client).await;
        assert_ne!(result["isError"], json!(true), "{result}");
        let tokens = upstream_call_tokens(&s.upstream).await;
        let used = tokens.last().expect("the call reached the upstream");
        assert_ne!(used, &own);
        assert_eq!(claims(used)["aud"], json!(s.upstream.url()));
        assert_eq!(claims(used)["sub"], json!("alice"));
        let asked: std::collections::HashMap<String, String> = s
            .idp
            .last_token_request()
            .expect("a token request")
            .into_iter()
            .collect();
        assert_eq!(asked["grant_type"], "authorization_code");
        assert_eq!(asked["resource"], s.upstream.url());
        // The sign-in's token serves the next call too, without asking for an exchange again.
        let again = whoami(&client).await;
        assert_ne!(again["isError"], json!(true), "{again}");
        assert_eq!(s.idp.stats().token_exchanges, 1, "only the refused one");
    }
);

backend_test!(
    async fn a_prompt_of_the_upstream_is_got_with_an_exchanged_token_too(backend: Backend) {
        let Some(s) = setup(backend, std::time::Duration::from_secs(5)).await else {
            return;
        };
        let (client, own) = alice(&s).await;
        // A tool call connects alice, and her session lists the upstream's prompts.
        let result = whoami(&client).await;
        assert_ne!(result["isError"], json!(true), "{result}");
        eventually("the upstream's prompt is listed", async || {
            let listed = client.call("prompts/list", json!({})).await;
            listed["prompts"]
                .as_array()?
                .iter()
                .any(|p| p["name"] == "docs_greet")
                .then_some(())
        })
        .await;
        // Once the token of the tool call expires, getting the prompt exchanges alice's own again.
        let get = json!({"name": "docs_greet", "arguments": {"name": "Alice"}});
        eventually("an exchange for prompts/get", async || {
            let got = client.call("prompts/get", get.clone()).await;
            assert_eq!(got["messages"][0]["content"]["text"], "Hello, Alice.", "{got}");
            (s.idp.stats().token_exchanges >= 2).then_some(())
        })
        .await;
        let seen = s.upstream.seen().await;
        let last = seen
            .iter()
            .rev()
            .find(|e| e["kind"] == "request" && e["method"] == "prompts/get")
            .and_then(|e| e["authorization"].as_str()?.strip_prefix("Bearer "))
            .expect("prompts/get reached the upstream");
        assert_ne!(last, own);
        assert_eq!(claims(last)["aud"], json!(s.upstream.url()));
        assert_ne!(
            Some(last),
            upstream_call_tokens(&s.upstream).await.first().map(String::as_str)
        );
    }
);
