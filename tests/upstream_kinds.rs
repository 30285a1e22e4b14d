//! gatehouse in front of upstreams of every kind and in every state: the official TypeScript SDK's
//! example server, a stdio server started per user (limits, restarts, secrets kept out of logs),
//! and upstreams that are down, slow or answer garbage.

mod common;

use std::time::Duration;

use axum::Router;
use axum::routing::post;
use common::mcp_upstreams::{TsExampleServer, stdio_server_command};
use common::upstream::serve;
use common::{Backend, HEADER_IDENTITY, McpClient, TestDatabase, TestServer, captured_logs, logged_text, text};
use reqwest::StatusCode;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

async fn client_of(server: &TestServer, user: &str) -> McpClient {
    let mut client = server.client().with_user("x-forwarded-user", user);
    client.initialize().await;
    client
}

async fn call(client: &McpClient, tool: &str, arguments: Value) -> Value {
    client
        .call("tools/call", json!({"name": tool, "arguments": arguments}))
        .await
}

backend_test!(
    async fn the_typescript_sdks_example_server_is_listed_and_called(backend: Backend) {
        let Some(upstream) = TsExampleServer::start().await else {
            return;
        };
        let database = TestDatabase::new(backend).await;
        let toml = format!(
            "{HEADER_IDENTITY}\n[[upstreams]]\nid = \"ts\"\nurl = \"{}\"\nprefix = \"\"\n",
            upstream.url()
        );
        let server = TestServer::start(&database, &toml).await;
        let alice = client_of(&server, "alice").await;
        // It needs no credentials, so gatehouse lists it by itself at start.
        let listed = common::eventually("the example's catalogue", async || {
            let tools = alice.call("tools/list", json!({})).await;
            let names: Vec<String> = tools["tools"]
                .as_array()?
                .iter()
                .filter_map(|t| Some(t["name"].as_str()?.to_owned()))
                .collect();
            names.contains(&"multi-greet".to_owned()).then_some(names)
        })
        .await;
        assert!(
            listed.contains(&"whoami".to_owned()),
            "gatehouse's own tools stay: {listed:?}"
        );
        let result = call(&alice, "greet", json!({"name": "Ada"})).await;
        assert!(text(&result).contains("Ada"), "{result}\n{}", upstream.stderr());
    }
);

/// The stdio server as upstream `notes`, its API_TOKEN taken from the user's form `notes_key`.
fn stdio_config(command: &[String], max_processes: usize) -> String {
    let command: Vec<String> = command.iter().map(|c| format!("{c:?}")).collect();
    format!(
        r#"{HEADER_IDENTITY}
[[forms]]
id = "notes_key"
title = "Notes API key"
[[forms.fields]]
name = "token"
label = "Token"
type = "secret"

[[upstreams]]
id = "notes"
command = [{}]
env = {{ API_TOKEN = "{{{{form.notes_key.token}}}}" }}
requires = ["form:notes_key"]
max_processes = {max_processes}
idle_timeout = "10m"
"#,
        command.join(", ")
    )
}

fn sha256_hex(text: &str) -> String {
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

backend_test!(
    async fn a_stdio_upstream_runs_a_process_per_user_with_their_secret_in_its_environment_only(backend: Backend) {
        captured_logs();
        let Some(command) = stdio_server_command().await else {
            return;
        };
        let database = TestDatabase::new(backend).await;
        let server = TestServer::start(&database, &stdio_config(&command, 1)).await;
        let alice = client_of(&server, "alice").await;
        let bob = client_of(&server, "bob").await;
        // Nobody has listed its tools yet: `notes_connect` asks for the form, then lists them.
        server
            .fill_in_token(&alice, "alice", "notes_connect", "alice-secret-0123456789")
            .await;
        let connected = call(&alice, "notes_connect", json!({})).await;
        assert!(text(&connected).contains("notes_token_hash"), "{connected}");
        server
            .fill_in_token(&bob, "bob", "notes_token_hash", "bob-secret-9876543210")
            .await;

        let alices = call(&alice, "notes_token_hash", json!({})).await;
        assert_eq!(text(&alices), sha256_hex("alice-secret-0123456789"), "{alices}");
        let alice_pid = text(&call(&alice, "notes_pid", json!({})).await);
        assert_eq!(
            text(&call(&alice, "notes_pid", json!({})).await),
            alice_pid,
            "the process is reused"
        );

        // max_processes = 1: bob's call stops alice's idle process and starts his own.
        let bobs = call(&bob, "notes_token_hash", json!({})).await;
        assert_eq!(text(&bobs), sha256_hex("bob-secret-9876543210"), "{bobs}");
        assert_ne!(
            text(&call(&alice, "notes_pid", json!({})).await),
            alice_pid,
            "alice's process was stopped"
        );

        // What the process writes to stderr is logged, with the user's secret redacted.
        call(&alice, "notes_leak", json!({})).await;
        common::eventually("the stderr line in the log", async || {
            logged_text().contains("the token is").then_some(())
        })
        .await;
        let logs = logged_text();
        assert!(!logs.contains("alice-secret-0123456789"), "the secret is not logged");
        assert!(!logs.contains("bob-secret-9876543210"), "the secret is not logged");

        // A crashed process is started again on the next call.
        let before = text(&call(&alice, "notes_pid", json!({})).await);
        let crashed = call(&alice, "notes_crash", json!({})).await;
        assert_eq!(crashed["isError"], true, "{crashed}");
        let after = text(&call(&alice, "notes_pid", json!({})).await);
        assert_ne!(before, after, "a new process answers");
    }
);

/// The processes whose ids `stdio_server.py --pid-file` recorded in `pids` that are still running
/// (not exited, and not an exited child nobody has reaped yet).
fn running(pids: &std::path::Path) -> Vec<String> {
    let recorded = std::fs::read_to_string(pids).unwrap_or_default();
    recorded
        .lines()
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
                // The state follows the command name, which is in parentheses.
                let state = stat.rsplit_once(") ").map(|(_, rest)| rest.chars().next());
                !matches!(state, Some(Some('Z' | 'X')) | None)
            })
        })
        .map(str::to_owned)
        .collect()
}

backend_test!(
    /// Six users' first calls at once with max_processes = 2: the bound is taken before a process
    /// starts, so at most two run (an evicted one a moment longer while it stops); the calls
    /// beyond it are told the server is busy.
    async fn first_calls_at_once_start_no_more_processes_than_max_processes(backend: Backend) {
        let Some(mut command) = stdio_server_command().await else {
            return;
        };
        let dir = tempfile::tempdir().expect("dir");
        let pids = dir.path().join("pids");
        command.extend(["--pid-file".to_owned(), pids.to_string_lossy().into_owned()]);
        let database = TestDatabase::new(backend).await;
        let server = TestServer::start(&database, &stdio_config(&command, 2)).await;
        // A first user connects, so the tools are listed; their process idles afterwards.
        let first = client_of(&server, "first").await;
        server
            .fill_in_token(&first, "first", "notes_connect", "first-secret-0123456789")
            .await;
        call(&first, "notes_connect", json!({})).await;
        assert_eq!(running(&pids).len(), 1);
        let mut clients = Vec::new();
        for n in 1..=6 {
            let user = format!("user{n}");
            let client = client_of(&server, &user).await;
            server
                .fill_in_token(&client, &user, "notes_pid", &format!("{user}-secret-0123456789"))
                .await;
            clients.push(client);
        }

        let results = futures::future::join_all(clients.iter().map(|c| call(c, "notes_pid", json!({})))).await;
        let mut answered = 0;
        for result in &results {
            if result["isError"] == false {
                answered += 1;
            } else {
                assert!(text(result).contains("busy"), "{result}");
            }
        }
        assert!(answered >= 1, "{results:?}");
        let started = std::fs::read_to_string(&pids).expect("pids").lines().count();
        assert_eq!(started, 1 + answered, "a call refused as busy starts no process");
        common::eventually("at most max_processes processes running", async || {
            (running(&pids).len() <= 2).then_some(())
        })
        .await;
        server.stop().await;
    }
);

/// A user of the stdio upstream `notes` whose process is running, named after `what` and the
/// backend (the tests of one binary share the captured log); their secret, and how the log
/// names them.
struct Writer {
    server: TestServer,
    client: McpClient,
    secret: String,
    principal: String,
}

async fn writer(backend: Backend, what: &str) -> Option<Writer> {
    captured_logs();
    let command = stdio_server_command().await?;
    let database = TestDatabase::new(backend).await;
    let server = TestServer::start(&database, &stdio_config(&command, 2)).await;
    let tag = format!("{what}-{backend:?}").to_lowercase();
    let secret = format!("SeCrEt-{tag}-0123456789abcdefghij");
    let client = client_of(&server, &tag).await;
    server.fill_in_token(&client, &tag, "notes_connect", &secret).await;
    call(&client, "notes_connect", json!({})).await;
    Some(Writer {
        server,
        client,
        secret,
        principal: format!("Principal(\"{tag}\")"),
    })
}

/// The lines logged of what `principal`'s process wrote to stderr.
fn stderr_lines(logs: &str, principal: &str) -> Vec<String> {
    logs.lines()
        .filter(|line| line.contains(principal) && line.contains(" stderr="))
        .map(str::to_owned)
        .collect()
}

backend_test!(
    /// A long stderr line with the user's secret across its 4 KiB cut: the line is redacted whole
    /// before it is cut, and the log says how long it was.
    async fn a_secret_across_the_cut_of_a_long_stderr_line_is_redacted(backend: Backend) {
        let Some(w) = writer(backend, "cut").await else {
            return;
        };
        // The secret starts 6 bytes before the 4096th.
        let before = 4090;
        let long = json!({"before": before, "lines": 0, "marker": "-"});
        assert_eq!(text(&call(&w.client, "notes_flood", long).await), "ok");
        let logged = common::eventually("the long line is logged", async || {
            let lines = stderr_lines(&logged_text(), &w.principal);
            lines.iter().any(|line| line.contains("xxxxxxxx")).then_some(lines)
        })
        .await;
        let logs = logged_text();
        assert!(
            !logs.contains(&w.secret[..6]),
            "the start of the secret is logged: {logged:?}"
        );
        assert!(
            !logs.contains(&w.secret[6..]),
            "the rest of the secret is logged: {logged:?}"
        );
        assert_eq!(logged.len(), 1, "{logged:?}");
        let line_bytes = format!("line_bytes={}", before + w.secret.len());
        assert!(logged[0].contains(&line_bytes), "{logged:?}");
        w.server.stop().await;
    }
);

/// The `dropped=N` counts logged for `principal`'s process, summed.
fn dropped_lines(logs: &str, principal: &str) -> u64 {
    logs.lines()
        .filter(|line| line.contains(principal))
        .filter_map(|line| line.split_once(" dropped=")?.1.split(' ').next()?.parse::<u64>().ok())
        .sum()
}

backend_test!(
    /// A process flooding stderr: lines beyond the rate are dropped and counted, every line it
    /// wrote either logged or counted as dropped.
    async fn a_flood_on_stderr_is_bounded_and_the_dropped_lines_counted(backend: Backend) {
        let Some(w) = writer(backend, "flood").await else {
            return;
        };
        const LINES: u64 = 5000;
        // A line holding the secret, then the flood.
        let flood = json!({"before": 0, "lines": LINES, "marker": "flooding"});
        assert_eq!(text(&call(&w.client, "notes_flood", flood).await), "ok");
        let (logged, dropped) = common::eventually("every line logged or counted as dropped", async || {
            let logs = logged_text();
            let logged = stderr_lines(&logs, &w.principal).len() as u64;
            let dropped = dropped_lines(&logs, &w.principal);
            (logged + dropped == LINES + 1).then_some((logged, dropped))
        })
        .await;
        assert!(dropped > 0 && logged < LINES, "logged {logged}, dropped {dropped}");
        assert!(!logged_text().contains(&w.secret));
        w.server.stop().await;
    }
);

/// An upstream that answers every POST with the given status and body.
async fn fixed_upstream(status: StatusCode, body: &'static str, delay: Duration) -> String {
    let addr = serve(Router::new().route(
        "/mcp",
        post(move || async move {
            tokio::time::sleep(delay).await;
            (status, [("content-type", "application/json")], body)
        }),
    ))
    .await;
    format!("http://{addr}/mcp")
}

backend_test!(
    async fn an_upstream_down_slow_or_answering_garbage_is_a_tool_error_naming_it(backend: Backend) {
        captured_logs();
        let database = TestDatabase::new(backend).await;
        let garbage = fixed_upstream(StatusCode::OK, "<html>not json", Duration::ZERO).await;
        let failing = fixed_upstream(
            StatusCode::INTERNAL_SERVER_ERROR,
            "{\"secret\": \"internal\"}",
            Duration::ZERO,
        )
        .await;
        let slow = fixed_upstream(StatusCode::OK, "{}", Duration::from_secs(30)).await;
        let closed = format!("http://127.0.0.1:{}/mcp", common::free_port());
        let mut toml = HEADER_IDENTITY.to_owned();
        for (id, url) in [
            ("garbage", &garbage),
            ("failing", &failing),
            ("slow", &slow),
            ("down", &closed),
        ] {
            toml.push_str(&format!(
                "\n[[upstreams]]\nid = \"{id}\"\nurl = \"{url}\"\ntools = [\"t\"]\ntimeout = \"1s\"\n"
            ));
        }
        let server = TestServer::start(&database, &toml).await;
        let alice = client_of(&server, "alice").await;
        for id in ["garbage", "failing", "slow", "down"] {
            let result = call(&alice, &format!("{id}_t"), json!({})).await;
            assert_eq!(result["isError"], true, "{id}: {result}");
            let said = text(&result);
            assert!(said.contains(id), "{id}: the result names the upstream: {said}");
            assert!(
                !said.contains("internal") && !said.contains("<html>"),
                "{id}: no internals: {said}"
            );
        }
        // The server is still well.
        assert_eq!(
            call(&alice, "whoami", json!({})).await["structuredContent"]["principal"],
            "alice"
        );
    }
);
