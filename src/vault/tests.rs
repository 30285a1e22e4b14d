//! Unit tests of the key ring: round trips, rotation, tampering, key parsing, the development key
//! file and MACs.

use std::fs;
use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Barrier};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chacha20poly1305::aead::KeyInit;
use hmac::Hmac;
use sha2::{Digest, Sha256};

use super::keys::{KEY_ID_LABEL, KEY_LEN, RingKey, hmac_sha256};
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
        assert!(!debug.contains(&hex::encode(&raw)), "{debug}");
        assert!(!debug.contains(&hex::encode(&raw[..KEY_ID_LEN])), "{debug}");
    }
    for key in ring.keys() {
        assert!(!debug.contains(&hex::encode(key.aead.0)) && !debug.contains(&hex::encode(key.mac.0)));
        assert!(debug.contains(&hex::encode(key.id)));
    }
}

#[test]
fn key_ids_name_the_key_that_sealed_a_ciphertext() {
    let (old, new) = (KeyRing::generate_key(), KeyRing::generate_key());
    let old_ring = ring(&[&old]);
    let rotated = ring(&[&new, &old]);
    let ids = rotated.key_ids();
    assert_eq!(ids.len(), 2);
    assert_eq!(
        ids[1],
        old_ring.key_ids()[0],
        "the old key keeps its id in the new ring"
    );

    let by_old = old_ring.encrypt(b"token", CTX);
    let by_new = rotated.encrypt(b"token", CTX);
    assert_eq!(KeyId::of(&by_old), Some(ids[1]));
    assert_eq!(KeyId::of(&by_new), Some(ids[0]));
    assert!(
        by_new.starts_with(&rotated.stamp()),
        "the first key's ciphertexts carry its stamp"
    );
    assert!(!by_old.starts_with(&rotated.stamp()));
    assert_eq!(
        KeyId::of(&rotated.stamp()),
        Some(ids[0]),
        "the stamp alone names the key"
    );

    assert_eq!(KeyId::of(&[]), None);
    assert_eq!(KeyId::of(&by_new[..STAMP_LEN - 1]), None, "too short");
    let mut other_version = by_new.clone();
    other_version[0] = VERSION + 1;
    assert_eq!(KeyId::of(&other_version), None);
    let shown = ids[0].to_string();
    assert_eq!(shown.len(), 8);
    assert!(shown.bytes().all(|b| b.is_ascii_hexdigit()), "{shown}");
}
