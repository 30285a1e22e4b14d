//! Graceful shutdown and readiness, each on PostgreSQL and on SQLite, against the real server.

mod common;

use std::time::Duration;

use common::{Backend, TestDatabase, TestServer, WAIT, eventually};
use reqwest::StatusCode;
use serde_json::{Value, json};
use sqlx::Connection;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Reads from `connection` until `text` has arrived; panics after [`WAIT`].
async fn read_until(connection: &mut TcpStream, text: &str) -> String {
    let mut received = Vec::new();
    let mut buffer = [0u8; 1024];
    while !String::from_utf8_lossy(&received).contains(text) {
        let read = tokio::time::timeout(WAIT, connection.read(&mut buffer))
            .await
            .expect("the server answers in time")
            .expect("read");
        assert!(
            read > 0,
            "the connection closed before {text:?}: {}",
            String::from_utf8_lossy(&received)
        );
        received.extend_from_slice(&buffer[..read]);
    }
    String::from_utf8_lossy(&received).into_owned()
}

backend_test!(
    async fn shutdown_refuses_new_connections_while_draining(backend: Backend) {
        let database = TestDatabase::new(backend).await;
        let server = TestServer::start(&database, "").await;
        let mut client = server.client();
        client.initialize().await;
        let mut stream = client.open_stream(None).await;
        assert!(stream.next_event(WAIT).await.is_some(), "priming");

        // An in-flight request whose body has not all arrived keeps the drain going. The server
        // answers `100 Continue` once the handler reads the body, so it is in flight for sure.
        let body = br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
        let mut slow = TcpStream::connect(server.addr).await.expect("connect");
        let head = format!(
            "POST /mcp HTTP/1.1\r\nHost: {}\r\nAccept: application/json, text/event-stream\r\n\
             Content-Type: application/json\r\nExpect: 100-continue\r\nContent-Length: {}\r\n\r\n",
            server.addr,
            body.len()
        );
        slow.write_all(head.as_bytes()).await.expect("write head");
        read_until(&mut slow, "100 Continue").await;
        slow.write_all(&body[..10]).await.expect("write part of the body");

        server.state.shutdown.cancel();
        let mut retry = None;
        while let Some(event) = stream.next_event(WAIT).await {
            retry = event.retry.or(retry);
        }
        assert_eq!(retry, Some(250), "the stream ends with the retry hint");
        // The timeout only guards against a connection that hangs in the backlog.
        eventually(
            "new connections are refused during the drain",
            async || match tokio::time::timeout(Duration::from_secs(1), TcpStream::connect(server.addr)).await {
                Ok(Err(error)) if error.kind() == std::io::ErrorKind::ConnectionRefused => Some(()),
                _ => None,
            },
        )
        .await;

        // The request in flight still gets its answer.
        slow.write_all(&body[10..]).await.expect("write the rest of the body");
        let answer = read_until(&mut slow, "\r\n\r\n").await;
        assert!(answer.contains("HTTP/1.1 "), "{answer}");
        server.stop().await;
    }
);

postgres_test!(
    async fn readiness_answers_quickly_while_the_database_hangs_or_the_bus_reconnects() {
        let database = TestDatabase::new(Backend::Postgres).await;
        let server = TestServer::start(&database, "").await;
        let readyz = format!("{}/readyz", server.base());
        let http = reqwest::Client::new();
        eventually("ready", async || {
            let ready = http.get(&readyz).send().await.expect("readyz");
            (ready.status() == StatusCode::OK).then_some(())
        })
        .await;
        // The timeout only guards against hanging: the probe answers within its own bound.
        let probe = async || {
            let answer = tokio::time::timeout(WAIT, http.get(&readyz).send())
                .await
                .expect("/readyz answers in time")
                .expect("readyz");
            assert_eq!(answer.status(), StatusCode::SERVICE_UNAVAILABLE);
            assert_eq!(answer.headers()["retry-after"], "1");
            answer.json::<Value>().await.expect("json")
        };

        // The database hangs: readiness's query waits on a lock held by another connection.
        let mut locker = sqlx::PgConnection::connect(&database.url).await.expect("connect");
        sqlx::query("BEGIN").execute(&mut locker).await.expect("begin");
        sqlx::query("LOCK TABLE _sqlx_migrations IN ACCESS EXCLUSIVE MODE")
            .execute(&mut locker)
            .await
            .expect("lock");
        let body = probe().await;
        assert_eq!(
            body,
            json!({"status": "not ready", "database": "unavailable", "bus": "ok"})
        );

        // The database refuses new connections and the bus lost its own: the bus's state is
        // known without asking the database.
        let name = url::Url::parse(&database.url)
            .expect("url")
            .path()
            .trim_start_matches('/')
            .to_owned();
        let mut admin = sqlx::PgConnection::connect(&common::postgres_admin_url().await.expect("admin url"))
            .await
            .expect("connect as admin");
        let alter = |allow: bool| format!("ALTER DATABASE \"{name}\" ALLOW_CONNECTIONS {allow}");
        sqlx::query(sqlx::AssertSqlSafe(alter(false)))
            .execute(&mut admin)
            .await
            .expect("refuse connections");
        sqlx::query(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'gatehouse-bus' AND datname = $1",
        )
        .bind(&name)
        .fetch_all(&mut admin)
        .await
        .expect("terminate the bus connection");
        eventually("the bus noticed", async || {
            (!server.state.bus.is_connected()).then_some(())
        })
        .await;
        let body = probe().await;
        assert_eq!(
            body,
            json!({"status": "not ready", "database": "unchecked", "bus": "reconnecting"})
        );

        sqlx::query(sqlx::AssertSqlSafe(alter(true)))
            .execute(&mut admin)
            .await
            .expect("allow connections again");
        sqlx::query("ROLLBACK").execute(&mut locker).await.expect("unlock");
        eventually("ready again", async || {
            let ready = http.get(&readyz).send().await.expect("readyz");
            (ready.status() == StatusCode::OK).then_some(())
        })
        .await;
        server.stop().await;
    }
);
