//! deploy/gatehouse.service as systemd reads it: `systemd-analyze verify` has nothing to say about
//! it (a copy whose ExecStart names this build's binary, since verify wants the program to exist,
//! and /usr/local/bin/gatehouse is not installed here), `systemd-analyze security --offline`
//! rates its exposure 2.0 ("OK") or better, and it has the hardening the deployment chapter
//! promises: a dedicated user, a read-only system, no new privileges, and a state directory that
//! holds the SQLite default. Without `systemd-analyze` (package `systemd`, which `.ci/run`
//! installs) the test skips loudly, and fails under `CI=true`.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::deploy_files::{deploy_file, substitute};
use common::local::on_path;
use common::python::unavailable;
use common::replica::BINARY;

/// deploy/gatehouse.service with ExecStart naming this build's binary.
fn unit() -> String {
    substitute(
        "systemd unit",
        "tests/systemd.rs",
        &deploy_file("gatehouse.service"),
        &[("ExecStart=/usr/local/bin/gatehouse ", format!("ExecStart={BINARY} "))],
    )
}

/// `systemd-analyze ARGS .../gatehouse.service` with `unit` as that file.
fn analyze(systemd_analyze: &Path, args: &[&str], unit: &str) -> Output {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("gatehouse.service");
    std::fs::write(&path, unit).expect("write the unit");
    Command::new(systemd_analyze)
        .args(args)
        .arg(&path)
        .output()
        .expect("run systemd-analyze")
}

/// What `output` printed, both streams.
fn said(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

#[test]
fn the_systemd_unit_verifies_and_is_hardened() {
    let Some(systemd_analyze) = on_path("systemd-analyze") else {
        unavailable(
            "systemd-analyze",
            "no `systemd-analyze` on PATH; apt-get install systemd",
        );
        return;
    };
    let unit = unit();
    // verify warns (unknown keys, bad values) on stderr and still exits 0: nothing may be said.
    let verified = analyze(&systemd_analyze, &["verify", "--man=no"], &unit);
    assert!(
        verified.status.success() && verified.stderr.is_empty(),
        "systemd-analyze verify: {}",
        said(&verified)
    );
    // ...which it does for a misspelt key: the check above is not blind.
    let misspelt = analyze(
        &systemd_analyze,
        &["verify", "--man=no"],
        &unit.replace("ProtectSystem=", "ProtectSytem="),
    );
    assert!(said(&misspelt).contains("ProtectSytem"), "{}", said(&misspelt));

    let security = analyze(
        &systemd_analyze,
        &["security", "--offline=yes", "--threshold=20", "--no-pager"],
        &unit,
    );
    assert!(security.status.success(), "exposure above 2.0: {}", said(&security));

    let service: Vec<&str> = unit
        .lines()
        .skip_while(|line| *line != "[Service]")
        .take_while(|line| !line.starts_with("[Install]"))
        .collect();
    for setting in [
        "User=gatehouse",
        "Group=gatehouse",
        "ProtectSystem=strict",
        "NoNewPrivileges=yes",
        "StateDirectory=gatehouse",
        // The SQLite default, sqlite://gatehouse.db, is relative to the working directory.
        "WorkingDirectory=/var/lib/gatehouse",
        "CapabilityBoundingSet=",
    ] {
        assert!(service.contains(&setting), "[Service] sets {setting}");
    }
}
