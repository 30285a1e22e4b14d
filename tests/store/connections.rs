//! Connections: saved with their elicitation's completion, refreshed under a lease; and untaken
//! answers dropped after the cutoff.

use super::*;

backend_test!(
    /// save_connection shares its event-appending SQL with save_form_values.
    async fn a_saved_connection_completes_its_elicitation_once(backend: Backend) {
        let (_database, store) = open(backend).await;
        let pending = asked(&store, "alice", "github:repo", None).await;
        let connection = connection(&pending.principal, now());
        for (n, expected) in [(1, true), (2, false)] {
            let completed = store
                .save_connection(&connection, &pending.id, &notification(n), now())
                .await
                .expect("save connection");
            assert_eq!(completed, expected);
        }
        assert_eq!(events_of(&store, &pending.session_id).await, vec![notification(1)]);
        assert_eq!(status_of(&store, &pending.id).await, ElicitationStatus::Completed);
        let stored = store
            .connection(&pending.principal, "github")
            .await
            .expect("load")
            .expect("saved");
        assert_eq!(
            stored.issuer.as_deref(),
            Some("https://github.com"),
            "the issuer it came from"
        );
    }
);

backend_test!(
    /// A refresh that finds the token already refreshed releases its lease without writing the
    /// token it read back: `keys rotate` may have re-sealed it meanwhile.
    async fn a_lease_released_unchanged_keeps_a_token_resealed_meanwhile(backend: Backend) {
        let (_database, store) = open(backend).await;
        let pending = asked(&store, "alice", "github:repo", None).await;
        let saved = connection(&pending.principal, now());
        assert!(
            store
                .save_connection(&saved, &pending.id, &notification(1), now())
                .await
                .expect("save connection")
        );
        let lease = RefreshLease {
            now: now(),
            until: now() + Duration::seconds(20),
        };
        let leased = store
            .acquire_refresh_lease(&saved, lease)
            .await
            .expect("lease")
            .expect("leased");
        let batch = store
            .sealed_batch(SealedTable::Connections, b"rotated", None, 10)
            .await
            .expect("batch");
        assert_eq!(batch.len(), 1);
        let resealed = Some(b"rotated-token".to_vec());
        assert!(
            store
                .reseal(&batch[0], &[resealed.clone(), None])
                .await
                .expect("reseal")
        );
        let unchanged = RefreshedTokens {
            access_token: None,
            refresh_token: None,
            expires_at: leased.expires_at,
            scopes: None,
        };
        store
            .store_refreshed(&leased.principal, "github", &unchanged)
            .await
            .expect("release");
        let stored = store
            .connection(&leased.principal, "github")
            .await
            .expect("load")
            .expect("still there");
        assert_eq!(Some(stored.access_token.clone()), resealed);
        let again = store.acquire_refresh_lease(&stored, lease).await.expect("lease again");
        assert!(again.is_some(), "the lease was released");
    }
);

backend_test!(
    /// Issue 9, item 14: a callback that started in time completes its elicitation even when the
    /// sweeper expired it during the code exchange; otherwise nothing is saved.
    async fn a_connection_is_saved_only_with_its_elicitations_completion(backend: Backend) {
        let (_database, store) = open(backend).await;
        let stored = async |e: &ElicitationRecord| store.connection(&e.principal, "github").await.expect("load");

        let swept = asked(&store, "alice", "github:repo", None).await;
        let started = now();
        store
            .expire_elicitations(swept.expires_at + Duration::seconds(1))
            .await
            .expect("sweep");
        assert_eq!(status_of(&store, &swept.id).await, ElicitationStatus::Expired);
        let saved = store
            .save_connection(
                &connection(&swept.principal, now()),
                &swept.id,
                &notification(1),
                started,
            )
            .await
            .expect("save connection");
        assert!(saved, "expired after its callback started: completed");
        assert_eq!(status_of(&store, &swept.id).await, ElicitationStatus::Completed);
        assert_eq!(events_of(&store, &swept.session_id).await, vec![notification(1)]);
        assert!(stored(&swept).await.is_some());

        let late = asked(&store, "bob", "github:repo", None).await;
        let declined = asked(&store, "carol", "github:repo", None).await;
        let note = notification(2);
        store
            .finish_elicitation(ending(&declined.id, &note, now()), ElicitationStatus::Declined)
            .await
            .expect("decline");
        for (e, started) in [(&late, late.expires_at + Duration::seconds(1)), (&declined, now())] {
            let saved = store
                .save_connection(&connection(&e.principal, now()), &e.id, &notification(3), started)
                .await
                .expect("save connection");
            assert!(!saved, "{}", e.principal);
            assert!(stored(e).await.is_none(), "{}: nothing saved", e.principal);
            assert!(!events_of(&store, &e.session_id).await.contains(&notification(3)));
        }
        assert_eq!(status_of(&store, &late.id).await, ElicitationStatus::Pending);
        assert_eq!(status_of(&store, &declined.id).await, ElicitationStatus::Declined);
    }
);

backend_test!(
    async fn untaken_answers_are_dropped_after_the_cutoff(backend: Backend) {
        let (_database, store) = open(backend).await;
        let old = asked(&store, "alice", "form:pay", Some("old")).await;
        let recent = asked(&store, "alice", "form:pay", Some("recent")).await;
        let mut stale = answer(&old, json!({"ok": true}), Some(vec![1, 2, 3]));
        stale.created_at = now() - Duration::hours(2);
        for (to, record) in [(&old, stale), (&recent, answer(&recent, json!({"ok": true}), None))] {
            assert!(
                store
                    .save_form_answer(&record, &notification(1), now())
                    .await
                    .expect("save answer"),
                "{}",
                to.id
            );
        }
        let dropped = store
            .delete_untaken_answers(now() - Duration::hours(1))
            .await
            .expect("sweep");
        assert_eq!(dropped, 1);
        let take = |e: &ElicitationRecord, key: &'static str| {
            let store = store.clone();
            let (who, session) = (e.principal.clone(), e.session_id.clone());
            async move {
                store
                    .take_form_answer(ask(&who, &session, "form:pay", Some(key)))
                    .await
                    .expect("take")
            }
        };
        assert!(take(&old, "old").await.is_none(), "the stale answer is gone");
        assert!(take(&recent, "recent").await.is_some(), "the recent one is kept");
    }
);
