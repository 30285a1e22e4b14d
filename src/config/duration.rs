//! Durations in the file: human-readable text such as `"30s"` or `"10m"`, never bare numbers (a
//! bare `30` could mean seconds or milliseconds).

use std::time::Duration;

use serde::{Deserialize, Deserializer};

pub(super) fn duration<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
    let text = String::deserialize(deserializer)?;
    parse_duration(&text).map_err(serde::de::Error::custom)
}

/// A duration as the configuration writes it (`"30s"`, `"10m"`, `"7d"`); also what commands take.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text).map_err(|e| format!("`{text}` is not a duration like \"30s\" or \"10m\": {e}"))
}

pub(super) fn optional_duration<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Duration>, D::Error> {
    duration(deserializer).map(Some)
}
