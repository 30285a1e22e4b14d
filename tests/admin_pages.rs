//! The operator pages (`/admin`) end to end over HTTP, on PostgreSQL and SQLite, in `header` mode
//! with a groups header: `[admin] allow = { groups = ["ops"] }` lets bob in and no one else (403 on
//! every page, GET and POST); a post without its CSRF token or from another origin changes
//! nothing; bob revokes alice's connection (the fake provider records the revocation, the tool
//! asks again), expires her pending request (her client is told), and filters and pages through
//! the audit trail, where each change is an `admin` entry naming him. Headless Chromium does the
//! same by clicking through the pages; with `GATEHOUSE_UPDATE_SCREENSHOTS=1` its screenshots
//! become the book's (docs/src/screenshots/admin-*.png). `oauth` does the same in `oauth` mode,
//! where the sign-in's claims name the operators.

mod common;
#[path = "admin_pages/oauth.rs"]
mod oauth;

use common::browser::{artifact_dir, browser_available, walk};
use common::fake_oauth::{FakeOptions, FakeProvider};
use common::{Backend, Browser, McpClient, TestDatabase, TestServer, elicitations, url_of};
use gatehouse::store::{AuditAction, AuditSearch};
use reqwest::StatusCode;
use serde_json::json;

/// Header identity with a groups header, and the operators: the group `ops`.
const IDENTITY: &str = r#"
[identity]
mode = "header"
groups_header = "X-Forwarded-Groups"
[server]
trusted_proxies = ["127.0.0.1/32"]
[admin]
allow = { groups = ["ops"] }
"#;

/// A user-scoped form with a secret, and a tool that needs it.
const FORM: &str = include_str!("fixtures/tracker_form.toml");

const TRACKER_TOKEN: &str = "tracker-secret-0123456789";

const VIEWS: [&str; 6] = [
    "/admin",
    "/admin/users",
    "/admin/elicitations",
    "/admin/upstreams",
    "/admin/audit",
    "/admin/health",
];

struct Setup {
    fake: FakeProvider,
    _database: TestDatabase,
    server: TestServer,
    /// alice's MCP client.
    client: McpClient,
    /// alice's browser (no groups).
    alice: Browser,
    /// bob's browser, in `ops`.
    bob: Browser,
}

async fn setup(backend: Backend) -> Setup {
    let fake = FakeProvider::start(FakeOptions::default()).await;
    let database = TestDatabase::new(backend).await;
    let hub = fake.configure(&format!("{}\n{FORM}", include_str!("fixtures/fake_hub.toml")));
    let server = TestServer::start(&database, &format!("{IDENTITY}\n{hub}")).await;
    let mut client = server.client().with_user("x-forwarded-user", "alice");
    client.initialize().await;
    Setup {
        fake,
        _database: database,
        client,
        alice: Browser::as_user("x-forwarded-user", "alice").with_header("x-forwarded-groups", "eng"),
        bob: Browser::as_user("x-forwarded-user", "bob").with_header("x-forwarded-groups", "eng, ops"),
        server,
    }
}

impl Setup {
    fn at(&self, path: &str) -> String {
        format!("{}{path}", self.server.base())
    }

    /// alice's call of `me`: the URL of the one elicitation it asks for.
    async fn ask(&self) -> String {
        let reply = self
            .client
            .request("tools/call", json!({"name": "me", "arguments": {}}))
            .await;
        let listed = elicitations(&reply);
        assert_eq!(listed.len(), 1, "{listed:?}");
        url_of(&listed[0])
    }

    /// alice signs in at the fake provider through her elicitation.
    async fn connect_alice(&self) {
        let url = self.ask().await;
        let done = self.alice.sign_in(&url).await;
        assert_eq!(done.status, StatusCode::OK, "{}", done.body);
    }

    async fn connected(&self) -> usize {
        self.server
            .state
            .store
            .list_connections(
                None,
                gatehouse::store::ConnectionOrder::Principal,
                gatehouse::store::Window::first(10),
            )
            .await
            .expect("connections")
            .len()
    }

    async fn trail(&self, search: AuditSearch) -> Vec<gatehouse::store::AuditRecord> {
        self.server.state.audit.flush().await;
        self.server.state.store.search_audit(&search).await.expect("audit")
    }
}

fn id_of(url: &str) -> String {
    url.rsplit('/').next().expect("id").to_owned()
}

fn count(body: &str, needle: &str) -> usize {
    body.matches(needle).count()
}

backend_test!(
    /// Only operators see the pages; a forged or cross-site post changes nothing.
    async fn only_operators_may_and_forged_posts_change_nothing(backend: Backend) {
        let s = setup(backend).await;
        s.connect_alice().await;
        // A pending request, so the requests view has a form (and a token) too.
        let reply = s
            .client
            .request("tools/call", json!({"name": "me_write", "arguments": {}}))
            .await;
        assert_eq!(elicitations(&reply).len(), 1);
        let origin = s.server.base();

        for view in VIEWS {
            let page = s.alice.get(&s.at(view)).await;
            assert_eq!(page.status, StatusCode::FORBIDDEN, "alice GET {view}");
            assert!(page.body.contains("Operators only"), "{}", page.body);
            let page = s.bob.get(&s.at(view)).await;
            assert_eq!(page.status, StatusCode::OK, "bob GET {view}: {}", page.body);
            assert!(page.body.contains("Operator: bob"), "{view}: {}", page.body);
        }
        // alice posting with a token she cannot have, and with bob's: both refused before anything.
        let bobs = s.bob.get(&s.at("/admin/users")).await.csrf();
        for view in VIEWS {
            let fields = [
                ("csrf", bobs.as_str()),
                ("action", "revoke"),
                ("principal", "alice"),
                ("provider", "fake"),
            ];
            let page = s.alice.post_form(&s.at(view), &origin, &fields).await;
            assert_eq!(page.status, StatusCode::FORBIDDEN, "alice POST {view}");
        }
        // Nor anyone without groups.
        let outsider = Browser::as_user("x-forwarded-user", "carol");
        assert_eq!(outsider.get(&s.at("/admin")).await.status, StatusCode::FORBIDDEN);
        assert_eq!(s.connected().await, 1);

        // bob without a token, with a token of another view, from another origin: refused.
        let fields = [("action", "revoke"), ("principal", "alice"), ("provider", "fake")];
        let page = s.bob.post_form(&s.at("/admin/users"), &origin, &fields).await;
        assert_eq!(page.status, StatusCode::BAD_REQUEST, "no token: {}", page.body);
        let elicitations_token = s.bob.get(&s.at("/admin/elicitations")).await.csrf();
        let page = s
            .bob
            .post_form(
                &s.at("/admin/users"),
                &origin,
                &[("csrf", elicitations_token.as_str()), fields[0], fields[1], fields[2]],
            )
            .await;
        assert_eq!(page.status, StatusCode::FORBIDDEN, "another view's token");
        let page = s
            .bob
            .post_form(
                &s.at("/admin/users"),
                "https://evil.example",
                &[("csrf", bobs.as_str()), fields[0], fields[1], fields[2]],
            )
            .await;
        assert_eq!(page.status, StatusCode::FORBIDDEN, "another origin");
        assert_eq!(s.connected().await, 1, "nothing was revoked");
        assert_eq!(s.fake.stats().revocations, 0);
        let admin = AuditSearch {
            action: Some(AuditAction::Admin),
            limit: 10,
            ..AuditSearch::default()
        };
        assert!(s.trail(admin).await.is_empty(), "nothing on the trail");
    }
);

backend_test!(
    /// Without `[admin]` nobody may, however grouped; `allow` may name principals themselves.
    async fn without_an_admin_section_nobody_may(backend: Backend) {
        let database = TestDatabase::new(backend).await;
        let header = "[identity]\nmode = \"header\"\ngroups_header = \"X-Forwarded-Groups\"\n[server]\ntrusted_proxies = [\"127.0.0.1/32\"]\n";
        let server = TestServer::start(&database, header).await;
        let bob = Browser::as_user("x-forwarded-user", "bob").with_header("x-forwarded-groups", "ops");
        for view in VIEWS {
            let page = bob.get(&format!("{}{view}", server.base())).await;
            assert_eq!(page.status, StatusCode::FORBIDDEN, "{view}");
        }
        server.stop().await;
        let named = format!("{header}[admin]\nallow = {{ principal = [\"bob\"] }}\n");
        let server = TestServer::start(&database, &named).await;
        let page = bob.get(&format!("{}/admin/health", server.base())).await;
        assert_eq!(page.status, StatusCode::OK, "{}", page.body);
        assert!(page.body.contains("secrets.keys[0] (encrypts)"), "{}", page.body);
        assert!(page.body.contains("migrations"), "{}", page.body);
        let alice = Browser::as_user("x-forwarded-user", "alice").with_header("x-forwarded-groups", "ops");
        assert_eq!(
            alice.get(&format!("{}/admin", server.base())).await.status,
            StatusCode::FORBIDDEN
        );
        server.stop().await;
    }
);

backend_test!(
    /// bob revokes alice's connection and expires her request through the pages; the trail shows
    /// it, filtered and paged.
    async fn an_operator_revokes_expires_and_reads_the_trail(backend: Backend) {
        let s = setup(backend).await;
        s.connect_alice().await;
        let origin = s.server.base();

        // The users view lists alice's connection; Revoke revokes it at the provider too.
        let users = s.bob.get(&s.at("/admin/users?sort=provider")).await;
        assert!(
            users.body.contains("alice") && users.body.contains("fake"),
            "{}",
            users.body
        );
        let fields = [
            ("csrf", users.csrf()),
            ("action", "revoke".to_owned()),
            ("principal", "alice".to_owned()),
            ("provider", "fake".to_owned()),
        ];
        let fields: Vec<(&str, &str)> = fields.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let revoked = s.bob.post_form(&s.at("/admin/users"), &origin, &fields).await;
        assert_eq!(revoked.status, StatusCode::OK, "{}", revoked.body);
        assert!(revoked.body.contains("revoked it there"), "{}", revoked.body);
        assert_eq!(s.fake.stats().revocations, 1, "the provider saw the revocation");
        assert_eq!(s.connected().await, 0);

        // alice is asked again; bob expires that request and her client is told.
        let again = common::eventually("the tool asks again", async || {
            let reply = s
                .client
                .request("tools/call", json!({"name": "me", "arguments": {}}))
                .await;
            let listed = elicitations(&reply);
            (listed.len() == 1).then(|| url_of(&listed[0]))
        })
        .await;
        let mut stream = s.client.open_stream(None).await;
        // The first sign-in's completion was queued before any stream was open.
        stream.next_completion().await;
        let pending = s.bob.get(&s.at("/admin/elicitations")).await;
        assert!(pending.body.contains(&id_of(&again)), "{}", pending.body);
        let expired = s
            .bob
            .post_form(
                &s.at("/admin/elicitations"),
                &origin,
                &[
                    ("csrf", pending.csrf().as_str()),
                    ("action", "expire"),
                    ("id", id_of(&again).as_str()),
                ],
            )
            .await;
        assert_eq!(expired.status, StatusCode::OK, "{}", expired.body);
        assert!(expired.body.contains("its client was told"), "{}", expired.body);
        assert_eq!(stream.next_completion().await, id_of(&again));
        assert!(!expired.body.contains(&format!("<code>{}</code>", id_of(&again))));
        drop(stream);

        // Both changes are `admin` entries naming bob, from his address.
        let admin = s
            .trail(AuditSearch {
                action: Some(AuditAction::Admin),
                limit: 10,
                ..AuditSearch::default()
            })
            .await;
        let mut commands: Vec<String> = admin
            .iter()
            .map(|r| {
                assert_eq!(r.entry.detail["operator"], "bob", "{:?}", r.entry);
                assert_eq!(r.entry.principal.as_str(), "alice");
                assert!(r.entry.client_address.is_some(), "{:?}", r.entry);
                r.entry.detail["command"].as_str().expect("command").to_owned()
            })
            .collect();
        commands.sort();
        assert_eq!(commands, ["connections revoke", "elicitations expire"]);

        // The trail filtered by principal and action.
        let page = s
            .bob
            .get(&s.at("/admin/audit?principal=alice&action=connection.revoked"))
            .await;
        assert_eq!(page.status, StatusCode::OK);
        assert_eq!(count(&page.body, "<code>connection.revoked</code>"), 1, "{}", page.body);
        assert_eq!(count(&page.body, "<code>call.refused</code>"), 0);
        let page = s.bob.get(&s.at("/admin/audit?principal=bob")).await;
        assert!(page.body.contains("No entries match."), "{}", page.body);
        let page = s.bob.get(&s.at("/admin/audit?since=2000-01-01&until=2000-01-02")).await;
        assert!(page.body.contains("No entries match."), "{}", page.body);
        let page = s.bob.get(&s.at("/admin/audit?since=yesterday")).await;
        assert!(page.body.contains("is not a time"), "{}", page.body);

        // Paging: 60 refused calls are more than a page of 50.
        for _ in 0..60 {
            s.client
                .request("tools/call", json!({"name": "me", "arguments": {}}))
                .await;
        }
        let refused = s
            .trail(AuditSearch {
                action: Some(AuditAction::CallRefused),
                limit: 1000,
                ..AuditSearch::default()
            })
            .await;
        let total = refused.len();
        assert!(total > 50, "{total}");
        let first = s.bob.get(&s.at("/admin/audit?action=call.refused")).await;
        assert_eq!(count(&first.body, "<code>call.refused</code>"), 50);
        let next = first
            .body
            .split("href=\"")
            .find_map(|rest| {
                let href = rest.split('"').next()?;
                href.contains("page=2").then(|| common::unescape(href))
            })
            .expect("a link to page 2");
        assert!(next.contains("action=call.refused"), "{next}");
        let second = s.bob.get(&format!("{}{next}", s.server.base())).await;
        assert_eq!(count(&second.body, "<code>call.refused</code>"), total - 50);
        assert!(!second.body.contains("page=3"), "no third page");
        s.server.stop().await;
    }
);

backend_test!(
    /// bob sees alice's saved answers by field name only and deletes them (the tool asks again),
    /// and ends her session (her client gets 404).
    async fn an_operator_deletes_saved_answers_and_ends_a_session(backend: Backend) {
        let s = setup(backend).await;
        s.server
            .fill_in_token(&s.client, "alice", "tracker_me", TRACKER_TOKEN)
            .await;
        let origin = s.server.base();
        let page = s.bob.get(&s.at("/admin/users?principal=alice")).await;
        assert_eq!(page.status, StatusCode::OK);
        assert!(
            page.body.contains("Tracker token") && page.body.contains("<code>token</code>"),
            "{}",
            page.body
        );
        assert!(!page.body.contains(TRACKER_TOKEN), "a value is never shown");
        let session = s.client.session.clone().expect("a session");
        let shown = &session[..8];
        assert!(page.body.contains(&format!("<code>{shown}</code>")), "{}", page.body);
        assert!(!page.body.contains(&session), "never the whole session id");

        let deleted = s
            .bob
            .post_form(
                &s.at("/admin/users"),
                &origin,
                &[
                    ("csrf", page.csrf().as_str()),
                    ("action", "delete-form"),
                    ("principal", "alice"),
                    ("form", "tracker"),
                ],
            )
            .await;
        assert_eq!(deleted.status, StatusCode::OK, "{}", deleted.body);
        assert!(
            common::unescape(&deleted.body).contains("Deleted alice's answers to tracker."),
            "{}",
            deleted.body
        );
        let reply = s
            .client
            .request("tools/call", json!({"name": "tracker_me", "arguments": {}}))
            .await;
        assert_eq!(elicitations(&reply).len(), 1, "asked again");

        let ended = s
            .bob
            .post_form(
                &s.at("/admin/users"),
                &origin,
                &[
                    ("csrf", deleted.csrf().as_str()),
                    ("action", "end-session"),
                    ("principal", "alice"),
                    ("session", shown),
                ],
            )
            .await;
        assert_eq!(ended.status, StatusCode::OK, "{}", ended.body);
        assert!(
            common::unescape(&ended.body).contains(&format!("Ended alice's session {shown}.")),
            "{}",
            ended.body
        );
        assert!(ended.body.contains("No live sessions."), "{}", ended.body);
        common::eventually("the session is gone", async || {
            (s.client.request("tools/list", json!({})).await.status == StatusCode::NOT_FOUND).then_some(())
        })
        .await;
        // Another principal's session is not ended by naming its start under alice.
        let mut carol = s.server.client().with_user("x-forwarded-user", "carol");
        carol.initialize().await;
        let carols = carol.session.clone().expect("carol's session");
        let page = s.bob.get(&s.at("/admin/users?principal=carol")).await;
        let refused = s
            .bob
            .post_form(
                &s.at("/admin/users"),
                &origin,
                &[
                    ("csrf", page.csrf().as_str()),
                    ("action", "end-session"),
                    ("principal", "alice"),
                    ("session", &carols[..8]),
                ],
            )
            .await;
        assert!(refused.body.contains("alice has no session"), "{}", refused.body);
        assert_eq!(carol.request("tools/list", json!({})).await.status, StatusCode::OK);

        let admin = s
            .trail(AuditSearch {
                action: Some(AuditAction::Admin),
                limit: 10,
                ..AuditSearch::default()
            })
            .await;
        let mut commands: Vec<(String, String)> = admin
            .iter()
            .map(|r| {
                let command = r.entry.detail["command"].as_str().expect("command").to_owned();
                (command, r.entry.subject.clone())
            })
            .collect();
        commands.sort();
        assert_eq!(
            commands,
            [
                ("forms delete".to_owned(), "tracker".to_owned()),
                ("sessions end".to_owned(), shown.to_owned()),
            ]
        );
        s.server.stop().await;
    }
);

backend_test!(
    /// An upstream that cannot be reached: the upstreams view shows its tools (the allow-list's
    /// stand-ins), that it was never listed, and the last error met calling it.
    async fn the_upstreams_view_shows_the_last_error(backend: Backend) {
        let database = TestDatabase::new(backend).await;
        let down = format!("http://127.0.0.1:{}/mcp", common::free_port());
        let toml =
            format!("{IDENTITY}\n[[upstreams]]\nid = \"down\"\nurl = \"{down}\"\ntools = [\"t\"]\ntimeout = \"1s\"\n");
        let server = TestServer::start(&database, &toml).await;
        let bob = Browser::as_user("x-forwarded-user", "bob").with_header("x-forwarded-groups", "ops");
        let url = format!("{}/admin/upstreams", server.base());
        let page = bob.get(&url).await;
        assert!(
            page.body.contains(">down</td>") && page.body.contains("not listed yet"),
            "{}",
            page.body
        );
        let mut client = server.client().with_user("x-forwarded-user", "alice");
        client.initialize().await;
        let reply = client
            .request("tools/call", json!({"name": "down_t", "arguments": {}}))
            .await;
        assert_eq!(reply.body["result"]["isError"], true, "{}", reply.body);
        let page = bob.get(&url).await;
        assert!(
            page.body.contains("opening a session") || page.body.contains("listing its tools"),
            "{}",
            page.body
        );
        assert!(page.body.contains(">http</td>"), "{}", page.body);
        server.stop().await;
    }
);

/// The screenshots the book shows, copied from a Chromium run's artifacts with
/// `GATEHOUSE_UPDATE_SCREENSHOTS=1`.
const SCREENSHOTS: [&str; 5] = [
    "admin-users.png",
    "admin-revoked.png",
    "admin-elicitations.png",
    "admin-audit.png",
    "admin-health.png",
];

backend_test!(
    /// bob, in headless Chromium, revokes alice's connection, expires her pending request and
    /// filters the audit trail, by clicking and typing on the pages.
    async fn an_operator_works_the_pages_in_chromium(backend: Backend) {
        if !browser_available() {
            return;
        }
        let s = setup(backend).await;
        s.connect_alice().await;
        let reply = s
            .client
            .request("tools/call", json!({"name": "me_write", "arguments": {}}))
            .await;
        let pending = id_of(&url_of(&elicitations(&reply)[0]));
        let mut stream = s.client.open_stream(None).await;
        stream.next_completion().await;

        let base = s.server.base();
        let screenshots = artifact_dir(&format!("admin-pages-{backend:?}").to_lowercase());
        let plan = json!({
            "screenshots": screenshots,
            "headers": {"X-Forwarded-User": "bob", "X-Forwarded-Groups": "eng, ops"},
            "steps": [
                {"goto": format!("{base}/admin/users"), "expect_status": 200, "expect_heading": "Users",
                 "expect_text": ["alice", "fake", "read", "active", "Operator: bob"], "screenshot": "admin-users.png"},
                {"click": "button[value=revoke]", "expect_status": 200,
                 "expect_text": ["Removed alice's connection to fake and revoked it there."],
                 "screenshot": "admin-revoked.png"},
                {"goto": format!("{base}/admin/elicitations"), "expect_heading": "Pending requests",
                 "expect_text": [pending, "fake:read write"], "screenshot": "admin-elicitations.png"},
                {"click": "button[value=expire]", "expect_status": 200,
                 "expect_text": ["its client was told", "No request is waiting for a user."]},
                {"goto": format!("{base}/admin/audit")},
                {"fill": {"#principal": "alice"}, "select": {"#action": "admin"},
                 "click": "form[method=get] button[type=submit]",
                 "expect_url_prefix": format!("{base}/admin/audit?principal=alice&action=admin"),
                 "expect_text": ["connections revoke", "elicitations expire", "\"operator\":\"bob\""],
                 "absent_text": ["me_write"],
                 "screenshot": "admin-audit.png"},
                {"goto": format!("{base}/admin/health"), "expect_heading": "Keys and checks",
                 "expect_text": ["secrets.keys[0] (encrypts)", "migrations"], "screenshot": "admin-health.png"},
            ],
        });
        let outcome = tokio::task::spawn_blocking(move || walk(&plan)).await.expect("walk");
        if let Err(error) = outcome {
            panic!("{error}");
        }
        assert_eq!(s.fake.stats().revocations, 1, "the provider saw the revocation");
        assert_eq!(stream.next_completion().await, pending, "alice's client was told");
        let admin = s
            .trail(AuditSearch {
                action: Some(AuditAction::Admin),
                limit: 10,
                ..AuditSearch::default()
            })
            .await;
        assert_eq!(admin.len(), 2);
        assert!(admin.iter().all(|r| r.entry.detail["operator"] == "bob"));
        // The book's pictures change only when asked for, so a test run leaves the tree as it was.
        if std::env::var("GATEHOUSE_UPDATE_SCREENSHOTS").is_ok_and(|v| v == "1") {
            let docs = common::repo().join("docs/src/screenshots");
            std::fs::create_dir_all(&docs).expect("docs/src/screenshots");
            for name in SCREENSHOTS {
                std::fs::copy(screenshots.join(name), docs.join(name)).expect("copy a screenshot");
            }
        }
        drop(stream);
        s.server.stop().await;
    }
);
