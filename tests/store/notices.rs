//! What PostgreSQL announces to other replicas, read back as announced.

use super::*;

/// Receives the next `expected.len()` notices, in any order (one statement may send several), and
/// checks each payload reads back as one of them.
async fn expect_notices(listener: &mut PgListener, expected: &[Notice]) {
    let mut received = Vec::new();
    for _ in expected {
        let notification = tokio::time::timeout(std::time::Duration::from_secs(10), listener.recv())
            .await
            .expect("a notice in time")
            .expect("listening");
        let payload = notification.payload();
        received.push(Notice::parse(payload).unwrap_or_else(|| panic!("payload {payload:?} does not parse")));
    }
    for notice in expected {
        assert!(received.contains(notice), "{notice:?} missing from {received:?}");
    }
}

postgres_test!(
    /// Every NOTIFY the PostgreSQL store sends, those whose payload SQL builds included, reads back
    /// as the notice it announces.
    async fn postgres_notices_read_back_as_announced() {
        let database = TestDatabase::new(Backend::Postgres).await;
        let opened = store::connect(&database.url, 4).await.expect("connect");
        let store = opened.store;
        store.migrate().await.expect("migrate");
        let mut listener = PgListener::connect_with(opened.postgres.as_ref().expect("a PostgreSQL pool"))
            .await
            .expect("listener");
        listener.listen(NOTIFY_CHANNEL).await.expect("listen");

        // A principal with a space: the rest of a `c` payload.
        let owner = "Ada Lovelace";
        let first = asked(&store, owner, "form:pay", Some("one")).await;
        let a = first.session_id.clone();
        store.append_event(&a, &json!({})).await.expect("append");
        expect_notices(&mut listener, &[Notice::Appended(a.clone())]).await;
        store.set_log_level(&a, LogLevel::Debug).await.expect("set level");
        expect_notices(&mut listener, &[Notice::Changed(a.clone())]).await;
        let saved = values(owner, "pay", json!({}), None, now());
        store
            .save_form_values(&saved, Some(&first.id), &notification(1), now())
            .await
            .expect("save values");
        expect_notices(&mut listener, &[Notice::Appended(a.clone())]).await;

        let second = asked(&store, owner, "github:repo", None).await;
        let principal = second.principal.clone();
        let at = now();
        store
            .save_connection(&connection(&principal, at), &second.id, &notification(2), at)
            .await
            .expect("save connection");
        let connections_changed = Notice::ConnectionsChanged(principal.clone());
        expect_notices(
            &mut listener,
            &[Notice::Appended(second.session_id.clone()), connections_changed.clone()],
        )
        .await;
        store
            .mark_connection_broken(&principal, "github", at)
            .await
            .expect("mark broken");
        expect_notices(&mut listener, std::slice::from_ref(&connections_changed)).await;
        let tokens = RefreshedTokens {
            access_token: Some(vec![4]),
            refresh_token: None,
            expires_at: None,
            scopes: None,
        };
        store
            .store_refreshed(&principal, "github", &tokens)
            .await
            .expect("store refreshed");
        expect_notices(&mut listener, std::slice::from_ref(&connections_changed)).await;
        store
            .delete_connection(&principal, "github")
            .await
            .expect("delete connection");
        expect_notices(&mut listener, std::slice::from_ref(&connections_changed)).await;

        let third = asked(&store, owner, "form:pay", Some("three")).await;
        store
            .finish_elicitation(ending(&third.id, &notification(3), now()), ElicitationStatus::Declined)
            .await
            .expect("decline");
        expect_notices(&mut listener, &[Notice::Appended(third.session_id.clone())]).await;
        let answered = Notice::Answered(third.id, ClientAction::Cancel);
        store.broadcast(&answered.encode()).await.expect("broadcast");
        expect_notices(&mut listener, &[answered]).await;

        assert!(store.delete_session(&a).await.expect("delete session"));
        expect_notices(&mut listener, &[Notice::Changed(a)]).await;
        let swept = store
            .delete_idle_sessions(Utc::now() + Duration::hours(1))
            .await
            .expect("sweep");
        assert_eq!(swept.len(), 2);
        expect_notices(
            &mut listener,
            &[Notice::Changed(second.session_id), Notice::Changed(third.session_id)],
        )
        .await;
        assert!(
            tokio::time::timeout(std::time::Duration::from_millis(200), listener.recv())
                .await
                .is_err(),
            "nothing else was announced"
        );
    }
);
