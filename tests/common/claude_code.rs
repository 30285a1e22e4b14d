//! Claude Code (`@anthropic-ai/claude-code`, pinned in `tests/claude-code`), installed at test time
//! under `target/claude-code-node` and never vendored (its licence is proprietary), driven headless
//! without a model: `claude -p` with stream-json on stdin and stdout, a `HOME` of its own, a dummy
//! API key, and control requests (`initialize`, `mcp_call`) instead of a model's turn. Claude
//! Code's own `elicitation` control requests are answered `cancel`, never `accept`, as `-p` mode
//! does without an Elicitation hook.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::process::Command;

use super::line_peer::LinePeer;
use super::mcp_upstreams::stage_npm;
use super::python::unavailable;

/// How long Claude Code may take to write its next line (it starts slowly on a loaded machine):
/// a guard against hanging only.
const LINE: Duration = Duration::from_secs(60);

/// The name gatehouse has in the `--mcp-config` file: its tools are `mcp__gatehouse__<tool>`.
pub const SERVER: &str = "gatehouse";

/// Installs the pinned Claude Code (`npm ci --ignore-scripts`, once per lock file) and returns its
/// native binary: the platform package npm chose, run directly, since the wrapper's postinstall
/// (which would link it) does not run. None (after a loud skip, a failure under `CI=true`) when
/// node or npm is missing, staging fails or no platform package was installed.
pub async fn claude_code() -> Option<PathBuf> {
    let what = "Claude Code";
    let stage = stage_npm(what, "tests/claude-code", "target/claude-code-node").await?;
    let packages = stage.join("node_modules/@anthropic-ai");
    let binary = std::fs::read_dir(&packages).ok().and_then(|entries| {
        entries
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().starts_with("claude-code-"))
            .map(|e| e.path().join("claude"))
            .find(|binary| binary.is_file())
    });
    if binary.is_none() {
        unavailable(
            what,
            &format!("no platform package with a `claude` binary in {packages:?}"),
        );
    }
    binary
}

/// A running `claude -p` whose only MCP server is gatehouse at one URL; killed when dropped.
pub struct ClaudeCode {
    peer: LinePeer,
    /// Its `HOME`, with the `--mcp-config` file in it.
    _home: tempfile::TempDir,
    next_request: u64,
    /// Every stdout line read so far, for failure messages.
    pub seen: Vec<Value>,
    /// The `elicitation` control requests it sent (each answered `cancel`).
    pub elicitations: Vec<Value>,
}

impl ClaudeCode {
    /// Starts `binary` with gatehouse's MCP endpoint `url` as its one server and sends the
    /// `initialize` control request; returns once it answered.
    pub async fn start(binary: &Path, url: &str) -> Self {
        let home = tempfile::tempdir().expect("temp dir");
        let config = home.path().join("mcp.json");
        let servers = json!({"mcpServers": {SERVER: {"type": "http", "url": url}}});
        std::fs::write(&config, servers.to_string()).expect("write the MCP config");
        let mut command = Command::new(binary);
        command
            .args([
                "-p",
                "--verbose",
                "--input-format",
                "stream-json",
                "--output-format",
                "stream-json",
                "--strict-mcp-config",
                "--mcp-config",
            ])
            .arg(&config)
            .current_dir(home.path())
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", home.path())
            .env("ANTHROPIC_API_KEY", "sk-ant-dummy-never-used")
            .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1");
        let mut claude = Self {
            peer: LinePeer::spawn(command, "Claude Code"),
            _home: home,
            next_request: 0,
            seen: Vec::new(),
            elicitations: Vec::new(),
        };
        let answer = claude.control(json!({"subtype": "initialize"})).await;
        assert_eq!(answer["subtype"], "success", "initialize: {answer}");
        claude
    }

    /// Calls `tool` of gatehouse with `arguments` through the `mcp_call` control request (no model
    /// turn); its control response: `subtype` `success` with the tool's result as `response`, or
    /// `error` with the text of a result that is an error (or of a failure) as `error`.
    pub async fn call(&mut self, tool: &str, arguments: Value) -> Value {
        let name = format!("mcp__{SERVER}__{tool}");
        self.control(json!({"subtype": "mcp_call", "tool": name, "arguments": arguments}))
            .await
    }

    /// Sends the control request `request` and reads stdout until its control response, which it
    /// returns; every `elicitation` control request before it is answered `cancel`.
    async fn control(&mut self, request: Value) -> Value {
        self.next_request += 1;
        let id = format!("gatehouse-test-{}", self.next_request);
        self.peer
            .send(&json!({"type": "control_request", "request_id": id, "request": request}))
            .await;
        loop {
            let line = match self.peer.next_line_within(LINE).await {
                Ok(Some(line)) => line,
                Ok(None) => panic!(
                    "Claude Code exited before answering {request}\nseen: {:?}\nstderr: {}",
                    self.seen,
                    self.peer.stderr.text()
                ),
                Err(_) => panic!(
                    "Claude Code wrote nothing for {LINE:?} while answering {request}\nseen: {:?}\nstderr: {}",
                    self.seen,
                    self.peer.stderr.text()
                ),
            };
            let Ok(message) = serde_json::from_str::<Value>(&line) else {
                panic!("not JSON on Claude Code's stdout: {line:?}");
            };
            self.seen.push(message.clone());
            if message["type"] == "control_response" && message["response"]["request_id"] == id.as_str() {
                return message["response"].clone();
            }
            if message["type"] == "control_request" && message["request"]["subtype"] == "elicitation" {
                self.elicitations.push(message.clone());
                let answer = json!({"type": "control_response", "response": {"subtype": "success",
                    "request_id": message["request_id"], "response": {"action": "cancel"}}});
                self.peer.send(&answer).await;
            }
        }
    }
}
