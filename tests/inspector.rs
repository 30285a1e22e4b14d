//! The MCP Inspector's CLI (`@modelcontextprotocol/inspector` 2.x, npm, pinned in tests/inspector)
//! against gatehouse with the official reference server as upstreams: it lists and calls tools,
//! shows the link of a gated call, lists and reads resources and gets prompts (issue 23).

mod common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use common::mcp_upstreams::{inspector, server_everything};
use common::{Backend, HEADER_IDENTITY, McpClient, TestDatabase, TestServer, eventually};
use serde_json::{Value, json};
use tokio::process::Command;

/// How long one run of the CLI may take (node loads the Inspector, connects, asks, exits): a
/// guard against hanging only, generous for a loaded machine.
const RUN: Duration = Duration::from_secs(120);
/// The user gatehouse's header identity is told about, by the Inspector and the browser alike.
const USER: &str = "alice";
/// A resource of the reference server (2026.8.31), as gatehouse lists it for upstream `everything`.
const ARCHITECTURE: &str = "everything+demo://resource/static/document/architecture.md";

/// The staged Inspector, run with a home of its own (it keeps a catalogue, settings and secrets
/// under `~/.mcp-inspector`).
struct Inspector {
    launcher: PathBuf,
    home: tempfile::TempDir,
}

/// What one run of the CLI printed, and whether it succeeded.
struct Run {
    success: bool,
    stdout: String,
    stderr: String,
}

impl Run {
    /// The one JSON object `--format json` prints, after checking the run succeeded.
    fn json(&self) -> Value {
        assert!(
            self.success,
            "the Inspector CLI failed:\n{}\n{}",
            self.stdout, self.stderr
        );
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("not one JSON object ({e}):\n{}\n{}", self.stdout, self.stderr))
    }
}

impl Inspector {
    /// None (after a loud skip, a failure under `CI=true`) when it cannot be staged.
    async fn stage() -> Option<Inspector> {
        Some(Inspector {
            launcher: inspector().await?,
            home: tempfile::tempdir().expect("a home for the Inspector"),
        })
    }

    /// `mcp-inspector --cli URL --transport http` as [`USER`] behind the trusted proxy, with `args`
    /// (the method and its options), within [`RUN`].
    async fn run(&self, url: &str, args: &[&str]) -> Run {
        let mut command = Command::new("node");
        command
            .arg(&self.launcher)
            .args(["--cli", url, "--transport", "http"])
            .args(["--header", &format!("X-Forwarded-User: {USER}")])
            .args(args)
            .env("HOME", self.home.path())
            .stdin(Stdio::null())
            .kill_on_drop(true);
        let output = tokio::time::timeout(RUN, command.output())
            .await
            .unwrap_or_else(|_| panic!("the Inspector CLI did not finish within {RUN:?}: {args:?}"))
            .expect("run the Inspector CLI");
        Run {
            success: output.status.success(),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }

    /// [`Inspector::run`] with `--format json`: the result it printed.
    async fn json(&self, url: &str, args: &[&str]) -> Value {
        let mut all = args.to_vec();
        all.extend(["--format", "json"]);
        self.run(url, &all).await.json()
    }

    /// `tools/call` of `tool` with `arguments` (`key=value` each): the result it printed.
    async fn call(&self, url: &str, tool: &str, arguments: &[&str]) -> Value {
        let mut args = vec!["--method", "tools/call", "--tool-name", tool];
        if !arguments.is_empty() {
            args.push("--tool-arg");
            args.extend(arguments);
        }
        self.json(url, &args).await
    }
}

/// gatehouse (header identity, SQLite) with the reference server over stdio twice: as upstream
/// `everything`, which needs nothing, and as `locked`, which needs the user's form `key`.
async fn gatehouse(everything: &Path, database: &TestDatabase) -> TestServer {
    let command = format!("[\"node\", {:?}, \"stdio\"]", everything.to_string_lossy());
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
id = "everything"
command = {command}

[[upstreams]]
id = "locked"
command = {command}
env = {{ API_KEY = "{{{{form.key.token}}}}" }}
requires = ["form:key"]
"#
    );
    TestServer::start(database, &toml).await
}

/// Waits until gatehouse lists `everything`'s tools (it lists an upstream that needs nothing by
/// itself, once started).
async fn catalogue_listed(server: &TestServer) {
    let mut client = server.client().with_user("x-forwarded-user", USER);
    client.initialize().await;
    wait_for_listed(&client, "tools/list", "tools", "name", "everything_echo").await;
}

/// Waits until `method` lists, under `key`, an item whose `field` is `wanted`.
async fn wait_for_listed(client: &McpClient, method: &str, key: &str, field: &str, wanted: &str) {
    eventually(&format!("{method} lists {wanted}"), async || {
        let listed = client.call(method, json!({})).await;
        names(&listed, key, field).iter().any(|n| n == wanted).then_some(())
    })
    .await;
}

/// The `field` of each item of `result[key]`.
fn names(result: &Value, key: &str, field: &str) -> Vec<String> {
    result[key]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|item| item[field].as_str().map(str::to_owned))
        .collect()
}

/// Every text block of a tool result or of read contents, joined.
fn texts(blocks: &Value) -> String {
    blocks
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|block| block["text"].as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The first link in `text` into gatehouse (`base`: `http://127.0.0.1:PORT`), whole.
fn link_into(text: &str, base: &str) -> Option<String> {
    let start = text.find(&format!("{base}/"))?;
    let link: String = text[start..]
        .chars()
        .take_while(|c| !c.is_whitespace() && !matches!(c, '"' | '\\' | ')' | ','))
        .collect();
    Some(link)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_inspector_lists_gatehouses_and_the_upstreams_tools_and_calls_one() {
    let Some(everything) = server_everything().await else {
        return;
    };
    let Some(inspector) = Inspector::stage().await else {
        return;
    };
    let database = TestDatabase::new(Backend::Sqlite).await;
    let server = gatehouse(&everything, &database).await;
    catalogue_listed(&server).await;

    let listed = inspector.json(&server.url, &["--method", "tools/list"]).await;
    let tools = names(&listed["result"], "tools", "name");
    for tool in ["whoami", "everything_echo", "everything_get-sum", "locked_connect"] {
        assert!(tools.contains(&tool.to_owned()), "{tool} missing: {tools:?}");
    }

    let called = inspector
        .call(&server.url, "everything_echo", &["message=through the gate"])
        .await;
    assert_ne!(called["result"]["isError"], true, "{called}");
    assert_eq!(
        texts(&called["result"]["content"]),
        "Echo: through the gate",
        "{called}"
    );

    let whoami = inspector.call(&server.url, "whoami", &[]).await;
    assert!(texts(&whoami["result"]["content"]).contains(USER), "{whoami}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_inspector_shows_the_link_of_a_gated_call_and_the_call_works_once_it_is_followed() {
    let Some(everything) = server_everything().await else {
        return;
    };
    let Some(inspector) = Inspector::stage().await else {
        return;
    };
    let database = TestDatabase::new(Backend::Sqlite).await;
    let server = gatehouse(&everything, &database).await;
    catalogue_listed(&server).await;
    let base = server.base();
    let connect = ["--method", "tools/call", "--tool-name", "locked_connect"];

    // The CLI declares no elicitation, in either protocol era, so gatehouse answers with a tool
    // result that names the link and asks for the call again once the user followed it. The CLI
    // prints that result and exits with an error, as for any tool error.
    for era in ["legacy", "modern"] {
        let mut args = connect.to_vec();
        args.extend(["--protocol-era", era, "--format", "json"]);
        let gated = inspector.run(&server.url, &args).await;
        let printed = format!("{era}:\n{}\n{}", gated.stdout, gated.stderr);
        assert!(!gated.success && gated.stderr.contains("tool_is_error"), "{printed}");
        let gated: Value = serde_json::from_str(&gated.stdout).unwrap_or_else(|e| panic!("{e}: {printed}"));
        assert_eq!(gated["result"]["isError"], true, "{printed}");
        let said = texts(&gated["result"]["content"]);
        assert!(said.contains("call this tool again"), "{printed}");
        assert!(link_into(&said, &base).is_some(), "no link into {base}: {printed}");
    }

    // What a person sees (the default text output) shows the link, which is the form's page.
    let shown = inspector.run(&server.url, &connect).await;
    let link = link_into(&shown.stdout, &base)
        .unwrap_or_else(|| panic!("no link into {base} shown:\n{}\n{}", shown.stdout, shown.stderr));
    server.fill_in_form(&link, USER, "key-0123456789").await;

    // Called again, the tool connects and lists the upstream's tools, which the CLI then finds.
    let connected = inspector.call(&server.url, "locked_connect", &[]).await;
    assert_ne!(connected["result"]["isError"], true, "{connected}");
    assert!(
        texts(&connected["result"]["content"]).contains("locked_echo"),
        "{connected}"
    );
    let called = inspector.call(&server.url, "locked_echo", &["message=unlocked"]).await;
    assert_ne!(called["result"]["isError"], true, "{called}");
    assert_eq!(texts(&called["result"]["content"]), "Echo: unlocked", "{called}");
}

// Upstream resources and prompts through gatehouse (resource URIs as `<upstream id>+<uri>`, prompt
// names with the upstream's tool prefix).

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_inspector_lists_and_reads_an_upstreams_resources_and_gets_its_prompts() {
    let Some(everything) = server_everything().await else {
        return;
    };
    let Some(inspector) = Inspector::stage().await else {
        return;
    };
    let database = TestDatabase::new(Backend::Sqlite).await;
    let server = gatehouse(&everything, &database).await;
    let mut client = server.client().with_user("x-forwarded-user", USER);
    client.initialize().await;
    wait_for_listed(&client, "resources/list", "resources", "uri", ARCHITECTURE).await;
    wait_for_listed(&client, "prompts/list", "prompts", "name", "everything_args-prompt").await;

    let listed = inspector.json(&server.url, &["--method", "resources/list"]).await;
    let uris = names(&listed["result"], "resources", "uri");
    for uri in [ARCHITECTURE, "everything+demo://resource/static/document/features.md"] {
        assert!(uris.contains(&uri.to_owned()), "{uri} missing: {uris:?}");
    }

    let read = inspector
        .json(&server.url, &["--method", "resources/read", "--uri", ARCHITECTURE])
        .await;
    let contents = texts(&read["result"]["contents"]);
    assert!(contents.starts_with("# Everything Server – Architecture"), "{read}");

    let listed = inspector.json(&server.url, &["--method", "prompts/list"]).await;
    let prompts = names(&listed["result"], "prompts", "name");
    for prompt in ["everything_simple-prompt", "everything_args-prompt"] {
        assert!(prompts.contains(&prompt.to_owned()), "{prompt} missing: {prompts:?}");
    }

    let got = inspector
        .json(
            &server.url,
            &[
                "--method",
                "prompts/get",
                "--prompt-name",
                "everything_args-prompt",
                "--prompt-args",
                "city=Lisbon",
                "state=Estremadura",
            ],
        )
        .await;
    let message = &got["result"]["messages"][0];
    assert_eq!(message["role"], "user", "{got}");
    assert_eq!(
        message["content"]["text"], "What's weather in Lisbon, Estremadura?",
        "{got}"
    );
}
