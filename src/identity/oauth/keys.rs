//! The identity provider's signing keys (its JWKS): fetched when first needed and kept; a token
//! naming a key id the set lacks fetches the set again, at most once per refresh interval, so key
//! rotation works and a flood of made-up key ids costs the provider one request per interval.

use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use jsonwebtoken::jwk::{Jwk, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey};
use serde::Deserialize;
use serde_json::Value;
use url::Url;

use super::discovery::get_json;

/// Keys kept from one key set; the rest are ignored.
const MAX_KEYS: usize = 64;

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
    #[error("the token names a key the identity provider does not publish")]
    Unknown,
    #[error("the identity provider's keys cannot be fetched: {0}")]
    Unavailable(String),
}

#[derive(Deserialize)]
struct KeySetDocument {
    keys: Vec<Value>,
}

pub struct KeySet {
    http: reqwest::Client,
    refresh_interval: Duration,
    keys: RwLock<Arc<Vec<Arc<Key>>>>,
    /// Held while fetching; holds when the last fetch was attempted.
    fetched_at: tokio::sync::Mutex<Option<Instant>>,
}

impl KeySet {
    pub fn new(http: reqwest::Client, refresh_interval: Duration) -> Self {
        Self {
            http,
            refresh_interval,
            keys: RwLock::new(Arc::new(Vec::new())),
            fetched_at: tokio::sync::Mutex::new(None),
        }
    }

    /// The key for a token signed with `alg` under `kid` (without a kid: the one key that
    /// verifies `alg`), fetching the set from `jwks_uri` when it lacks the key and may be fetched.
    pub async fn key(&self, jwks_uri: &Url, kid: Option<&str>, alg: Algorithm) -> Result<Arc<Key>, KeyError> {
        if let Some(key) = self.find(kid, alg) {
            return Ok(key);
        }
        let mut fetched_at = self.fetched_at.lock().await;
        // Another request may have fetched the set while this one waited.
        if let Some(key) = self.find(kid, alg) {
            return Ok(key);
        }
        if fetched_at.is_some_and(|at| at.elapsed() < self.refresh_interval) {
            return Err(KeyError::Unknown);
        }
        *fetched_at = Some(Instant::now());
        let keys = self.fetch(jwks_uri).await.map_err(|reason| {
            tracing::warn!(%jwks_uri, %reason, "cannot fetch the identity provider's keys");
            KeyError::Unavailable(reason)
        })?;
        tracing::info!(%jwks_uri, keys = keys.len(), "fetched the identity provider's keys");
        *self.keys.write().unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(keys);
        self.find(kid, alg).ok_or(KeyError::Unknown)
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
        // Keys of kinds this crate cannot read (or meant for encryption) are skipped, not fatal.
        Ok(document
            .keys
            .into_iter()
            .filter_map(|key| serde_json::from_value::<Jwk>(key).ok())
            .filter_map(|jwk| Key::from_jwk(&jwk))
            .take(MAX_KEYS)
            .map(Arc::new)
            .collect())
    }
}
