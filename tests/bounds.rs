//! What a client or a model can make the server store or hold is bounded, against the real server
//! on PostgreSQL and SQLite: client info and capabilities at `initialize`, live sessions and
//! pending elicitations per principal, rendered confirmation descriptions, and how long ended
//! elicitations are kept.

mod common;

use common::{
    Backend, Browser, McpClient, Reply, TestDatabase, TestServer, WAIT, captured_logs, description, elicitations,
    logged_text, text, url_of,
};
use gatehouse::domain::SessionId;
use reqwest::StatusCode;
use serde_json::{Value, json};

/// A call-scoped confirmation showing the call's arguments. Its upstream is never reached: no
/// test here confirms.
const PAY: &str = include_str!("fixtures/pay_confirmation.toml");

async fn setup(backend: Backend, toml: &str) -> (TestDatabase, TestServer) {
    captured_logs();
    let database = TestDatabase::new(backend).await;
    let server = TestServer::start(&database, toml).await;
    (database, server)
}

fn initialize(client_info: Value, capabilities: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": capabilities, "clientInfo": client_info}})
}

async fn pay(client: &McpClient, payee: &str, amount: u32) -> Reply {
    client
        .request(
            "tools/call",
            json!({"name": "pay", "arguments": {"payee": payee, "amount": amount}}),
        )
        .await
}

backend_test!(
    /// Of a ~930 KB `clientInfo`, only the name, title and version are kept (each cut visibly) and
    /// logged; oversized capabilities are refused with -32602 and nothing is stored.
    async fn oversized_client_info_is_cut_and_oversized_capabilities_refused(backend: Backend) {
        let (database, server) = setup(backend, "").await;
        let icon = format!("data:image/png;base64,{}", "QkFMTE9PTg".repeat(93_000));
        let name = format!("huge-client-{}", "n".repeat(1000));
        let info = json!({"name": name, "version": "1.0", "description": "d".repeat(1000),
            "icons": [{"src": icon, "mimeType": "image/png"}]});
        let mut client = server.client();
        let reply = client
            .post_raw(&initialize(info, json!({"elicitation": {"url": {}}})), &[])
            .await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
        client.session = Some(reply.headers["mcp-session-id"].to_str().expect("ascii").to_owned());
        let whoami = client.call("tools/call", json!({"name": "whoami"})).await;
        let stored = &whoami["structuredContent"]["session"]["client"];
        let kept = stored["name"].as_str().expect("the name is kept");
        assert!(
            kept.starts_with("huge-client-nnn") && kept.ends_with('…') && kept.len() <= 256,
            "{kept}"
        );
        assert_eq!(stored["version"], "1.0");
        assert_eq!(stored.as_object().map(|o| o.len()), Some(2), "{stored}");
        let everything = database.everything_stored().await;
        assert!(everything.len() < 4096, "{} bytes stored", everything.len());
        assert!(
            !logged_text().contains("QkFMTE9PTg"),
            "the client info is not logged whole"
        );

        let capabilities = json!({"elicitation": {"url": {}}, "experimental": {"x": "y".repeat(20_000)}});
        let refused = server
            .client()
            .post_raw(&initialize(json!({"name": "c", "version": "1"}), capabilities), &[])
            .await;
        assert_eq!(refused.status, StatusCode::OK);
        assert_eq!(refused.body["error"]["code"], -32602, "{}", refused.body);
        assert!(
            refused.body["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("capabilities")),
            "{}",
            refused.body
        );
        assert!(refused.headers.get("mcp-session-id").is_none());
        assert_eq!(database.query_count("SELECT COUNT(*) FROM sessions").await, 1);
        server.stop().await;
    }
);

backend_test!(
    /// With a cap of 3 sessions, a fourth `initialize` ends the principal's least recently used
    /// session (not the oldest one, which was used lately): its stream ends and its id gets 404;
    /// concurrent initializes leave exactly the cap.
    async fn the_session_beyond_the_cap_ends_the_least_recently_used(backend: Backend) {
        let (database, server) = setup(backend, "[mcp]\nmax_sessions_per_principal = 3\n").await;
        let mut clients = Vec::new();
        for _ in 0..3 {
            let mut client = server.client();
            client.initialize().await;
            clients.push(client);
        }
        // The oldest and the newest were used lately (use is written in batches; here at once).
        let id = |client: &McpClient| -> SessionId { client.session.clone().expect("session").parse().expect("id") };
        server
            .state
            .store
            .touch_sessions(
                &[id(&clients[0]), id(&clients[2])],
                chrono::Utc::now() + chrono::Duration::minutes(1),
            )
            .await
            .expect("touch");
        let mut stream = clients[1].open_stream(None).await;
        let mut newest = server.client();
        newest.initialize().await;
        while stream.next_event(WAIT).await.is_some() {}
        assert!(stream.ended, "the ended session's stream closes");
        let gone = clients[1].request("ping", json!({})).await;
        assert_eq!(gone.status, StatusCode::NOT_FOUND, "{}", gone.body);
        for kept in [&clients[0], &clients[2], &newest] {
            assert_eq!(kept.request("ping", json!({})).await.status, StatusCode::OK);
        }
        assert_eq!(database.query_count("SELECT COUNT(*) FROM sessions").await, 3);

        // Only the initialize itself: a concurrent one may end a new session before it is used.
        let tasks: Vec<_> = (0..10)
            .map(|_| {
                let client = server.client();
                let init = initialize(json!({"name": "c", "version": "1"}), json!({}));
                tokio::spawn(async move { client.post_raw(&init, &[]).await.status })
            })
            .collect();
        for task in tasks {
            assert_eq!(task.await.expect("join"), StatusCode::OK);
        }
        assert_eq!(database.query_count("SELECT COUNT(*) FROM sessions").await, 3);
        server.stop().await;
    }
);

backend_test!(
    /// With a cap of 2 pending elicitations, a call that would ask for a third gets a tool error
    /// and nothing is stored; a call already asked is still answered with its elicitation; once
    /// the pending ones end, calls are asked again.
    async fn pending_elicitations_beyond_the_cap_are_refused(backend: Backend) {
        let toml = format!("[elicitation]\nmax_pending_per_principal = 2\n{PAY}");
        let (database, server) = setup(backend, &toml).await;
        let mut client = server.client();
        client.initialize().await;
        let first = elicitations(&pay(&client, "Alice", 1).await).remove(0);
        elicitations(&pay(&client, "Alice", 2).await);
        let refused = pay(&client, "Alice", 3).await;
        let result = &refused.body["result"];
        assert_eq!(result["isError"], true, "{}", refused.body);
        assert!(text(result).contains("2 requests waiting"), "{}", text(result));
        assert_eq!(database.query_count("SELECT COUNT(*) FROM elicitations").await, 2);
        let again = elicitations(&pay(&client, "Alice", 1).await).remove(0);
        assert_eq!(
            again["elicitationId"], first["elicitationId"],
            "an ask already pending is reused"
        );

        database.expire_elicitations().await;
        elicitations(&pay(&client, "Alice", 3).await);
        server.stop().await;
    }
);

backend_test!(
    /// A confirmation rendering huge arguments is stored and shown cut to 16 KiB, visibly.
    async fn rendered_descriptions_are_stored_bounded(backend: Backend) {
        let (database, server) = setup(backend, PAY).await;
        let mut client = server.client();
        client.initialize().await;
        let payee = "é".repeat(100_000);
        let elicitation = elicitations(&pay(&client, &payee, 5).await).remove(0);
        let page = Browser::new().get(&url_of(&elicitation)).await;
        assert_eq!(page.status, StatusCode::OK);
        let shown = description(&page.body);
        assert!(
            shown.starts_with("Pay 5 EUR to éé") && shown.ends_with("é…"),
            "cut visibly"
        );
        assert!(shown.len() <= 16 * 1024, "{} bytes", shown.len());
        assert!(database.everything_stored().await.len() < 20 * 1024);
        server.stop().await;
    }
);

backend_test!(
    /// The retention sweep deletes an elicitation that ended longer than `elicitation.retention`
    /// (the old name of `retention.finished_elicitations`) ago; its link then answers like an
    /// unknown one.
    async fn ended_elicitations_are_deleted_after_the_retention_period(backend: Backend) {
        let toml = format!("[elicitation]\nretention = \"1h\"\n{PAY}");
        let (database, server) = setup(backend, &toml).await;
        let mut client = server.client();
        client.initialize().await;
        let old = elicitations(&pay(&client, "Alice", 1).await).remove(0);
        let recent = elicitations(&pay(&client, "Alice", 2).await).remove(0);
        age(&database, old["elicitationId"].as_str().expect("id")).await;
        server.state.gate.sweep().await.expect("expire");
        server.sweep_retention().await;
        assert_eq!(database.query_count("SELECT COUNT(*) FROM elicitations").await, 1);
        assert_eq!(Browser::new().get(&url_of(&old)).await.status, StatusCode::NOT_FOUND);
        assert_eq!(Browser::new().get(&url_of(&recent)).await.status, StatusCode::OK);
        server.stop().await;
    }
);

/// Moves an elicitation's life two hours into the past.
async fn age(database: &TestDatabase, id: &str) {
    use sqlx::Connection;
    match database.backend {
        Backend::Postgres => {
            let mut conn = sqlx::PgConnection::connect(&database.url).await.expect("connect");
            sqlx::query(
                "UPDATE elicitations SET created_at = now() - interval '3 hours',
                 expires_at = now() - interval '2 hours' WHERE id = $1",
            )
            .bind(id)
            .execute(&mut conn)
            .await
            .expect("update");
        }
        Backend::Sqlite => {
            let mut conn = sqlx::SqliteConnection::connect(&database.url).await.expect("connect");
            let hours_ago = |hours: i64| (chrono::Utc::now() - chrono::Duration::hours(hours)).timestamp_millis();
            sqlx::query("UPDATE elicitations SET created_at = ?2, expires_at = ?3 WHERE id = ?1")
                .bind(id)
                .bind(hours_ago(3))
                .bind(hours_ago(2))
                .execute(&mut conn)
                .await
                .expect("update");
        }
    }
}

postgres_test!(
    /// The cap holds across replicas: a session that B serves (cached, with a stream open there)
    /// ends when one more `initialize` reaches A; B's stream closes and B answers its id with 404.
    async fn a_session_ended_by_the_cap_on_one_replica_ends_on_the_others() {
        let database = TestDatabase::new(Backend::Postgres).await;
        let cap = "[mcp]\nmax_sessions_per_principal = 1\n";
        let a = TestServer::start(&database, cap).await;
        let b = TestServer::start(&database, cap).await;
        let mut first = a.client();
        first.initialize().await;
        let on_b = first.on(&b);
        assert_eq!(on_b.request("ping", json!({})).await.status, StatusCode::OK);
        let mut stream = on_b.open_stream(None).await;
        let mut second = a.client();
        second.initialize().await;
        while stream.next_event(WAIT).await.is_some() {}
        assert!(stream.ended, "the stream on B closes");
        assert_eq!(on_b.request("ping", json!({})).await.status, StatusCode::NOT_FOUND);
        assert_eq!(second.on(&b).request("ping", json!({})).await.status, StatusCode::OK);
        a.stop().await;
        b.stop().await;
    }
);
