//! Generators shared by the properties: text an attacker would send and arbitrary JSON.

use proptest::collection::{btree_map, vec};
use proptest::prelude::*;
use serde_json::{Map, Number, Value};

/// Pieces that have fooled URL, header and query handling somewhere: dot segments and their
/// encodings, separators, line breaks, bidi controls and other invisible characters, full-width
/// dots, NUL.
#[rustfmt::skip]
pub const HOSTILE: &[&str] = &[
    ".", "..", "%2e", "%2E", "%2e%2e", ".%2E", "%2f", "%2F", "%5c", "%00", "%", "%%", "%zz", "/", "\\", "?", "#",
    "&", "=", "+", ";", ":", "@", " ", "\t", "\r", "\n", "\r\n", "\0", "\u{7f}", "\u{85}", "\u{2028}", "\u{202e}",
    "\u{200b}", "\u{feff}", "\u{ff0e}", "\u{ff0f}", "é", "🦀", "{{", "}}", "https://evil.test/",
    // Invisible too: a tag character (hidden text), a variation selector, a Hangul filler.
    "\u{e0041}", "\u{fe0f}", "\u{3164}", "\u{34f}",
];

/// Text of up to 12 pieces: hostile pieces, short words and arbitrary characters.
pub fn hostile_text() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        3 => proptest::sample::select(HOSTILE).prop_map(str::to_owned),
        2 => "[a-zA-Z0-9_~-]{1,5}",
        1 => any::<char>().prop_map(String::from),
    ];
    vec(piece, 0..12).prop_map(|pieces| pieces.concat())
}

/// Any JSON value, up to 4 levels and 32 leaves, its keys often ones JSON-RPC gives meaning to.
pub fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        // JSON has no NaN or infinity: those become null (no filter, so no rejected cases).
        any::<f64>().prop_map(|f| Number::from_f64(f).map_or(Value::Null, Value::Number)),
        hostile_text().prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..6).prop_map(Value::Array),
            btree_map(key(), inner, 0..6).prop_map(|map| Value::Object(map.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        proptest::sample::select(&["jsonrpc", "id", "method", "params", "result", "error"][..]).prop_map(str::to_owned),
        "[a-z]{0,6}",
    ]
}
