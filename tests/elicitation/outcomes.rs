//! How a sign-in ends when it does not simply succeed: declined or failed at the provider, its
//! elicitation expired while a callback that started in time waits, its callback reloaded, or the
//! database failing to save it.

use super::*;

backend_test!(
    async fn declining_reports_once_then_asks_again(backend: Backend) {
        let s = setup(backend).await;
        let mut stream = s.client.open_stream(None).await;
        let elicitation = elicitation_for(&s.client, "me").await;
        let url = &url_of(&elicitation);
        let browser = Browser::new();
        let page = browser.get(url).await;
        let declined = browser.press(url, &s.server.base(), "decline", &page.csrf()).await;
        assert_eq!(declined.status, StatusCode::OK);
        let (_, message) = stream
            .next_message(WAIT)
            .await
            .expect("completion notification for a decline");
        assert_eq!(message["params"]["elicitationId"], elicitation["elicitationId"]);
        let retried = s.client.call("tools/call", json!({"name": "me"})).await;
        assert_eq!(retried["isError"], true);
        assert!(text(&retried).contains("declined"), "{retried}");
        let later = elicitation_for(&s.client, "me").await;
        assert_ne!(
            later["elicitationId"], elicitation["elicitationId"],
            "a later call elicits afresh"
        );
        // Declining twice changes and sends nothing the second time.
        let second = browser.press(url, &s.server.base(), "decline", &page.csrf()).await;
        assert_eq!(second.status, StatusCode::GONE);
        assert!(stream.next_message(Duration::from_millis(500)).await.is_none());
        s.server.stop().await;
    }
);

backend_test!(
    /// A decline at the provider ends the elicitation. Any other error (issue 9, item 10), at the
    /// callback or at the token endpoint, is the provider's fault: logged at WARN with the provider
    /// and the error code, a plain page naming the provider and linking back to the connect page,
    /// which still works: nothing was stored and the request is still open.
    async fn provider_errors_leave_the_request_open_with_the_way_back(backend: Backend) {
        let s = setup(backend).await;
        let mut stream = s.client.open_stream(None).await;
        let browser = Browser::new();
        s.fake.set_authorize_outcome(AuthorizeOutcome::Deny);
        let denied = elicitation_for(&s.client, "me").await;
        let page = browser.sign_in(&url_of(&denied)).await;
        assert_eq!(page.status, StatusCode::OK);
        assert!(page.body.contains("declined"));
        let (_, message) = stream.next_message(WAIT).await.expect("completion notification");
        assert_eq!(message["params"]["elicitationId"], denied["elicitationId"]);
        assert_eq!(
            s.database
                .query_count("SELECT COUNT(*) FROM elicitations WHERE status = 'declined'")
                .await,
            1
        );
        let reported = s.client.call("tools/call", json!({"name": "me"})).await;
        assert_eq!(reported["isError"], true);

        s.fake.set_authorize_outcome(AuthorizeOutcome::Fail);
        let failing = elicitation_for(&s.client, "me").await;
        let connect_url = url_of(&failing);
        let page = browser.sign_in(&connect_url).await;
        assert_eq!(page.status, StatusCode::BAD_GATEWAY);
        assert!(
            page.body
                .contains("Fake Hub answered with an error: it had a problem on its side (server_error)."),
            "{}",
            page.body
        );
        assert!(
            page.body.contains(&format!("<a href=\"{connect_url}\">")),
            "the way back: {}",
            page.body
        );
        let id = failing["elicitationId"].as_str().expect("id");
        let logs = logged_text();
        let logged = logs
            .lines()
            .find(|line| line.contains("the provider answered the sign-in with an error") && line.contains(id))
            .unwrap_or_else(|| panic!("the provider's error is logged: {logs}"));
        assert!(
            logged.contains("WARN") && logged.contains("provider=fake") && logged.contains("error=server_error"),
            "{logged}"
        );
        let ours = logs.lines().find(|line| {
            line.contains("ERROR") && line.contains("response failed") && line.contains("502 Bad Gateway")
        });
        assert!(ours.is_none(), "a provider's error is not logged as ours: {ours:?}");

        // The token endpoint refuses the code: the same page, with its error.
        s.fake.set_authorize_outcome(AuthorizeOutcome::Approve);
        s.fake.set_options(|o| o.client_secret = "rotated".into());
        let page = browser.sign_in(&connect_url).await;
        assert_eq!(page.status, StatusCode::BAD_GATEWAY);
        assert!(page.body.contains("(invalid_client)"), "{}", page.body);
        assert!(
            page.body.contains(&format!("<a href=\"{connect_url}\">")),
            "{}",
            page.body
        );
        assert_eq!(s.database.query_count("SELECT COUNT(*) FROM connections").await, 0);
        assert_eq!(
            s.database
                .query_count("SELECT COUNT(*) FROM elicitations WHERE status = 'pending'")
                .await,
            1
        );

        // The way back works: the same request, signed in, and the client told.
        assert!(
            stream.next_message(Duration::from_millis(500)).await.is_none(),
            "the client is told nothing while the request is open"
        );
        s.fake.set_options(|o| o.client_secret = "fake-secret".into());
        let page = browser.sign_in(&connect_url).await;
        assert_eq!(page.status, StatusCode::OK, "{}", page.body);
        let (_, message) = stream.next_message(WAIT).await.expect("completion notification");
        assert_eq!(message["params"]["elicitationId"], failing["elicitationId"]);
        s.server.stop().await;
    }
);

backend_test!(
    /// Issue 9, item 14: the sweeper expires the elicitation while a callback that started in time
    /// waits for a slow code exchange. The connection is saved with the elicitation's completion:
    /// the page says connected and the client is told, exactly once.
    async fn a_sign_in_that_started_in_time_completes_its_elicitation(backend: Backend) {
        let s = setup(backend).await;
        let mut stream = s.client.open_stream(None).await;
        let elicitation = elicitation_for(&s.client, "me").await;
        let browser = Browser::new();
        let authorize = browser.continue_to_provider(&url_of(&elicitation)).await;
        let callback = browser.authorize(&authorize).await;
        let hold = s.fake.hold_code_exchanges();
        let page = tokio::spawn(async move { browser.get(&callback).await });
        hold.arrived().await;
        s.database.expire_during_callback().await;
        hold.release();
        let page = page.await.expect("callback");
        assert_eq!(page.status, StatusCode::OK, "{}", page.body);
        assert!(page.body.contains("is connected"), "{}", page.body);
        let (_, message) = stream.next_message(WAIT).await.expect("completion notification");
        assert_eq!(message["params"]["elicitationId"], elicitation["elicitationId"]);
        assert!(
            stream.next_message(Duration::from_millis(500)).await.is_none(),
            "told once"
        );
        assert_eq!(s.database.query_count("SELECT COUNT(*) FROM connections").await, 1);
        assert_eq!(
            s.database
                .query_count("SELECT COUNT(*) FROM elicitations WHERE status = 'completed'")
                .await,
            1
        );
        s.server.stop().await;
    }
);

backend_test!(
    /// Issue 9, item 15: a reload of the callback after the sign-in (the page lost, the server
    /// killed after the commit) says what is true: connected.
    async fn a_reloaded_callback_after_a_sign_in_says_connected(backend: Backend) {
        let s = setup(backend).await;
        let elicitation = elicitation_for(&s.client, "me").await;
        let browser = Browser::new();
        let authorize = browser.continue_to_provider(&url_of(&elicitation)).await;
        let callback = browser.authorize(&authorize).await;
        let cookie = browser.cookie_header();
        let first = browser.get(&callback).await;
        assert_eq!(first.status, StatusCode::OK, "{}", first.body);
        // The browser's cookie is dropped with the first answer; one that never got it keeps it.
        for (what, reload) in [
            ("reload", browser.get(&callback).await),
            ("retry with the cookie", with_cookie(&callback, &cookie).await),
        ] {
            assert_eq!(reload.status, StatusCode::OK, "{what}: {}", reload.body);
            assert!(reload.body.contains("is connected"), "{what}: {}", reload.body);
            assert!(
                reload
                    .body
                    .contains("<a href=\"/connections\">See your connections</a>"),
                "{what}: {}",
                reload.body
            );
        }
        s.server.stop().await;
    }
);

/// A GET carrying exactly this Cookie header, as a browser that never saw the answer would send.
async fn with_cookie(url: &str, cookie: &str) -> common::Page {
    let response = reqwest::Client::new()
        .get(url)
        .header("cookie", cookie)
        .send()
        .await
        .expect("request");
    let status = response.status();
    let headers = response.headers().clone();
    let body = response.text().await.expect("body");
    common::Page { status, headers, body }
}

backend_test!(
    /// Issue 9, item 15: the database fails after the flow was used. The page says the sign-in did
    /// not finish and links back to the connect page; a reload says nothing was stored, with the
    /// same way back, which works once the database does.
    async fn a_sign_in_the_database_failed_to_finish_says_so_with_the_way_back(backend: Backend) {
        let s = setup(backend).await;
        let mut stream = s.client.open_stream(None).await;
        let elicitation = elicitation_for(&s.client, "me").await;
        let connect_url = url_of(&elicitation);
        let way_back = format!("<a href=\"{connect_url}\">Start the sign-in again</a>");
        let browser = Browser::new();
        let authorize = browser.continue_to_provider(&connect_url).await;
        let callback = browser.authorize(&authorize).await;
        let hold = s.fake.hold_code_exchanges();
        let pending = {
            let callback = callback.clone();
            tokio::spawn(async move { (browser.get(&callback).await, browser) })
        };
        hold.arrived().await;
        s.database
            .execute("ALTER TABLE connections RENAME TO connections_away")
            .await;
        hold.release();
        let (page, browser) = pending.await.expect("callback");
        // A failed statement is ours (500); only a database outage answers 503.
        assert_eq!(page.status, StatusCode::INTERNAL_SERVER_ERROR, "{}", page.body);
        assert!(page.body.contains("the sign-in did not finish"), "{}", page.body);
        assert!(page.body.contains(&way_back), "{}", page.body);
        s.database
            .execute("ALTER TABLE connections_away RENAME TO connections")
            .await;

        let reload = browser.get(&callback).await;
        assert_eq!(reload.status, StatusCode::BAD_REQUEST, "{}", reload.body);
        assert!(reload.body.contains("already used"), "{}", reload.body);
        assert!(reload.body.contains("Nothing was stored."), "{}", reload.body);
        assert!(reload.body.contains(&way_back), "{}", reload.body);

        // The next exchange goes through at once.
        hold.release();
        let page = browser.sign_in(&connect_url).await;
        assert_eq!(page.status, StatusCode::OK, "{}", page.body);
        let (_, message) = stream.next_message(WAIT).await.expect("completion notification");
        assert_eq!(message["params"]["elicitationId"], elicitation["elicitationId"]);
        s.server.stop().await;
    }
);
