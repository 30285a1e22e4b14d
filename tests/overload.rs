//! Every database connection busy, as in a reconnect storm: a request that finds no connection
//! within the pool's acquire timeout is refused as an overload (503, `Retry-After`, "server
//! busy", counted as `busy`), not as an outage, and an idle stream whose read failed for the same
//! reason stays open and delivers what comes afterwards.
//!
//! PostgreSQL only: the pool is exhausted by a request that waits for a row lock an operator's
//! transaction holds, which outlasts the pool's acquire timeout there. On SQLite a write waits
//! for a lock no longer than the pool's acquire timeout, so the pool cannot be held that way.

mod common;

use common::{
    McpClient, TestDatabase, TestServer, WAIT, captured_logs, eventually, logged_text, next_notes, note, publish,
};
use reqwest::StatusCode;
use serde_json::json;
use sqlx::Connection;

/// One connection for the bus's LISTEN, one for everything else.
const ONE_WORKING_CONNECTION: &str = "[server]\nmetrics_bind = \"127.0.0.1:0\"\n[database]\nmax_connections = 2\n";

postgres_test!(
    /// The pool's working connection waits for a lock held elsewhere: a stream woken meanwhile
    /// fails its read and reads again later, a new session is refused as busy, and once the lock
    /// goes the stream delivers the next event.
    async fn an_idle_stream_outlasts_a_busy_pool_and_new_work_is_refused_as_overload() {
        captured_logs();
        let database = TestDatabase::new(common::Backend::Postgres).await;
        let server = TestServer::start(&database, ONE_WORKING_CONNECTION).await;
        let mut client = server.client();
        client.initialize().await;
        let session = client.session.clone().expect("session");
        let mut stream = client.open_stream(None).await;
        assert!(stream.next_event(WAIT).await.is_some(), "priming");

        // An operator's transaction locks the session's row (reads of it go on); storing a log
        // level waits for the lock, holding the pool's working connection.
        let mut operator = sqlx::PgConnection::connect(&database.url).await.expect("connect");
        sqlx::query("BEGIN").execute(&mut operator).await.expect("begin");
        sqlx::query("SELECT 1 FROM sessions WHERE id::text = $1 FOR UPDATE")
            .bind(&session)
            .execute(&mut operator)
            .await
            .expect("lock");
        let waiting = tokio::spawn({
            let client = client.clone();
            async move { client.request("logging/setLevel", json!({"level": "debug"})).await }
        });
        eventually("an update of the session's row waits for the lock", async || {
            let waiting: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'gatehouse' AND wait_event_type = 'Lock'",
            )
            .fetch_one(&mut operator)
            .await
            .expect("pg_stat_activity");
            (waiting == 1).then_some(())
        })
        .await;

        // The stream is woken and cannot read; a new client is refused as busy.
        server.state.bus.appended(&session.parse().expect("session id"));
        let newcomer = McpClient::new(&server.url);
        let initialize = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "overload", "version": "1"}}});
        let refused = newcomer.post_raw(&initialize, &[]).await;
        assert_eq!(refused.status, StatusCode::SERVICE_UNAVAILABLE, "{}", refused.body);
        assert_eq!(refused.headers["retry-after"], "1");
        assert_eq!(refused.body["error"]["code"], -32010, "{}", refused.body);
        assert_eq!(
            refused.body["error"]["message"], "server busy: too many requests at once, retry shortly",
            "an overload, not an outage"
        );
        eventually("the stream's read failed for want of a connection", async || {
            logged_text()
                .contains("no database connection to read the event log")
                .then_some(())
        })
        .await;
        let scraped = server.scrape().await;
        assert!(
            scraped.contains(r#"gatehouse_mcp_requests_total{method="initialize",outcome="busy"} 1"#),
            "{scraped}"
        );

        // The lock goes: the waiting request is answered (or, had the sessions' periodic use
        // update taken the connection first, refused as busy), and the stream, open all along,
        // delivers the next event.
        sqlx::query("COMMIT").execute(&mut operator).await.expect("commit");
        waiting.await.expect("the waiting request is answered");
        let seq = publish(&server, &session, &note(1)).await;
        assert_eq!(
            next_notes(&mut stream, 1).await,
            vec![1],
            "event {seq} on the same stream"
        );
        assert!(!stream.ended);
    }
);
