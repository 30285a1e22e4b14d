//! Where a stdio upstream's program is, found as the OS finds it when gatehouse starts the
//! process: a name with a `/` is a path (relative to gatehouse's working directory); any other
//! name is looked for in each directory of `PATH` in turn (an empty entry is the working
//! directory; without `PATH`, `/bin:/usr/bin`), passing over files that may not be run. What is
//! found must be a file with an execute permission bit. `check-config` and `doctor` refuse an
//! upstream whose program is not found this way, naming `upstreams[N].command`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::config::{Config, ConfigError, UpstreamConfig};

/// The search path execvp uses when `PATH` is not set.
const DEFAULT_PATH: &str = "/bin:/usr/bin";

/// Why a program cannot be started.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unusable {
    #[error("`{program}` is not found: no file of that name in any directory of PATH ({path})")]
    NotOnPath { program: String, path: String },
    #[error("`{0}` is not found: there is no file at that path")]
    NoFile(String),
    #[error("`{0}` cannot be run: it is not a file with execute permission")]
    NotExecutable(String),
}

/// Where the process's program is found: `PATH` is the process's own (an upstream's literal
/// `env.PATH`, else gatehouse's). `Ok(None)` when its `PATH` is a template, known only per user.
pub fn locate(upstream: &UpstreamConfig) -> Result<Option<PathBuf>, Unusable> {
    let Some(program) = upstream.command.as_ref().and_then(|c| c.first()) else {
        return Ok(None);
    };
    let path = match upstream.env.get("PATH") {
        Some(path) if path.contains("{{") => return Ok(None),
        Some(path) => Some(OsString::from(path)),
        None => std::env::var_os("PATH"),
    };
    find(program, path).map(Some)
}

/// `program` found with `path` as the search path (see the module's comment).
pub fn find(program: &str, path: Option<OsString>) -> Result<PathBuf, Unusable> {
    if program.contains('/') {
        let file = Path::new(program);
        if !file.exists() {
            return Err(Unusable::NoFile(program.to_owned()));
        }
        if !executable(file) {
            return Err(Unusable::NotExecutable(program.to_owned()));
        }
        return Ok(file.to_owned());
    }
    let path = path.unwrap_or_else(|| DEFAULT_PATH.into());
    let mut refused = None;
    for dir in std::env::split_paths(&path) {
        let dir = if dir.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            dir
        };
        let candidate = dir.join(program);
        if executable(&candidate) {
            return Ok(candidate);
        }
        if refused.is_none() && candidate.exists() {
            refused = Some(candidate);
        }
    }
    match refused {
        Some(file) => Err(Unusable::NotExecutable(file.display().to_string())),
        None => Err(Unusable::NotOnPath {
            program: program.to_owned(),
            path: path.to_string_lossy().into_owned(),
        }),
    }
}

/// A regular file (through symbolic links) with an execute permission bit.
fn executable(file: &Path) -> bool {
    let Ok(metadata) = std::fs::metadata(file) else {
        return false;
    };
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        metadata.is_file() && metadata.permissions().mode() & 0o111 != 0
    }
    #[cfg(not(unix))]
    metadata.is_file()
}

/// Every stdio upstream's program is found, else the first that is not, naming its key.
pub fn check_all(config: &Config) -> Result<(), ConfigError> {
    for (i, upstream) in config.upstreams.iter().enumerate() {
        if let Err(unusable) = locate(upstream) {
            return Err(ConfigError::key(
                format!("upstreams[{i}].command"),
                format!("{unusable}; install it where gatehouse runs (for the user it runs as) or give its full path"),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_looked_for_on_path_and_a_path_is_taken_as_it_is() {
        let dir = tempfile::tempdir().expect("dir");
        let plain = dir.path().join("plain");
        std::fs::write(&plain, "not a program").expect("write");
        let path = || Some(dir.path().as_os_str().to_owned());

        assert!(matches!(
            find("gatehouse-none", path()),
            Err(Unusable::NotOnPath { .. })
        ));
        assert!(matches!(find("plain", path()), Err(Unusable::NotExecutable(_))));
        let absent = dir.path().join("absent").display().to_string();
        assert_eq!(find(&absent, None), Err(Unusable::NoFile(absent.clone())));
        let plain_path = plain.display().to_string();
        assert_eq!(
            find(&plain_path, None),
            Err(Unusable::NotExecutable(plain_path.clone()))
        );
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&plain, std::fs::Permissions::from_mode(0o755)).expect("chmod");
            assert_eq!(find("plain", path()), Ok(plain.clone()));
            assert_eq!(find(&plain_path, None), Ok(plain));
        }
        assert!(find("sh", None).is_ok(), "the default search path holds sh");
    }
}
