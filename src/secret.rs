//! A wrapper for values that must never reach a log line or an error message.

use std::fmt;

use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Deserializer};

/// Holds a secret; `Debug` and `Display` print `[redacted]`. Read it only with `expose`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret<T>(T);

impl<T> Secret<T> {
    pub fn new(value: T) -> Self {
        Self(value)
    }

    pub fn expose(&self) -> &T {
        &self.0
    }

    /// Writes a configured default, which is no secret, into the configuration's schema (its
    /// `default`); nothing else serializes a `Secret`.
    pub fn serialize_default<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error>
    where
        T: serde::Serialize,
    {
        self.0.serialize(serializer)
    }
}

impl<T> fmt::Debug for Secret<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

impl<T> fmt::Display for Secret<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Secret<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        T::deserialize(deserializer).map(Secret)
    }
}

/// In the configuration's schema a secret is what it holds (its text, often `env:NAME`).
impl<T: JsonSchema> JsonSchema for Secret<T> {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        T::schema_name()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        T::json_schema(generator)
    }

    fn inline_schema() -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_and_display_redact() {
        let secret = Secret::new("postgres://user:hunter2@db/x".to_owned());
        assert_eq!(format!("{secret:?} {secret}"), "[redacted] [redacted]");
        assert_eq!(secret.expose(), "postgres://user:hunter2@db/x");
    }
}
