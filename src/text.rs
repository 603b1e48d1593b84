//! Text helpers more than one layer uses (the core's records, the identity of a caller).

/// `text` cut to `max` bytes (at least 4; at a character's boundary, `...` at its end)
/// when longer.
pub fn cut(mut text: String, max: usize) -> String {
    if text.len() > max {
        let mut end = max.max(4) - 3;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push_str("...");
    }
    text
}
