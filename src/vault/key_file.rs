//! The development key file: one key for the embedded SQLite default, created private and
//! atomically on first start and read back on every later one.

use std::fs;
use std::io::{self, Read, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

use super::keys::{KeyBytes, decode_key, wipe};
use super::{KeyRing, VaultError};
use crate::private_file::{create_private_dir, create_private_file};

/// A key file holds one base64 key and a newline; anything much larger is not a key file.
const KEY_FILE_MAX_LEN: u64 = 1024;
/// How long to wait for another process that has just created the key file to finish writing it.
const KEY_FILE_SETTLE: Duration = Duration::from_secs(1);
const KEY_FILE_RETRY: Duration = Duration::from_millis(20);

impl KeyRing {
    /// The development key file for the embedded SQLite default: read it if it exists (refusing a
    /// file that group or others can access, since it protects tokens), otherwise create it with
    /// a new random key, mode 0600, created atomically (`create_new`, i.e. `O_EXCL`, so two
    /// processes starting at once cannot both write different keys; the one that loses the race
    /// reads the winner's file, waiting up to a second for the winner to finish writing it).
    /// Missing parent directories are created (mode 0700).
    pub fn load_or_create_dev_key(path: &Path) -> Result<Self, VaultError> {
        let file_error = |reason: String| VaultError::KeyFile {
            path: path.to_path_buf(),
            reason,
        };
        if let Some(ring) = read_key_file(path)? {
            return Ok(ring);
        }

        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            create_private_dir(parent)
                .map_err(|e| file_error(format!("cannot create directory {}: {e}", parent.display())))?;
        }
        let mut file = match create_private_file(path) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                // Another process created it between our read and our create: use its key.
                return read_key_file(path)?
                    .ok_or_else(|| file_error("was created and then removed by another process".into()));
            }
            Err(e) => return Err(file_error(format!("cannot create: {e}"))),
        };

        let raw = KeyBytes::random();
        let mut line = STANDARD.encode(raw.0).into_bytes();
        line.push(b'\n');
        let written = file.write_all(&line).and_then(|()| file.sync_all());
        wipe(&mut line);
        if let Err(e) = written {
            // Leave no empty or partial file behind: it would block every later start.
            let _ = fs::remove_file(path);
            return Err(file_error(format!("cannot write: {e}")));
        }
        tracing::info!(path = %path.display(), "vault: created a development key file");
        Ok(Self::single(&raw))
    }
}

/// Reads the key file if it exists (`None` if not). A file that does not hold a key yet may be
/// one another process has just created and is still writing, so it is re-read for a moment
/// before being reported as bad.
fn read_key_file(path: &Path) -> Result<Option<KeyRing>, VaultError> {
    let file_error = |reason: String| VaultError::KeyFile {
        path: path.to_path_buf(),
        reason,
    };
    let deadline = Instant::now() + KEY_FILE_SETTLE;
    loop {
        let file = match fs::File::open(path) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(file_error(format!("cannot open: {e}"))),
        };
        // Check the opened file itself, not the path, so it cannot be swapped in between.
        let meta = file.metadata().map_err(|e| file_error(format!("cannot stat: {e}")))?;
        if !meta.is_file() {
            return Err(file_error("is not a regular file".into()));
        }
        check_private(&meta).map_err(file_error)?;

        let mut text = Vec::new();
        file.take(KEY_FILE_MAX_LEN)
            .read_to_end(&mut text)
            .map_err(|e| file_error(format!("cannot read: {e}")))?;
        let parsed = std::str::from_utf8(&text)
            .map_err(|_| "not base64 (standard or URL-safe)".to_owned())
            .and_then(decode_key);
        wipe(&mut text);
        match parsed {
            Ok(raw) => {
                return Ok(Some(KeyRing::single(&raw)));
            }
            Err(reason) if Instant::now() >= deadline => {
                return Err(file_error(format!(
                    "does not hold a key: {reason}; a key is 32 random bytes in base64"
                )));
            }
            Err(_) => std::thread::sleep(KEY_FILE_RETRY),
        }
    }
}

/// Refuses a key file that group or others can read or write: it protects every stored token.
#[cfg(unix)]
fn check_private(meta: &fs::Metadata) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(format!(
            "mode {mode:04o} lets group or others access it; it protects stored tokens, so \
             make it private (chmod 600)"
        ));
    }
    Ok(())
}

#[cfg(not(unix))]
fn check_private(_meta: &fs::Metadata) -> Result<(), String> {
    Ok(())
}
