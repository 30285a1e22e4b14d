//! The fake identity provider's keys: the test-only keys under `tests/fixtures/idp/`, the key ring
//! it publishes as its JWKS (rotating between two RSA keys, each time under a new `kid`), and
//! signing a claim set the honest way or one of the ways a verifier must refuse.

use std::sync::OnceLock;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::jwk::{Jwk, PublicKeyUse};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};

use super::EC_KID;

/// How [`super::FakeIdp::sign`] signs a claim set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signer {
    /// The current signing key, RS256, with its `kid` unless the header's is overridden.
    Current,
    /// `rsa-stranger.pem`, which the JWKS never holds, RS256; `kid` only if one is given.
    Stranger,
    /// Header `{"alg":"none"}` (plus a given `kid`) and an empty signature.
    NoneAlg,
    /// HS256 keyed with the bytes of the current key's public PEM (the key-confusion attack), with
    /// the current key's `kid` unless overridden.
    Hs256WithPublicKey,
    /// The P-256 key `ec-1.pem`, published in the JWKS as `kid` [`EC_KID`], ES256.
    Es256,
}

/// An RSA key the ring can publish.
struct RsaKey {
    encoding: EncodingKey,
    /// Its public half as SPKI PEM, for [`Signer::Hs256WithPublicKey`].
    public_pem: &'static [u8],
    /// Its public JWK, without `kid`.
    jwk: Jwk,
}

/// The keys read from `tests/fixtures/idp/`, once per test binary.
struct Fixtures {
    rsa: [RsaKey; 2],
    stranger: EncodingKey,
    ec: EncodingKey,
    ec_jwk: Jwk,
}

fn fixtures() -> &'static Fixtures {
    static FIXTURES: OnceLock<Fixtures> = OnceLock::new();
    FIXTURES.get_or_init(|| {
        // jsonwebtoken signs and checks through gatehouse's provider, in the tests as in the service.
        gatehouse::jose::install();
        let rsa = |private: &[u8], public_pem: &'static [u8]| {
            let encoding = EncodingKey::from_rsa_pem(private).expect("tests/fixtures/idp: an RSA private key");
            let jwk = Jwk::from_encoding_key(&encoding, Algorithm::RS256).expect("a JWK of the RSA key");
            RsaKey {
                encoding,
                public_pem,
                jwk,
            }
        };
        let ec = EncodingKey::from_ec_pem(include_bytes!("../../fixtures/idp/ec-1.pem"))
            .expect("tests/fixtures/idp/ec-1.pem: a P-256 private key (PKCS#8)");
        let ec_jwk = Jwk::from_encoding_key(&ec, Algorithm::ES256).expect("a JWK of the EC key");
        Fixtures {
            rsa: [
                rsa(
                    include_bytes!("../../fixtures/idp/rsa-1.pem"),
                    include_bytes!("../../fixtures/idp/rsa-1.pub.pem"),
                ),
                rsa(
                    include_bytes!("../../fixtures/idp/rsa-2.pem"),
                    include_bytes!("../../fixtures/idp/rsa-2.pub.pem"),
                ),
            ],
            stranger: EncodingKey::from_rsa_pem(include_bytes!("../../fixtures/idp/rsa-stranger.pem"))
                .expect("tests/fixtures/idp/rsa-stranger.pem: an RSA private key"),
            ec,
            ec_jwk,
        }
    })
}

/// One published RSA signing key: which fixture and under which `kid`.
#[derive(Clone)]
struct Published {
    fixture: usize,
    kid: String,
}

/// The RSA keys in the JWKS; the newest signs. The ES256 key is always published besides them.
pub struct KeyRing {
    current: Published,
    /// Earlier keys still published, oldest first.
    older: Vec<Published>,
    /// How many RSA keys the ring has had; names the next `kid`.
    generation: u32,
}

impl KeyRing {
    /// `rsa-1.pem` as `kid` `key-1`.
    pub fn new() -> KeyRing {
        KeyRing {
            current: Published {
                fixture: 0,
                kid: "key-1".to_owned(),
            },
            older: Vec::new(),
            generation: 1,
        }
    }

    /// The other RSA fixture becomes the current key under a new `kid` (`key-2`, `key-3`, ...);
    /// the keys before it stay published when `keep_old`, else they leave the JWKS.
    pub fn rotate(&mut self, keep_old: bool) {
        self.generation += 1;
        let next = Published {
            fixture: 1 - self.current.fixture,
            kid: format!("key-{}", self.generation),
        };
        let previous = std::mem::replace(&mut self.current, next);
        if keep_old {
            self.older.push(previous);
        } else {
            self.older.clear();
        }
    }

    /// The current key's `kid`.
    pub fn current_kid(&self) -> &str {
        &self.current.kid
    }

    /// The JWK Set: every published RSA key, newest first, then the ES256 key.
    pub fn jwks(&self) -> Value {
        let fixtures = fixtures();
        let rsa = std::iter::once(&self.current)
            .chain(self.older.iter().rev())
            .map(|key| published(&fixtures.rsa[key.fixture].jwk, &key.kid));
        let keys: Vec<Value> = rsa.chain([published(&fixtures.ec_jwk, EC_KID)]).collect();
        json!({ "keys": keys })
    }

    /// `claims` as a compact JWS made by `signer`; `header_kid` replaces the `kid` it would carry.
    pub fn sign(&self, signer: Signer, header_kid: Option<&str>, claims: &Value) -> String {
        let fixtures = fixtures();
        let current = &fixtures.rsa[self.current.fixture];
        let kid = |default: Option<&str>| header_kid.or(default).map(str::to_owned);
        let (algorithm, kid, key) = match signer {
            Signer::Current => (Algorithm::RS256, kid(Some(&self.current.kid)), current.encoding.clone()),
            Signer::Stranger => (Algorithm::RS256, kid(None), fixtures.stranger.clone()),
            Signer::Es256 => (Algorithm::ES256, kid(Some(EC_KID)), fixtures.ec.clone()),
            Signer::Hs256WithPublicKey => (
                Algorithm::HS256,
                kid(Some(&self.current.kid)),
                EncodingKey::from_secret(current.public_pem),
            ),
            Signer::NoneAlg => return unsigned(kid(None), claims),
        };
        let mut header = Header::new(algorithm);
        header.kid = kid;
        jsonwebtoken::encode(&header, claims, &key).expect("the fake IdP signs with its fixture keys")
    }
}

/// `jwk` with `kid`, `use: sig` (and the `alg` it was made with), as JSON.
fn published(jwk: &Jwk, kid: &str) -> Value {
    let mut jwk = jwk.clone();
    jwk.common.key_id = Some(kid.to_owned());
    jwk.common.public_key_use = Some(PublicKeyUse::Signature);
    serde_json::to_value(&jwk).expect("a JWK serializes")
}

/// An `alg: none` JWT: header and claims, and an empty signature.
fn unsigned(kid: Option<String>, claims: &Value) -> String {
    let mut header = json!({"alg": "none"});
    if let Some(kid) = kid {
        header["kid"] = json!(kid);
    }
    let part = |value: &Value| URL_SAFE_NO_PAD.encode(value.to_string());
    format!("{}.{}.", part(&header), part(claims))
}
