//! Approvals: a call requiring `approval:payments` waits until a member of `finance` other than
//! the caller approves that very call on its page, and then runs once; across two replicas on
//! PostgreSQL (the caller on one, the approver's browser on the other). The caller approving their
//! own request, a member of another group, changed arguments, a replayed decision and a forged
//! post are each refused with nothing changed; a denial ends the call with its reason; the
//! caller may withdraw. A request belongs to the caller and the call, not to the session: a client
//! that restarted finds it, and the call runs with the arguments the approver saw. Arguments too
//! large to show are refused before anything is asked; below the limit an approver's page shows
//! every value whole, on a phone too (real Chromium). The webhook announcing each request is
//! signed, carries no argument values, is retried when its receiver fails, and never fails the
//! call.

mod common;

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use common::{
    Backend, Browser, McpClient, TestDatabase, TestServer, answer, call_response, elicitation_request, elicitations,
    eventually, url_of,
};
use gatehouse::gate::webhook_signature as signature;
use serde_json::{Value, json};

const SECRET: &str = "webhook-secret";

/// What the webhook receiver got: each post's signature headers and body.
#[derive(Clone, Default)]
struct Receiver {
    posts: Arc<Mutex<Vec<(HeaderMap, String)>>>,
    /// Posts answered 500 before the receiver starts answering 200.
    failures: Arc<Mutex<usize>>,
}

impl Receiver {
    async fn start(failures: usize) -> (Receiver, String) {
        let receiver = Receiver {
            failures: Arc::new(Mutex::new(failures)),
            ..Receiver::default()
        };
        let state = receiver.clone();
        let app = Router::new().route(
            "/hook",
            post(move |headers: HeaderMap, body: Bytes| {
                let state = state.clone();
                async move {
                    state
                        .posts
                        .lock()
                        .expect("posts")
                        .push((headers, String::from_utf8_lossy(&body).into_owned()));
                    let mut failures = state.failures.lock().expect("failures");
                    if *failures > 0 {
                        *failures -= 1;
                        return StatusCode::INTERNAL_SERVER_ERROR;
                    }
                    StatusCode::OK
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}/hook", listener.local_addr().expect("addr"));
        tokio::spawn(async move { axum::serve(listener, app).await });
        (receiver, url)
    }

    fn posts(&self) -> Vec<(HeaderMap, String)> {
        self.posts.lock().expect("posts").clone()
    }
}

fn config(addr: &str, webhook: &str, arguments: bool) -> String {
    let identity = common::header_identity_with_groups();
    format!(
        r#"{identity}
[[approvals]]
id = "payments"
title = "Payment approval"
approvers = {{ groups = ["finance"] }}
ttl = "1h"
notify = {{ webhook = "{webhook}", secret = "{SECRET}", arguments = {arguments} }}

[[tools]]
name = "pay"
description = "Pays someone, once finance approves"
requires = ["approval:payments"]
input_schema = {{ type = "object", properties = {{ amount = {{ type = "string" }}, payee = {{ type = "string" }} }} }}
http = {{ url = "http://{addr}/healthz" }}
"#
    )
}

/// A browser of `user` in `group`.
fn browser(user: &str, group: &str) -> Browser {
    Browser::as_user("x-forwarded-user", user).with_header("x-forwarded-groups", group)
}

async fn pay(client: &McpClient, amount: &str) -> common::Reply {
    let arguments = json!({"amount": amount, "payee": "<b>ACME</b>\u{202e}"});
    client
        .request("tools/call", json!({"name": "pay", "arguments": arguments}))
        .await
}

/// The one request a -32042 answer names: its page.
fn asked(reply: &common::Reply) -> String {
    let listed = elicitations(reply);
    assert_eq!(listed.len(), 1, "{}", reply.body);
    url_of(&listed[0])
}

/// `browser` presses `action` on the request's page at `url` (its token read from the page), with
/// `reason`; the answer.
async fn decide(browser: &Browser, origin: &str, url: &str, action: &str, reason: &str) -> common::Page {
    let page = browser.get(url).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    browser
        .post_form(
            url,
            origin,
            &[("csrf", &page.csrf()), ("action", action), ("reason", reason)],
        )
        .await
}

async fn votes(database: &TestDatabase) -> i64 {
    database.query_count("SELECT COUNT(*) FROM approval_votes").await
}

backend_test!(
    async fn an_approval_by_someone_else_lets_exactly_that_call_run_once(backend: Backend) {
        let (receiver, webhook) = Receiver::start(0).await;
        let database = TestDatabase::new(backend).await;
        let addr = format!("127.0.0.1:{}", common::free_port());
        let toml = config(&addr, &webhook, false);
        let toml = toml.replacen("[server]\n", &format!("[server]\npublic_url = \"http://{addr}\"\n"), 1);
        let a = TestServer::start_on(&database, &toml, &addr).await;
        // On PostgreSQL the approver's browser reaches a second replica (same public URL).
        let b = match backend {
            Backend::Postgres => Some(TestServer::start(&database, &toml).await),
            Backend::Sqlite => None,
        };
        let approver_base = b.as_ref().map_or_else(|| a.base(), TestServer::base);
        let on_b = |url: &str| url.replacen(&a.base(), &approver_base, 1);
        let alice = a.eliciting_client("alice").await;
        let first = pay(&alice, "12.40").await;
        let url = asked(&first);
        assert!(url.starts_with(&format!("{}/approvals/", a.base())), "{url}");

        // The caller's page: who must approve, and Withdraw, never Approve.
        let own = browser("alice", "finance").get(&url).await;
        assert_eq!(own.status, StatusCode::OK, "{}", own.body);
        assert!(
            own.body.contains("groups: finance") && own.body.contains("withdraw"),
            "{}",
            own.body
        );
        assert!(!own.body.contains("value=\"approve\""), "{}", own.body);

        // Refused, with nothing changed: the caller approving, another group, a forged post.
        let own_vote = decide(&browser("alice", "finance"), &a.base(), &url, "approve", "").await;
        assert_eq!(own_vote.status, StatusCode::FORBIDDEN, "{}", own_vote.body);
        let eng = browser("carol", "eng");
        assert_eq!(eng.get(&on_b(&url)).await.status, StatusCode::FORBIDDEN);
        let forged = eng
            .post_form(
                &on_b(&url),
                &approver_base,
                &[("csrf", "forged"), ("action", "approve")],
            )
            .await;
        assert_eq!(forged.status, StatusCode::FORBIDDEN, "{}", forged.body);
        let bob = browser("bob", "finance");
        let forged = bob
            .post_form(
                &on_b(&url),
                &approver_base,
                &[("csrf", "forged"), ("action", "approve")],
            )
            .await;
        assert_eq!(forged.status, StatusCode::FORBIDDEN, "{}", forged.body);
        assert_eq!(votes(&database).await, 0);
        let still = pay(&alice, "12.40").await;
        assert_eq!(asked(&still), url, "the same request still waits");

        // bob sees it in his list, the arguments escaped and the invisible character shown.
        let list = bob.get(&format!("{approver_base}/approvals")).await;
        assert_eq!(list.status, StatusCode::OK);
        assert!(
            list.body.contains("alice") && list.body.contains("<code>pay</code>"),
            "{}",
            list.body
        );
        assert!(list.body.contains("&#60;b&#62;ACME&#60;/b&#62;U+202E"), "{}", list.body);
        assert!(
            !eng.get(&format!("{approver_base}/approvals"))
                .await
                .body
                .contains("alice")
        );

        let page = bob.get(&on_b(&url)).await;
        let fields = [
            ("csrf", page.csrf()),
            ("action", "approve".into()),
            ("reason", "fine".into()),
        ];
        let fields: Vec<(&str, &str)> = fields.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let approved = bob.post_form(&on_b(&url), &approver_base, &fields).await;
        assert_eq!(approved.status, StatusCode::OK, "{}", approved.body);
        assert!(approved.body.contains("Approved"), "{}", approved.body);
        // The same post again: the decision is not taken twice.
        let replayed = bob.post_form(&on_b(&url), &approver_base, &fields).await;
        assert_eq!(replayed.status, StatusCode::CONFLICT, "{}", replayed.body);
        assert_eq!(votes(&database).await, 1);

        // Other arguments are another call: asked anew, the approval unused.
        let other = pay(&alice, "9999").await;
        assert_ne!(asked(&other), url);
        // The approved call runs, once; the next asks again.
        let ran = eventually("the approval reaches the caller's replica", async || {
            let reply = pay(&alice, "12.40").await;
            reply.body.get("result").cloned()
        })
        .await;
        assert_eq!(ran["isError"], json!(false), "{ran}");
        let again = pay(&alice, "12.40").await;
        let second = asked(&again);
        assert_ne!(second, url, "used once");

        // A denial ends the call with its reason.
        let dave = browser("dave", "finance");
        let denied = decide(&dave, &approver_base, &on_b(&second), "deny", "over budget").await;
        assert_eq!(denied.status, StatusCode::OK, "{}", denied.body);
        let refused = eventually("the denial reaches the caller", async || {
            let reply = pay(&alice, "12.40").await;
            reply.body.get("result").cloned()
        })
        .await;
        assert_eq!(refused["isError"], json!(true), "{refused}");
        let text = refused["content"][0]["text"].as_str().unwrap_or_default();
        assert!(text.contains("denied by dave: over budget"), "{text}");

        // The caller withdraws a third request: the next call reports it, once.
        let third = asked(&pay(&alice, "12.40").await);
        let withdrawn = decide(&browser("alice", "eng"), &a.base(), &third, "withdraw", "").await;
        assert_eq!(withdrawn.status, StatusCode::OK, "{}", withdrawn.body);
        let reported = pay(&alice, "12.40").await;
        assert_eq!(reported.body["result"]["isError"], json!(true), "{}", reported.body);

        // A fourth request nobody decides in time: the next call says it expired, once; the one
        // after asks anew.
        let fourth = asked(&pay(&alice, "12.40").await);
        database.expire_elicitations().await;
        let expired = pay(&alice, "12.40").await;
        let result = &expired.body["result"];
        assert_eq!(result["isError"], json!(true), "{}", expired.body);
        assert!(
            common::text(result).contains("expired before an approver decided"),
            "{}",
            expired.body
        );
        assert_ne!(asked(&pay(&alice, "12.40").await), fourth);

        // Each new request was announced, signed, without the arguments' values.
        let posts = eventually("six announcements", async || {
            let posts = receiver.posts();
            (posts.len() >= 6).then_some(posts)
        })
        .await;
        for (headers, body) in &posts {
            let timestamp = headers["x-gatehouse-timestamp"].to_str().expect("timestamp");
            let expected = format!("sha256={}", signature(SECRET, timestamp, body));
            assert_eq!(headers["x-gatehouse-signature"], expected.as_str());
            let body: Value = serde_json::from_str(body).expect("JSON");
            assert!(
                body["text"].as_str().is_some_and(|t| t.contains("/approvals/")),
                "{body}"
            );
            assert_eq!(body["tool"], "pay");
            assert!(
                body.get("arguments").is_none() && !body.to_string().contains("\"12.40\""),
                "{body}"
            );
        }
        let decided = database
            .query_count("SELECT COUNT(*) FROM audit WHERE action = 'approval.decided'")
            .await;
        assert_eq!(decided, 2);
        if let Some(b) = b {
            b.stop().await;
        }
        a.stop().await;
    }
);

backend_test!(
    /// A receiver that fails is tried again with backoff; the call was answered at once anyway,
    /// and with `notify.arguments` the arguments go along.
    async fn a_failing_webhook_is_retried_and_never_fails_the_call(backend: Backend) {
        let (receiver, webhook) = Receiver::start(2).await;
        let database = TestDatabase::new(backend).await;
        let server = TestServer::start_addressed(&database, |addr| config(addr, &webhook, true)).await;
        let alice = server.eliciting_client("alice").await;
        let reply = pay(&alice, "12.40").await;
        asked(&reply);
        let posts = eventually("the third attempt succeeds", async || {
            let posts = receiver.posts();
            (posts.len() >= 3).then_some(posts)
        })
        .await;
        assert_eq!(posts.len(), 3, "two failures, then one delivery");
        assert!(
            posts.iter().all(|(_, body)| body == &posts[0].1),
            "the same announcement each time"
        );
        let body: Value = serde_json::from_str(&posts[0].1).expect("JSON");
        assert_eq!(body["arguments"]["amount"], "12.40");
        server.stop().await;
    }
);

backend_test!(
    /// With `elicit = "request"` the call asks within itself and waits: an approval lets it run,
    /// a denial ends it with the reason.
    async fn a_call_waiting_within_itself_runs_once_approved_and_ends_when_denied(backend: Backend) {
        let (_receiver, webhook) = Receiver::start(0).await;
        let database = TestDatabase::new(backend).await;
        let server = TestServer::start_addressed(&database, |addr| {
            config(addr, &webhook, false).replacen(
                "requires = [\"approval:payments\"]\n",
                "requires = [\"approval:payments\"]\nelicit = \"request\"\nelicit_timeout = \"30s\"\n",
                1,
            )
        })
        .await;
        let alice = server.eliciting_client("alice").await;
        let bob = browser("bob", "finance");
        for (action, reason) in [("approve", ""), ("deny", "not today")] {
            let arguments = json!({"amount": "5", "payee": "ACME"});
            let mut call = alice
                .request_stream("tools/call", json!({"name": "pay", "arguments": arguments}))
                .await;
            let (request, _) = elicitation_request(&mut call).await;
            let url = request["params"]["url"].as_str().expect("url").to_owned();
            assert!(url.contains("/approvals/"), "{request}");
            answer(&alice, &request, "accept").await;
            let decided = decide(&bob, &server.base(), &url, action, reason).await;
            assert_eq!(decided.status, StatusCode::OK, "{}", decided.body);
            let (response, _) = call_response(&mut call).await;
            let result = &response["result"];
            match action {
                "approve" => assert_eq!(result["isError"], json!(false), "{response}"),
                _ => {
                    assert_eq!(result["isError"], json!(true), "{response}");
                    assert!(common::text(result).contains("not today"), "{response}");
                }
            }
        }
        server.stop().await;
    }
);

backend_test!(
    /// The client restarted (its session ended; on PostgreSQL the new one is on another replica):
    /// its retry finds the request the old session made rather than asking the approvers again,
    /// and once approved the call runs there, once, with the arguments the approver saw.
    async fn an_approval_outlives_the_session_that_asked(backend: Backend) {
        let (_announcements, webhook) = Receiver::start(0).await;
        let (payments, payments_url) = Receiver::start(0).await;
        let database = TestDatabase::new(backend).await;
        let toml = |addr: &str| {
            config(addr, &webhook, false).replacen(
                &format!("http = {{ url = \"http://{addr}/healthz\" }}"),
                &format!(
                    "http = {{ method = \"POST\", url = \"{payments_url}\", \
                     body = {{ amount = \"{{{{args.amount}}}}\", payee = \"{{{{args.payee}}}}\" }} }}"
                ),
                1,
            )
        };
        let a = TestServer::start_addressed(&database, toml).await;
        let b = match backend {
            Backend::Postgres => {
                Some(TestServer::start(&database, &toml(a.base().trim_start_matches("http://"))).await)
            }
            Backend::Sqlite => None,
        };
        let before = a.eliciting_client("alice").await;
        let url = asked(&pay(&before, "12.40").await);
        assert!(before.delete().await.is_success());
        let after = b.as_ref().unwrap_or(&a).eliciting_client("alice").await;
        assert_eq!(
            asked(&pay(&after, "12.40").await),
            url,
            "the same request, not a new one"
        );
        let requests = "SELECT COUNT(*) FROM elicitations WHERE requirement = 'approval:payments'";
        assert_eq!(database.query_count(requests).await, 1);

        let approved = decide(&browser("bob", "finance"), &a.base(), &url, "approve", "").await;
        assert!(approved.body.contains("Approved"), "{}", approved.body);
        let ran = eventually("the approval reaches the new session's replica", async || {
            pay(&after, "12.40").await.body.get("result").cloned()
        })
        .await;
        assert_eq!(ran["isError"], json!(false), "{ran}");
        let paid = payments.posts();
        assert_eq!(paid.len(), 1, "{paid:?}");
        let body: Value = serde_json::from_str(&paid[0].1).expect("JSON");
        assert_eq!(body["amount"], "12.40", "{body}");
        assert_eq!(body["payee"], "<b>ACME</b>\u{202e}", "{body}");
        assert_ne!(asked(&pay(&after, "12.40").await), url, "used once");
        if let Some(b) = b {
            b.stop().await;
        }
        a.stop().await;
    }
);

/// A payment whose memo is long enough that a cut page would hide the payee after it.
fn long_payment(memo_bytes: usize) -> Value {
    json!({"amount": "1", "memo": "x".repeat(memo_bytes), "payee": "MALLORY"})
}

backend_test!(
    /// `max_argument_bytes` (64 KiB by default): a larger call is refused at once, naming the
    /// limit, and no request exists; below it the approver's page, at a phone's width in real
    /// Chromium, shows every value whole: the payee after 17 000 bytes of memo is on screen,
    /// wrapped, with nothing cut or scrolled out of sight.
    async fn an_approver_sees_every_argument_whole_and_larger_calls_are_refused(backend: Backend) {
        if !common::browser::browser_available() {
            return;
        }
        let (_announcements, webhook) = Receiver::start(0).await;
        let database = TestDatabase::new(backend).await;
        let server = TestServer::start_addressed(&database, |addr| config(addr, &webhook, false)).await;
        let alice = server.eliciting_client("alice").await;
        let too_large = alice
            .request("tools/call", json!({"name": "pay", "arguments": long_payment(70_000)}))
            .await;
        let result = &too_large.body["result"];
        assert_eq!(result["isError"], json!(true), "{}", too_large.body);
        assert!(
            common::text(result).contains("max_argument_bytes") && common::text(result).contains("65536"),
            "{}",
            too_large.body
        );
        assert_eq!(database.query_count("SELECT COUNT(*) FROM elicitations").await, 0);

        let reply = alice
            .request("tools/call", json!({"name": "pay", "arguments": long_payment(17_000)}))
            .await;
        let url = asked(&reply);
        let plan = json!({
            "screenshots": common::browser::artifact_dir("approval-on-a-phone").display().to_string(),
            "viewport": {"width": 375, "height": 812},
            "headers": {"X-Forwarded-User": "bob", "X-Forwarded-Groups": "finance"},
            "steps": [{
                "goto": url,
                "expect_status": 200,
                "expect_whole": {"selector": "pre.whole", "text": ["MALLORY", "\"amount\": \"1\""]},
                "screenshot": "approval.png",
            }],
        });
        let walked = tokio::task::spawn_blocking(move || common::browser::walk(&plan))
            .await
            .expect("walk");
        if let Err(failure) = walked {
            panic!("{failure}");
        }
        server.stop().await;
    }
);
