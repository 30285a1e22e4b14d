//! `gatehouse doctor`, the real binary against real things: a running server (or none), the fake
//! OAuth provider, SQLite and PostgreSQL. A good deployment passes with exit 0; each broken thing
//! is reported as a problem naming its configuration key, with exit 1.

mod common;

use std::path::Path;

use common::caddy::{Caddy, CaddyRelease, adapt};
use common::config_keys::KnownKeys;
use common::fake_idp::{FakeIdp, FakeIdpOptions};
use common::fake_oauth::{FakeOptions, FakeProvider};
use common::{Backend, TEST_KEY, TestDatabase, TestServer, free_port};
use serde_json::Value;

const BINARY: &str = env!("CARGO_BIN_EXE_gatehouse");

/// What one doctor run said: its exit code and its findings (`--json`).
struct Diagnosis {
    code: i32,
    report: Value,
}

impl Diagnosis {
    fn checks(&self) -> &[Value] {
        self.report["checks"].as_array().map_or(&[], Vec::as_slice)
    }

    /// The one finding of `check`.
    fn finding(&self, check: &str) -> &Value {
        self.checks()
            .iter()
            .find(|f| f["check"] == check)
            .unwrap_or_else(|| panic!("no finding for {check}: {}", self.report))
    }

    /// Every problem's key.
    fn problem_keys(&self) -> Vec<&str> {
        self.checks()
            .iter()
            .filter(|f| f["status"] == "problem")
            .filter_map(|f| f["key"].as_str())
            .collect()
    }
}

/// Runs `gatehouse doctor` (with `--json` when `json`) in a clean environment plus `env`, with
/// `toml` as its configuration file.
async fn doctor_output(dir: &Path, toml: &str, env: &[(&str, &str)], json: bool) -> std::process::Output {
    let file = dir.join("gatehouse.toml");
    std::fs::write(&file, toml).expect("write config");
    let mut args = vec!["--config".to_owned(), file.display().to_string(), "doctor".to_owned()];
    if json {
        args.push("--json".to_owned());
    }
    tokio::process::Command::new(BINARY)
        .args(&args)
        .current_dir(dir)
        .env_clear()
        .envs(env.iter().copied())
        .output()
        .await
        .expect("run gatehouse doctor")
}

async fn doctor(toml: &str, env: &[(&str, &str)]) -> Diagnosis {
    let dir = tempfile::tempdir().expect("dir");
    let output = doctor_output(dir.path(), toml, env, true).await;
    let report = serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "--json prints JSON ({e}): {}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    });
    let diagnosis = Diagnosis {
        code: output.status.code().expect("exit code"),
        report,
    };
    every_key_named_exists(&diagnosis);
    diagnosis
}

/// Every finding's key, and every key its hint and message name, is a key of the configuration.
fn every_key_named_exists(diagnosis: &Diagnosis) {
    let known = KnownKeys::new();
    for finding in diagnosis.checks() {
        if let Some(key) = finding["key"].as_str() {
            assert!(known.knows(key), "the finding's key is no configuration key: {finding}");
        }
        for text in [&finding["hint"], &finding["message"]] {
            let unknown = known.unknown_in(text.as_str().unwrap_or_default());
            assert!(
                unknown.is_empty(),
                "names {unknown:?}, no configuration keys: {finding}"
            );
        }
    }
}

/// `[server] bind` (and `public_url` when given) before `rest`.
fn server_toml(bind: &str, public_url: Option<&str>, rest: &str) -> String {
    let public_url = public_url
        .map(|url| format!("public_url = \"{url}\"\n"))
        .unwrap_or_default();
    format!("[server]\nbind = \"{bind}\"\n{public_url}\n{rest}")
}

fn database_env(database: &TestDatabase) -> [(&str, &str); 2] {
    [
        ("GATEHOUSE_DATABASE__URL", database.url.as_str()),
        ("GATEHOUSE_SECRETS__KEYS", TEST_KEY),
    ]
}

/// A migrated SQLite database (a server started on it, and stopped) and a free loopback address
/// for server.bind, where nothing listens.
async fn migrated_database_and_free_bind() -> (TestDatabase, String) {
    let database = TestDatabase::new(Backend::Sqlite).await;
    TestServer::start(&database, "").await.stop().await;
    (database, format!("127.0.0.1:{}", free_port()))
}

backend_test!(
    /// A running server, the fake provider, a migrated database and good keys: every check is ok,
    /// public_url reaches the running server, and doctor exits 0, in both output forms.
    async fn a_good_deployment_passes(backend: Backend) {
        let database = TestDatabase::new(backend).await;
        let fake = FakeProvider::start(FakeOptions::default()).await;
        let providers = fake.configure(include_str!("fixtures/fake_provider.toml"));
        let server = TestServer::start(&database, &providers).await;
        let toml = server_toml(&server.addr.to_string(), None, &providers);

        let diagnosis = doctor(&toml, &database_env(&database)).await;

        assert_eq!(diagnosis.code, 0, "{}", diagnosis.report);
        assert_eq!(diagnosis.report["problems"], 0, "{}", diagnosis.report);
        assert_eq!(diagnosis.report["warnings"], 0, "{}", diagnosis.report);
        for check in [
            "configuration",
            "key ring",
            "database",
            "migrations",
            "provider fake authorize_url",
            "provider fake token_url",
            "public url",
        ] {
            assert_eq!(diagnosis.finding(check)["status"], "ok", "{}", diagnosis.report);
        }
        let public = diagnosis.finding("public url")["message"].as_str().expect("message");
        assert!(public.contains("the server on"), "{public}");

        let dir = tempfile::tempdir().expect("dir");
        let text = doctor_output(dir.path(), &toml, &database_env(&database), false).await;
        assert!(text.status.success());
        let lines = String::from_utf8(text.stdout).expect("utf-8");
        assert!(lines.lines().all(|line| !line.starts_with("problem")), "{lines}");
        assert!(lines.contains("ok       public url: "), "{lines}");
        server.stop().await;
    }
);

/// With nothing on server.bind, doctor listens there itself with its own nonce, finds public_url
/// reaching it, and releases the address when done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_no_server_doctor_listens_on_bind_itself() {
    let (database, bind) = migrated_database_and_free_bind().await;

    let diagnosis = doctor(&server_toml(&bind, None, ""), &database_env(&database)).await;

    assert_eq!(diagnosis.code, 0, "{}", diagnosis.report);
    let public = diagnosis.finding("public url");
    assert_eq!(public["status"], "ok", "{public}");
    assert!(
        public["message"]
            .as_str()
            .is_some_and(|m| m.contains("doctor's own listener")),
        "{public}"
    );
    tokio::net::TcpListener::bind(&bind)
        .await
        .expect("doctor released server.bind");
}

/// A public_url with a path prefix is checked at the prefixed /healthz/instance: it reaches a
/// running server, and doctor's own listener when nothing runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_public_url_with_a_path_prefix_reaches_the_instance() {
    let (database, bind) = migrated_database_and_free_bind().await;
    let toml = server_toml(&bind, Some(&format!("http://{bind}/gatehouse/")), "");
    let own = doctor(&toml, &database_env(&database)).await;
    assert_eq!(own.code, 0, "{}", own.report);
    let message = own.finding("public url")["message"]
        .as_str()
        .expect("message")
        .to_owned();
    assert!(message.contains("doctor's own listener"), "{message}");

    let server = TestServer::start_addressed(&database, |addr| {
        format!("[server]\npublic_url = \"http://{addr}/gatehouse\"\n")
    })
    .await;
    let addr = server.addr.to_string();
    let toml = server_toml(&addr, Some(&format!("http://{addr}/gatehouse")), "");
    let running = doctor(&toml, &database_env(&database)).await;
    assert_eq!(running.code, 0, "{}", running.report);
    let message = running.finding("public url")["message"]
        .as_str()
        .expect("message")
        .to_owned();
    assert!(message.contains("the server on"), "{message}");
    server.stop().await;
}

/// A database URL where nothing listens is a problem naming database.url.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_database_names_database_url() {
    let bind = format!("127.0.0.1:{}", free_port());
    let url = format!("postgres://postgres@127.0.0.1:{}/gatehouse", free_port());

    let diagnosis = doctor(
        &server_toml(&bind, None, ""),
        &[("GATEHOUSE_DATABASE__URL", &url), ("GATEHOUSE_SECRETS__KEYS", TEST_KEY)],
    )
    .await;

    assert_eq!(diagnosis.code, 1, "{}", diagnosis.report);
    assert_eq!(diagnosis.problem_keys(), ["database.url"], "{}", diagnosis.report);
}

backend_test!(
    /// A database without migrations, with migrate_on_start = false: a problem naming the key and
    /// every pending migration.
    async fn pending_migrations_are_named(backend: Backend) {
        let database = TestDatabase::new(backend).await;
        let bind = format!("127.0.0.1:{}", free_port());
        let toml = server_toml(&bind, None, "[database]\nmigrate_on_start = false\n");

        let diagnosis = doctor(&toml, &database_env(&database)).await;

        assert_eq!(diagnosis.code, 1, "{}", diagnosis.report);
        assert_eq!(
            diagnosis.problem_keys(),
            ["database.migrate_on_start"],
            "{}",
            diagnosis.report
        );
        let message = diagnosis.finding("migrations")["message"].as_str().expect("message");
        assert!(message.starts_with("migrations not applied: 1, 2, "), "{message}");
    }
);

/// A provider whose token endpoint refuses connections: a problem naming that provider's token_url.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusing_provider_endpoint_names_its_key() {
    let database = TestDatabase::new(Backend::Sqlite).await;
    let fake = FakeProvider::start(FakeOptions::default()).await;
    let providers = fake.configure(include_str!("fixtures/fake_provider.toml")).replace(
        &format!("{}/token", fake.base_url),
        &format!("http://127.0.0.1:{}/token", free_port()),
    );
    let server = TestServer::start(&database, &providers).await;

    let diagnosis = doctor(
        &server_toml(&server.addr.to_string(), None, &providers),
        &database_env(&database),
    )
    .await;

    assert_eq!(diagnosis.code, 1, "{}", diagnosis.report);
    assert_eq!(
        diagnosis.problem_keys(),
        ["providers[0].token_url"],
        "{}",
        diagnosis.report
    );
    assert_eq!(diagnosis.finding("provider fake authorize_url")["status"], "ok");
    server.stop().await;
}

/// public_url pointing at another running instance: the nonces differ, a problem naming
/// server.public_url.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn public_url_at_another_instance_names_server_public_url() {
    let database = TestDatabase::new(Backend::Sqlite).await;
    let this = TestServer::start(&database, "").await;
    let other = TestServer::start(&database, "").await;

    let toml = server_toml(&this.addr.to_string(), Some(&other.base()), "");
    let diagnosis = doctor(&toml, &database_env(&database)).await;

    assert_eq!(diagnosis.code, 1, "{}", diagnosis.report);
    assert_eq!(diagnosis.problem_keys(), ["server.public_url"], "{}", diagnosis.report);
    let message = diagnosis.finding("public url")["message"].as_str().expect("message");
    assert!(message.contains("another gatehouse instance"), "{message}");
    other.stop().await;
    this.stop().await;
}

/// `identity.mode = "oauth"`: the fake identity provider's metadata and key set are ok; an issuer
/// where nothing listens is a problem naming identity.issuer, and so is an upstream's url.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_identity_provider_and_upstreams_are_checked() {
    let (database, bind) = migrated_database_and_free_bind().await;
    let idp = FakeIdp::start(FakeIdpOptions::default()).await;
    let identity =
        |issuer: &str| format!("[identity]\nmode = \"oauth\"\nissuer = \"{issuer}\"\nclient_id = \"gatehouse\"\n");

    let good = doctor(
        &server_toml(&bind, None, &identity(&idp.issuer())),
        &database_env(&database),
    )
    .await;
    assert_eq!(good.code, 0, "{}", good.report);
    assert_eq!(good.finding("identity provider")["status"], "ok", "{}", good.report);
    assert_eq!(
        good.finding("identity provider jwks_uri")["status"],
        "ok",
        "{}",
        good.report
    );

    let closed = format!("http://127.0.0.1:{}", free_port());
    let upstream = format!("[[upstreams]]\nid = \"tracker\"\nurl = \"{closed}/mcp\"\n");
    let toml = server_toml(&bind, None, &format!("{}\n{upstream}", identity(&closed)));
    let bad = doctor(&toml, &database_env(&database)).await;
    assert_eq!(bad.code, 1, "{}", bad.report);
    assert_eq!(
        bad.problem_keys(),
        ["identity.issuer", "upstreams[0].url"],
        "{}",
        bad.report
    );
}

/// A key that does not decode: a problem naming its place in secrets.keys.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unparsable_key_names_its_index() {
    let (database, bind) = migrated_database_and_free_bind().await;

    let diagnosis = doctor(
        &server_toml(&bind, None, ""),
        &[
            ("GATEHOUSE_DATABASE__URL", &database.url),
            ("GATEHOUSE_SECRETS__KEYS", "not-a-key"),
        ],
    )
    .await;

    assert_eq!(diagnosis.code, 1, "{}", diagnosis.report);
    assert_eq!(diagnosis.problem_keys(), ["secrets.keys[0]"], "{}", diagnosis.report);
}

/// A configuration that does not load is itself the finding, naming the key; nothing else runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configuration_that_does_not_load_is_the_finding() {
    let diagnosis = doctor("[server]\nbind = \"nowhere\"\n", &[]).await;

    assert_eq!(diagnosis.code, 1, "{}", diagnosis.report);
    assert_eq!(diagnosis.problem_keys(), ["server.bind"], "{}", diagnosis.report);
    assert_eq!(diagnosis.checks().len(), 1, "{}", diagnosis.report);
}

/// A file that is not TOML is a problem of no key (the file is named by --config, no key of it),
/// and nothing else is checked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_that_is_not_toml_is_a_problem_without_a_key() {
    let diagnosis = doctor("[server\nbind = ", &[]).await;

    assert_eq!(diagnosis.code, 1, "{}", diagnosis.report);
    let finding = diagnosis.finding("configuration");
    assert_eq!(finding["status"], "problem", "{finding}");
    assert_eq!(finding["key"], Value::Null, "{finding}");
    assert_eq!(diagnosis.checks().len(), 1, "{}", diagnosis.report);
}

/// Stored principals that header mode's normal form makes one user (`Dave`, `dave`) are a
/// problem naming identity.mode; nothing is merged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stored_principals_that_collide_are_reported() {
    let (database, bind) = migrated_database_and_free_bind().await;
    database
        .execute(
            "INSERT INTO audit (at, principal, action, subject, detail)
             VALUES (0, 'Dave', 'x', 's', '{}'), (0, 'dave', 'x', 's', '{}'), (0, 'erin', 'x', 's', '{}')",
        )
        .await;
    let header = "trusted_proxies = [\"127.0.0.1/32\"]\n[identity]\nmode = \"header\"\n";

    let diagnosis = doctor(&server_toml(&bind, None, header), &database_env(&database)).await;

    let finding = diagnosis.finding("principals");
    assert_eq!(finding["status"], "problem", "{}", diagnosis.report);
    assert_eq!(finding["key"], "identity.mode");
    let message = finding["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("Dave, dave (all `dave`)") && !message.contains("erin"),
        "{message}"
    );
    assert_eq!(
        database
            .query_count("SELECT COUNT(*) FROM audit WHERE principal = 'Dave'")
            .await,
        1,
        "nothing merged"
    );
    let local = doctor(&server_toml(&bind, None, ""), &database_env(&database)).await;
    assert_eq!(local.finding("principals")["status"], "problem", "local mode folds too");
}

backend_test!(
    /// `HTTPS_PROXY` in the environment: doctor says it is ignored for what remote servers name,
    /// and where those requests go instead.
    async fn an_environment_proxy_is_said_to_be_ignored_for_remote_servers(backend: Backend) {
        let database = TestDatabase::new(backend).await;
        let mut env = database_env(&database).to_vec();
        env.push(("HTTPS_PROXY", "http://127.0.0.1:9"));
        let toml = server_toml(&format!("127.0.0.1:{}", free_port()), None, "");
        let diagnosis = doctor(&toml, &env).await;
        let message = diagnosis.finding("outbound proxy")["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(message.contains("HTTPS_PROXY is set: ignored"), "{}", diagnosis.report);
        assert!(message.contains("no proxy"), "{message}");

        let toml = server_toml(
            &format!("127.0.0.1:{}", free_port()),
            None,
            "[outbound]\nproxy = \"http://proxy.internal:3128\"\n",
        );
        let diagnosis = doctor(&toml, &env).await;
        let message = diagnosis.finding("outbound proxy")["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(message.contains("http://proxy.internal:3128"), "{message}");
    }
);

/// A stdio upstream whose program is not found on PATH, or may not be run, is a problem naming
/// its `command`; one that is found is ok and says where.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdio_upstreams_program_that_is_not_found_names_its_command() {
    let (database, bind) = migrated_database_and_free_bind().await;
    let dir = tempfile::tempdir().expect("dir");
    let plain = dir.path().join("plain-file");
    std::fs::write(&plain, "#!/bin/sh\n").expect("write a file without execute permission");
    let upstreams = format!(
        "[[upstreams]]\nid = \"notes\"\ncommand = [\"gatehouse-test-no-such-program\", \"--stdio\"]\n\
         [[upstreams]]\nid = \"plain\"\ncommand = [{:?}]\n\
         [[upstreams]]\nid = \"shell\"\ncommand = [\"sh\", \"-c\", \"exit 0\"]\n",
        plain.display().to_string()
    );

    let diagnosis = doctor(&server_toml(&bind, None, &upstreams), &database_env(&database)).await;

    assert_eq!(diagnosis.code, 1, "{}", diagnosis.report);
    assert_eq!(
        diagnosis.problem_keys(),
        ["upstreams[0].command", "upstreams[1].command"],
        "{}",
        diagnosis.report
    );
    let notes = diagnosis.finding("upstream notes")["message"]
        .as_str()
        .unwrap_or_default();
    assert!(
        notes.contains("`gatehouse-test-no-such-program` is not found"),
        "{notes}"
    );
    let plain = diagnosis.finding("upstream plain")["message"]
        .as_str()
        .unwrap_or_default();
    assert!(plain.contains("cannot be run"), "{plain}");
    let shell = diagnosis.finding("upstream shell");
    assert_eq!(shell["status"], "ok", "{shell}");
    assert!(shell["message"].as_str().is_some_and(|m| m.ends_with("/sh")), "{shell}");
}

/// Behind the deployment chapter's Caddy (Debian's, with deploy/caddy-2.6/Caddyfile: basic auth on
/// every request), public_url answers 401: reachable, behind sign-in, and not a problem; without
/// the proxy's sign-in doctor cannot compare the instance, and says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn public_url_behind_the_proxys_basic_auth_is_reachable_behind_sign_in() {
    let Some(caddy) = CaddyRelease::Debian.binary().await else {
        return;
    };
    let database = TestDatabase::new(Backend::Sqlite).await;
    let server = TestServer::start(&database, "").await;
    let port = free_port();
    let caddyfile = adapt(
        &CaddyRelease::Debian.caddyfile("Caddyfile"),
        port,
        &[&server.addr.to_string()],
    );
    let proxy = Caddy::start(&caddy, &caddyfile, port).await;

    let toml = server_toml(&server.addr.to_string(), Some(&proxy.base), "");
    let diagnosis = doctor(&toml, &database_env(&database)).await;

    assert_eq!(diagnosis.code, 0, "{}", diagnosis.report);
    let public = diagnosis.finding("public url");
    assert_eq!(public["status"], "ok", "{public}");
    let message = public["message"].as_str().unwrap_or_default();
    assert!(message.contains("reachable, behind sign-in (HTTP 401)"), "{message}");
    drop(proxy);
    server.stop().await;
}
