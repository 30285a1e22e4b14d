//! A throwaway PostgreSQL cluster of one test's own (initdb and pg_ctl on a free port, as
//! `scripts/test` starts one), for tests that stop and restart the database. Never the shared
//! server. As root the cluster runs as the `postgres` account (initdb refuses root).

use std::path::{Path, PathBuf};
use std::process::Command;

use super::local::free_port;

pub struct Cluster {
    bindir: PathBuf,
    /// Holds the data directory and the server's socket and log; removed on drop.
    dir: tempfile::TempDir,
    port: u16,
    /// `runuser -u OWNER --` as root, else nothing.
    as_owner: Vec<String>,
}

impl Cluster {
    /// A new cluster, started. `None` (after a loud warning) when initdb and pg_ctl are missing;
    /// under `CI=true` that fails the test instead.
    pub fn start() -> Option<Self> {
        let Some(bindir) = pg_bindir() else {
            let message = "\n!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n\
                 !!! initdb/pg_ctl not found: the PostgreSQL fault tests are SKIPPED.\n\
                 !!! Install PostgreSQL or set GATEHOUSE_TEST_PG_BINDIR.\n\
                 !!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n";
            assert!(
                std::env::var("CI").map_or(true, |v| v != "true"),
                "CI=true requires PostgreSQL: {message}"
            );
            eprintln!("{message}");
            return None;
        };
        let root = is_root();
        let owner = if root { Some(unprivileged_account()) } else { None };
        let as_owner: Vec<String> = owner
            .iter()
            .flat_map(|owner| ["runuser".to_owned(), "-u".to_owned(), owner.clone(), "--".to_owned()])
            .collect();
        // Under the target directory, unless the owner cannot reach it there (then /tmp).
        let mut dir = tempfile::Builder::new()
            .prefix("pg-faults-")
            .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
            .expect("cluster dir");
        if let Some(owner) = &owner {
            chown(dir.path(), owner);
            let reachable = owned(&as_owner, Path::new("test"))
                .arg("-x")
                .arg(dir.path())
                .status()
                .is_ok_and(|status| status.success());
            if !reachable {
                dir = tempfile::Builder::new()
                    .prefix("gatehouse-pg-faults-")
                    .tempdir()
                    .expect("cluster dir in /tmp");
                chown(dir.path(), owner);
            }
        }
        let cluster = Self {
            bindir,
            dir,
            port: free_port(),
            as_owner,
        };
        cluster.pg(
            "initdb",
            &[
                "-D",
                &cluster.data(),
                "-U",
                "postgres",
                "--auth=trust",
                "--no-locale",
                "-E",
                "UTF8",
                "--no-sync",
            ],
        );
        cluster.start_server();
        Some(cluster)
    }

    /// The cluster's `postgres` database.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Starts the stopped server (on the same port) and waits until it accepts connections.
    pub fn start_server(&self) {
        self.pg_ctl_starting("start", &[]);
    }

    /// `pg_ctl start` or `restart` with the cluster's options. The server's output goes to its
    /// log file: a server holding pg_ctl's stdout would keep `pg` waiting for it to close.
    fn pg_ctl_starting(&self, action: &str, extra: &[&str]) {
        let options = format!(
            "-c listen_addresses=127.0.0.1 -p {} -k {} -c fsync=off",
            self.port,
            self.dir.path().display()
        );
        let log = self.dir.path().join("server.log").display().to_string();
        let data = self.data();
        let mut args = vec!["-D", &data, "-l", &log, "-w", "-t", "60", "-o", &options];
        args.extend_from_slice(extra);
        args.push(action);
        self.pg("pg_ctl", &args);
    }

    /// Stops the server as an operator would (`-m fast`: sessions are cut) and waits.
    pub fn stop_server(&self) {
        self.pg("pg_ctl", &["-D", &self.data(), "-m", "fast", "-w", "stop"]);
    }

    /// `pg_ctl restart -m fast`: sessions are cut, the server comes back on the same port.
    pub fn restart_server(&self) {
        self.pg_ctl_starting("restart", &["-m", "fast"]);
    }

    fn data(&self) -> String {
        self.dir.path().join("data").display().to_string()
    }

    /// Runs a PostgreSQL program as the cluster's owner, from `/` (the owner may not be allowed
    /// to read the current directory); panics with its output when it fails.
    fn pg(&self, program: &str, args: &[&str]) {
        let mut command = self.owner_command(program);
        command.args(args).current_dir("/");
        let output = command.output().unwrap_or_else(|e| panic!("{program}: {e}"));
        if !output.status.success() {
            let log = std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default();
            panic!(
                "{program} {args:?} failed: {}{}\nserver log:\n{log}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr),
            );
        }
    }

    fn owner_command(&self, program: &str) -> Command {
        owned(&self.as_owner, &self.bindir.join(program))
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let data = self.data();
        let _ = self
            .owner_command("pg_ctl")
            .args(["-D", &data, "-m", "immediate", "-w", "stop"])
            .current_dir("/")
            .output();
    }
}

/// Where initdb and pg_ctl are: `GATEHOUSE_TEST_PG_BINDIR`, else PATH, else the newest
/// `/usr/lib/postgresql/N/bin` (Debian keeps them off PATH), as `scripts/test` looks.
fn pg_bindir() -> Option<PathBuf> {
    let has_both = |dir: &Path| dir.join("initdb").is_file() && dir.join("pg_ctl").is_file();
    if let Ok(dir) = std::env::var("GATEHOUSE_TEST_PG_BINDIR") {
        return Some(PathBuf::from(dir)).filter(|dir| has_both(dir));
    }
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .find(|dir| has_both(dir));
    if on_path.is_some() {
        return on_path;
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse().ok()?;
            Some((version, entry.path().join("bin")))
        })
        .filter(|(_, dir)| has_both(dir))
        .collect();
    versions.sort();
    versions.pop().map(|(_, dir)| dir)
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|output| String::from_utf8_lossy(&output.stdout).trim() == "0")
}

/// The account a root-run test's cluster belongs to: `postgres`, else `nobody`.
fn unprivileged_account() -> String {
    let exists = Command::new("id")
        .args(["-u", "postgres"])
        .output()
        .is_ok_and(|output| output.status.success());
    if exists { "postgres" } else { "nobody" }.to_owned()
}

fn chown(path: &Path, owner: &str) {
    assert!(
        Command::new("chown")
            .arg(owner)
            .arg(path)
            .status()
            .is_ok_and(|status| status.success()),
        "chown {owner} {}",
        path.display()
    );
}

/// A command running `program` as the owner (after the `as_owner` prefix, if any).
fn owned(as_owner: &[String], program: &Path) -> Command {
    match as_owner.split_first() {
        Some((runuser, rest)) => {
            let mut command = Command::new(runuser);
            command.args(rest).arg(program);
            command
        }
        None => Command::new(program),
    }
}
