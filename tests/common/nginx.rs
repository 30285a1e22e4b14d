//! A real nginx in front of replicas: Debian's `nginx` run as a process of its own, not the
//! system's service (its own prefix directory with the configuration, pid file, logs and temporary
//! paths, listening on a loopback port), with one of the repository's `deploy/nginx/`
//! configurations included in a minimal `http` block and adapted to this machine by substitutions
//! that must each match exactly once; stopped (master and workers) when dropped.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::deploy_files::{deploy_file, substitute, until_answering};
use super::local::on_path;
use super::python::unavailable;

/// The demo user's line of the htpasswd file nginx checks basic auth against: the Caddyfiles'
/// demo user and password, hashed by `openssl passwd -apr1 -salt gatehous demo-password`.
pub const DEMO_HTPASSWD: &str = "demo:$apr1$gatehous$Qsr9cCIEiOpxj6eh/Td0Z0\n";

/// `nginx` on PATH (or Debian's /usr/sbin/nginx, which a user's PATH may lack), or None after a
/// loud skip (a failure under `CI=true`: `.ci/run` installs Debian's package).
pub fn nginx_binary() -> Option<PathBuf> {
    let found = on_path("nginx").or_else(|| Some(PathBuf::from("/usr/sbin/nginx")).filter(|p| p.is_file()));
    if found.is_none() {
        unavailable("nginx", "no `nginx` on PATH; apt-get install nginx");
    }
    found
}

/// `deploy/nginx/{name}`, as an operator copies it.
pub fn deploy_conf(name: &str) -> String {
    deploy_file(&format!("nginx/{name}"))
}

/// `conf` (the text of `deploy/nginx/gatehouse.conf` or `gatehouse-prefixed.conf`; one list fits
/// both) made runnable here, every substitution matching exactly once:
///
/// 1. `listen 8080;` -> `listen 127.0.0.1:PORT;`: loopback only, on this shared machine.
/// 2. The replicas `127.0.0.1:8081` and `127.0.0.1:8082` -> `upstreams` (`host:port` each).
/// 3. `auth_basic_user_file /etc/nginx/gatehouse.htpasswd` -> `htpasswd`.
pub fn adapt(conf: &str, port: u16, upstreams: [&str; 2], htpasswd: &Path) -> String {
    substitute(
        "nginx configuration",
        "tests/common/nginx.rs's adapt()",
        conf,
        &[
            ("    listen 8080;\n", format!("    listen 127.0.0.1:{port};\n")),
            ("server 127.0.0.1:8081 ", format!("server {} ", upstreams[0])),
            ("server 127.0.0.1:8082 ", format!("server {} ", upstreams[1])),
            (
                "auth_basic_user_file /etc/nginx/gatehouse.htpasswd;",
                format!("auth_basic_user_file {};", htpasswd.display()),
            ),
        ],
    )
}

/// The main configuration around the included file: one worker, and every path nginx writes
/// under `dir` (pid file and error log come with `-g`). Run as root (as CI runs), nginx's workers
/// drop to nobody, who may read `dir` (see [`Nginx::prepare`]).
fn main_conf(dir: &Path) -> String {
    // SAFETY: geteuid(2) has no preconditions and cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    let nogroup = std::fs::read_to_string("/etc/group").is_ok_and(|groups| groups.contains("\nnogroup:"));
    let user = match (root, nogroup) {
        (false, _) => String::new(),
        (true, true) => "user nobody nogroup;\n".to_owned(),
        (true, false) => "user nobody nobody;\n".to_owned(),
    };
    let dir = dir.display();
    format!(
        "{user}worker_processes 1;
lock_file {dir}/nginx.lock;
events {{
    worker_connections 256;
}}
http {{
    access_log {dir}/access.log;
    client_body_temp_path {dir}/temp/body;
    proxy_temp_path {dir}/temp/proxy;
    fastcgi_temp_path {dir}/temp/fastcgi;
    uwsgi_temp_path {dir}/temp/uwsgi;
    scgi_temp_path {dir}/temp/scgi;
    include {dir}/gatehouse.conf;
}}
"
    )
}

/// nginx running `deploy/nginx/` configuration on `127.0.0.1:port`, stopped when dropped.
pub struct Nginx {
    child: std::process::Child,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    dir: tempfile::TempDir,
}

impl Nginx {
    /// Writes the main configuration, `conf` adapted (see [`adapt`]) for `port` and `upstreams`,
    /// and the demo user's htpasswd to a directory of its own, nginx's prefix; returns it and the
    /// command that runs nginx on it in the foreground (`extra` arguments added).
    fn prepare(
        nginx: &Path,
        conf: &str,
        port: u16,
        upstreams: [&str; 2],
        extra: &[&str],
    ) -> (tempfile::TempDir, Command) {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("nginx dir");
        let path = dir.path();
        // Workers running as nobody read the htpasswd file on every request.
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        std::fs::create_dir(path.join("temp")).expect("temp dir");
        let htpasswd = path.join("gatehouse.htpasswd");
        std::fs::write(&htpasswd, DEMO_HTPASSWD).expect("write htpasswd");
        std::fs::write(path.join("gatehouse.conf"), adapt(conf, port, upstreams, &htpasswd)).expect("write conf");
        std::fs::write(path.join("nginx.conf"), main_conf(path)).expect("write nginx.conf");
        let error_log = path.join("error.log");
        let globals = format!(
            "daemon off; pid {}; error_log {};",
            path.join("nginx.pid").display(),
            error_log.display()
        );
        let mut command = Command::new(nginx);
        command
            .env_clear()
            .arg("-p")
            .arg(format!("{}/", path.display()))
            .arg("-e")
            .arg(&error_log)
            .arg("-c")
            .arg(path.join("nginx.conf"))
            .args(["-g", &globals])
            .args(extra)
            .current_dir(path)
            .stdin(Stdio::null());
        (dir, command)
    }

    /// `nginx -t` of `conf` adapted as [`Nginx::start`] would run it: Ok, or what nginx said.
    pub fn check(nginx: &Path, conf: &str) -> Result<(), String> {
        let (_dir, mut command) = Self::prepare(nginx, conf, 18080, ["127.0.0.1:1", "127.0.0.1:2"], &["-t", "-q"]);
        let output = command.output().map_err(|e| format!("cannot run nginx: {e}"))?;
        if output.status.success() {
            Ok(())
        } else {
            Err(String::from_utf8_lossy(&output.stderr).into_owned())
        }
    }

    /// Runs `nginx` (from [`nginx_binary`]) with `conf` (a `deploy/nginx/` file's text) on
    /// `127.0.0.1:port` in front of `upstreams`, and waits until it answers.
    pub async fn start(nginx: &Path, conf: &str, port: u16, upstreams: [&str; 2]) -> Self {
        let (dir, mut command) = Self::prepare(nginx, conf, port, upstreams, &[]);
        let child = command
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn nginx");
        let mut nginx = Self {
            child,
            base: format!("http://127.0.0.1:{port}"),
            dir,
        };
        nginx.wait_ready().await;
        nginx
    }

    /// Everything nginx logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// Waits until nginx answers at all.
    async fn wait_ready(&mut self) {
        let log = self.log_path();
        let child = &mut self.child;
        until_answering("nginx", &self.base, &log, || child.try_wait().ok().flatten()).await;
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("error.log")
    }
}

impl Drop for Nginx {
    /// SIGTERM (nginx's fast shutdown: the master stops its workers, then itself), and a wait for
    /// the master to exit; SIGKILL if it has not within a few seconds.
    fn drop(&mut self) {
        let Ok(pid) = i32::try_from(self.child.id()) else {
            return;
        };
        // SAFETY: kill(2) with the pid of our own child and a valid signal number.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if !matches!(self.child.try_wait(), Ok(None)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
