//! The audit trail end to end, on PostgreSQL and SQLite: real sign-ins at the fake provider, a
//! form filled in, replaced and deleted, a decline, an expiry, a refresh, a refused token, a
//! disconnect and refused calls each leave their row, with who, what and from where, and no
//! secret anywhere in the trail. Then the `gatehouse audit` command reads it back.

mod common;

use std::process::Command;

use chrono::{Duration, Utc};
use common::fake_oauth::{FakeOptions, FakeProvider};
use common::{
    Backend, Browser, HEADER_IDENTITY, McpClient, Reply, TestDatabase, TestServer, captured_logs, elicitations, url_of,
};
use gatehouse::domain::Principal;
use gatehouse::store::{AuditAction, AuditEntry, AuditQuery, AuditRecord};
use reqwest::StatusCode;
use serde_json::{Value, json};

const BINARY: &str = env!("CARGO_BIN_EXE_gatehouse");

/// What the MCP client says it is (see `McpClient::initialize`).
const CLIENT_NAME: &str = "gatehouse-tests";
/// The address the proxy says the MCP client came from; the proxy itself is trusted.
const CLIENT_ADDRESS: &str = "198.51.100.7";
const API_KEY: &str = "sk-audit-0123456789-secret";
const NEW_API_KEY: &str = "sk-audit-9876543210-replaced";
const ORG_NAME: &str = "Org Never Logged";

struct Setup {
    fake: FakeProvider,
    database: TestDatabase,
    server: TestServer,
    client: McpClient,
    browser: Browser,
}

/// A tool only carol may use, so alice may not.
const ENG_ONLY: &str = r#"
[[tools]]
name = "eng_only"
description = "For engineers"
allow = { principal = ["carol"] }
http = { url = "http://127.0.0.1:9/" }
"#;

/// Header identity behind a proxy on loopback, Fake Hub (tokens that live one second, so every
/// call refreshes), the OpenAI key form and `eng_only`; alice's client is initialized.
async fn setup(backend: Backend) -> Setup {
    captured_logs();
    let fake = FakeProvider::start(FakeOptions {
        access_token_ttl: Some(1),
        ..FakeOptions::default()
    })
    .await;
    let database = TestDatabase::new(backend).await;
    let hub = fake.configure(include_str!("fixtures/fake_hub.toml"));
    let server = TestServer::start_addressed(&database, |addr| {
        let form = include_str!("fixtures/openai_form.toml").replace("GATEHOUSE", addr);
        format!("{HEADER_IDENTITY}\n{hub}\n{form}\n{ENG_ONLY}")
    })
    .await;
    let mut client = server
        .client()
        .with_user("x-forwarded-user", "alice")
        .with_header("x-forwarded-for", CLIENT_ADDRESS);
    client.initialize().await;
    Setup {
        fake,
        database,
        server,
        client,
        browser: Browser::as_user("x-forwarded-user", "alice"),
    }
}

impl Setup {
    async fn call(&self, tool: &str, arguments: Value) -> Reply {
        self.client
            .request("tools/call", json!({"name": tool, "arguments": arguments}))
            .await
    }

    /// A call that must elicit; the URL of its one elicitation.
    async fn elicit(&self, tool: &str) -> String {
        let listed = elicitations(&self.call(tool, json!({})).await);
        assert_eq!(listed.len(), 1, "{tool} elicits once: {listed:?}");
        url_of(&listed[0])
    }

    /// Posts a page's form with its token and `fields`, pressing `action`.
    async fn post(&self, url: &str, fields: &[(&str, &str)], action: &str) -> common::Page {
        let page = self.browser.get(url).await;
        assert_eq!(page.status, StatusCode::OK, "{url}: {}", page.body);
        let csrf = page.csrf();
        let mut pairs = vec![("csrf", csrf.as_str())];
        pairs.extend_from_slice(fields);
        pairs.push(("action", action));
        self.browser.post_form(url, &self.server.base(), &pairs).await
    }

    /// The whole trail, oldest first, once everything recorded so far is written.
    async fn trail(&self) -> Vec<AuditRecord> {
        self.server.state.audit.flush().await;
        let query = AuditQuery {
            principal: None,
            since: None,
            limit: 1000,
        };
        let mut records = self.server.state.store.audit(&query).await.expect("audit");
        records.reverse();
        records
    }
}

fn key_fields(key: &str) -> [(&str, &str); 4] {
    [
        ("api_key", key),
        ("org_name", ORG_NAME),
        ("consent", "true"),
        ("region", "eu"),
    ]
}

/// The one entry with this action and subject.
fn entry<'a>(trail: &'a [AuditRecord], action: AuditAction, subject: &str) -> &'a AuditEntry {
    let found: Vec<&AuditEntry> = trail
        .iter()
        .map(|r| &r.entry)
        .filter(|e| e.action == action && e.subject == subject)
        .collect();
    assert_eq!(
        found.len(),
        1,
        "one {} of {subject} in {:#?}",
        action.as_str(),
        trail
            .iter()
            .map(|r| (r.entry.action.as_str(), &r.entry.subject))
            .collect::<Vec<_>>()
    );
    found[0]
}

/// The elicitation id at the end of a page URL.
fn id_of(url: &str) -> String {
    url.rsplit('/').next().expect("id").to_owned()
}

fn query_param(url: &str, name: &str) -> String {
    url::Url::parse(url)
        .expect("url")
        .query_pairs()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
        .unwrap_or_else(|| panic!("{name} in {url}"))
}

backend_test!(
    async fn every_flow_leaves_its_row_and_no_secret(backend: Backend) {
        let s = setup(backend).await;
        let alice = Principal::parse("alice").expect("principal");

        // A refused call, and a sign-in through the fake provider (code and state kept, to look
        // for them in the trail).
        let connect = s.elicit("me").await;
        let authorize = s.browser.continue_to_provider(&connect).await;
        let callback = s.browser.authorize(&authorize).await;
        let (code, state) = (query_param(&callback, "code"), query_param(&callback, "state"));
        assert_eq!(s.browser.get(&callback).await.status, StatusCode::OK);
        // A tool alice may not use is refused like an unknown one.
        let forbidden = s.call("eng_only", json!({})).await;
        assert!(forbidden.body["error"].is_object(), "{}", forbidden.body);
        // Tokens live a second: this call refreshes first.
        let me = s.client.call("tools/call", json!({"name": "me"})).await;
        assert_eq!(me["isError"], false, "{me}");

        // A form filled in, replaced on /connections, deleted there; then one cancelled.
        let form = s.elicit("openai_models").await;
        let saved = s.post(&form, &key_fields(API_KEY), "submit").await;
        assert_eq!(saved.status, StatusCode::OK, "{}", saved.body);
        let stored = format!("{}/connections/forms/openai", s.server.base());
        let replaced = s.post(&stored, &key_fields(NEW_API_KEY), "submit").await;
        assert_eq!(replaced.status, StatusCode::SEE_OTHER, "{}", replaced.body);
        let connections = format!("{}/connections", s.server.base());
        let deleted = s.post(&connections, &[("form", "openai")], "delete-form").await;
        assert_eq!(deleted.status, StatusCode::OK, "{}", deleted.body);
        let declined = s.elicit("openai_models").await;
        assert_eq!(s.post(&declined, &[], "cancel").await.status, StatusCode::OK);

        // A step-up nobody finishes expires: asked again before the sweeper came, and swept.
        let step_up = s.elicit("me_write").await;
        s.database.expire_elicitations().await;
        let asked_again = s.elicit("me_write").await;
        assert_ne!(asked_again, step_up);
        s.database.expire_elicitations().await;
        s.server.state.gate.sweep().await.expect("sweep");

        // The provider refuses the refresh: the connection breaks. Then a disconnect.
        s.fake.revoke_everything();
        let broken = s.elicit("me").await;
        let arguments = json!({"provider": "fake"});
        let disconnected = s
            .client
            .call("tools/call", json!({"name": "disconnect", "arguments": arguments}))
            .await;
        assert_eq!(disconnected["isError"], false, "{disconnected}");

        let trail = s.trail().await;
        for record in &trail {
            assert_eq!(record.entry.principal, alice);
        }
        let created = entry(&trail, AuditAction::ElicitationCreated, &id_of(&connect));
        assert_eq!(created.client_address.as_deref(), Some(CLIENT_ADDRESS));
        assert_eq!(created.client_name.as_deref(), Some(CLIENT_NAME));
        assert_eq!(created.detail, json!({"requirement": "fake:read"}));
        let completed = entry(&trail, AuditAction::ElicitationCompleted, &id_of(&connect));
        assert_eq!(
            completed.client_address.as_deref(),
            Some("127.0.0.1"),
            "the browser came straight from the trusted proxy"
        );
        assert_eq!(
            completed.client_name.as_deref(),
            Some(CLIENT_NAME),
            "the client that asked"
        );
        let connected = entry(&trail, AuditAction::ConnectionCreated, "fake");
        assert_eq!(connected.detail["scopes"], json!(["read"]));
        assert_eq!(connected.client_name.as_deref(), Some(CLIENT_NAME));
        let refreshed = trail
            .iter()
            .find(|r| r.entry.action == AuditAction::ConnectionRefreshed)
            .expect("a refresh");
        assert_eq!(refreshed.entry.subject, "fake");
        assert_eq!(refreshed.entry.client_address.as_deref(), Some(CLIENT_ADDRESS));
        let refused = trail
            .iter()
            .find(|r| r.entry.action == AuditAction::CallRefused && r.entry.subject == "me")
            .expect("a refused call");
        assert_eq!(refused.entry.detail["elicitations"], json!([id_of(&connect)]));
        assert_eq!(refused.entry.client_address.as_deref(), Some(CLIENT_ADDRESS));
        assert!(
            trail
                .iter()
                .any(|r| r.entry.action == AuditAction::CallAllowed && r.entry.subject == "me")
        );

        let form_saved = entry(&trail, AuditAction::FormSaved, "openai");
        assert_eq!(
            form_saved.detail,
            json!({"fields": ["consent", "org_name", "region"], "secret_fields": ["api_key"]})
        );
        entry(&trail, AuditAction::ElicitationCompleted, &id_of(&form));
        let form_replaced = entry(&trail, AuditAction::FormReplaced, "openai");
        assert_eq!(
            form_replaced.client_name, None,
            "replaced on /connections, no client asked"
        );
        assert_eq!(form_replaced.client_address.as_deref(), Some("127.0.0.1"));
        entry(&trail, AuditAction::FormDeleted, "openai");
        entry(&trail, AuditAction::ElicitationDeclined, &id_of(&declined));
        for step_up in [&step_up, &asked_again] {
            let expired = entry(&trail, AuditAction::ElicitationExpired, &id_of(step_up));
            assert_eq!(expired.client_address, None, "nobody's request ended it");
            assert_eq!(expired.client_name.as_deref(), Some(CLIENT_NAME));
        }
        let broke = entry(&trail, AuditAction::ConnectionBroken, "fake");
        assert_eq!(broke.detail["reason"], "the provider refused the refresh");
        entry(&trail, AuditAction::ElicitationCreated, &id_of(&broken));
        let revoked = entry(&trail, AuditAction::ConnectionRevoked, "fake");
        assert_eq!(revoked.detail, json!({"revocation": "revoked"}));
        assert_eq!(revoked.client_address.as_deref(), Some(CLIENT_ADDRESS));
        assert!(
            !trail
                .iter()
                .any(|r| r.entry.action == AuditAction::CallAllowed && r.entry.subject == "disconnect"),
            "a tool that needs nothing (disconnect) is no access decision: not on the trail"
        );
        let not_permitted = entry(&trail, AuditAction::CallRefused, "eng_only");
        assert_eq!(not_permitted.detail, json!({"reason": "not permitted"}));
        // `admin` is tests/admin.rs's, `approval.decided` tests/approvals.rs's.
        let elsewhere = [
            AuditAction::Admin,
            AuditAction::ElicitationFailed,
            AuditAction::ApprovalDecided,
        ];
        for action in AuditAction::ALL {
            if !elsewhere.contains(&action) {
                assert!(
                    trail.iter().any(|r| r.entry.action == action),
                    "{} recorded",
                    action.as_str()
                );
            }
        }

        // No secret anywhere in the trail: tokens, form values, the code, the state.
        let everything = format!("{trail:?}");
        let stats = s.fake.stats();
        assert!(!stats.issued_access_tokens.is_empty() && !stats.issued_refresh_tokens.is_empty());
        let secrets = stats
            .issued_access_tokens
            .iter()
            .chain(&stats.issued_refresh_tokens)
            .map(String::as_str)
            .chain([API_KEY, NEW_API_KEY, ORG_NAME, code.as_str(), state.as_str()]);
        for secret in secrets {
            assert!(!everything.contains(secret), "{secret} in the audit trail");
        }
        s.server.stop().await;
    }
);

backend_test!(
    /// The admin API writes an `admin` entry naming the command; a recorder whose database is
    /// gone logs the failure and returns (the action it records is not undone or failed).
    async fn admin_actions_are_recorded_and_failed_writes_only_logged(backend: Backend) {
        let s = setup(backend).await;
        let alice = Principal::parse("alice").expect("principal");
        let origin = gatehouse::audit::Origin::unknown();
        s.server
            .state
            .audit
            .admin(&alice, "connections revoke", "fake", &origin, json!({"by": "ops"}));
        let trail = s.trail().await;
        let admin = entry(&trail, AuditAction::Admin, "fake");
        assert_eq!(admin.detail, json!({"by": "ops", "command": "connections revoke"}));

        s.database.execute("DROP TABLE audit").await;
        s.server
            .state
            .audit
            .record(&alice, AuditAction::Admin, "fake", &origin, json!({}));
        s.server.state.audit.flush().await;
        assert!(common::logged_text().contains("audit entry not written"));
        s.server.stop().await;
    }
);

/// Runs `gatehouse audit` with `args` against the database.
fn audit_command(database: &TestDatabase, args: &[&str]) -> std::process::Output {
    let dir = tempfile::tempdir().expect("dir");
    Command::new(BINARY)
        .arg("audit")
        .args(args)
        .current_dir(dir.path())
        .env_clear()
        .env("GATEHOUSE_DATABASE__URL", &database.url)
        // The deployment's configuration, as an operator runs the command with it.
        .env("GATEHOUSE_SECRETS__KEYS", common::TEST_KEY)
        .output()
        .expect("run gatehouse audit")
}

fn stdout(output: &std::process::Output) -> String {
    assert!(
        output.status.success(),
        "gatehouse audit: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

backend_test!(
    async fn the_audit_command_prints_the_trail_newest_first(backend: Backend) {
        let s = setup(backend).await;
        let connect = s.elicit("me").await;
        let bob = s
            .server
            .client()
            .with_user("x-forwarded-user", "bob")
            .with_header("x-forwarded-for", "203.0.113.9");
        let mut bob = bob;
        bob.initialize().await;
        let bobs = elicitations(&bob.request("tools/call", json!({"name": "me", "arguments": {}})).await);
        assert_eq!(bobs.len(), 1);
        // An entry from two hours ago, for --since.
        let old = AuditEntry {
            at: Utc::now() - Duration::hours(2),
            principal: Principal::parse("alice").expect("principal"),
            action: AuditAction::Admin,
            subject: "old".to_owned(),
            client_address: None,
            client_name: None,
            detail: json!({"command": "sessions end"}),
        };
        s.server.state.store.append_audit(&[old]).await.expect("append");
        s.server.state.audit.flush().await;
        let database = &s.database;

        let table = stdout(&audit_command(database, &[]));
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 1 + 5, "a heading and five entries:\n{table}");
        for heading in ["AT", "PRINCIPAL", "ACTION", "SUBJECT", "ADDRESS", "CLIENT", "DETAIL"] {
            assert!(lines[0].contains(heading), "{table}");
        }
        assert!(
            lines[1].contains("bob") && lines[1].contains("call.refused"),
            "newest first:\n{table}"
        );
        assert!(
            lines[2].contains("bob") && lines[2].contains("elicitation.created") && lines[2].contains("203.0.113.9")
        );
        assert!(lines[4].contains(&id_of(&connect)) && lines[4].contains(CLIENT_NAME));
        assert!(lines[5].contains("old") && lines[5].contains("admin"), "{table}");

        let json = stdout(&audit_command(database, &["--principal", "alice", "--json"]));
        let entries: Vec<Value> = json
            .lines()
            .map(|line| serde_json::from_str(line).expect("one JSON object per line"))
            .collect();
        assert_eq!(entries.len(), 3, "{json}");
        assert!(entries.iter().all(|e| e["principal"] == "alice"));
        assert_eq!(entries[0]["action"], "call.refused");
        assert_eq!(entries[0]["client_address"], CLIENT_ADDRESS);
        assert_eq!(entries[1]["action"], "elicitation.created");
        assert_eq!(entries[1]["subject"], id_of(&connect));
        assert_eq!(entries[1]["client_name"], CLIENT_NAME);
        assert_eq!(entries[2]["subject"], "old");

        let recent = stdout(&audit_command(database, &["--since", "1h", "--json"]));
        assert_eq!(recent.lines().count(), 4, "the old entry is left out:\n{recent}");
        assert!(!recent.contains("\"old\""));
        let newest = stdout(&audit_command(database, &["--limit", "1", "--json"]));
        assert_eq!(newest.lines().count(), 1);
        assert!(newest.contains("bob"));
        let nobody = stdout(&audit_command(database, &["--principal", "carol"]));
        assert_eq!(nobody.lines().count(), 1, "only the heading");

        let bad = audit_command(database, &["--since", "soon"]);
        assert!(!bad.status.success());
        assert!(String::from_utf8_lossy(&bad.stderr).contains("not a duration"));
        let zero = audit_command(database, &["--limit", "0"]);
        assert!(!zero.status.success());
        s.server.stop().await;
    }
);

backend_test!(
    /// A batch of more entries than one statement writes is written whole, every field kept; on
    /// PostgreSQL, a batch the database refuses part-way (its text type refuses a NUL byte)
    /// leaves none of its entries.
    async fn a_batch_of_entries_is_written_whole_or_not_at_all(backend: Backend) {
        let (_database, store) = common::records::open(backend).await;
        let principal = Principal::parse("batch").expect("principal");
        let start = Utc::now() - Duration::minutes(10);
        let entry = |n: i64| AuditEntry {
            at: start + Duration::seconds(n),
            principal: principal.clone(),
            action: if n % 2 == 0 {
                AuditAction::CallAllowed
            } else {
                AuditAction::CallRefused
            },
            subject: format!("tool-{n}"),
            client_address: (n % 3 == 0).then(|| format!("192.0.2.{n}")),
            client_name: (n % 5 == 0).then(|| format!("client {n}")),
            detail: json!({"n": n}),
        };
        let batch: Vec<AuditEntry> = (0..70).map(entry).collect();
        store.append_audit(&batch).await.expect("append");
        let query = AuditQuery {
            principal: Some(principal.clone()),
            since: None,
            limit: 1000,
        };
        let trail = store.audit(&query).await.expect("list");
        assert_eq!(trail.len(), batch.len());
        for (record, written) in trail.iter().zip(batch.iter().rev()) {
            assert_eq!((record.entry.at - written.at).num_milliseconds(), 0, "{record:?}");
            let read = AuditEntry {
                at: written.at,
                ..record.entry.clone()
            };
            assert_eq!(&read, written);
        }

        if matches!(backend, Backend::Postgres) {
            let mut refused: Vec<AuditEntry> = (100..140).map(entry).collect();
            refused[39].subject = "nul \0 byte".into();
            assert!(store.append_audit(&refused).await.is_err());
            let after = store.audit(&query).await.expect("list");
            assert_eq!(after.len(), batch.len(), "none of the refused batch is written");
        }
    }
);
