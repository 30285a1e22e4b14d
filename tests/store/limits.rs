//! The bounds: overdue elicitations never handed out again, caps on sessions and pending
//! elicitations per principal, and the retention of ended elicitations.

use super::*;

backend_test!(
    /// An ask retried after its elicitation expired, before the sweeper marked it, gets a new
    /// elicitation; the overdue one is expired, never handed out again. Within the expiry the
    /// pending one is reused.
    async fn an_overdue_elicitation_is_not_handed_out_again(backend: Backend) {
        let (_database, store) = open(backend).await;
        let record = session("alice");
        store.create_session(&record, SESSION_CAP).await.expect("create");
        for key in [None, Some("k1")] {
            let first = store
                .insert_elicitation(&elicitation(&record, "form:deploy", key), PENDING_CAP)
                .await
                .expect("insert")
                .expect("under the cap");
            let mut within = elicitation(&record, "form:deploy", key);
            within.created_at = first.expires_at - Duration::seconds(1);
            within.expires_at = within.created_at + Duration::minutes(10);
            assert_eq!(
                store
                    .insert_elicitation(&within, PENDING_CAP)
                    .await
                    .expect("insert")
                    .expect("under the cap")
                    .id,
                first.id,
                "{key:?}: reused before its expiry"
            );
            let mut retried = elicitation(&record, "form:deploy", key);
            retried.created_at = first.expires_at + Duration::seconds(1);
            retried.expires_at = retried.created_at + Duration::minutes(10);
            let again = store
                .insert_elicitation(&retried, PENDING_CAP)
                .await
                .expect("insert after expiry")
                .expect("under the cap");
            assert_eq!(again.id, retried.id, "{key:?}: a new elicitation after the expiry");
            assert_eq!(again.status, ElicitationStatus::Pending);
            assert_eq!(
                status_of(&store, &first.id).await,
                ElicitationStatus::Expired,
                "{key:?}"
            );
            let found = store
                .pending_elicitation(
                    ask(&record.principal, &record.id, "form:deploy", key),
                    retried.created_at,
                )
                .await
                .expect("pending");
            assert_eq!(found.map(|e| e.id), Some(retried.id), "{key:?}");
        }
    }
);

/// A session of `owner` created (and last used) `minutes_ago`.
fn session_from(owner: &str, minutes_ago: i64) -> SessionRecord {
    SessionRecord {
        created_at: now() - Duration::minutes(minutes_ago),
        ..session(owner)
    }
}

async fn sessions_of(database: &TestDatabase, owner: &'static str) -> i64 {
    let sql = match owner {
        "alice" => "SELECT COUNT(*) FROM sessions WHERE principal = 'alice'",
        "bob" => "SELECT COUNT(*) FROM sessions WHERE principal = 'bob'",
        _ => "SELECT COUNT(*) FROM sessions WHERE principal = 'carol'",
    };
    database.query_count(sql).await
}

backend_test!(
    /// Beyond the cap, creating a session ends the principal's least recently used one (by last
    /// use, not by age) with its events, and never another principal's; concurrent creations
    /// never leave more than the cap.
    async fn sessions_beyond_the_cap_end_the_least_recently_used(backend: Backend) {
        let (database, store) = open(backend).await;
        let oldest = session_from("alice", 30);
        let older = session_from("alice", 20);
        let old = session_from("alice", 10);
        let bobs = session_from("bob", 40);
        for record in [&oldest, &older, &old, &bobs] {
            assert!(store.create_session(record, 3).await.expect("create").is_empty());
        }
        store.append_event(&older.id, &json!({"n": 1})).await.expect("append");
        store
            .touch_sessions(std::slice::from_ref(&oldest.id), now())
            .await
            .expect("touch");
        let ended = store.create_session(&session("alice"), 3).await.expect("create");
        assert_eq!(ended, vec![older.id.clone()], "the least recently used one ends");
        assert!(store.session(&older.id).await.expect("load").is_none());
        assert_eq!(
            store.events_after(&older.id, 0, 100).await.expect("events"),
            None,
            "its log says it ended"
        );
        assert!(
            store.session(&oldest.id).await.expect("load").is_some(),
            "used lately, kept"
        );
        assert_eq!(sessions_of(&database, "alice").await, 3);
        assert_eq!(
            sessions_of(&database, "bob").await,
            1,
            "another principal's are not counted"
        );

        let created: Vec<_> = (0..12).map(|_| session("carol")).collect();
        let tasks: Vec<_> = created
            .iter()
            .map(|record| {
                let (store, record) = (store.clone(), record.clone());
                tokio::spawn(async move { store.create_session(&record, 3).await.expect("create") })
            })
            .collect();
        let mut ended = Vec::new();
        for task in tasks {
            ended.extend(task.await.expect("join"));
        }
        assert_eq!(
            sessions_of(&database, "carol").await,
            3,
            "concurrent creations keep the cap"
        );
        ended.sort();
        ended.dedup();
        assert_eq!(ended.len(), 9, "each ended session is reported once");
    }
);

backend_test!(
    /// At the cap, a new ask stores nothing and answers `None`, while an ask already pending is
    /// still handed out; an expired or finished one frees its place; other principals are not
    /// counted; concurrent insertions never exceed the cap.
    async fn pending_elicitations_are_capped_per_principal(backend: Backend) {
        let (database, store) = open(backend).await;
        let record = session("alice");
        store.create_session(&record, SESSION_CAP).await.expect("create");
        let first = elicitation(&record, "form:pay", Some("k1"));
        let second = elicitation(&record, "form:pay", Some("k2"));
        for asked in [&first, &second] {
            assert!(store.insert_elicitation(asked, 2).await.expect("insert").is_some());
        }
        let third = elicitation(&record, "form:pay", Some("k3"));
        assert!(store.insert_elicitation(&third, 2).await.expect("insert").is_none());
        assert!(
            store.elicitation(&third.id).await.expect("load").is_none(),
            "nothing stored"
        );
        let again = elicitation(&record, "form:pay", Some("k1"));
        let reused = store.insert_elicitation(&again, 2).await.expect("insert");
        assert_eq!(
            reused.map(|e| e.id),
            Some(first.id),
            "a pending ask is handed out at the cap"
        );
        let bob = session("bob");
        store.create_session(&bob, SESSION_CAP).await.expect("create");
        let bobs = elicitation(&bob, "form:pay", Some("k1"));
        assert!(store.insert_elicitation(&bobs, 2).await.expect("insert").is_some());

        let done = notification(1);
        assert!(
            store
                .finish_elicitation(ending(&first.id, &done, now()), ElicitationStatus::Declined)
                .await
                .expect("finish")
        );
        assert!(
            store.insert_elicitation(&third, 2).await.expect("insert").is_some(),
            "a place was freed"
        );
        assert_eq!(
            database
                .query_count("SELECT COUNT(*) FROM elicitations WHERE principal = 'alice' AND status = 'pending'")
                .await,
            2
        );

        let carol = session("carol");
        store.create_session(&carol, SESSION_CAP).await.expect("create");
        let tasks: Vec<_> = (0..10)
            .map(|n| {
                let (store, asked) = (store.clone(), elicitation(&carol, "form:pay", Some(&format!("c{n}"))));
                tokio::spawn(async move { store.insert_elicitation(&asked, 3).await.expect("insert") })
            })
            .collect();
        let mut stored = 0;
        for task in tasks {
            stored += usize::from(task.await.expect("join").is_some());
        }
        assert_eq!(stored, 3, "concurrent insertions keep the cap");
        assert_eq!(
            database
                .query_count("SELECT COUNT(*) FROM elicitations WHERE principal = 'carol'")
                .await,
            3
        );
    }
);

backend_test!(
    /// Elicitations that ended (finished or expired) before the cutoff are deleted with their
    /// flows and answers, at most the limit per call; pending ones and ones that ended later are
    /// kept.
    async fn ended_elicitations_are_deleted_after_the_retention_period(backend: Backend) {
        let (database, store) = open(backend).await;
        let record = session("alice");
        store.create_session(&record, SESSION_CAP).await.expect("create");
        let long_ago = now() - Duration::days(8);
        let asked_long_ago = |call_key: &str| ElicitationRecord {
            created_at: long_ago,
            expires_at: long_ago + Duration::minutes(10),
            ..elicitation(&record, "form:pay", Some(call_key))
        };
        let expired = asked_long_ago("expired");
        let answered = asked_long_ago("answered");
        for asked in [&expired, &answered] {
            store
                .insert_elicitation(asked, PENDING_CAP)
                .await
                .expect("insert")
                .expect("stored");
        }
        assert!(
            store
                .save_form_answer(
                    &answer(&answered, json!({"sure": true}), None),
                    &notification(1),
                    long_ago
                )
                .await
                .expect("answer")
        );
        store
            .insert_flow(&gatehouse::store::OAuthFlowRecord {
                state_hash: "old-flow".into(),
                elicitation_id: expired.id,
                principal: principal("alice"),
                provider: "github".into(),
                issuer: None,
                scopes: vec![],
                pkce_verifier: vec![1],
                browser_hash: "browser".into(),
                created_at: long_ago,
                expires_at: long_ago + Duration::minutes(10),
                used_at: None,
            })
            .await
            .expect("flow");
        let recent = elicitation(&record, "form:pay", Some("recent"));
        let pending = elicitation(&record, "form:pay", Some("pending"));
        for asked in [&recent, &pending] {
            store
                .insert_elicitation(asked, PENDING_CAP)
                .await
                .expect("insert")
                .expect("stored");
        }
        let done = notification(2);
        store
            .finish_elicitation(ending(&recent.id, &done, now()), ElicitationStatus::Completed)
            .await
            .expect("finish");
        assert_eq!(store.expire_elicitations(now()).await.expect("expire").len(), 1);

        let cutoff = now() - Duration::days(7);
        for _ in 0..2 {
            let deleted = store.delete_ended_elicitations(cutoff, 1).await.expect("delete");
            assert_eq!(deleted, 1, "one batch of one");
        }
        for gone in [&expired.id, &answered.id] {
            assert!(store.elicitation(gone).await.expect("load").is_none());
        }
        for kept in [&recent.id, &pending.id] {
            assert!(store.elicitation(kept).await.expect("load").is_some());
        }
        assert_eq!(database.query_count("SELECT COUNT(*) FROM oauth_flows").await, 0);
        assert_eq!(database.query_count("SELECT COUNT(*) FROM form_answers").await, 0);
        assert_eq!(store.delete_ended_elicitations(cutoff, 1000).await.expect("delete"), 0);
    }
);
