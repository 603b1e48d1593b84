//! How a path is stored: as text that gives back its exact bytes (docs/schema.md, "Paths").
//!
//! A name may hold any byte but `/` and NUL (SPEC §8), but the store's interface and its
//! path columns (`files.path`, `versions.path`, `events.path`, `events.new_path`) are
//! UTF-8 text. So a path is stored as its own text when it is UTF-8 and holds no
//! character of U+EF80..=U+EFFF, and otherwise with each byte that is not part of valid
//! UTF-8, and each byte of a character of that range, written as the character
//! U+EF00 + byte ([`ESCAPES`]: bytes 0x80..=0xFF become U+EF80..=U+EFFF, characters of
//! Unicode's private use area). ASCII, and so `/`, is always itself. [`decode`] turns
//! every character of the range back into its byte, so every name comes back exactly and
//! two names never share a stored path:
//!
//! ```text
//! name (bytes)              stored text
//! notes/plan.md             notes/plan.md
//! a\nb                      a\nb            (UTF-8: as it is)
//! 6B FF                     k\u{EFFF}
//! EE BE 80 (U+EF80)         \u{EFEE}\u{EFBE}\u{EF80}
//! ```
//!
//! (the unit tests below check these and that every name comes back).
//!
//! Databases written by scratchfs before this encoding stored each such byte as U+FFFD
//! (lossy): those paths still decode, to the bytes of U+FFFD.

use std::borrow::Cow;

/// The characters that stand for single bytes: U+EF00 + byte, for bytes 0x80..=0xFF.
pub const ESCAPES: std::ops::RangeInclusive<char> = '\u{ef80}'..='\u{efff}';

/// The character standing for byte `b` (0x80..=0xFF).
fn escape(b: u8, out: &mut String) {
    out.push(char::from_u32(0xef00 + u32::from(b)).unwrap_or(char::REPLACEMENT_CHARACTER));
}

/// The stored text of a path or name given as raw bytes (lossless; borrowed when it is
/// stored as it is).
pub fn encode(raw: &[u8]) -> Cow<'_, str> {
    if let Ok(s) = std::str::from_utf8(raw)
        && !s.chars().any(|c| ESCAPES.contains(&c))
    {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(raw.len() * 3);
    let mut rest = raw;
    while !rest.is_empty() {
        let (valid, after) = match std::str::from_utf8(rest) {
            Ok(s) => (s, &[][..]),
            Err(e) => {
                let (v, r) = rest.split_at(e.valid_up_to());
                (std::str::from_utf8(v).unwrap_or_default(), r)
            }
        };
        for c in valid.chars() {
            if ESCAPES.contains(&c) {
                for &b in c.encode_utf8(&mut [0; 4]).as_bytes() {
                    escape(b, &mut out);
                }
            } else {
                out.push(c);
            }
        }
        if after.is_empty() {
            break;
        }
        // One invalid sequence (as `Utf8Error::error_len` counts it, else the rest).
        let bad = std::str::from_utf8(after)
            .err()
            .and_then(|e| e.error_len())
            .unwrap_or(after.len());
        for &b in &after[..bad] {
            escape(b, &mut out);
        }
        rest = &after[bad..];
    }
    Cow::Owned(out)
}

/// The raw bytes of a stored path or name (borrowed when it holds no escape).
pub fn decode(stored: &str) -> Cow<'_, [u8]> {
    if !stored.chars().any(|c| ESCAPES.contains(&c)) {
        return Cow::Borrowed(stored.as_bytes());
    }
    let mut out = Vec::with_capacity(stored.len());
    for c in stored.chars() {
        if ESCAPES.contains(&c) {
            out.push((u32::from(c) - 0xef00) as u8);
        } else {
            out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes());
        }
    }
    Cow::Owned(out)
}

/// The stored path as UTF-8 for reading: the exact name when it is UTF-8, else with each
/// byte that is not as U+FFFD (as `String::from_utf8_lossy`; not reversible, see
/// [`decode`]). `None` when the name is UTF-8 and so this is the name itself.
pub fn lossy(stored: &str) -> Option<String> {
    let raw = decode(stored);
    match std::str::from_utf8(&raw) {
        Ok(_) => None,
        Err(_) => Some(String::from_utf8_lossy(&raw).into_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_comes_back_exactly() {
        let names: [&[u8]; 9] = [
            b"plan.md",
            b"notes/a b.md",
            "état/über.json".as_bytes(),
            b"k\xff",
            b"k\xfe",
            &[0xff; 100],
            b"a\n\tb\x1b[31m",
            "\u{ef80}\u{efff}x\u{eeff}\u{f000}".as_bytes(),
            b"x\xc3",
        ];
        let mut seen = std::collections::HashSet::new();
        for n in names {
            let e = encode(n);
            assert_eq!(&*decode(&e), n, "{e:?}");
            assert!(seen.insert(e.into_owned()), "two names, one stored path");
        }
        assert!(matches!(encode(b"plan.md"), Cow::Borrowed(_)));
        assert_eq!(encode(&[0xff; 100]).chars().count(), 100);
        assert_eq!(encode(b"a\n\tb"), "a\n\tb");
    }

    #[test]
    fn lossy_text_is_for_names_that_are_not_utf8() {
        assert_eq!(lossy("plan.md"), None);
        assert_eq!(lossy(&encode("\u{ef80}".as_bytes())), None);
        assert_eq!(lossy(&encode(b"k\xff")).as_deref(), Some("k\u{fffd}"));
        // An older database's lossy path is text like any other.
        assert_eq!(decode("k\u{fffd}"), "k\u{fffd}".as_bytes());
    }
}
