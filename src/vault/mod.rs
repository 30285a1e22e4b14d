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
//! tells which key encrypted a value without revealing anything usable about the key ([`KeyId`],
//! the fingerprint `gatehouse keys status` names keys by). Separate
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
//!
//! This module owns the ring and the formats above; `keys` owns key material (decoding, derivation,
//! wiping) and `key_file` the development key file.

mod key_file;
mod keys;

use std::fmt;
use std::path::PathBuf;

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use chacha20poly1305::aead::AeadInOut;
use chacha20poly1305::{Tag, XNonce};
use hmac::Mac;
use rand::RngCore;

use crate::secret::Secret;
use keys::{KeyBytes, RingKey, decode_key, wipe};

/// The only ciphertext version so far; a new format gets a new number so old rows still decrypt.
const VERSION: u8 = 1;
const KEY_ID_LEN: usize = 4;
const NONCE_LEN: usize = 24;
const TAG_LEN: usize = 16;
/// Version, key id and nonce.
const HEADER_LEN: usize = 1 + KEY_ID_LEN + NONCE_LEN;
/// The ciphertext of an empty plaintext.
const MIN_CIPHERTEXT_LEN: usize = HEADER_LEN + TAG_LEN;
/// Length of a MAC tag in URL-safe base64 without padding (32 bytes).
const MAC_TAG_B64_LEN: usize = 43;
/// How many leading bytes of a ciphertext say which key sealed it: the version and the key id.
pub const STAMP_LEN: usize = 1 + KEY_ID_LEN;

/// A key's public id (see the module doc): the fingerprint operators tell keys apart by, shown
/// as 8 hex digits. It reveals nothing usable about the key.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KeyId([u8; KEY_ID_LEN]);

impl KeyId {
    /// The key that sealed a ciphertext, read from its first [`STAMP_LEN`] bytes (a longer slice,
    /// such as the whole ciphertext, will do). `None` for a format this version does not write.
    pub fn of(ciphertext: &[u8]) -> Option<KeyId> {
        let (&version, rest) = ciphertext.split_first()?;
        let (id, _) = rest.split_first_chunk::<KEY_ID_LEN>()?;
        (version == VERSION).then_some(KeyId(*id))
    }
}

impl fmt::Display for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex::encode(self.0))
    }
}

impl fmt::Debug for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "KeyId({self})")
    }
}

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

    /// Generates a new random key, base64 (standard), for `gatehouse generate-key` / docs.
    pub fn generate_key() -> String {
        let raw = KeyBytes::random();
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
            tracing::debug!(key_id = %hex::encode(key_id), "vault: no key in the ring has this id");
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

    /// Every key's id, newest first: in the order of `[secrets] keys`.
    pub fn key_ids(&self) -> Vec<KeyId> {
        self.keys().map(|k| KeyId(k.id)).collect()
    }

    /// What every ciphertext the first key seals starts with (the version and the key's id): a
    /// stored ciphertext that starts otherwise was sealed by another key, or in an older format.
    pub fn stamp(&self) -> [u8; STAMP_LEN] {
        let mut stamp = [VERSION; STAMP_LEN];
        for (out, byte) in stamp.iter_mut().skip(1).zip(self.first.id) {
            *out = byte;
        }
        stamp
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
        let ids: Vec<String> = self.keys().map(|k| hex::encode(k.id)).collect();
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

#[cfg(test)]
mod tests;
