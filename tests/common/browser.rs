//! Real-browser tests: headless Chromium (Debian's `/usr/bin/chromium`, or `$GATEHOUSE_CHROMIUM`)
//! driven by `tests/browser/fill_form.mjs` and `walk.mjs` through a pinned playwright-core, which
//! `scripts/npm-stage` installs into `target/browser-node/` on first use (and again only when
//! `tests/browser/package-lock.json` changes). No browser is ever downloaded.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::repo;

/// How long one run of fill_form.mjs may take.
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(120);
/// How long staging may take: `npm ci` over the network on first use, or waiting for the lock.
const STAGE_TIMEOUT: Duration = Duration::from_secs(300);

fn chromium() -> PathBuf {
    std::env::var_os("GATEHOUSE_CHROMIUM").map_or_else(|| PathBuf::from("/usr/bin/chromium"), PathBuf::from)
}

/// Whether browser tests can run: true when /usr/bin/chromium (or $GATEHOUSE_CHROMIUM) exists and
/// node is on PATH. When not: under CI=true panic with a loud message; otherwise eprintln a loud
/// multi-line WARNING banner and return false.
pub fn browser_available() -> bool {
    let chromium = chromium();
    let mut missing = Vec::new();
    if !chromium.is_file() {
        missing.push(format!(
            "Chromium is not at {} (install Debian's `chromium`, or set GATEHOUSE_CHROMIUM)",
            chromium.display()
        ));
    }
    let node = Command::new("node")
        .arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    if !node.is_ok_and(|s| s.success()) {
        missing.push("`node` is not on PATH (install Debian's `nodejs` and `npm`)".to_owned());
    }
    if missing.is_empty() {
        return true;
    }
    let message = format!(
        "\n!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n\
         !!! WARNING: real-browser tests are SKIPPED:\n\
         {}\
         !!! .ci/run installs both; CI=true makes this a failure.\n\
         !!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n",
        missing.iter().map(|m| format!("!!!   - {m}\n")).collect::<String>()
    );
    assert!(
        std::env::var("CI").map_or(true, |v| v != "true"),
        "CI=true requires headless Chromium and node: {message}"
    );
    eprintln!("{message}");
    false
}

/// Fills in one hosted form as a person would (see `tests/browser/fill_form.mjs` for the plan).
pub fn fill_form(plan: &Value) -> Result<Value, String> {
    run_script("fill_form.mjs", plan)
}

/// Walks pages and the sign-ins they redirect to, step by step (see `tests/browser/walk.mjs`).
pub fn walk(plan: &Value) -> Result<Value, String> {
    run_script("walk.mjs", plan)
}

/// Stages the npm packages with `script` and the module it imports (runs `scripts/npm-stage
/// tests/browser target/browser-node SCRIPT chromium.mjs` from the repo root, serialised across
/// test processes by npm-stage's own lock), runs the script with `plan` on stdin (blocking; call
/// it from spawn_blocking), with a timeout of 120 s, and returns the parsed JSON result; Err(text with stdout+stderr) when it failed.
fn run_script(script: &str, plan: &Value) -> Result<Value, String> {
    let root = repo();
    let mut stage = Command::new(root.join("scripts/npm-stage"));
    stage
        .current_dir(&root)
        .args(["tests/browser", "target/browser-node", script, "chromium.mjs"]);
    let staged = run_with_timeout(&mut stage, b"", STAGE_TIMEOUT)?;
    if !staged.status.success() {
        return Err(staged.describe(&format!("scripts/npm-stage tests/browser target/browser-node {script}")));
    }

    let mut node = Command::new("node");
    node.current_dir(&root).arg(format!("target/browser-node/{script}"));
    let ran = run_with_timeout(&mut node, plan.to_string().as_bytes(), SCRIPT_TIMEOUT)?;
    let what = format!("node target/browser-node/{script}");
    // The result is the last line of stdout; anything before it is stray output.
    let parsed = ran
        .stdout
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .and_then(|l| serde_json::from_str::<Value>(l).ok());
    match parsed {
        Some(result) if ran.status.success() && result["ok"] == Value::Bool(true) => Ok(result),
        _ => Err(ran.describe(&what)),
    }
}

/// target/browser-artifacts/<test name>/ (created, emptied first) for screenshots kept as test
/// artifacts. Characters other than letters, digits, `-`, `_` and `.` in `test` become `_`.
pub fn artifact_dir(test: &str) -> PathBuf {
    let name: String = test
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    assert!(
        !name.is_empty() && name != "." && name != "..",
        "bad artifact dir name {test:?}"
    );
    let dir = repo().join("target/browser-artifacts").join(name);
    match std::fs::remove_dir_all(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => panic!("cannot empty {}: {e}", dir.display()),
    }
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
    dir
}

struct Finished {
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

impl Finished {
    fn describe(&self, what: &str) -> String {
        format!(
            "{what} failed ({}):\n--- stdout\n{}\n--- stderr\n{}",
            self.status, self.stdout, self.stderr
        )
    }
}

/// Runs `command` in a process group of its own with `input` on stdin; on timeout the whole group
/// (e.g. npm under npm-stage) is killed and an Err returned. Playwright starts Chromium in a group
/// of its own, but Chromium exits by itself when its pipe to the killed node process closes.
fn run_with_timeout(command: &mut Command, input: &[u8], timeout: Duration) -> Result<Finished, String> {
    use std::os::unix::process::CommandExt;
    let shown = format!("{command:?}");
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .map_err(|e| format!("cannot run {shown}: {e}"))?;
    let stdin = child.stdin.take().expect("piped stdin");
    let input = input.to_vec();
    // A writer thread, so a child that does not read its stdin cannot block us past the deadline.
    let writer = std::thread::spawn(move || {
        let mut stdin = stdin;
        let _ = stdin.write_all(&input);
    });
    let stdout = drain(child.stdout.take().expect("piped stdout"));
    let stderr = drain(child.stderr.take().expect("piped stderr"));
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if Instant::now() >= deadline => break None,
            Ok(None) => std::thread::sleep(Duration::from_millis(50)),
            Err(e) => {
                kill_group(&mut child);
                return Err(format!("waiting for {shown}: {e}"));
            }
        }
    };
    // Also after a normal exit: nothing the child left behind in its group may outlive it (or keep
    // the pipes open, which would block the readers below).
    kill_group(&mut child);
    let _ = writer.join();
    let stdout = stdout.join().unwrap_or_default();
    let stderr = stderr.join().unwrap_or_default();
    match status {
        Some(status) => Ok(Finished { status, stdout, stderr }),
        None => Err(format!(
            "{shown} timed out after {} s and was killed:\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
            timeout.as_secs()
        )),
    }
}

fn drain(mut pipe: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = pipe.read_to_end(&mut bytes);
        String::from_utf8_lossy(&bytes).into_owned()
    })
}

/// SIGKILL to the child's process group (it leads one: `process_group(0)`), then reaps the child.
fn kill_group(child: &mut Child) {
    let _ = Command::new("kill")
        .args(["-KILL", "--", &format!("-{}", child.id())])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    let _ = child.kill();
    let _ = child.wait();
}
