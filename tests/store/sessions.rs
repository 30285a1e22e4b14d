//! Sessions, their event logs and the database itself: round trips, numbering, the idle sweep,
//! readiness, delivery claims (and a stream's read that claims), the PostgreSQL pool and the
//! SQLite file's mode.

use super::*;

backend_test!(
    async fn sessions_round_trip(backend: Backend) {
        let (_database, store) = open(backend).await;
        store.migrate().await.expect("migrating twice is harmless");
        store.check_ready().await.expect("ready");
        let record = session("alice");
        store.create_session(&record, SESSION_CAP).await.expect("create");
        let loaded = store.session(&record.id).await.expect("load").expect("exists");
        assert_eq!(loaded.principal, record.principal);
        assert_eq!(loaded.client_info, record.client_info);
        assert_eq!(loaded.client_capabilities, record.client_capabilities);
        assert_eq!(loaded.log_level, None);

        assert!(
            store
                .set_log_level(&record.id, LogLevel::Warning)
                .await
                .expect("set level")
        );
        assert_eq!(
            store
                .session(&record.id)
                .await
                .expect("load")
                .expect("exists")
                .log_level,
            Some(LogLevel::Warning)
        );

        assert!(store.delete_session(&record.id).await.expect("delete"));
        assert!(store.session(&record.id).await.expect("load").is_none());
        assert!(!store.delete_session(&record.id).await.expect("delete again"));
        assert!(
            !store
                .set_log_level(&record.id, LogLevel::Info)
                .await
                .expect("set level on gone session")
        );
    }
);

backend_test!(
    async fn events_are_numbered_per_session(backend: Backend) {
        let (_database, store) = open(backend).await;
        let a = session("alice");
        let b = session("bob");
        store.create_session(&a, SESSION_CAP).await.expect("create a");
        store.create_session(&b, SESSION_CAP).await.expect("create b");
        for n in 1..=3 {
            let seq = store
                .append_event(&a.id, &serde_json::json!({"n": n}))
                .await
                .expect("append");
            assert_eq!(seq, Some(n));
        }
        assert_eq!(
            store
                .append_event(&b.id, &serde_json::json!({"n": "b1"}))
                .await
                .expect("append"),
            Some(1)
        );
        let after_one = store.events_after(&a.id, 1, 100).await.expect("events").expect("a");
        assert_eq!(after_one.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![2, 3]);
        assert_eq!(after_one[0].message, serde_json::json!({"n": 2}));
        assert_eq!(
            store.events_after(&a.id, 0, 2).await.expect("events").map(|e| e.len()),
            Some(2)
        );
        assert_eq!(
            store.events_after(&a.id, 3, 100).await.expect("events"),
            Some(Vec::new())
        );
        assert_eq!(
            store
                .events_after(&SessionId::generate(), 0, 100)
                .await
                .expect("events"),
            None
        );

        assert_eq!(store.delivered_seq(&a.id).await.expect("delivered"), Some(0));
        assert!(store.claim_delivery(&a.id, 0, 2).await.expect("claim"));
        assert!(!store.claim_delivery(&a.id, 0, 1).await.expect("stale claim"));
        assert_eq!(store.delivered_seq(&a.id).await.expect("delivered"), Some(2));

        let gone = SessionId::generate();
        assert_eq!(
            store
                .append_event(&gone, &serde_json::json!({}))
                .await
                .expect("append to unknown"),
            None
        );
        assert_eq!(store.delivered_seq(&gone).await.expect("delivered"), None);

        store.delete_session(&a.id).await.expect("delete");
        assert_eq!(
            store.events_after(&a.id, 0, 100).await.expect("events"),
            None,
            "the log says the session is gone"
        );
    }
);

backend_test!(
    async fn a_streams_read_takes_new_events_once(backend: Backend) {
        let (_database, store) = open(backend).await;
        let record = session("alice");
        store.create_session(&record, SESSION_CAP).await.expect("create");
        for n in 1..=3 {
            store
                .append_event(&record.id, &serde_json::json!({ "n": n }))
                .await
                .expect("append");
        }
        // The seqs taken and whether they were claimed, by a stream at `after`.
        let take = |after: i64, limit: i64| {
            let (store, id) = (store.clone(), record.id.clone());
            async move {
                let taken = store.take_events_after(&id, after, limit).await.expect("take");
                taken.map(|t| (t.events.iter().map(|e| e.seq).collect::<Vec<_>>(), t.claimed))
            }
        };

        assert_eq!(take(0, 2).await, Some((vec![1, 2], true)));
        assert_eq!(store.delivered_seq(&record.id).await.expect("mark"), Some(2));
        // A rival stream still at 0: it reads the events but the mark has moved, so it claims none.
        assert_eq!(take(0, 100).await, Some((vec![1, 2, 3], false)));
        assert_eq!(store.delivered_seq(&record.id).await.expect("mark"), Some(2));
        let rest = store
            .take_events_after(&record.id, 2, 100)
            .await
            .expect("take")
            .expect("session");
        assert_eq!(rest.events[0].message, serde_json::json!({"n": 3}));
        assert!(rest.claimed);
        assert_eq!(
            take(3, 100).await,
            Some((Vec::new(), false)),
            "nothing new, nothing claimed"
        );
        assert_eq!(store.delivered_seq(&record.id).await.expect("mark"), Some(3));

        assert_eq!(
            store
                .take_events_after(&SessionId::generate(), 0, 100)
                .await
                .expect("take"),
            None
        );
        store.delete_session(&record.id).await.expect("delete");
        assert_eq!(take(3, 100).await, None, "the read says the session is gone");
    }
);

backend_test!(
    async fn concurrent_appends_get_distinct_numbers(backend: Backend) {
        let (_database, store) = open(backend).await;
        let record = session("carol");
        store.create_session(&record, SESSION_CAP).await.expect("create");
        let tasks: Vec<_> = (0..20)
            .map(|n| {
                let store = store.clone();
                let id = record.id.clone();
                tokio::spawn(async move { store.append_event(&id, &serde_json::json!({ "n": n })).await })
            })
            .collect();
        let mut seqs = Vec::new();
        for task in tasks {
            seqs.push(task.await.expect("join").expect("append").expect("session exists"));
        }
        seqs.sort_unstable();
        assert_eq!(seqs, (1..=20).collect::<Vec<_>>());
    }
);

backend_test!(
    async fn idle_sessions_are_swept(backend: Backend) {
        let (_database, store) = open(backend).await;
        let old = session("dave");
        let fresh = session("erin");
        store.create_session(&old, SESSION_CAP).await.expect("create");
        store.create_session(&fresh, SESSION_CAP).await.expect("create");
        let later = Utc::now() + chrono::Duration::hours(2);
        store
            .touch_sessions(std::slice::from_ref(&fresh.id), later)
            .await
            .expect("touch");
        let swept = store
            .delete_idle_sessions(Utc::now() + chrono::Duration::hours(1))
            .await
            .expect("sweep");
        assert!(swept.contains(&old.id));
        assert!(!swept.contains(&fresh.id));
        assert!(store.session(&old.id).await.expect("load").is_none());
        assert!(store.session(&fresh.id).await.expect("load").is_some());
    }
);

backend_test!(
    async fn readiness_requires_migrations(backend: Backend) {
        let database = TestDatabase::new(backend).await;
        let store = store::connect(&database.url, 2).await.expect("connect").store;
        assert!(matches!(store.check_ready().await, Err(StoreError::NotReady(_))));
        store.migrate().await.expect("migrate");
        store.check_ready().await.expect("ready after migrate");
    }
);

backend_test!(
    async fn a_second_claim_of_the_same_events_loses(backend: Backend) {
        let (_database, store) = open(backend).await;
        let record = session("frank");
        store.create_session(&record, SESSION_CAP).await.expect("create");
        for n in 0..3 {
            store
                .append_event(&record.id, &json!({ "n": n }))
                .await
                .expect("append");
        }
        assert!(store.claim_delivery(&record.id, 0, 3).await.expect("claim"));
        assert!(
            !store.claim_delivery(&record.id, 0, 3).await.expect("claim again"),
            "a stale claim loses"
        );
        assert_eq!(store.delivered_seq(&record.id).await.expect("mark"), Some(3));
    }
);

postgres_test!(
    /// Opening a connection over TLS costs a handshake that sqlx makes slow (issue 9, item 11):
    /// the PostgreSQL pool opens all its connections at start, so no request waits for one.
    async fn a_postgres_pool_opens_all_its_connections_at_start() {
        let database = TestDatabase::new(Backend::Postgres).await;
        let _opened = store::connect(&database.url, 4).await.expect("connect");
        common::eventually("the pool's four connections open without any request", async || {
            (database.gatehouse_backends().await.len() == 4).then_some(())
        })
        .await;
    }
);

/// A fresh SQLite database, and the `-wal` and `-shm` files beside it, are readable by their
/// owner only (like the development key file), whatever the umask lets through.
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_sqlite_database_is_private_to_its_owner() {
    use std::os::unix::fs::PermissionsExt;

    let database = TestDatabase::new(Backend::Sqlite).await;
    let store = store::connect(&database.url, 2).await.expect("connect").store;
    store.migrate().await.expect("migrate");
    store
        .create_session(&session("alice"), SESSION_CAP)
        .await
        .expect("write");
    let path = database.url.trim_start_matches("sqlite://").to_owned();
    for file in [path.clone(), format!("{path}-wal"), format!("{path}-shm")] {
        let mode = std::fs::metadata(&file)
            .unwrap_or_else(|e| panic!("{file}: {e}"))
            .permissions()
            .mode();
        assert_eq!(mode & 0o077, 0, "{file} has mode {:o}", mode & 0o777);
    }
}
