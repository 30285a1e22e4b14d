//! Refused sign-ins: another user's browser, tampered, replayed, unbound and expired callbacks,
//! forged identity headers, the provider's issuer, host cookies on https, and hostile values on the
//! pages.

use super::*;

backend_test!(
    async fn another_users_browser_is_refused_and_nothing_is_bound(backend: Backend) {
        let (_fake, database, server) = start(backend, FakeOptions::default(), |toml| {
            format!("{toml}{HEADER_IDENTITY}")
        })
        .await;
        let alice = server.client();
        let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {"elicitation": {"url": {}}}}});
        let reply = alice.post_raw(&init, &[("x-forwarded-user", "alice")]).await;
        let alice = McpClient {
            session: Some(reply.headers["mcp-session-id"].to_str().expect("id").to_owned()),
            ..alice
        };
        let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "me"}});
        let elicitation = elicitations(&alice.post_raw(&call, &[("x-forwarded-user", "alice")]).await).remove(0);
        let url = &url_of(&elicitation);

        let bob = Browser::as_user("x-forwarded-user", "bob");
        let page = bob.get(url).await;
        assert_eq!(page.status, StatusCode::FORBIDDEN);
        assert!(page.body.contains("another user"));
        let alices_page = Browser::as_user("x-forwarded-user", "alice").get(url).await;
        let post = bob.press(url, &server.base(), "continue", &alices_page.csrf()).await;
        assert_eq!(post.status, StatusCode::FORBIDDEN, "even with a valid form token");
        let decline = bob.press(url, &server.base(), "decline", &alices_page.csrf()).await;
        assert_eq!(decline.status, StatusCode::FORBIDDEN);
        assert_eq!(
            database.query_count("SELECT COUNT(*) FROM oauth_flows").await,
            0,
            "no flow was started"
        );
        assert_eq!(
            database
                .query_count("SELECT COUNT(*) FROM elicitations WHERE status = 'pending'")
                .await,
            1
        );
        // Alice's own forged form (no valid token, or from another site) is refused too.
        let alice_browser = Browser::as_user("x-forwarded-user", "alice");
        let forged = alice_browser.press(url, &server.base(), "continue", "forged").await;
        assert_eq!(forged.status, StatusCode::FORBIDDEN);
        let cross_site = alice_browser
            .press(url, "https://evil.example", "continue", &alices_page.csrf())
            .await;
        assert_eq!(cross_site.status, StatusCode::FORBIDDEN);
        assert_eq!(
            Browser::new().get(url).await.status,
            StatusCode::UNAUTHORIZED,
            "no identity, no page"
        );
        assert_eq!(database.query_count("SELECT COUNT(*) FROM oauth_flows").await, 0);

        // A callback started by Alice cannot be finished by Bob's browser, even with her cookie.
        let authorize = alice_browser.continue_to_provider(url).await;
        let callback = alice_browser.authorize(&authorize).await;
        let cookie = alice_browser.cookie_header();
        let stolen = reqwest::Client::new()
            .get(&callback)
            .header("cookie", cookie)
            .header("x-forwarded-user", "bob")
            .send()
            .await
            .expect("callback");
        assert_eq!(stolen.status(), StatusCode::BAD_REQUEST);
        assert_eq!(
            database.query_count("SELECT COUNT(*) FROM connections").await,
            0,
            "nothing bound to Bob or Alice"
        );
        assert_eq!(
            alice_browser.get(&callback).await.status,
            StatusCode::OK,
            "Alice can still finish"
        );
        assert_eq!(
            database
                .query_count("SELECT COUNT(*) FROM connections WHERE principal = 'alice'")
                .await,
            1
        );
        let replayed = Browser::as_user("x-forwarded-user", "bob").get(&callback).await;
        assert_eq!(
            replayed.status,
            StatusCode::BAD_REQUEST,
            "Bob learns nothing of Alice's sign-in"
        );
        assert!(!replayed.body.contains("connected"), "{}", replayed.body);
        server.stop().await;
    }
);

backend_test!(
    async fn tampered_replayed_and_unbound_callbacks_are_refused(backend: Backend) {
        let s = setup(backend).await;
        let elicitation = elicitation_for(&s.client, "me").await;
        let url = &url_of(&elicitation);
        let browser = Browser::new();
        let authorize = browser.continue_to_provider(url).await;
        let callback = browser.authorize(&authorize).await;

        let stranger = Browser::new();
        let no_cookie = stranger.get(&callback).await;
        assert_eq!(no_cookie.status, StatusCode::BAD_REQUEST);
        assert!(no_cookie.body.contains("another browser"));
        let parsed = url::Url::parse(&callback).expect("callback url");
        let cookie_name = browser.cookie_header().split('=').next().expect("cookie").to_owned();
        let wrong_cookie = reqwest::Client::new()
            .get(&callback)
            .header("cookie", format!("{cookie_name}=forged"))
            .send()
            .await
            .expect("get");
        assert_eq!(wrong_cookie.status(), StatusCode::BAD_REQUEST);
        let mut tampered = parsed.clone();
        tampered
            .query_pairs_mut()
            .clear()
            .append_pair("state", "tampered")
            .append_pair("code", "x");
        assert_eq!(browser.get(tampered.as_str()).await.status, StatusCode::BAD_REQUEST);
        assert_eq!(
            browser.get(&format!("{}/oauth/callback", s.server.base())).await.status,
            StatusCode::BAD_REQUEST
        );
        assert_eq!(
            s.database.query_count("SELECT COUNT(*) FROM connections").await,
            0,
            "nothing stored"
        );
        assert_eq!(
            s.fake.stats().code_exchanges,
            0,
            "no code was exchanged for a refused callback"
        );

        assert_eq!(browser.get(&callback).await.status, StatusCode::OK);
        let replay = reqwest::Client::new()
            .get(&callback)
            .header("cookie", format!("{cookie_name}={}", "x"))
            .send()
            .await
            .expect("get");
        // A replay changes nothing; to the flow's own user it says what is true (issue 9, item 15).
        assert_eq!(replay.status(), StatusCode::OK);
        assert!(replay.text().await.expect("body").contains("is connected"));
        let replay_same_browser = Browser::new();
        let again = replay_same_browser.get(&callback).await;
        assert_eq!(again.status, StatusCode::OK);
        assert_eq!(s.fake.stats().code_exchanges, 1, "a replayed state exchanges nothing");

        assert_eq!(
            browser
                .get(&format!("{}/connect/not-a-uuid", s.server.base()))
                .await
                .status,
            StatusCode::NOT_FOUND
        );
        let unknown = format!("{}/connect/{}", s.server.base(), uuid::Uuid::now_v7());
        assert_eq!(browser.get(&unknown).await.status, StatusCode::NOT_FOUND);
        assert_eq!(
            browser.get(url).await.status,
            StatusCode::GONE,
            "a completed elicitation"
        );
        s.server.stop().await;
    }
);

backend_test!(
    async fn expired_elicitations_are_refused(backend: Backend) {
        let s = setup(backend).await;
        let elicitation = elicitation_for(&s.client, "me").await;
        let url = url_of(&elicitation);
        let browser = Browser::new();
        let authorize = browser.continue_to_provider(&url).await;
        let callback = browser.authorize(&authorize).await;
        s.database.expire_elicitations().await;
        assert_eq!(browser.get(&url).await.status, StatusCode::GONE);
        let late = browser.get(&callback).await;
        assert_eq!(late.status, StatusCode::BAD_REQUEST);
        assert!(late.body.contains("expired"));
        assert_eq!(s.database.query_count("SELECT COUNT(*) FROM connections").await, 0);
        // The sweeper marks it expired; the next call asks afresh.
        s.server.state.gate.sweep().await.expect("sweep");
        assert_eq!(
            s.database
                .query_count("SELECT COUNT(*) FROM elicitations WHERE status = 'expired'")
                .await,
            1
        );
        let fresh = elicitation_for(&s.client, "me").await;
        assert_ne!(fresh["elicitationId"], elicitation["elicitationId"]);
        s.server.stop().await;
    }
);

backend_test!(
    async fn forged_identity_headers_from_untrusted_addresses_are_refused(backend: Backend) {
        let untrusted = HEADER_IDENTITY.replace("127.0.0.1/32", "10.9.9.9/32");
        let (_fake, database, server) =
            start(backend, FakeOptions::default(), |toml| format!("{toml}{untrusted}")).await;
        let page = Browser::as_user("x-forwarded-user", "alice")
            .get(&format!("{}/connect/{}", server.base(), uuid::Uuid::now_v7()))
            .await;
        assert_eq!(page.status, StatusCode::UNAUTHORIZED);
        let callback = Browser::as_user("x-forwarded-user", "alice")
            .get(&format!("{}/oauth/callback?state=x&code=y", server.base()))
            .await;
        assert_eq!(callback.status, StatusCode::UNAUTHORIZED);
        assert_eq!(database.query_count("SELECT COUNT(*) FROM oauth_flows").await, 0);
        server.stop().await;
    }
);

/// The sign-in through `me`'s elicitation ends at a callback refused with `why`: nothing stored,
/// no code exchanged. Stops the server.
async fn refused_sign_in(s: Setup, why: &str) {
    let elicitation = elicitation_for(&s.client, "me").await;
    let page = Browser::new().sign_in(&url_of(&elicitation)).await;
    assert_eq!(page.status, StatusCode::BAD_REQUEST);
    assert!(page.body.contains(why), "{}", page.body);
    assert_eq!(s.database.query_count("SELECT COUNT(*) FROM connections").await, 0);
    assert_eq!(s.fake.stats().code_exchanges, 0);
    s.server.stop().await;
}

backend_test!(
    async fn the_issuer_is_checked_when_the_provider_sends_one(backend: Backend) {
        let options = FakeOptions {
            issuer: Some("https://fake.example".into()),
            ..FakeOptions::default()
        };
        let wrong = setup_with(backend, options.clone(), |toml| {
            toml.replace("scopes = [", "issuer = \"https://other.example\"\nscopes = [")
        })
        .await;
        refused_sign_in(wrong, "expected provider").await;

        let right = setup_with(backend, options, |toml| {
            toml.replace("scopes = [", "issuer = \"https://fake.example\"\nscopes = [")
        })
        .await;
        let elicitation = elicitation_for(&right.client, "me").await;
        sign_in(&elicitation).await;
        right.server.stop().await;
    }
);

backend_test!(
    async fn a_callback_without_its_issuer_or_with_another_providers_is_refused(backend: Backend) {
        // The provider has an issuer, but the answer names none.
        let silent = setup_with(backend, FakeOptions::default(), |toml| {
            toml.replace("scopes = [", "issuer = \"https://fake.example\"\nscopes = [")
        })
        .await;
        refused_sign_in(silent, "did not say which provider").await;

        // Mix-up: Fake Hub has no issuer, and the answer on the shared redirect URI names another
        // configured provider's.
        let options = FakeOptions {
            issuer: Some("https://other.example".into()),
            ..FakeOptions::default()
        };
        let mixed = setup_with(backend, options, |toml| {
            format!(
                "{toml}\n[[providers]]\nid = \"other\"\nauthorize_url = \"https://other.example/authorize\"\n\
                 token_url = \"https://other.example/token\"\nclient_id = \"c\"\nclient_secret = \"s\"\n\
                 issuer = \"https://other.example\"\n"
            )
        })
        .await;
        refused_sign_in(mixed, "expected provider").await;
    }
);

backend_test!(
    async fn https_deployments_bind_the_browser_with_host_cookies(backend: Backend) {
        let s = setup_with(backend, FakeOptions::default(), |toml| {
            format!("[server]\npublic_url = \"https://gh.example\"\n{toml}")
        })
        .await;
        let elicitation = elicitation_for(&s.client, "me").await;
        let url = &url_of(&elicitation);
        assert!(url.starts_with("https://gh.example/connect/"));
        let local = url.replace("https://gh.example", &s.server.base());
        let browser = Browser::new();
        let page = browser.get(&local).await;
        let response = browser
            .press(&local, "https://gh.example", "continue", &page.csrf())
            .await;
        assert_eq!(response.status, StatusCode::SEE_OTHER);
        let cookie = response.headers["set-cookie"].to_str().expect("cookie");
        assert!(cookie.starts_with("__Host-gatehouse-flow-"), "{cookie}");
        for attribute in ["; Secure", "; HttpOnly", "; SameSite=Lax", "; Path=/"] {
            assert!(cookie.contains(attribute), "{cookie} lacks {attribute}");
        }
        assert!(!cookie.contains("Domain"), "__Host- cookies have no Domain");
        let from_elsewhere = Browser::new();
        let page = from_elsewhere.get(&local).await;
        let refused = from_elsewhere
            .press(&local, &s.server.base(), "continue", &page.csrf())
            .await;
        assert_eq!(
            refused.status,
            StatusCode::FORBIDDEN,
            "a form posted from another origin than the public one"
        );
        s.server.stop().await;
    }
);

backend_test!(
    async fn hostile_values_are_escaped_on_pages(backend: Backend) {
        let s = setup(backend).await;
        let mut hostile = s.server.client();
        let evil = "<script>alert(\"x\")</script>&'";
        let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25",
            "capabilities": {"elicitation": {"url": {}}}, "clientInfo": {"name": evil, "version": "1"}}});
        let reply = McpClient::new(&s.server.url).post_raw(&init, &[]).await;
        hostile.session = Some(reply.headers["mcp-session-id"].to_str().expect("id").to_owned());
        let elicitation = elicitation_for(&hostile, "me").await;
        let url = &url_of(&elicitation);
        let browser = Browser::new();
        let page = browser.get(url).await;
        assert!(!page.body.contains("<script>alert"), "{}", page.body);
        assert!(
            page.body.contains("&#60;script&#62;alert(&#34;x&#34;)"),
            "shown escaped: {}",
            page.body
        );
        s.fake.set_next_user("<img src=x onerror=alert(1)>");
        let done = browser.sign_in(url).await;
        assert_eq!(done.status, StatusCode::OK);
        assert!(
            !done.body.contains("<img src=x") && done.body.contains("&#60;img src=x"),
            "{}",
            done.body
        );
        s.server.stop().await;
    }
);
