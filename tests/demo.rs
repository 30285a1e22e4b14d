//! The demo set of a bare `gatehouse` (no configuration file: local identity on loopback, SQLite
//! in the working directory): the official Python SDK runs each demo tool's whole flow against the
//! real binary (a hosted form's key, a confirmation within the call, the demo provider's sign-in),
//! the test's HTTP browser doing the pages; the landing page lists the tools and says which to try
//! first; the demo provider's page looks like gatehouse's others; a configuration file or
//! `--no-demo` removes the demo.

mod common;

use std::process::Stdio;

use common::python::{PythonScript, python_sdk};
use common::web::query_of;
use common::{
    Browser, McpClient, Page, assert_lists_tools, description, elicitations, free_port, text, unescape, url_of,
};
use reqwest::StatusCode;
use serde_json::{Value, json};

const BINARY: &str = env!("CARGO_BIN_EXE_gatehouse");

/// A made-up key the user types into the demo's form; the model must never see it.
const KEY: &str = "demo-key-never-for-the-model-7f3q";

/// The binary running with `args`, nothing configured but its port, in a directory of its own.
struct Bare {
    child: tokio::process::Child,
    bind: String,
    dir: tempfile::TempDir,
}

impl Bare {
    async fn start(args: &[&str]) -> Self {
        let dir = tempfile::tempdir().expect("dir");
        let bind = format!("127.0.0.1:{}", free_port());
        let child = spawn(&dir, &bind, args).await;
        Self { child, bind, dir }
    }

    /// Stops the binary and starts it again (no arguments) with the same directory and port.
    async fn restart(mut self) -> Self {
        self.child.kill().await.expect("kill gatehouse");
        self.child = spawn(&self.dir, &self.bind, &[]).await;
        self
    }

    fn origin(&self) -> String {
        format!("http://{}", self.bind)
    }

    fn mcp_url(&self) -> String {
        format!("http://{}/mcp", self.bind)
    }

    /// The names `tools/list` answers with.
    async fn tool_names(&self) -> Vec<String> {
        let mut client = McpClient::new(&self.mcp_url());
        client.initialize().await;
        let listed = client.call("tools/list", json!({})).await;
        listed["tools"]
            .as_array()
            .expect("tools")
            .iter()
            .filter_map(|tool| tool["name"].as_str().map(str::to_owned))
            .collect()
    }

    /// The status of the answer at `path` to a GET without credentials.
    async fn status_at(&self, path: &str) -> StatusCode {
        reqwest::get(format!("{}{path}", self.origin()))
            .await
            .expect("GET")
            .status()
    }

    async fn stop(mut self) {
        self.child.kill().await.expect("kill gatehouse");
    }
}

/// Starts the binary with `args` in `dir`, listening on `bind`; once it is ready.
async fn spawn(dir: &tempfile::TempDir, bind: &str, args: &[&str]) -> tokio::process::Child {
    let child = tokio::process::Command::new(BINARY)
        .args(args)
        .current_dir(dir.path())
        .env_clear()
        .env("GATEHOUSE_SERVER__BIND", bind)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn gatehouse");
    common::until_ready(bind).await;
    child
}

/// Runs `tests/interop/python_elicitation.py` with `args` to the end, answering every elicitation
/// it prints with `browser_part` (given the page's URL); its events.
async fn run_script<F, Fut>(python: &std::path::Path, args: &[&str], mut browser_part: F) -> Vec<Value>
where
    F: FnMut(String) -> Fut,
    Fut: Future<Output = ()>,
{
    let mut script = PythonScript::start(python, "tests/interop/python_elicitation.py", args);
    let mut events = Vec::new();
    while let Some(event) = script.next().await {
        if event["event"] == "elicitation" {
            browser_part(event["url"].as_str().expect("url").to_owned()).await;
        }
        events.push(event);
    }
    script.succeeded().await;
    events
}

#[tokio::test]
async fn python_sdk_runs_each_demo_tool_against_a_bare_gatehouse() {
    let Some(python) = python_sdk().await else {
        return;
    };
    let server = Bare::start(&[]).await;
    let url = server.mcp_url();
    let origin = server.origin();

    // The form-gated tool: -32042 with the form's link, the key typed in the browser, the retry
    // answered by the demo service, which saw the key; the model sees its last 4 characters only.
    let events = run_script(
        &python,
        &[
            "--url",
            &url,
            "--list-tools",
            "--call",
            "demo_check_api_key",
            "--timeout",
            "30",
        ],
        |page_url| {
            let origin = origin.clone();
            async move {
                let browser = Browser::new();
                let page = browser.get(&page_url).await;
                assert_eq!(page.status, StatusCode::OK, "{}", page.body);
                assert!(
                    page.body.contains("Demo: an API key for the demo service"),
                    "{}",
                    page.body
                );
                let done = browser
                    .post_form(
                        &page_url,
                        &origin,
                        &[("csrf", &page.csrf()), ("action", "submit"), ("api_key", KEY)],
                    )
                    .await;
                assert_eq!(done.status, StatusCode::OK, "{}", done.body);
            }
        },
    )
    .await;
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["event"].as_str()).collect();
    assert_eq!(kinds, ["tools", "elicitation", "completed", "result"], "{events:?}");
    let names = &events[0]["names"];
    for name in [
        "whoami",
        "disconnect",
        "demo_check_api_key",
        "demo_send_email",
        "demo_profile",
    ] {
        assert!(
            names.as_array().expect("names").contains(&json!(name)),
            "{name} in {names}"
        );
    }
    assert!(
        events[1]["url"]
            .as_str()
            .expect("url")
            .starts_with(&format!("{origin}/forms/")),
        "{events:?}"
    );
    let result = &events[3]["result"];
    assert_eq!(result["isError"], false, "{result}");
    let answer = text(result);
    assert!(
        answer.contains("an API key of 33 characters ending in '7f3q'"),
        "the demo service received the key: {answer}"
    );
    assert!(!answer.contains(KEY), "the model never sees the key: {answer}");

    // The confirmed tool: the call asks within itself, the user confirms on a page showing the
    // call's arguments, and the same call ends with the demo service's answer.
    let arguments = json!({"to": "ada@example.com", "subject": "Hello"}).to_string();
    let events = run_script(
        &python,
        &[
            "--url",
            &url,
            "--call",
            "demo_send_email",
            "--args",
            &arguments,
            "--in-call",
            "--timeout",
            "30",
        ],
        |page_url| {
            let origin = origin.clone();
            async move {
                let browser = Browser::new();
                let page = browser.get(&page_url).await;
                assert_eq!(page.status, StatusCode::OK, "{}", page.body);
                assert_eq!(
                    description(&page.body),
                    "Send the email \"Hello\" to ada@example.com? (Demo: nothing is sent.)"
                );
                let done = browser
                    .post_form(
                        &page_url,
                        &origin,
                        &[("csrf", &page.csrf()), ("action", "submit"), ("confirm", "true")],
                    )
                    .await;
                assert_eq!(done.status, StatusCode::OK, "{}", done.body);
            }
        },
    )
    .await;
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["event"].as_str()).collect();
    assert_eq!(kinds, ["elicitation", "result"], "{events:?}");
    assert_eq!(events[0]["mode"], "url", "{events:?}");
    let result = &events[1]["result"];
    assert_eq!(result["isError"], false, "{result}");
    assert!(
        text(result)
            .contains("Demo: the user confirmed sending 'Hello' to ada@example.com in the browser; nothing was sent."),
        "{result}"
    );

    // The tool behind a sign-in: the connect page, Continue, the demo provider's page and its
    // button, gatehouse's callback, the completion and the retry, which calls the demo API.
    signs_in_at_the_demo_provider(&python, &server).await;
    // The demo provider forgets its tokens when gatehouse stops: after a restart the stored
    // token is refused (401), and the call asks for a new sign-in.
    let server = server.restart().await;
    signs_in_at_the_demo_provider(&python, &server).await;
    server.stop().await;
}

/// `demo_profile` through the Python SDK: -32042 with the connect page's link; the browser goes
/// through Continue, the demo provider's page (whose button refuses another site's post) and the
/// callback; the completion arrives and the retry answers with the demo API's profile.
async fn signs_in_at_the_demo_provider(python: &std::path::Path, server: &Bare) {
    let origin = server.origin();
    let events = run_script(
        python,
        &["--url", &server.mcp_url(), "--call", "demo_profile", "--timeout", "30"],
        |connect_url| {
            let origin = origin.clone();
            async move {
                let browser = Browser::new();
                let authorize = browser.continue_to_provider(&connect_url).await;
                assert!(
                    authorize.starts_with(&format!("{origin}/demo/oauth/authorize?")),
                    "{authorize}"
                );
                let page = browser.get(&authorize).await;
                assert_eq!(page.status, StatusCode::OK, "{}", page.body);
                assert!(page.body.contains("Sign in as the demo user"), "{}", page.body);
                let elsewhere = press_sign_in(&browser, &origin, &authorize, "http://evil.example").await;
                assert_eq!(elsewhere.status, StatusCode::FORBIDDEN, "another site cannot press it");
                let done = signed_in(&browser, &origin, &authorize).await;
                assert_eq!(done.status, StatusCode::OK, "{}", done.body);
            }
        },
    )
    .await;
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["event"].as_str()).collect();
    assert_eq!(kinds, ["elicitation", "completed", "result"], "{events:?}");
    assert!(
        events[0]["url"]
            .as_str()
            .expect("url")
            .starts_with(&format!("{origin}/connect/")),
        "{events:?}"
    );
    let result = &events[2]["result"];
    assert_eq!(result["isError"], false, "{result}");
    assert!(text(result).contains("demo-user"), "the demo API answered: {result}");
}

/// The demo provider's button on its page at `authorize` (of the gatehouse at `origin`), pressed
/// from a page at `from`: the answer.
async fn press_sign_in(browser: &Browser, origin: &str, authorize: &str, from: &str) -> Page {
    let asked = query_of(authorize);
    let fields = [
        ("state", asked["state"].as_str()),
        ("code_challenge", asked["code_challenge"].as_str()),
        ("scope", asked["scope"].as_str()),
        ("action", "allow"),
    ];
    browser
        .post_form(&format!("{origin}/demo/oauth/authorize"), from, &fields)
        .await
}

/// Signs in at the demo provider's page at `authorize` as its own page does, and follows the
/// redirect to gatehouse's callback: the callback's page.
async fn signed_in(browser: &Browser, origin: &str, authorize: &str) -> Page {
    let back = press_sign_in(browser, origin, authorize, origin).await;
    assert_eq!(back.status, StatusCode::SEE_OTHER, "{}", back.body);
    let callback = back.location();
    assert!(callback.starts_with(&format!("{origin}/oauth/callback?")), "{callback}");
    browser.get(&callback).await
}

/// The first `<style>` of a page: the stylesheet `base.html` gives every page.
fn stylesheet(body: &str) -> &str {
    let start = body.find("<style>").expect("a stylesheet");
    &body[start..start + body[start..].find("</style>").expect("its end")]
}

/// A bare gatehouse's landing page lists every tool `tools/list` gives, with its description, and
/// says which demo tool to try first, and why.
#[tokio::test]
async fn the_landing_page_lists_every_tool_and_which_demo_tool_to_try_first() {
    let server = Bare::start(&[]).await;
    let landing = Browser::new().get(&format!("{}/", server.origin())).await;
    assert_eq!(landing.status, StatusCode::OK, "{}", landing.body);
    let mut client = McpClient::new(&server.mcp_url());
    client.initialize().await;
    assert_lists_tools(&landing, &client.call("tools/list", json!({})).await);
    assert!(
        unescape(&landing.body)
            .contains("Try <code>demo_profile</code> first: its first call sends you through a sign-in"),
        "{}",
        landing.body
    );
    server.stop().await;
}

/// The demo provider's sign-in page is framed and styled like gatehouse's other pages (the
/// landing page's stylesheet and footer), and its button still signs in: the retried call runs.
#[tokio::test]
async fn the_demo_sign_in_page_looks_like_the_others_and_signs_in() {
    let server = Bare::start(&[]).await;
    let origin = server.origin();
    let browser = Browser::new();
    let landing = browser.get(&format!("{origin}/")).await;
    let mut client = McpClient::new(&server.mcp_url());
    client.initialize().await;
    let call = json!({"name": "demo_profile", "arguments": {}});
    let asked = elicitations(&client.request("tools/call", call.clone()).await);
    assert_eq!(asked.len(), 1, "{asked:?}");
    let authorize = browser.continue_to_provider(&url_of(&asked[0])).await;
    let page = browser.get(&authorize).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    assert!(page.body.contains("<h1>Demo sign-in</h1>"), "{}", page.body);
    assert_eq!(
        stylesheet(&page.body),
        stylesheet(&landing.body),
        "the shared stylesheet"
    );
    assert!(
        page.body.contains(r#"<footer>gatehouse · <a href="/connections">"#),
        "the shared frame: {}",
        page.body
    );
    assert!(page.body.contains(r#"value="deny" class="secondary""#), "{}", page.body);
    let done = signed_in(&browser, &origin, &authorize).await;
    assert_eq!(done.status, StatusCode::OK, "{}", done.body);
    // The callback stored the connection before it answered: the retry runs.
    let ran = client.call("tools/call", call).await;
    assert_eq!(ran["isError"], json!(false), "{ran}");
    assert!(text(&ran).contains("demo-user"), "the demo API answered: {ran}");
    server.stop().await;
}

#[tokio::test]
async fn a_configuration_file_or_no_demo_removes_the_demo() {
    let bare = Bare::start(&[]).await;
    let names = bare.tool_names().await;
    assert!(names.iter().any(|n| n == "demo_check_api_key"), "{names:?}");
    for path in ["/demo/service", "/demo/api/profile"] {
        assert_eq!(
            bare.status_at(path).await,
            StatusCode::UNAUTHORIZED,
            "{path} wants a key or token"
        );
    }
    bare.stop().await;

    let dir = tempfile::tempdir().expect("dir");
    let file = dir.path().join("gatehouse.toml");
    std::fs::write(&file, "[log]\nformat = \"text\"\n").expect("write");
    let file = file.to_str().expect("utf-8 path");
    for args in [&["--config", file][..], &["--no-demo"], &["serve", "--no-demo"]] {
        let server = Bare::start(args).await;
        assert_eq!(server.tool_names().await, ["whoami", "disconnect"], "{args:?}");
        for path in ["/demo/service", "/demo/api/profile", "/demo/oauth/authorize"] {
            assert_eq!(
                server.status_at(path).await,
                StatusCode::NOT_FOUND,
                "{path} with {args:?}"
            );
        }
        server.stop().await;
    }
}
