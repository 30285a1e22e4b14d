//! Call-scoped confirmation: one answer confirms one call, once.

use super::*;

backend_test!(
    /// A confirmation answers exactly one call: the one with the same tool and arguments, once.
    /// Cancelling is reported once, to that call only, and then it asks again.
    async fn a_confirmation_answers_one_call_once(backend: Backend) {
        let s = setup(backend).await;
        let mut stream = s.client.open_stream(None).await;
        let ten = json!({"payee": "Bob's Bakery", "amount": 10});
        let eleven = json!({"payee": "Bob's Bakery", "amount": 11});
        let first = elicitation_of(&s.call("pay", ten.clone()).await);
        assert_eq!(first["message"], "Please confirm in your browser: Confirm payment.");
        let pending = elicitation_of(&s.call("pay", ten.clone()).await);
        assert_eq!(
            pending["elicitationId"], first["elicitationId"],
            "a pending request is reused"
        );
        let other = elicitation_of(&s.call("pay", eleven.clone()).await);
        assert_ne!(
            other["elicitationId"], first["elicitationId"],
            "other arguments, other request"
        );

        let browser = Browser::new();
        let page = browser.get(&url_of(&first)).await;
        assert_eq!(description(&page.body), "Pay 10 EUR to Bob's Bakery?");
        assert!(page.body.contains(">Pay</button>"), "the configured submit label");
        let other_page = browser.get(&url_of(&other)).await;
        assert_eq!(description(&other_page.body), "Pay 11 EUR to Bob's Bakery?");

        let unticked = press(&browser, &url_of(&first), &s.base(), &page.csrf(), "submit", &vec![]).await;
        assert_eq!(unticked.status, StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(
            field_error(&unticked.body, "sure").as_deref(),
            Some("Tick this box to continue.")
        );
        let sent = press(
            &browser,
            &url_of(&first),
            &s.base(),
            &page.csrf(),
            "submit",
            &fields(&[("sure", "true")]),
        )
        .await;
        assert_eq!(sent.status, StatusCode::OK, "{}", sent.body);
        assert!(
            sent.body.contains("<h1>Confirmed</h1>") && sent.body.contains("You confirmed"),
            "a confirmation is confirmed, not saved: {}",
            sent.body
        );
        assert_eq!(
            stream.next_completion().await,
            first["elicitationId"].as_str().expect("id")
        );
        assert_eq!(s.count("SELECT COUNT(*) FROM form_answers").await, 1);

        // Another call's confirmation is not this one.
        let still = elicitation_of(&s.call("pay", eleven.clone()).await);
        assert_eq!(still["elicitationId"], other["elicitationId"]);
        assert_eq!(s.requests(), 0);

        // The confirmed call, its arguments in another order, runs once.
        let reordered = s
            .client
            .post_bytes(
                br#"{"jsonrpc":"2.0","id":900,"method":"tools/call","params":{"name":"pay","arguments":{"payee":"Bob's Bakery","amount":10}}}"#
                    .to_vec(),
                &[],
            )
            .await;
        assert_eq!(reordered.body["result"]["isError"], false, "{}", reordered.body);
        assert_eq!(
            s.last_request().json(),
            json!({"payee": "Bob's Bakery", "amount": 10, "confirmed": true})
        );
        assert_eq!(s.count("SELECT COUNT(*) FROM form_answers").await, 0, "used up");
        let third = elicitation_of(&s.call("pay", ten.clone()).await);
        assert_ne!(
            third["elicitationId"], first["elicitationId"],
            "single use: asked again"
        );
        assert_eq!(s.requests(), 1);

        // Cancel the other call's request.
        let cancelled = press(
            &browser,
            &url_of(&other),
            &s.base(),
            &other_page.csrf(),
            "cancel",
            &vec![],
        )
        .await;
        assert_eq!(cancelled.status, StatusCode::OK);
        assert!(cancelled.body.contains("<h1>Cancelled</h1>"), "{}", cancelled.body);
        assert_eq!(
            stream.next_completion().await,
            other["elicitationId"].as_str().expect("id")
        );
        assert_eq!(
            s.count("SELECT COUNT(*) FROM elicitations WHERE status = 'declined'")
                .await,
            1
        );
        let unrelated = elicitation_of(&s.call("pay", ten.clone()).await);
        assert_eq!(
            unrelated["elicitationId"], third["elicitationId"],
            "the decline is not this call's"
        );
        let declined = s
            .client
            .call("tools/call", json!({"name": "pay", "arguments": eleven.clone()}))
            .await;
        assert_eq!(declined["isError"], true, "{declined}");
        assert!(text(&declined).contains("declined"), "{declined}");
        let asked_again = elicitation_of(&s.call("pay", eleven).await);
        assert_ne!(
            asked_again["elicitationId"], other["elicitationId"],
            "reported once, then asks again"
        );
        assert_eq!(s.requests(), 1, "nothing was paid twice or without confirmation");
        s.server.stop().await;
    }
);
