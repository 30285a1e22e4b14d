use base64::Engine;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
use serde_json::json;

use super::*;

/// Quotes, a slash, a plus, spaces, non-ASCII and a character outside the BMP: every escape kind.
const SECRET: &str = "sk-ü \"quo/te\"+plus & ~more~ 🔑 end";

fn redactor() -> Redactor {
    Redactor::new([SECRET, "tok_0123456789abcdef"])
}

/// The JSON escapes a PHP- or Go-style encoder writes: `\/`, and `\uXXXX` for every non-ASCII
/// character (surrogate pairs beyond the BMP), in `upper` or lower case hex.
fn json_escaped(text: &str, upper: bool) -> String {
    let mut out = String::new();
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '/' => out.push_str("\\/"),
            '&' => out.push_str("\\u0026"),
            c if c.is_ascii() => out.push(c),
            c => {
                for unit in c.encode_utf16(&mut [0; 2]) {
                    out.push_str(&if upper {
                        format!("\\u{unit:04X}")
                    } else {
                        format!("\\u{unit:04x}")
                    });
                }
            }
        }
    }
    out
}

fn assert_hidden(answer: &str) {
    let redacted = redactor().text(answer);
    assert!(redacted.contains(REDACTED), "{answer:?} became {redacted:?}");
    for piece in ["sk-ü", "quo", "more", "🔑", "tok_0123"] {
        assert!(!redacted.contains(piece), "{piece:?} left in {redacted:?}");
    }
}

#[test]
fn the_secret_as_is_and_every_other_text_untouched() {
    let redactor = redactor();
    assert_eq!(
        redactor.text(&format!("key={SECRET}; token tok_0123456789abcdef.")),
        "key=[redacted]; token [redacted]."
    );
    let plain = "nothing secret here: 100% sure, a+b, \\n, QUJD";
    assert_eq!(redactor.text(plain), plain);
    assert_eq!(Redactor::new(["abc", ""]).text("abc"), "abc", "too short to look for");
    assert_eq!(Redactor::new([]).text("x"), "x");
}

#[test]
fn base64_alone_in_both_alphabets_padded_or_not() {
    for engine in [&STANDARD, &STANDARD_NO_PAD, &URL_SAFE, &URL_SAFE_NO_PAD] {
        let encoded = engine.encode(SECRET);
        assert_hidden(&format!("echo: {encoded}"));
        assert_eq!(
            redactor().text(&format!("[{encoded}]")),
            "[[redacted]]",
            "the whole encoding goes, padding too"
        );
    }
}

#[test]
fn base64_inside_a_longer_blob_at_every_alignment() {
    for before in ["", "a", "ab", "abc", "{\"key\":\""] {
        for after in ["", "x", "\"}"] {
            let blob = format!("{before}{SECRET}{after}");
            for engine in [&STANDARD, &URL_SAFE_NO_PAD] {
                assert_hidden(&engine.encode(&blob));
            }
        }
    }
    // What is left is at most a character of the secret's bits at each end of it.
    let blob = STANDARD.encode(format!("Basic user:{SECRET}"));
    let redacted = redactor().text(&blob);
    assert!(
        redacted.len() <= "Basic user:".len() * 2 + REDACTED.len() + 8,
        "{redacted}"
    );
}

#[test]
fn json_escapes_in_any_mix_and_case() {
    assert_hidden(&serde_json::to_string(&json!({ "echo": SECRET })).expect("json"));
    assert_hidden(&json_escaped(SECRET, false));
    assert_hidden(&json_escaped(SECRET, true));
    // Base64 with its `/` escaped, as PHP writes it.
    let escaped = STANDARD.encode("????secret").replace('/', "\\/");
    assert_eq!(escaped, "Pz8\\/P3NlY3JldA==");
    assert_eq!(Redactor::new(["????secret"]).text(&escaped), "[redacted]");
    let redacted = redactor().text(&format!("{{\"a\":\"{}\",\"b\":1}}", json_escaped(SECRET, false)));
    assert_eq!(
        redacted, "{\"a\":\"[redacted]\",\"b\":1}",
        "whole escapes go, nothing around them"
    );
}

#[test]
fn percent_encoding_in_either_case_with_plus_for_space() {
    let upper = utf8_percent_encode(SECRET, NON_ALPHANUMERIC).to_string();
    assert_hidden(&format!("https://api.test/?key={upper}&x=1"));
    assert_hidden(&upper.to_lowercase());
    let form: String = url::form_urlencoded::byte_serialize(SECRET.as_bytes()).collect();
    assert!(form.contains('+'), "{form}");
    assert_hidden(&form);
    // Only what must be encoded is (a path or query as browsers write it).
    let light = SECRET.replace(' ', "%20").replace('"', "%22").replace('ü', "%C3%BC");
    assert_hidden(&light);
    assert_eq!(redactor().text(&format!("a={upper}&b=2")), "a=[redacted]&b=2");
    assert_hidden(&utf8_percent_encode(&STANDARD.encode(SECRET), NON_ALPHANUMERIC).to_string());
}

#[test]
fn overlapping_and_adjacent_secrets_go_whole() {
    let redactor = Redactor::new(["abcdefgh", "efghijkl"]);
    assert_eq!(redactor.text("<abcdefghijkl>"), "<[redacted]>");
    assert_eq!(redactor.text("abcdefghabcdefgh"), "[redacted]");
}

#[test]
fn malformed_escapes_are_text() {
    let redactor = Redactor::new(["secret"]);
    for text in [
        "%",
        "%G1",
        "%e",
        "\\",
        "\\u12",
        "\\uD83D",
        "\\uD83D\\u0041",
        "\\uZZZZ",
        "ü%",
    ] {
        assert_eq!(redactor.text(text), text);
    }
    assert_eq!(redactor.text("\\uD83D%73ecret"), "\\uD83D[redacted]");
}

#[test]
fn values_redact_strings_and_keys() {
    let value = json!({"k": SECRET, SECRET: [1, {"x": format!("Bearer {SECRET}")}], "n": 2});
    assert_eq!(
        redactor().value(value),
        json!({"k": "[redacted]", "[redacted]": [1, {"x": "Bearer [redacted]"}], "n": 2})
    );
}
