//! In-call elicitation (`elicit = "request"`): the call asks for a confirmation on its own SSE
//! stream and waits. On PostgreSQL the client's answer and the browser go to another replica than
//! the one where the call waits.

mod common;

use std::time::Duration;

use common::{
    Backend, Browser, TestDatabase, TestServer, WAIT, answer, call_response, confirm_payment, elicitation_request,
    pay_arguments, pay_tool, text,
};
use reqwest::StatusCode;
use serde_json::{Value, json};

/// Two replicas of one PostgreSQL database; on SQLite (one process by design) one server plays
/// both parts. The call waits on `a`; answers and the browser go to `b()`.
struct Replicas {
    a: TestServer,
    second: Option<TestServer>,
}

impl Replicas {
    fn b(&self) -> &TestServer {
        self.second.as_ref().unwrap_or(&self.a)
    }

    async fn stop(self) {
        self.a.stop().await;
        if let Some(b) = self.second {
            b.stop().await;
        }
    }
}

/// The replicas with the pay tool waiting up to `timeout`; it calls `a`'s own /healthz.
async fn servers(backend: Backend, timeout: &str) -> (TestDatabase, Replicas) {
    let database = TestDatabase::new(backend).await;
    let a = TestServer::start_addressed(&database, |addr| pay_tool(addr, timeout)).await;
    let second = match backend {
        Backend::Postgres => Some(TestServer::start(&database, &pay_tool(&a.addr.to_string(), timeout)).await),
        Backend::Sqlite => None,
    };
    (database, Replicas { a, second })
}

fn pay(progress: Option<&str>) -> Value {
    let mut params = json!({"name": "pay", "arguments": pay_arguments()});
    if let Some(token) = progress {
        params["_meta"] = json!({"progressToken": token});
    }
    params
}

/// The elicitation's page, opened on `server`.
fn page_on(server: &TestServer, request: &Value) -> String {
    let url = url::Url::parse(request["params"]["url"].as_str().expect("url")).expect("valid url");
    format!("{}{}", server.base(), url.path())
}

backend_test!(
    async fn confirmed_in_the_browser_while_the_call_waits(backend: Backend) {
        let (_database, replicas) = servers(backend, "30s").await;
        let (a, b) = (&replicas.a, replicas.b());
        let mut client = a.client();
        client.initialize().await;
        let mut call = client.request_stream("tools/call", pay(Some("pay-1"))).await;
        let (request, _) = elicitation_request(&mut call).await;
        let params = &request["params"];
        assert_eq!(params["mode"], "url");
        let elicitation_id = params["elicitationId"].as_str().expect("elicitationId");
        assert!(
            params["url"]
                .as_str()
                .expect("url")
                .ends_with(&format!("/forms/{elicitation_id}"))
        );
        assert!(request["id"].as_str().expect("string id").contains(elicitation_id));

        // The client's answer reaches the other replica; the call waiting here learns of it.
        answer(&client.on(b), &request, "accept").await;
        let accepted = loop {
            let (_, message) = call.next_message(WAIT).await.expect("progress after accept");
            assert_eq!(message["method"], "notifications/progress", "{message}");
            assert_eq!(message["params"]["progressToken"], "pay-1");
            if message["params"]["message"] == "Waiting for the user to finish in the browser." {
                break message;
            }
        };

        confirm_payment(&page_on(b, &request), &b.base()).await;

        let (response, progress) = call_response(&mut call).await;
        let result = &response["result"];
        assert_eq!(result["isError"], false, "{response}");
        assert_eq!(text(result), "ok", "the tool ran after the confirmation");
        // The progress sent after the accept follows it (the answer came after `accepted`).
        let counts: Vec<u64> = std::iter::once(&accepted)
            .chain(progress.iter())
            .filter_map(|m| m["params"]["progress"].as_u64())
            .collect();
        assert!(
            counts.windows(2).all(|w| w[0] < w[1]) || counts.len() < 2,
            "progress increases: {counts:?}"
        );

        // The answer was for that one call: the same call again asks again.
        let mut again = client.request_stream("tools/call", pay(None)).await;
        let (second, _) = elicitation_request(&mut again).await;
        assert_ne!(second["params"]["elicitationId"], params["elicitationId"]);
        answer(&client, &second, "cancel").await;
        let (cancelled, notifications) = call_response(&mut again).await;
        assert_eq!(cancelled["result"]["isError"], true);
        let said = text(&cancelled["result"]);
        let link = second["params"]["url"].as_str().expect("url");
        assert!(
            said.contains(link) && said.contains("call this tool again"),
            "{cancelled}"
        );
        assert!(
            notifications.iter().all(|m| m["method"] != "notifications/progress"),
            "no progressToken, no progress: {notifications:?}"
        );
        replicas.stop().await;
    }
);

backend_test!(
    async fn a_decline_from_the_client_ends_the_call(backend: Backend) {
        let (database, replicas) = servers(backend, "30s").await;
        let (a, b) = (&replicas.a, replicas.b());
        let mut client = a.client();
        client.initialize().await;
        let mut call = client.request_stream("tools/call", pay(None)).await;
        let (request, _) = elicitation_request(&mut call).await;
        answer(&client.on(b), &request, "decline").await;
        let (response, _) = call_response(&mut call).await;
        assert_eq!(response["result"]["isError"], true);
        assert!(text(&response["result"]).contains("declined"), "{response}");
        assert_eq!(
            database
                .query_count("SELECT count(*) FROM elicitations WHERE status = 'declined' AND reported")
                .await,
            1,
            "declined, and reported by this call"
        );
        // The page of a declined request says so; nothing can be submitted there any more.
        let page = Browser::new().get(&page_on(b, &request)).await;
        assert_eq!(page.status, StatusCode::GONE);

        // The next call asks afresh instead of reporting the old decline again.
        let mut next = client.request_stream("tools/call", pay(None)).await;
        let (fresh, _) = elicitation_request(&mut next).await;
        assert_ne!(fresh["params"]["elicitationId"], request["params"]["elicitationId"]);
        replicas.stop().await;
    }
);

backend_test!(
    /// `cancel` from the client is "not now" (Claude Code in `-p` mode answers every link so):
    /// the call ends with the link and the instruction to call again, the request stays open,
    /// and once the user confirmed there the same call runs.
    async fn a_dismissal_from_the_client_gives_the_link_and_the_next_call_runs(backend: Backend) {
        let (database, replicas) = servers(backend, "30s").await;
        let (a, b) = (&replicas.a, replicas.b());
        let mut client = a.client();
        client.initialize().await;
        let mut call = client.request_stream("tools/call", pay(None)).await;
        let (request, _) = elicitation_request(&mut call).await;
        answer(&client.on(b), &request, "cancel").await;
        let (response, _) = call_response(&mut call).await;
        let result = &response["result"];
        assert_eq!(result["isError"], true, "{response}");
        let said = text(result);
        let link = request["params"]["url"].as_str().expect("url");
        assert!(said.contains(link), "the link: {said}");
        assert!(
            said.contains("call this tool again") && !said.contains("declined"),
            "{said}"
        );
        let pending = "SELECT count(*) FROM elicitations WHERE status = 'pending'";
        assert_eq!(database.query_count(pending).await, 1, "the request stays open");

        confirm_payment(&page_on(b, &request), &b.base()).await;
        let mut again = client.request_stream("tools/call", pay(None)).await;
        let (ran, _) = call_response(&mut again).await;
        assert_eq!(ran["result"]["isError"], false, "{ran}");
        assert_eq!(text(&ran["result"]), "ok", "the tool ran after the confirmation");
        replicas.stop().await;
    }
);

backend_test!(
    async fn cancel_on_the_page_and_timeout_give_tool_errors(backend: Backend) {
        let (_database, replicas) = servers(backend, "1s").await;
        let (a, b) = (&replicas.a, replicas.b());
        let mut client = a.client();
        client.initialize().await;

        let started = std::time::Instant::now();
        let mut call = client.request_stream("tools/call", pay(None)).await;
        let (request, _) = elicitation_request(&mut call).await;
        let (timed_out, _) = call_response(&mut call).await;
        assert_eq!(timed_out["result"]["isError"], true);
        assert!(text(&timed_out["result"]).contains("within 1s"), "{timed_out}");
        assert!(started.elapsed() >= Duration::from_secs(1));

        // The request stays open: the next call waits on the same one, and Cancel on the page ends it.
        let mut retry = client.request_stream("tools/call", pay(None)).await;
        let (same, _) = elicitation_request(&mut retry).await;
        assert_eq!(same["params"]["elicitationId"], request["params"]["elicitationId"]);
        let browser = Browser::new();
        let url = page_on(b, &same);
        let page = browser.get(&url).await;
        let cancelled = browser
            .post_form(&url, &b.base(), &[("csrf", &page.csrf()), ("action", "cancel")])
            .await;
        assert_eq!(cancelled.status, StatusCode::OK, "{}", cancelled.body);
        let (declined, _) = call_response(&mut retry).await;
        assert_eq!(declined["result"]["isError"], true);
        assert!(text(&declined["result"]).contains("declined"), "{declined}");
        replicas.stop().await;
    }
);

backend_test!(
    async fn a_client_without_url_mode_gets_the_fallback(backend: Backend) {
        let (_database, replicas) = servers(backend, "30s").await;
        let a = &replicas.a;
        let mut client = a.client();
        client
            .initialize_with("2025-11-25", json!({"elicitation": {"form": {}}}))
            .await;
        let reply = client.request("tools/call", pay(None)).await;
        assert_eq!(reply.status, StatusCode::OK);
        assert!(
            reply
                .headers
                .get("content-type")
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.starts_with("application/json")),
            "a plain JSON answer"
        );
        let result = &reply.body["result"];
        assert_eq!(result["isError"], true, "{}", reply.body);
        assert!(text(result).contains("/forms/"), "the URL for the user: {result}");
        replicas.stop().await;
    }
);

backend_test!(
    async fn a_waiting_call_ends_when_the_server_stops(backend: Backend) {
        let (_database, replicas) = servers(backend, "30s").await;
        let mut client = replicas.a.client();
        client.initialize().await;
        let mut call = client.request_stream("tools/call", pay(None)).await;
        elicitation_request(&mut call).await;
        // Graceful shutdown waits for in-flight requests, so the waiting call must end by itself.
        let stopping = tokio::spawn(replicas.stop());
        let (response, _) = call_response(&mut call).await;
        assert_eq!(response["result"]["isError"], true);
        assert!(text(&response["result"]).contains("restarting"), "{response}");
        stopping.await.expect("the servers stop in time");
    }
);
