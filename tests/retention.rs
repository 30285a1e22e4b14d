//! Retention (`[retention]`). On both databases one sweep deletes exactly what is due — delivered
//! events past `retention.events`, elicitations that ended past
//! `retention.finished_elicitations` with their flows and answers, audit rows past
//! `retention.audit`, more of each than one batch holds — and nothing a pending flow needs. On
//! PostgreSQL two replicas sweep one at a time (the lease). The configuration's checks name
//! their keys.

mod common;

use std::time::Duration as StdDuration;

use chrono::{DateTime, Duration, Utc};
use common::records::{answer, elicitation, notification, now, open, session};
use common::{Backend, TestDatabase, TestServer, eventually, load_config, refusal};
use gatehouse::domain::{ElicitationId, Principal, SessionId};
use gatehouse::retention::{BATCH, LEASE_NAME, Periods, Retention, Swept};
use gatehouse::store::{
    AuditAction, AuditEntry, AuditQuery, ElicitationRecord, ElicitationStatus, Ending, Lease, OAuthFlowRecord, Store,
};
use serde_json::json;
use sqlx::Connection;

const SESSION_CAP: usize = 64;
const PENDING_CAP: usize = 32;
/// More rows than two batches hold.
const MANY: usize = BATCH * 2 + 500;

const HOUR: StdDuration = StdDuration::from_secs(3600);
const DAY: StdDuration = StdDuration::from_secs(24 * 3600);

fn periods() -> Periods {
    Periods {
        events: HOUR,
        finished_elicitations: DAY,
        audit: 30 * DAY,
    }
}

/// Runs one statement binding a session (`$1`), a time (`$2`) and a number (`$3`).
async fn run(database: &TestDatabase, sql: [&'static str; 2], session: &SessionId, at: DateTime<Utc>, n: i64) {
    let [postgres, sqlite] = sql;
    match database.backend {
        Backend::Postgres => {
            let mut conn = sqlx::PgConnection::connect(&database.url).await.expect("connect");
            sqlx::query(postgres)
                .bind(session.as_str())
                .bind(at)
                .bind(n)
                .execute(&mut conn)
                .await
                .expect("statement");
        }
        Backend::Sqlite => {
            let mut conn = sqlx::SqliteConnection::connect(&database.url).await.expect("connect");
            sqlx::query(sqlite)
                .bind(session.as_str())
                .bind(at.timestamp_millis())
                .bind(n)
                .execute(&mut conn)
                .await
                .expect("statement");
        }
    }
}

/// Moves every event of the session but number `keep` to `at`.
async fn age_events_but(database: &TestDatabase, session: &SessionId, keep: i64, at: DateTime<Utc>) {
    let sql = [
        "UPDATE session_events SET created_at = $2 WHERE session_id = $1 AND seq <> $3",
        "UPDATE session_events SET created_at = ?2 WHERE session_id = ?1 AND seq <> ?3",
    ];
    run(database, sql, session, at, keep).await;
}

/// Appends `n` events appended at `at` to the session's log (numbered from 1).
async fn old_events(database: &TestDatabase, session: &SessionId, at: DateTime<Utc>, n: usize) {
    let sql = [
        "INSERT INTO session_events (session_id, seq, message, created_at)
         SELECT $1::text, g, '{}'::jsonb, $2::timestamptz FROM generate_series(1, $3::bigint) g",
        "WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < ?3)
         INSERT INTO session_events (session_id, seq, message, created_at) SELECT ?1, n, '{}', ?2 FROM g",
    ];
    run(database, sql, session, at, i64::try_from(n).expect("count")).await;
}

fn asked_at(
    session: &gatehouse::store::SessionRecord,
    call: &str,
    at: DateTime<Utc>,
    ttl: Duration,
) -> ElicitationRecord {
    ElicitationRecord {
        created_at: at,
        expires_at: at + ttl,
        ..elicitation(session, "form:pay", Some(call))
    }
}

async fn insert(store: &std::sync::Arc<dyn Store>, asked: &ElicitationRecord) {
    store
        .insert_elicitation(asked, PENDING_CAP)
        .await
        .expect("insert")
        .expect("stored");
}

fn flow(of: &ElicitationId, state_hash: &str, expires_at: DateTime<Utc>) -> OAuthFlowRecord {
    OAuthFlowRecord {
        state_hash: state_hash.into(),
        elicitation_id: *of,
        principal: Principal::parse("alice").expect("principal"),
        provider: "github".into(),
        issuer: None,
        scopes: vec![],
        pkce_verifier: vec![1],
        browser_hash: "browser".into(),
        created_at: expires_at - Duration::minutes(10),
        expires_at,
        used_at: None,
    }
}

fn audit_entry(at: DateTime<Utc>) -> AuditEntry {
    AuditEntry {
        at,
        principal: Principal::parse("alice").expect("principal"),
        action: AuditAction::CallAllowed,
        subject: "whoami".into(),
        client_address: None,
        client_name: None,
        detail: json!({}),
    }
}

backend_test!(
    /// Delivered events older than `events` go, undelivered and recent ones stay; an ended
    /// session's events went with it; ended elicitations older than `finished_elicitations` go
    /// with their flows and answers, pending ones (even overdue, even asked long ago) keep theirs;
    /// audit rows older than `audit` go. Each in batches, more rows than two batches; the lease is
    /// released after the sweep, and a second sweep finds nothing.
    async fn one_sweep_deletes_exactly_what_is_due(backend: Backend) {
        let (database, store) = open(backend).await;
        let two_hours_ago = now() - Duration::hours(2);
        let ten_days_ago = now() - Duration::days(10);

        let live = session("alice");
        store.create_session(&live, SESSION_CAP).await.expect("create");
        for n in 1..=4 {
            store.append_event(&live.id, &json!({"n": n})).await.expect("append");
        }
        assert!(store.claim_delivery(&live.id, 0, 3).await.expect("written to a stream"));
        // Appended two hours ago: 1, 2 (delivered) and 4 (never written to a stream); 3 just now.
        age_events_but(&database, &live.id, 3, two_hours_ago).await;
        let busy = session("bob");
        store.create_session(&busy, SESSION_CAP).await.expect("create");
        old_events(&database, &busy.id, two_hours_ago, MANY).await;
        assert!(store.claim_delivery(&busy.id, 0, MANY as i64).await.expect("claim"));
        let ended = session("carol");
        store.create_session(&ended, SESSION_CAP).await.expect("create");
        store.append_event(&ended.id, &json!({"n": 1})).await.expect("append");
        assert!(store.delete_session(&ended.id).await.expect("end"));
        assert!(store.events_after(&ended.id, 0, 10).await.expect("events").is_none());
        assert_eq!(
            database
                .query_count("SELECT COUNT(*) FROM session_events WHERE session_id NOT IN (SELECT id FROM sessions)")
                .await,
            0,
            "an ended session's events go with it"
        );

        // Expired ten days ago, with its flow.
        let expired = asked_at(&live, "expired", ten_days_ago, Duration::minutes(10));
        insert(&store, &expired).await;
        store
            .insert_flow(&flow(&expired.id, "old-flow", expired.expires_at))
            .await
            .expect("flow");
        assert_eq!(store.expire_elicitations(now()).await.expect("expire").len(), 1);
        // Asked ten days ago and still pending (a long ttl), its sign-in under way.
        let pending = asked_at(&live, "pending", ten_days_ago, Duration::days(11));
        insert(&store, &pending).await;
        store
            .insert_flow(&flow(&pending.id, "pending-flow", now() + Duration::minutes(10)))
            .await
            .expect("flow");
        // Past its expiry ten days ago but not marked expired yet: still pending here.
        let overdue = asked_at(&live, "overdue", ten_days_ago, Duration::minutes(10));
        insert(&store, &overdue).await;
        // Answered ten days ago; no call took the answer.
        let answered = asked_at(&live, "answered", ten_days_ago, Duration::minutes(10));
        insert(&store, &answered).await;
        let given = answer(&answered, json!({"sure": true}), None);
        assert!(
            store
                .save_form_answer(&given, &notification(1), ten_days_ago)
                .await
                .expect("answer")
        );
        // Completed an hour ago: within its period.
        let recent = elicitation(&live, "form:pay", Some("recent"));
        insert(&store, &recent).await;
        let done = notification(2);
        let ending = Ending {
            elicitation: &recent.id,
            notification: &done,
            at: now() - Duration::hours(1),
        };
        assert!(
            store
                .finish_elicitation(ending, ElicitationStatus::Completed)
                .await
                .expect("finish")
        );

        let old: Vec<AuditEntry> = (0..MANY).map(|_| audit_entry(now() - Duration::days(40))).collect();
        store.append_audit(&old).await.expect("audit");
        let kept_audit = audit_entry(now() - Duration::days(20));
        store
            .append_audit(std::slice::from_ref(&kept_audit))
            .await
            .expect("audit");

        let retention = Retention::new(store.clone(), periods(), "replica-a".into());
        let swept = retention.sweep().await.expect("sweep").expect("the lease is free");
        assert_eq!(
            swept,
            Swept {
                events: 2 + MANY as u64,
                elicitations: 2,
                audit: MANY as u64,
            }
        );

        let left: Vec<i64> = store
            .events_after(&live.id, 0, 100)
            .await
            .expect("events")
            .expect("the live session")
            .iter()
            .map(|e| e.seq)
            .collect();
        assert_eq!(left, vec![3, 4, 5, 6], "recent, undelivered and the two completions");
        assert_eq!(database.query_count("SELECT COUNT(*) FROM session_events").await, 4);
        for gone in [&expired.id, &answered.id] {
            assert!(store.elicitation(gone).await.expect("load").is_none());
        }
        for kept in [&pending.id, &overdue.id, &recent.id] {
            assert!(store.elicitation(kept).await.expect("load").is_some());
        }
        assert!(store.flow("pending-flow").await.expect("flow").is_some());
        assert!(store.flow("old-flow").await.expect("flow").is_none());
        assert_eq!(database.query_count("SELECT COUNT(*) FROM form_answers").await, 0);
        let trail = store
            .audit(&AuditQuery {
                principal: None,
                since: None,
                limit: 10,
            })
            .await
            .expect("trail");
        assert_eq!(trail.len(), 1);
        assert_eq!(trail[0].entry.at, kept_audit.at);

        assert_eq!(database.query_count("SELECT COUNT(*) FROM leases").await, 0, "released");
        let again = retention.sweep().await.expect("sweep").expect("the lease is free");
        assert_eq!(again, Swept::default());
    }
);

const CONFIG: &str = "[retention]\nevents = \"1h\"\nfinished_elicitations = \"1d\"\naudit = \"30d\"\n";

postgres_test!(
    /// Two replicas on one PostgreSQL: the lease is taken by exactly one of them when both ask at
    /// once, renewed only by its holder, and free again once released or run out; while another
    /// holds it, neither replica's sweep deletes anything.
    async fn one_replica_sweeps_at_a_time() {
        let database = TestDatabase::new(Backend::Postgres).await;
        let a = TestServer::start(&database, CONFIG).await;
        let b = TestServer::start(&database, CONFIG).await;
        let lease = |name: &'static str, holder: &'static str, until: DateTime<Utc>| Lease {
            name,
            holder,
            now: Utc::now(),
            until,
        };
        let in_a_minute = || Utc::now() + Duration::minutes(1);

        for name in [
            "race-1", "race-2", "race-3", "race-4", "race-5", "race-6", "race-7", "race-8",
        ] {
            let (by_a, by_b) = tokio::join!(
                a.state.store.take_lease(lease(name, "a", in_a_minute())),
                b.state.store.take_lease(lease(name, "b", in_a_minute())),
            );
            let (by_a, by_b) = (by_a.expect("lease"), by_b.expect("lease"));
            assert_ne!(by_a, by_b, "{name}: exactly one replica holds it");
            let (holder, other) = if by_a { ("a", &b) } else { ("b", &a) };
            let store = if by_a { &a.state.store } else { &b.state.store };
            assert!(
                store
                    .take_lease(lease(name, holder, in_a_minute()))
                    .await
                    .expect("renew")
            );
            assert!(
                !other
                    .state
                    .store
                    .take_lease(lease(name, "x", in_a_minute()))
                    .await
                    .expect("lease")
            );
            store.release_lease(name, holder).await.expect("release");
            assert!(
                other
                    .state
                    .store
                    .take_lease(lease(name, "x", in_a_minute()))
                    .await
                    .expect("free again")
            );
        }

        // Something else holds the sweep's lease (once the replicas' own first sweeps are done),
        // and only then are there rows due: no replica's own sweep can have taken them.
        eventually("the retention lease was taken", async || {
            let taken = a
                .state
                .store
                .take_lease(lease(LEASE_NAME, "elsewhere", Utc::now() + Duration::hours(1)))
                .await
                .expect("lease");
            taken.then_some(())
        })
        .await;
        let due: Vec<AuditEntry> = (0..3).map(|_| audit_entry(Utc::now() - Duration::days(40))).collect();
        a.state.store.append_audit(&due).await.expect("audit");
        for replica in [&a, &b] {
            assert_eq!(replica.state.retention.sweep().await.expect("sweep"), None);
        }
        assert_eq!(database.query_count("SELECT COUNT(*) FROM audit").await, 3);

        // Its time runs out: the next replica to ask sweeps, and releases it for the other. (A
        // replica's own minute's sweep may come first on a slow machine: then it found them.)
        let ran_out = lease(LEASE_NAME, "elsewhere", Utc::now() - Duration::seconds(1));
        assert!(a.state.store.take_lease(ran_out).await.expect("lease"));
        let by_a = a.sweep_retention().await.audit;
        assert!(by_a == 3 || by_a == 0, "a swept {by_a}");
        assert_eq!(b.sweep_retention().await, Swept::default());
        assert_eq!(database.query_count("SELECT COUNT(*) FROM audit").await, 0);
        a.stop().await;
        b.stop().await;
    }
);

#[test]
fn retention_is_configured_naming_its_keys() {
    let defaults = load_config("", &[]).expect("defaults");
    assert_eq!(defaults.retention.events, 7 * DAY);
    assert_eq!(defaults.finished_elicitations_retention(), 7 * DAY);
    assert_eq!(defaults.retention.audit, 365 * DAY);

    let set = load_config(
        "[retention]\nevents = \"2d\"\nfinished_elicitations = \"30d\"\naudit = \"90d\"\n",
        &[],
    )
    .expect("set");
    assert_eq!(set.retention.events, 2 * DAY);
    assert_eq!(set.finished_elicitations_retention(), 30 * DAY);
    assert_eq!(set.retention.audit, 90 * DAY);

    let old = load_config("[elicitation]\nretention = \"3d\"\n", &[]).expect("the old key");
    assert_eq!(old.finished_elicitations_retention(), 3 * DAY);
    let both = "[elicitation]\nretention = \"3d\"\n[retention]\nfinished_elicitations = \"72h\"\n";
    assert_eq!(
        load_config(both, &[]).expect("equal").finished_elicitations_retention(),
        3 * DAY
    );
    let (key, message) = refusal(
        "[elicitation]\nretention = \"3d\"\n[retention]\nfinished_elicitations = \"30d\"\n",
        &[],
    );
    assert_eq!(key, "retention.finished_elicitations");
    assert!(message.contains("elicitation.retention"), "{message}");

    for key in ["events", "finished_elicitations", "audit"] {
        for value in ["10m", "200y", "soon", "7"] {
            let file = format!("[retention]\n{key} = \"{value}\"\n");
            assert_eq!(refusal(&file, &[]).0, format!("retention.{key}"), "{file}");
        }
    }
    assert_eq!(
        refusal("[elicitation]\nretention = \"10m\"\n", &[]).0,
        "elicitation.retention"
    );

    let env = load_config(
        "[retention]\nevents = \"2d\"\n",
        &[
            ("GATEHOUSE_RETENTION__EVENTS", "12h"),
            ("GATEHOUSE_RETENTION__FINISHED_ELICITATIONS", "14d"),
            ("GATEHOUSE_RETENTION__AUDIT", "100y"),
        ],
    )
    .expect("environment overrides");
    assert_eq!(env.retention.events, 12 * HOUR);
    assert_eq!(env.finished_elicitations_retention(), 14 * DAY);
    assert_eq!(env.retention.audit, StdDuration::from_secs(100 * 31_557_600));
}
