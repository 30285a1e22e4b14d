//! Real upstream MCP servers for the gateway tests, as child processes killed when their handle
//! drops: the bearer-token server (`tests/upstreams/bearer_server.py`, which behaves like GitHub's
//! remote MCP server), the stdio server (`tests/upstreams/stdio_server.py`), both on the official
//! Python SDK, and the official TypeScript SDK's example Streamable HTTP server, staged pinned under
//! `target/ts-upstream-node`, and the official reference server ([`server_everything`]); the MCP
//! Inspector ([`inspector`]) and the TypeScript SDK v2 client ([`stage_ts_client_v2`]) are staged
//! the same way. Plus
//! [`jsonrpc`], one JSON-RPC POST to any of them whose answer may be JSON or an SSE stream, and
//! [`stage_npm`], which stages any pinned npm package set that way.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::{Child, ChildStdin, Command};

use super::python::{python_sdk, unavailable};
use super::{free_port, repo};

/// How long a server may take to start (Python imports the SDK, node loads express): a guard
/// against hanging only, generous for a loaded machine.
const STARTUP: Duration = Duration::from_secs(60);
/// How long staging the TypeScript SDK may take (`npm ci` over the network on first use).
const STAGE: Duration = Duration::from_secs(300);
/// The pinned TypeScript SDK's example server, inside the staged node_modules.
const TS_EXAMPLE: &str = "node_modules/@modelcontextprotocol/sdk/dist/esm/examples/server/simpleStreamableHttp.js";
/// What the example prints on stdout once it listens.
const TS_LISTENING: &str = "MCP Streamable HTTP Server listening on port";
/// What the example prints on stdout once its demo authorization server listens (`--oauth`).
const TS_AUTH_LISTENING: &str = "OAuth Authorization Server listening on port";

/// The tools of the TypeScript SDK's example server (`simpleStreamableHttp.js` of
/// `@modelcontextprotocol/sdk` 1.32.2), in its order. `collect-user-info` elicits a form;
/// `multi-greet` logs while it waits two seconds; `start-notification-stream` sends periodic
/// logging notifications; `collect-user-info-task` and `delay` are task tools.
pub const TS_EXAMPLE_TOOLS: [&str; 7] = [
    "greet",
    "multi-greet",
    "collect-user-info",
    "collect-user-info-task",
    "start-notification-stream",
    "list-files",
    "delay",
];

/// Everything a child wrote to a pipe, collected as it comes (so the pipe never fills up).
#[derive(Clone, Default)]
pub struct Output(Arc<Mutex<String>>);

impl Output {
    /// Collects `pipe` line by line until it closes; `first` (when given) receives each line too.
    fn collect(
        pipe: impl AsyncRead + Unpin + Send + 'static,
        first: Option<tokio::sync::mpsc::UnboundedSender<String>>,
    ) -> Self {
        let output = Output::default();
        let sink = output.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(pipe).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if let Some(first) = &first {
                    let _ = first.send(line.clone());
                }
                let mut text = sink.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                text.push_str(&line);
                text.push('\n');
            }
        });
        output
    }

    /// What was written so far.
    pub fn text(&self) -> String {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }
}

/// `bearer_server.py` running: an MCP server that wants a bearer token the fake OAuth provider
/// vouches for at `/userinfo` (see the script's docstring for its tools and answers).
pub struct BearerServer {
    url: String,
    http: reqwest::Client,
    stderr: Output,
    // Dropping the handle kills the child (kill_on_drop) and closes its stdin, on which it exits too.
    _child: Child,
    _stdin: Option<ChildStdin>,
}

impl BearerServer {
    /// Starts the server against the provider at `provider` (a base URL such as
    /// `FakeProvider::base_url`), a call of each `(tool, scope)` in `scope_for` needing that scope.
    /// None (after the loud skip of the interop tests, a failure under `CI=true`) when the Python
    /// SDK cannot be set up.
    pub async fn start(provider: &str, scope_for: &[(&str, &str)]) -> Option<BearerServer> {
        Self::start_with(provider, scope_for, &[]).await
    }

    /// As [`BearerServer::start`], with more arguments for the script (e.g.
    /// `["--cache-seconds", "0"]` to ask the provider about every request).
    pub async fn start_with(provider: &str, scope_for: &[(&str, &str)], extra: &[&str]) -> Option<BearerServer> {
        let python = python_sdk().await?;
        let mut command = Command::new(python);
        command
            .arg(repo().join("tests/upstreams/bearer_server.py"))
            .args(["--provider", provider]);
        for (tool, scope) in scope_for {
            command.arg("--scope-for").arg(format!("{tool}={scope}"));
        }
        command.args(extra);
        let (child, stdin, mut stdout, _, stderr) = spawn(command, "tests/upstreams/bearer_server.py");
        let line = match tokio::time::timeout(STARTUP, stdout.recv()).await {
            Ok(Some(line)) => line,
            Ok(None) => panic!("bearer_server.py exited before listening:\n{}", stderr.text()),
            Err(_) => panic!("bearer_server.py did not listen within {STARTUP:?}:\n{}", stderr.text()),
        };
        let url = serde_json::from_str::<Value>(&line)
            .ok()
            .and_then(|v| v["url"].as_str().map(str::to_owned))
            .unwrap_or_else(|| panic!("bearer_server.py printed {line:?}, not {{\"url\": ...}}"));
        Some(BearerServer {
            url,
            http: reqwest::Client::new(),
            stderr,
            _child: child,
            _stdin: stdin,
        })
    }

    /// `http://127.0.0.1:PORT/mcp`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// What the server saw so far (`GET /seen`): request, cancelled, tool and interrupted events,
    /// in order.
    pub async fn seen(&self) -> Vec<Value> {
        let seen = self.url.trim_end_matches("/mcp").to_owned() + "/seen";
        let response = self.http.get(&seen).send().await.expect("GET /seen");
        assert_eq!(response.status(), StatusCode::OK, "GET /seen: {}", self.stderr());
        response.json().await.expect("GET /seen answers a JSON list")
    }

    /// What the server wrote to stderr so far (its logs and tracebacks).
    pub fn stderr(&self) -> String {
        self.stderr.text()
    }
}

/// The command line of the stdio server: the venv's Python and `tests/upstreams/stdio_server.py`.
/// None (after the loud skip, a failure under `CI=true`) when the Python SDK cannot be set up.
pub async fn stdio_server_command() -> Option<Vec<String>> {
    let python = python_sdk().await?;
    let script = repo().join("tests/upstreams/stdio_server.py");
    Some(vec![
        python.to_string_lossy().into_owned(),
        script.to_string_lossy().into_owned(),
    ])
}

/// The official TypeScript SDK's example Streamable HTTP server (`simpleStreamableHttp.js`,
/// shipped in the pinned `@modelcontextprotocol/sdk`), unchanged, on a free loopback port passed
/// in its `MCP_PORT`. Stateful sessions, SSE answers, no authentication (but see
/// [`TsExampleServer::start_with_oauth`]); it accepts only the Host names localhost, 127.0.0.1 and
/// [::1]. Its tools: [`TS_EXAMPLE_TOOLS`].
pub struct TsExampleServer {
    url: String,
    stdout: Output,
    stderr: Output,
    _child: Child,
}

impl TsExampleServer {
    /// Stages the pinned SDK (`scripts/npm-stage tests/ts-upstream target/ts-upstream-node`) and
    /// starts the example. None (after a loud skip, a failure under `CI=true`) when node or npm is
    /// missing or staging fails.
    pub async fn start() -> Option<TsExampleServer> {
        Self::launch(false).await
    }

    /// As [`TsExampleServer::start`], with `--oauth`: the example's demo authorization server
    /// (`demoInMemoryOAuthProvider.js`: dynamic registration, PKCE, tokens checked by
    /// introspection) on a second free port in `MCP_AUTH_PORT`, and `/mcp` wanting its bearer
    /// tokens. Its metadata names `http://localhost:PORT/...` URLs, so [`TsExampleServer::url`] is
    /// `http://localhost:PORT/mcp` (the `resource` of its Protected Resource Metadata).
    pub async fn start_with_oauth() -> Option<TsExampleServer> {
        Self::launch(true).await
    }

    /// Starts the example (with `--oauth` when `oauth`) and waits for every "listening" line.
    async fn launch(oauth: bool) -> Option<TsExampleServer> {
        let stage = stage_ts_sdk().await?;
        // The ports are chosen before the server binds them; another process may take one meanwhile.
        let mut failures = Vec::new();
        for _ in 0..3 {
            let port = free_port();
            let mut command = Command::new("node");
            command.arg(stage.join(TS_EXAMPLE)).env("MCP_PORT", port.to_string());
            let mut awaited = vec![TS_LISTENING];
            if oauth {
                let auth_port = std::iter::repeat_with(free_port)
                    .find(|auth_port| *auth_port != port)
                    .expect("free ports never run out");
                command
                    .args(["--oauth", "--oauth-strict"])
                    .env("MCP_AUTH_PORT", auth_port.to_string());
                awaited.push(TS_AUTH_LISTENING);
            }
            let (child, _stdin, mut lines, stdout, stderr) = spawn(command, TS_EXAMPLE);
            let listening = tokio::time::timeout(STARTUP, async {
                while let Some(line) = lines.recv().await {
                    awaited.retain(|awaited| !line.contains(awaited));
                    if awaited.is_empty() {
                        return true;
                    }
                }
                false
            })
            .await
            .unwrap_or_else(|_| panic!("the TypeScript example did not listen within {STARTUP:?}"));
            if listening {
                // Its OAuth metadata names localhost; without OAuth any loopback name works.
                let host = if oauth { "localhost" } else { "127.0.0.1" };
                // The rest of stdout (a line per request) keeps being collected.
                return Some(TsExampleServer {
                    url: format!("http://{host}:{port}/mcp"),
                    stdout,
                    stderr,
                    _child: child,
                });
            }
            failures.push(stderr.text());
        }
        panic!(
            "the TypeScript example server did not start:\n{}",
            failures.join("\n---\n")
        );
    }

    /// `http://127.0.0.1:PORT/mcp` (`http://localhost:PORT/mcp` with OAuth).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// What the server wrote to stdout so far (it logs every request there).
    pub fn stdout(&self) -> String {
        self.stdout.text()
    }

    /// What the server wrote to stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr.text()
    }
}

/// Whether `tool --version` runs.
async fn have(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .await
        .is_ok_and(|s| s.success())
}

/// Installs the pinned TypeScript SDK under target/ (once per lock file); the stage directory,
/// which holds `node_modules/@modelcontextprotocol/sdk`. None (after a loud skip, a failure under
/// `CI=true`) when node or npm is missing or staging fails.
pub async fn stage_ts_sdk() -> Option<PathBuf> {
    stage_npm("the TypeScript MCP SDK", "tests/ts-upstream", "target/ts-upstream-node").await
}

/// Installs the pinned TypeScript SDK v2 client (`@modelcontextprotocol/client`, pinned in
/// `tests/ts-client-v2`) under target/; the stage directory, which holds
/// `node_modules/@modelcontextprotocol/client`. None (after a loud skip, a failure under
/// `CI=true`) when node or npm is missing or staging fails.
pub async fn stage_ts_client_v2() -> Option<PathBuf> {
    stage_npm(
        "the TypeScript MCP SDK v2 client",
        "tests/ts-client-v2",
        "target/ts-client-v2-node",
    )
    .await
}

/// The official reference server (`@modelcontextprotocol/server-everything`, pinned in
/// `tests/server-everything`, staged under target/): the path of its `index.js`, which node runs
/// with `stdio` or `streamableHttp` (then on `PORT`). None (after a loud skip, a failure under
/// `CI=true`) when node or npm is missing or staging fails.
pub async fn server_everything() -> Option<PathBuf> {
    let stage = stage_npm(
        "the MCP reference server (server-everything)",
        "tests/server-everything",
        "target/server-everything-node",
    )
    .await?;
    Some(stage.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js"))
}

/// The MCP Inspector (`@modelcontextprotocol/inspector`, pinned in `tests/inspector`, staged under
/// target/): the path of its launcher, which node runs with `--cli` for the scriptable client.
/// None (after a loud skip, a failure under `CI=true`) when node or npm is missing or staging fails.
pub async fn inspector() -> Option<PathBuf> {
    let stage = stage_npm("the MCP Inspector", "tests/inspector", "target/inspector-node").await?;
    Some(stage.join("node_modules/@modelcontextprotocol/inspector/clients/launcher/build/index.js"))
}

/// The reference server at `index` (see [`server_everything`]) over Streamable HTTP on a free
/// loopback port, once it listens: its `/mcp` URL, and the child (killed when dropped).
pub async fn server_everything_http(index: &std::path::Path) -> (String, Spawned) {
    let port = super::free_port();
    let mut command = Command::new("node");
    command.arg(index).arg("streamableHttp").env("PORT", port.to_string());
    let spawned = spawn(command, "server-everything streamableHttp");
    super::eventually_within(STARTUP, "server-everything listening", async || {
        spawned.4.text().contains("listening on port").then_some(())
    })
    .await;
    (format!("http://127.0.0.1:{port}/mcp"), spawned)
}

/// Installs `what`, the pinned npm packages of `source` (a directory with package.json and
/// package-lock.json), into `stage` under target/ (`scripts/npm-stage`, once per lock file); the
/// stage directory, which holds their node_modules. None (after a loud skip, a failure under
/// `CI=true`) when node or npm is missing or staging fails.
pub async fn stage_npm(what: &str, source: &str, stage: &str) -> Option<PathBuf> {
    if !have("node").await || !have("npm").await {
        unavailable(what, "node and npm are not both on PATH");
        return None;
    }
    let root = repo();
    let mut command = Command::new(root.join("scripts/npm-stage"));
    command
        .current_dir(&root)
        .args([source, stage])
        .stdin(Stdio::null())
        .kill_on_drop(true);
    match tokio::time::timeout(STAGE, command.output()).await {
        Ok(Ok(output)) if output.status.success() => Some(root.join(stage)),
        Ok(Ok(output)) => {
            let why = format!(
                "scripts/npm-stage failed ({}): {}",
                output.status,
                String::from_utf8_lossy(&output.stderr)
            );
            unavailable(what, &why);
            None
        }
        Ok(Err(e)) => {
            unavailable(what, &format!("cannot run scripts/npm-stage: {e}"));
            None
        }
        Err(_) => {
            unavailable(what, &format!("scripts/npm-stage took longer than {STAGE:?}"));
            None
        }
    }
}

/// A started child: itself, its stdin, its stdout lines as they come, all its stdout, its stderr.
pub type Spawned = (
    Child,
    Option<ChildStdin>,
    tokio::sync::mpsc::UnboundedReceiver<String>,
    Output,
    Output,
);

/// Spawns `command` with every pipe open and the child killed on drop. The stdin returned is the
/// child's (a child may watch it to exit when the test goes away); stdout and stderr are read
/// continuously, so the child never blocks on a full pipe.
pub fn spawn(mut command: Command, what: &str) -> Spawned {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
    let stdin = child.stdin.take();
    let (lines_tx, lines) = tokio::sync::mpsc::unbounded_channel();
    let stdout = Output::collect(child.stdout.take().expect("piped stdout"), Some(lines_tx));
    let stderr = Output::collect(child.stderr.take().expect("piped stderr"), None);
    (child, stdin, lines, stdout, stderr)
}

/// The answer to one JSON-RPC POST: status, headers and every JSON-RPC message of the body,
/// whether it came as one JSON document or as an SSE stream (read until the server ends it).
#[derive(Debug)]
pub struct UpstreamReply {
    pub status: StatusCode,
    pub headers: reqwest::header::HeaderMap,
    /// The body as text (a JSON document, SSE events, or an error page).
    pub body: String,
    /// The JSON-RPC messages of the body, in order: notifications and requests before the answer.
    pub messages: Vec<Value>,
}

impl UpstreamReply {
    /// The message answering request `id` (a result or an error).
    pub fn answer(&self, id: i64) -> &Value {
        self.messages
            .iter()
            .find(|m| m["id"] == id && m.get("method").is_none())
            .unwrap_or_else(|| panic!("no answer to request {id}: {} {}", self.status, self.body))
    }

    /// A header's value as text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// POSTs one JSON-RPC message to an MCP endpoint with `Accept` for both answer kinds and the
/// given extra headers (e.g. `Authorization`, `Mcp-Session-Id`, `MCP-Protocol-Version`).
pub async fn jsonrpc(url: &str, headers: &[(&str, &str)], body: &Value) -> UpstreamReply {
    let mut request = reqwest::Client::new()
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .body(body.to_string());
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().await.unwrap_or_else(|e| panic!("POST {url}: {e}"));
    let status = response.status();
    let headers = response.headers().clone();
    let is_sse = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    let body = response
        .text()
        .await
        .unwrap_or_else(|e| panic!("POST {url}: body: {e}"));
    let messages = if is_sse {
        sse_messages(&body)
    } else {
        serde_json::from_str::<Value>(&body)
            .map(|v| vec![v])
            .unwrap_or_default()
    };
    UpstreamReply {
        status,
        headers,
        body,
        messages,
    }
}

/// The JSON messages of an SSE body's `data` fields (events with no data, such as priming events,
/// skipped).
fn sse_messages(body: &str) -> Vec<Value> {
    body.replace("\r\n", "\n")
        .split("\n\n")
        .filter_map(|event| {
            let data: Vec<&str> = event
                .lines()
                .filter_map(|line| line.strip_prefix("data:"))
                .map(|d| d.strip_prefix(' ').unwrap_or(d))
                .collect();
            let data = data.join("\n");
            if data.trim().is_empty() {
                None
            } else {
                Some(serde_json::from_str(&data).unwrap_or_else(|e| panic!("SSE data is not JSON ({e}): {data:?}")))
            }
        })
        .collect()
}
