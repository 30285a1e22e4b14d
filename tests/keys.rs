//! Key rotation end to end: `gatehouse keys rotate` re-encrypts every stored secret (connection
//! tokens, PKCE verifiers, form secrets and call-scoped answers) under a new key while two
//! replicas serve on PostgreSQL (and with the server stopped on SQLite), an interrupted run is
//! resumed, `keys status` counts what each key protects, and after the old key is removed every
//! connection and form secret still works. Also the store's compare-and-swap on its own.

mod common;

use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use common::fake_oauth::{FakeOptions, FakeProvider};
use common::replica::{BINARY, Replica};
use common::upstream::{self, Log};
use common::{
    Backend, Browser, HEADER_IDENTITY, McpClient, TEST_KEY, TestDatabase, WAIT, elicitations, free_port, url_of,
};
use gatehouse::store::{FormValuesRecord, SealedRowKey, SealedTable};
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

/// The key everything is sealed with first (the test servers' key).
const KEY_A: &str = TEST_KEY;
/// The key rotated to.
const KEY_B: &str = "a2V5LUItZm9yLWdhdGVob3VzZS1yb3RhdGlvbi10ZXM=";

const USER_HEADER: &str = "x-forwarded-user";
/// Users who sign in and save a form; `dee` only starts a sign-in (a pending flow).
const USERS: [&str; 3] = ["ann", "bob", "cy"];
const PENDING_USER: &str = "dee";
/// The call whose confirmation code `ann` answers before the rotation and uses after it.
const TRANSFER_TO: &str = "zed";
const ANN_CODE: &str = "otp-ann-424242";

fn api_key(user: &str) -> String {
    format!("key-of-{user}-1234")
}

/// A database, the fake provider, the recording upstream and the replicas' configuration: header
/// identity, the fake provider's `me` and the forms of tests/forms.rs (`keyed` needs the
/// user-scoped `key` form with a secret; `transfer` a call-scoped secret).
struct Setup {
    database: TestDatabase,
    fake: FakeProvider,
    /// What the upstream of the form tools saw.
    seen: Log,
    config: String,
    /// The port of the first replica, whose address is the public URL.
    port: u16,
    public_url: String,
}

impl Setup {
    async fn new(backend: Backend) -> Self {
        let database = TestDatabase::new(backend).await;
        let fake = FakeProvider::start(FakeOptions::default()).await;
        let (upstream, seen) = upstream::recording().await;
        let config = format!(
            "{HEADER_IDENTITY}\n{}\n{}",
            fake.configure(include_str!("fixtures/fake_provider.toml")),
            include_str!("fixtures/forms.toml").replace("UPSTREAM", &upstream.to_string())
        );
        let port = free_port();
        Self {
            database,
            fake,
            seen,
            config,
            port,
            public_url: format!("http://127.0.0.1:{port}"),
        }
    }

    /// A replica on `port` with the key ring `ring`.
    async fn start(&self, port: u16, ring: &str) -> Replica {
        Replica::start(&self.database.url, &self.config, port, &self.public_url, ring).await
    }
}

/// Runs `gatehouse keys ARGS` against the database with the key ring `keys`.
async fn keys(database: &TestDatabase, ring: &str, args: &[&str]) -> std::process::Output {
    keys_command(database, ring, args)
        .output()
        .await
        .expect("run gatehouse keys")
}

fn keys_command(database: &TestDatabase, ring: &str, args: &[&str]) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(BINARY);
    command
        .env_clear()
        .arg("keys")
        .args(args)
        .env("GATEHOUSE_DATABASE__URL", &database.url)
        .env("GATEHOUSE_SECRETS__KEYS", ring)
        .stdin(Stdio::null())
        .kill_on_drop(true);
    command
}

fn stdout(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// `keys status --json`: for each fingerprint, its configured place (if any) and rows per table.
async fn status(database: &TestDatabase, ring: &str) -> Vec<Value> {
    let output = keys(database, ring, &["status", "--json"]).await;
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let status: Value = serde_json::from_slice(&output.stdout).expect("status JSON");
    status["keys"].as_array().expect("keys").clone()
}

/// The rows per table of the key configured as `secrets.keys[index]`.
fn rows_of(status: &[Value], index: usize) -> Value {
    let place = format!("secrets.keys[{index}]");
    status
        .iter()
        .find(|key| key["configured"] == place.as_str())
        .unwrap_or_else(|| panic!("{place} in {status:?}"))["rows"]
        .clone()
}

fn total(rows: &Value) -> u64 {
    rows.as_object()
        .expect("rows")
        .values()
        .map(|n| n.as_u64().expect("count"))
        .sum()
}

/// What the users stored, and how to reach it again.
struct Stored {
    /// Each user's MCP client (its session lives in the database).
    clients: Vec<(String, McpClient)>,
    /// The pending sign-in of [`PENDING_USER`]: its browser and the provider's authorize URL.
    pending: (Browser, String),
}

/// Every user signs in at the fake provider and saves the `key` form (through `replicas`, in
/// turn); `ann` answers a call-scoped code; [`PENDING_USER`] starts a sign-in and stops at the
/// provider.
async fn store_secrets(replicas: &[&Replica], fake: &FakeProvider, origin: &str) -> Stored {
    let mut clients = Vec::new();
    for (n, user) in USERS.iter().enumerate() {
        let replica = replicas[n % replicas.len()];
        let mut client = McpClient::new(&replica.mcp()).with_user(USER_HEADER, user);
        client.initialize().await;
        let browser = Browser::as_user(USER_HEADER, user);

        let asked = elicitations(&client.request("tools/call", json!({"name": "me"})).await);
        fake.set_next_user(user);
        let page = browser.sign_in(&url_of(&asked[0])).await;
        assert_eq!(page.status, StatusCode::OK, "{}", page.body);

        let asked = elicitations(&client.request("tools/call", json!({"name": "keyed"})).await);
        let key = api_key(user);
        submit(
            &browser,
            &url_of(&asked[0]),
            origin,
            &[("team", "ops"), ("api_key", &key)],
        )
        .await;
        clients.push(((*user).to_owned(), client));
    }

    let (_, ann) = &clients[0];
    let arguments = json!({"name": "transfer", "arguments": {"to": TRANSFER_TO}});
    let asked = elicitations(&ann.request("tools/call", arguments).await);
    submit(
        &Browser::as_user(USER_HEADER, USERS[0]),
        &url_of(&asked[0]),
        origin,
        &[("code", ANN_CODE)],
    )
    .await;

    let mut client = McpClient::new(&replicas[0].mcp()).with_user(USER_HEADER, PENDING_USER);
    client.initialize().await;
    let asked = elicitations(&client.request("tools/call", json!({"name": "me"})).await);
    let browser = Browser::as_user(USER_HEADER, PENDING_USER);
    let authorize = browser.continue_to_provider(&url_of(&asked[0])).await;
    Stored {
        clients,
        pending: (browser, authorize),
    }
}

/// Fills in a form page with `fields` and submits it; the page must say it was saved.
async fn submit(browser: &Browser, url: &str, origin: &str, fields: &[(&str, &str)]) {
    let page = browser.get(url).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    let csrf = page.csrf();
    let mut posted = vec![("csrf", csrf.as_str())];
    posted.extend_from_slice(fields);
    posted.push(("action", "submit"));
    let sent = browser.post_form(url, origin, &posted).await;
    assert_eq!(sent.status, StatusCode::OK, "{}", sent.body);
}

/// Calls `tool` as the client's user; it must run (no sign-in or form asked for).
async fn runs(client: &McpClient, tool: &str) -> Value {
    let result = client.call("tools/call", json!({"name": tool})).await;
    assert_eq!(result["isError"], false, "{tool} for a stored secret: {result}");
    result
}

/// Each user's `me` answers as that user, and `keyed` sends that user's key, through `replica`.
async fn every_secret_works(stored: &Stored, replica: &Replica, seen: &Log) {
    for (user, client) in &stored.clients {
        let me = runs(&replica.client(client), "me").await;
        assert_eq!(me["structuredContent"]["login"], user.as_str(), "{me}");
        seen.lock().expect("log").clear();
        runs(&replica.client(client), "keyed").await;
        let sent = seen
            .lock()
            .expect("log")
            .last()
            .cloned()
            .expect("keyed reached the upstream");
        assert_eq!(
            sent.header("authorization"),
            Some(format!("Bearer {}", api_key(user)).as_str())
        );
    }
}

/// Calls gated tools on every replica in turn until `stop`; panics on the first that fails.
fn keep_calling(
    stored: &Stored,
    replicas: &[&Replica],
    stop: Arc<AtomicBool>,
    calls: Arc<AtomicU64>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let mut tasks = Vec::new();
    for replica in replicas {
        for (_, client) in &stored.clients {
            let client = replica.client(client);
            let (stop, calls) = (stop.clone(), calls.clone());
            tasks.push(tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    for tool in ["me", "keyed"] {
                        runs(&client, tool).await;
                        calls.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }));
        }
    }
    tasks
}

/// Starts `keys rotate` pausing after every one-row batch, reads its output up to the first
/// batch's progress line, and kills it there (SIGKILL: no chance to finish anything).
async fn interrupted_rotation(database: &TestDatabase, ring: &str) {
    let mut child = keys_command(database, ring, &["rotate", "--batch-size", "1", "--pause", "5s"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn keys rotate");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let first_batch = tokio::time::timeout(WAIT, async {
        while let Some(line) = lines.next_line().await.expect("read") {
            if line.starts_with("connections: ") {
                return line;
            }
        }
        panic!("keys rotate ended before its first batch");
    })
    .await
    .expect("the first batch in time");
    assert_eq!(first_batch, "connections: 1 row re-encrypted");
    child.kill().await.expect("SIGKILL");
}

/// Everything stored before the rotation is counted under A (`index` in the ring), as the test
/// stored it: a connection and a form per user, a flow per sign-in begun, one answer.
fn assert_everything_under(status: &[Value], index: usize) {
    let users = USERS.len() as u64;
    assert_eq!(
        rows_of(status, index),
        json!({
            "connections": users,
            "oauth_flows": users + 1,
            "form_values": users,
            "form_answers": 1,
            "oauth_registrations": 0,
            "elicitations": 0
        }),
        "{status:?}"
    );
}

/// How many rows [`store_secrets`] stores.
fn everything() -> u64 {
    3 * USERS.len() as u64 + 2
}

/// After the old key is gone, on `replica`: the answered code is used by its call, and the
/// pending sign-in completes (its verifier opens).
async fn answers_and_flows_work(stored: &Stored, replica: &Replica, fake: &FakeProvider, seen: &Log) {
    let (_, ann) = &stored.clients[0];
    let transfer = replica
        .client(ann)
        .call(
            "tools/call",
            json!({"name": "transfer", "arguments": {"to": TRANSFER_TO}}),
        )
        .await;
    assert_eq!(transfer["isError"], false, "{transfer}");
    let sent = seen
        .lock()
        .expect("log")
        .last()
        .cloned()
        .expect("transfer reached the upstream");
    assert_eq!(sent.header("authorization"), Some(format!("OTP {ANN_CODE}").as_str()));

    let (browser, authorize) = &stored.pending;
    fake.set_next_user(PENDING_USER);
    let callback = browser.authorize(authorize).await;
    let page = browser.get(&callback).await;
    assert_eq!(page.status, StatusCode::OK, "the flow's verifier opens: {}", page.body);
    let mut dee = McpClient::new(&replica.mcp()).with_user(USER_HEADER, PENDING_USER);
    dee.initialize().await;
    runs(&dee, "me").await;
}

/// Makes every access token due, so the next call refreshes it first (run with the servers
/// stopped: they cache connections).
async fn make_tokens_due(database: &TestDatabase) {
    database
        .execute(match database.backend {
            Backend::Postgres => "UPDATE connections SET expires_at = now()",
            Backend::Sqlite => "UPDATE connections SET expires_at = CAST(strftime('%s', 'now') AS INTEGER) * 1000",
        })
        .await;
}

/// Every user's call refreshes the connection with its stored refresh token, then works.
async fn refresh_tokens_work(stored: &Stored, replica: &Replica, fake: &FakeProvider, seen: &Log) {
    let refreshes = fake.stats().refreshes;
    every_secret_works(stored, replica, seen).await;
    assert_eq!(
        fake.stats().refreshes,
        refreshes + USERS.len(),
        "each connection refreshed once"
    );
}

postgres_test!(
    async fn rotation_while_two_replicas_serve_keeps_every_connection_and_form_secret() {
        let setup = Setup::new(Backend::Postgres).await;
        let Setup {
            database, fake, seen, ..
        } = &setup;
        let (port_a, port_b) = (setup.port, free_port());
        let public_url = &setup.public_url;
        let start = async |port: u16, ring: &str| setup.start(port, ring).await;

        let (a, b) = (start(port_a, KEY_A).await, start(port_b, KEY_A).await);
        let stored = store_secrets(&[&a, &b], fake, public_url).await;
        assert_everything_under(&status(database, KEY_A).await, 0);
        let output = keys(database, KEY_A, &["rotate"]).await;
        assert!(output.status.success());
        assert!(
            stdout(&output).starts_with("Nothing to do: secrets.keys has one key"),
            "{}",
            stdout(&output)
        );

        // B first, A still there to open what it sealed, on both replicas.
        a.kill().await;
        b.kill().await;
        let both = format!("{KEY_B},{KEY_A}");
        let (a, b) = (start(port_a, &both).await, start(port_b, &both).await);
        let before = status(database, &both).await;
        assert_eq!(total(&rows_of(&before, 0)), 0, "nothing sealed by B yet: {before:?}");
        assert_everything_under(&before, 1);

        // A run stopped after its first batch leaves some rows under each key; both serve.
        interrupted_rotation(database, &both).await;
        let midway = status(database, &both).await;
        assert_eq!(total(&rows_of(&midway, 0)), 1, "{midway:?}");
        assert_eq!(
            total(&rows_of(&midway, 1)),
            total(&rows_of(&before, 1)) - 1,
            "{midway:?}"
        );
        every_secret_works(&stored, &a, seen).await;
        every_secret_works(&stored, &b, seen).await;

        // The resumed run, while clients keep calling gated tools on both replicas.
        let (stop, calls) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(0)));
        let callers = keep_calling(&stored, &[&a, &b], stop.clone(), calls.clone());
        let output = keys(database, &both, &["rotate", "--batch-size", "2"]).await;
        let log = stdout(&output);
        assert!(
            output.status.success(),
            "{log}{}",
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(log.contains("form_answers: 1 row re-encrypted"), "{log}");
        assert!(log.contains("Done: "), "{log}");
        stop.store(true, Ordering::Relaxed);
        for caller in callers {
            caller.await.expect("every gated call during the rotation succeeded");
        }
        assert!(calls.load(Ordering::Relaxed) > 0);
        let after = status(database, &both).await;
        assert_eq!(total(&rows_of(&after, 1)), 0, "A protects nothing: {after:?}");
        assert_everything_under(&after, 0);

        // A removed from the ring, replicas restarted: nothing needs a new sign-in or form.
        a.kill().await;
        b.kill().await;
        let (a, b) = (start(port_a, KEY_B).await, start(port_b, KEY_B).await);
        let only_b = status(database, KEY_B).await;
        assert_eq!(only_b.len(), 1, "no row under a key outside the ring: {only_b:?}");
        every_secret_works(&stored, &b, seen).await;
        every_secret_works(&stored, &a, seen).await;
        answers_and_flows_work(&stored, &a, fake, seen).await;
        a.kill().await;
        b.kill().await;
        make_tokens_due(database).await;
        let a = start(port_a, KEY_B).await;
        refresh_tokens_work(&stored, &a, fake, seen).await;
    }
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotation_on_sqlite_with_the_server_stopped() {
    let setup = Setup::new(Backend::Sqlite).await;
    let Setup {
        database, fake, seen, ..
    } = &setup;
    let public_url = &setup.public_url;
    let start = async |ring: &str| setup.start(setup.port, ring).await;

    let server = start(KEY_A).await;
    let stored = store_secrets(&[&server], fake, public_url).await;
    server.kill().await;

    let both = format!("{KEY_B},{KEY_A}");
    assert_everything_under(&status(database, &both).await, 1);
    interrupted_rotation(database, &both).await;
    assert_eq!(total(&rows_of(&status(database, &both).await, 0)), 1);
    let output = keys(database, &both, &["rotate"]).await;
    assert!(output.status.success(), "{}", stdout(&output));
    let after = status(database, &both).await;
    assert_eq!(total(&rows_of(&after, 1)), 0, "{after:?}");
    assert_everything_under(&after, 0);

    let server = start(KEY_B).await;
    every_secret_works(&stored, &server, seen).await;
    answers_and_flows_work(&stored, &server, fake, seen).await;
    server.kill().await;
    make_tokens_due(database).await;
    let server = start(KEY_B).await;
    refresh_tokens_work(&stored, &server, fake, seen).await;
}

/// A value sealed by a key no longer in the ring is counted under its fingerprint as unknown, left
/// as it is by a rotation, which says so and fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn values_no_configured_key_opens_are_reported_and_left() {
    let setup = Setup::new(Backend::Sqlite).await;
    let database = &setup.database;
    let server = setup.start(setup.port, KEY_A).await;
    store_secrets(&[&server], &setup.fake, &setup.public_url).await;
    server.kill().await;

    let third = "dGhpcmQta2V5LWZvci1nYXRlaG91c2Uta2V5cy10ZXM=";
    let ring = format!("{third},{KEY_B}");
    let status = status(database, &ring).await;
    let unknown: Vec<&Value> = status.iter().filter(|key| key["configured"].is_null()).collect();
    assert_eq!(unknown.len(), 1, "{status:?}");
    assert_eq!(
        unknown[0]["total"],
        everything(),
        "every row is under A, which is not configured"
    );
    assert_eq!(unknown[0]["fingerprint"].as_str().map(str::len), Some(8));

    let output = keys(database, &ring, &["rotate"]).await;
    assert!(!output.status.success());
    let expected = format!("Done: 0 rows re-encrypted, {} no configured key opens", everything());
    assert!(stdout(&output).contains(&expected), "{}", stdout(&output));
    let expected = format!("{} rows were left as they are", everything());
    assert!(String::from_utf8_lossy(&output.stderr).contains(&expected));
}

backend_test!(
    /// The store's walk and compare-and-swap: a row changed after it was read is not overwritten,
    /// and is found again by the next walk; a row re-sealed drops out of it.
    async fn a_row_changed_after_it_was_read_is_not_overwritten(backend: Backend) {
        let database = TestDatabase::new(backend).await;
        let opened = gatehouse::store::connect(&database.url, 2).await.expect("connect");
        let store = opened.store;
        store.migrate().await.expect("migrate");
        let (old, new) = (b"\x01aaaa".as_slice(), b"\x01bbbb".as_slice());
        let save = async |principal: &str, secrets: &[u8]| {
            let record = FormValuesRecord {
                principal: gatehouse::domain::Principal::parse(principal).expect("principal"),
                form: "key".into(),
                fields: json!({}),
                secrets: Some(secrets.to_vec()),
                created_at: chrono::Utc::now(),
                updated_at: chrono::Utc::now(),
            };
            store
                .save_form_values(&record, None, &json!({}), chrono::Utc::now())
                .await
                .expect("save");
        };
        for principal in ["p1", "p2", "p3"] {
            save(principal, &[old, b"-sealed-", principal.as_bytes()].concat()).await;
        }
        let batch = store
            .sealed_batch(SealedTable::FormValues, new, None, 2)
            .await
            .expect("batch");
        let keys: Vec<&SealedRowKey> = batch.iter().map(|row| &row.key).collect();
        assert_eq!(keys.len(), 2);

        // p1 changes (a replica saved the form again) between the read and the swap.
        let changed = [old, b"-changed"].concat();
        save("p1", &changed).await;
        let resealed = |tail: &str| Some([new, tail.as_bytes()].concat());
        assert!(!store.reseal(&batch[0], &[resealed("-p1")]).await.expect("reseal"));
        assert!(store.reseal(&batch[1], &[resealed("-p2")]).await.expect("reseal"));

        let rest = store
            .sealed_batch(SealedTable::FormValues, new, Some(keys[1]), 10)
            .await
            .expect("batch");
        assert_eq!(rest.len(), 1, "p3 is after p2");
        let again = store
            .sealed_batch(SealedTable::FormValues, new, None, 10)
            .await
            .expect("batch");
        assert_eq!(again.len(), 2, "p1 (changed, still old) and p3; p2 is done: {again:?}");
        assert_eq!(again[0].values, vec![Some(changed)], "p1 holds the replica's write");

        let counts = store
            .count_stamps(SealedTable::FormValues, new.len())
            .await
            .expect("count");
        let counts: Vec<(Vec<u8>, u64)> = counts.into_iter().map(|c| (c.stamp, c.rows)).collect();
        assert_eq!(counts, vec![(old.to_vec(), 2), (new.to_vec(), 1)]);
    }
);
