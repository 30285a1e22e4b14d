//! Owner, CSRF and Origin checks: only the user who was asked can answer, from the page itself.

use super::*;

backend_test!(
    /// Only the user the request was issued to, posting from the page itself, can answer it; every
    /// other post is refused before anything changes, and a finished or expired request is gone.
    async fn only_the_owner_can_answer_from_the_page(backend: Backend) {
        let s = setup_as(backend, HEADER_IDENTITY, Some("alice")).await;
        let elicitation = elicitation_of(&s.call("keyed", json!({})).await);
        let url = url_of(&elicitation);
        let alice = Browser::as_user(IDENTITY_HEADER, "alice");
        let bob = Browser::as_user(IDENTITY_HEADER, "bob");
        let base = s.base();
        let alices_page = alice.get(&url).await;
        assert_eq!(alices_page.status, StatusCode::OK);
        assert!(alices_page.body.contains("signed in here as alice"));
        let csrf = alices_page.csrf();
        let answers = key_answers("sk-alice-0001");

        let bobs_view = bob.get(&url).await;
        assert_eq!(bobs_view.status, StatusCode::FORBIDDEN);
        assert!(bobs_view.body.contains("another user"), "{}", bobs_view.body);
        for action in ["submit", "cancel"] {
            let post = press(&bob, &url, &base, &csrf, action, &answers).await;
            assert_eq!(
                post.status,
                StatusCode::FORBIDDEN,
                "Bob's {action}, even with Alice's token"
            );
        }
        let alices_replace_csrf = alice.get(&s.url("/connections/forms/key")).await.csrf();
        let forged = [
            ("a missing token", None, base.as_str()),
            ("an empty token", Some(""), base.as_str()),
            ("a made-up token", Some("forged"), base.as_str()),
            (
                "another page's token",
                Some(alices_replace_csrf.as_str()),
                base.as_str(),
            ),
            ("a foreign Origin", Some(csrf.as_str()), "https://evil.example"),
        ];
        for (what, token, origin) in forged {
            let mut pairs: Vec<(&str, &str)> = answers.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            pairs.push(("action", "submit"));
            if let Some(token) = token {
                pairs.insert(0, ("csrf", token));
            }
            let post = alice.post_form(&url, origin, &pairs).await;
            assert_eq!(post.status, StatusCode::FORBIDDEN, "{what}");
            assert!(post.body.contains("Nothing was changed"), "{what}");
        }
        assert_eq!(
            Browser::new().get(&url).await.status,
            StatusCode::UNAUTHORIZED,
            "no identity, no page"
        );
        assert_eq!(s.count("SELECT COUNT(*) FROM form_values").await, 0, "nothing stored");
        assert_eq!(
            s.count("SELECT COUNT(*) FROM elicitations WHERE status = 'pending'")
                .await,
            1,
            "nothing declined"
        );

        assert_saved(&press(&alice, &url, &base, &csrf, "submit", &answers).await);
        assert_eq!(
            s.count("SELECT COUNT(*) FROM form_values WHERE principal = 'alice'")
                .await,
            1
        );
        assert_eq!(alice.get(&url).await.status, StatusCode::GONE, "a completed request");
        let again = press(&alice, &url, &base, &csrf, "submit", &key_answers("sk-alice-0002")).await;
        assert_eq!(again.status, StatusCode::GONE);
        assert_eq!(bob.get(&url).await.status, StatusCode::FORBIDDEN, "still not Bob's");
        let unknown = format!("{base}/forms/{}", uuid::Uuid::now_v7());
        assert_eq!(alice.get(&unknown).await.status, StatusCode::NOT_FOUND);
        assert_eq!(
            alice.get(&s.url("/forms/not-an-id")).await.status,
            StatusCode::NOT_FOUND
        );
        s.run("keyed", json!({})).await;
        assert_eq!(s.last_request().header("authorization"), Some("Bearer sk-alice-0001"));

        // Bob's /connections knows nothing of Alice's answers, and his tokens and actions reach only his.
        let bobs_connections = bob.get(&s.url("/connections")).await;
        assert!(!bobs_connections.body.contains("Red Team"));
        assert!(saved_lines(&bobs_connections.body, "key").is_empty());
        let replace_url = s.url("/connections/forms/key");
        let bobs_replace = bob.get(&replace_url).await;
        assert_eq!(shown_value(&bobs_replace.body, "team"), "");
        let with_alices_token = press(
            &bob,
            &replace_url,
            &base,
            &alices_replace_csrf,
            "submit",
            &key_answers("sk-bob-00001"),
        )
        .await;
        assert_eq!(
            with_alices_token.status,
            StatusCode::FORBIDDEN,
            "Alice's token is not Bob's"
        );
        let bobs_own = press(
            &bob,
            &replace_url,
            &base,
            &bobs_replace.csrf(),
            "submit",
            &fields(&[("org", "personal"), ("team", "Bob's"), ("api_key", "sk-bob-00001")]),
        )
        .await;
        assert_eq!(bobs_own.status, StatusCode::SEE_OTHER);
        let alices_connections = alice.get(&s.url("/connections")).await;
        let alices_connections_csrf = alices_connections.csrf();
        let bobs_connections = bob.get(&s.url("/connections")).await;
        let refused = s.delete_answers(&bob, &alices_connections_csrf, "key").await;
        assert_eq!(refused.status, StatusCode::FORBIDDEN, "Alice's token is not Bob's");
        let deleted = s.delete_answers(&bob, &bobs_connections.csrf(), "key").await;
        assert_eq!(deleted.status, StatusCode::OK);
        assert!(deleted.body.contains("Deleted your answers to"), "{}", deleted.body);
        assert_eq!(
            s.count("SELECT COUNT(*) FROM form_values WHERE principal = 'alice'")
                .await,
            1,
            "Alice's answers are untouched"
        );
        assert_eq!(s.count("SELECT COUNT(*) FROM form_values").await, 1, "Bob's are gone");
        s.run("keyed", json!({})).await;
        assert_eq!(s.last_request().header("authorization"), Some("Bearer sk-alice-0001"));

        // An expired request is gone too, and a post to it stores nothing.
        let deleted = s.delete_answers(&alice, &alices_connections_csrf, "key").await;
        assert_eq!(deleted.status, StatusCode::OK);
        let expiring = url_of(&elicitation_of(&s.call("keyed", json!({})).await));
        let token = alice.get(&expiring).await.csrf();
        s.database.expire_elicitations().await;
        assert_eq!(alice.get(&expiring).await.status, StatusCode::GONE);
        let late = press(&alice, &expiring, &base, &token, "submit", &answers).await;
        assert_eq!(late.status, StatusCode::GONE);
        assert_eq!(s.count("SELECT COUNT(*) FROM form_values").await, 0);
        s.server.stop().await;
    }
);
