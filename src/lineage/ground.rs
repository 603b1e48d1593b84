//! Grounding of a reply (`scratchfs ground`): every number and identifier-like token of an
//! agent's reply text, and where the scratchpad holds it. Any number in the final reply
//! that does not appear in the scratchpad is a candidate hallucination.
//!
//! - [`tokens`] finds the tokens of a text: numbers (with thousands and decimal
//!   separators in the usual styles), amounts (a number with a currency symbol or code),
//!   dates and times, and identifiers (`O-9`, `T-1042`). The rules, including the choices
//!   made for ambiguous cases, are documented on [`tokens`].
//! - [`ground`] matches the reply's tokens against [`Source`]s that the caller built from
//!   the store (current JSON key values and file lines): numbers by exact decimal value
//!   (`180 == 180.00`), and also a `*_cents` key's value divided by 100; identifiers and
//!   dates by exact text.
//! - [`exit_status`] and [`render`] are what the command prints and returns.
//!
//! Everything here is pure: no store, no I/O. Any UTF-8 text is accepted; nothing panics.

use std::collections::HashMap;
use std::fmt::{self, Write as _};

use serde::Serialize;

/// What kind of token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TokenKind {
    /// A plain number (`42`, `-7`, `1,234.5`, `50%`, the digits of an ordinal `21st`).
    Number,
    /// A number with a currency symbol (`$ € £ ¥`) or code (`USD EUR GBP`) before or after.
    Amount,
    /// An ISO date `2026-11-30`, a time `08:20` / `08:20:31`, or a datetime
    /// `2026-11-30T08:20:31Z`; matched by exact text.
    Date,
    /// An identifier-like word (`O-9`, `T-1042`, `ORD_55`, `v2`), a version-like dotted
    /// number (`1.2.3`, `10.0.0.1`) or a digit-first word mixing letters and digits (a hash
    /// such as `9f86d08`); matched by exact text.
    Identifier,
}

/// One token found in a text.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Token {
    /// The token as written, e.g. `"$1,234.50"`, `"50%"`, `"O-9"`. For a number glued to
    /// letters (`10kg`, `21st`) only the number part (`"10"`, `"21"`).
    pub text: String,
    /// What kind of token.
    pub kind: TokenKind,
    /// The numeric value of a [`TokenKind::Number`] or [`TokenKind::Amount`] (sign
    /// included, currency and percent sign not); `None` for dates and identifiers.
    pub value: Option<Decimal>,
    /// Byte offset of the token's first byte in the text (always a char boundary).
    pub start: usize,
}

/// An exact decimal number: `digits` scaled by 10^-`scale`, with a sign.
///
/// Always normalized, so that equal values are equal (and hash equally):
/// `digits` is ASCII digits with no leading zeros (zero is `"0"`), trailing fractional
/// zeros are removed (`180.00 == 180.0 == 180`: digits `"180"`, scale 0), and zero is never
/// negative. `1234.5` is digits `"12345"`, scale 1; `0.05` is digits `"5"`, scale 2.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct Decimal {
    /// True for a value below zero.
    pub negative: bool,
    /// The significant digits (ASCII), no leading zeros except the single `"0"` of zero.
    pub digits: String,
    /// How many of `digits` are after the decimal point (value = digits × 10^-scale).
    pub scale: u32,
}

/// Largest scale (digits after the point) and largest number of zeros an exponent may add
/// when parsing a JSON number; beyond that the number is not a candidate (no huge strings).
const MAX_EXPONENT_DIGITS: i64 = 1000;

impl Decimal {
    /// Parses a plain decimal: an optional `-`, one or more ASCII digits, and optionally a
    /// `.` followed by one or more digits (`"-12.50"`, `"18000"`, `"0.5"`). No thousands
    /// separators, no exponent (`"1e3"` is `None`), no surrounding whitespace, no `+`.
    pub fn parse(plain: &str) -> Option<Decimal> {
        parse_decimal(plain, false)
    }

    /// This value divided by 100, exactly (`18000` → `180`, `5` → `0.05`): for the value of
    /// a `*_cents` key.
    pub fn div_100(&self) -> Decimal {
        Decimal::normalized(
            self.negative,
            self.digits.clone(),
            self.scale.saturating_add(2),
        )
    }

    /// The value zero.
    fn zero() -> Decimal {
        Decimal {
            negative: false,
            digits: "0".to_string(),
            scale: 0,
        }
    }

    /// A decimal from its integer and fractional ASCII digits (either may be empty).
    /// `None` when the fraction is too long for a `u32` scale.
    fn from_parts(negative: bool, int: &str, frac: &str) -> Option<Decimal> {
        let scale = u32::try_from(frac.len()).ok()?;
        let mut digits = String::with_capacity(int.len() + frac.len());
        digits.push_str(int);
        digits.push_str(frac);
        Some(Decimal::normalized(negative, digits, scale))
    }

    /// Normalizes `digits × 10^-scale` (see the type's docs).
    fn normalized(negative: bool, mut digits: String, mut scale: u32) -> Decimal {
        while scale > 0 && digits.ends_with('0') {
            digits.pop();
            scale -= 1;
        }
        let leading = digits.len() - digits.trim_start_matches('0').len();
        digits.drain(..leading);
        if digits.is_empty() {
            return Decimal::zero();
        }
        Decimal {
            negative,
            digits,
            scale,
        }
    }

    /// The same value with the given sign (zero stays non-negative).
    fn with_sign(mut self, negative: bool) -> Decimal {
        self.negative = negative && self.digits != "0";
        self
    }
}

impl fmt::Display for Decimal {
    /// Plain notation: `180`, `1234.5`, `-0.25`, `0.05`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.negative {
            f.write_char('-')?;
        }
        let scale = self.scale as usize;
        if scale == 0 {
            return f.write_str(&self.digits);
        }
        let len = self.digits.len();
        if len > scale {
            write!(
                f,
                "{}.{}",
                &self.digits[..len - scale],
                &self.digits[len - scale..]
            )
        } else {
            f.write_str("0.")?;
            for _ in len..scale {
                f.write_char('0')?;
            }
            f.write_str(&self.digits)
        }
    }
}

/// Parses `-?digits(.digits)?` and, when `exponent`, an optional `[eE][+-]?digits` (a JSON
/// number). Leading zeros are accepted (`007`).
fn parse_decimal(text: &str, exponent: bool) -> Option<Decimal> {
    let (negative, rest) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (mantissa, exp) = match rest.find(['e', 'E']) {
        Some(at) if exponent => (&rest[..at], Some(&rest[at + 1..])),
        Some(_) => return None,
        None => (rest, None),
    };
    let (int, frac) = match mantissa.split_once('.') {
        Some((int, frac)) => (int, frac),
        None => (mantissa, ""),
    };
    let all_digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if int.is_empty() || !all_digits(int) || !all_digits(frac) {
        return None;
    }
    if mantissa.contains('.') && frac.is_empty() {
        return None;
    }
    let value = Decimal::from_parts(negative, int, frac)?;
    let Some(exp) = exp else { return Some(value) };
    let exp_digits = exp.strip_prefix(['+', '-']).unwrap_or(exp);
    if exp_digits.is_empty() || exp_digits.len() > 9 || !all_digits(exp_digits) {
        return None;
    }
    let magnitude: i64 = exp_digits.parse().ok()?;
    let shift = if exp.starts_with('-') {
        -magnitude
    } else {
        magnitude
    };
    if value.digits == "0" {
        return Some(value);
    }
    // value × 10^shift: the scale goes down by `shift`; below zero, append zeros.
    let scale = i64::from(value.scale) - shift;
    if !(-MAX_EXPONENT_DIGITS..=MAX_EXPONENT_DIGITS).contains(&scale) {
        return None;
    }
    let mut digits = value.digits;
    if scale < 0 {
        digits.extend(std::iter::repeat_n('0', scale.unsigned_abs() as usize));
        Some(Decimal::normalized(value.negative, digits, 0))
    } else {
        Some(Decimal::normalized(
            value.negative,
            digits,
            u32::try_from(scale).ok()?,
        ))
    }
}

/// Every token of `text`, in order of position.
///
/// Rules (decisions for ambiguous cases included):
/// - **Numbers**: ASCII digits, with separators inside: `,` `.` and, as thousands
///   separator only, a space, U+00A0, U+202F or U+2009 (a space joins only a 3-digit group
///   after a first group of 1–3 digits not starting with `0`, before any `,`/`.`:
///   `1 234` is 1234, `2024 100` is two numbers). A separator belongs to the number only
///   when a digit follows it, so sentence punctuation is not part of it (`costs 180.`,
///   `180, then`). How separators read:
///   - both `,` and `.`: the last one is the decimal point and occurs once; the other
///     groups thousands (`1,234,567.89`, `1.234,50`);
///   - only `,`: thousands when every group after the first is 3 digits and the first is
///     1–3 digits not starting with `0` (`1,234` = 1234; also Indian grouping
///     `1,00,000`); otherwise a single `,` is the decimal point (`1,5` = 1.5, `0,500` = 0.5);
///   - only `.`: a single `.` is the decimal point (`1.234` = 1.234); several `.` with
///     3-digit groups are thousands (`1.234.567`); several `.` otherwise make a
///     version-like [`TokenKind::Identifier`] matched by exact text (`1.2.3`, `10.0.0.1`);
///   - spaces then one `,`/`.`: the latter is the decimal point (`1 234,50`);
///   - anything else (`1,2,3`, `12,34,56`) is a list: each digit group is its own number.
///
///   A leading `.5` is 0.5. Scientific notation is not read (`1e3` is an identifier, see
///   below).
/// - **Sign**: `-` or U+2212 counts only when not preceded by a letter or digit (`T-1042`
///   and `2026-11-30` hold no negative number; `pages 10-20` is 10 and 20).
/// - **Percent**: `50%` (or `50 %`) is a Number 50 with text `"50%"`.
/// - **Amounts**: a currency symbol `$ € £ ¥` before (`$180`, `€ 12,50`, `$-5`, `-$5`) or
///   after (`12,50 €`) a number, or a code `USD EUR GBP` (upper case) right before
///   (`USD 180`, `USD180`) or after (`12.50 EUR`), with at most one space between. A
///   symbol or code after a number is not taken when a number follows it (`3 $20` is 3
///   and $20).
/// - **Dates**: `YYYY-MM-DD` (month 01–12, day 01–31), a time `H:MM`/`HH:MM[:SS[.f]]`
///   (hour ≤ 23, minutes ≤ 59), and `YYYY-MM-DDTHH:MM[:SS[.f]][Z|±HH[:MM]]` are one
///   [`TokenKind::Date`] token each. A date and a time separated by a space are two tokens.
/// - **Identifiers**: a word of ASCII letters, digits, `-` and `_` (and `.` between two
///   digits: `v1.2.3`) that starts with an ASCII letter and contains a digit (`O-9`,
///   `ORD_55`, `A1B2`, `v2`); trailing `-`/`_` are not part of it. A word that starts
///   with a digit is a Number of its leading digits (text = those digits only:
///   `21st` → 21, `10kg` → 10), unless a digit follows one of its letters, in which case
///   the whole word is an Identifier (hashes and ids: `9f86d08`, `550e8400-e29b`, `1e3`,
///   `10x20`).
/// - Words without digits are no tokens; markdown and punctuation around tokens are
///   ignored (`**$180**`, `(O-9)`, `"T-1042",`). Only ASCII digits are digits. A word
///   starts only after a character that is not alphanumeric (Unicode), so in
///   `Größe5` only the number 5 is a token.
pub fn tokens(text: &str) -> Vec<Token> {
    let scan = Scan::new(text);
    let mut out = Vec::new();
    let mut i = 0;
    while i < scan.chars.len() {
        let next = scan.step(i, &mut out);
        // Every rule consumes at least one char; guard anyway so that no input can loop.
        i = next.max(i + 1);
    }
    out
}

/// Separators inside a run of digit groups.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sep {
    Comma,
    Dot,
    Space,
}

/// How a run of digit groups reads.
enum Interp {
    Number(Decimal),
    Version,
    Invalid,
}

/// What a run of digit groups (from a digit to the end of its last group) turned out to be.
enum RunResult {
    /// One number; `plain` when written without any separator.
    Number { value: Decimal, plain: bool },
    /// A version-like dotted string.
    Version,
    /// A list: each group (char index range) is its own integer.
    Split(Vec<(usize, usize)>),
}

/// Currency symbols that make an amount.
fn is_currency_symbol(c: char) -> bool {
    matches!(c, '$' | '€' | '£' | '¥')
}

/// Minus signs.
fn is_minus(c: char) -> bool {
    matches!(c, '-' | '\u{2212}')
}

/// Space-like characters that may group thousands or stand between a number and its
/// currency or percent sign.
fn is_space_sep(c: char) -> bool {
    matches!(c, ' ' | '\u{a0}' | '\u{202f}' | '\u{2009}')
}

/// Characters of an identifier word (besides `.` between digits).
fn is_word_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '-' || c == '_'
}

const CURRENCY_CODES: [&str; 3] = ["USD", "EUR", "GBP"];

/// Whether `groups` (joined by one kind of separator) are well-formed thousands groups:
/// a first group of 1–3 digits not starting with `0` and then groups of exactly 3 digits,
/// or, for commas, Indian grouping (first 1–2 digits, then 2-digit groups, last 3 digits).
fn grouped_ok(groups: &[&str], sep: Sep) -> bool {
    let Some((first, rest)) = groups.split_first() else {
        return false;
    };
    if rest.is_empty() {
        return true;
    }
    if first.starts_with('0') {
        return false;
    }
    if (1..=3).contains(&first.len()) && rest.iter().all(|g| g.len() == 3) {
        return true;
    }
    if sep == Sep::Comma && (1..=2).contains(&first.len()) {
        let (last, middle) = rest.split_last().expect("rest is not empty");
        return last.len() == 3 && middle.iter().all(|g| g.len() == 2);
    }
    false
}

/// Reads digit groups joined by separators (`seps[k]` stands between `groups[k]` and
/// `groups[k + 1]`; there is one group more than separators).
fn interpret(groups: &[&str], seps: &[Sep]) -> Interp {
    let number = |negative: bool, int: &str, frac: &str| {
        Decimal::from_parts(negative, int, frac).map_or(Interp::Invalid, Interp::Number)
    };
    if seps.is_empty() {
        return number(false, groups[0], "");
    }
    let count = |kind: Sep| seps.iter().filter(|s| **s == kind).count();
    let (commas, dots, spaces) = (count(Sep::Comma), count(Sep::Dot), count(Sep::Space));
    let last = seps.len() - 1;
    // Index in `seps` of the decimal point, if there is one.
    let decimal = if commas > 0 && dots > 0 {
        let kind = seps[last];
        if kind == Sep::Space || count(kind) != 1 {
            return Interp::Invalid;
        }
        Some(last)
    } else if commas + dots > 0 {
        let kind = if commas > 0 { Sep::Comma } else { Sep::Dot };
        let strong = commas + dots;
        if spaces > 0 {
            if strong != 1 || seps[last] == Sep::Space {
                return Interp::Invalid;
            }
            Some(last)
        } else if kind == Sep::Dot && strong == 1 {
            Some(last)
        } else if grouped_ok(groups, kind) {
            None
        } else if strong == 1 {
            Some(last)
        } else if kind == Sep::Dot {
            return Interp::Version;
        } else {
            return Interp::Invalid;
        }
    } else {
        None
    };
    let int_count = decimal.map_or(groups.len(), |d| d + 1);
    let int_groups = &groups[..int_count];
    let int_seps = &seps[..int_count - 1];
    if let Some(&thousands) = int_seps.first()
        && (int_seps.iter().any(|s| *s != thousands) || !grouped_ok(int_groups, thousands))
    {
        return Interp::Invalid;
    }
    let int: String = int_groups.concat();
    let frac = decimal.map_or("", |_| groups[int_count]);
    number(false, &int, frac)
}

/// A text being tokenized, as chars with their byte offsets.
struct Scan<'a> {
    text: &'a str,
    chars: Vec<(usize, char)>,
}

impl<'a> Scan<'a> {
    fn new(text: &'a str) -> Scan<'a> {
        Scan {
            text,
            chars: text.char_indices().collect(),
        }
    }

    fn ch(&self, i: usize) -> Option<char> {
        self.chars.get(i).map(|&(_, c)| c)
    }

    /// Byte offset of char `i` (the text's length past the end).
    fn off(&self, i: usize) -> usize {
        self.chars.get(i).map_or(self.text.len(), |&(at, _)| at)
    }

    fn slice(&self, from: usize, to: usize) -> &'a str {
        &self.text[self.off(from)..self.off(to)]
    }

    fn is_digit(&self, i: usize) -> bool {
        self.ch(i).is_some_and(|c| c.is_ascii_digit())
    }

    /// End of the run of ASCII digits starting at `i`.
    fn digits_end(&self, mut i: usize) -> usize {
        while self.is_digit(i) {
            i += 1;
        }
        i
    }

    /// Whether exactly `n` digits start at `i` and the number they make is at most `max`.
    fn digits_upto(&self, i: usize, n: usize, max: u32) -> bool {
        self.digits_end(i) == i + n && self.slice(i, i + n).parse::<u32>().is_ok_and(|v| v <= max)
    }

    fn push(
        &self,
        out: &mut Vec<Token>,
        from: usize,
        to: usize,
        kind: TokenKind,
        value: Option<Decimal>,
    ) {
        out.push(Token {
            text: self.slice(from, to).to_string(),
            kind,
            value,
            start: self.off(from),
        });
    }

    /// Handles the char at `i`: pushes the token starting there, if any, and returns where
    /// to go on.
    fn step(&self, i: usize, out: &mut Vec<Token>) -> usize {
        let c = self.chars[i].1;
        let prev = i.checked_sub(1).and_then(|p| self.ch(p));
        let after_alnum = prev.is_some_and(|p| p.is_alphanumeric());
        if c.is_ascii_digit() {
            if let Some(end) = self.date_or_time_at(i) {
                self.push(out, i, end, TokenKind::Date, None);
                return end;
            }
            return self.number_from(i, i, false, false, out);
        }
        if is_minus(c) && !after_alnum {
            if self.is_digit(i + 1) {
                if self.date_or_time_at(i + 1).is_some() {
                    return i + 1;
                }
                return self.number_from(i, i + 1, true, false, out);
            }
            if self.ch(i + 1).is_some_and(is_currency_symbol) {
                let mut j = i + 2;
                if self.ch(j).is_some_and(is_space_sep) {
                    j += 1;
                }
                if self.is_digit(j) {
                    return self.number_from(i, j, true, true, out);
                }
            }
            return i + 1;
        }
        if is_currency_symbol(c) {
            if let Some((digit, negative)) = self.amount_after_prefix(i + 1) {
                return self.number_from(i, digit, negative, true, out);
            }
            return i + 1;
        }
        if c == '.' && self.is_digit(i + 1) && !after_alnum && !matches!(prev, Some('.' | ',')) {
            let end = self.digits_end(i + 1);
            if let Some(value) = Decimal::from_parts(false, "", self.slice(i + 1, end)) {
                return self.finish_number(i, end, value, false, false, out);
            }
            return end;
        }
        if c.is_ascii_alphabetic() && !after_alnum {
            if self.code_at(i)
                && let Some((digit, negative)) = self.amount_after_prefix(i + 3)
            {
                return self.number_from(i, digit, negative, true, out);
            }
            return self.word(i, out);
        }
        i + 1
    }

    /// After a currency prefix ending before `j`: an optional space, an optional minus and
    /// a digit. Returns the digit's index and whether there was a minus.
    fn amount_after_prefix(&self, mut j: usize) -> Option<(usize, bool)> {
        if self.ch(j).is_some_and(is_space_sep) {
            j += 1;
        }
        let negative = self.ch(j).is_some_and(is_minus) && self.is_digit(j + 1);
        if negative {
            j += 1;
        }
        self.is_digit(j).then_some((j, negative))
    }

    /// Whether a currency code starts at `i`.
    fn code_at(&self, i: usize) -> bool {
        let Some(&(from, _)) = self.chars.get(i) else {
            return false;
        };
        let rest = &self.text[from..];
        CURRENCY_CODES.iter().any(|code| rest.starts_with(code))
    }

    /// End of a date, time or datetime starting at the digit `i`, if one does.
    fn date_or_time_at(&self, i: usize) -> Option<usize> {
        let is_date = self.digits_end(i) == i + 4
            && self.ch(i + 4) == Some('-')
            && self.digits_upto(i + 5, 2, 12)
            && self.ch(i + 7) == Some('-')
            && self.digits_upto(i + 8, 2, 31)
            && self.slice(i + 5, i + 7) != "00"
            && self.slice(i + 8, i + 10) != "00";
        if !is_date {
            return self.time_at(i);
        }
        let date_end = i + 10;
        if self.ch(date_end) != Some('T') {
            return Some(date_end);
        }
        let Some(time_end) = self.time_at(date_end + 1) else {
            return Some(date_end);
        };
        // A zone: `Z`, or `+HH`, `+HHMM`, `+HH:MM` (or `-`).
        match self.ch(time_end) {
            Some('Z') => Some(time_end + 1),
            Some('+' | '-') => {
                let zone = time_end + 1;
                let upto = |from: usize, max: u32| {
                    self.slice(from, from + 2)
                        .parse::<u32>()
                        .is_ok_and(|v| v <= max)
                };
                match self.digits_end(zone) - zone {
                    4 if upto(zone, 23) && upto(zone + 2, 59) => Some(zone + 4),
                    2 if upto(zone, 23) => {
                        if self.ch(zone + 2) == Some(':') && self.digits_upto(zone + 3, 2, 59) {
                            Some(zone + 5)
                        } else {
                            Some(zone + 2)
                        }
                    }
                    _ => Some(time_end),
                }
            }
            _ => Some(time_end),
        }
    }

    /// End of a time `H:MM` / `HH:MM[:SS[.f]]` starting at the digit `i`, if one does.
    fn time_at(&self, i: usize) -> Option<usize> {
        let hour_len = self.digits_end(i) - i;
        if !(1..=2).contains(&hour_len) || !self.digits_upto(i, hour_len, 23) {
            return None;
        }
        let colon = i + hour_len;
        if self.ch(colon) != Some(':') || !self.digits_upto(colon + 1, 2, 59) {
            return None;
        }
        let mut end = colon + 3;
        if self.ch(end) == Some(':') && self.digits_upto(end + 1, 2, 60) {
            end += 3;
            if self.ch(end) == Some('.') && self.is_digit(end + 1) {
                end = self.digits_end(end + 1);
            }
        }
        // `12:34:5` or `1:234` is no time.
        if self.is_digit(end) || (self.ch(end) == Some(':') && self.is_digit(end + 1)) {
            return None;
        }
        Some(end)
    }

    /// Reads the run of digit groups starting at the digit `i`. Returns what it is and
    /// where it ends.
    fn run(&self, i: usize) -> (RunResult, usize) {
        let mut groups = vec![(i, self.digits_end(i))];
        let mut seps = Vec::new();
        loop {
            let j = groups.last().expect("one group at least").1;
            let sep = match self.ch(j) {
                Some(',') => Sep::Comma,
                Some('.') => Sep::Dot,
                Some(c) if is_space_sep(c) => Sep::Space,
                _ => break,
            };
            if !self.is_digit(j + 1) {
                break;
            }
            let next = (j + 1, self.digits_end(j + 1));
            if sep == Sep::Space {
                // Spaces join thousands only: before any `,`/`.`, after a first group of
                // 1–3 digits not starting with 0, and before a group of exactly 3 digits.
                let (first_from, first_to) = groups[0];
                let first_ok =
                    (1..=3).contains(&(first_to - first_from)) && self.ch(first_from) != Some('0');
                if !seps.iter().all(|s| *s == Sep::Space) || !first_ok || next.1 - next.0 != 3 {
                    break;
                }
            }
            seps.push(sep);
            groups.push(next);
        }
        let texts: Vec<&str> = groups.iter().map(|&(a, b)| self.slice(a, b)).collect();
        let end = groups.last().expect("one group at least").1;
        match interpret(&texts, &seps) {
            Interp::Number(value) => (
                RunResult::Number {
                    value,
                    plain: seps.is_empty(),
                },
                end,
            ),
            Interp::Version => (RunResult::Version, end),
            Interp::Invalid => {
                // Thousands grouped by spaces and then a malformed `,`/`.` part: the
                // space-grouped part is the number, the rest is read again.
                if let Some(k) = seps
                    .iter()
                    .position(|s| *s != Sep::Space)
                    .filter(|&k| k > 0)
                    && let Interp::Number(value) = interpret(&texts[..=k], &seps[..k])
                {
                    return (
                        RunResult::Number {
                            value,
                            plain: false,
                        },
                        groups[k].1,
                    );
                }
                (RunResult::Split(groups), end)
            }
        }
    }

    /// A number (or amount) whose text starts at `start` (a sign or currency prefix) and
    /// whose digits start at `digit`.
    fn number_from(
        &self,
        start: usize,
        digit: usize,
        negative: bool,
        currency: bool,
        out: &mut Vec<Token>,
    ) -> usize {
        let (result, end) = self.run(digit);
        match result {
            RunResult::Number { value, plain } => {
                let value = value.with_sign(negative);
                let plain = plain && !negative && !currency;
                self.finish_number(start, end, value, currency, plain, out)
            }
            RunResult::Version => {
                self.push(out, digit, end, TokenKind::Identifier, None);
                end
            }
            RunResult::Split(groups) => {
                for (n, &(from, to)) in groups.iter().enumerate() {
                    let value = Decimal::from_parts(false, self.slice(from, to), "")
                        .unwrap_or_else(Decimal::zero);
                    if n == 0 {
                        let kind = if currency {
                            TokenKind::Amount
                        } else {
                            TokenKind::Number
                        };
                        self.push(out, start, to, kind, Some(value.with_sign(negative)));
                    } else {
                        self.push(out, from, to, TokenKind::Number, Some(value));
                    }
                }
                end
            }
        }
    }

    /// Whether an amount prefix (currency, optional space, optional minus, digit) starts at
    /// `j`: a currency after a number is not taken when it is another number's prefix.
    fn prefix_follows(&self, j: usize, code: bool) -> bool {
        self.amount_after_prefix(j + if code { 3 } else { 1 })
            .is_some()
    }

    /// Ends a number whose text so far is `start..end` (digits end at `end`): a percent
    /// sign, a currency after it, or letters glued to it.
    fn finish_number(
        &self,
        start: usize,
        end: usize,
        value: Decimal,
        currency: bool,
        plain: bool,
        out: &mut Vec<Token>,
    ) -> usize {
        let mut kind = if currency {
            TokenKind::Amount
        } else {
            TokenKind::Number
        };
        let mut text_end = end;
        if !currency {
            let j = if self.ch(end).is_some_and(is_space_sep) {
                end + 1
            } else {
                end
            };
            match self.ch(j) {
                Some('%') => text_end = j + 1,
                Some(c) if is_currency_symbol(c) && !self.prefix_follows(j, false) => {
                    kind = TokenKind::Amount;
                    text_end = j + 1;
                }
                Some(_)
                    if self.code_at(j)
                        && !self
                            .ch(j + 3)
                            .is_some_and(|c| c.is_alphanumeric() || c == '_')
                        && !self.prefix_follows(j, true) =>
                {
                    kind = TokenKind::Amount;
                    text_end = j + 3;
                }
                _ => {}
            }
        }
        let mut next = text_end;
        if text_end == end && self.ch(end).is_some_and(|c| c.is_ascii_alphabetic()) {
            let word_end = self.word_end(end);
            if plain
                && self
                    .slice(end, word_end)
                    .bytes()
                    .any(|b| b.is_ascii_digit())
            {
                self.push(out, start, word_end, TokenKind::Identifier, None);
                return word_end;
            }
            next = word_end;
        }
        self.push(out, start, text_end, kind, Some(value));
        next
    }

    /// End of the identifier word starting at `i` (ASCII letters, digits, `-`, `_`, and `.`
    /// between digits), without trailing `-`/`_`.
    fn word_end(&self, i: usize) -> usize {
        let mut j = i;
        loop {
            match self.ch(j) {
                Some(c) if is_word_char(c) => j += 1,
                Some('.') if j > i && self.is_digit(j - 1) && self.is_digit(j + 1) => j += 1,
                _ => break,
            }
        }
        while j > i + 1 && matches!(self.ch(j - 1), Some('-' | '_')) {
            j -= 1;
        }
        j
    }

    /// A word starting with the ASCII letter at `i`: an identifier when it holds a digit.
    fn word(&self, i: usize, out: &mut Vec<Token>) -> usize {
        let end = self.word_end(i);
        if self.slice(i, end).bytes().any(|b| b.is_ascii_digit()) {
            self.push(out, i, end, TokenKind::Identifier, None);
        }
        end
    }
}

/// Where a value lives in the scratchpad (built by the caller from the store).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Source {
    /// File path, e.g. `"state.json"`.
    pub path: String,
    /// `Some(key)`: a JSON key's current value (dotted path for nested keys, e.g.
    /// `"order.total_cents"`; array index as `"items.0.sku"`); `None`: a line of a file.
    pub key: Option<String>,
    /// 1-based line number, for line sources.
    pub line: Option<u64>,
    /// The JSON value as JSON text (e.g. `18000`, `"O-9"`) or the line's text.
    pub text: String,
    /// Version number of the file (or of the version that set the key).
    pub version: i64,
    /// Who wrote that version.
    pub writer: String,
    /// The writer's step, when it gave one.
    pub step: Option<i64>,
    /// Written by a writer marked `"model": true`: asserted, not a source.
    pub model: bool,
    /// For a key whose value a rollback or restore brought back (issue 35): that
    /// version, `"rollback v4 by lead"` (`version`, `writer` and `step` are then those
    /// of the version that set the value); `None` otherwise.
    pub brought_back_by: Option<String>,
    /// For a key whose value came from another scratchpad (`adopt`, a tree-only `fork`):
    /// where, `"adopt v3 by root from /w/fork.db state.json@2"`; `writer` and `step` are
    /// then those of the version that set the value there, when that database could be
    /// followed ([`crate::report::follow_ground_origins`]), else the adopter's, and the
    /// text ends with why it was not followed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub adopted_from: Option<String>,
    /// The version it came from, to follow (not printed).
    #[serde(skip)]
    pub origin: Option<AdoptedFrom>,
}

/// Where an adopted key's value came from: the `origins` row and the digest the version
/// there must have.
#[derive(Debug, Clone, PartialEq)]
pub struct AdoptedFrom {
    /// The `origins` row of the adopting version.
    pub origin: crate::store::Origin,
    /// The adopting version's blake3 (the version there holds the same bytes).
    pub blake3: String,
    /// The top-level key.
    pub key: String,
}

/// How one token of the reply is grounded.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finding {
    /// The token of the reply.
    pub token: Token,
    /// Whether it has a source.
    pub status: Status,
    /// The sources holding it, best first (non-model first; key sources before line
    /// sources; then by path, key, line; a direct match before a cents match); at most 3,
    /// no two with the same (path, key, line).
    pub sources: Vec<Match>,
}

/// Whether a token of the reply has a source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Held by at least one source not written by a model.
    Sourced,
    /// Held only by sources written by a model (asserted, not sourced).
    AssertedByModel,
    /// Held by no source.
    Unsourced,
}

/// A source holding a token.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Match {
    /// The source.
    pub source: Source,
    /// "cents": matched the key's value divided by 100 (a `*_cents` key).
    pub via_cents: bool,
}

/// How a token is looked up: numbers by value, dates and identifiers by exact text.
fn is_numeric(kind: TokenKind) -> bool {
    matches!(kind, TokenKind::Number | TokenKind::Amount)
}

/// The reply's values, each with the sources holding it: `(source index, via_cents)`.
struct Wanted {
    numbers: HashMap<Decimal, Vec<(usize, bool)>>,
    texts: HashMap<String, Vec<(usize, bool)>>,
}

impl Wanted {
    fn number(&mut self, value: &Decimal, source: usize, via_cents: bool) {
        if let Some(list) = self.numbers.get_mut(value) {
            // Entries of one source are pushed together: checking the last few is enough.
            if !list
                .iter()
                .rev()
                .take_while(|e| e.0 == source)
                .any(|e| e.1 == via_cents)
            {
                list.push((source, via_cents));
            }
        }
    }

    fn text(&mut self, text: &str, source: usize) {
        if let Some(list) = self.texts.get_mut(text)
            && list.last().is_none_or(|e| e.0 != source)
        {
            list.push((source, false));
        }
    }

    /// The candidates of a text (a line, or a string value): its tokens, and for a
    /// datetime also its date.
    fn text_tokens(&mut self, text: &str, source: usize) {
        for token in tokens(text) {
            match (&token.value, token.kind) {
                (Some(value), _) => self.number(value, source, false),
                (None, TokenKind::Date) => {
                    self.text(&token.text, source);
                    if token.text.len() > 10 && token.text.as_bytes()[10] == b'T' {
                        self.text(&token.text[..10], source);
                    }
                }
                (None, _) => self.text(&token.text, source),
            }
        }
    }

    /// The candidates of a string value: the whole string, its tokens, and, under a cents
    /// key, the string read as a plain number divided by 100.
    fn string(&mut self, s: &str, cents: bool, source: usize) {
        self.text(s, source);
        self.text_tokens(s, source);
        if cents && let Some(value) = Decimal::parse(s.trim()) {
            self.number(&value.div_100(), source, true);
        }
    }

    /// The candidates of a JSON value (inside a key's value; nested numbers are read
    /// through `f64`, the top-level one exactly from its text).
    fn json(&mut self, value: &serde_json::Value, cents: bool, source: usize) {
        use serde_json::Value;
        match value {
            Value::Number(n) => {
                let text = if let Some(i) = n.as_i64() {
                    i.to_string()
                } else if let Some(u) = n.as_u64() {
                    u.to_string()
                } else {
                    // Rust prints an f64 in plain notation, shortest round-trip digits.
                    n.as_f64().map(|f| f.to_string()).unwrap_or_default()
                };
                if let Some(d) = parse_decimal(&text, true) {
                    self.number(&d, source, false);
                    if cents {
                        self.number(&d.div_100(), source, true);
                    }
                }
            }
            Value::String(s) => self.string(s, cents, source),
            Value::Array(items) => {
                for item in items {
                    self.json(item, cents, source);
                }
            }
            Value::Object(members) => {
                for (name, item) in members {
                    self.json(item, is_cents_name(name), source);
                }
            }
            Value::Bool(_) | Value::Null => {}
        }
    }

    /// Records every candidate of `source` (index `at`) that the reply holds.
    fn source(&mut self, source: &Source, at: usize) {
        let Some(key) = &source.key else {
            self.text_tokens(&source.text, at);
            return;
        };
        let cents = is_cents_key(key);
        match serde_json::from_str::<serde_json::Value>(&source.text) {
            Ok(serde_json::Value::Number(_)) => {
                if let Some(value) = parse_decimal(source.text.trim(), true) {
                    self.number(&value, at, false);
                    if cents {
                        self.number(&value.div_100(), at, true);
                    }
                }
            }
            Ok(value) => self.json(&value, cents, at),
            // Not JSON after all: read it as text.
            Err(_) => self.text_tokens(&source.text, at),
        }
    }
}

/// Whether a JSON member name holds cents: it ends with `_cents` (or is `cents`).
fn is_cents_name(name: &str) -> bool {
    name == "cents" || name.ends_with("_cents")
}

/// Whether a dotted key holds cents: its last segment that is not an array index is a
/// cents name (`credit_cents`, `order.total_cents`, `refunds_cents.0`).
fn is_cents_key(key: &str) -> bool {
    key.rsplit('.')
        .find(|seg| seg.is_empty() || !seg.bytes().all(|b| b.is_ascii_digit()))
        .is_some_and(is_cents_name)
}

/// Orders candidate matches best first: non-model, key before line, then path, key, line,
/// direct before cents, then the caller's order.
fn match_order(sources: &[Source], a: &(usize, bool), b: &(usize, bool)) -> std::cmp::Ordering {
    let (x, y) = (&sources[a.0], &sources[b.0]);
    x.model
        .cmp(&y.model)
        .then(x.key.is_none().cmp(&y.key.is_none()))
        .then_with(|| x.path.cmp(&y.path))
        .then_with(|| x.key.cmp(&y.key))
        .then(x.line.cmp(&y.line))
        .then(a.1.cmp(&b.1))
        .then(a.0.cmp(&b.0))
}

/// Sources listed per finding.
const MAX_SOURCES: usize = 3;

/// The status and best (at most 3, distinct) sources from a token's candidate matches.
fn best(sources: &[Source], mut candidates: Vec<(usize, bool)>) -> (Status, Vec<Match>) {
    candidates.sort_by(|a, b| match_order(sources, a, b));
    let mut chosen: Vec<Match> = Vec::new();
    for (at, via_cents) in candidates {
        let s = &sources[at];
        let same =
            |m: &Match| m.source.path == s.path && m.source.key == s.key && m.source.line == s.line;
        if !chosen.iter().any(same) {
            chosen.push(Match {
                source: s.clone(),
                via_cents,
            });
            if chosen.len() == MAX_SOURCES {
                break;
            }
        }
    }
    let status = match chosen.first() {
        None => Status::Unsourced,
        Some(m) if m.source.model => Status::AssertedByModel,
        Some(_) => Status::Sourced,
    };
    (status, chosen)
}

/// Grounds every token of `reply` against `sources`: one [`Finding`] per token of
/// [`tokens`]`(reply)`, in reply order.
///
/// A source's candidates: for a key source, its JSON value: a number exactly (exponent
/// allowed), plus that number divided by 100 when the key's last non-index segment ends
/// with `_cents` (`via_cents`); a string as its whole exact text and the tokens inside
/// it (and, under a cents key, the string read as a plain number / 100); arrays and objects
/// by their leaves (a member named `*_cents` is cents). A key whose text is not JSON, and a
/// line source, give the tokens of the text. A datetime token of a source also offers its
/// date (`2026-11-30T08:20:31Z` grounds `2026-11-30`).
///
/// Number and Amount tokens match by value (`180 == 180.00`, `$180` == `180`); Date and
/// Identifier tokens by exact, case-sensitive text. Runs in time linear in the total size
/// of the reply and the sources (only the reply's values are indexed), plus sorting each
/// distinct reply value's matches.
pub fn ground(reply: &str, sources: &[Source]) -> Vec<Finding> {
    let reply_tokens = tokens(reply);
    let mut wanted = Wanted {
        numbers: HashMap::new(),
        texts: HashMap::new(),
    };
    for token in &reply_tokens {
        match &token.value {
            Some(value) if is_numeric(token.kind) => {
                wanted.numbers.entry(value.clone()).or_default();
            }
            _ => {
                wanted.texts.entry(token.text.clone()).or_default();
            }
        }
    }
    if !reply_tokens.is_empty() {
        for (at, source) in sources.iter().enumerate() {
            wanted.source(source, at);
        }
    }
    let mut number_results: HashMap<Decimal, (Status, Vec<Match>)> = HashMap::new();
    let mut text_results: HashMap<String, (Status, Vec<Match>)> = HashMap::new();
    reply_tokens
        .into_iter()
        .map(|token| {
            let (status, matches) = match &token.value {
                Some(value) if is_numeric(token.kind) => number_results
                    .entry(value.clone())
                    .or_insert_with(|| {
                        best(sources, wanted.numbers.remove(value).unwrap_or_default())
                    })
                    .clone(),
                _ => text_results
                    .entry(token.text.clone())
                    .or_insert_with(|| {
                        best(
                            sources,
                            wanted.texts.remove(&token.text).unwrap_or_default(),
                        )
                    })
                    .clone(),
            };
            Finding {
                token,
                status,
                sources: matches,
            }
        })
        .collect()
}

/// Exit status of `scratchfs ground`: 1 when any Number or Amount token is
/// [`Status::Unsourced`] or only [`Status::AssertedByModel`], else 0. Identifiers and
/// dates are reported but do not decide it.
pub fn exit_status(findings: &[Finding]) -> i32 {
    let doubtful = findings
        .iter()
        .any(|f| is_numeric(f.token.kind) && f.status != Status::Sourced);
    i32::from(doubtful)
}

/// Widest token column in [`render`] (in chars); longer token texts are followed by two
/// spaces.
const TOKEN_COLUMN: usize = 24;

/// Longest source value shown by [`render`] (in chars); a longer one ends with `...`.
const VALUE_SHOWN: usize = 60;

/// A text for one line of the report: control characters (C0, DEL, C1) and the Unicode
/// line and paragraph separators become `?`.
fn one_line(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_control() || c == '\u{2028}' || c == '\u{2029}' {
                '?'
            } else {
                c
            }
        })
        .collect()
}

/// A source value for the report: on one line, at most [`VALUE_SHOWN`] chars.
fn shown_value(text: &str) -> String {
    let text = one_line(text.trim());
    if text.chars().count() <= VALUE_SHOWN {
        return text;
    }
    let mut cut: String = text.chars().take(VALUE_SHOWN - 3).collect();
    cut.push_str("...");
    cut
}

/// A source as the report shows it: `path:LINE vN by WRITER [step S]` for a line,
/// `path KEY = VALUE [(/100)] vN by WRITER [step S]` for a key.
fn describe(m: &Match) -> String {
    let s = &m.source;
    let mut out = one_line(&s.path);
    match (&s.key, s.line) {
        (Some(key), _) => {
            let _ = write!(out, " {} = {}", one_line(key), shown_value(&s.text));
            if m.via_cents {
                out.push_str(" (/100)");
            }
        }
        (None, Some(line)) => {
            let _ = write!(out, ":{line}");
        }
        (None, None) => {}
    }
    let _ = write!(out, " v{} by {}", s.version, one_line(&s.writer));
    if let Some(step) = s.step {
        let _ = write!(out, " step {step}");
    }
    if let Some(b) = &s.brought_back_by {
        let _ = write!(out, ", brought back by {}", one_line(b));
    }
    if let Some(a) = &s.adopted_from {
        let _ = write!(out, ", {}", one_line(a));
    }
    out
}

/// The text report: one line per token in reply order (token text padded to a column as
/// wide as the longest token text, at most 24 chars; then its status and best source, with
/// ` (+N more)` when more sources are listed in the finding), then a summary line:
/// `N tokens: A sourced, B asserted by model, C unsourced; numbers unsourced or only
/// asserted: D`, or `no numbers or identifiers in the reply` when there is no token.
/// Every line ends with `\n`; control characters in token texts and sources print as `?`.
/// Source values longer than 60 chars are cut (ending with `...`).
///
/// ```text
/// $180        sourced: state.json credit_cents = 18000 (/100) v6 by compute_credit step 6
/// O-9         sourced: state.json order_id = "O-9" v2 by get_order step 2
/// $540        UNSOURCED
/// 12          asserted by model: plan.md:3 v2 by agent
/// ```
pub fn render(findings: &[Finding]) -> String {
    if findings.is_empty() {
        return "no numbers or identifiers in the reply\n".to_string();
    }
    let texts: Vec<String> = findings.iter().map(|f| one_line(&f.token.text)).collect();
    let width = texts
        .iter()
        .map(|t| t.chars().count())
        .max()
        .unwrap_or(0)
        .min(TOKEN_COLUMN);
    let mut out = String::new();
    let (mut sourced, mut asserted, mut unsourced, mut doubtful_numbers) = (0, 0, 0, 0);
    for (finding, text) in findings.iter().zip(&texts) {
        let _ = write!(out, "{text:<width$}  ");
        match finding.status {
            Status::Sourced => {
                sourced += 1;
                out.push_str("sourced: ");
            }
            Status::AssertedByModel => {
                asserted += 1;
                out.push_str("asserted by model: ");
            }
            Status::Unsourced => {
                unsourced += 1;
                out.push_str("UNSOURCED");
            }
        }
        if is_numeric(finding.token.kind) && finding.status != Status::Sourced {
            doubtful_numbers += 1;
        }
        if let Some(first) = finding.sources.first() {
            out.push_str(&describe(first));
            let more = finding.sources.len() - 1;
            if more > 0 {
                let _ = write!(out, " (+{more} more)");
            }
        }
        out.push('\n');
    }
    let _ = writeln!(
        out,
        "{} tokens: {sourced} sourced, {asserted} asserted by model, {unsourced} unsourced; \
         numbers unsourced or only asserted: {doubtful_numbers}",
        findings.len()
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dec(s: &str) -> Decimal {
        Decimal::parse(s).unwrap_or_else(|| panic!("bad decimal {s}"))
    }

    /// (text, kind, value) of every token.
    fn toks(text: &str) -> Vec<(String, TokenKind, Option<String>)> {
        tokens(text)
            .into_iter()
            .map(|t| (t.text, t.kind, t.value.map(|v| v.to_string())))
            .collect()
    }

    fn num(text: &str, value: &str) -> (String, TokenKind, Option<String>) {
        (text.to_string(), TokenKind::Number, Some(value.to_string()))
    }

    fn amt(text: &str, value: &str) -> (String, TokenKind, Option<String>) {
        (text.to_string(), TokenKind::Amount, Some(value.to_string()))
    }

    fn ident(text: &str) -> (String, TokenKind, Option<String>) {
        (text.to_string(), TokenKind::Identifier, None)
    }

    fn date(text: &str) -> (String, TokenKind, Option<String>) {
        (text.to_string(), TokenKind::Date, None)
    }

    /// The value of the only token of `text`.
    fn only_value(text: &str) -> String {
        let t = tokens(text);
        assert_eq!(t.len(), 1, "{text:?} gave {t:?}");
        t[0].value
            .as_ref()
            .map(|v| v.to_string())
            .unwrap_or_default()
    }

    fn key_source(key: &str, text: &str, version: i64, writer: &str, step: Option<i64>) -> Source {
        Source {
            path: "state.json".into(),
            key: Some(key.into()),
            line: None,
            text: text.into(),
            version,
            writer: writer.into(),
            step,
            model: false,
            brought_back_by: None,
            adopted_from: None,
            origin: None,
        }
    }

    fn line_source(path: &str, line: u64, text: &str, writer: &str, model: bool) -> Source {
        Source {
            path: path.into(),
            key: None,
            line: Some(line),
            text: text.into(),
            version: 2,
            writer: writer.into(),
            step: None,
            model,
            brought_back_by: None,
            adopted_from: None,
            origin: None,
        }
    }

    fn credit_sources() -> Vec<Source> {
        vec![
            key_source("order_total_cents", "36000", 2, "get_order", Some(2)),
            key_source("credit_cents", "18000", 6, "compute_credit", Some(6)),
            key_source("order_id", "\"O-9\"", 2, "get_order", Some(2)),
        ]
    }

    #[test]
    fn decimal_parse_normalizes() {
        assert_eq!(dec("180.00"), dec("180"));
        assert_eq!(dec("180.0"), dec("180"));
        assert_eq!(
            dec("180"),
            Decimal {
                negative: false,
                digits: "180".into(),
                scale: 0
            }
        );
        assert_eq!(
            dec("1234.50"),
            Decimal {
                negative: false,
                digits: "12345".into(),
                scale: 1
            }
        );
        assert_eq!(
            dec("0.05"),
            Decimal {
                negative: false,
                digits: "5".into(),
                scale: 2
            }
        );
        assert_eq!(dec("007"), dec("7"));
        assert_eq!(dec("-0.0"), dec("0"));
        assert!(!dec("-0").negative);
        assert_eq!(dec("-12.50").to_string(), "-12.5");
        assert_eq!(dec("-0.25").to_string(), "-0.25");
        assert_eq!(dec("0.5").to_string(), "0.5");
        assert_eq!(dec("0.050").to_string(), "0.05");
        assert_eq!(dec("1000").to_string(), "1000");
        for bad in [
            "", "-", "1e3", "1.", ".5", "1.2.3", "+1", " 1", "1,5", "abc", "1-", "--1", "١",
        ] {
            assert_eq!(Decimal::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn decimal_div_100() {
        assert_eq!(dec("18000").div_100(), dec("180"));
        assert_eq!(dec("36000").div_100().to_string(), "360");
        assert_eq!(dec("5").div_100().to_string(), "0.05");
        assert_eq!(dec("12345").div_100().to_string(), "123.45");
        assert_eq!(dec("-250").div_100().to_string(), "-2.5");
        assert_eq!(dec("0").div_100(), dec("0"));
        assert_eq!(dec("1.5").div_100().to_string(), "0.015");
    }

    #[test]
    fn json_numbers_with_exponent() {
        let p = |s: &str| parse_decimal(s, true).map(|d| d.to_string());
        assert_eq!(p("1.8e4").as_deref(), Some("18000"));
        assert_eq!(p("18E+3").as_deref(), Some("18000"));
        assert_eq!(p("1.5e-2").as_deref(), Some("0.015"));
        assert_eq!(p("-2e0").as_deref(), Some("-2"));
        assert_eq!(p("0e999999").as_deref(), Some("0"));
        assert_eq!(p("1e999999"), None);
        assert_eq!(p("1e"), None);
        assert_eq!(p("1e+"), None);
    }

    #[test]
    fn refund_sentence() {
        assert_eq!(
            toks("We will refund $180 on order O-9"),
            vec![amt("$180", "180"), ident("O-9")]
        );
        let t = tokens("We will refund $180 on order O-9");
        assert_eq!(t[0].start, 15);
        assert_eq!(t[1].start, 29);
    }

    #[test]
    fn plain_numbers() {
        assert_eq!(
            toks("42 -7 3.5 0.25"),
            vec![
                num("42", "42"),
                num("-7", "-7"),
                num("3.5", "3.5"),
                num("0.25", "0.25")
            ]
        );
        assert_eq!(toks("−3"), vec![num("−3", "-3")]);
        assert_eq!(toks("a .5 b"), vec![num(".5", "0.5")]);
        assert_eq!(toks("-0"), vec![num("-0", "0")]);
    }

    #[test]
    fn thousands_and_decimal_separators() {
        assert_eq!(only_value("1,234"), "1234");
        assert_eq!(only_value("1,234,567.89"), "1234567.89");
        assert_eq!(only_value("1.234,50"), "1234.5");
        assert_eq!(only_value("1.234.567"), "1234567");
        assert_eq!(only_value("1.234.567,5"), "1234567.5");
        assert_eq!(only_value("1.234"), "1.234");
        assert_eq!(only_value("1,5"), "1.5");
        assert_eq!(only_value("12,50"), "12.5");
        assert_eq!(only_value("0,500"), "0.5");
        assert_eq!(only_value("1234,567"), "1234.567");
        assert_eq!(only_value("1,00,000"), "100000");
        assert_eq!(only_value("1 234"), "1234");
        assert_eq!(only_value("1 234,50"), "1234.5");
        assert_eq!(only_value("1 234.50"), "1234.5");
        assert_eq!(only_value("1\u{a0}234\u{a0}567"), "1234567");
        assert_eq!(only_value("12\u{202f}345,6"), "12345.6");
        // A space joins only 3-digit groups after a short first group.
        assert_eq!(
            toks("in 2024 100 orders"),
            vec![num("2024", "2024"), num("100", "100")]
        );
        assert_eq!(toks("5 1,234"), vec![num("5", "5"), num("1,234", "1234")]);
        assert_eq!(
            toks("1 2 3"),
            vec![num("1", "1"), num("2", "2"), num("3", "3")]
        );
        assert_eq!(toks("1 2345"), vec![num("1", "1"), num("2345", "2345")]);
        assert_eq!(toks("0 123"), vec![num("0", "0"), num("123", "123")]);
        assert_eq!(
            toks("1.234 567"),
            vec![num("1.234", "1.234"), num("567", "567")]
        );
        // Lists: each group is its own number.
        assert_eq!(
            toks("1,2,3"),
            vec![num("1", "1"), num("2", "2"), num("3", "3")]
        );
        assert_eq!(
            toks("12,34,56"),
            vec![num("12", "12"), num("34", "34"), num("56", "56")]
        );
        assert_eq!(
            toks("1,234.5.6"),
            vec![
                num("1", "1"),
                num("234", "234"),
                num("5", "5"),
                num("6", "6")
            ]
        );
        // Spaces then a malformed tail: the space-grouped part is a number.
        assert_eq!(
            toks("1 234,5,6"),
            vec![num("1 234", "1234"), num("5,6", "5.6")]
        );
    }

    #[test]
    fn sentence_punctuation_is_not_part_of_numbers() {
        assert_eq!(toks("costs 180."), vec![num("180", "180")]);
        assert_eq!(toks("180, then 7"), vec![num("180", "180"), num("7", "7")]);
        assert_eq!(toks("($180)"), vec![amt("$180", "180")]);
        assert_eq!(toks("total: 1,234.50."), vec![num("1,234.50", "1234.5")]);
        assert_eq!(
            toks("is 3.5, or 4;"),
            vec![num("3.5", "3.5"), num("4", "4")]
        );
        assert_eq!(toks("pages 10-20"), vec![num("10", "10"), num("20", "20")]);
        assert_eq!(toks("#42!"), vec![num("42", "42")]);
    }

    #[test]
    fn amounts() {
        assert_eq!(toks("$1,234.50"), vec![amt("$1,234.50", "1234.5")]);
        assert_eq!(toks("€ 12,50"), vec![amt("€ 12,50", "12.5")]);
        assert_eq!(toks("12.50 EUR"), vec![amt("12.50 EUR", "12.5")]);
        assert_eq!(toks("12,50 €"), vec![amt("12,50 €", "12.5")]);
        assert_eq!(toks("12,50€."), vec![amt("12,50€", "12.5")]);
        assert_eq!(toks("-$5"), vec![amt("-$5", "-5")]);
        assert_eq!(toks("$-5"), vec![amt("$-5", "-5")]);
        assert_eq!(toks("-5 USD"), vec![amt("-5 USD", "-5")]);
        assert_eq!(toks("USD 180"), vec![amt("USD 180", "180")]);
        assert_eq!(toks("GBP180."), vec![amt("GBP180", "180")]);
        assert_eq!(
            toks("£5 and ¥1,000"),
            vec![amt("£5", "5"), amt("¥1,000", "1000")]
        );
        assert_eq!(toks("5EURO"), vec![num("5", "5")]);
        assert_eq!(toks("5 EURO"), vec![num("5", "5")]);
        // A currency before the next number is that number's prefix.
        assert_eq!(toks("3 $20 each"), vec![num("3", "3"), amt("$20", "20")]);
        assert_eq!(toks("$5bn"), vec![amt("$5", "5")]);
        assert_eq!(toks("a $ sign, $ 7"), vec![amt("$ 7", "7")]);
    }

    #[test]
    fn percentages() {
        assert_eq!(toks("50%"), vec![num("50%", "50")]);
        assert_eq!(toks("up 12.5 % today"), vec![num("12.5 %", "12.5")]);
        assert_eq!(toks("(-3%)"), vec![num("-3%", "-3")]);
    }

    #[test]
    fn minus_only_at_a_word_start() {
        assert_eq!(toks("T-1042"), vec![ident("T-1042")]);
        assert_eq!(toks("5-3"), vec![num("5", "5"), num("3", "3")]);
        assert_eq!(toks("é-3"), vec![num("3", "3")]);
        assert_eq!(toks("x -3"), vec![num("-3", "-3")]);
    }

    #[test]
    fn dates_and_times() {
        assert_eq!(toks("due 2026-11-30."), vec![date("2026-11-30")]);
        assert_eq!(toks("at 08:20:31, ok"), vec![date("08:20:31")]);
        assert_eq!(toks("at 9:30"), vec![date("9:30")]);
        assert_eq!(
            toks("2026-11-30T08:20:31Z"),
            vec![date("2026-11-30T08:20:31Z")]
        );
        assert_eq!(
            toks("2026-11-30T08:20:31.250+02:00"),
            vec![date("2026-11-30T08:20:31.250+02:00")]
        );
        assert_eq!(
            toks("2026-11-30T08:20-0500"),
            vec![date("2026-11-30T08:20-0500")]
        );
        assert_eq!(
            toks("2026-11-30T08:20+05."),
            vec![date("2026-11-30T08:20+05")]
        );
        assert_eq!(
            toks("2026-11-30T08:20:31-05:00"),
            vec![date("2026-11-30T08:20:31-05:00")]
        );
        assert_eq!(
            toks("2026-11-30T08:20+123"),
            vec![date("2026-11-30T08:20"), num("123", "123")]
        );
        assert_eq!(toks("2026-11-30Tx"), vec![date("2026-11-30")]);
        assert_eq!(
            toks("2026-11-30 08:20"),
            vec![date("2026-11-30"), date("08:20")]
        );
        assert_eq!(toks("-2026-11-30"), vec![date("2026-11-30")]);
        // Not dates.
        assert_eq!(
            toks("2026-13-30"),
            vec![num("2026", "2026"), num("13", "13"), num("30", "30")]
        );
        assert_eq!(
            toks("2026-11-300"),
            vec![num("2026", "2026"), num("11", "11"), num("300", "300")]
        );
        assert_eq!(toks("3:1"), vec![num("3", "3"), num("1", "1")]);
        assert_eq!(toks("25:00"), vec![num("25", "25"), num("00", "0")]);
        assert_eq!(
            toks("12:34:5"),
            vec![num("12", "12"), num("34", "34"), num("5", "5")]
        );
    }

    #[test]
    fn ordinals_and_units() {
        assert_eq!(
            toks("1st 2nd 3rd 4th 21st"),
            vec![
                num("1", "1"),
                num("2", "2"),
                num("3", "3"),
                num("4", "4"),
                num("21", "21")
            ]
        );
        assert_eq!(toks("10kg of 2x"), vec![num("10", "10"), num("2", "2")]);
        assert_eq!(toks("1.5kg"), vec![num("1.5", "1.5")]);
        // A digit after a letter: one identifier (hashes, ids).
        assert_eq!(toks("commit 9f86d08."), vec![ident("9f86d08")]);
        assert_eq!(
            toks("550e8400-e29b-41d4"),
            vec![ident("550e8400-e29b-41d4")]
        );
        assert_eq!(toks("1e3"), vec![ident("1e3")]);
        assert_eq!(toks("-1e3"), vec![num("-1", "-1")]);
    }

    #[test]
    fn identifiers() {
        assert_eq!(
            toks("O-9, T-1042; ORD_55 A1B2 v2"),
            vec![
                ident("O-9"),
                ident("T-1042"),
                ident("ORD_55"),
                ident("A1B2"),
                ident("v2")
            ]
        );
        assert_eq!(
            toks("v1.2.3 and 1.2.3 and 10.0.0.1."),
            vec![ident("v1.2.3"), ident("1.2.3"), ident("10.0.0.1")]
        );
        assert_eq!(toks("see v2."), vec![ident("v2")]);
        assert_eq!(toks("O-9- and T-1_"), vec![ident("O-9"), ident("T-1")]);
        assert_eq!(toks("words only, e.g. well-known ABC"), vec![]);
        assert_eq!(toks("x"), vec![]);
        // `_` before a word is punctuation (markdown emphasis).
        assert_eq!(toks("_x1_ __init2__"), vec![ident("x1"), ident("init2")]);
        assert_eq!(toks("a_1"), vec![ident("a_1")]);
    }

    #[test]
    fn punctuation_and_markdown_around_tokens() {
        assert_eq!(toks("**$180**"), vec![amt("$180", "180")]);
        assert_eq!(toks("(O-9)"), vec![ident("O-9")]);
        assert_eq!(toks("\"T-1042\","), vec![ident("T-1042")]);
        assert_eq!(
            toks("`ORD_55`: _12_"),
            vec![ident("ORD_55"), num("12", "12")]
        );
        assert_eq!(toks("[7](x) {8}"), vec![num("7", "7"), num("8", "8")]);
    }

    #[test]
    fn non_ascii_and_empty_text() {
        assert_eq!(toks(""), vec![]);
        assert_eq!(toks("   \n\t"), vec![]);
        assert_eq!(toks("🎉180🎉"), vec![num("180", "180")]);
        assert_eq!(toks("Größe5"), vec![num("5", "5")]);
        assert_eq!(toks("été 12,5 €"), vec![amt("12,5 €", "12.5")]);
        assert_eq!(toks("価格は¥1,000です"), vec![amt("¥1,000", "1000")]);
        assert_eq!(toks("٣ ² ½"), vec![]);
        let text = "é€5🎉O-9";
        for t in tokens(text) {
            assert!(text.is_char_boundary(t.start));
            assert_eq!(&text[t.start..t.start + t.text.len()], t.text);
        }
        assert_eq!(toks(text), vec![amt("€5", "5"), ident("O-9")]);
    }

    #[test]
    fn no_panic_on_odd_text() {
        let samples = [
            "-",
            "$",
            "$-",
            "-$",
            "€ ",
            ".",
            "..5",
            "1.",
            "1,",
            "1 ",
            "1 2",
            "USD",
            "USD ",
            "USD-",
            "2026-",
            "2026-11-",
            "2026-11-30T",
            "2026-11-30T08:",
            "08:",
            "1:2:3",
            "%",
            "5 %",
            "\u{a0}1\u{a0}",
            "1\u{0}2",
            "\u{feff}7",
            "9999999999999999999999999999999.99999999",
            "-.5",
            "a.5",
            ",5",
        ];
        for s in samples {
            for t in tokens(s) {
                assert!(s.is_char_boundary(t.start), "{s:?}");
                assert_eq!(&s[t.start..t.start + t.text.len()], t.text, "{s:?}");
            }
        }
        // Every prefix of a mixed text, cut at each char boundary.
        let text = "Refund €1.234,50 (O-9) on 2026-11-30T08:20Z — 50% of $2,469 ✓ v1.2.3 21st";
        for (at, _) in text.char_indices() {
            let _ = tokens(&text[..at]);
            let _ = tokens(&text[at..]);
        }
    }

    #[test]
    fn tokens_cover_their_text() {
        let text = "Refund €1.234,50 (O-9) on 2026-11-30T08:20Z — 50% of $2,469 ✓ v1.2.3 21st";
        let t = tokens(text);
        let mut last = 0;
        for token in &t {
            assert!(token.start >= last, "in order, not overlapping");
            assert_eq!(
                &text[token.start..token.start + token.text.len()],
                token.text
            );
            last = token.start + token.text.len();
        }
        assert_eq!(
            toks(text),
            vec![
                amt("€1.234,50", "1234.5"),
                ident("O-9"),
                date("2026-11-30T08:20Z"),
                num("50%", "50"),
                amt("$2,469", "2469"),
                ident("v1.2.3"),
                num("21", "21"),
            ]
        );
    }

    /// A small deterministic generator (xorshift64*), so that the test needs no crate.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }
    }

    /// `n` with `sep` between groups of 3 digits.
    fn grouped(n: u64, sep: &str) -> String {
        let digits = n.to_string();
        let mut out = String::new();
        for (i, c) in digits.chars().enumerate() {
            if i > 0 && (digits.len() - i).is_multiple_of(3) {
                out.push_str(sep);
            }
            out.push(c);
        }
        out
    }

    #[test]
    fn property_grouped_numbers_read_back() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        for _ in 0..3000 {
            // Sizes from 1 to 15 digits.
            let n = rng.next() % 10u64.pow(1 + (rng.next() % 15) as u32);
            let cents = rng.next() % 100;
            let frac = format!("{cents:02}");
            let value = dec(&format!("{n}.{frac}"));
            let whole = dec(&n.to_string());
            for sep in [",", " ", "\u{a0}", "\u{202f}"] {
                let text = grouped(n, sep);
                assert_eq!(tokens(&text).len(), 1, "{text:?}");
                assert_eq!(tokens(&text)[0].value.as_ref(), Some(&whole), "{text:?}");
            }
            // Dot thousands: a single dot reads as a decimal point, so only from 2 dots on.
            if n >= 1_000_000 {
                assert_eq!(tokens(&grouped(n, "."))[0].value.as_ref(), Some(&whole));
            }
            let styles = [
                format!("{}.{frac}", grouped(n, ",")),
                format!("{},{frac}", grouped(n, ".")),
                format!("{},{frac}", grouped(n, " ")),
                format!("{}.{frac}", grouped(n, "\u{a0}")),
                format!("{n},{frac}"),
                format!("{n}.{frac}"),
            ];
            for text in styles {
                let t = tokens(&format!("total {text}."));
                assert_eq!(t.len(), 1, "{text:?}: {t:?}");
                assert_eq!(t[0].value.as_ref(), Some(&value), "{text:?}");
                assert_eq!(t[0].text, text);
            }
            let t = tokens(&format!("(-${}.{frac})", grouped(n, ",")));
            assert_eq!(t[0].kind, TokenKind::Amount);
            assert_eq!(t[0].value, Some(value.clone().with_sign(true)));
        }
    }

    #[test]
    fn credit_scenario() {
        let sources = credit_sources();
        let f = ground("We will refund $180 on order O-9", &sources);
        assert_eq!(f.len(), 2);
        assert_eq!(f[0].token.text, "$180");
        assert_eq!(f[0].status, Status::Sourced);
        assert_eq!(f[0].sources.len(), 1);
        assert_eq!(f[0].sources[0].source.key.as_deref(), Some("credit_cents"));
        assert!(f[0].sources[0].via_cents);
        assert_eq!(f[1].token.text, "O-9");
        assert_eq!(f[1].status, Status::Sourced);
        assert_eq!(f[1].sources[0].source.key.as_deref(), Some("order_id"));
        assert!(!f[1].sources[0].via_cents);
        assert_eq!(exit_status(&f), 0);

        let f = ground("We will refund $540 on order O-9", &sources);
        assert_eq!(f[0].status, Status::Unsourced);
        assert!(f[0].sources.is_empty());
        assert_eq!(f[1].status, Status::Sourced);
        assert_eq!(exit_status(&f), 1);

        let f = ground("The order was $360.", &sources);
        assert_eq!(f[0].status, Status::Sourced);
        assert_eq!(
            f[0].sources[0].source.key.as_deref(),
            Some("order_total_cents")
        );
        assert!(f[0].sources[0].via_cents);

        // The raw cents value is grounded too, directly.
        let f = ground("18000 cents", &sources);
        assert_eq!(f[0].status, Status::Sourced);
        assert!(!f[0].sources[0].via_cents);

        // An identifier not in the scratchpad is reported but does not decide the exit.
        let f = ground("$180 on order O-10", &sources);
        assert_eq!(f[1].status, Status::Unsourced);
        assert_eq!(exit_status(&f), 0);
    }

    #[test]
    fn credit_scenario_render() {
        let sources = credit_sources();
        let out = render(&ground(
            "We will refund $180 on order O-9, not $540.",
            &sources,
        ));
        let expected = "\
$180  sourced: state.json credit_cents = 18000 (/100) v6 by compute_credit step 6
O-9   sourced: state.json order_id = \"O-9\" v2 by get_order step 2
$540  UNSOURCED
3 tokens: 2 sourced, 0 asserted by model, 1 unsourced; numbers unsourced or only asserted: 1
";
        assert_eq!(out, expected);
    }

    #[test]
    fn model_sources_assert_but_do_not_source() {
        let model_only = vec![line_source(
            "plan.md",
            3,
            "- total is 12 items",
            "agent",
            true,
        )];
        let f = ground("There are 12 items", &model_only);
        assert_eq!(f[0].status, Status::AssertedByModel);
        assert_eq!(exit_status(&f), 1);
        assert_eq!(
            render(&f),
            "12  asserted by model: plan.md:3 v2 by agent\n\
             1 tokens: 0 sourced, 1 asserted by model, 0 unsourced; numbers unsourced or only asserted: 1\n"
        );

        let mut both = model_only.clone();
        both.push(line_source("log.txt", 9, "count=12", "counter", false));
        let f = ground("There are 12 items", &both);
        assert_eq!(f[0].status, Status::Sourced);
        assert_eq!(f[0].sources.len(), 2);
        assert!(!f[0].sources[0].source.model, "non-model first");
        assert!(f[0].sources[1].source.model);
        assert_eq!(exit_status(&f), 0);
        assert!(render(&f).starts_with("12  sourced: log.txt:9 v2 by counter (+1 more)\n"));

        // An identifier only asserted by the model does not decide the exit status.
        let ids = vec![line_source("plan.md", 1, "order O-9", "agent", true)];
        let f = ground("order O-9", &ids);
        assert_eq!(f[0].status, Status::AssertedByModel);
        assert_eq!(exit_status(&f), 0);
    }

    #[test]
    fn source_order_dedup_and_limit() {
        let mut sources = vec![
            line_source("b.md", 2, "42", "w", false),
            line_source("a.md", 7, "42 and 42.0", "w", false),
            line_source("a.md", 7, "42", "w", false), // same (path, key, line): one entry
            line_source("m.md", 1, "42", "agent", true),
            key_source("answer", "42", 1, "w", None),
            key_source("answer_cents", "4200", 1, "w", None),
        ];
        sources[4].path = "z.json".into();
        let f = ground("42", &sources);
        let listed: Vec<(String, Option<String>, Option<u64>)> = f[0]
            .sources
            .iter()
            .map(|m| (m.source.path.clone(), m.source.key.clone(), m.source.line))
            .collect();
        assert_eq!(
            listed,
            vec![
                (
                    "state.json".to_string(),
                    Some("answer_cents".to_string()),
                    None
                ),
                ("z.json".to_string(), Some("answer".to_string()), None),
                ("a.md".to_string(), None, Some(7)),
            ]
        );
        assert!(f[0].sources[0].via_cents);
        assert!(render(&f).contains("(+2 more)"));
    }

    #[test]
    fn key_values_of_every_shape() {
        let sources = vec![
            key_source("order.total_cents", "1.8e4", 3, "w", None),
            key_source(
                "note",
                "\"order O-7 shipped on 2026-11-30T08:20:31Z, 180.00 paid\"",
                3,
                "w",
                None,
            ),
            key_source(
                "items",
                r#"[{"sku": "SKU-1", "price_cents": 250}, {"sku": "SKU-2", "qty": 3}]"#,
                3,
                "w",
                None,
            ),
            key_source("refunds_cents.0", "999", 3, "w", None),
            key_source("flag", "true", 3, "w", None),
            key_source("amount_cents", "\"4500\"", 3, "w", None),
            key_source("raw", "not json 77", 3, "w", None),
            key_source(
                "precise",
                "0.1000000000000000055511151231257827",
                3,
                "w",
                None,
            ),
        ];
        let f = ground(
            "$180 O-7 2026-11-30 2026-11-30T08:20:31Z SKU-2 $2.50 qty 3, $9.99 $45 77 0.1000000000000000055511151231257827 true 250 4500",
            &sources,
        );
        let status: Vec<(&str, Status)> = f
            .iter()
            .map(|x| (x.token.text.as_str(), x.status))
            .collect();
        for (text, s) in &status {
            assert_eq!(*s, Status::Sourced, "{text}: {status:?}");
        }
        assert_eq!(status.len(), 13, "{status:?}");
        // 180 from both the cents number and the string's "180.00": the key source listed
        // first is by key name (`note` < `order.total_cents`).
        assert_eq!(f[0].sources.len(), 2);
        assert_eq!(f[0].sources[0].source.key.as_deref(), Some("note"));
        assert!(f[0].sources[1].via_cents);
        // `$2.50` is items.N.price_cents / 100.
        let price = f.iter().find(|x| x.token.text == "$2.50").unwrap();
        assert!(price.sources[0].via_cents);
        // A number that is nowhere.
        let f = ground("2.5 and 1.8", &sources);
        assert_eq!(f[0].status, Status::Sourced); // 250 cents
        assert_eq!(f[1].status, Status::Unsourced);
    }

    #[test]
    fn identifiers_and_dates_match_exact_text() {
        let sources = vec![
            line_source("log.md", 1, "ticket T-1042 opened 2026-11-30", "w", false),
            line_source("log.md", 2, "version 1.2.3", "w", false),
        ];
        let f = ground("t-1042 T-1042 2026-11-30 2026-12-01 1.2.3 1.2", &sources);
        let status: Vec<Status> = f.iter().map(|x| x.status).collect();
        assert_eq!(
            status,
            vec![
                Status::Unsourced,
                Status::Sourced,
                Status::Sourced,
                Status::Unsourced,
                Status::Sourced,
                Status::Unsourced
            ]
        );
        // Numbers match by value whatever their style; an amount matches a plain number.
        let sources = vec![line_source("calc.txt", 4, "total = 1234.50", "calc", false)];
        let f = ground("Total: €1.234,50, i.e. 1,234.5 or 1 234,50 USD", &sources);
        assert_eq!(f.len(), 3);
        assert!(f.iter().all(|x| x.status == Status::Sourced), "{f:?}");
        assert_eq!(exit_status(&f), 0);
    }

    #[test]
    fn repeated_tokens_share_their_result() {
        let sources = credit_sources();
        let f = ground("$180, 180 and 180.00; O-9 O-9", &sources);
        assert_eq!(f.len(), 5);
        assert!(f.iter().all(|x| x.status == Status::Sourced));
        assert_eq!(f[0].sources, f[2].sources);
    }

    #[test]
    fn render_format() {
        assert_eq!(render(&[]), "no numbers or identifiers in the reply\n");
        assert_eq!(
            render(&ground("no digits here", &credit_sources())),
            "no numbers or identifiers in the reply\n"
        );

        let mut sources = credit_sources();
        sources.push(line_source(
            "notes/a\nb.md",
            3,
            "see O-9",
            "agent\u{7f}x",
            true,
        ));
        sources[2].text = "\"O-9\"".into();
        let long = "X1234567890-abcdefghijklmnopqrstuvwxyz";
        let reply = format!("$180 {long} 12 O-9");
        let out = render(&ground(&reply, &sources));
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 5, "{out}");
        assert_eq!(
            lines[0],
            format!(
                "{:<24}  sourced: state.json credit_cents = 18000 (/100) v6 by compute_credit step 6",
                "$180"
            )
        );
        assert_eq!(lines[1], format!("{long}  UNSOURCED"));
        assert_eq!(lines[2], format!("{:<24}  UNSOURCED", "12"));
        assert_eq!(
            lines[3],
            format!(
                "{:<24}  sourced: state.json order_id = \"O-9\" v2 by get_order step 2 (+1 more)",
                "O-9"
            )
        );
        assert_eq!(
            lines[4],
            "4 tokens: 2 sourced, 0 asserted by model, 2 unsourced; numbers unsourced or only asserted: 1"
        );

        // Control characters never break a line.
        let model = vec![line_source(
            "notes/a\nb.md",
            3,
            "see O-9",
            "agent\u{7f}x\u{85}",
            true,
        )];
        let out = render(&ground("O-9", &model));
        assert_eq!(
            out,
            "O-9  asserted by model: notes/a?b.md:3 v2 by agent?x?\n\
             1 tokens: 0 sourced, 1 asserted by model, 0 unsourced; numbers unsourced or only asserted: 0\n"
        );
        let weird = vec![key_source("k\tey", "\"A1\\nB\"", 1, "w", Some(-1))];
        let out = render(&ground("A1", &weird));
        assert_eq!(
            out.lines().next(),
            Some("A1  sourced: state.json k?ey = \"A1\\nB\" v1 by w step -1")
        );
        let long_value = format!("\"A1 {}\"", "y".repeat(100));
        let out = render(&ground("A1", &[key_source("k", &long_value, 1, "w", None)]));
        let first = out.lines().next().unwrap();
        assert!(first.ends_with("... v1 by w"), "{first}");
        assert_eq!(
            first.len(),
            "A1  sourced: state.json k = ".len() + 60 + " v1 by w".len()
        );
    }

    #[test]
    fn findings_serialize() {
        let f = ground("$180 on 2026-11-30", &credit_sources());
        let json = serde_json::to_value(&f).unwrap();
        assert_eq!(json[0]["token"]["kind"], "amount");
        assert_eq!(json[0]["status"], "sourced");
        assert_eq!(json[0]["token"]["value"]["digits"], "180");
        assert_eq!(json[0]["sources"][0]["via_cents"], true);
        assert_eq!(json[1]["token"]["kind"], "date");
        assert_eq!(json[1]["status"], "unsourced");
        assert!(json[1]["token"]["value"].is_null());
    }

    #[test]
    fn many_sources_stay_fast() {
        // 50,000 line sources and a reply of 2,000 tokens: linear, well under a second
        // even unoptimized (a tokens × sources loop would take minutes).
        let sources: Vec<Source> = (0..50_000u64)
            .map(|i| {
                line_source(
                    "big.log",
                    i + 1,
                    &format!("row {i}: id R-{i} amount ${}.{:02}", i * 3, i % 100),
                    "w",
                    false,
                )
            })
            .collect();
        let reply: String = (0..1000u64)
            .map(|i| format!("R-{} ${}.{:02} ", i * 7, i * 21, (i * 7) % 100))
            .collect();
        let start = std::time::Instant::now();
        let f = ground(&reply, &sources);
        assert_eq!(f.len(), 2000);
        assert!(f.iter().all(|x| x.status == Status::Sourced));
        assert!(start.elapsed().as_secs() < 20, "{:?}", start.elapsed());
        let f = ground("R-50000 $1.01", &sources);
        assert_eq!(f[0].status, Status::Unsourced);
    }
}
