//! The official MCP conformance suite's requirement sets for protocols 2025-11-25 and 2026-07-28,
//! each run against the test-only `gatehouse-conformance` binary (the `conformance` feature, which
//! serves the suite's fixture tools, resources and prompts). Each test builds that binary itself,
//! next to the normal build in the same target directory, and starts it on SQLite.

mod common;

use std::path::PathBuf;
use std::process::{Command, Stdio};

use common::python::{run, unavailable};
use common::{free_port, repo};
use serde_json::Value;

/// What cargo sets for the crate under test (`CARGO_PKG_NAME`, `CARGO_MANIFEST_DIR`, `OUT_DIR`...).
/// Some build scripts rerun when these change (ring's does), so a build that inherited them would
/// rebuild those crates, and everything above them, twice over: for itself and for the next
/// ordinary build.
fn set_for_the_test(name: &str) -> bool {
    const PREFIXES: [&str; 6] = [
        "CARGO_PKG_",
        "CARGO_BIN_",
        "CARGO_MANIFEST_",
        "CARGO_CRATE_",
        "CARGO_PRIMARY_",
        "CARGO_CFG_",
    ];
    name == "OUT_DIR"
        || name == "CARGO_TARGET_TMPDIR"
        || name == "CARGO_RUSTC_CURRENT_DIR"
        || PREFIXES.iter().any(|prefix| name.starts_with(prefix))
}

/// Builds `gatehouse-conformance` with cargo's own `cargo` and returns the executable's path.
fn build_conformance_binary() -> Result<PathBuf, String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut command = Command::new(cargo);
    for (name, _) in std::env::vars_os() {
        if name.to_str().is_some_and(set_for_the_test) {
            command.env_remove(name);
        }
    }
    let output = run(command.current_dir(repo()).args([
        "build",
        "--features",
        "conformance",
        "--bin",
        "gatehouse-conformance",
        "--message-format=json-render-diagnostics",
    ]))?;
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|message| {
            message["reason"] == "compiler-artifact" && message["target"]["name"] == "gatehouse-conformance"
        })
        .find_map(|message| message["executable"].as_str().map(PathBuf::from))
        .ok_or_else(|| "cargo built no gatehouse-conformance executable".to_owned())
}

fn have(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// The scored scenarios of the CLI's summary, as `(name, passed)`. The summary lists every
/// scenario run (`✓ NAME: 3 passed, 0 failed`, `✗ NAME: …`), then those not scored for the
/// revision (`  ✗ NAME (pending)`), which are left out.
fn scored_scenarios(output: &str) -> Vec<(String, bool)> {
    let mut lines = output.lines().skip_while(|line| *line != "=== SUMMARY ===");
    let run: Vec<(String, bool)> = lines
        .by_ref()
        .take_while(|line| !line.starts_with("Total: "))
        .filter_map(|line| {
            let passed = line.starts_with('✓');
            let (name, _) = line.strip_prefix(['✓', '✗'])?.trim().split_once(": ")?;
            Some((name.to_owned(), passed))
        })
        .collect();
    let not_scored: Vec<&str> = lines
        .skip_while(|line| !line.starts_with("Not scored for"))
        .filter_map(|line| line.trim().strip_prefix(['✓', '✗'])?.split_whitespace().next())
        .collect();
    run.into_iter()
        .filter(|(name, _)| !not_scored.contains(&name.as_str()))
        .collect()
}

/// Kills the server when the test ends, however it ends.
struct Server(std::process::Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs the suite's requirement set for `revision` against a fresh `gatehouse-conformance` and
/// asserts that no scored scenario fails, that at least `scored` of them ran, `sample` among them,
/// and that the CLI reports success.
async fn requirements_pass(revision: &str, scored: usize, sample: &str) {
    if !have("node") || !have("npm") {
        return unavailable("Node.js and npm", "not installed");
    }
    let binary = tokio::task::spawn_blocking(build_conformance_binary)
        .await
        .expect("join")
        .expect("build gatehouse-conformance");
    let dir = tempfile::tempdir().expect("dir");
    let bind = format!("127.0.0.1:{}", free_port());
    let config = dir.path().join("gatehouse.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\nbind = \"{bind}\"\n[database]\nurl = \"sqlite://{}\"\n[mcp]\nconformance_fixtures = true\n",
            dir.path().join("gatehouse.db").display()
        ),
    )
    .expect("write config");
    let child = Command::new(binary)
        .arg("--config")
        .arg(&config)
        .arg("serve")
        .current_dir(dir.path())
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start gatehouse-conformance");
    let _server = Server(child);
    common::until_ready(&bind).await;

    let url = format!("http://{bind}/mcp");
    let revision_arg = revision.to_owned();
    let output = tokio::task::spawn_blocking(move || {
        Command::new("bash")
            .arg(repo().join("tests/conformance/run.sh"))
            .args([url.as_str(), "--requirements", revision_arg.as_str()])
            .output()
            .expect("run the conformance suite")
    })
    .await
    .expect("join");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let scenarios = scored_scenarios(&text);
    let failed: Vec<&String> = scenarios
        .iter()
        .filter(|(_, passed)| !passed)
        .map(|(name, _)| name)
        .collect();
    assert!(
        failed.is_empty(),
        "{revision}: scored scenarios failed: {failed:?}\n{text}"
    );
    assert!(
        scenarios.len() >= scored && scenarios.iter().any(|(name, _)| name == sample),
        "{revision}: the summary lists every scored server scenario:\n{text}"
    );
    assert!(
        output.status.success(),
        "{revision}: the CLI reports a failure:\n{text}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn requirements_2025_11_25_pass_against_the_fixtures() {
    requirements_pass("2025-11-25", 30, "tools-call-sampling").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn requirements_2026_07_28_pass_against_the_fixtures() {
    requirements_pass("2026-07-28", 35, "input-required-result-multi-round").await;
}

#[test]
fn the_summary_is_read_without_the_scenarios_not_scored() {
    let output = "=== Running scenario: ping ===\n=== SUMMARY ===\n✓ ping: 2 passed, 0 failed\n\
                  ✗ tools-list: 1 passed, 1 failed\n✗ json-schema-2020-12: 1 passed, 1 failed\n\n\
                  Total: 4 passed, 2 failed\n\nNot scored for 2025-11-25: 1 scenario(s) run, 1 failing.\n  \
                  ✗ json-schema-2020-12 (pending)\n";
    assert_eq!(
        scored_scenarios(output),
        [("ping".to_owned(), true), ("tools-list".to_owned(), false)]
    );
}
