//! What a caller's identity says about them: string claims and lists of strings (groups, email,
//! name, and `principal`, the caller's own), bounded so a token or header cannot make us hold much.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::domain::Principal;

/// Claims kept per caller, values per claim, and bytes per value; the rest is dropped.
const MAX_CLAIMS: usize = 64;
const MAX_VALUES: usize = 256;
const MAX_VALUE_BYTES: usize = 512;
/// The claim naming the caller's principal, in every identity mode.
const PRINCIPAL: &str = "principal";

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Claims {
    values: BTreeMap<String, Vec<String>>,
}

impl Claims {
    /// The string and string-list claims of a verified token (or userinfo answer). An `email`
    /// whose `email_verified` is false is left out: an `allow` rule must not trust it.
    pub fn from_token(claims: &Map<String, Value>) -> Self {
        let mut kept = Claims::default();
        let unverified_email = claims.get("email_verified") == Some(&Value::Bool(false));
        for (name, value) in claims {
            if unverified_email && name == "email" {
                continue;
            }
            match value {
                Value::String(text) => kept.insert(name, std::iter::once(text.as_str())),
                Value::Array(items) => kept.insert(name, items.iter().filter_map(Value::as_str)),
                _ => {}
            }
        }
        kept
    }

    /// Adds a claim's values (within the bounds); an empty list adds nothing.
    pub fn insert<'a>(&mut self, name: &str, values: impl IntoIterator<Item = &'a str>) {
        if self.values.len() >= MAX_CLAIMS || name.len() > MAX_VALUE_BYTES {
            return;
        }
        let values: Vec<String> = values
            .into_iter()
            .filter(|v| v.len() <= MAX_VALUE_BYTES)
            .take(MAX_VALUES)
            .map(str::to_owned)
            .collect();
        if !values.is_empty() {
            self.values.insert(name.to_owned(), values);
        }
    }

    /// These claims with `principal` set to the caller's principal: whatever a token or a header
    /// said under that name is replaced, and it is kept even past the bound on claims.
    pub fn with_principal(mut self, principal: &Principal) -> Self {
        self.values
            .insert(PRINCIPAL.to_owned(), vec![principal.as_str().to_owned()]);
        self
    }

    /// The values of one claim; none when absent.
    pub fn get(&self, name: &str) -> &[String] {
        self.values.get(name).map_or(&[], Vec::as_slice)
    }

    /// What pages call the user: `name`, else `preferred_username`, else `email`.
    pub fn display_name(&self) -> Option<&str> {
        ["name", "preferred_username", "email"]
            .iter()
            .find_map(|claim| self.get(claim).first().map(String::as_str))
    }

    /// The claims as JSON (a string for one value, a list for several), to store with a browser
    /// session; [`Claims::from_token`] reads it back.
    pub fn to_json(&self) -> Value {
        let map: Map<String, Value> = self
            .values
            .iter()
            .map(|(name, values)| {
                let value = match values.as_slice() {
                    [one] => Value::String(one.clone()),
                    many => Value::from(many.to_vec()),
                };
                (name.clone(), value)
            })
            .collect();
        Value::Object(map)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn keeps_strings_and_string_lists_within_bounds() {
        let token = json!({
            "sub": "u1", "name": "Alice", "groups": ["eng", 7, "ops"], "exp": 5,
            "email": "a@acme.com", "nested": {"x": "y"}, "long": "x".repeat(MAX_VALUE_BYTES + 1),
        });
        let claims = Claims::from_token(token.as_object().expect("object"));
        assert_eq!(claims.get("groups"), ["eng", "ops"]);
        assert_eq!(claims.get("email"), ["a@acme.com"]);
        assert!(claims.get("exp").is_empty() && claims.get("nested").is_empty() && claims.get("long").is_empty());
        assert_eq!(claims.display_name(), Some("Alice"));
        assert_eq!(
            Claims::from_token(claims.to_json().as_object().expect("object")),
            claims
        );
    }

    #[test]
    fn an_unverified_email_is_dropped() {
        let token = json!({"email": "boss@acme.com", "email_verified": false});
        let claims = Claims::from_token(token.as_object().expect("object"));
        assert!(claims.get("email").is_empty());
        assert_eq!(claims.display_name(), None);
    }
}
