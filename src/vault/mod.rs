//! Encryption at rest for third-party OAuth tokens and form secrets, and MACs for CSRF tokens.
//!
//! A [`KeyRing`] holds the keys configured as `[secrets] keys`, newest first. The first key
//! encrypts and signs; every key decrypts and verifies, so a key can be rotated by putting a new
//! key in front and dropping the old one once nothing encrypted with it is left.
//!
//! # Keys
//!
//! A configured key is 32 random bytes in base64. It is never used directly: each key yields,
//! through HMAC-SHA256 keyed with it,
//! - an AEAD key: `HMAC(key, "gatehouse/aead/v1")`,
//! - a MAC key: `HMAC(key, "gatehouse/mac/v1")`,
//!
//! and a public key id: the first 4 bytes of `SHA-256("gatehouse/key-id/v1" || key)`, which
//! tells which key encrypted a value without revealing anything usable about the key. Separate
//! derived keys mean a weakness in how one purpose uses its key cannot spill into the other.
//!
//! # Ciphertext format (version 1)
//!
//! ```text
//! offset  size  field
//! 0       1     version, 1
//! 1       4     key id of the key that encrypted it
//! 5       24    random nonce
//! 29      n+16  XChaCha20-Poly1305 ciphertext of the n-byte plaintext, then its 16-byte tag
//! ```
//!
//! The associated data is `version || key id || context`: the header cannot be edited, and the
//! caller's `context` (where the value is stored, e.g. `connection:alice:github:access_token`)
//! is authenticated but not stored, so a ciphertext copied into another row does not decrypt.
//! The nonce is 24 random bytes, large enough that random nonces never repeat in practice under
//! one key. The smallest ciphertext (an empty plaintext) is 45 bytes.
//!
//! # MACs
//!
//! [`KeyRing::mac`] is HMAC-SHA256 under the first key's MAC key over
//! `u64be(len(purpose)) || purpose || u64be(len(message)) || message`, in URL-safe base64 without
//! padding; [`KeyRing::verify_mac`] accepts a tag made by any key in the ring.
//!
//! # Key material in memory
//!
//! The ring's derived keys are overwritten when the ring is dropped, and so are the decoded
//! configured keys once derived. Short-lived copies the cipher crates make on the stack while
//! encrypting are not (their `zeroize` features are off to keep the build small).

use std::fmt;
use std::fs;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::alphabet;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use chacha20poly1305::aead::{AeadInOut, KeyInit};
use chacha20poly1305::{Key, Tag, XChaCha20Poly1305, XNonce};
use hmac::{Hmac, Mac};
use rand::RngCore;
use sha2::{Digest, Sha256};

use crate::secret::Secret;

/// The only ciphertext version so far; a new format gets a new number so old rows still decrypt.
const VERSION: u8 = 1;
/// Bytes in a configured key and in each derived key.
const KEY_LEN: usize = 32;
const KEY_ID_LEN: usize = 4;
const NONCE_LEN: usize = 24;
const TAG_LEN: usize = 16;
/// Version, key id and nonce.
const HEADER_LEN: usize = 1 + KEY_ID_LEN + NONCE_LEN;
/// The ciphertext of an empty plaintext.
const MIN_CIPHERTEXT_LEN: usize = HEADER_LEN + TAG_LEN;
/// Length of a MAC tag in URL-safe base64 without padding (32 bytes).
const MAC_TAG_B64_LEN: usize = 43;

const AEAD_KEY_LABEL: &[u8] = b"gatehouse/aead/v1";
const MAC_KEY_LABEL: &[u8] = b"gatehouse/mac/v1";
const KEY_ID_LABEL: &[u8] = b"gatehouse/key-id/v1";

/// A key file holds one base64 key and a newline; anything much larger is not a key file.
const KEY_FILE_MAX_LEN: u64 = 1024;
/// How long to wait for another process that has just created the key file to finish writing it.
const KEY_FILE_SETTLE: Duration = Duration::from_secs(1);
const KEY_FILE_RETRY: Duration = Duration::from_millis(20);

/// Decodes standard base64 with or without padding: operators paste keys from many tools.
const STANDARD_LENIENT: GeneralPurpose = GeneralPurpose::new(
    &alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);
/// Decodes URL-safe base64 with or without padding.
const URL_SAFE_LENIENT: GeneralPurpose = GeneralPurpose::new(
    &alphabet::URL_SAFE,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// Why a key could not be loaded or a value could not be decrypted. No message ever contains key
/// material or plaintext.
#[derive(Debug, thiserror::Error)]
pub enum VaultError {
    /// A configured key is unusable; `index` is its place in `[secrets] keys`.
    #[error("secrets.keys[{index}]: {reason} (a key is 32 random bytes in base64; `gatehouse generate-key` makes one)")]
    BadKey { index: usize, reason: String },
    /// `[secrets] keys` is an empty list.
    #[error("secrets.keys is empty: no keys to encrypt with (`gatehouse generate-key` makes one)")]
    NoKeys,
    /// The development key file could not be read, created or trusted.
    #[error("key file {}: {reason}", path.display())]
    KeyFile { path: PathBuf, reason: String },
    /// Authentication failed: wrong key, wrong context, tampered bytes, or a key no longer in the
    /// ring. Deliberately says no more, so it cannot be used as an oracle.
    #[error("cannot decrypt")]
    Decrypt,
    /// Not a ciphertext this version of gatehouse writes (too short, unknown version), or a
    /// decrypted value that should be text is not UTF-8.
    #[error("malformed ciphertext: {0}")]
    Malformed(String),
}

/// 32 bytes of key material, overwritten on drop so a freed ring leaves no keys in the heap.
#[derive(Clone)]
struct KeyBytes([u8; KEY_LEN]);

impl Drop for KeyBytes {
    fn drop(&mut self) {
        wipe(&mut self.0);
    }
}

/// The keys derived from one configured key.
#[derive(Clone)]
struct RingKey {
    id: [u8; KEY_ID_LEN],
    aead: KeyBytes,
    mac: KeyBytes,
}

impl RingKey {
    /// Derives the AEAD key, MAC key and id from a configured key (see the module doc).
    fn derive(key: &[u8; KEY_LEN]) -> Self {
        let mut id = [0u8; KEY_ID_LEN];
        let digest = Sha256::new().chain_update(KEY_ID_LABEL).chain_update(key).finalize();
        for (out, byte) in id.iter_mut().zip(digest.iter()) {
            *out = *byte;
        }
        Self {
            id,
            aead: derive_subkey(key, AEAD_KEY_LABEL),
            mac: derive_subkey(key, MAC_KEY_LABEL),
        }
    }

    fn cipher(&self) -> XChaCha20Poly1305 {
        XChaCha20Poly1305::new(&Key::from(self.aead.0))
    }

    fn mac_over(&self, purpose: &str, message: &[u8]) -> Hmac<Sha256> {
        let mut mac = hmac_sha256(&self.mac.0);
        mac.update(&(purpose.len() as u64).to_be_bytes());
        mac.update(purpose.as_bytes());
        mac.update(&(message.len() as u64).to_be_bytes());
        mac.update(message);
        mac
    }
}

/// The configured keys: the first encrypts and signs, all decrypt and verify.
#[derive(Clone)]
pub struct KeyRing {
    /// The newest key: encrypts, signs, and decrypts and verifies like the others. Held apart
    /// from the rest so a ring without a key cannot be built.
    first: RingKey,
    /// Older keys, newest first: they only decrypt and verify.
    rest: Vec<RingKey>,
}

impl KeyRing {
    /// Keys as configured (`[secrets] keys`), newest first: base64 (standard or URL-safe, with or
    /// without padding; surrounding whitespace ignored, as keys often come from files or env) of
    /// exactly 32 bytes. Errors name the index (`secrets.keys[1]`) and never the key.
    pub fn from_keys(keys: &[Secret<String>]) -> Result<Self, VaultError> {
        let mut ring = Vec::with_capacity(keys.len());
        for (index, key) in keys.iter().enumerate() {
            let raw = decode_key(key.expose()).map_err(|reason| VaultError::BadKey { index, reason })?;
            let derived = RingKey::derive(&raw.0);
            if let Some(first) = ring.iter().position(|k: &RingKey| k.id == derived.id) {
                // Harmless (it decrypts the same things) but likely a rotation done wrong.
                tracing::warn!("vault: secrets.keys[{index}] is the same key as secrets.keys[{first}]");
            }
            ring.push(derived);
        }
        let mut ring = ring.into_iter();
        let first = ring.next().ok_or(VaultError::NoKeys)?;
        Ok(Self {
            first,
            rest: ring.collect(),
        })
    }

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

        let mut raw = KeyBytes([0u8; KEY_LEN]);
        rand::rng().fill_bytes(&mut raw.0);
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

    /// Generates a new random key, base64 (standard), for `gatehouse generate-key` / docs.
    pub fn generate_key() -> String {
        let mut raw = KeyBytes([0u8; KEY_LEN]);
        rand::rng().fill_bytes(&mut raw.0);
        STANDARD.encode(raw.0)
    }

    /// Encrypts with the first key. `context` is authenticated but not stored (AAD): it binds the
    /// ciphertext to where it is stored (e.g. "connection:alice:github:access_token"), so a
    /// ciphertext moved to another row does not decrypt. Each call draws a fresh random nonce, so
    /// equal plaintexts give different ciphertexts.
    pub fn encrypt(&self, plaintext: &[u8], context: &str) -> Vec<u8> {
        let key = &self.first;
        let mut nonce = [0u8; NONCE_LEN];
        rand::rng().fill_bytes(&mut nonce);

        let mut out = Vec::with_capacity(MIN_CIPHERTEXT_LEN + plaintext.len());
        out.push(VERSION);
        out.extend_from_slice(&key.id);
        out.extend_from_slice(&nonce);
        out.extend_from_slice(plaintext);
        let aad = associated_data(&key.id, context);
        let sealed = match out.get_mut(HEADER_LEN..) {
            Some(body) => key
                .cipher()
                .encrypt_inout_detached(&XNonce::from(nonce), &aad, body.into())
                .ok(),
            None => None,
        };
        match sealed {
            Some(tag) => {
                out.extend_from_slice(&tag);
                out
            }
            None => {
                // Only a plaintext of 256 GiB or more gets here. The signature has no error to
                // return, so return what decrypt rejects as malformed rather than panic.
                tracing::error!(len = plaintext.len(), "vault: plaintext too long to encrypt");
                wipe(&mut out);
                Vec::new()
            }
        }
    }

    /// Decrypts with whichever key encrypted it (the key id in the ciphertext selects it).
    pub fn decrypt(&self, ciphertext: &[u8], context: &str) -> Result<Vec<u8>, VaultError> {
        let Some((&version, rest)) = ciphertext.split_first() else {
            return Err(VaultError::Malformed("empty".into()));
        };
        if version != VERSION {
            return Err(VaultError::Malformed(format!("unknown version {version}")));
        }
        if ciphertext.len() < MIN_CIPHERTEXT_LEN {
            return Err(VaultError::Malformed(format!(
                "{} bytes, shorter than the {MIN_CIPHERTEXT_LEN} of an empty value",
                ciphertext.len()
            )));
        }
        let too_short = || VaultError::Malformed("truncated".into());
        let (key_id, rest) = rest.split_first_chunk::<KEY_ID_LEN>().ok_or_else(too_short)?;
        let (nonce, rest) = rest.split_first_chunk::<NONCE_LEN>().ok_or_else(too_short)?;
        let (body, tag) = rest.split_last_chunk::<TAG_LEN>().ok_or_else(too_short)?;
        let nonce = XNonce::from(*nonce);
        let tag = Tag::from(*tag);
        let aad = associated_data(key_id, context);

        // Ids are 4 bytes, so two keys could share one: try each key that has it.
        let mut found = false;
        for key in self.keys().filter(|k| &k.id == key_id) {
            found = true;
            let mut plaintext = body.to_vec();
            if key
                .cipher()
                .decrypt_inout_detached(&nonce, &aad, plaintext.as_mut_slice().into(), &tag)
                .is_ok()
            {
                return Ok(plaintext);
            }
        }
        if !found {
            // The id is public (it is in the ciphertext), so logging it gives nothing away and
            // tells an operator that a key was removed from the ring too early.
            tracing::debug!(key_id = %hex(key_id), "vault: no key in the ring has this id");
        }
        Err(VaultError::Decrypt)
    }

    /// Encrypts UTF-8 text; see [`KeyRing::encrypt`].
    pub fn encrypt_str(&self, plaintext: &str, context: &str) -> Vec<u8> {
        self.encrypt(plaintext.as_bytes(), context)
    }

    /// Decrypts text, returned as a [`Secret`] so callers cannot log it by accident. A plaintext
    /// that is not UTF-8 is [`VaultError::Malformed`] (and is wiped, not returned).
    pub fn decrypt_str(&self, ciphertext: &[u8], context: &str) -> Result<Secret<String>, VaultError> {
        let plaintext = self.decrypt(ciphertext, context)?;
        match String::from_utf8(plaintext) {
            Ok(text) => Ok(Secret::new(text)),
            Err(e) => {
                wipe(&mut e.into_bytes());
                Err(VaultError::Malformed("decrypted value is not UTF-8".into()))
            }
        }
    }

    /// HMAC-SHA256 with the first key's MAC key (derived separately from its encryption key),
    /// over `purpose` and `message`, each length-prefixed so ("ab","c") != ("a","bc") and a tag
    /// made for one purpose never verifies for another. Returns URL-safe base64 without padding
    /// (43 characters), safe in URLs, cookies and form fields as is.
    pub fn mac(&self, purpose: &str, message: &[u8]) -> String {
        let tag = self.first.mac_over(purpose, message).finalize().into_bytes();
        URL_SAFE_NO_PAD.encode(tag)
    }

    /// Checks `tag` in constant time against the MAC under every key, so tokens made before a
    /// key rotation still verify. Every key is tried even after a match, so timing does not
    /// reveal which key made the tag.
    pub fn verify_mac(&self, purpose: &str, message: &[u8], tag: &str) -> bool {
        // The length of a tag is public; refusing early avoids decoding arbitrary input.
        if tag.len() != MAC_TAG_B64_LEN {
            return false;
        }
        let Ok(tag) = URL_SAFE_NO_PAD.decode(tag) else {
            return false;
        };
        let mut ok = false;
        for key in self.keys() {
            ok |= key.mac_over(purpose, message).verify_slice(&tag).is_ok();
        }
        ok
    }

    /// How many keys (for logs at start: "vault: 2 keys").
    pub fn len(&self) -> usize {
        1 + self.rest.len()
    }

    /// Always false: a ring always has a key to encrypt with. Here because `len` is.
    pub fn is_empty(&self) -> bool {
        false
    }

    fn single(raw: &KeyBytes) -> Self {
        Self {
            first: RingKey::derive(&raw.0),
            rest: Vec::new(),
        }
    }

    /// Every key, newest first.
    fn keys(&self) -> impl Iterator<Item = &RingKey> {
        std::iter::once(&self.first).chain(&self.rest)
    }
}

/// Prints only the number of keys and their public ids, never key bytes.
impl fmt::Debug for KeyRing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ids: Vec<String> = self.keys().map(|k| hex(&k.id)).collect();
        f.debug_struct("KeyRing")
            .field("keys", &self.len())
            .field("ids", &ids)
            .finish()
    }
}

/// `version || key id || context`: fixed-length header first, so the split is unambiguous.
fn associated_data(key_id: &[u8; KEY_ID_LEN], context: &str) -> Vec<u8> {
    let mut aad = Vec::with_capacity(1 + KEY_ID_LEN + context.len());
    aad.push(VERSION);
    aad.extend_from_slice(key_id);
    aad.extend_from_slice(context.as_bytes());
    aad
}

/// Decodes a configured key; the reason never quotes the input.
fn decode_key(text: &str) -> Result<KeyBytes, String> {
    let text = text.trim();
    let mut decoded = STANDARD_LENIENT
        .decode(text)
        .or_else(|_| URL_SAFE_LENIENT.decode(text))
        .map_err(|_| "not base64 (standard or URL-safe)".to_owned())?;
    let result = match <[u8; KEY_LEN]>::try_from(decoded.as_slice()) {
        Ok(raw) => Ok(KeyBytes(raw)),
        Err(_) => Err(format!("decodes to {} bytes, not {KEY_LEN}", decoded.len())),
    };
    wipe(&mut decoded);
    result
}

fn derive_subkey(key: &[u8; KEY_LEN], label: &[u8]) -> KeyBytes {
    let mut out = KeyBytes([0u8; KEY_LEN]);
    let derived = hmac_sha256(key).chain_update(label).finalize().into_bytes();
    for (o, b) in out.0.iter_mut().zip(derived.iter()) {
        *o = *b;
    }
    out
}

/// HMAC-SHA256 keyed with 32 bytes. HMAC zero-pads keys shorter than its 64-byte block, so
/// padding here gives the same MAC as `new_from_slice` without a `Result` that cannot fail.
fn hmac_sha256(key: &[u8; KEY_LEN]) -> Hmac<Sha256> {
    let mut block = hmac::digest::Key::<Hmac<Sha256>>::default();
    for (b, k) in block.iter_mut().zip(key.iter()) {
        *b = *k;
    }
    let mac = <Hmac<Sha256> as KeyInit>::new(&block);
    wipe(&mut block);
    mac
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

#[cfg(unix)]
fn create_private_file(path: &Path) -> io::Result<fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
}

#[cfg(not(unix))]
fn create_private_file(path: &Path) -> io::Result<fs::File> {
    fs::OpenOptions::new().write(true).create_new(true).open(path)
}

#[cfg(unix)]
fn create_private_dir(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)
}

#[cfg(not(unix))]
fn create_private_dir(dir: &Path) -> io::Result<()> {
    fs::DirBuilder::new().recursive(true).create(dir)
}

/// Overwrites key material or plaintext with zeros in a way the optimizer cannot remove.
fn wipe(bytes: &mut [u8]) {
    for byte in bytes.iter_mut() {
        // SAFETY: `byte` is a valid, aligned, exclusive reference to a `u8`.
        unsafe { std::ptr::write_volatile(byte, 0) };
    }
    std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::SeqCst);
}

fn hex(bytes: &[u8]) -> String {
    use fmt::Write as _;
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(out, "{b:02x}");
    }
    out
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Barrier};

    use super::*;

    fn ring(keys: &[&str]) -> KeyRing {
        let keys: Vec<Secret<String>> = keys.iter().map(|k| Secret::new((*k).to_owned())).collect();
        KeyRing::from_keys(&keys).expect("valid keys")
    }

    fn key_err(keys: &[&str]) -> String {
        let keys: Vec<Secret<String>> = keys.iter().map(|k| Secret::new((*k).to_owned())).collect();
        KeyRing::from_keys(&keys).expect_err("keys must be refused").to_string()
    }

    const CTX: &str = "connection:alice:github:access_token";

    #[test]
    fn round_trip_bytes_and_str() {
        let ring = ring(&[&KeyRing::generate_key()]);
        for plaintext in [
            &b""[..],
            b"x",
            b"gho_16C7e42F292c6912E7710c838347Ae178B4a",
            &[0u8; 1000],
        ] {
            let ct = ring.encrypt(plaintext, CTX);
            assert_eq!(ct.len(), MIN_CIPHERTEXT_LEN + plaintext.len());
            assert_eq!(ct[0], VERSION);
            assert_eq!(ring.decrypt(&ct, CTX).expect("decrypts"), plaintext);
        }
        let ct = ring.encrypt_str("hunter2 ✓", CTX);
        let text = ring.decrypt_str(&ct, CTX).expect("decrypts");
        assert_eq!(text.expose(), "hunter2 ✓");
        assert_eq!(format!("{text:?}"), "[redacted]");
    }

    #[test]
    fn decrypt_str_refuses_non_utf8() {
        let ring = ring(&[&KeyRing::generate_key()]);
        let ct = ring.encrypt(&[0xff, 0xfe], CTX);
        assert!(matches!(ring.decrypt_str(&ct, CTX), Err(VaultError::Malformed(_))));
    }

    #[test]
    fn nonces_differ_each_time() {
        let ring = ring(&[&KeyRing::generate_key()]);
        let a = ring.encrypt(b"same", CTX);
        let b = ring.encrypt(b"same", CTX);
        assert_ne!(a, b);
        assert_ne!(
            a[HEADER_LEN - NONCE_LEN..HEADER_LEN],
            b[HEADER_LEN - NONCE_LEN..HEADER_LEN]
        );
    }

    #[test]
    fn rotation() {
        let (old, new) = (KeyRing::generate_key(), KeyRing::generate_key());
        let old_ring = ring(&[&old]);
        let rotated = ring(&[&new, &old]);
        assert_eq!(rotated.len(), 2);

        let by_old = old_ring.encrypt(b"token", CTX);
        assert_eq!(rotated.decrypt(&by_old, CTX).expect("old key still decrypts"), b"token");

        let by_new = rotated.encrypt(b"token", CTX);
        assert!(matches!(old_ring.decrypt(&by_new, CTX), Err(VaultError::Decrypt)));
        assert_eq!(rotated.decrypt(&by_new, CTX).expect("decrypts"), b"token");
    }

    #[test]
    fn wrong_context_fails() {
        let ring = ring(&[&KeyRing::generate_key()]);
        let ct = ring.encrypt(b"token", CTX);
        for other in [
            "",
            "connection:alice:github:refresh_token",
            "connection:bob:github:access_token",
        ] {
            assert!(matches!(ring.decrypt(&ct, other), Err(VaultError::Decrypt)));
        }
    }

    #[test]
    fn tampering_with_any_byte_fails() {
        let ring = ring(&[&KeyRing::generate_key()]);
        let ct = ring.encrypt(b"a secret token", CTX);
        for i in 0..ct.len() {
            for flip in [0x01u8, 0x80] {
                let mut bad = ct.clone();
                bad[i] ^= flip;
                assert!(
                    ring.decrypt(&bad, CTX).is_err(),
                    "byte {i} flipped by {flip:#x} decrypted"
                );
            }
        }
        let mut longer = ct.clone();
        longer.push(0);
        assert!(ring.decrypt(&longer, CTX).is_err());
    }

    #[test]
    fn truncated_and_garbage_inputs_fail_without_panic() {
        let ring = ring(&[&KeyRing::generate_key()]);
        let ct = ring.encrypt(b"a secret token", CTX);
        for len in 0..ct.len() {
            assert!(
                ring.decrypt(&ct[..len], CTX).is_err(),
                "prefix of {len} bytes decrypted"
            );
        }
        for len in 0..=64 {
            let mut junk = vec![0u8; len];
            rand::rng().fill_bytes(&mut junk);
            assert!(ring.decrypt(&junk, CTX).is_err());
            if let Some(first) = junk.first_mut() {
                *first = VERSION;
            }
            assert!(ring.decrypt(&junk, CTX).is_err());
            assert!(ring.decrypt_str(&junk, CTX).is_err());
        }
        assert!(matches!(ring.decrypt(&[], CTX), Err(VaultError::Malformed(_))));
        assert!(matches!(ring.decrypt(&[2; 60], CTX), Err(VaultError::Malformed(_))));
    }

    #[test]
    fn from_keys_accepts_base64_variants() {
        let mut raw = [0u8; KEY_LEN];
        rand::rng().fill_bytes(&mut raw);
        raw[0] = 0xfb; // makes '+'/'/' (standard) differ from '-'/'_' (URL-safe)
        let standard = STANDARD.encode(raw);
        let variants = [
            standard.clone(),
            standard.trim_end_matches('=').to_owned(),
            URL_SAFE_NO_PAD.encode(raw),
            base64::engine::general_purpose::URL_SAFE.encode(raw),
            format!("  {standard}\n"),
        ];
        let expected = format!("{:?}", ring(&[&standard]));
        for v in &variants {
            assert_eq!(format!("{:?}", ring(&[v])), expected, "variant {v:?}");
        }
        let ct = ring(&[&variants[2]]).encrypt(b"x", CTX);
        assert_eq!(ring(&[&variants[0]]).decrypt(&ct, CTX).expect("same key"), b"x");
    }

    #[test]
    fn from_keys_errors_name_the_index() {
        let good = KeyRing::generate_key();
        let b31 = STANDARD.encode([7u8; 31]);
        let b33 = STANDARD.encode([7u8; 33]);

        let msg = key_err(&["not base64!!"]);
        assert!(msg.contains("secrets.keys[0]") && msg.contains("base64"), "{msg}");
        assert!(!msg.contains("not base64!!"), "{msg}");

        let msg = key_err(&[&good, &b31]);
        assert!(msg.contains("secrets.keys[1]") && msg.contains("31 bytes"), "{msg}");
        assert!(!msg.contains(&b31), "{msg}");

        let msg = key_err(&[&good, &good, &b33]);
        assert!(msg.contains("secrets.keys[2]") && msg.contains("33 bytes"), "{msg}");

        let msg = key_err(&[""]);
        assert!(msg.contains("secrets.keys[0]"), "{msg}");

        let msg = key_err(&[]);
        assert!(msg.contains("secrets.keys") && msg.contains("no keys"), "{msg}");
        assert!(matches!(KeyRing::from_keys(&[]), Err(VaultError::NoKeys)));
    }

    #[test]
    fn generated_keys_are_standard_base64_of_32_random_bytes() {
        let a = KeyRing::generate_key();
        assert_eq!(STANDARD.decode(&a).expect("standard base64").len(), KEY_LEN);
        assert_ne!(a, KeyRing::generate_key());
    }

    #[cfg(unix)]
    fn mode(path: &Path) -> u32 {
        use std::os::unix::fs::PermissionsExt;
        fs::metadata(path).expect("stat").permissions().mode() & 0o777
    }

    #[cfg(unix)]
    #[test]
    fn dev_key_file_is_created_private_and_reused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("data").join("vault.key");
        let first = KeyRing::load_or_create_dev_key(&path).expect("created");
        assert_eq!(mode(&path), 0o600);
        assert_eq!(first.len(), 1);
        let text = fs::read_to_string(&path).expect("read");
        assert_eq!(STANDARD.decode(text.trim()).expect("base64").len(), KEY_LEN);

        let second = KeyRing::load_or_create_dev_key(&path).expect("reused");
        let ct = first.encrypt(b"token", CTX);
        assert_eq!(second.decrypt(&ct, CTX).expect("same key"), b"token");
        // The file is an ordinary key: configuring its content gives the same ring.
        assert_eq!(ring(&[&text]).decrypt(&ct, CTX).expect("same key"), b"token");
    }

    #[cfg(unix)]
    #[test]
    fn dev_key_file_readable_by_others_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("vault.key");
        KeyRing::load_or_create_dev_key(&path).expect("created");
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).expect("chmod");
        let err = KeyRing::load_or_create_dev_key(&path).expect_err("must refuse 0644");
        let msg = err.to_string();
        assert!(matches!(err, VaultError::KeyFile { .. }));
        assert!(
            msg.contains(&path.display().to_string()) && msg.contains("0644"),
            "{msg}"
        );
        let key = fs::read_to_string(&path).expect("read");
        assert!(!msg.contains(key.trim()), "{msg}");
    }

    #[cfg(unix)]
    #[test]
    fn dev_key_file_with_garbage_is_refused() {
        use std::os::unix::fs::OpenOptionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("vault.key");
        let mut file = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .expect("create");
        file.write_all(b"c2hvcnQ=\n").expect("write");
        drop(file);
        let msg = KeyRing::load_or_create_dev_key(&path)
            .expect_err("must refuse")
            .to_string();
        assert!(
            msg.contains(&path.display().to_string()) && msg.contains("5 bytes"),
            "{msg}"
        );
    }

    #[test]
    fn concurrent_dev_key_creation_yields_one_key() {
        const THREADS: usize = 8;
        let dir = tempfile::tempdir().expect("tempdir");
        let path = Arc::new(dir.path().join("vault.key"));
        let barrier = Arc::new(Barrier::new(THREADS));
        let handles: Vec<_> = (0..THREADS)
            .map(|_| {
                let (path, barrier) = (Arc::clone(&path), Arc::clone(&barrier));
                std::thread::spawn(move || {
                    barrier.wait();
                    KeyRing::load_or_create_dev_key(&path)
                })
            })
            .collect();
        let rings: Vec<KeyRing> = handles
            .into_iter()
            .map(|h| h.join().expect("thread").expect("ring"))
            .collect();
        let ids = format!("{:?}", rings[0]);
        for (i, a) in rings.iter().enumerate() {
            assert_eq!(format!("{a:?}"), ids);
            let ct = a.encrypt(format!("from {i}").as_bytes(), CTX);
            for b in &rings {
                assert_eq!(b.decrypt(&ct, CTX).expect("shared key"), format!("from {i}").as_bytes());
            }
        }
    }

    #[test]
    fn mac_verifies_and_binds_purpose_message_and_key() {
        let ring = ring(&[&KeyRing::generate_key()]);
        let tag = ring.mac("csrf", b"session-123");
        assert!(ring.verify_mac("csrf", b"session-123", &tag));
        assert!(!ring.verify_mac("oauth-state", b"session-123", &tag));
        assert!(!ring.verify_mac("csrf", b"session-124", &tag));
        assert!(!ring.verify_mac("csrf", b"session-123", ""));
        assert!(!ring.verify_mac("csrf", b"session-123", &format!("{tag}A")));
        assert!(!ring.verify_mac("csrf", b"session-123", &tag[1..]));
        assert!(!ring.verify_mac("csrf", b"session-123", &"*".repeat(MAC_TAG_B64_LEN)));
        for i in 0..tag.len() {
            let mut bad: Vec<u8> = tag.clone().into_bytes();
            bad[i] = if bad[i] == b'A' { b'B' } else { b'A' };
            let bad = String::from_utf8(bad).expect("ascii");
            assert!(!ring.verify_mac("csrf", b"session-123", &bad), "tampered at {i}");
        }
        // Length prefixes: moving a byte between purpose and message changes the tag.
        assert_ne!(ring.mac("ab", b"c"), ring.mac("a", b"bc"));
        assert!(!ring.verify_mac("a", b"bc", &ring.mac("ab", b"c")));
        // Another key's tag does not verify.
        let other = self::ring(&[&KeyRing::generate_key()]);
        assert!(!other.verify_mac("csrf", b"session-123", &tag));
    }

    #[test]
    fn mac_survives_rotation_and_is_url_safe() {
        let (old, new) = (KeyRing::generate_key(), KeyRing::generate_key());
        let old_ring = ring(&[&old]);
        let rotated = ring(&[&new, &old]);
        let tag = old_ring.mac("csrf", b"m");
        assert!(rotated.verify_mac("csrf", b"m", &tag));
        assert!(!old_ring.verify_mac("csrf", b"m", &rotated.mac("csrf", b"m")));
        for i in 0..64u8 {
            let tag = rotated.mac("csrf", &[i]);
            assert_eq!(tag.len(), MAC_TAG_B64_LEN);
            assert!(
                tag.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_'),
                "{tag}"
            );
        }
    }

    #[test]
    fn derived_keys_are_separate_from_the_configured_key() {
        let mut raw = [0u8; KEY_LEN];
        rand::rng().fill_bytes(&mut raw);
        let key = RingKey::derive(&raw);
        assert_ne!(key.aead.0, raw);
        assert_ne!(key.mac.0, raw);
        assert_ne!(key.aead.0, key.mac.0);
        assert_ne!(&key.id[..], &raw[..KEY_ID_LEN]);
        let digest = Sha256::new().chain_update(KEY_ID_LABEL).chain_update(raw).finalize();
        assert_eq!(&key.id[..], &digest[..KEY_ID_LEN]);
    }

    #[test]
    fn padded_hmac_key_matches_hmac_from_slice() {
        let mut raw = [0u8; KEY_LEN];
        rand::rng().fill_bytes(&mut raw);
        let ours = hmac_sha256(&raw).chain_update(b"msg").finalize().into_bytes();
        let reference = <Hmac<Sha256> as KeyInit>::new_from_slice(&raw)
            .expect("any length")
            .chain_update(b"msg")
            .finalize()
            .into_bytes();
        assert_eq!(ours, reference);
    }

    #[test]
    fn debug_shows_no_key_material() {
        let (a, b) = (KeyRing::generate_key(), KeyRing::generate_key());
        let ring = ring(&[&a, &b]);
        let debug = format!("{ring:?}");
        assert!(debug.contains("keys: 2"), "{debug}");
        for key in [&a, &b] {
            assert!(!debug.contains(key.as_str()), "{debug}");
            let raw = STANDARD.decode(key).expect("base64");
            assert!(!debug.contains(&hex(&raw)), "{debug}");
            assert!(!debug.contains(&hex(&raw[..KEY_ID_LEN])), "{debug}");
        }
        for key in ring.keys() {
            assert!(!debug.contains(&hex(&key.aead.0)) && !debug.contains(&hex(&key.mac.0)));
            assert!(debug.contains(&hex(&key.id)));
        }
    }
}
