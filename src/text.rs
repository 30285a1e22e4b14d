//! Text a client, a model or an upstream supplies, made safe to store, log or show: bounded (cut
//! on a character boundary, visibly, with an ellipsis) and shown with the characters that would
//! hide or reorder it written as their code points (`U+202E`).

use icu_properties::CodePointSetData;
use icu_properties::props::DefaultIgnorableCodePoint;

/// Marks where text was cut.
const ELLIPSIS: &str = "…";

/// `text` when it is at most `max_bytes` long (UTF-8); otherwise its longest prefix ending on a
/// character boundary that, followed by an ellipsis, is at most `max_bytes` long.
pub fn bounded(text: &str, max_bytes: usize) -> String {
    if text.len() <= max_bytes {
        return text.to_owned();
    }
    let end = text.floor_char_boundary(max_bytes.saturating_sub(ELLIPSIS.len()));
    format!("{}{ELLIPSIS}", &text[..end])
}

/// `text` with every bidi control and invisible character as its code point (`U+202E`): they
/// could make shown text read differently (`"\u{202e}0001\u{202c}"` displays as "1000").
pub fn shown(text: &str) -> String {
    code_points(text, is_invisible)
}

/// [`shown`] for a terminal: control characters too (which would move the cursor, start an
/// escape sequence or break a row) are written as their code points.
pub fn printable(text: &str) -> String {
    code_points(text, |c| c.is_control() || is_invisible(c))
}

fn code_points(text: &str, replaced: impl Fn(char) -> bool) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if replaced(c) {
            out.push_str(&format!("U+{:04X}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    out
}

/// Characters that display as nothing: Unicode's `Default_Ignorable_Code_Point` (which holds every
/// bidi control), so also zero-width spaces and joiners, variation selectors, fillers, soft hyphen
/// and tag characters (text hidden in plain sight).
fn is_invisible(c: char) -> bool {
    CodePointSetData::new::<DefaultIgnorableCodePoint>().contains(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_text_is_kept_and_long_text_is_cut_visibly_on_a_character_boundary() {
        assert_eq!(bounded("short", 10), "short");
        assert_eq!(bounded("exactly10!", 10), "exactly10!");
        assert_eq!(bounded("0123456789abc", 10), "0123456…");
        // "é" is two bytes: a cut inside it keeps the whole character out.
        let cut = bounded("ééééé", 8);
        assert_eq!(cut, "éé…");
        assert!(cut.len() <= 8);
    }

    #[test]
    fn printable_text_shows_controls_and_bidi_controls_as_code_points() {
        assert_eq!(printable("José 李雷 🦀"), "José 李雷 🦀");
        assert_eq!(printable("evil\u{202e}gpj.exe"), "evilU+202Egpj.exe");
        assert_eq!(printable("a\u{1b}[2J\nb\u{7f}\u{9b}"), "aU+001B[2JU+000AbU+007FU+009B");
        // Shown text keeps control characters (a description's line breaks).
        assert_eq!(shown("a\nb\u{2066}"), "a\nbU+2066");
    }
}
