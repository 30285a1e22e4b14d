//! Upstreams that try what an attacker would, and the reference server that once made gatehouse
//! re-list without end. The malicious upstream (`tests/upstreams/malicious_server.py`, over HTTP and
//! stdio) echoes the user's secret through every channel it has (error messages, its -32042, progress,
//! log messages, its own elicitations, a tool description), poses as gatehouse, sends users to a
//! host of its own, takes another upstream's tool name, and says its tool list changed on every
//! listing. What must hold: the secret reaches no client, no other user and no database; relayed
//! elicitations name the upstream and go only where it may send users; every tool name is listed
//! once and a call reaches the tool listed; listings stay a handful a minute, with one process.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::mcp_upstreams::{Spawned, server_everything, server_everything_http, spawn};
use common::{
    Backend, HEADER_IDENTITY, McpClient, TestDatabase, TestServer, captured_logs, eventually, logged_text, repo, text,
};
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::process::Command;

const SECRET: &str = "alice-key-0123456789abcdef";
const WAIT: Duration = Duration::from_secs(20);

/// `python3 malicious_server.py ARGS...`.
fn malicious(args: &[&str]) -> Vec<String> {
    let script = repo().join("tests/upstreams/malicious_server.py");
    let mut command = vec!["python3".to_owned(), script.to_string_lossy().into_owned()];
    command.extend(args.iter().map(|a| (*a).to_owned()));
    command
}

/// The malicious upstream over HTTP; its URL, and the child (killed when dropped).
async fn malicious_http(args: &[&str]) -> (String, Spawned) {
    let mut line = malicious(args);
    line.push("--http".to_owned());
    let mut command = Command::new(&line[0]);
    command.args(&line[1..]);
    let mut spawned = spawn(command, "malicious_server.py --http");
    let first = tokio::time::timeout(WAIT, spawned.2.recv())
        .await
        .ok()
        .flatten()
        .unwrap_or_else(|| panic!("malicious_server.py did not listen: {}", spawned.4.text()));
    let url = serde_json::from_str::<Value>(&first).expect("a JSON line")["url"]
        .as_str()
        .expect("url")
        .to_owned();
    (url, spawned)
}

fn toml_list(items: &[String]) -> String {
    items.iter().map(|c| format!("{c:?}")).collect::<Vec<_>>().join(", ")
}

async fn call(client: &McpClient, tool: &str) -> common::Reply {
    client
        .request("tools/call", json!({"name": tool, "arguments": {}}))
        .await
}

fn listed_names(tools: &Value) -> Vec<String> {
    tools["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .filter_map(|t| t["name"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// Everything of a streamed call: the messages before its answer, then the answer; each relayed
/// elicitation is declined.
async fn streamed_call(client: &McpClient, tool: &str) -> (Vec<Value>, Value) {
    let mut stream = client
        .request_stream(
            "tools/call",
            json!({"name": tool, "arguments": {}, "_meta": {"progressToken": "p"}}),
        )
        .await;
    let mut before = Vec::new();
    loop {
        let (_, message) = stream.next_message(WAIT).await.expect("a message");
        if message.get("method").is_none() {
            return (before, message);
        }
        if message["method"] == "elicitation/create" {
            let answer = json!({"jsonrpc": "2.0", "id": message["id"], "result": {"action": "decline"}});
            assert_eq!(client.post_raw(&answer, &[]).await.status, StatusCode::ACCEPTED);
        }
        before.push(message);
    }
}

/// Two malicious upstreams, over HTTP and stdio, each given the user's form `key` (as the header
/// X-Api-Key, as API_KEY) when `requires`; without, they need nothing and are listed at start.
fn malicious_config(url: &str, stdio: &str, requires: bool) -> String {
    let (form, http_key, stdio_key) = if requires {
        (
            "[[forms]]\nid = \"key\"\ntitle = \"Your key\"\n[[forms.fields]]\nname = \"token\"\nlabel = \"Key\"\ntype = \"secret\"\n",
            "headers = { \"X-Api-Key\" = \"{{form.key.token}}\" }\nrequires = [\"form:key\"]\n",
            "env = { API_KEY = \"{{form.key.token}}\" }\nrequires = [\"form:key\"]\n",
        )
    } else {
        ("", "", "")
    };
    format!(
        "{HEADER_IDENTITY}\n{form}\n[[upstreams]]\nid = \"evilh\"\nurl = \"{url}\"\n{http_key}\n[[upstreams]]\nid = \"evils\"\ncommand = [{stdio}]\n{stdio_key}"
    )
}

backend_test!(
    async fn an_echoed_secret_reaches_no_client_no_other_user_and_no_database(backend: Backend) {
        captured_logs();
        let (url, _http) = malicious_http(&["--leak-description"]).await;
        let stdio = toml_list(&malicious(&["--leak-description"]));
        let database = TestDatabase::new(backend).await;
        let server = TestServer::start(&database, &malicious_config(&url, &stdio, true)).await;
        let alice = server.eliciting_client("alice").await;
        let bob = server.eliciting_client("bob").await;
        alice.call("logging/setLevel", json!({"level": "info"})).await;
        server.fill_in_token(&alice, "alice", "evilh_connect", SECRET).await;
        let mut bodies = Vec::new();
        for upstream in ["evilh", "evils"] {
            let connected = alice
                .call(
                    "tools/call",
                    json!({"name": format!("{upstream}_connect"), "arguments": {}}),
                )
                .await;
            bodies.push(connected.to_string());
            assert!(
                text(&connected).contains(&format!("{upstream}_error_leak")),
                "{connected}"
            );
        }

        // Listed through alice's sessions: the tool whose description held her key is shared with
        // nobody; the rest is.
        for client in [&alice, &bob] {
            let tools = client.call("tools/list", json!({})).await;
            let names = listed_names(&tools);
            for upstream in ["evilh", "evils"] {
                assert!(names.contains(&format!("{upstream}_notify_leak")), "{names:?}");
                assert!(!names.contains(&format!("{upstream}_described")), "{names:?}");
            }
            bodies.push(tools.to_string());
        }

        for upstream in ["evilh", "evils"] {
            // An error message.
            let reply = call(&alice, &format!("{upstream}_error_leak")).await;
            assert_eq!(reply.body["result"]["isError"], true, "{}", reply.body);
            assert!(text(&reply.body["result"]).contains("[redacted]"), "{}", reply.body);
            bodies.push(reply.body.to_string());

            // Progress and a log message.
            let (before, answer) = streamed_call(&alice, &format!("{upstream}_notify_leak")).await;
            assert_eq!(text(&answer["result"]), "done", "{answer}");
            let progress = before.iter().find(|m| m["method"] == "notifications/progress");
            assert_eq!(
                progress.map(|p| p["params"]["message"].clone()),
                Some(json!("using [redacted]")),
                "{before:?}"
            );
            let log = before.iter().find(|m| m["method"] == "notifications/message");
            assert_eq!(
                log.map(|l| l["params"]["data"].clone()),
                Some(json!({"key": "[redacted]"})),
                "{before:?}"
            );
            bodies.extend(before.iter().map(Value::to_string));
            bodies.push(answer.to_string());

            // Its -32042, and its own elicitation/create.
            let reply = call(&alice, &format!("{upstream}_url_leak")).await;
            let relayed = common::elicitations(&reply);
            assert_eq!(relayed[0]["url"], "https://evil.example/steal?k=[redacted]");
            bodies.push(reply.body.to_string());
            let (before, answer) = streamed_call(&alice, &format!("{upstream}_elicit_leak")).await;
            let asked = before
                .iter()
                .find(|m| m["method"] == "elicitation/create")
                .unwrap_or_else(|| panic!("the relayed elicitation: {before:?} {answer}"));
            assert_eq!(asked["params"]["url"], "https://evil.example/steal?k=[redacted]");
            assert!(text(&answer["result"]).contains("decline"), "{answer}");
            bodies.extend(before.iter().map(Value::to_string));
        }

        for body in &bodies {
            assert!(!body.contains(SECRET), "the secret reached a client: {body}");
        }
        let stored = database.everything_stored().await;
        assert!(
            !String::from_utf8_lossy(&stored).contains(SECRET),
            "the secret reached the database"
        );
        let logged: Vec<String> = logged_text()
            .lines()
            .filter(|l| l.contains(SECRET))
            .map(str::to_owned)
            .collect();
        assert!(logged.is_empty(), "the secret reached the log: {logged:?}");
    }
);

backend_test!(
    async fn relayed_elicitations_name_their_upstream_and_go_only_where_it_may_send_users(backend: Backend) {
        let (url, _http) = malicious_http(&[]).await;
        let stdio = toml_list(&malicious(&[]));
        let database = TestDatabase::new(backend).await;
        // evilh may send users to one origin only; evils anywhere on the web.
        let toml = malicious_config(&url, &stdio, false).replace(
            "id = \"evilh\"\n",
            "id = \"evilh\"\nelicitation_origins = [\"https://auth.example.com\"]\n",
        );
        let server = TestServer::start(&database, &toml).await;
        let alice = server.eliciting_client("alice").await;
        eventually("both catalogues", async || {
            let names = listed_names(&alice.call("tools/list", json!({})).await);
            (names.contains(&"evilh_url_leak".to_owned()) && names.contains(&"evils_url_leak".to_owned())).then_some(())
        })
        .await;

        let reply = call(&alice, "evilh_url_leak").await;
        assert_eq!(reply.body["result"]["isError"], true, "{}", reply.body);
        assert!(text(&reply.body["result"]).contains("refused"), "{}", reply.body);
        let (before, answer) = streamed_call(&alice, "evilh_elicit_leak").await;
        assert!(before.iter().all(|m| m["method"] != "elicitation/create"), "{before:?}");
        assert!(
            text(&answer["result"]).contains("gatehouse does not send users to"),
            "the upstream is told: {answer}"
        );

        let reply = call(&alice, "evils_url_leak").await;
        let relayed = common::elicitations(&reply);
        assert_eq!(relayed[0]["url"], "https://evil.example/steal?k=");
        let message = relayed[0]["message"].as_str().expect("a message");
        assert!(message.starts_with("The evils server asks: gatehouse:"), "{message}");
        let (before, _) = streamed_call(&alice, "evils_elicit_leak").await;
        let asked = before
            .iter()
            .find(|m| m["method"] == "elicitation/create")
            .expect("the relayed elicitation");
        assert!(
            asked["params"]["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("The evils server asks: gatehouse:")),
            "{asked}"
        );
    }
);

/// An upstream that sends its client a flood of requests (form elicitations the client holds
/// unanswered) gets eight of them through at a time (`MAX_ASKING`); the rest are refused at once,
/// and the room comes back when the call ends. Over HTTP and stdio.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_flooding_its_client_with_requests_gets_eight_through_and_the_rest_refused() {
    let (url, _http) = malicious_http(&[]).await;
    let stdio = toml_list(&malicious(&[]));
    let database = TestDatabase::new(Backend::Sqlite).await;
    let server = TestServer::start(&database, &malicious_config(&url, &stdio, false)).await;
    let alice = server.eliciting_client("alice").await;
    eventually("both catalogues", async || {
        let names = listed_names(&alice.call("tools/list", json!({})).await);
        (names.contains(&"evilh_flood".to_owned()) && names.contains(&"evils_flood".to_owned())).then_some(())
    })
    .await;
    for tool in ["evilh_flood", "evils_flood", "evilh_flood", "evils_flood"] {
        let mut stream = alice
            .request_stream("tools/call", json!({"name": tool, "arguments": {}}))
            .await;
        let mut asked = 0;
        let answer = loop {
            let (_, message) = stream.next_message(WAIT).await.expect("a message");
            if message.get("method").is_none() {
                break message;
            }
            if message["method"] == "elicitation/create" {
                asked += 1;
            }
        };
        assert_eq!(text(&answer["result"]), "refused=12 answered=0", "{tool}: {answer}");
        assert_eq!(asked, 8, "{tool}: the client was asked {asked} times");
    }
}

/// How many lines of the file `seen` begin with `method`, and the distinct process ids on them.
fn seen(path: &Path, method: &str) -> (usize, usize) {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().filter(|l| l.starts_with(&format!("{method} "))).collect();
    let mut pids: Vec<&str> = lines.iter().filter_map(|l| l.split(' ').nth(1)).collect();
    pids.sort_unstable();
    pids.dedup();
    (lines.len(), pids.len())
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("gatehouse-hostile-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

backend_test!(
    async fn a_tool_name_two_upstreams_offer_is_listed_once_and_calls_reach_the_tool_listed(backend: Backend) {
        captured_logs();
        let dir = scratch(&format!("collide-{backend:?}"));
        let collide = dir.join("collide");
        let _ = std::fs::remove_file(&collide);
        // `open` (configured first, no prefix) comes to list `evil_echo` too; its listings are
        // chatty, so it lists again every few seconds.
        let open = toml_list(&malicious(&["--chatty", "--collide", &collide.to_string_lossy()]));
        let evil = toml_list(&malicious(&[]));
        let database = TestDatabase::new(backend).await;
        let toml = format!(
            r#"{HEADER_IDENTITY}
[[forms]]
id = "key"
title = "Your key"
[[forms.fields]]
name = "token"
label = "Key"
type = "secret"

[[upstreams]]
id = "open"
command = [{open}]
prefix = ""

[[upstreams]]
id = "evil"
command = [{evil}]
env = {{ API_KEY = "{{{{form.key.token}}}}" }}
requires = ["form:key"]
tools = ["echo"]
"#
        );
        let server = TestServer::start(&database, &toml).await;
        let alice = server.eliciting_client("alice").await;
        let names = eventually("open's catalogue", async || {
            let names = listed_names(&alice.call("tools/list", json!({})).await);
            names.contains(&"notify_leak".to_owned()).then_some(names)
        })
        .await;
        assert_eq!(names.iter().filter(|n| *n == "evil_echo").count(), 1, "{names:?}");
        // Until `open` lists it, evil_echo is evil's, gated: alice has not filled in evil's form.
        common::elicitations(&call(&alice, "evil_echo").await);

        std::fs::write(&collide, "").expect("collide");
        let tools = eventually("open's listing with evil_echo", async || {
            let tools = alice.call("tools/list", json!({})).await;
            let ours = tools["tools"]
                .as_array()?
                .iter()
                .filter(|t| t["name"] == "evil_echo")
                .all(|t| t["description"] == "A tool.");
            ours.then_some(tools)
        })
        .await;
        // Configured first, `open` has the name: it is listed once, and every call reaches it.
        for _ in 0..3 {
            let names = listed_names(&tools);
            assert_eq!(names.iter().filter(|n| *n == "evil_echo").count(), 1, "{names:?}");
            for _ in 0..5 {
                let reply = call(&alice, "evil_echo").await;
                assert_eq!(text(&reply.body["result"]), "evil_echo: key=", "{}", reply.body);
            }
        }
        assert!(
            logged_text().contains("left out a tool whose name another tool has already"),
            "the loser is logged"
        );
    }
);

/// Listings of `upstream` by the server so far, as its metrics count them.
async fn listings(server: &TestServer, upstream: &str) -> u64 {
    let prefix = format!("gatehouse_upstream_listings_total{{upstream=\"{upstream}\"");
    server
        .scrape()
        .await
        .lines()
        .filter(|l| l.starts_with(&prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// How long the re-listing test watches: a minute, as the issue measured it.
const WATCH: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstreams_that_say_their_list_changed_are_listed_a_handful_of_times_a_minute() {
    captured_logs();
    let Some(everything) = server_everything().await else {
        return;
    };
    let dir = scratch("chatty");
    let (seen_http, seen_stdio) = (dir.join("http"), dir.join("stdio"));
    for file in [&seen_http, &seen_stdio] {
        let _ = std::fs::remove_file(file);
    }
    let (chatty_url, _chatty) = malicious_http(&["--chatty", "--seen", &seen_http.to_string_lossy()]).await;
    let chatty_stdio = toml_list(&malicious(&["--chatty", "--seen", &seen_stdio.to_string_lossy()]));
    let (everything_url, _everything_http) = server_everything_http(&everything).await;
    let everything_stdio = toml_list(&[
        "node".to_owned(),
        everything.to_string_lossy().into_owned(),
        "stdio".to_owned(),
    ]);

    let database = TestDatabase::new(Backend::Sqlite).await;
    let toml = format!(
        r#"{HEADER_IDENTITY}
metrics_bind = "127.0.0.1:0"

[[upstreams]]
id = "chatty_http"
url = "{chatty_url}"

[[upstreams]]
id = "chatty_stdio"
command = [{chatty_stdio}]

[[upstreams]]
id = "se_stdio"
command = [{everything_stdio}]

[[upstreams]]
id = "se_http"
url = "{everything_url}"
"#
    );
    let server = TestServer::start(&database, &toml).await;
    let alice = server.eliciting_client("alice").await;
    // Calls go through while the minute passes: once a second, to each reference server.
    let watch = tokio::time::Instant::now() + WATCH;
    let mut calls = 0;
    while tokio::time::Instant::now() < watch {
        for tool in ["se_stdio_echo", "se_http_echo"] {
            let reply = alice
                .request("tools/call", json!({"name": tool, "arguments": {"message": "hi"}}))
                .await;
            if reply.body["result"]["isError"] != true && reply.body.get("result").is_some() {
                assert_eq!(text(&reply.body["result"]), "Echo: hi", "{}", reply.body);
                calls += 1;
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    assert!(calls > 60, "the reference servers answered {calls} calls");

    let (http_listings, _) = seen(&seen_http, "tools/list");
    let (stdio_listings, stdio_processes) = seen(&seen_stdio, "tools/list");
    eprintln!(
        "in {WATCH:?}: chatty HTTP listed {http_listings} times, chatty stdio {stdio_listings} times by {stdio_processes} process(es), {calls} reference-server calls"
    );
    let most = WATCH.as_secs() as usize / 5 + 2;
    assert!(
        http_listings <= most,
        "the chatty HTTP upstream was listed {http_listings} times"
    );
    assert!(
        stdio_listings <= most,
        "the chatty stdio upstream was listed {stdio_listings} times"
    );
    assert_eq!(stdio_processes, 1, "one process lists the chatty stdio upstream");
    for upstream in ["se_stdio", "se_http"] {
        let listed = listings(&server, upstream).await;
        eprintln!("{upstream} listed {listed} times");
        assert!(
            (1..=5).contains(&listed),
            "{upstream} was listed {listed} times in a minute"
        );
    }
    let processes = logged_text()
        .lines()
        .filter(|l| l.contains("opened an upstream session") && l.contains("se_stdio"))
        .count();
    assert!(processes <= 2, "server-everything was started {processes} times");
}
