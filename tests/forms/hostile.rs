//! Hostile values: arguments and answers with markup, quotes and bidi controls are shown escaped or
//! refused, and oversized or unreadable posts change nothing.

use super::*;

backend_test!(
    /// Tool arguments shown on a call-scoped form are escaped, not interpreted, and arrive whole.
    async fn hostile_arguments_are_shown_escaped(backend: Backend) {
        let s = setup(backend).await;
        let payee = format!("{HOSTILE} {}", "x".repeat(5000));
        let elicitation = elicitation_of(&s.call("pay", json!({"payee": payee, "amount": 12.5})).await);
        let page = Browser::new().get(&url_of(&elicitation)).await;
        assert_eq!(page.status, StatusCode::OK);
        assert!(!page.body.contains("<script>"), "{}", page.body);
        assert!(
            page.body.contains("&#60;script&#62;alert(1)&#60;/script&#62;"),
            "shown escaped"
        );
        assert!(!page.body.contains("\"O'Brien\""), "quotes are escaped too");
        assert_eq!(
            description(&page.body),
            format!("Pay 12.5 EUR to {}?", payee.replace('\u{202E}', "U+202E")),
            "shown whole, the override character as its code point"
        );
        s.server.stop().await;
    }
);

backend_test!(
    /// Bidi controls and invisible characters in the arguments are shown as their code points on a
    /// call-scoped confirmation, so a payee cannot display as something else (`"\u{202e}0001\u{202c}"`
    /// reads "1000").
    async fn bidi_controls_in_arguments_are_shown_as_code_points(backend: Backend) {
        let s = setup(backend).await;
        let payee = "Bob \u{202e}0001\u{202c}\u{200b}\u{2066}x\u{2069}\u{feff}";
        let elicitation = elicitation_of(&s.call("pay", json!({"payee": payee, "amount": 12})).await);
        let page = Browser::new().get(&url_of(&elicitation)).await;
        assert_eq!(page.status, StatusCode::OK);
        assert_eq!(
            description(&page.body),
            "Pay 12 EUR to Bob U+202E0001U+202CU+200BU+2066xU+2069U+FEFF?"
        );
        for c in ['\u{202e}', '\u{202c}', '\u{200b}', '\u{2066}', '\u{2069}', '\u{feff}'] {
            assert!(!page.body.contains(c), "{c:?} is on the page");
        }
        s.server.stop().await;
    }
);

backend_test!(
    /// The same values typed into a form are stored exactly and shown escaped; what a field cannot
    /// hold (over its length, a NUL) is refused with a message and the typed value shown safely.
    async fn hostile_form_input_is_kept_intact_or_refused(backend: Backend) {
        let s = setup(backend).await;
        let url = url_of(&elicitation_of(&s.call("note", json!({})).await));
        let browser = Browser::new();
        let page = browser.get(&url).await;
        let csrf = page.csrf();
        let long_text = format!("{HOSTILE}\r\n{}", "é".repeat(5000));

        let refusals = [
            (
                fields(&[("line", &"y".repeat(5000)), ("text", HOSTILE)]),
                "line",
                "Enter at most 2048 characters.",
            ),
            (
                fields(&[("line", "a\0b"), ("text", HOSTILE)]),
                "line",
                "Remove the NUL character from this value.",
            ),
            (
                fields(&[("line", HOSTILE), ("text", "a\0b")]),
                "text",
                "Remove the NUL character from this value.",
            ),
            (
                fields(&[("line", HOSTILE), ("text", &"z".repeat(20_001))]),
                "text",
                "Enter at most 20000 characters.",
            ),
        ];
        for (posted, field, message) in refusals {
            let page = press(&browser, &url, &s.base(), &csrf, "submit", &posted).await;
            assert_eq!(page.status, StatusCode::UNPROCESSABLE_ENTITY, "{field}");
            assert_eq!(field_error(&page.body, field).as_deref(), Some(message));
            assert!(
                !page.body.contains("<script>"),
                "typed markup is escaped on the re-render"
            );
            let other = if field == "line" { "text" } else { "line" };
            assert_eq!(
                shown_value(&page.body, other),
                HOSTILE,
                "kept whole, attribute not broken"
            );
        }
        assert_eq!(s.count("SELECT COUNT(*) FROM form_values").await, 0);

        let saved = press(
            &browser,
            &url,
            &s.base(),
            &csrf,
            "submit",
            &fields(&[("line", HOSTILE), ("text", &long_text)]),
        )
        .await;
        assert_saved(&saved);
        s.run("note", json!({})).await;
        assert_eq!(
            s.last_request().json(),
            json!({"line": HOSTILE, "text": long_text}),
            "stored and sent exactly as typed"
        );
        let connections = browser.get(&s.url("/connections")).await;
        assert!(!connections.body.contains("<script>"));
        let saved = saved_lines(&connections.body, "note");
        assert_eq!(saved[0], ("Line".to_owned(), HOSTILE.to_owned()));
        assert_eq!(saved[1], ("Text".to_owned(), long_text.clone()));
        s.server.stop().await;
    }
);

backend_test!(
    /// Oversized and unreadable posts get their own answers, and change nothing.
    async fn oversized_and_unreadable_posts_are_refused(backend: Backend) {
        let s = setup(backend).await;
        let url = url_of(&elicitation_of(&s.call("keyed", json!({})).await));
        let browser = Browser::new();
        let csrf = browser.get(&url).await.csrf();
        let huge = "x".repeat(600 * 1024);
        let oversized = browser
            .post_form(
                &url,
                &s.base(),
                &[("csrf", &csrf), ("action", "submit"), ("key", &huge)],
            )
            .await;
        assert_eq!(oversized.status, StatusCode::PAYLOAD_TOO_LARGE, "{}", oversized.body);
        assert!(oversized.body.contains("Nothing was saved"));
        let http = reqwest::Client::new();
        let unreadable = http
            .post(&url)
            .header("content-type", "application/json")
            .header("origin", s.base())
            .body("{\"csrf\": 1}")
            .send()
            .await
            .expect("post");
        assert_eq!(unreadable.status(), StatusCode::BAD_REQUEST);
        assert!(unreadable.text().await.expect("body").contains("could not be read"));
        assert_eq!(s.count("SELECT COUNT(*) FROM form_values").await, 0, "nothing stored");
        assert_eq!(
            s.count("SELECT COUNT(*) FROM elicitations WHERE status = 'pending'")
                .await,
            1,
            "still pending"
        );
    }
);
