//! The store contract: the same behaviour from the PostgreSQL and the SQLite implementation.

mod common;

use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};
use common::records::{answer, elicitation, notification, now, open, session};
use common::{Backend, TestDatabase};
use gatehouse::domain::{ElicitationId, LogLevel, Principal, SessionId};
use gatehouse::events::{self, Bus, EVERY_UPSTREAM};
use gatehouse::store::{
    self, AskKey, CatalogueRecord, ClientAction, ConnectionCache, ConnectionRecord, ConnectionStatus,
    ElicitationRecord, ElicitationStatus, Ending, FormValuesRecord, NOTIFY_CHANNEL, Notice, RefreshLease,
    RefreshedTokens, SealedTable, SessionCache, SessionRecord, Store, StoreError,
};
use serde_json::{Value, json};
use sqlx::postgres::PgListener;

/// Caps the contract tests stay far below, except where a test is about them.
const SESSION_CAP: usize = 64;
const PENDING_CAP: usize = 32;

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
        let after_one = store.events_after(&a.id, 1, 100).await.expect("events");
        assert_eq!(after_one.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![2, 3]);
        assert_eq!(after_one[0].message, serde_json::json!({"n": 2}));
        assert_eq!(store.events_after(&a.id, 0, 2).await.expect("events").len(), 2);

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
        assert!(
            store.events_after(&a.id, 0, 100).await.expect("events").is_empty(),
            "events go with the session"
        );
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

fn ask<'a>(
    principal: &'a Principal,
    session: &'a SessionId,
    requirement: &'a str,
    call_key: Option<&'a str>,
) -> AskKey<'a> {
    AskKey {
        principal,
        session,
        requirement,
        call_key,
    }
}

fn ending<'a>(elicitation: &'a ElicitationId, notification: &'a Value, at: DateTime<Utc>) -> Ending<'a> {
    Ending {
        elicitation,
        notification,
        at,
    }
}

fn connection(principal: &Principal, at: DateTime<Utc>) -> ConnectionRecord {
    ConnectionRecord {
        principal: principal.clone(),
        provider: "github".into(),
        access_token: vec![1, 2, 3],
        refresh_token: None,
        expires_at: None,
        scopes: vec!["repo".into()],
        account_label: None,
        status: ConnectionStatus::Active,
        created_at: at,
        updated_at: at,
    }
}

fn principal(name: &str) -> Principal {
    Principal::parse(name).expect("principal")
}

/// A new session of `owner` with a stored pending elicitation.
async fn asked(store: &Arc<dyn Store>, owner: &str, requirement: &str, call_key: Option<&str>) -> ElicitationRecord {
    let record = session(owner);
    store
        .create_session(&record, SESSION_CAP)
        .await
        .expect("create session");
    store
        .insert_elicitation(&elicitation(&record, requirement, call_key), PENDING_CAP)
        .await
        .expect("insert elicitation")
        .expect("under the cap")
}

fn values(owner: &str, form: &str, fields: Value, secrets: Option<Vec<u8>>, at: DateTime<Utc>) -> FormValuesRecord {
    FormValuesRecord {
        principal: principal(owner),
        form: form.into(),
        fields,
        secrets,
        created_at: at,
        updated_at: at,
    }
}

async fn events_of(store: &Arc<dyn Store>, session: &SessionId) -> Vec<Value> {
    let events = store.events_after(session, 0, 100).await.expect("events");
    events.into_iter().map(|e| e.message).collect()
}

async fn status_of(store: &Arc<dyn Store>, id: &ElicitationId) -> ElicitationStatus {
    store.elicitation(id).await.expect("load").expect("exists").status
}

backend_test!(
    async fn form_values_replace_earlier_ones_but_keep_created_at(backend: Backend) {
        let (_database, store) = open(backend).await;
        let first = now() - Duration::hours(1);
        let saved = values("alice", "profile", json!({"name": "Alice"}), Some(vec![1, 2, 3]), first);
        assert!(
            !store
                .save_form_values(&saved, None, &notification(0), now())
                .await
                .expect("save")
        );
        let later = now();
        let replacement = values("alice", "profile", json!({"team": "blue"}), None, later);
        store
            .save_form_values(&replacement, None, &notification(0), later)
            .await
            .expect("save again");
        let loaded = store
            .form_values(&principal("alice"), "profile")
            .await
            .expect("load")
            .expect("saved");
        assert_eq!(loaded.principal, principal("alice"));
        assert_eq!(loaded.form, "profile");
        assert_eq!(
            loaded.fields,
            json!({"team": "blue"}),
            "fields are replaced, not merged"
        );
        assert_eq!(loaded.secrets, None, "secrets are replaced too");
        assert_eq!(loaded.created_at, first, "created_at is kept from the first save");
        assert_eq!(loaded.updated_at, later);
        assert!(
            store
                .form_values(&principal("alice"), "other")
                .await
                .expect("load")
                .is_none()
        );
    }
);

backend_test!(
    async fn saved_form_values_complete_a_pending_elicitation_once(backend: Backend) {
        let (_database, store) = open(backend).await;
        let pending = asked(&store, "alice", "form:profile", None).await;
        let at = now();
        let saved = values("alice", "profile", json!({"name": "Alice"}), None, at);
        assert!(
            store
                .save_form_values(&saved, Some(&pending.id), &notification(1), at)
                .await
                .expect("save")
        );
        let completed = store.elicitation(&pending.id).await.expect("load").expect("exists");
        assert_eq!(completed.status, ElicitationStatus::Completed);
        assert_eq!(completed.completed_at, Some(at));
        assert_eq!(events_of(&store, &pending.session_id).await, vec![notification(1)]);

        let again = values("alice", "profile", json!({"name": "Alice B."}), None, now());
        assert!(
            !store
                .save_form_values(&again, Some(&pending.id), &notification(2), now())
                .await
                .expect("save again"),
            "a completed elicitation is not completed again"
        );
        assert_eq!(
            events_of(&store, &pending.session_id).await,
            vec![notification(1)],
            "nothing more is appended"
        );
        let loaded = store
            .form_values(&principal("alice"), "profile")
            .await
            .expect("load")
            .expect("saved");
        assert_eq!(
            loaded.fields,
            json!({"name": "Alice B."}),
            "the values are saved all the same"
        );
    }
);

backend_test!(
    async fn saved_form_values_leave_an_expired_elicitation_alone(backend: Backend) {
        let (_database, store) = open(backend).await;
        let pending = asked(&store, "alice", "form:profile", None).await;
        let after_expiry = pending.expires_at + Duration::seconds(1);
        let saved = values("alice", "profile", json!({"name": "Alice"}), None, after_expiry);
        assert!(
            !store
                .save_form_values(&saved, Some(&pending.id), &notification(1), after_expiry)
                .await
                .expect("save")
        );
        assert_eq!(status_of(&store, &pending.id).await, ElicitationStatus::Pending);
        assert!(events_of(&store, &pending.session_id).await.is_empty());
        assert!(
            store
                .form_values(&principal("alice"), "profile")
                .await
                .expect("load")
                .is_some(),
            "the values are saved"
        );
    }
);

backend_test!(
    async fn form_values_are_listed_by_form_per_principal_and_deleted(backend: Backend) {
        let (_database, store) = open(backend).await;
        for form in ["zeta", "alpha", "mid"] {
            let saved = values("alice", form, json!({"form": form}), None, now());
            store
                .save_form_values(&saved, None, &notification(0), now())
                .await
                .expect("save");
        }
        let bobs = values("bob", "alpha", json!({"owner": "bob"}), Some(vec![9]), now());
        store
            .save_form_values(&bobs, None, &notification(0), now())
            .await
            .expect("save");

        let alices = store.all_form_values(&principal("alice")).await.expect("list");
        let forms: Vec<_> = alices.iter().map(|v| v.form.as_str()).collect();
        assert_eq!(forms, ["alpha", "mid", "zeta"]);
        assert!(alices.iter().all(|v| v.principal == principal("alice")));
        assert_eq!(alices[0].fields, json!({"form": "alpha"}));
        let bobs = store.all_form_values(&principal("bob")).await.expect("list");
        assert_eq!(bobs.len(), 1);
        assert_eq!(bobs[0].fields, json!({"owner": "bob"}));
        assert!(
            store
                .all_form_values(&principal("carol"))
                .await
                .expect("list")
                .is_empty()
        );

        assert!(
            store
                .delete_form_values(&principal("alice"), "alpha")
                .await
                .expect("delete")
        );
        assert!(
            !store
                .delete_form_values(&principal("alice"), "alpha")
                .await
                .expect("delete again")
        );
        assert!(
            store
                .form_values(&principal("alice"), "alpha")
                .await
                .expect("load")
                .is_none()
        );
        assert!(
            store
                .form_values(&principal("bob"), "alpha")
                .await
                .expect("load")
                .is_some(),
            "another principal's values stay"
        );
        assert_eq!(store.all_form_values(&principal("alice")).await.expect("list").len(), 2);
    }
);

backend_test!(
    async fn a_form_answer_is_kept_only_for_a_pending_elicitation(backend: Backend) {
        let (database, store) = open(backend).await;
        let declined = asked(&store, "alice", "form:deploy", Some("k1")).await;
        assert!(
            store
                .finish_elicitation(
                    ending(&declined.id, &notification(0), now()),
                    ElicitationStatus::Declined
                )
                .await
                .expect("decline")
        );
        let expired = asked(&store, "alice", "form:deploy", Some("k2")).await;
        let unknown = ElicitationRecord {
            id: ElicitationId::generate(),
            ..expired.clone()
        };
        let after_expiry = expired.expires_at + Duration::seconds(1);
        for (refused, at) in [(&declined, now()), (&expired, after_expiry), (&unknown, now())] {
            assert!(
                !store
                    .save_form_answer(&answer(refused, json!({"ok": true}), None), &notification(1), at)
                    .await
                    .expect("save answer")
            );
        }
        assert_eq!(database.query_count("SELECT COUNT(*) FROM form_answers").await, 0);
        assert_eq!(status_of(&store, &expired.id).await, ElicitationStatus::Pending);
        assert_eq!(events_of(&store, &declined.session_id).await, vec![notification(0)]);
        assert!(events_of(&store, &expired.session_id).await.is_empty());

        let pending = asked(&store, "alice", "form:deploy", Some("k3")).await;
        assert!(
            store
                .save_form_answer(&answer(&pending, json!({"n": 1}), None), &notification(1), now())
                .await
                .expect("save answer")
        );
        assert!(
            !store
                .save_form_answer(&answer(&pending, json!({"n": 2}), None), &notification(2), now())
                .await
                .expect("answer again"),
            "an elicitation is answered once"
        );
        assert_eq!(status_of(&store, &pending.id).await, ElicitationStatus::Completed);
        assert_eq!(events_of(&store, &pending.session_id).await, vec![notification(1)]);
        let taken = store
            .take_form_answer(ask(&pending.principal, &pending.session_id, "form:deploy", Some("k3")))
            .await
            .expect("take")
            .expect("kept");
        assert_eq!(taken.fields, json!({"n": 1}), "the first answer is the one kept");
    }
);

backend_test!(
    async fn a_form_answer_is_taken_by_one_call(backend: Backend) {
        let (_database, store) = open(backend).await;
        let pending = asked(&store, "alice", "form:deploy", Some("key")).await;
        let other_session = asked(&store, "alice", "form:deploy", Some("key")).await;
        assert_ne!(pending.session_id, other_session.session_id);
        assert!(
            store
                .save_form_answer(
                    &answer(&pending, json!({"target": "prod"}), None),
                    &notification(1),
                    now()
                )
                .await
                .expect("save answer")
        );
        let (who, session) = (&pending.principal, &pending.session_id);
        for (who, session, requirement, key) in [
            (&principal("bob"), session, "form:deploy", "key"),
            (who, &other_session.session_id, "form:deploy", "key"),
            (who, session, "form:other", "key"),
            (who, session, "form:deploy", "other-key"),
        ] {
            assert!(
                store
                    .take_form_answer(ask(who, session, requirement, Some(key)))
                    .await
                    .expect("take")
                    .is_none(),
                "{who:?} {requirement} {key} must not get the answer"
            );
        }
        let taken = store
            .take_form_answer(ask(who, session, "form:deploy", Some("key")))
            .await
            .expect("take")
            .expect("the answer");
        assert_eq!(taken.elicitation_id, pending.id);
        assert_eq!(taken.fields, json!({"target": "prod"}));
        assert!(
            store
                .take_form_answer(ask(who, session, "form:deploy", Some("key")))
                .await
                .expect("take again")
                .is_none(),
            "single use"
        );

        for round in 0..10 {
            let key = format!("race-{round}");
            let pending = asked(&store, "alice", "form:deploy", Some(&key)).await;
            assert!(
                store
                    .save_form_answer(
                        &answer(&pending, json!({ "round": round }), None),
                        &notification(1),
                        now()
                    )
                    .await
                    .expect("save answer")
            );
            let takes: Vec<_> = (0..2)
                .map(|_| {
                    let (store, pending, key) = (store.clone(), pending.clone(), key.clone());
                    tokio::spawn(async move {
                        store
                            .take_form_answer(ask(&pending.principal, &pending.session_id, "form:deploy", Some(&key)))
                            .await
                    })
                })
                .collect();
            let mut got = Vec::new();
            for take in takes {
                got.extend(take.await.expect("join").expect("take"));
            }
            assert_eq!(
                got.len(),
                1,
                "round {round}: exactly one of two racing calls gets the answer"
            );
            assert_eq!(got[0].fields, json!({ "round": round }));
        }
    }
);

backend_test!(
    async fn pending_elicitations_are_told_apart_by_call_key(backend: Backend) {
        let (_database, store) = open(backend).await;
        let record = session("alice");
        store.create_session(&record, SESSION_CAP).await.expect("create");
        let insert = |key: Option<&'static str>| {
            let (store, asked) = (store.clone(), elicitation(&record, "form:deploy", key));
            async move {
                store
                    .insert_elicitation(&asked, PENDING_CAP)
                    .await
                    .expect("insert")
                    .expect("under the cap")
            }
        };
        let (k1, k1_again) = tokio::join!(insert(Some("k1")), insert(Some("k1")));
        assert_eq!(
            k1.id, k1_again.id,
            "racing inserts for one call get the same elicitation"
        );
        let k2 = insert(Some("k2")).await;
        let none = insert(None).await;
        assert_ne!(k1.id, k2.id, "another call key is another elicitation");
        assert_ne!(none.id, k1.id);
        assert_ne!(none.id, k2.id);
        assert_eq!(insert(None).await.id, none.id, "no call key is one key too");
        assert_eq!(insert(Some("k2")).await.id, k2.id);
        assert_eq!(k1.call_key.as_deref(), Some("k1"));
        assert_eq!(k1.detail.as_deref(), Some("Run the tool with call k1"));
        assert_eq!(none.call_key, None);
        assert_eq!(none.detail, None);

        let (who, id) = (&record.principal, &record.id);
        for (key, expected) in [
            (Some("k1"), Some(k1.id)),
            (Some("k2"), Some(k2.id)),
            (None, Some(none.id)),
        ] {
            let found = store
                .pending_elicitation(ask(who, id, "form:deploy", key), now())
                .await
                .expect("pending");
            assert_eq!(found.map(|e| e.id), expected, "{key:?}");
        }
        assert!(
            store
                .pending_elicitation(ask(who, id, "form:deploy", Some("k3")), now())
                .await
                .expect("pending")
                .is_none()
        );
    }
);

backend_test!(
    async fn declines_are_reported_per_call_key(backend: Backend) {
        let (_database, store) = open(backend).await;
        let declined = asked(&store, "alice", "form:deploy", Some("k1")).await;
        let record = store
            .session(&declined.session_id)
            .await
            .expect("load")
            .expect("exists");
        let without_key = store
            .insert_elicitation(&elicitation(&record, "form:deploy", None), PENDING_CAP)
            .await
            .expect("insert")
            .expect("under the cap");
        for id in [declined.id, without_key.id] {
            store
                .finish_elicitation(ending(&id, &notification(0), now()), ElicitationStatus::Declined)
                .await
                .expect("decline");
        }
        let (who, session) = (&declined.principal, &declined.session_id);
        let take = |key: Option<&'static str>| {
            let store = store.clone();
            async move {
                store
                    .take_unreported_decline(ask(who, session, "form:deploy", key))
                    .await
                    .expect("take decline")
                    .map(|e| e.id)
            }
        };
        assert_eq!(take(Some("k2")).await, None);
        assert_eq!(take(Some("k1")).await, Some(declined.id));
        assert_eq!(take(Some("k1")).await, None, "reported once");
        assert_eq!(take(None).await, Some(without_key.id));
        assert_eq!(take(None).await, None);
    }
);

backend_test!(
    async fn form_secrets_and_hostile_text_round_trip(backend: Backend) {
        let (_database, store) = open(backend).await;
        let ciphertext: Vec<u8> = (0..=255u8).chain([0, 0, 255]).collect();
        let hostile = format!(
            "<script>alert(\"x\")</script> '); DROP TABLE form_values; -- \\ \n\t \"quoted\" 'single' 🦀👩‍👩‍👧 {}",
            "é€".repeat(5_000)
        );
        assert!(hostile.chars().count() > 10_000);
        let fields = json!({"note": hostile, "nested": {"list": [hostile, 1, null]}});

        let saved = values("alice", "profile", fields.clone(), Some(ciphertext.clone()), now());
        store
            .save_form_values(&saved, None, &notification(0), now())
            .await
            .expect("save");
        let loaded = store
            .form_values(&principal("alice"), "profile")
            .await
            .expect("load")
            .expect("saved");
        assert_eq!(loaded.fields, fields);
        assert_eq!(loaded.secrets.as_deref(), Some(ciphertext.as_slice()));

        let record = session("alice");
        store.create_session(&record, SESSION_CAP).await.expect("create");
        let asked = ElicitationRecord {
            detail: Some(hostile.clone()),
            ..elicitation(&record, "form:deploy", Some("key"))
        };
        let pending = store
            .insert_elicitation(&asked, PENDING_CAP)
            .await
            .expect("insert")
            .expect("under the cap");
        assert_eq!(pending.detail.as_deref(), Some(hostile.as_str()));
        assert!(
            store
                .save_form_answer(
                    &answer(&pending, fields.clone(), Some(ciphertext.clone())),
                    &notification(1),
                    now()
                )
                .await
                .expect("save answer")
        );
        let taken = store
            .take_form_answer(ask(&record.principal, &record.id, "form:deploy", Some("key")))
            .await
            .expect("take")
            .expect("the answer");
        assert_eq!(taken.fields, fields);
        assert_eq!(taken.secrets, Some(ciphertext));
    }
);

/// Applies the migrations up to `version` alone, as an older gatehouse did, then runs `script`.
async fn with_old_schema(database: &TestDatabase, version: i64, script: String) {
    let script = sqlx::AssertSqlSafe(script);
    match database.backend {
        Backend::Postgres => {
            let pool = sqlx::PgPool::connect(&database.url).await.expect("connect");
            let migrator = sqlx::migrate!("migrations/postgres");
            migrator.run_to(version, &pool).await.expect("old migrations");
            sqlx::raw_sql(script).execute(&pool).await.expect("old rows");
        }
        Backend::Sqlite => {
            let pool = sqlx::SqlitePool::connect(&database.url).await.expect("connect");
            let migrator = sqlx::migrate!("migrations/sqlite");
            migrator.run_to(version, &pool).await.expect("old migrations");
            sqlx::raw_sql(script).execute(&pool).await.expect("old rows");
        }
    }
}

backend_test!(
    /// The forms migration on a database that already has sessions and elicitations.
    async fn forms_migration_keeps_existing_elicitations(backend: Backend) {
        let database = TestDatabase::new(backend).await;
        let store = store::connect(&database.url, 2).await.expect("connect").store;
        let record = session("alice");
        let (pending, declined) = (ElicitationId::generate(), ElicitationId::generate());
        let (created, expires) = match backend {
            Backend::Postgres => ("now()", "now() + interval '1 hour'"),
            Backend::Sqlite => ("unixepoch() * 1000", "(unixepoch() + 3600) * 1000"),
        };
        let sessions = format!(
            "INSERT INTO sessions (id, principal, protocol_version, client_info, client_capabilities, created_at, last_seen_at)
             VALUES ('{id}', 'alice', '2025-11-25', '{{}}', '{{}}', {created}, {created})",
            id = record.id
        );
        let elicitations: Vec<_> = [(pending, "pending"), (declined, "declined")]
            .map(|(id, status)| {
                format!(
                    "INSERT INTO elicitations
                         (id, principal, session_id, requirement, status, message, url, client_name, created_at, expires_at)
                     VALUES ('{id}', 'alice', '{session}', 'form:profile', '{status}', 'm', 'u', 'c', {created}, {expires})",
                    session = record.id
                )
            })
            .into();
        with_old_schema(&database, 2, format!("{sessions}; {};", elicitations.join("; "))).await;
        assert!(
            matches!(store.check_ready().await, Err(StoreError::NotReady(_))),
            "0003 is still to apply"
        );
        store.migrate().await.expect("migrate");
        store.check_ready().await.expect("ready");
        store.migrate().await.expect("migrating twice is harmless");

        let found = store
            .pending_elicitation(ask(&record.principal, &record.id, "form:profile", None), now())
            .await
            .expect("pending")
            .expect("the old elicitation");
        assert_eq!(found.id, pending);
        assert_eq!((found.call_key, found.detail), (None, None));
        let again = store
            .insert_elicitation(&elicitation(&record, "form:profile", None), PENDING_CAP)
            .await
            .expect("insert")
            .expect("under the cap");
        assert_eq!(
            again.id, pending,
            "the recreated index still allows one pending without a call key"
        );
        let keyed = store
            .insert_elicitation(&elicitation(&record, "form:profile", Some("key")), PENDING_CAP)
            .await
            .expect("insert")
            .expect("under the cap");
        assert_ne!(keyed.id, pending);
        let reported = store
            .take_unreported_decline(ask(&record.principal, &record.id, "form:profile", None))
            .await
            .expect("take decline");
        assert_eq!(reported.map(|e| e.id), Some(declined));
    }
);

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
        assert!(events_of(&store, &older.id).await.is_empty(), "its events went with it");
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

fn catalogue(upstream: &str, tools: Value, listed_by: Option<&str>, listed_at: DateTime<Utc>) -> CatalogueRecord {
    CatalogueRecord {
        upstream: upstream.into(),
        digest: CatalogueRecord::digest_of(&tools),
        tools,
        listed_by: listed_by.map(|who| Principal::parse(who).expect("principal")),
        listed_at,
    }
}

fn search_tool(description: &str) -> Value {
    json!([{
        "name": "search",
        "description": description,
        "inputSchema": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
        "annotations": {"readOnlyHint": true},
    }])
}

backend_test!(
    /// A catalogue reads back as saved; saving it again unchanged is no change but records who
    /// listed it last and when; a changed one replaces it; every upstream's is listed.
    async fn upstream_catalogues_round_trip(backend: Backend) {
        let (_database, store) = open(backend).await;
        assert!(store.catalogues().await.expect("list").is_empty());
        assert!(store.catalogue("github").await.expect("load").is_none());

        let first = catalogue("github", search_tool("Search issues"), Some("Ada Lovelace"), now());
        assert!(
            store.save_catalogue(&first).await.expect("save"),
            "nothing was stored: a change"
        );
        assert_eq!(store.catalogue("github").await.expect("load"), Some(first.clone()));

        let later = now() + Duration::minutes(5);
        let relisted = catalogue("github", search_tool("Search issues"), None, later);
        assert_eq!(relisted.digest, first.digest);
        assert!(
            !store.save_catalogue(&relisted).await.expect("save again"),
            "same digest: no change"
        );
        let stored = store.catalogue("github").await.expect("load").expect("stored");
        assert_eq!(stored, relisted, "who listed it and when are updated anyway");

        let changed = catalogue(
            "github",
            search_tool("Search issues and pull requests"),
            Some("bob"),
            later,
        );
        assert_ne!(changed.digest, first.digest);
        assert!(store.save_catalogue(&changed).await.expect("save changed"));
        assert_eq!(store.catalogue("github").await.expect("load"), Some(changed.clone()));

        let notes = catalogue("notes", json!([]), None, now());
        assert!(store.save_catalogue(&notes).await.expect("save another"));
        assert_eq!(store.catalogues().await.expect("list"), vec![changed, notes]);
        assert!(store.catalogue("linear").await.expect("load").is_none());
    }
);

/// The next upstream id a catalogue subscriber receives.
async fn next_change(changes: &mut tokio::sync::broadcast::Receiver<String>) -> String {
    tokio::time::timeout(std::time::Duration::from_secs(10), changes.recv())
        .await
        .expect("a catalogue change in time")
        .expect("subscribed")
}

postgres_test!(
    /// A changed catalogue saved through one replica reaches the catalogue subscribers of another
    /// through its bus; an unchanged one announces nothing.
    async fn a_changed_catalogue_reaches_other_replicas() {
        let database = TestDatabase::new(Backend::Postgres).await;
        let saving = store::connect(&database.url, 2).await.expect("connect");
        saving.store.migrate().await.expect("migrate");
        let other = store::connect(&database.url, 2)
            .await
            .expect("connect the other replica");
        let bus = Arc::new(Bus::new(
            other.store.clone(),
            Arc::new(SessionCache::new(4)),
            Arc::new(ConnectionCache::new(4)),
            false,
        ));
        let mut changes = bus.subscribe_catalogues();
        let shutdown = tokio_util::sync::CancellationToken::new();
        let listening = tokio::spawn(events::listen_postgres(
            other.postgres.clone().expect("a PostgreSQL pool"),
            bus.clone(),
            Arc::new(gatehouse::metrics::Metrics::off()),
            shutdown.clone(),
        ));
        // Once listening, the bus asks for a full reload (it may have missed changes before).
        assert_eq!(next_change(&mut changes).await, EVERY_UPSTREAM);

        let store = &saving.store;
        let github = catalogue("github", search_tool("Search issues"), Some("alice"), now());
        assert!(store.save_catalogue(&github).await.expect("save"));
        assert_eq!(next_change(&mut changes).await, "github");
        let unchanged = catalogue("github", search_tool("Search issues"), Some("bob"), now());
        assert!(!store.save_catalogue(&unchanged).await.expect("save unchanged"));
        let notes = catalogue("notes", json!([]), None, now());
        assert!(store.save_catalogue(&notes).await.expect("save another"));
        assert_eq!(
            next_change(&mut changes).await,
            "notes",
            "the unchanged save announced nothing: the next notice is the one after it"
        );

        bus.catalogue_changed("local");
        assert_eq!(next_change(&mut changes).await, "local");
        shutdown.cancel();
        listening.await.expect("the listener ends");
    }
);
