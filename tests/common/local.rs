//! What the tests and the benchmark need of this machine and nothing of gatehouse: the repository
//! root, a free loopback port, the clock and programs on PATH. The benchmark includes this file
//! with `#[path]`.

use std::path::PathBuf;

/// The repository root (tests run scripts and read files from it).
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A loopback port nobody listens on right now, for a server that must know its address before
/// it starts (its configuration points at itself, or it is another process).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free loopback port")
        .port()
}

/// Seconds since the Unix epoch (token lifetimes).
pub fn unix_seconds() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The program `name` on PATH, if there is one.
pub fn on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}
