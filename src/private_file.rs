//! Files and directories only their owner can read: the development key file and the SQLite
//! database. A leaf: it imports nothing of gatehouse.

use std::fs;
use std::io;
use std::path::Path;

/// Creates a new file (failing if it exists) that only its owner can read and write (0600).
#[cfg(unix)]
pub fn create_private_file(path: &Path) -> io::Result<fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
}

#[cfg(not(unix))]
pub fn create_private_file(path: &Path) -> io::Result<fs::File> {
    fs::OpenOptions::new().write(true).create_new(true).open(path)
}

/// Creates a directory (and its parents) that only its owner can enter (0700).
#[cfg(unix)]
pub fn create_private_dir(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)
}

#[cfg(not(unix))]
pub fn create_private_dir(dir: &Path) -> io::Result<()> {
    fs::DirBuilder::new().recursive(true).create(dir)
}
