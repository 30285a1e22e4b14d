//! Form values and call-scoped answers, the elicitations they complete, and the migration that
//! brought forms in.

use super::*;

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
            let migrator = &*gatehouse::store::migrations::POSTGRES;
            migrator.run_to(version, &pool).await.expect("old migrations");
            sqlx::raw_sql(script).execute(&pool).await.expect("old rows");
        }
        Backend::Sqlite => {
            let pool = sqlx::SqlitePool::connect(&database.url).await.expect("connect");
            let migrator = &*gatehouse::store::migrations::SQLITE;
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
