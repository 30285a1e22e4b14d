//! The official Python MCP SDK for tests that need a peer nobody here wrote: a virtualenv under
//! `target/interop-venv` with a pinned `mcp`, set up on first use (as any pinned PyPI package is,
//! `pinned_venv`: the current Caddy comes that way), and the loud skip (a failure under `CI=true`)
//! when it, or any other such peer, cannot be set up.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use super::repo;

/// The pinned SDK, as pip spells it.
pub const PYTHON_SDK: &str = "mcp==2.3.0";

/// A peer that cannot be set up: a loud skip, or a failure under `CI=true`.
pub fn unavailable(what: &str, why: &str) {
    let message = format!("\n!!! {what} is unavailable ({why}): this test is SKIPPED.\n");
    assert!(
        std::env::var("CI").map_or(true, |v| v != "true"),
        "CI=true requires {what}: {message}"
    );
    eprintln!("{message}");
}

/// Runs `command` to completion; its output, or an error with everything it printed.
pub fn run(command: &mut Command) -> Result<std::process::Output, String> {
    let output = command.output().map_err(|e| format!("cannot run {command:?}: {e}"))?;
    if output.status.success() {
        Ok(output)
    } else {
        Err(format!(
            "{command:?} failed ({}):\n{}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ))
    }
}

/// Serialises setting up venvs within one test binary (several tests may ask at once).
static VENV: Mutex<()> = Mutex::new(());

/// A virtualenv at `target/{name}` holding `package` (pinned, as pip spells it), made (or remade)
/// unless `ready` says the one there already holds it; blocking (pip may run). Its directory.
pub fn pinned_venv(name: &str, package: &str, ready: impl Fn(&Path) -> bool) -> Result<PathBuf, String> {
    let _guard = VENV.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let venv = repo().join("target").join(name);
    if !ready(&venv) {
        run(Command::new("python3").args(["-m", "venv", "--clear"]).arg(&venv))?;
        run(Command::new(venv.join("bin/python")).args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            package,
        ]))?;
    }
    Ok(venv)
}

/// A virtualenv under target/ with the official Python SDK; blocking (pip may run).
pub fn python_with_sdk() -> Result<PathBuf, String> {
    let venv = pinned_venv("interop-venv", PYTHON_SDK, |venv| {
        Command::new(venv.join("bin/python"))
            .args([
                "-c",
                "import importlib.metadata as m; assert m.version('mcp') == '2.3.0'",
            ])
            .status()
            .is_ok_and(|s| s.success())
    })?;
    Ok(venv.join("bin/python"))
}

/// The Python interpreter of [`python_with_sdk`], or None (after saying so) when it cannot be set up.
pub async fn python_sdk() -> Option<PathBuf> {
    match tokio::task::spawn_blocking(python_with_sdk).await.expect("join") {
        Ok(python) => Some(python),
        Err(why) => {
            unavailable("the Python MCP SDK", &why);
            None
        }
    }
}

/// A client script of `tests/interop/` running, its stdout read as one JSON event per line: a
/// Python one, or a Node one when the interpreter is `node`.
pub struct PythonScript {
    script: String,
    child: std::process::Child,
    lines: tokio::sync::mpsc::UnboundedReceiver<String>,
}

impl PythonScript {
    /// Starts `script` (a path from the repository's root) with `interpreter` and `args`.
    pub fn start(interpreter: &std::path::Path, script: &str, args: &[&str]) -> Self {
        Self::start_with_env(interpreter, script, args, &[])
    }

    /// [`PythonScript::start`] with `env` added to the script's environment.
    pub fn start_with_env(interpreter: &std::path::Path, script: &str, args: &[&str], env: &[(&str, &str)]) -> Self {
        use std::io::BufRead;
        let mut child = Command::new(interpreter)
            .arg(repo().join(script))
            .args(args)
            .envs(env.iter().copied())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("start {script} with {interpreter:?}: {e}"));
        let stdout = child.stdout.take().expect("stdout");
        let (lines_tx, lines) = tokio::sync::mpsc::unbounded_channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = lines_tx.send(line);
            }
        });
        Self {
            script: script.to_owned(),
            child,
            lines,
        }
    }

    /// The next event, or `None` once the script closed its stdout.
    pub async fn next(&mut self) -> Option<serde_json::Value> {
        let line = tokio::time::timeout(std::time::Duration::from_secs(40), self.lines.recv())
            .await
            .expect("output in time")?;
        Some(serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}")))
    }

    /// Waits for the exit, which must be a success.
    pub async fn succeeded(self) {
        let child = self.child;
        let output = tokio::task::spawn_blocking(move || child.wait_with_output())
            .await
            .expect("join")
            .expect("wait");
        assert!(
            output.status.success(),
            "{} failed ({}): {}",
            self.script,
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
}
