//! Several gatehouse instances on one PostgreSQL database, as replicas behind a proxy.

mod common;

use std::time::Duration;

use common::{Backend, McpClient, SseStream, TestDatabase, TestServer, WAIT, eventually, next_notes, note, publish};
use reqwest::StatusCode;
use serde_json::json;
use sqlx::Connection;

/// Two replicas of one database, and a client whose session began on `a`.
struct Replicas {
    database: TestDatabase,
    a: TestServer,
    b: TestServer,
    client: McpClient,
}

async fn two_replicas() -> Replicas {
    let database = TestDatabase::new(Backend::Postgres).await;
    let a = TestServer::start(&database, "").await;
    let b = TestServer::start(&database, "").await;
    let mut client = a.client();
    client.initialize().await;
    Replicas { database, a, b, client }
}

impl Replicas {
    /// The session's stream opened on B, past its priming event; also that event's id.
    async fn stream_on_b(&self) -> (SseStream, String) {
        let mut stream = self.client.on(&self.b).open_stream(None).await;
        let priming = stream.next_event(WAIT).await.expect("priming");
        (stream, priming.id.expect("id"))
    }

    fn session(&self) -> String {
        self.client.session.clone().expect("session")
    }

    async fn stop(self) {
        self.a.stop().await;
        self.b.stop().await;
    }
}

postgres_test!(
    async fn an_event_appended_through_a_reaches_the_stream_on_b() {
        let r = two_replicas().await;
        let (mut stream, _) = r.stream_on_b().await;

        // Through the MCP path: the log level is set on A, the tool runs on A, the log event reaches B.
        r.client.call("logging/setLevel", json!({"level": "debug"})).await;
        r.client.call("tools/call", json!({"name": "whoami"})).await;
        let (event, message) = stream.next_message(WAIT).await.expect("log event on B");
        assert_eq!(message["params"]["data"]["tool"], "whoami");
        assert_eq!(event.id.as_deref(), Some("1"));

        // And B serves the session's requests too.
        assert_eq!(r.client.on(&r.b).call("ping", json!({})).await, json!({}));
        r.stop().await;
    }
);

postgres_test!(
    async fn a_client_resumes_on_a_restarted_replica_without_missing_events() {
        let r = two_replicas().await;
        let session = r.session();
        let (mut stream, mut last_id) = r.stream_on_b().await;
        for n in 1..=3 {
            publish(&r.a, &session, &note(n)).await;
        }
        let mut received = Vec::new();
        while received.len() < 3 {
            let (event, message) = stream.next_message(WAIT).await.expect("event before restart");
            last_id = event.id.expect("id");
            received.push(message["params"]["data"]["n"].as_i64().expect("n"));
        }

        // B goes down: its stream ends with a retry hint. Events keep coming through A meanwhile.
        let Replicas { database, a, b, client } = r;
        b.stop().await;
        while stream.next_event(WAIT).await.is_some() {}
        assert!(stream.ended);
        for n in 4..=6 {
            publish(&a, &session, &note(n)).await;
        }
        let b = TestServer::start(&database, "").await;
        let mut resumed = client.on(&b).open_stream(Some(&last_id)).await;
        publish(&a, &session, &note(7)).await;
        while received.len() < 7 {
            let (_, message) = resumed.next_message(WAIT).await.expect("event after restart");
            received.push(message["params"]["data"]["n"].as_i64().expect("n"));
        }
        assert_eq!(
            received,
            (1..=7).collect::<Vec<_>>(),
            "nothing missed, nothing repeated"
        );
        a.stop().await;
        b.stop().await;
    }
);

postgres_test!(
    async fn a_lost_bus_connection_is_re_established_without_skipping_events() {
        let r = two_replicas().await;
        let session = r.session();
        let (mut stream, _) = r.stream_on_b().await;

        let mut admin = sqlx::PgConnection::connect(&r.database.url).await.expect("connect");
        let killed: Vec<(bool,)> = sqlx::query_as(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'gatehouse-bus' AND datname = current_database()",
        )
        .fetch_all(&mut admin)
        .await
        .expect("terminate listeners");
        assert_eq!(killed.len(), 2, "both replicas' LISTEN connections were cut");
        // Appended during the gap, before B is listening again.
        for n in 1..=3 {
            publish(&r.a, &session, &note(n)).await;
        }
        let mut received = Vec::new();
        while let Some((_, message)) = stream.next_message(WAIT).await {
            received.push(message["params"]["data"]["n"].as_i64().expect("n"));
            if received.len() == 3 {
                break;
            }
        }
        assert_eq!(received, [1, 2, 3]);
        // Listening again: a new event arrives.
        publish(&r.a, &session, &note(4)).await;
        let (_, message) = stream.next_message(WAIT).await.expect("event after reconnect");
        assert_eq!(message["params"]["data"]["n"], 4);
        let ready = reqwest::get(format!("{}/readyz", r.b.base())).await.expect("readyz");
        assert_eq!(ready.status(), StatusCode::OK);
        r.stop().await;
    }
);

postgres_test!(
    async fn ending_or_changing_a_session_on_one_replica_is_seen_by_the_other() {
        let r = two_replicas().await;
        let on_b = r.client.on(&r.b);
        // B caches the session when it serves it.
        assert_eq!(on_b.call("ping", json!({})).await, json!({}));
        let (mut stream, _) = r.stream_on_b().await;

        // A log level set through A applies to calls served by B once B has dropped its cached
        // copy of the session; until then a call on B logs nothing, so call again until one does.
        r.client.call("logging/setLevel", json!({"level": "debug"})).await;
        let message = eventually("a debug log of a call served by B", async || {
            on_b.call("tools/call", json!({"name": "whoami"})).await;
            stream
                .next_message(Duration::from_millis(100))
                .await
                .map(|(_, message)| message)
        })
        .await;
        assert_eq!(message["params"]["level"], "debug");

        // Ended through A: B's stream closes and B refuses the session.
        assert_eq!(r.client.delete().await, StatusCode::NO_CONTENT);
        while stream.next_event(WAIT).await.is_some() {}
        assert!(stream.ended);
        assert_eq!(on_b.request("ping", json!({})).await.status, StatusCode::NOT_FOUND);
        r.stop().await;
    }
);

postgres_test!(
    async fn a_stream_resumed_on_b_replaces_the_stream_the_client_stopped_reading_on_a() {
        let r = two_replicas().await;
        let session = r.session();
        let mut stale = r.client.open_stream(None).await;
        let priming = stale.next_event(WAIT).await.expect("priming on A");
        // The client stops reading the stream on A, keeps its connection, and resumes on B.
        let mut resumed = r.client.on(&r.b).open_stream(priming.id.as_deref()).await;
        assert!(resumed.next_event(WAIT).await.is_some(), "priming on B");
        assert!(
            stale.next_message(WAIT).await.is_none(),
            "the stream on A carried nothing more"
        );
        assert!(stale.ended, "the stream on A ended");
        // Appended through A, where the replaced stream was: all of them go to B.
        for n in 1..=18 {
            publish(&r.a, &session, &note(n)).await;
        }
        assert_eq!(
            next_notes(&mut resumed, 18).await,
            (1..=18).collect::<Vec<_>>(),
            "each once, in order"
        );
        assert!(
            resumed.next_message(Duration::from_millis(500)).await.is_none(),
            "and nothing twice"
        );
        r.stop().await;
    }
);
