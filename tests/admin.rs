//! `gatehouse admin` end to end, on PostgreSQL and SQLite, with the real binary against the
//! database a running gatehouse serves: a sign-in through the fake provider is listed and revoked
//! (at the provider too, and the gated tool asks again), a pending elicitation is listed and
//! expired (its client is told), a form's saved values are deleted, a session is listed and ended
//! (its client gets 404). Each change leaves an `admin` audit row; no output holds a secret.
//!
//! On PostgreSQL the command runs while gatehouse serves (its NOTIFYs reach the replica). A SQLite
//! database belongs to one process, so there the command runs with gatehouse stopped, as the
//! book says (docs/src/operations/admin.md), and the test starts it again afterwards.

mod common;

use std::process::{Command, Output};

use common::fake_oauth::{FakeOptions, FakeProvider};
use common::{Backend, Browser, HEADER_IDENTITY, McpClient, TestDatabase, TestServer, elicitations, url_of};
use gatehouse::store::{AuditAction, AuditQuery};
use reqwest::StatusCode;
use serde_json::{Value, json};

const BINARY: &str = env!("CARGO_BIN_EXE_gatehouse");
const API_KEY: &str = "sk-admin-0123456789-secret";

struct Setup {
    fake: FakeProvider,
    database: TestDatabase,
    /// The configuration, in a file for the command too.
    toml: String,
    config: tempfile::NamedTempFile,
    /// None only while a command runs on SQLite.
    server: Option<TestServer>,
    client: McpClient,
    browser: Browser,
    /// Everything the commands printed, to look for secrets in.
    printed: String,
}

async fn setup(backend: Backend) -> Setup {
    let fake = FakeProvider::start(FakeOptions::default()).await;
    let database = TestDatabase::new(backend).await;
    let hub = fake.configure(include_str!("fixtures/fake_hub.toml"));
    let addr = format!("127.0.0.1:{}", common::free_port());
    let form = include_str!("fixtures/openai_form.toml").replace("GATEHOUSE", &addr);
    let toml = format!("{HEADER_IDENTITY}\n{hub}\n{form}");
    let server = TestServer::start_on(&database, &toml, &addr).await;
    let config = tempfile::NamedTempFile::new().expect("config file");
    std::fs::write(config.path(), &toml).expect("write config");
    let mut client = server.client().with_user("x-forwarded-user", "alice");
    client.initialize().await;
    Setup {
        fake,
        database,
        toml,
        config,
        server: Some(server),
        client,
        browser: Browser::as_user("x-forwarded-user", "alice"),
        printed: String::new(),
    }
}

impl Setup {
    fn server(&self) -> &TestServer {
        self.server.as_ref().expect("serving")
    }

    /// Runs `gatehouse admin` with `args`, as the operator does, with the deployment's key.
    fn admin(&mut self, args: &[&str]) -> Output {
        self.gatehouse("admin", args)
    }

    /// Runs the `gatehouse` subcommand `command` with `args`, with the deployment's
    /// configuration and key.
    fn gatehouse(&mut self, command: &str, args: &[&str]) -> Output {
        let dir = tempfile::tempdir().expect("dir");
        let output = Command::new(BINARY)
            .arg("--config")
            .arg(self.config.path())
            .arg(command)
            .args(args)
            .current_dir(dir.path())
            .env_clear()
            .env("GATEHOUSE_DATABASE__URL", &self.database.url)
            .env("GATEHOUSE_SECRETS__KEYS", common::TEST_KEY)
            .output()
            .expect("run gatehouse");
        self.printed.push_str(&String::from_utf8_lossy(&output.stdout));
        self.printed.push_str(&String::from_utf8_lossy(&output.stderr));
        output
    }

    /// A command that must succeed; what it printed.
    fn ok(&mut self, args: &[&str]) -> String {
        let output = self.admin(args);
        assert!(
            output.status.success(),
            "gatehouse admin {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// A command that must fail with exit status 1 and say `message`.
    fn refused(&mut self, args: &[&str], message: &str) {
        let output = self.admin(args);
        assert_eq!(output.status.code(), Some(1), "gatehouse admin {args:?} fails");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(message), "{args:?}: {stderr}");
    }

    /// A command that changes something: on SQLite with gatehouse stopped, then started again.
    async fn change(&mut self, args: &[&str]) -> String {
        if self.database.backend == Backend::Postgres {
            return self.ok(args);
        }
        let server = self.server.take().expect("serving");
        let addr = server.addr.to_string();
        server.stop().await;
        let printed = self.ok(args);
        self.server = Some(TestServer::start_on(&self.database, &self.toml, &addr).await);
        printed
    }

    /// The JSON lines a list command printed.
    fn list(&mut self, args: &[&str]) -> Vec<Value> {
        self.ok(args)
            .lines()
            .map(|line| serde_json::from_str(line).expect("one JSON object per line"))
            .collect()
    }

    async fn call(&self, tool: &str) -> common::Reply {
        self.client
            .request("tools/call", json!({"name": tool, "arguments": {}}))
            .await
    }

    /// A call that must elicit; the URL of its one elicitation.
    async fn elicit(&self, tool: &str) -> String {
        let listed = elicitations(&self.call(tool).await);
        assert_eq!(listed.len(), 1, "{tool} elicits once: {listed:?}");
        url_of(&listed[0])
    }
}

fn id_of(url: &str) -> String {
    url.rsplit('/').next().expect("id").to_owned()
}

backend_test!(
    async fn the_operator_lists_and_ends_access(backend: Backend) {
        let mut s = setup(backend).await;

        // A sign-in through the fake provider, listed.
        let connect = s.elicit("me").await;
        let authorize = s.browser.continue_to_provider(&connect).await;
        let callback = s.browser.authorize(&authorize).await;
        assert_eq!(s.browser.get(&callback).await.status, StatusCode::OK);
        let table = s.ok(&["connections", "list"]);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 2, "a heading and alice's connection:\n{table}");
        assert!(lines[0].starts_with("PRINCIPAL") && lines[0].contains("SCOPES"));
        assert!(lines[1].contains("alice") && lines[1].contains("fake") && lines[1].contains("active"));
        let listed = s.list(&["connections", "list", "--principal", "alice", "--json"]);
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0]["provider"], "fake");
        assert_eq!(listed[0]["scopes"], json!(["read"]));
        s.refused(
            &["connections", "list", "--principal", "carol"],
            "carol has no connections",
        );

        // Revoked here and at the provider; the gated tool asks again.
        s.change(&["connections", "revoke", "--principal", "alice", "--provider", "fake"])
            .await;
        assert_eq!(s.fake.stats().revocations, 1, "the provider saw the revocation");
        // On PostgreSQL the replica learns of it from the NOTIFY, a moment later.
        let again = common::eventually("the tool asks again", async || {
            let listed = elicitations(&s.call("me").await);
            (listed.len() == 1).then(|| url_of(&listed[0]))
        })
        .await;
        assert_ne!(again, connect);
        s.refused(
            &["connections", "revoke", "--principal", "alice", "--provider", "fake"],
            "alice has no connection to fake",
        );

        // The new ask is pending; expiring it tells the client, which is asked afresh.
        let all = s.list(&["elicitations", "list", "--json"]);
        assert_eq!(all.len(), 2, "the completed sign-in and the new ask: {all:?}");
        assert_eq!(all[0]["id"], id_of(&again), "newest first");
        let pending = s.list(&["elicitations", "list", "--pending", "--json"]);
        assert_eq!(pending.len(), 1);
        assert_eq!(pending[0]["status"], "pending");
        s.change(&["elicitations", "expire", &id_of(&again)]).await;
        let mut stream = s.client.open_stream(None).await;
        // No stream was open before: the sign-in's completion comes first.
        assert_eq!(stream.next_completion().await, id_of(&connect));
        assert_eq!(stream.next_completion().await, id_of(&again));
        drop(stream);
        assert_ne!(s.elicit("me").await, again, "asked afresh");
        s.refused(&["elicitations", "expire", &id_of(&again)], "is expired already");
        s.refused(&["elicitations", "expire", "nope"], "is not an elicitation id");
        s.refused(
            &["elicitations", "expire", "0190e2a0-0000-7000-8000-000000000000"],
            "no elicitation",
        );

        // Saved form values deleted: the tool asks for them again.
        let form = s.elicit("openai_models").await;
        let page = s.browser.get(&form).await;
        let csrf = page.csrf();
        let fields = [
            ("csrf", csrf.as_str()),
            ("api_key", API_KEY),
            ("consent", "true"),
            ("region", "eu"),
            ("action", "submit"),
        ];
        let saved = s.browser.post_form(&form, &s.server().base(), &fields).await;
        assert_eq!(saved.status, StatusCode::OK, "{}", saved.body);
        assert_eq!(
            s.client.call("tools/call", json!({"name": "openai_models"})).await["isError"],
            false
        );
        s.change(&["forms", "delete", "--principal", "alice", "--form", "openai"])
            .await;
        s.elicit("openai_models").await;
        s.refused(
            &["forms", "delete", "--principal", "alice", "--form", "openai"],
            "alice has no saved values for form openai",
        );
        s.refused(
            &["forms", "delete", "--principal", "alice", "--form", "nope"],
            "no form \"nope\" is configured",
        );

        // The session, shown by the start of its id only, ended: its client gets 404.
        let session = s.client.session.clone().expect("a session");
        let sessions = s.list(&["sessions", "list", "--json"]);
        assert_eq!(sessions.len(), 1);
        assert_eq!(sessions[0]["principal"], "alice");
        assert_eq!(sessions[0]["client"], "gatehouse-tests");
        let shown = sessions[0]["session"].as_str().expect("shown").to_owned();
        assert!(session.starts_with(&shown) && shown.len() == 8);
        s.change(&["sessions", "end", &shown]).await;
        common::eventually("the session is gone", async || {
            (s.client.request("tools/list", json!({})).await.status == StatusCode::NOT_FOUND).then_some(())
        })
        .await;
        s.refused(&["sessions", "end", &shown], "no session");
        s.refused(&["sessions", "end", "not a session"], "is not a session");
        // One id in 64 starts with `-`, which is not an option here.
        s.refused(&["sessions", "end", "-Ov_PZeU"], "no session");
        s.ok(&["sessions", "list", "--limit", "1"]);
        assert!(!s.admin(&["sessions", "list", "--limit", "0"]).status.success());

        // Each change is an `admin` entry naming its command.
        s.server().state.audit.flush().await;
        let query = AuditQuery {
            principal: None,
            since: None,
            limit: 1000,
        };
        let trail = s.server().state.store.audit(&query).await.expect("audit");
        let mut commands: Vec<(String, String)> = trail
            .iter()
            .filter(|r| r.entry.action == AuditAction::Admin)
            .map(|r| {
                let command = r.entry.detail["command"].as_str().expect("command").to_owned();
                (command, r.entry.subject.clone())
            })
            .collect();
        commands.sort();
        assert_eq!(
            commands,
            [
                ("connections revoke".to_owned(), "fake".to_owned()),
                ("elicitations expire".to_owned(), id_of(&again)),
                ("forms delete".to_owned(), "openai".to_owned()),
                ("sessions end".to_owned(), shown.clone()),
            ]
        );

        // No secret in anything printed: tokens, the form's key, the whole session id.
        let stats = s.fake.stats();
        assert!(!stats.issued_access_tokens.is_empty());
        let secrets = stats
            .issued_access_tokens
            .iter()
            .chain(&stats.issued_refresh_tokens)
            .map(String::as_str)
            .chain([API_KEY, session.as_str()]);
        for secret in secrets {
            assert!(!s.printed.contains(secret), "{secret} printed");
        }
        s.server.take().expect("serving").stop().await;
    }
);

backend_test!(
    /// A client whose name holds a right-to-left override (which would reorder the rest of a
    /// terminal row) and an escape sequence: `audit` and the `admin` lists show them as code points.
    async fn names_from_clients_are_printed_with_bidi_and_control_characters_as_code_points(backend: Backend) {
        let mut s = setup(backend).await;
        let name = "Claude\u{202e}lanimret\u{1b}[2J";
        let mut client = s.server().client().with_user("x-forwarded-user", "mallory");
        let body = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {"elicitation": {"url": {}}},
            "clientInfo": {"name": name, "version": "1.0"}}});
        let reply = client.post_raw(&body, &[]).await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
        let session = reply.headers.get("mcp-session-id").expect("a session id");
        client.session = Some(session.to_str().expect("ascii").to_owned());
        assert_eq!(
            client.notify("notifications/initialized", json!({})).await,
            StatusCode::ACCEPTED
        );
        let asked = elicitations(
            &client
                .request("tools/call", json!({"name": "me", "arguments": {}}))
                .await,
        );
        assert_eq!(asked.len(), 1, "{asked:?}");
        s.server().state.audit.flush().await;

        let shown = "ClaudeU+202ElanimretU+001B[2J";
        for (command, args) in [
            ("audit", &[][..]),
            ("admin", &["sessions", "list"][..]),
            ("admin", &["elicitations", "list"][..]),
        ] {
            let output = s.gatehouse(command, args);
            assert!(
                output.status.success(),
                "{command} {args:?}: {}",
                String::from_utf8_lossy(&output.stderr)
            );
            let table = String::from_utf8_lossy(&output.stdout);
            assert!(
                !table.contains(['\u{202e}', '\u{1b}']) && table.contains(shown),
                "{command} {args:?}:\n{table}"
            );
        }
        s.server.take().expect("serving").stop().await;
    }
);
