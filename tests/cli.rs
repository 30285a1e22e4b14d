//! The `gatehouse` binary: its subcommands, configuration errors, shutdown on SIGTERM, and what
//! a healthy start logs.

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::replica::Replica;
use common::{Backend, McpClient, TestDatabase, WAIT, eventually, free_port};
use serde_json::json;
use sqlx::Connection;

const BINARY: &str = env!("CARGO_BIN_EXE_gatehouse");

/// Runs the binary with a clean environment plus `env`, in `dir`.
fn run(dir: &std::path::Path, args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    Command::new(BINARY)
        .args(args)
        .current_dir(dir)
        .env_clear()
        .envs(env.iter().copied())
        .output()
        .expect("run gatehouse")
}

fn stderr(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn check_config_accepts_the_embedded_default_and_the_example() {
    let dir = tempfile::tempdir().expect("dir");
    let output = run(dir.path(), &["check-config"], &[]);
    assert!(output.status.success(), "{}", stderr(&output));
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/gatehouse.example.toml");
    let output = run(
        dir.path(),
        &["--config", example, "check-config"],
        &[
            ("EXAMPLE_API_TOKEN", "t"),
            ("GITHUB_CLIENT_ID", "id"),
            ("GITHUB_CLIENT_SECRET", "s"),
            ("ACME_CLIENT_SECRET", "s"),
        ],
    );
    assert!(
        output.status.success(),
        "the example configuration is valid: {}",
        stderr(&output)
    );
}

#[test]
fn bad_configuration_is_refused_naming_the_key() {
    let dir = tempfile::tempdir().expect("dir");
    let file = dir.path().join("g.toml");
    std::fs::write(
        &file,
        "[server]\nbind = \"0.0.0.0:8080\"\npublic_url = \"https://gh.example\"\n",
    )
    .expect("write");
    let file = file.to_str().expect("utf-8 path");
    let form = dir.path().join("form.toml");
    std::fs::write(
        &form,
        "[[forms]]\nid = \"k\"\ntitle = \"Key\"\n[[forms.fields]]\nname = \"key\"\nlabel = \"Key\"\ntype = \"secret\"\ndefault = \"x\"\n",
    )
    .expect("write");
    let form = form.to_str().expect("utf-8 path");
    let templates = dir.path().join("templates");
    std::fs::create_dir(&templates).expect("dir");
    std::fs::write(templates.join("form.html"), "{% if %}").expect("write");
    let templates = templates.to_str().expect("utf-8 path");
    // A stdio upstream's program that is not on PATH, and one that is a file that may not be run.
    let absent = dir.path().join("absent.toml");
    std::fs::write(
        &absent,
        "[[upstreams]]\nid = \"notes\"\ncommand = [\"gatehouse-test-no-such-program\"]\n",
    )
    .expect("write");
    let absent = absent.to_str().expect("utf-8 path");
    let plain = dir.path().join("plain.toml");
    std::fs::write(
        &plain,
        format!("[[upstreams]]\nid = \"notes\"\ncommand = [{:?}]\n", form),
    )
    .expect("write");
    let plain = plain.to_str().expect("utf-8 path");
    // Arguments, environment, and what the error must name.
    type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], &'a str);
    let cases: [Case; 9] = [
        (&["--config", file, "serve"], &[], "identity.mode"),
        (
            &["check-config"],
            &[("GATEHOUSE_SERVER__BIND", "localhost")],
            "server.bind",
        ),
        (
            &["check-config"],
            &[("GATEHOUSE_DATABASE__URL", "env:NOT_SET_ANYWHERE")],
            "NOT_SET_ANYWHERE",
        ),
        (&["check-config"], &[("GATEHOUSE_MCP__PAGE_SIZE", "0")], "mcp.page_size"),
        (&["--config", form, "check-config"], &[], "forms[0].fields[0].default"),
        (
            &["check-config"],
            &[("GATEHOUSE_SERVER__TEMPLATE_DIR", templates)],
            "server.template_dir",
        ),
        (&["--config", absent, "check-config"], &[], "upstreams[0].command"),
        (&["--config", plain, "check-config"], &[], "cannot be run"),
        (
            &["--config", "/nonexistent.toml", "check-config"],
            &[],
            "/nonexistent.toml",
        ),
    ];
    for (args, env, named) in cases {
        let output = run(dir.path(), args, env);
        assert_eq!(output.status.code(), Some(2), "{args:?} {env:?}");
        assert!(
            stderr(&output).contains(named),
            "{:?} should name {named}: {}",
            args,
            stderr(&output)
        );
    }
    assert!(
        !dir.path().join("gatehouse.db").exists(),
        "refused before touching the database"
    );
}

/// The fixtures exist only in gatehouse-conformance: the production binary refuses to start with
/// them asked for, instead of starting without them.
#[cfg(not(feature = "conformance"))]
#[test]
fn the_production_binary_refuses_conformance_fixtures() {
    let dir = tempfile::tempdir().expect("dir");
    let output = run(
        dir.path(),
        &["serve"],
        &[("GATEHOUSE_MCP__CONFORMANCE_FIXTURES", "true")],
    );
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    let message = stderr(&output);
    assert!(
        message.contains("mcp.conformance_fixtures") && message.contains("gatehouse-conformance"),
        "{message}"
    );
    assert!(!dir.path().join("gatehouse.db").exists(), "refused before the database");
}

#[test]
fn migrate_prepares_a_database_and_is_repeatable() {
    let dir = tempfile::tempdir().expect("dir");
    for _ in 0..2 {
        let output = run(dir.path(), &["migrate"], &[]);
        assert!(output.status.success(), "{}", stderr(&output));
    }
    assert!(
        dir.path().join("gatehouse.db").exists(),
        "the embedded default is a SQLite file in the working directory"
    );
}

backend_test!(
    async fn serve_until_sigterm(backend: Backend) {
        let database = TestDatabase::new(backend).await;
        let dir = tempfile::tempdir().expect("dir");
        let port = free_port();
        let bind = format!("127.0.0.1:{port}");
        let metrics_bind = format!("127.0.0.1:{}", free_port());
        let mut command = tokio::process::Command::new(BINARY);
        command.env_clear();
        if backend == Backend::Postgres {
            command.env("GATEHOUSE_SECRETS__KEYS", common::TEST_KEY);
        }
        let mut child = command
            .arg("serve")
            .current_dir(dir.path())
            .env("GATEHOUSE_SERVER__BIND", &bind)
            .env("GATEHOUSE_DATABASE__URL", &database.url)
            .env("GATEHOUSE_LOG__FORMAT", "json")
            .env("GATEHOUSE_SERVER__SSE_RETRY", "2s")
            .env("GATEHOUSE_SERVER__METRICS_BIND", &metrics_bind)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn");
        let url = format!("http://{bind}/mcp");
        common::until_ready(&bind).await;
        let mut client = McpClient::new(&url);
        client.initialize().await;
        assert_eq!(client.call("ping", json!({})).await, json!({}));
        let mut stream = client.open_stream(None).await;
        assert!(stream.next_event(WAIT).await.is_some(), "priming");
        let metrics = reqwest::get(format!("http://{metrics_bind}/metrics"))
            .await
            .expect("the metrics listener")
            .text()
            .await
            .expect("metrics");
        for line in [
            r#"gatehouse_mcp_requests_total{method="ping",outcome="ok"} 1"#,
            "gatehouse_streams_open 1",
        ] {
            assert!(metrics.lines().any(|l| l == line), "{line} in:\n{metrics}");
        }

        let pid = child.id().expect("pid").to_string();
        assert!(
            Command::new("kill")
                .args(["-TERM", &pid])
                .status()
                .expect("kill")
                .success()
        );
        let mut retry = None;
        while let Some(event) = stream.next_event(WAIT).await {
            retry = event.retry.or(retry);
        }
        assert_eq!(retry, Some(2000), "the stream ends with the retry hint");
        let status = tokio::time::timeout(Duration::from_secs(10), child.wait())
            .await
            .expect("exits in time")
            .expect("wait");
        assert!(status.success(), "graceful shutdown exits 0");
        let mut logs = String::new();
        use tokio::io::AsyncReadExt;
        child
            .stderr
            .take()
            .expect("stderr")
            .read_to_string(&mut logs)
            .await
            .expect("logs");
        let lines: Vec<serde_json::Value> = logs.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
        assert!(
            !lines.is_empty() && lines.len() == logs.lines().count(),
            "every log line is JSON:\n{logs}"
        );
        assert!(
            lines.iter().any(|l| l["fields"]["message"] == "gatehouse stopped"),
            "{logs}"
        );
        assert!(
            !logs.contains(client.session.as_deref().expect("session")),
            "logs never carry a whole session id"
        );
    }
);

postgres_test!(
    /// The Kubernetes layout (deploy/kubernetes): replicas with `migrate_on_start = false` on a
    /// database the migrate Job has not prepared yet stop at once, naming `gatehouse migrate`, and
    /// leave the database as it was; once it has run, the same replica starts and is ready.
    async fn a_replica_without_migrations_waits_for_gatehouse_migrate() {
        let database = TestDatabase::new(Backend::Postgres).await;
        let dir = tempfile::tempdir().expect("dir");
        let bind = format!("127.0.0.1:{}", free_port());
        let env = [
            ("GATEHOUSE_DATABASE__URL", database.url.as_str()),
            ("GATEHOUSE_DATABASE__MIGRATE_ON_START", "false"),
            ("GATEHOUSE_SECRETS__KEYS", common::TEST_KEY),
            ("GATEHOUSE_SERVER__BIND", bind.as_str()),
        ];
        let refused = tokio::process::Command::new(BINARY)
            .arg("serve")
            .current_dir(dir.path())
            .env_clear()
            .envs(env)
            .kill_on_drop(true)
            .output();
        let refused = tokio::time::timeout(WAIT, refused)
            .await
            .expect("the replica stops at once instead of serving")
            .expect("run gatehouse");
        assert!(!refused.status.success(), "{}", stderr(&refused));
        assert!(stderr(&refused).contains("gatehouse migrate"), "{}", stderr(&refused));
        let mut admin = sqlx::PgConnection::connect(&database.url).await.expect("connect");
        let tables: i64 =
            sqlx::query_scalar("SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'")
                .fetch_one(&mut admin)
                .await
                .expect("count tables");
        assert_eq!(tables, 0, "a refused replica writes nothing");

        let migrated = run(dir.path(), &["migrate"], &env);
        assert!(migrated.status.success(), "{}", stderr(&migrated));
        let mut replica = tokio::process::Command::new(BINARY)
            .arg("serve")
            .current_dir(dir.path())
            .env_clear()
            .envs(env)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn");
        common::until_ready(&bind).await;
        replica.kill().await.expect("kill");
    }
);

/// The banner `tests/upstreams/asking_server.py` writes to stderr as it starts.
const BANNER: &str = "asking-server ready on stdio";

/// A healthy start cries no wolf: a stdio upstream's startup banner on stderr, its `roots/list`
/// (which the client, declaring no roots, cannot answer) and rmcp's own chatter are no warnings,
/// and a log that is a file, not a terminal, gets no colour codes.
#[tokio::test]
async fn a_healthy_start_logs_no_warnings_and_no_colour() {
    let database = TestDatabase::new(Backend::Sqlite).await;
    let script = common::repo().join("tests/upstreams/asking_server.py");
    let config = format!(
        "[[upstreams]]\nid = \"asker\"\ncommand = [\"python3\", {:?}]\n",
        script.to_string_lossy()
    );
    let port = free_port();
    let public_url = format!("http://127.0.0.1:{port}");
    let path = std::env::var("PATH").unwrap_or_default();
    let replica = Replica::start_with_env(
        &database.url,
        &config,
        port,
        &public_url,
        common::TEST_KEY,
        &[("PATH", &path)],
    )
    .await;
    let mut client = McpClient::new(&replica.mcp());
    client.initialize_with("2025-11-25", json!({})).await;
    eventually("the upstream's tools", async || {
        let tools = client.call("tools/list", json!({})).await;
        tools.to_string().contains("asker_hello").then_some(())
    })
    .await;
    let hello = client
        .call("tools/call", json!({"name": "asker_hello", "arguments": {}}))
        .await;
    assert_eq!(common::text(&hello), "hello", "{hello}");
    eventually("the upstream heard gatehouse's answer to its roots/list", async || {
        replica.log().contains("roots/list answered: error").then_some(())
    })
    .await;

    let log = replica.log();
    assert!(!log.contains("\x1b["), "no ANSI colour codes in a log file:\n{log}");
    let warnings: Vec<&str> = log.lines().filter(|l| l.contains("WARN")).collect();
    assert!(warnings.is_empty(), "a healthy start warns of nothing: {warnings:#?}");
    assert!(
        !log.contains("rmcp::"),
        "rmcp's own lines (dumps of its structs) are not logged by default:\n{log}"
    );
    assert!(
        log.lines().any(|l| l.contains("INFO") && l.contains(BANNER)),
        "the upstream's banner is logged at INFO:\n{log}"
    );
    replica.stop().await;
}
