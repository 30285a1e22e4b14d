//! A process spoken to as MCP's stdio transport does: JSON-RPC messages, one per line, on its
//! stdin and stdout. Both sides of the transport use it: `gatehouse stdio` (tests/stdio.rs) and
//! stdio upstream servers (tests/mcp_upstreams.rs).

use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::mpsc::UnboundedReceiver;

use super::WAIT;
use super::mcp_upstreams::{Output, spawn};

pub struct LinePeer {
    pub child: Child,
    /// Everything it wrote to stderr so far.
    pub stderr: Output,
    stdin: Option<ChildStdin>,
    lines: UnboundedReceiver<String>,
}

impl LinePeer {
    /// Starts `command` (`what`, in messages), killed when dropped.
    pub fn spawn(command: Command, what: &str) -> Self {
        let (child, stdin, lines, _, stderr) = spawn(command, what);
        Self {
            child,
            stderr,
            stdin,
            lines,
        }
    }

    /// Writes `line` and a newline.
    pub async fn send_line(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin is open");
        stdin
            .write_all(format!("{line}\n").as_bytes())
            .await
            .expect("write to stdin");
        stdin.flush().await.expect("flush");
    }

    pub async fn send(&mut self, message: &Value) {
        self.send_line(&message.to_string()).await;
    }

    /// Closes stdin: the end of the input.
    pub fn close_input(&mut self) {
        self.stdin = None;
    }

    /// The next line of stdout, or `None` once it closed.
    pub async fn next_line(&mut self) -> Option<String> {
        self.next_line_within(WAIT).await.expect("a line in time")
    }

    /// The next line of stdout within `wait` (`None` once it closed), or the elapsed error.
    pub async fn next_line_within(
        &mut self,
        wait: std::time::Duration,
    ) -> Result<Option<String>, tokio::time::error::Elapsed> {
        tokio::time::timeout(wait, self.lines.recv()).await
    }

    /// The next line of stdout, which must be a JSON-RPC message, or `None` once it closed.
    pub async fn next_message(&mut self) -> Option<Value> {
        let line = self.next_line().await?;
        let message: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line:?}"));
        assert_eq!(message["jsonrpc"], "2.0", "not JSON-RPC: {line:?}");
        Some(message)
    }

    /// Sends the request `id` and returns its answer, skipping any other message before it.
    pub async fn request(&mut self, id: i64, method: &str, params: Value) -> Value {
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        loop {
            let message = self.next_message().await.expect("an answer before stdout closes");
            if message["id"] == id {
                return message;
            }
        }
    }
}
