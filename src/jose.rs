//! jsonwebtoken's cryptography on `ring`, the library rustls already builds for gatehouse's TLS.
//!
//! jsonwebtoken ships two providers: aws-lc-rs (a C and assembly build of several minutes) and
//! RustCrypto's crates (rsa, p256, p384, ed25519-dalek and a second generation of sha2 and hmac,
//! about thirty packages gatehouse needs nowhere else). Its `CryptoProvider` takes any other, so
//! this module maps each JOSE algorithm onto ring's, as jsonwebtoken's own aws-lc provider does
//! onto aws-lc's ring-compatible API. [`install`] must run before the first JWT is signed or
//! checked: the resource server calls it when it is made, and so do the tests' fake providers.

use jsonwebtoken::crypto::{CryptoProvider, JwtSigner, JwtVerifier, KeyUtils};
use jsonwebtoken::errors::{Error, ErrorKind};
use jsonwebtoken::jwk::{EllipticCurve, ThumbprintHash};
use jsonwebtoken::signature::{self, Signer, Verifier};
use jsonwebtoken::{Algorithm, AlgorithmFamily, DecodingKey, DecodingKeyKind, EncodingKey};
use ring::rand::SystemRandom;
use ring::signature::{
    self as sig, EcdsaKeyPair, Ed25519KeyPair, KeyPair, RsaEncoding, RsaKeyPair, RsaParameters, RsaPublicKeyComponents,
    UnparsedPublicKey, VerificationAlgorithm,
};
use ring::{digest, hmac};

static PROVIDER: CryptoProvider = CryptoProvider {
    signer_factory: signer,
    verifier_factory: verifier,
    key_utils: KeyUtils {
        rsa_pub_components_from_private_key: rsa_components_of_private_key,
        rsa_pub_components_from_public_key: rsa_components_of_public_key,
        ec_pub_components_from_private_key: ec_components_of_private_key,
        ed_pub_components_from_private_key: ed_component_of_private_key,
        compute_digest,
    },
};

/// Makes this module jsonwebtoken's provider for the process; later calls do nothing.
pub fn install() {
    // Only this provider is ever installed, so a second call finding it there is no failure.
    let _ = PROVIDER.install_default();
}

fn hmac_algorithm(alg: Algorithm) -> Option<hmac::Algorithm> {
    match alg {
        Algorithm::HS256 => Some(hmac::HMAC_SHA256),
        Algorithm::HS384 => Some(hmac::HMAC_SHA384),
        Algorithm::HS512 => Some(hmac::HMAC_SHA512),
        _ => None,
    }
}

fn rsa_signing(alg: Algorithm) -> Option<&'static dyn RsaEncoding> {
    match alg {
        Algorithm::RS256 => Some(&sig::RSA_PKCS1_SHA256),
        Algorithm::RS384 => Some(&sig::RSA_PKCS1_SHA384),
        Algorithm::RS512 => Some(&sig::RSA_PKCS1_SHA512),
        Algorithm::PS256 => Some(&sig::RSA_PSS_SHA256),
        Algorithm::PS384 => Some(&sig::RSA_PSS_SHA384),
        Algorithm::PS512 => Some(&sig::RSA_PSS_SHA512),
        _ => None,
    }
}

fn rsa_verifying(alg: Algorithm) -> Option<&'static RsaParameters> {
    match alg {
        Algorithm::RS256 => Some(&sig::RSA_PKCS1_2048_8192_SHA256),
        Algorithm::RS384 => Some(&sig::RSA_PKCS1_2048_8192_SHA384),
        Algorithm::RS512 => Some(&sig::RSA_PKCS1_2048_8192_SHA512),
        Algorithm::PS256 => Some(&sig::RSA_PSS_2048_8192_SHA256),
        Algorithm::PS384 => Some(&sig::RSA_PSS_2048_8192_SHA384),
        Algorithm::PS512 => Some(&sig::RSA_PSS_2048_8192_SHA512),
        _ => None,
    }
}

/// ECDSA with fixed-length (r || s) signatures, as JWS uses them (RFC 7518 3.4).
fn ecdsa_signing(alg: Algorithm) -> Option<&'static sig::EcdsaSigningAlgorithm> {
    match alg {
        Algorithm::ES256 => Some(&sig::ECDSA_P256_SHA256_FIXED_SIGNING),
        Algorithm::ES384 => Some(&sig::ECDSA_P384_SHA384_FIXED_SIGNING),
        _ => None,
    }
}

fn other_verifying(alg: Algorithm) -> Option<&'static dyn VerificationAlgorithm> {
    match alg {
        Algorithm::ES256 => Some(&sig::ECDSA_P256_SHA256_FIXED),
        Algorithm::ES384 => Some(&sig::ECDSA_P384_SHA384_FIXED),
        Algorithm::EdDSA => Some(&sig::ED25519),
        _ => None,
    }
}

/// A key ready to sign with one algorithm.
enum SigningKey {
    Hmac(hmac::Key),
    Rsa(RsaKeyPair, &'static dyn RsaEncoding),
    Ecdsa(EcdsaKeyPair),
    Ed25519(Ed25519KeyPair),
}

struct RingSigner {
    alg: Algorithm,
    key: SigningKey,
}

fn key_error(alg: Algorithm) -> Error {
    match alg.family() {
        AlgorithmFamily::Rsa => ErrorKind::InvalidRsaKey("ring refused the key".into()).into(),
        AlgorithmFamily::Ec => ErrorKind::InvalidEcdsaKey.into(),
        AlgorithmFamily::Ed => ErrorKind::InvalidEddsaKey.into(),
        AlgorithmFamily::Hmac => ErrorKind::InvalidKeyFormat.into(),
    }
}

/// The key as its family's DER (PKCS#1 for RSA, PKCS#8 for EC and Ed25519) or HMAC secret.
fn signer(alg: &Algorithm, key: &EncodingKey) -> Result<Box<dyn JwtSigner>, Error> {
    let alg = *alg;
    if key.family() != alg.family() {
        return Err(ErrorKind::InvalidKeyFormat.into());
    }
    let der = key.as_bytes();
    let key = if let Some(hmac) = hmac_algorithm(alg) {
        SigningKey::Hmac(hmac::Key::new(hmac, der))
    } else if let Some(encoding) = rsa_signing(alg) {
        SigningKey::Rsa(RsaKeyPair::from_der(der).map_err(|_| key_error(alg))?, encoding)
    } else if let Some(ecdsa) = ecdsa_signing(alg) {
        SigningKey::Ecdsa(EcdsaKeyPair::from_pkcs8(ecdsa, der, &SystemRandom::new()).map_err(|_| key_error(alg))?)
    } else {
        SigningKey::Ed25519(Ed25519KeyPair::from_pkcs8_maybe_unchecked(der).map_err(|_| key_error(alg))?)
    };
    Ok(Box::new(RingSigner { alg, key }))
}

impl Signer<Vec<u8>> for RingSigner {
    fn try_sign(&self, message: &[u8]) -> Result<Vec<u8>, signature::Error> {
        let random = SystemRandom::new();
        Ok(match &self.key {
            SigningKey::Hmac(key) => hmac::sign(key, message).as_ref().to_vec(),
            SigningKey::Rsa(pair, encoding) => {
                let mut out = vec![0; pair.public().modulus_len()];
                pair.sign(*encoding, &random, message, &mut out)
                    .map_err(|_| signature::Error::new())?;
                out
            }
            SigningKey::Ecdsa(pair) => pair
                .sign(&random, message)
                .map_err(|_| signature::Error::new())?
                .as_ref()
                .to_vec(),
            SigningKey::Ed25519(pair) => pair.sign(message).as_ref().to_vec(),
        })
    }
}

impl JwtSigner for RingSigner {
    fn algorithm(&self) -> Algorithm {
        self.alg
    }
}

struct RingVerifier {
    alg: Algorithm,
    key: DecodingKey,
}

fn verifier(alg: &Algorithm, key: &DecodingKey) -> Result<Box<dyn JwtVerifier>, Error> {
    if key.family() != alg.family() {
        return Err(ErrorKind::InvalidKeyFormat.into());
    }
    Ok(Box::new(RingVerifier {
        alg: *alg,
        key: key.clone(),
    }))
}

impl Verifier<Vec<u8>> for RingVerifier {
    fn verify(&self, message: &[u8], signature: &Vec<u8>) -> Result<(), signature::Error> {
        let refused = |_| signature::Error::new();
        match self.key.kind() {
            DecodingKeyKind::SecretOrDer(bytes) => {
                if let Some(hmac) = hmac_algorithm(self.alg) {
                    hmac::verify(&hmac::Key::new(hmac, bytes), message, signature).map_err(refused)
                } else if let Some(rsa) = rsa_verifying(self.alg) {
                    UnparsedPublicKey::new(rsa, bytes)
                        .verify(message, signature)
                        .map_err(refused)
                } else if let Some(other) = other_verifying(self.alg) {
                    UnparsedPublicKey::new(other, bytes)
                        .verify(message, signature)
                        .map_err(refused)
                } else {
                    Err(signature::Error::new())
                }
            }
            DecodingKeyKind::RsaModulusExponent { n, e } => {
                let rsa = rsa_verifying(self.alg).ok_or_else(signature::Error::new)?;
                RsaPublicKeyComponents { n, e }
                    .verify(rsa, message, signature)
                    .map_err(refused)
            }
        }
    }
}

impl JwtVerifier for RingVerifier {
    fn algorithm(&self) -> Algorithm {
        self.alg
    }
}

fn rsa_components_of_private_key(der: &[u8]) -> Result<(Vec<u8>, Vec<u8>), Error> {
    let pair = RsaKeyPair::from_der(der).map_err(|e| ErrorKind::InvalidRsaKey(e.to_string()))?;
    let public = RsaPublicKeyComponents::<Vec<u8>>::from(pair.public());
    Ok((public.n, public.e))
}

/// ring reads no bare RSA public key into its parts, and gatehouse never makes a JWK of one
/// (its JWKs come from providers, with `n` and `e` already apart).
fn rsa_components_of_public_key(_: &[u8]) -> Result<(Vec<u8>, Vec<u8>), Error> {
    Err(ErrorKind::InvalidRsaKey("a JWK is not made from an RSA public key here".into()).into())
}

fn ec_components_of_private_key(der: &[u8], alg: Algorithm) -> Result<(EllipticCurve, Vec<u8>, Vec<u8>), Error> {
    let (curve, half) = match alg {
        Algorithm::ES256 => (EllipticCurve::P256, 32),
        Algorithm::ES384 => (EllipticCurve::P384, 48),
        _ => return Err(ErrorKind::InvalidEcdsaKey.into()),
    };
    let signing = ecdsa_signing(alg).ok_or(ErrorKind::InvalidEcdsaKey)?;
    let pair = EcdsaKeyPair::from_pkcs8(signing, der, &SystemRandom::new()).map_err(|_| ErrorKind::InvalidEcdsaKey)?;
    // An uncompressed point: 0x04, then x and y.
    match pair.public_key().as_ref().split_first() {
        Some((4, point)) if point.len() == 2 * half => {
            let (x, y) = point.split_at(half);
            Ok((curve, x.to_vec(), y.to_vec()))
        }
        _ => Err(ErrorKind::InvalidEcdsaKey.into()),
    }
}

fn ed_component_of_private_key(der: &[u8], curve: &EllipticCurve) -> Result<Vec<u8>, Error> {
    if *curve != EllipticCurve::Ed25519 {
        return Err(ErrorKind::InvalidAlgorithm.into());
    }
    let pair = Ed25519KeyPair::from_pkcs8_maybe_unchecked(der).map_err(|_| ErrorKind::InvalidEddsaKey)?;
    Ok(pair.public_key().as_ref().to_vec())
}

fn compute_digest(data: &[u8], hash: ThumbprintHash) -> Result<Vec<u8>, Error> {
    let algorithm = match hash {
        ThumbprintHash::SHA256 => &digest::SHA256,
        ThumbprintHash::SHA384 => &digest::SHA384,
        ThumbprintHash::SHA512 => &digest::SHA512,
        _ => return Err(ErrorKind::InvalidAlgorithm.into()),
    };
    Ok(digest::digest(algorithm, data).as_ref().to_vec())
}

#[cfg(test)]
mod tests {
    use jsonwebtoken::{Header, Validation, decode, encode};
    use serde_json::{Value, json};

    use super::*;

    fn round_trip(alg: Algorithm, signing: &EncodingKey, checking: &DecodingKey) -> Result<Value, Error> {
        install();
        let token = encode(
            &Header::new(alg),
            &json!({"sub": "alice", "exp": 4_000_000_000u64}),
            signing,
        )?;
        let mut validation = Validation::new(alg);
        validation.validate_aud = false;
        Ok(decode::<Value>(&token, checking, &validation)?.claims)
    }

    #[test]
    fn hmac_signs_and_checks_and_a_wrong_secret_is_refused() {
        let signing = EncodingKey::from_secret(b"one secret");
        let claims = round_trip(Algorithm::HS256, &signing, &DecodingKey::from_secret(b"one secret"));
        assert_eq!(claims.expect("verified")["sub"], "alice");
        let wrong = round_trip(Algorithm::HS384, &signing, &DecodingKey::from_secret(b"another"));
        assert!(matches!(
            wrong.map_err(Error::into_kind),
            Err(ErrorKind::InvalidSignature)
        ));
    }

    #[test]
    fn a_key_of_another_family_is_refused_not_a_panic() {
        install();
        let hmac = EncodingKey::from_secret(b"secret");
        assert!(encode(&Header::new(Algorithm::RS256), &json!({}), &hmac).is_err());
        let token = encode(&Header::new(Algorithm::HS256), &json!({"exp": 4_000_000_000u64}), &hmac).expect("signed");
        let rsa = DecodingKey::from_rsa_components("AQAB", "AQAB").expect("components");
        assert!(decode::<Value>(&token, &rsa, &Validation::new(Algorithm::HS256)).is_err());
    }
}
