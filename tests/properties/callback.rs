//! The OAuth callback's query parsing: any query string is read without panic, and a callback is
//! refused before any lookup exactly when its first `state` is missing, empty or too long.

use gatehouse::gate::{CallbackParams, CallbackRefusal};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::select;

use crate::strategies::hostile_text;

/// Longest `state` the callback reads (ours are 43 characters).
const MAX_STATE_LEN: usize = 512;

/// Query pieces: the callback's parameter names, separators, broken and valid escapes, and long
/// values on both sides of the state limit.
#[rustfmt::skip]
const QUERY_PIECES: &[&str] = &[
    "state=", "code=", "error=", "iss=", "state", "&", "=", "&&", "+", "%", "%2", "%zz", "%26", "%3D", "%ff", "%00",
    "%e2%80%ae", "s", "abc", "access_denied", "https://issuer.test",
];

/// A `state` value: empty, ours, at the limit or just past it.
fn state() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        "[A-Za-z0-9_-]{43}",
        (MAX_STATE_LEN - 1..MAX_STATE_LEN + 2).prop_map(|length| "x".repeat(length)),
    ]
}

/// Any pieces, or two `state`s around them (the first counts).
fn query() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        4 => select(QUERY_PIECES).prop_map(str::to_owned),
        2 => hostile_text(),
        1 => state(),
    ];
    let pieces = vec(piece, 0..10).prop_map(|pieces| pieces.concat());
    prop_oneof![
        pieces.clone(),
        (state(), pieces, state()).prop_map(|(first, middle, last)| format!("state={first}&{middle}&state={last}")),
    ]
}

proptest! {
    #[test]
    fn any_callback_query_is_read_without_panic(query in query()) {
        let first_state = url::form_urlencoded::parse(query.as_bytes())
            .find(|(name, _)| name == "state")
            .map(|(_, value)| value.into_owned());
        let plausible = first_state.is_some_and(|state| !state.is_empty() && state.len() <= MAX_STATE_LEN);
        match CallbackParams::from_query(&query) {
            Ok(_) => prop_assert!(plausible, "{query:?} was read"),
            Err(refusal) => {
                prop_assert_eq!(refusal, CallbackRefusal::UnknownState);
                prop_assert!(!plausible, "{query:?} was refused");
            }
        }
    }
}
