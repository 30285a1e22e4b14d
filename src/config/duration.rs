//! Durations in the file: human-readable text such as `"30s"` or `"10m"`, never bare numbers (a
//! bare `30` could mean seconds or milliseconds). Also how the schema describes them, and how a
//! default is written back as such text for the schema and the reference.

use std::borrow::Cow;
use std::time::Duration;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer, Serializer};

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

/// A default duration as the file would write it, in the largest unit that divides it (`"7d"`,
/// `"10m"`, `"250ms"`): the schema's and the reference's `default`.
pub(super) fn duration_text<S: Serializer>(value: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&text(*value))
}

/// [`duration_text`] of an optional duration; unset is `null`.
pub(super) fn optional_duration_text<S: Serializer>(
    value: &Option<Duration>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match value {
        Some(value) => duration_text(value, serializer),
        None => serializer.serialize_none(),
    }
}

fn text(value: Duration) -> String {
    const UNITS: [(u128, &str); 4] = [(86_400_000, "d"), (3_600_000, "h"), (60_000, "m"), (1000, "s")];
    let millis = value.as_millis();
    UNITS
        .iter()
        .find(|(size, _)| millis > 0 && millis.is_multiple_of(*size))
        .map_or_else(
            || format!("{millis}ms"),
            |(size, unit)| format!("{}{unit}", millis / size),
        )
}

/// The schema of a duration in the file: text such as `"30s"`, `"10m"`, `"1h 30m"` or `"7d"`.
pub(super) struct DurationText;

impl JsonSchema for DurationText {
    fn schema_name() -> Cow<'static, str> {
        "Duration".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "string",
            "description": "A duration: a number and a unit, such as \"30s\", \"10m\", \"1h 30m\" or \"7d\" (units: ms, s, m, h, d, w).",
            "pattern": "^\\s*[0-9]+\\s*[a-zA-Z]+(\\s*[0-9]+\\s*[a-zA-Z]+)*\\s*$"
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_written_as_the_file_writes_them_and_read_back() {
        for (value, written) in [
            (Duration::from_secs(7 * 86_400), "7d"),
            (Duration::from_secs(600), "10m"),
            (Duration::from_secs(90), "90s"),
            (Duration::from_millis(250), "250ms"),
            (Duration::ZERO, "0ms"),
        ] {
            assert_eq!(text(value), written);
            assert_eq!(parse_duration(written), Ok(value));
        }
    }
}
