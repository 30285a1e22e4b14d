//! Keeps a call's secrets out of what an upstream answers: every saved secret and access token of
//! the call is replaced by `[redacted]`, as is and in the encodings an upstream is likely to echo
//! it in: base64 (standard or URL-safe, padded or not, alone or anywhere inside a longer blob),
//! JSON string escapes (`\u00e9`, `\/`, `\"`, in any mix) and percent-encoding (either hex case,
//! `+` for a space). Not found: other encodings (hex, HTML entities, compressed or encrypted text,
//! an encoding of an encoding) and a secret split across strings or fields.

use std::ops::Range;

use aho_corasick::{AhoCorasick, AhoCorasickKind};
use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE};
use serde_json::Value;

pub const REDACTED: &str = "[redacted]";

/// Shorter secrets are not looked for: they would match ordinary text.
const MIN_SECRET_BYTES: usize = 4;

/// The spellings of a call's secrets, compiled once per call.
pub struct Redactor {
    needles: Needles,
}

enum Needles {
    /// The call has no secret to look for.
    None,
    Some(AhoCorasick),
    /// The spellings could not be compiled (only past the automaton's size limits, far beyond a
    /// call's few secrets): every text is withheld rather than passed on unchecked.
    Unbuildable,
}

impl Redactor {
    pub fn new<'a>(secrets: impl IntoIterator<Item = &'a str>) -> Self {
        let mut spellings: Vec<Vec<u8>> = Vec::new();
        for secret in secrets.into_iter().filter(|s| s.len() >= MIN_SECRET_BYTES) {
            spellings.push(secret.as_bytes().to_vec());
            spellings.extend(base64_spellings(secret.as_bytes()));
        }
        spellings.sort();
        spellings.dedup();
        let needles = if spellings.is_empty() {
            Needles::None
        } else {
            // A contiguous NFA, not the DFA the crate would pick for so few patterns: the automaton
            // is built for each call and searches one answer, and building a DFA cost more than
            // every search of a typical answer together (building and dropping it took over 5% of
            // a replica's CPU in the benchmark's elicitation loop). The matches are the same.
            let built = AhoCorasick::builder()
                .kind(Some(AhoCorasickKind::ContiguousNFA))
                .build(&spellings);
            match built {
                Ok(automaton) => Needles::Some(automaton),
                Err(e) => {
                    tracing::error!(error = %e, "cannot compile the secrets to redact; withholding answers");
                    Needles::Unbuildable
                }
            }
        };
        Self { needles }
    }

    /// `text` with every secret replaced, in whichever of the spellings above it appears.
    pub fn text(&self, text: &str) -> String {
        let needles = match &self.needles {
            Needles::None => return text.to_owned(),
            Needles::Some(needles) => needles,
            Needles::Unbuildable => return REDACTED.to_owned(),
        };
        let mut found: Vec<Range<usize>> = needles.find_overlapping_iter(text).map(|m| m.range()).collect();
        // One decoded view at a time: each holds a position per byte of the text.
        let views: [&dyn Fn() -> Option<Decoded>; 3] =
            [&|| json_unescaped(text), &|| percent_decoded(text, false), &|| {
                percent_decoded(text, true)
            }];
        for decoded in views.iter().filter_map(|view| view()) {
            found.extend(
                needles
                    .find_overlapping_iter(&decoded.bytes)
                    .map(|m| decoded.source(m.range(), text.len())),
            );
        }
        replace(text, found)
    }

    /// `value` with every string and object key redacted as [`Self::text`] does.
    pub fn value(&self, value: Value) -> Value {
        match value {
            Value::String(text) => Value::String(self.text(&text)),
            Value::Array(items) => Value::Array(items.into_iter().map(|v| self.value(v)).collect()),
            Value::Object(map) => Value::Object(map.into_iter().map(|(k, v)| (self.text(&k), self.value(v))).collect()),
            other => other,
        }
    }
}

/// The base64 spellings of `secret`: encoded alone, padded or not, and the characters that encode only its bits when it starts 0, 1 or 2 bytes into a 3-byte
/// group of a longer blob, which are the same whatever surrounds it. At most a character's worth
/// of bits at each end of an embedded secret stays visible.
fn base64_spellings(secret: &[u8]) -> Vec<Vec<u8>> {
    let mut spellings = Vec::new();
    for engine in [&STANDARD, &URL_SAFE] {
        let alone = engine.encode(secret);
        spellings.push(alone.trim_end_matches('=').as_bytes().to_vec());
        spellings.push(alone.into_bytes());
        for offset in 0..3 {
            let mut blob = vec![0; offset];
            blob.extend_from_slice(secret);
            let encoded = engine.encode(&blob);
            let first = (8 * offset).div_ceil(6);
            let end = 8 * (offset + secret.len()) / 6;
            spellings.push(encoded.as_bytes()[first..end].to_vec());
        }
    }
    spellings
}

/// Text decoded from an encoding, and where each decoded byte came from.
struct Decoded {
    bytes: Vec<u8>,
    /// Per decoded byte, where its source (a character, an escape) starts in the text.
    starts: Vec<usize>,
}

impl Decoded {
    fn with_capacity(len: usize) -> Self {
        Self {
            bytes: Vec::with_capacity(len),
            starts: Vec::with_capacity(len),
        }
    }

    /// Bytes decoded from one escape at `start`.
    fn push(&mut self, bytes: &[u8], start: usize) {
        self.bytes.extend_from_slice(bytes);
        self.starts.extend(std::iter::repeat_n(start, bytes.len()));
    }

    /// The text's bytes from `at` up to the next of `escapes` (or its end), as they are; returns
    /// where they end.
    fn push_until(&mut self, text: &str, at: usize, escapes: &[char]) -> usize {
        let end = text[at..].find(escapes).map_or(text.len(), |i| at + i);
        self.bytes.extend_from_slice(&text.as_bytes()[at..end]);
        self.starts.extend(at..end);
        end
    }

    /// The text that decoded to `range`, whole escapes included.
    fn source(&self, range: Range<usize>, text_len: usize) -> Range<usize> {
        let last = self.starts[range.end - 1];
        let end = self.starts[range.end..]
            .iter()
            .copied()
            .find(|&start| start > last)
            .unwrap_or(text_len);
        self.starts[range.start]..end
    }
}

/// `text` with its JSON string escapes decoded, or `None` without any.
fn json_unescaped(text: &str) -> Option<Decoded> {
    if !text.contains('\\') {
        return None;
    }
    let bytes = text.as_bytes();
    let mut decoded = Decoded::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        at = decoded.push_until(text, at, &['\\']);
        if at == bytes.len() {
            break;
        }
        match json_escape(&bytes[at..]) {
            Some((len, c)) => {
                decoded.push(c.encode_utf8(&mut [0; 4]).as_bytes(), at);
                at += len;
            }
            None => {
                decoded.push(&bytes[at..=at], at);
                at += 1;
            }
        }
    }
    Some(decoded)
}

/// The JSON escape at the start of `bytes`: its length and character. A lone surrogate is left as
/// it is written.
fn json_escape(bytes: &[u8]) -> Option<(usize, char)> {
    let [b'\\', kind, ..] = bytes else {
        return None;
    };
    let short = match kind {
        b'"' => '"',
        b'\\' => '\\',
        b'/' => '/',
        b'b' => '\u{8}',
        b'f' => '\u{c}',
        b'n' => '\n',
        b'r' => '\r',
        b't' => '\t',
        b'u' => {
            let unit = hex(bytes.get(2..6)?)?;
            if !(0xD800..0xDC00).contains(&unit) {
                return char::from_u32(unit).map(|c| (6, c));
            }
            let low = bytes
                .get(6..12)
                .filter(|b| b.starts_with(b"\\u"))
                .and_then(|b| hex(&b[2..]))?;
            let c = (0xDC00..0xE000)
                .contains(&low)
                .then(|| char::from_u32(0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00)))??;
            return Some((12, c));
        }
        _ => return None,
    };
    Some((2, short))
}

/// `text` with its `%XX` escapes decoded (and `+` as a space in `form` encoding), or `None`
/// without any.
fn percent_decoded(text: &str, form: bool) -> Option<Decoded> {
    if !(text.contains('%') || form && text.contains('+')) {
        return None;
    }
    let bytes = text.as_bytes();
    let mut decoded = Decoded::with_capacity(bytes.len());
    let escapes: &[char] = if form { &['%', '+'] } else { &['%'] };
    let mut at = 0;
    while at < bytes.len() {
        at = decoded.push_until(text, at, escapes);
        if at == bytes.len() {
            break;
        }
        let escaped = (bytes[at] == b'%')
            .then(|| bytes.get(at + 1..at + 3).and_then(hex))
            .flatten()
            .and_then(|value| u8::try_from(value).ok());
        match (escaped, bytes[at]) {
            (Some(byte), _) => {
                decoded.push(&[byte], at);
                at += 3;
            }
            (None, b'+') if form => {
                decoded.push(b" ", at);
                at += 1;
            }
            (None, _) => {
                decoded.push(&bytes[at..=at], at);
                at += 1;
            }
        }
    }
    Some(decoded)
}

/// The value of hex digits (either case), or `None` if any is not one.
fn hex(digits: &[u8]) -> Option<u32> {
    digits
        .iter()
        .try_fold(0, |value, &d| Some(value * 16 + char::from(d).to_digit(16)?))
}

/// `text` with each run of overlapping `found` ranges, widened to whole characters, replaced by
/// one [`REDACTED`].
fn replace(text: &str, mut found: Vec<Range<usize>>) -> String {
    if found.is_empty() {
        return text.to_owned();
    }
    found.sort_by_key(|range| range.start);
    let mut merged: Vec<Range<usize>> = Vec::new();
    for range in found {
        let range = text.floor_char_boundary(range.start)..text.ceil_char_boundary(range.end);
        match merged.last_mut() {
            Some(last) if range.start <= last.end => last.end = last.end.max(range.end),
            _ => merged.push(range),
        }
    }
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    for range in merged {
        out.push_str(&text[copied..range.start]);
        out.push_str(REDACTED);
        copied = range.end;
    }
    out.push_str(&text[copied..]);
    out
}

#[cfg(test)]
mod tests;
