//! The browser-session store contract (the pages' sign-in in `oauth` mode): the same behaviour
//! from the PostgreSQL and the SQLite implementation.

mod common;

use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};
use common::{Backend, TestDatabase};
use gatehouse::domain::Principal;
use gatehouse::store::{self, BrowserSessionRecord, Store};
use serde_json::json;

async fn open(backend: Backend) -> (TestDatabase, Arc<dyn Store>) {
    let database = TestDatabase::new(backend).await;
    let store = store::connect(&database.url, 4).await.expect("connect").store;
    store.migrate().await.expect("migrate");
    (database, store)
}

/// Times stored at millisecond precision, so they read back equal on both backends.
fn now() -> DateTime<Utc> {
    DateTime::from_timestamp_millis(Utc::now().timestamp_millis()).expect("now")
}

fn session(id: &str, principal: &str, created_at: DateTime<Utc>) -> BrowserSessionRecord {
    BrowserSessionRecord {
        id: id.to_owned(),
        principal: Principal::parse(principal).expect("principal"),
        claims: json!({"name": "Alice", "groups": ["eng", "ops"]}),
        created_at,
        expires_at: created_at + Duration::hours(12),
    }
}

backend_test!(
    /// A session reads back whole until it expires, and once deleted is gone.
    async fn a_session_lives_until_it_expires_or_is_deleted(backend: Backend) {
        let (_database, store) = open(backend).await;
        let at = now();
        let record = session("a1", "https://idp.example#alice", at);
        store.create_browser_session(&record, 16).await.expect("create");
        assert_eq!(
            store.browser_session("a1", at).await.expect("read"),
            Some(record.clone())
        );
        assert_eq!(store.browser_session("other", at).await.expect("read"), None);
        assert_eq!(
            store
                .browser_session("a1", record.expires_at)
                .await
                .expect("read at expiry"),
            None,
            "a session is over at its expiry"
        );
        assert!(store.delete_browser_session("a1").await.expect("delete"));
        assert!(!store.delete_browser_session("a1").await.expect("delete again"));
        assert_eq!(store.browser_session("a1", at).await.expect("read"), None);
    }
);

backend_test!(
    /// A principal keeps at most the cap: each new session ends the oldest; others are untouched.
    async fn a_new_session_beyond_the_cap_ends_the_oldest(backend: Backend) {
        let (database, store) = open(backend).await;
        let start = now() - Duration::minutes(10);
        store
            .create_browser_session(&session("bob-1", "bob", start), 3)
            .await
            .expect("bob");
        for n in 1..=5 {
            let record = session(&format!("alice-{n}"), "alice", start + Duration::seconds(n));
            store.create_browser_session(&record, 3).await.expect("create");
        }
        let at = now();
        for (id, kept) in [
            ("alice-1", false),
            ("alice-2", false),
            ("alice-3", true),
            ("alice-4", true),
            ("alice-5", true),
            ("bob-1", true),
        ] {
            assert_eq!(
                store.browser_session(id, at).await.expect("read").is_some(),
                kept,
                "{id}"
            );
        }
        assert_eq!(database.query_count("SELECT COUNT(*) FROM browser_sessions").await, 4);
    }
);

backend_test!(
    /// Concurrent sign-ins of one principal never leave more than the cap.
    async fn concurrent_sessions_stay_within_the_cap(backend: Backend) {
        let (database, store) = open(backend).await;
        let at = now();
        let creations = (0..12).map(|n| {
            let store = store.clone();
            let record = session(&format!("s{n}"), "alice", at + Duration::milliseconds(n));
            tokio::spawn(async move { store.create_browser_session(&record, 4).await })
        });
        for creation in futures::future::join_all(creations).await {
            creation.expect("join").expect("create");
        }
        assert_eq!(database.query_count("SELECT COUNT(*) FROM browser_sessions").await, 4);
    }
);

backend_test!(
    /// The sweep deletes the expired sessions and only those.
    async fn the_sweep_deletes_expired_sessions(backend: Backend) {
        let (database, store) = open(backend).await;
        let at = now();
        let mut old = session("old", "alice", at - Duration::hours(13));
        old.expires_at = at - Duration::hours(1);
        store.create_browser_session(&old, 16).await.expect("old");
        store
            .create_browser_session(&session("new", "alice", at), 16)
            .await
            .expect("new");
        assert_eq!(store.delete_expired_browser_sessions(at).await.expect("sweep"), 1);
        assert_eq!(database.query_count("SELECT COUNT(*) FROM browser_sessions").await, 1);
        assert!(store.browser_session("new", at).await.expect("read").is_some());
    }
);
