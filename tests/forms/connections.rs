//! `/connections`: saved answers listed, replaced and deleted.

use super::*;

/// Saves `key` answers through the elicitation a `keyed` call asks for.
async fn save_key_answers(s: &Setup, stream: &mut SseStream, answers: &Fields) {
    let url = url_of(&elicitation_of(&s.call("keyed", json!({})).await));
    assert_saved(&fill_in(&Browser::new(), &url, &s.base(), answers).await);
    stream.next_completion().await;
}

backend_test!(
    /// /connections lists saved answers (secrets only as stored), replaces them (a blank secret keeps
    /// the stored one) and deletes them, after which the tool asks again.
    async fn connections_list_replace_and_delete_saved_answers(backend: Backend) {
        let s = setup(backend).await;
        let mut stream = s.client.open_stream(None).await;
        let browser = Browser::new();
        let empty = browser.get(&s.url("/connections")).await;
        assert_eq!(empty.status, StatusCode::OK);
        assert!(
            empty
                .body
                .contains("<a href=\"/connections/forms/key\">Fill in now</a>")
        );
        assert!(
            !empty.body.contains("Confirm payment"),
            "call-scoped forms keep nothing"
        );

        save_key_answers(&s, &mut stream, &key_answers("sk-old-secret")).await;
        s.run("keyed", json!({})).await;
        let seen = s.last_request();
        assert_eq!(seen.query, "org=acme&team=Red%20Team");
        assert_eq!(seen.header("authorization"), Some("Bearer sk-old-secret"));

        let listed = browser.get(&s.url("/connections")).await;
        assert_eq!(
            saved_lines(&listed.body, "key"),
            fields(&[
                ("Organization", "ACME Inc."),
                ("Team", "Red Team"),
                ("API key", "stored, hidden")
            ])
        );
        assert!(!listed.body.contains("sk-old-secret"));

        let replace_url = s.url("/connections/forms/key");
        let form = browser.get(&replace_url).await;
        assert_eq!(form.status, StatusCode::OK);
        assert_eq!(shown_value(&form.body, "org"), "acme", "stored, not the default");
        assert_eq!(shown_value(&form.body, "team"), "Red Team");
        assert_eq!(shown_value(&form.body, "api_key"), "");
        assert!(
            !control_tag(&form.body, "api_key").0.contains("aria-required"),
            "a stored secret may be left blank"
        );
        let csrf = form.csrf();
        let keep_secret = fields(&[("org", "personal"), ("team", "Blue Team"), ("api_key", "")]);
        let replaced = press(&browser, &replace_url, &s.base(), &csrf, "submit", &keep_secret).await;
        assert_eq!(replaced.status, StatusCode::SEE_OTHER, "{}", replaced.body);
        assert_eq!(replaced.location(), "/connections");
        s.run("keyed", json!({})).await;
        let seen = s.last_request();
        assert_eq!(seen.query, "org=personal&team=Blue%20Team", "the other fields changed");
        assert_eq!(
            seen.header("authorization"),
            Some("Bearer sk-old-secret"),
            "the blank secret kept"
        );

        let invalid = press(
            &browser,
            &replace_url,
            &s.base(),
            &csrf,
            "submit",
            &fields(&[("org", "acme"), ("team", "Green"), ("api_key", "short")]),
        )
        .await;
        assert_eq!(invalid.status, StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(
            field_error(&invalid.body, "api_key").as_deref(),
            Some("Enter at least 8 characters.")
        );
        let cancelled = press(&browser, &replace_url, &s.base(), &csrf, "cancel", &keep_secret).await;
        assert_eq!(cancelled.status, StatusCode::SEE_OTHER);
        let new_secret = fields(&[("org", "acme"), ("team", ""), ("api_key", "sk-new-secret")]);
        let replaced = press(&browser, &replace_url, &s.base(), &csrf, "submit", &new_secret).await;
        assert_eq!(replaced.status, StatusCode::SEE_OTHER);
        s.run("keyed", json!({})).await;
        let seen = s.last_request();
        assert_eq!(
            seen.query, "org=acme&team=",
            "neither the refused nor the cancelled post counted"
        );
        assert_eq!(seen.header("authorization"), Some("Bearer sk-new-secret"));
        let listed = browser.get(&s.url("/connections")).await;
        assert_eq!(
            saved_lines(&listed.body, "key"),
            fields(&[("Organization", "ACME Inc."), ("API key", "stored, hidden")]),
            "a cleared optional field is not listed"
        );

        let deleted = s.delete_answers(&browser, &listed.csrf(), "key").await;
        assert_eq!(deleted.status, StatusCode::OK);
        assert!(deleted.body.contains("Deleted your answers to"), "{}", deleted.body);
        assert!(
            deleted
                .body
                .contains("<a href=\"/connections/forms/key\">Fill in now</a>")
        );
        assert_eq!(s.count("SELECT COUNT(*) FROM form_values").await, 0);
        elicitation_of(&s.call("keyed", json!({})).await);
        let blank = press(
            &browser,
            &replace_url,
            &s.base(),
            &csrf,
            "submit",
            &fields(&[("org", "acme"), ("api_key", "")]),
        )
        .await;
        assert_eq!(
            blank.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "no stored secret to keep"
        );
        assert_eq!(
            field_error(&blank.body, "api_key").as_deref(),
            Some("This field is required.")
        );

        for path in ["/connections/forms/confirm_pay", "/connections/forms/nope"] {
            assert_eq!(browser.get(&s.url(path)).await.status, StatusCode::NOT_FOUND, "{path}");
        }
        s.server.stop().await;
    }
);
