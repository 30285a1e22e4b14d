//! One call's binding: who calls (the principal, and in `oauth` mode the OAuth client their token
//! was issued to) and exactly what (the tool and its full arguments). An approval request is bound
//! to it rather than to the session that asked, so the caller's retry finds the request and its
//! decision from any session on any replica; the call's key is a SHA-256 over the tool and
//! arguments in their RFC 8785 (JCS) canonical form, and the arguments themselves are kept sealed
//! with the request, so the tool runs from what the approver was shown.

use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use crate::domain::ElicitationId;

/// Who calls and exactly what, for a request that outlives the caller's session.
#[derive(Debug, Clone, PartialEq)]
pub struct CallBinding {
    /// The OAuth client the caller's token was issued to (`oauth` mode); `None` otherwise.
    pub client: Option<String>,
    pub tool: String,
    pub arguments: Map<String, Value>,
}

impl CallBinding {
    /// This call's key: the SHA-256 (lowercase hex) of `{"arguments":…,"tool":…}` in JCS form.
    pub fn key(&self) -> String {
        call_key(&self.tool, &self.arguments)
    }
}

/// The key of a call of `tool` with `arguments`: the SHA-256 (lowercase hex) of
/// `{"arguments":…,"tool":…}` in RFC 8785 canonical form, so equal calls get equal keys however
/// their JSON was written (key order, number spelling).
pub fn call_key(tool: &str, arguments: &Map<String, Value>) -> String {
    let call = json!({ "tool": tool, "arguments": arguments });
    // A serde_json value always serializes: its map keys are strings and its numbers finite.
    let canonical = serde_json_canonicalizer::to_vec(&call).unwrap_or_default();
    hex::encode(Sha256::digest(&canonical))
}

/// What a bound request's sealed arguments are bound to.
pub(super) fn arguments_context(elicitation: &ElicitationId) -> String {
    format!("call:{elicitation}:arguments")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(value: Value) -> Map<String, Value> {
        value.as_object().cloned().expect("an object")
    }

    #[test]
    fn equal_calls_written_differently_have_one_key() {
        let written: Value = serde_json::from_str(r#"{"b": 1.0, "a": "\u00e9", "c": 1e2}"#).expect("json");
        let again: Value = serde_json::from_str(r#"{"c": 100, "a": "é", "b": 1}"#).expect("json");
        assert_eq!(call_key("pay", &object(written)), call_key("pay", &object(again)));
    }

    #[test]
    fn the_key_is_the_sha256_of_the_canonical_call() {
        let arguments = object(json!({"payee": "bob", "amount": 1}));
        // RFC 8785: {"arguments":{"amount":1,"payee":"bob"},"tool":"pay"}
        let expected = hex::encode(Sha256::digest(
            br#"{"arguments":{"amount":1,"payee":"bob"},"tool":"pay"}"#,
        ));
        assert_eq!(call_key("pay", &arguments), expected);
    }

    #[test]
    fn other_arguments_or_tools_have_other_keys() {
        let arguments = object(json!({"amount": 1}));
        assert_ne!(call_key("pay", &arguments), call_key("refund", &arguments));
        assert_ne!(
            call_key("pay", &arguments),
            call_key("pay", &object(json!({"amount": 2})))
        );
    }
}
