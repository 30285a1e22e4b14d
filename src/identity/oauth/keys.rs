//! The identity provider's signing keys (its JWKS): fetched when first needed and kept. A token
//! naming a key id the set lacks fetches the set again, at most once per refresh interval, so key
//! rotation works and a flood of made-up key ids costs the provider one request per interval.
//! Whether a missing key makes the token bad or only unverifiable for now is decided here: only a
//! set fetched after the token was issued can show its key does not exist. Until such a set is at
//! hand (the budget is spent, the set cannot be fetched or is broken) the answer is "not now", and
//! after a failed fetch the next may be tried a second later, so recovery is prompt.

use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use jsonwebtoken::jwk::{Jwk, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey};
use serde::Deserialize;
use serde_json::Value;
use url::Url;

use super::discovery::get_json;
use crate::clock::unix_seconds;

/// Keys kept from one key set; the rest are ignored.
const MAX_KEYS: usize = 64;
/// After a failed fetch the next may be tried this much later (or after the refresh interval, if
/// shorter): the `Retry-After` clients are told meanwhile.
const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(1);

/// One usable verification key.
pub struct Key {
    kid: Option<String>,
    /// The algorithms it may verify: the one its `alg` names, else its family's (never HMAC).
    algorithms: Vec<Algorithm>,
    pub decoding: DecodingKey,
}

impl Key {
    fn from_jwk(jwk: &Jwk) -> Option<Self> {
        if matches!(jwk.common.public_key_use, Some(ref u) if *u != PublicKeyUse::Signature) {
            return None;
        }
        let decoding = DecodingKey::from_jwk(jwk).ok()?;
        let family = decoding.family();
        // A symmetric key in a public key set would let anyone who reads the set sign tokens.
        if family == jsonwebtoken::AlgorithmFamily::Hmac {
            return None;
        }
        let algorithms = match jwk.common.key_algorithm {
            Some(alg) => {
                let alg = Algorithm::try_from(alg).ok()?;
                family.algorithms().contains(&alg).then(|| vec![alg])?
            }
            None => family.algorithms().to_vec(),
        };
        Some(Self {
            kid: jwk.common.key_id.clone(),
            algorithms,
            decoding,
        })
    }

    pub fn verifies(&self, alg: Algorithm) -> bool {
        self.algorithms.contains(&alg)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// The set, fetched after the token was issued, lacks its key: the token is bad.
    #[error("the token names a key the identity provider does not publish")]
    Unknown,
    /// The token cannot be checked now: no set fetched since it was issued is at hand.
    #[error("the identity provider's keys cannot be checked now: {0}")]
    Unavailable(String),
    /// The set fetched within the refresh interval lacks the key, and may not be fetched again
    /// yet: the token may be good, but is not checked now.
    #[error("{0}")]
    NotYet(String),
}

/// What the fetches so far tell; held while fetching, so one fetch runs at a time.
#[derive(Default)]
struct Fetches {
    /// The latest fetch that gave a usable set: when it started (monotonic, and unix seconds).
    succeeded: Option<(Instant, u64)>,
    /// The latest fetch that failed, if no fetch succeeded after it: when it ended, and why.
    failed: Option<(Instant, String)>,
}

#[derive(Deserialize)]
struct KeySetDocument {
    keys: Vec<Value>,
}

pub struct KeySet {
    http: reqwest::Client,
    refresh_interval: Duration,
    keys: RwLock<Arc<Vec<Arc<Key>>>>,
    fetches: tokio::sync::Mutex<Fetches>,
}

impl KeySet {
    pub fn new(http: reqwest::Client, refresh_interval: Duration) -> Self {
        Self {
            http,
            refresh_interval,
            keys: RwLock::new(Arc::new(Vec::new())),
            fetches: tokio::sync::Mutex::new(Fetches::default()),
        }
    }

    /// The key for a token signed with `alg` under `kid` (without a kid: the one key that
    /// verifies `alg`), fetching the set from `jwks_uri` when it lacks the key and may be fetched.
    /// `issued_by` is when (unix seconds) the token was issued at the latest, allowing for clock
    /// skew, if it says: a set fetched after that which lacks the key makes the token bad.
    pub async fn key(
        &self,
        jwks_uri: &Url,
        kid: Option<&str>,
        alg: Algorithm,
        issued_by: Option<u64>,
    ) -> Result<Arc<Key>, KeyError> {
        if let Some(key) = self.find(kid, alg) {
            return Ok(key);
        }
        let mut fetches = self.fetches.lock().await;
        // Another request may have fetched the set while this one waited.
        if let Some(key) = self.find(kid, alg) {
            return Ok(key);
        }
        if fetches
            .succeeded
            .is_some_and(|(_, started)| issued_by.is_some_and(|issued| issued < started))
        {
            return Err(KeyError::Unknown);
        }
        if let Some(error) = self.not_yet(&fetches) {
            return Err(error);
        }
        let started = (Instant::now(), unix_seconds());
        match self.fetch(jwks_uri).await {
            Ok(keys) => {
                tracing::info!(%jwks_uri, keys = keys.len(), "fetched the identity provider's keys");
                *self.keys.write().unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(keys);
                *fetches = Fetches {
                    succeeded: Some(started),
                    failed: None,
                };
                self.find(kid, alg).ok_or(KeyError::Unknown)
            }
            Err(reason) => {
                tracing::warn!(%jwks_uri, %reason, "cannot fetch the identity provider's keys");
                fetches.failed = Some((Instant::now(), reason.clone()));
                Err(KeyError::Unavailable(reason))
            }
        }
    }

    /// Why the set may not be fetched yet, if so: a fetch failed a moment ago, or one succeeded
    /// within the refresh interval (the budget that made-up key ids cannot spend faster).
    fn not_yet(&self, fetches: &Fetches) -> Option<KeyError> {
        if let Some((at, reason)) = &fetches.failed
            && at.elapsed() < RETRY_AFTER_FAILURE.min(self.refresh_interval)
        {
            return Some(KeyError::Unavailable(format!(
                "the last fetch failed a moment ago: {reason}"
            )));
        }
        let (at, _) = fetches.succeeded?;
        (at.elapsed() < self.refresh_interval).then(|| {
            KeyError::NotYet(format!(
                "the token names a key the set fetched {} ms ago lacks, and the set is fetched at most once per {:?}",
                at.elapsed().as_millis(),
                self.refresh_interval
            ))
        })
    }

    fn find(&self, kid: Option<&str>, alg: Algorithm) -> Option<Arc<Key>> {
        let keys = self
            .keys
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        match kid {
            Some(kid) => keys.iter().find(|k| k.kid.as_deref() == Some(kid)).cloned(),
            None => {
                let mut usable = keys.iter().filter(|k| k.verifies(alg));
                match (usable.next(), usable.next()) {
                    (Some(only), None) => Some(only.clone()),
                    _ => None,
                }
            }
        }
    }

    async fn fetch(&self, jwks_uri: &Url) -> Result<Vec<Arc<Key>>, String> {
        let body = get_json(&self.http, jwks_uri).await?;
        let document: KeySetDocument = serde_json::from_slice(&body).map_err(|e| format!("not a JWK set: {e}"))?;
        // Keys of kinds this crate cannot read (or meant for encryption) are skipped, not fatal;
        // a set without one usable key is broken, and the keys in use stay.
        let keys: Vec<_> = document
            .keys
            .into_iter()
            .filter_map(|key| serde_json::from_value::<Jwk>(key).ok())
            .filter_map(|jwk| Key::from_jwk(&jwk))
            .take(MAX_KEYS)
            .map(Arc::new)
            .collect();
        if keys.is_empty() {
            return Err("the set holds no usable signing key".into());
        }
        Ok(keys)
    }
}
