//! Streamable HTTP transport rules, each on PostgreSQL and on SQLite, against the real server.

mod common;

use std::time::Duration;

use common::{Backend, McpClient, TestDatabase, TestServer, WAIT, eventually, next_notes, note, publish, text};
use reqwest::StatusCode;
use serde_json::{Value, json};

async fn setup(backend: Backend, toml: &str) -> (TestDatabase, TestServer) {
    let database = TestDatabase::new(backend).await;
    let server = TestServer::start(&database, toml).await;
    (database, server)
}

async fn session_count(database: &TestDatabase) -> i64 {
    database.query_count("SELECT COUNT(*) FROM sessions").await
}

backend_test!(
    async fn initialize_negotiates_and_persists_the_session(backend: Backend) {
        let (database, server) = setup(backend, "").await;
        for (asked, expected) in [
            ("2025-11-25", "2025-11-25"),
            ("2025-06-18", "2025-06-18"),
            ("2025-03-26", "2025-03-26"),
            ("2024-01-01", "2025-11-25"),
        ] {
            let mut client = server.client();
            let reply = client.initialize_with(asked, json!({"elicitation": {"url": {}}})).await;
            let result = &reply.body["result"];
            assert_eq!(result["protocolVersion"], expected);
            assert_eq!(result["capabilities"]["logging"], json!({}));
            assert!(result["capabilities"]["tools"].is_object());
            assert_eq!(result["serverInfo"]["name"], "gatehouse");
            assert!(result["instructions"].as_str().is_some_and(|i| i.contains("-32042")));
            let session = client.session.clone().expect("session");
            assert_eq!(session.len(), 43);
            assert!(session.bytes().all(|b| (0x21..=0x7e).contains(&b)), "visible ASCII");
        }
        assert_eq!(session_count(&database).await, 4);
        let stored = database
            .query_count("SELECT COUNT(*) FROM sessions WHERE principal = 'local' AND protocol_version = '2025-06-18'")
            .await;
        assert_eq!(stored, 1);
        // Client info and capabilities are kept, and whoami reports them back.
        let mut client = server.client();
        client.initialize().await;
        let whoami = client.call("tools/call", json!({"name": "whoami"})).await;
        assert_eq!(whoami["structuredContent"]["principal"], "local");
        assert_eq!(
            whoami["structuredContent"]["session"]["client"]["name"],
            "gatehouse-tests"
        );
        server.stop().await;
    }
);

backend_test!(
    async fn initialize_with_bad_params_stores_nothing(backend: Backend) {
        let (database, server) = setup(backend, "").await;
        let client = server.client();
        for params in [
            json!({}),
            json!({"protocolVersion": 5}),
            json!({"protocolVersion": "2025-11-25", "capabilities": []}),
        ] {
            let reply = client
                .post_raw(
                    &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params}),
                    &[],
                )
                .await;
            assert_eq!(reply.body["error"]["code"], -32602, "{}", reply.body);
            assert!(reply.headers.get("mcp-session-id").is_none());
        }
        let notification = client
            .post_raw(&json!({"jsonrpc": "2.0", "method": "initialize"}), &[])
            .await;
        assert_eq!(notification.status, StatusCode::BAD_REQUEST);
        assert_eq!(session_count(&database).await, 0);
        server.stop().await;
    }
);

backend_test!(
    async fn session_header_rules(backend: Backend) {
        let (_database, server) = setup(backend, "").await;
        let mut client = server.client();
        client.initialize().await;
        let ping = json!({"jsonrpc": "2.0", "id": 9, "method": "ping"});

        let missing = client.post_raw(&ping, &[("mcp-session-id", "")]).await;
        assert_eq!(missing.status, StatusCode::BAD_REQUEST);
        assert_eq!(missing.body["error"]["code"], -32600);
        for bad in ["not-a-session", "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", "🦀"] {
            let reply = client.post_raw(&ping, &[("mcp-session-id", bad)]).await;
            assert_eq!(reply.status, StatusCode::NOT_FOUND, "{bad}");
        }
        let reinitialize = client
            .post_raw(
                &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25"}}),
                &[],
            )
            .await;
        assert_eq!(reinitialize.status, StatusCode::BAD_REQUEST);
        assert_eq!(reinitialize.body["id"], 1);

        assert_eq!(client.call("ping", json!({})).await, json!({}));
        assert_eq!(client.delete().await, StatusCode::NO_CONTENT);
        assert_eq!(client.request("ping", json!({})).await.status, StatusCode::NOT_FOUND);
        assert_eq!(client.delete().await, StatusCode::NOT_FOUND);
        server.stop().await;
    }
);

backend_test!(
    async fn notifications_and_responses_get_202_without_body(backend: Backend) {
        let (_database, server) = setup(backend, "").await;
        let mut client = server.client();
        client.initialize().await;
        for message in [
            json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 3}}),
            json!({"jsonrpc": "2.0", "method": "notifications/whatever"}),
            json!({"jsonrpc": "2.0", "id": "s-1", "result": {"action": "accept"}}),
            json!({"jsonrpc": "2.0", "id": 4, "error": {"code": -1, "message": "no"}}),
        ] {
            let reply = client.post_raw(&message, &[]).await;
            assert_eq!(reply.status, StatusCode::ACCEPTED, "{message}");
            assert_eq!(reply.body, Value::Null);
        }
        server.stop().await;
    }
);

backend_test!(
    async fn accept_and_content_type_are_checked(backend: Backend) {
        let (database, server) = setup(backend, "").await;
        let mut client = server.client();
        client.initialize().await;
        let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"});
        assert_eq!(
            client.post_raw(&ping, &[("accept", "application/json")]).await.status,
            StatusCode::NOT_ACCEPTABLE
        );
        assert_eq!(
            client.post_raw(&ping, &[("accept", "text/event-stream")]).await.status,
            StatusCode::NOT_ACCEPTABLE
        );
        assert_eq!(
            client.post_raw(&ping, &[("accept", "text/html")]).await.status,
            StatusCode::NOT_ACCEPTABLE
        );
        assert_eq!(
            client.post_raw(&ping, &[("accept", "*/*")]).await.status,
            StatusCode::OK
        );
        let wrong_type = client.post_raw(&ping, &[("content-type", "text/plain")]).await;
        assert_eq!(wrong_type.status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
        assert_eq!(
            client
                .post_raw(&ping, &[("content-type", "application/json; charset=utf-8")])
                .await
                .status,
            StatusCode::OK
        );
        let before = session_count(&database).await;
        let init =
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25"}});
        assert_eq!(
            McpClient::new(&server.url)
                .post_raw(&init, &[("accept", "application/json")])
                .await
                .status,
            StatusCode::NOT_ACCEPTABLE
        );
        assert_eq!(
            session_count(&database).await,
            before,
            "a refused initialize stores nothing"
        );

        let get = client
            .http
            .get(&server.url)
            .header("accept", "application/json")
            .header("mcp-session-id", client.session.clone().expect("session"))
            .send()
            .await
            .expect("GET");
        assert_eq!(get.status(), StatusCode::NOT_ACCEPTABLE);
        let put = client.http.put(&server.url).send().await.expect("PUT");
        assert_eq!(put.status(), StatusCode::METHOD_NOT_ALLOWED);
        server.stop().await;
    }
);

backend_test!(
    async fn protocol_version_header_is_checked(backend: Backend) {
        let (_database, server) = setup(backend, "").await;
        let mut client = server.client();
        client.initialize().await;
        let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"});
        let unsupported = client.post_raw(&ping, &[("mcp-protocol-version", "2099-01-01")]).await;
        assert_eq!(unsupported.status, StatusCode::BAD_REQUEST);
        assert!(
            unsupported.body["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("2025-11-25"))
        );
        // Another supported version and no header at all are accepted (the conformance suite does both).
        assert_eq!(
            client
                .post_raw(&ping, &[("mcp-protocol-version", "2025-03-26")])
                .await
                .status,
            StatusCode::OK
        );
        assert_eq!(
            client.post_raw(&ping, &[("mcp-protocol-version", "")]).await.status,
            StatusCode::OK
        );
        let get = client
            .http
            .get(&server.url)
            .header("accept", "text/event-stream")
            .header("mcp-session-id", client.session.clone().expect("session"))
            .header("mcp-protocol-version", "1.0")
            .send()
            .await
            .expect("GET");
        assert_eq!(get.status(), StatusCode::BAD_REQUEST);
        server.stop().await;
    }
);

backend_test!(
    async fn origin_and_host_are_checked(backend: Backend) {
        let (database, server) = setup(backend, "[server]\nallowed_origins = [\"https://inspector.example\"]\n").await;
        let client = server.client();
        let init =
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25"}});
        let port = server.addr.port();
        for (origin, allowed) in [
            ("http://evil.example", false),
            ("null", false),
            (&format!("http://127.0.0.1:{}", port + 1) as &str, false),
            (&format!("http://127.0.0.1:{port}"), true),
            (&format!("http://localhost:{port}"), true),
            ("https://inspector.example", true),
        ] {
            let reply = client.post_raw(&init, &[("origin", origin)]).await;
            let expected = if allowed { StatusCode::OK } else { StatusCode::FORBIDDEN };
            assert_eq!(reply.status, expected, "origin {origin}: {}", reply.body);
        }
        assert_eq!(session_count(&database).await, 3, "refused requests store nothing");
        for (host, allowed) in [
            ("evil.example", false),
            ("evil.example:80", false),
            (&format!("localhost:{port}") as &str, true),
            (&format!("[::1]:{port}"), true),
            (&format!("127.0.0.1:{port}"), true),
        ] {
            let reply = client.post_raw(&init, &[("host", host)]).await;
            let expected = if allowed { StatusCode::OK } else { StatusCode::FORBIDDEN };
            assert_eq!(reply.status, expected, "host {host}");
        }
        server.stop().await;
    }
);

backend_test!(
    async fn malformed_bodies_get_their_errors(backend: Backend) {
        let (database, server) = setup(backend, "[server]\nmax_request_bytes = 4096\n").await;
        let mut client = server.client();
        client.initialize().await;
        let sessions = session_count(&database).await;

        let truncated = client
            .post_bytes(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"meth".to_vec(), &[])
            .await;
        assert_eq!(
            (truncated.status, truncated.body["error"]["code"].clone()),
            (StatusCode::BAD_REQUEST, json!(-32700))
        );
        assert_eq!(truncated.body["id"], Value::Null);
        let not_utf8 = client.post_bytes(vec![0xff, 0xfe, 0x00], &[]).await;
        assert_eq!(not_utf8.body["error"]["code"], -32700);
        for (body, id) in [
            (json!({"jsonrpc": "1.0", "id": 5, "method": "ping"}), json!(5)),
            (json!({"id": 6, "method": "ping"}), json!(6)),
            (json!({"jsonrpc": "2.0", "id": 7, "method": 42}), json!(7)),
            (
                json!({"jsonrpc": "2.0", "id": 8, "method": "ping", "params": "x"}),
                json!(8),
            ),
            (json!({"jsonrpc": "2.0", "id": {"a": 1}, "method": "ping"}), Value::Null),
            (json!("ping"), Value::Null),
            (json!(17), Value::Null),
        ] {
            let reply = client.post_raw(&body, &[]).await;
            assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{body}");
            assert_eq!(reply.body["error"]["code"], -32600, "{body}");
            assert_eq!(reply.body["id"], id, "{body}");
        }
        let batch = json!([{"jsonrpc": "2.0", "id": 1, "method": "ping"}]);
        let refused = client.post_raw(&batch, &[]).await;
        assert_eq!(refused.status, StatusCode::BAD_REQUEST);
        assert!(
            refused.body["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("batch"))
        );
        assert_eq!(client.post_raw(&json!([]), &[]).await.status, StatusCode::BAD_REQUEST);

        let oversized = client
            .post_bytes(format!("{{\"pad\":\"{}\"}}", "x".repeat(8192)).into_bytes(), &[])
            .await;
        assert_eq!(oversized.status, StatusCode::PAYLOAD_TOO_LARGE);
        let big_init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "clientInfo": {"name": "x".repeat(8192)}}});
        assert_eq!(
            McpClient::new(&server.url).post_raw(&big_init, &[]).await.status,
            StatusCode::PAYLOAD_TOO_LARGE
        );

        assert_eq!(session_count(&database).await, sessions, "nothing half-written");
        assert_eq!(
            client.call("ping", json!({})).await,
            json!({}),
            "the server keeps serving"
        );
        server.stop().await;
    }
);

backend_test!(
    async fn batches_work_on_2025_03_26_only(backend: Backend) {
        let (_database, server) = setup(backend, "").await;
        let mut old = server.client();
        old.initialize_with("2025-03-26", json!({})).await;
        let batch = json!([
            {"jsonrpc": "2.0", "id": 1, "method": "ping"},
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {"jsonrpc": "2.0", "id": 2, "method": "nope"},
            {"jsonrpc": "1.0", "id": 3, "method": "ping"},
            {"jsonrpc": "2.0", "id": 4, "method": "initialize", "params": {"protocolVersion": "2025-03-26"}}
        ]);
        let reply = old.post_raw(&batch, &[]).await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
        let responses = reply.body.as_array().expect("array of responses");
        assert_eq!(responses.len(), 4);
        assert_eq!(responses[0], json!({"jsonrpc": "2.0", "id": 1, "result": {}}));
        assert_eq!(responses[1]["error"]["code"], -32601);
        assert_eq!(responses[2]["error"]["code"], -32600);
        assert_eq!(responses[3]["error"]["code"], -32600);
        let only_notes = json!([{"jsonrpc": "2.0", "method": "notifications/initialized"}]);
        assert_eq!(old.post_raw(&only_notes, &[]).await.status, StatusCode::ACCEPTED);
        // A 2025-03-26 session that claims a newer version in its header is held to the newer rules.
        assert_eq!(
            old.post_raw(&batch, &[("mcp-protocol-version", "2025-06-18")])
                .await
                .status,
            StatusCode::BAD_REQUEST
        );

        let mut new = server.client();
        new.initialize_with("2025-06-18", json!({})).await;
        assert_eq!(new.post_raw(&batch, &[]).await.status, StatusCode::BAD_REQUEST);
        assert_eq!(
            new.post_raw(&batch, &[("mcp-protocol-version", "2025-03-26")])
                .await
                .status,
            StatusCode::BAD_REQUEST
        );
        server.stop().await;
    }
);

backend_test!(
    async fn methods_answer_and_fail_as_specified(backend: Backend) {
        let (_database, server) = setup(backend, "").await;
        let mut client = server.client();
        client.initialize().await;
        assert_eq!(client.call("ping", json!({})).await, json!({}));
        let unknown = client.request("nothing/here", json!({})).await;
        assert_eq!(
            (unknown.status, unknown.body["error"]["code"].clone()),
            (StatusCode::OK, json!(-32601))
        );
        // Without upstreams there is nothing to list, and nothing to read.
        assert_eq!(client.call("resources/list", json!({})).await, json!({"resources": []}));
        let read = client.request("resources/read", json!({"uri": "demo://x"})).await;
        assert_eq!(read.body["error"]["code"], -32002, "{}", read.body);
        let no_tool = client.request("tools/call", json!({"name": "nope"})).await;
        assert_eq!(no_tool.body["error"]["code"], -32602);
        let no_name = client.request("tools/call", json!({"arguments": {}})).await;
        assert_eq!(no_name.body["error"]["code"], -32602);
        let bad_args = client
            .request("tools/call", json!({"name": "whoami", "arguments": [1]}))
            .await;
        assert_eq!(bad_args.body["error"]["code"], -32602);
        let bad_level = client.request("logging/setLevel", json!({"level": "loud"})).await;
        assert_eq!(bad_level.body["error"]["code"], -32602);
        assert_eq!(
            client.call("logging/setLevel", json!({"level": "warning"})).await,
            json!({})
        );
        server.stop().await;
    }
);

const THREE_TOOLS: &str = include_str!("fixtures/three_tools.toml");

backend_test!(
    async fn tools_list_paginates_with_cursors(backend: Backend) {
        let (_database, server) = setup(backend, THREE_TOOLS).await;
        let mut client = server.client();
        client.initialize().await;
        let mut names = Vec::new();
        let mut cursor: Option<String> = None;
        let mut pages = 0;
        loop {
            let params = cursor.as_ref().map_or(json!({}), |c| json!({"cursor": c}));
            let page = client.call("tools/list", params).await;
            pages += 1;
            for tool in page["tools"].as_array().expect("tools") {
                assert!(tool["description"].as_str().is_some_and(|d| !d.is_empty()));
                assert_eq!(tool["inputSchema"]["type"], "object");
                names.push(tool["name"].as_str().expect("name").to_owned());
            }
            match page.get("nextCursor").and_then(Value::as_str) {
                Some(next) => cursor = Some(next.to_owned()),
                None => break,
            }
        }
        assert_eq!(pages, 3);
        assert_eq!(names, ["whoami", "disconnect", "one", "two", "three"]);
        let forged = client.request("tools/list", json!({"cursor": "b2Zmc2V0Ojk5"})).await;
        assert_eq!(forged.body["error"]["code"], -32602, "offset:99 is past the end");
        assert_eq!(
            client.request("tools/list", json!({"cursor": "!!"})).await.body["error"]["code"],
            -32602
        );
        // Arguments that break the schema are a tool error the model can correct, not a protocol error.
        let invalid = client
            .call("tools/call", json!({"name": "one", "arguments": {"q": 5}}))
            .await;
        assert_eq!(invalid["isError"], true);
        assert!(text(&invalid).contains("`q` must be of type string"));
        server.stop().await;
    }
);

backend_test!(
    async fn stream_delivers_persisted_events_and_resumes(backend: Backend) {
        let (_database, server) = setup(backend, "").await;
        let mut client = server.client();
        client.initialize().await;
        let session = client.session.clone().expect("session");
        // Appended while no stream is open: delivered when one opens.
        publish(&server, &session, &note(1)).await;
        publish(&server, &session, &note(2)).await;
        let mut stream = client.open_stream(None).await;
        let priming = stream.next_event(WAIT).await.expect("priming event");
        assert_eq!((priming.id.as_deref(), priming.data.as_str()), (Some("0"), ""));
        let (first, message) = stream.next_message(WAIT).await.expect("event 1");
        assert_eq!(
            (first.id.as_deref(), message["params"]["data"]["n"].clone()),
            (Some("1"), json!(1))
        );
        let (second, _) = stream.next_message(WAIT).await.expect("event 2");
        assert_eq!(second.id.as_deref(), Some("2"));
        // Appended while the stream is open: delivered live.
        publish(&server, &session, &note(3)).await;
        let (third, _) = stream.next_message(WAIT).await.expect("event 3");
        assert_eq!(third.id.as_deref(), Some("3"));
        drop(stream);
        // Once the server has noticed the stream is gone (at the latest at its next keep-alive):
        // an event appended before that may be claimed by the dying stream and then not replayed,
        // a known gap on the resume path (it made this test fail about one run in six).
        let id: gatehouse::domain::SessionId = session.parse().expect("session id");
        eventually("the server notices the closed stream", async || {
            (!server.state.bus.sessions_with_streams().contains(&id)).then_some(())
        })
        .await;

        publish(&server, &session, &note(4)).await;
        let mut resumed = client.open_stream(Some("1")).await;
        let mut ids = Vec::new();
        while let Some((event, _)) = resumed.next_message(Duration::from_millis(700)).await {
            ids.push(event.id.expect("id"));
        }
        assert_eq!(
            ids,
            ["2", "3", "4"],
            "Last-Event-ID replays everything after it, in order"
        );
        drop(resumed);
        // Without Last-Event-ID a new stream starts after what was already written to a stream.
        let mut fresh = client.open_stream(None).await;
        assert_eq!(fresh.next_event(WAIT).await.expect("priming").id.as_deref(), Some("4"));
        assert!(fresh.next_message(Duration::from_millis(500)).await.is_none());

        let bad = client
            .http
            .get(&server.url)
            .header("accept", "text/event-stream")
            .header("mcp-session-id", &session)
            .header("last-event-id", "x")
            .send()
            .await
            .expect("GET");
        assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
        server.stop().await;
    }
);

backend_test!(
    async fn log_messages_follow_the_session_level(backend: Backend) {
        let (_database, server) = setup(backend, THREE_TOOLS).await;
        let mut client = server.client();
        client.initialize().await;
        let mut stream = client.open_stream(None).await;
        client.call("tools/call", json!({"name": "whoami"})).await;
        assert!(
            stream.next_message(Duration::from_millis(500)).await.is_none(),
            "no level set: no log messages"
        );
        client.call("logging/setLevel", json!({"level": "warning"})).await;
        client.call("tools/call", json!({"name": "whoami"})).await;
        // Port 9 (discard) refuses connections: the tool fails, which is worth a warning.
        let failed = client.call("tools/call", json!({"name": "two"})).await;
        assert_eq!(failed["isError"], true);
        let (_, message) = stream.next_message(WAIT).await.expect("warning");
        assert_eq!(message["method"], "notifications/message");
        assert_eq!(message["params"]["level"], "warning");
        assert_eq!(message["params"]["data"]["tool"], "two");
        client.call("logging/setLevel", json!({"level": "debug"})).await;
        client.call("tools/call", json!({"name": "whoami"})).await;
        let (_, debug) = stream.next_message(WAIT).await.expect("debug message");
        assert_eq!(
            (
                debug["params"]["level"].clone(),
                debug["params"]["data"]["tool"].clone()
            ),
            (json!("debug"), json!("whoami"))
        );
        server.stop().await;
    }
);

backend_test!(
    async fn keep_alive_and_shutdown_retry_hint(backend: Backend) {
        let (_database, server) = setup(backend, "").await;
        let mut client = server.client();
        client.initialize().await;
        let response = client
            .http
            .get(&server.url)
            .header("accept", "text/event-stream")
            .header("mcp-session-id", client.session.clone().expect("session"))
            .send()
            .await
            .expect("GET");
        assert_eq!(response.headers()["content-type"], "text/event-stream");
        let mut raw = response.bytes_stream();
        let mut text = String::new();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
        use futures::StreamExt;
        while !text.contains("\n:") && !text.starts_with(':') {
            let chunk = tokio::time::timeout_at(deadline, raw.next())
                .await
                .expect("keep-alive within 3s")
                .expect("open")
                .expect("bytes");
            text.push_str(&String::from_utf8_lossy(&chunk));
        }
        let mut stream = client.open_stream(None).await;
        assert!(stream.next_event(WAIT).await.is_some(), "priming");
        let stopping = tokio::spawn(server.stop());
        let mut retry = None;
        while let Some(event) = stream.next_event(WAIT).await {
            if event.retry.is_some() {
                retry = event.retry;
            }
        }
        assert_eq!(retry, Some(250), "the stream ends with the configured retry hint");
        assert!(stream.ended, "the server closed the stream");
        drop(raw);
        stopping.await.expect("stopped");
    }
);

backend_test!(
    async fn several_streams_of_one_session_each_get_an_event_once(backend: Backend) {
        let (_database, server) = setup(backend, "").await;
        let mut client = server.client();
        client.initialize().await;
        let session = client.session.clone().expect("session");
        let mut a = client.open_stream(None).await;
        let mut b = client.open_stream(None).await;
        assert!(
            a.next_event(WAIT).await.is_some() && b.next_event(WAIT).await.is_some(),
            "priming events"
        );
        for n in 1..=10 {
            publish(&server, &session, &note(n)).await;
        }
        let mut seen = Vec::new();
        for stream in [&mut a, &mut b] {
            while let Some((_, message)) = stream.next_message(Duration::from_millis(700)).await {
                seen.push(message["params"]["data"]["n"].as_i64().expect("n"));
            }
        }
        seen.sort_unstable();
        assert_eq!(
            seen,
            (1..=10).collect::<Vec<_>>(),
            "every event once, on one of the streams"
        );
        server.stop().await;
    }
);

backend_test!(
    async fn deleting_a_session_ends_its_stream_and_events(backend: Backend) {
        let (database, server) = setup(backend, "").await;
        let mut client = server.client();
        client.initialize().await;
        let session = client.session.clone().expect("session");
        publish(&server, &session, &note(1)).await;
        let mut stream = client.open_stream(None).await;
        assert!(stream.next_message(WAIT).await.is_some());
        assert_eq!(client.delete().await, StatusCode::NO_CONTENT);
        while stream.next_event(WAIT).await.is_some() {}
        assert!(stream.ended, "the stream of an ended session closes");
        assert_eq!(database.query_count("SELECT COUNT(*) FROM session_events").await, 0);
        server.stop().await;
    }
);

const HEADER_IDENTITY: &str =
    "[identity]\nmode = \"header\"\nheader = \"X-Forwarded-User\"\n[server]\ntrusted_proxies = [\"127.0.0.1/32\"]\n";

backend_test!(
    async fn header_identity_binds_sessions_to_principals(backend: Backend) {
        let (database, server) = setup(backend, HEADER_IDENTITY).await;
        let mut alice = server.client();
        let init =
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25"}});
        let anonymous = alice.post_raw(&init, &[]).await;
        assert_eq!(anonymous.status, StatusCode::UNAUTHORIZED);
        assert_eq!(session_count(&database).await, 0);
        let reply = alice
            .post_raw(&init, &[("x-forwarded-user", "alice@example.com")])
            .await;
        assert_eq!(reply.status, StatusCode::OK);
        alice.session = Some(reply.headers["mcp-session-id"].to_str().expect("ascii").to_owned());
        let whoami = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "whoami"}});
        let mine = alice
            .post_raw(&whoami, &[("x-forwarded-user", "alice@example.com")])
            .await;
        assert_eq!(
            mine.body["result"]["structuredContent"]["principal"],
            "alice@example.com"
        );
        let stolen = alice
            .post_raw(&whoami, &[("x-forwarded-user", "mallory@example.com")])
            .await;
        assert_eq!(stolen.status, StatusCode::FORBIDDEN);
        assert_eq!(alice.post_raw(&whoami, &[]).await.status, StatusCode::UNAUTHORIZED);
        server.stop().await;
    }
);

backend_test!(
    async fn header_identity_is_believed_only_from_trusted_proxies(backend: Backend) {
        let database = TestDatabase::new(backend).await;
        let untrusted = HEADER_IDENTITY.replace("127.0.0.1/32", "10.9.9.9/32");
        let server = TestServer::start(&database, &untrusted).await;
        let init =
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25"}});
        let forged = server.client().post_raw(&init, &[("x-forwarded-user", "admin")]).await;
        assert_eq!(forged.status, StatusCode::UNAUTHORIZED);
        assert!(
            forged.body["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("trusted proxy"))
        );
        assert_eq!(session_count(&database).await, 0);
        server.stop().await;
    }
);

backend_test!(
    async fn health_and_readiness(backend: Backend) {
        let (_database, server) = setup(backend, "").await;
        let http = reqwest::Client::new();
        let health = http
            .get(format!("{}/healthz", server.base()))
            .send()
            .await
            .expect("healthz");
        assert_eq!(health.status(), StatusCode::OK);
        // On PostgreSQL a replica is ready once its bus is listening, a moment after start.
        let ready = eventually("ready", async || {
            let ready = http
                .get(format!("{}/readyz", server.base()))
                .send()
                .await
                .expect("readyz");
            if ready.status() == StatusCode::OK {
                return Some(ready);
            }
            assert_eq!(ready.status(), StatusCode::SERVICE_UNAVAILABLE);
            None
        })
        .await;
        assert_eq!(ready.json::<Value>().await.expect("json")["status"], "ready");
        let index = http.get(server.base()).send().await.expect("index");
        assert_eq!(index.headers()["cache-control"], "no-store");
        assert!(
            index.headers()["content-security-policy"]
                .to_str()
                .expect("csp")
                .contains("frame-ancestors 'none'")
        );
        assert!(index.text().await.expect("page").contains(&server.url));
        server.stop().await;
    }
);

/// A 2025-03-26 batch of `count` requests built by `request(id)`.
fn batch_of(count: usize, request: impl Fn(usize) -> Value) -> Value {
    Value::Array((1..=count).map(request).collect())
}

fn set_level(level: &str) -> impl Fn(usize) -> Value {
    move |id| json!({"jsonrpc": "2.0", "id": id, "method": "logging/setLevel", "params": {"level": level}})
}

backend_test!(
    async fn batches_over_the_cap_are_refused_whole(backend: Backend) {
        let (database, server) = setup(backend, "").await;
        let mut client = server.client();
        client.initialize_with("2025-03-26", json!({})).await;
        let levels = async |level: &str| {
            let sql = match level {
                "warning" => "SELECT COUNT(*) FROM sessions WHERE log_level = 'warning'",
                _ => "SELECT COUNT(*) FROM sessions WHERE log_level = 'debug'",
            };
            database.query_count(sql).await
        };
        let at_cap = client.post_raw(&batch_of(64, set_level("warning")), &[]).await;
        assert_eq!(at_cap.status, StatusCode::OK, "{}", at_cap.body);
        let answers = at_cap.body.as_array().expect("array of responses");
        assert_eq!(answers.len(), 64);
        assert!(answers.iter().all(|a| a["result"] == json!({})), "{}", at_cap.body);
        assert_eq!(levels("warning").await, 1);

        let over = client.post_raw(&batch_of(65, set_level("debug")), &[]).await;
        assert_eq!(over.status, StatusCode::BAD_REQUEST);
        assert_eq!(over.body["error"]["code"], -32600);
        let message = over.body["error"]["message"].as_str().expect("message");
        assert!(
            message.contains("too large") && message.contains("65") && message.contains("64"),
            "{message}"
        );
        assert_eq!(levels("debug").await, 0, "no message of the refused batch was handled");
        assert_eq!(levels("warning").await, 1);
        server.stop().await;
    }
);

backend_test!(
    async fn a_batch_stops_handling_requests_once_its_answer_is_too_large(backend: Backend) {
        // Ten tools with 64 KiB descriptions on one page: each tools/list answer is over 640 KiB,
        // so the answer's 4 MiB limit is reached after seven of them.
        let description = "x".repeat(64 * 1024);
        let mut toml = String::from("[mcp]\npage_size = 50\n");
        for n in 0..10 {
            toml.push_str(&format!(
                "[[tools]]\nname = \"t{n}\"\ndescription = \"{description}\"\nhttp = {{ url = \"http://127.0.0.1:9/\" }}\n"
            ));
        }
        let (database, server) = setup(backend, &toml).await;
        let mut client = server.client();
        client.initialize_with("2025-03-26", json!({})).await;
        let mut batch = batch_of(63, |id| json!({"jsonrpc": "2.0", "id": id, "method": "tools/list"}));
        batch.as_array_mut().expect("array").push(set_level("debug")(64));
        let reply = client.post_raw(&batch, &[]).await;
        assert_eq!(reply.status, StatusCode::OK);
        let answers = reply.body.as_array().expect("array of responses");
        assert_eq!(answers.len(), 64, "every request is answered");
        let handled = answers.iter().filter(|a| a.get("result").is_some()).count();
        assert_eq!(handled, 7, "handled until the answer passed 4 MiB");
        for answer in &answers[handled..] {
            assert_eq!(answer["error"]["code"], -32600);
            assert!(
                answer["error"]["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("not handled") && m.contains("4194304 bytes")),
                "{answer}"
            );
        }
        assert_eq!(answers[63]["id"], 64);
        assert_eq!(
            database
                .query_count("SELECT COUNT(*) FROM sessions WHERE log_level IS NOT NULL")
                .await,
            0,
            "the setLevel past the limit was not handled"
        );
        server.stop().await;
    }
);

backend_test!(
    async fn a_session_holds_at_most_four_streams_per_replica(backend: Backend) {
        let (_database, server) = setup(backend, "").await;
        let mut client = server.client();
        client.initialize().await;
        let get = async || {
            client
                .http
                .get(&server.url)
                .header("accept", "text/event-stream")
                .header("mcp-protocol-version", "2025-11-25")
                .header("mcp-session-id", client.session.clone().expect("session"))
                .send()
                .await
                .expect("GET")
        };
        let mut streams = Vec::new();
        for _ in 0..4 {
            let mut stream = client.open_stream(None).await;
            assert!(stream.next_event(WAIT).await.is_some(), "priming");
            streams.push(stream);
        }
        let refused = get().await;
        assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(refused.headers()["content-type"], "application/json");
        let body: Value = refused.json().await.expect("JSON body");
        assert_eq!(body["error"]["code"], -32600);
        assert!(
            body["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("4 open streams")),
            "{body}"
        );
        // Another session is not affected.
        let mut other = server.client();
        other.initialize().await;
        let mut other_stream = other.open_stream(None).await;
        assert!(other_stream.next_event(WAIT).await.is_some(), "priming");

        // Closing one frees its place once the server notices (at the next keep-alive).
        drop(streams.pop());
        let reopened = eventually("a stream's place freed", async || {
            let response = get().await;
            if response.status() == StatusCode::OK {
                return Some(response);
            }
            assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
            None
        })
        .await;
        assert_eq!(reopened.headers()["content-type"], "text/event-stream");
        assert_eq!(get().await.status(), StatusCode::TOO_MANY_REQUESTS, "full again");
        drop(reopened);
        server.stop().await;
    }
);

backend_test!(
    async fn a_resumed_stream_replaces_the_stream_the_client_stopped_reading(backend: Backend) {
        let (_database, server) = setup(backend, "").await;
        let mut client = server.client();
        client.initialize().await;
        let session = client.session.clone().expect("session");
        let mut stale = client.open_stream(None).await;
        let priming = stale.next_event(WAIT).await.expect("priming");
        // The client stops reading the first stream, keeps its connection, and resumes on a new one.
        let mut resumed = client.open_stream(priming.id.as_deref()).await;
        assert!(resumed.next_event(WAIT).await.is_some(), "priming");
        for n in 1..=18 {
            publish(&server, &session, &note(n)).await;
        }
        assert_eq!(
            next_notes(&mut resumed, 18).await,
            (1..=18).collect::<Vec<_>>(),
            "each once, in order"
        );
        assert!(
            stale.next_message(WAIT).await.is_none(),
            "the replaced stream carried none of them"
        );
        assert!(stale.ended, "the replaced stream ended");
        server.stop().await;
    }
);

backend_test!(
    async fn a_post_body_trickled_in_is_cut_off_with_408(backend: Backend) {
        let (_database, server) = setup(backend, "[server]\nrequest_body_timeout = \"1s\"\n").await;
        let head = format!(
            "POST /mcp HTTP/1.1\r\nHost: {}\r\nAccept: application/json, text/event-stream\r\n\
             Content-Type: application/json\r\nContent-Length: 100000",
            server.addr
        );
        let answer = common::raw::trickle_body(server.addr, &head, Duration::from_millis(100)).await;
        assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
        assert!(answer.contains("the request body did not arrive within 1s"), "{answer}");
        server.stop().await;
    }
);

postgres_test!(
    /// A client that hangs up while its stream reads the log must not cost a connection: sqlx
    /// closes one whose query is cancelled, and over TLS opening another is slow (issue 9, item 11).
    async fn clients_hanging_up_on_their_streams_do_not_churn_connections() {
        let (database, server) = setup(Backend::Postgres, "[database]\nmax_connections = 4\n").await;
        // The pool opens its four connections at start; the bus takes one of them for LISTEN.
        let before = eventually("the pool is open", async || {
            let pids = database.gatehouse_backends().await;
            (pids.len() >= 3).then_some(pids)
        })
        .await;
        for n in 0..30 {
            let mut client = server.client();
            client.initialize().await;
            let session = client.session.clone().expect("session");
            let mut stream = client.open_stream(None).await;
            assert!(stream.next_event(WAIT).await.is_some(), "priming");
            publish(&server, &session, &note(n)).await;
            assert!(stream.next_message(WAIT).await.is_some(), "the event");
            // The stream reads the log again after writing the event; the client is gone by then.
            drop(stream);
        }
        let mut client = server.client();
        client.initialize().await;
        let after = database.gatehouse_backends().await;
        let closed: Vec<_> = before.iter().filter(|pid| !after.contains(pid)).collect();
        assert!(
            closed.is_empty(),
            "connections closed: {closed:?} of {before:?} (now {after:?})"
        );
        server.stop().await;
    }
);
