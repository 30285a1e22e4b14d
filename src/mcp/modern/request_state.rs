//! The `requestState` of a 2026-07-28 `input_required` answer: who asked, for which tool and
//! arguments, the elicitations the client was given, and until when a retry may use it. Sealed
//! with the key ring (AEAD), so a client carries it but can neither read nor change it; any
//! replica holding the keys opens it. Possessing it proves nothing: a retry is still
//! authenticated as usual, and the state must name the same principal.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::domain::{ElicitationId, Principal};
use crate::vault::KeyRing;

/// The vault's associated data for request states: a ciphertext sealed for anything else (a
/// stored token, say) does not open as one.
const CONTEXT: &str = "mcp requestState v1";
/// The longest `requestState` opened; ours are a few hundred bytes.
pub const MAX_SEALED_BYTES: usize = 8 * 1024;

/// What a retry's state says, once opened.
#[derive(Debug, Serialize, Deserialize)]
pub struct RequestState {
    #[serde(rename = "p")]
    principal: String,
    #[serde(rename = "t")]
    tool: String,
    /// SHA-256 of the arguments' JSON, base64url.
    #[serde(rename = "a")]
    arguments: String,
    #[serde(rename = "e")]
    elicitations: Vec<String>,
    /// Unix seconds after which the state no longer opens.
    #[serde(rename = "x")]
    expires: i64,
    /// What the tool keeps across its own input requests (`ToolOutcome::InputRequired`).
    #[serde(rename = "k", default, skip_serializing_if = "Value::is_null")]
    kept: Value,
}

/// Why a retry's state is refused. None changes anything.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    #[error("requestState is not one this server issued (it was changed, or is too long)")]
    Unreadable,
    #[error("requestState was issued to another user")]
    OtherPrincipal,
    #[error("requestState was issued for another tool")]
    OtherTool,
    #[error("requestState was issued for other arguments")]
    OtherArguments,
    #[error("requestState has expired; call the tool again without it")]
    Expired,
}

fn digest(arguments: &Map<String, Value>) -> String {
    let json = serde_json::to_vec(arguments).unwrap_or_default();
    URL_SAFE_NO_PAD.encode(Sha256::digest(json))
}

impl RequestState {
    pub fn new(
        principal: &Principal,
        tool: &str,
        arguments: &Map<String, Value>,
        elicitations: &[ElicitationId],
        kept: Value,
        expires: DateTime<Utc>,
    ) -> Self {
        Self {
            principal: principal.as_str().to_owned(),
            tool: tool.to_owned(),
            arguments: digest(arguments),
            elicitations: elicitations.iter().map(ToString::to_string).collect(),
            expires: expires.timestamp(),
            kept,
        }
    }

    /// The opaque string the client carries.
    pub fn seal(&self, vault: &KeyRing) -> String {
        let json = serde_json::to_vec(self).unwrap_or_default();
        URL_SAFE_NO_PAD.encode(vault.encrypt(&json, CONTEXT))
    }

    /// Opens a state this server (any replica) sealed, and checks it belongs to this retry.
    pub fn open(
        vault: &KeyRing,
        sealed: &str,
        principal: &Principal,
        tool: &str,
        arguments: &Map<String, Value>,
        now: DateTime<Utc>,
    ) -> Result<Self, StateError> {
        if sealed.len() > MAX_SEALED_BYTES {
            return Err(StateError::Unreadable);
        }
        let bytes = URL_SAFE_NO_PAD.decode(sealed).map_err(|_| StateError::Unreadable)?;
        let json = vault.decrypt(&bytes, CONTEXT).map_err(|_| StateError::Unreadable)?;
        let state: Self = serde_json::from_slice(&json).map_err(|_| StateError::Unreadable)?;
        if state.principal != principal.as_str() {
            return Err(StateError::OtherPrincipal);
        }
        if state.tool != tool {
            return Err(StateError::OtherTool);
        }
        if state.arguments != digest(arguments) {
            return Err(StateError::OtherArguments);
        }
        if state.expires <= now.timestamp() {
            return Err(StateError::Expired);
        }
        Ok(state)
    }

    /// The elicitations the client was given.
    pub fn elicitations(&self) -> Vec<ElicitationId> {
        self.elicitations.iter().filter_map(|id| id.parse().ok()).collect()
    }

    /// What the tool kept across its input requests.
    pub fn into_kept(self) -> Value {
        self.kept
    }
}

#[cfg(test)]
mod tests {
    use chrono::Duration;
    use serde_json::json;

    use super::*;
    use crate::secret::Secret;

    fn ring(key: &str) -> KeyRing {
        KeyRing::from_keys(&[Secret::new(key.to_owned())]).expect("a key")
    }

    fn arguments(value: Value) -> Map<String, Value> {
        value.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn a_state_opens_only_for_its_own_retry() {
        let vault = ring(&KeyRing::generate_key());
        let alice = Principal::parse("alice").expect("principal");
        let now = Utc::now();
        let args = arguments(json!({"repo": "acme"}));
        let id = ElicitationId::generate();
        let kept = json!({"round": 2});
        let sealed = RequestState::new(
            &alice,
            "acme_me",
            &args,
            &[id],
            kept.clone(),
            now + Duration::minutes(10),
        )
        .seal(&vault);

        let opened = RequestState::open(&vault, &sealed, &alice, "acme_me", &args, now).expect("opens");
        assert_eq!(opened.elicitations(), vec![id]);
        assert_eq!(opened.into_kept(), kept);

        let bob = Principal::parse("bob").expect("principal");
        let refused = |sealed: &str, who: &Principal, tool: &str, args: &Map<String, Value>, at| {
            RequestState::open(&vault, sealed, who, tool, args, at)
                .map(|_| ())
                .unwrap_err()
        };
        assert_eq!(
            refused(&sealed, &bob, "acme_me", &args, now),
            StateError::OtherPrincipal
        );
        assert_eq!(
            refused(&sealed, &alice, "acme_other", &args, now),
            StateError::OtherTool
        );
        let other = arguments(json!({"repo": "evil"}));
        assert_eq!(
            refused(&sealed, &alice, "acme_me", &other, now),
            StateError::OtherArguments
        );
        let later = now + Duration::minutes(11);
        assert_eq!(refused(&sealed, &alice, "acme_me", &args, later), StateError::Expired);

        let mut tampered = sealed.clone().into_bytes();
        let last = tampered.len() - 2;
        tampered[last] = if tampered[last] == b'A' { b'B' } else { b'A' };
        let tampered = String::from_utf8(tampered).expect("ascii");
        assert_eq!(
            refused(&tampered, &alice, "acme_me", &args, now),
            StateError::Unreadable
        );
        assert_eq!(
            refused(&format!("{sealed}-TAMPERED"), &alice, "acme_me", &args, now),
            StateError::Unreadable
        );
        let elsewhere = RequestState::open(&ring(&KeyRing::generate_key()), &sealed, &alice, "acme_me", &args, now);
        assert_eq!(elsewhere.map(|_| ()).unwrap_err(), StateError::Unreadable);
    }
}
