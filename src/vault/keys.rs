//! Key material: decoding a configured key, deriving its AEAD key, MAC key and public id (see the
//! parent module's doc), and wiping keys from memory when they are dropped.

use base64::Engine as _;
use base64::alphabet;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use chacha20poly1305::aead::KeyInit;
use chacha20poly1305::{Key, XChaCha20Poly1305};
use hmac::{Hmac, Mac};
use rand::RngCore;
use sha2::{Digest, Sha256};

use super::KEY_ID_LEN;

/// Bytes in a configured key and in each derived key.
pub(super) const KEY_LEN: usize = 32;

const AEAD_KEY_LABEL: &[u8] = b"gatehouse/aead/v1";
const MAC_KEY_LABEL: &[u8] = b"gatehouse/mac/v1";
pub(super) const KEY_ID_LABEL: &[u8] = b"gatehouse/key-id/v1";

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

/// 32 bytes of key material, overwritten on drop so a freed ring leaves no keys in the heap.
#[derive(Clone)]
pub(super) struct KeyBytes(pub(super) [u8; KEY_LEN]);

impl KeyBytes {
    /// A new random key.
    pub(super) fn random() -> Self {
        let mut raw = Self([0u8; KEY_LEN]);
        rand::rng().fill_bytes(&mut raw.0);
        raw
    }
}

impl Drop for KeyBytes {
    fn drop(&mut self) {
        wipe(&mut self.0);
    }
}

/// The keys derived from one configured key.
#[derive(Clone)]
pub(super) struct RingKey {
    pub(super) id: [u8; KEY_ID_LEN],
    pub(super) aead: KeyBytes,
    pub(super) mac: KeyBytes,
}

impl RingKey {
    /// Derives the AEAD key, MAC key and id from a configured key (see the module doc).
    pub(super) fn derive(key: &[u8; KEY_LEN]) -> Self {
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

    pub(super) fn cipher(&self) -> XChaCha20Poly1305 {
        XChaCha20Poly1305::new(&Key::from(self.aead.0))
    }

    pub(super) fn mac_over(&self, purpose: &str, message: &[u8]) -> Hmac<Sha256> {
        let mut mac = hmac_sha256(&self.mac.0);
        mac.update(&(purpose.len() as u64).to_be_bytes());
        mac.update(purpose.as_bytes());
        mac.update(&(message.len() as u64).to_be_bytes());
        mac.update(message);
        mac
    }
}

/// Decodes a configured key; the reason never quotes the input.
pub(super) fn decode_key(text: &str) -> Result<KeyBytes, String> {
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
pub(super) fn hmac_sha256(key: &[u8; KEY_LEN]) -> Hmac<Sha256> {
    let mut block = hmac::digest::Key::<Hmac<Sha256>>::default();
    for (b, k) in block.iter_mut().zip(key.iter()) {
        *b = *k;
    }
    let mac = <Hmac<Sha256> as KeyInit>::new(&block);
    wipe(&mut block);
    mac
}

/// Overwrites key material or plaintext with zeros in a way the optimizer cannot remove.
pub(super) fn wipe(bytes: &mut [u8]) {
    for byte in bytes.iter_mut() {
        // SAFETY: `byte` is a valid, aligned, exclusive reference to a `u8`.
        unsafe { std::ptr::write_volatile(byte, 0) };
    }
    std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::SeqCst);
}
