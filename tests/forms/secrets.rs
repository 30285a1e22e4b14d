//! Secrets: a saved secret reaches only the upstream, and a call-scoped one is used once and not
//! kept.

use super::*;

backend_test!(
    /// A secret typed into a form reaches the upstream's header and nothing else: not the database
    /// (only ciphertext), no page (not even the 422 re-render), no MCP message, no log line; an
    /// upstream echoing it back is scrubbed.
    async fn a_secret_reaches_only_the_upstream(backend: Backend) {
        let s = setup(backend).await;
        s.client.call("logging/setLevel", json!({"level": "debug"})).await;
        let mut stream = s.client.open_stream(None).await;
        let secret = format!("sk-{}", uuid::Uuid::now_v7().simple());
        let refused_secret = format!("pk-{}", uuid::Uuid::now_v7().simple());
        let mut received = Vec::new();

        let reply = s.call("profile", json!({})).await;
        received.push(reply.body.clone());
        let url = url_of(&elicitation_of(&reply));
        let browser = Browser::new();
        let page = browser.get(&url).await;
        let csrf = page.csrf();
        let valid = valid_profile(&secret);
        let mut pages = Vec::new();
        for posted in [
            with_field(&valid, "email", Some("nope")),
            with_field(&valid, "api_key", Some(&refused_secret)),
        ] {
            let refused = press(&browser, &url, &s.base(), &csrf, "submit", &posted).await;
            assert_eq!(refused.status, StatusCode::UNPROCESSABLE_ENTITY);
            assert_eq!(shown_value(&refused.body, "api_key"), "");
            pages.push(refused.body);
        }
        let saved = press(&browser, &url, &s.base(), &csrf, "submit", &valid).await;
        assert_saved(&saved);
        pages.push(saved.body);
        stream.next_completion().await;

        let result = s.run("profile", json!({})).await;
        received.push(result.clone());
        assert_eq!(
            s.last_request().header("authorization"),
            Some(format!("Bearer {secret}").as_str()),
            "the upstream did get it"
        );
        assert!(
            text(&result).contains("Bearer [redacted]"),
            "the upstream's echo is scrubbed: {result}"
        );

        let connections = browser.get(&s.url("/connections")).await;
        assert!(
            saved_lines(&connections.body, "profile").contains(&("API key".into(), "stored, hidden".into())),
            "{}",
            connections.body
        );
        let replace = browser.get(&s.url("/connections/forms/profile")).await;
        assert_eq!(replace.status, StatusCode::OK);
        assert!(replace.body.contains("A value is stored. Leave this empty to keep it."));
        assert_eq!(shown_value(&replace.body, "api_key"), "");
        assert_eq!(
            shown_value(&replace.body, "name"),
            "Ada Lovelace",
            "non-secret values are shown"
        );
        pages.extend([connections.body, replace.body]);

        received.extend(drain(&mut stream, Duration::from_millis(500)).await);
        assert!(
            received.iter().any(|m| m["method"] == "notifications/message"),
            "debug log messages reached the stream, so it was checked too"
        );

        let stored = s.database.everything_stored().await;
        let stored_text = String::from_utf8_lossy(&stored);
        assert!(stored_text.contains("Ada Lovelace"), "the dump includes form values");
        assert_eq!(
            s.count("SELECT COUNT(*) FROM form_values WHERE secrets IS NOT NULL AND length(secrets) > 40")
                .await,
            1,
            "the secret is stored, sealed"
        );
        let logs = logged_text();
        assert!(logs.contains("form values saved"), "logs are captured");
        let messages = received.iter().map(Value::to_string).collect::<String>();
        for value in [&secret, &refused_secret] {
            assert!(
                !stored.windows(value.len()).any(|w| w == value.as_bytes()),
                "a secret is stored in plaintext"
            );
            for page in &pages {
                assert!(!page.contains(value.as_str()), "a page shows a secret: {page}");
            }
            assert!(!messages.contains(value.as_str()), "an MCP message carries a secret");
            assert!(!logs.contains(value.as_str()), "a secret reached the logs");
        }
        s.server.stop().await;
    }
);

backend_test!(
    /// A secret asked for one call: sealed while it waits, sent once, then gone from the database.
    async fn a_call_scoped_secret_is_used_once_and_not_kept(backend: Backend) {
        const CODE: &str = "493817-one-time";
        let s = setup(backend).await;
        let mut stream = s.client.open_stream(None).await;
        let arguments = json!({"to": "ACME"});
        let elicitation = elicitation_of(&s.call("transfer", arguments.clone()).await);
        let browser = Browser::new();
        let page = browser.get(&url_of(&elicitation)).await;
        assert_eq!(
            description(&page.body),
            "Enter the code your bank sent for the transfer to ACME."
        );
        let short = press(
            &browser,
            &url_of(&elicitation),
            &s.base(),
            &page.csrf(),
            "submit",
            &fields(&[("code", "123")]),
        )
        .await;
        assert_eq!(short.status, StatusCode::UNPROCESSABLE_ENTITY);
        assert!(!short.body.contains("123\""), "the typed secret is not echoed");
        let sent = press(
            &browser,
            &url_of(&elicitation),
            &s.base(),
            &page.csrf(),
            "submit",
            &fields(&[("code", CODE)]),
        )
        .await;
        assert_eq!(sent.status, StatusCode::OK, "{}", sent.body);
        assert!(
            sent.body.contains("<h1>Sent</h1>") && sent.body.contains("was sent"),
            "a call's one answer is sent, not saved: {}",
            sent.body
        );
        stream.next_completion().await;

        let stored = s.database.everything_stored().await;
        assert!(
            !stored.windows(CODE.len()).any(|w| w == CODE.as_bytes()),
            "sealed at rest"
        );
        assert_eq!(
            s.count("SELECT COUNT(*) FROM form_answers WHERE secrets IS NOT NULL")
                .await,
            1,
            "the sealed answer waits for its call"
        );
        let result = s.run("transfer", arguments.clone()).await;
        assert!(
            !text(&result).contains(CODE) && text(&result).contains("OTP [redacted]"),
            "the upstream's echo is redacted: {result}"
        );
        assert_eq!(
            s.last_request().header("authorization"),
            Some(format!("OTP {CODE}").as_str())
        );
        assert_eq!(s.count("SELECT COUNT(*) FROM form_answers").await, 0, "taken and gone");
        assert!(!logged_text().contains(CODE), "not in the logs");
        let again = elicitation_of(&s.call("transfer", arguments).await);
        assert_ne!(
            again["elicitationId"], elicitation["elicitationId"],
            "one code, one call"
        );
    }
);
