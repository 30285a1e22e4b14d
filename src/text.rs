//! Bounding text a client or a model supplies before it is stored or logged: cut on a character
//! boundary, visibly, with an ellipsis.

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
}
