//! Times on the command line: parsing `--at` and `--before` arguments, and printing the
//! commit times of `log` and `history`. Parsing and arithmetic are [`jiff`]'s; this module
//! only decides which written forms are accepted (a closed list, so that a typo or an
//! ambiguous number is a usage error instead of a silently different instant).
//!
//! The accepted forms of TIME ([`FORMS`]):
//!
//! - RFC 3339 / ISO 8601 extended date and time with an offset: `YYYY-MM-DDTHH:MM[:SS[.F]]`
//!   followed by `Z` or `±HH:MM`, `T` or a space between date and time, `F` 1 to 9
//!   digits after `.` or `,` (`date -u +%Y-%m-%dT%H:%M:%S.%NZ`, `date --rfc-3339=ns`,
//!   `date -Ins`, `2026-12-01T10:00:00+02:00`);
//! - the same without an offset, read as UTC (the times `log` and `history` print, such as
//!   `2026-11-30 17:56:55Z`, are read back as they are printed, with or without the `Z`);
//! - a date `YYYY-MM-DD`: midnight UTC at its start;
//! - `@SECONDS[.F]`: seconds since the Unix epoch (as `date +@%s.%N` prints), optionally
//!   negative, `F` 1 to 9 digits.
//!
//! Every field is range-checked (month 1–12, the day within its month, hour 0–23, minute
//! and second 0–59; a leap second `:60` is read as `:59`, as jiff does), and the year is 4
//! digits. Anything else is refused with a [`BadTime`] that lists the accepted forms:
//! compact ISO 8601 (`20261201`, which older versions read as nanoseconds), week or
//! ordinal dates, a bare number, relative times (`yesterday`), leading or trailing blanks.

use std::sync::OnceLock;

use jiff::civil::{DateTime, Time};
use jiff::fmt::temporal::Pieces;
use jiff::tz::Offset;

/// The accepted forms, as usage errors and `--help` list them.
pub const FORMS: &str = "YYYY-MM-DD (midnight UTC), YYYY-MM-DDTHH:MM[:SS[.FRACTION]] \
    followed by Z or +HH:MM/-HH:MM (RFC 3339; T or a space; no offset: UTC), \
    or @SECONDS[.FRACTION] since the Unix epoch";

/// A TIME argument that is none of the accepted forms, or out of range: a usage error
/// (exit status 2). Displays as `REASON; TIME is one of: ...` ([`FORMS`]); clap's message
/// around it names the argument and its value (`invalid value '20261201' for '--at
/// <TIME>': not a time; TIME is one of: ...`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadTime {
    /// The argument as given.
    pub input: String,
    /// Why it was refused (jiff's reason for a field out of range).
    pub reason: String,
}

impl std::fmt::Display for BadTime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}; TIME is one of: {FORMS}", self.reason)
    }
}

impl std::error::Error for BadTime {}

/// The written shape of each accepted form; the values are then parsed by jiff.
fn grammar() -> &'static regex::Regex {
    static RE: OnceLock<regex::Regex> = OnceLock::new();
    RE.get_or_init(|| {
        regex::Regex::new(
            r"(?x)^(?:
                (?P<epoch>@-?[0-9]+(?:\.[0-9]{1,9})?)
              | (?P<date>[0-9]{4}-[0-9]{2}-[0-9]{2})
              | (?P<datetime>[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt\x20][0-9]{2}:[0-9]{2}
                    (?::[0-9]{2}(?:[.,][0-9]{1,9})?)?)
                (?P<offset>[Zz]|[+-][0-9]{2}:[0-9]{2})?
            )$",
        )
        .expect("the TIME grammar compiles")
    })
}

/// Parses a TIME argument (one of [`FORMS`], module docs) into nanoseconds since the Unix
/// epoch (an `i128`: years 0000 to 9999 all fit, beyond what `i64` nanoseconds hold).
///
/// Errors: [`BadTime`] for any other form, or a field out of range (`2026-13-01`,
/// `2026-02-30`, `24:00`, an offset past ±23:59, `@` with more seconds than an `i64`).
pub fn parse(s: &str) -> Result<i128, BadTime> {
    let bad = |reason: String| BadTime {
        input: s.to_string(),
        reason,
    };
    let caps = grammar()
        .captures(s)
        .ok_or_else(|| bad("not a time".into()))?;
    if let Some(epoch) = caps.name("epoch") {
        return epoch_nanos(&epoch.as_str()[1..]).ok_or_else(|| bad("out of range".into()));
    }
    // jiff parses each field and checks its range; the grammar has already excluded the
    // other forms its parser knows (compact, week dates, time zone annotations, ...).
    let pieces = Pieces::parse(s).map_err(|e| bad(e.to_string()))?;
    let civil = pieces
        .date()
        .to_datetime(pieces.time().unwrap_or(Time::midnight()));
    let offset = pieces.to_numeric_offset().unwrap_or(Offset::UTC);
    // RFC 3339's time-numoffset: hours 00-23, minutes 00-59.
    if offset.seconds().abs() >= 24 * 3600 {
        return Err(bad("an offset's hours must be 00 to 23 (RFC 3339)".into()));
    }
    // Civil arithmetic, not jiff's `Timestamp` (whose range stops a day short of
    // 9999-12-31, a natural "the end of time" argument).
    let since_epoch = civil.duration_since(DateTime::constant(1970, 1, 1, 0, 0, 0, 0));
    Ok(since_epoch.as_nanos() - i128::from(offset.seconds()) * NANOS)
}

/// Nanoseconds in a second.
const NANOS: i128 = 1_000_000_000;

/// `[-]SECONDS[.F]` (the part after `@`, in the grammar's shape) in nanoseconds; `None`
/// when SECONDS exceeds an `i64`.
fn epoch_nanos(s: &str) -> Option<i128> {
    let (negative, digits) = match s.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, s),
    };
    let (whole, fraction) = digits.split_once('.').unwrap_or((digits, ""));
    let secs = i128::from(whole.parse::<i64>().ok()?);
    // `.5` is 500_000_000 ns: the digits padded to 9.
    let nanos: i128 = format!("{fraction:0<9}").parse().ok()?;
    let total = secs * NANOS + nanos;
    Some(if negative { -total } else { total })
}

/// Parses a TIME argument into nanoseconds since the Unix epoch, the unit of the
/// database's `time_ns` columns (docs/schema.md). An instant outside what 64 bits of
/// nanoseconds hold (before 1677-09-21 00:12:43Z or after 2262-04-11 23:47:16Z) is
/// clamped to the nearest end: it is still before, or after, every commit. Errors as
/// [`parse`]; this is the `value_parser` of `export --at` and `gc --before`, so a refusal
/// is clap's usage error (exit status 2).
pub fn parse_ns(s: &str) -> Result<i64, BadTime> {
    parse(s).map(|ns| ns.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64)
}

pub use crate::views::{utc, utc_exact};

/// The commit time of the database's first version (ns), `None` if it has none: what a
/// TIME before it selects is nothing, which the commands say in a note.
pub fn first_version_ns(store: &dyn crate::store::History) -> Result<Option<i64>, super::Failure> {
    store.first_version_ns().map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i64 = 1_000_000_000;
    /// 2026-12-01T00:00:00Z, in seconds.
    const DEC1: i64 = 1_796_083_200;

    fn ns(s: &str) -> i64 {
        parse_ns(s).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn rfc3339_with_fractions_and_offsets() {
        let t = (DEC1 + 10 * 3600) * S;
        // date -u +%Y-%m-%dT%H:%M:%S.%NZ
        assert_eq!(ns("2026-12-01T10:00:00.123456789Z"), t + 123_456_789);
        // date --rfc-3339=ns (a space instead of T)
        assert_eq!(ns("2026-12-01 10:00:00.123456789+00:00"), t + 123_456_789);
        // date -Ins (a comma)
        assert_eq!(ns("2026-12-01T10:00:00,5+00:00"), t + 500_000_000);
        assert_eq!(ns("2026-12-01T10:00:00+02:00"), t - 2 * 3600 * S);
        assert_eq!(ns("2026-12-01T10:00:00-05:30"), t + 5 * 3600 * S + 1800 * S);
        assert_eq!(ns("2026-12-01t10:00:00z"), t);
        assert_eq!(
            ns("2026-12-01T10:00Z"),
            t,
            "date -Iminutes, seconds omitted"
        );
        assert_eq!(ns("2026-12-01T10:00:00.1Z"), t + 100_000_000);
        assert_eq!(ns("2026-11-30T17:56:55Z"), 1_796_061_415 * S);
        assert_eq!(
            ns("2026-12-31T23:59:60Z"),
            (DEC1 + 31 * 86400 - 1) * S,
            "leap second"
        );
    }

    #[test]
    fn offsets_stop_at_23_59() {
        assert!(parse_ns("2026-12-01T10:00:00+25:00").is_err());
        assert!(parse_ns("2026-12-01T10:00:00-24:00").is_err());
        assert!(parse_ns("2026-12-01T10:00:00+23:59").is_ok());
    }

    #[test]
    fn without_an_offset_is_utc() {
        assert_eq!(ns("2026-12-01T10:00:00"), (DEC1 + 10 * 3600) * S);
        assert_eq!(ns("2026-12-01 10:00"), (DEC1 + 10 * 3600) * S);
    }

    #[test]
    fn dates_are_midnight_utc() {
        assert_eq!(ns("1970-01-02"), 86_400 * S);
        assert_eq!(ns("2026-12-01"), DEC1 * S);
        assert_eq!(ns("2000-02-29"), 951_782_400 * S, "a leap day");
    }

    #[test]
    fn epoch_seconds_with_fractions() {
        assert_eq!(ns("@0"), 0);
        assert_eq!(ns("@1.5"), 1_500_000_000);
        assert_eq!(ns("@1796083200"), DEC1 * S);
        // Exact to the nanosecond (a float would round this one).
        assert_eq!(ns("@1796083200.123456789"), DEC1 * S + 123_456_789);
        assert_eq!(ns("@-1.5"), -1_500_000_000);
    }

    #[test]
    fn far_times_clamp_to_the_ends() {
        assert_eq!(ns("9999-12-31"), i64::MAX);
        assert_eq!(ns("9999-12-31T23:59:59.999999999-23:59"), i64::MAX);
        assert_eq!(ns("@999999999999"), i64::MAX);
        assert_eq!(ns("@9223372036854775807"), i64::MAX);
        assert_eq!(ns("0000-01-01"), i64::MIN);
        assert_eq!(ns("@-9223372036854775807"), i64::MIN);
        // The last and first i64 nanoseconds, exactly.
        assert_eq!(ns("2262-04-11T23:47:16.854775807Z"), i64::MAX);
        assert_eq!(ns("1677-09-21T00:12:43.145224192Z"), i64::MIN);
    }

    #[test]
    fn the_printed_form_reads_back() {
        for t in [0, 1_796_061_415 * S, 951_782_400 * S, -86_400 * S] {
            assert_eq!(ns(&utc(t)), t, "{}", utc(t));
        }
        assert_eq!(utc(0), "1970-01-01 00:00:00Z");
        assert_eq!(utc(1_796_061_415 * S + 999_999_999), "2026-11-30 17:56:55Z");
        assert_eq!(utc(951_782_400 * S), "2000-02-29 00:00:00Z");
        assert_eq!(utc(i64::MAX), "2262-04-11 23:47:16Z");
        assert_eq!(utc(i64::MIN), "1677-09-21 00:12:43Z");
        assert_eq!(utc_exact(1_796_061_415 * S), "2026-11-30 17:56:55Z");
        assert_eq!(
            utc_exact(1_796_061_415 * S + 500_000_000),
            "2026-11-30 17:56:55.5Z"
        );
        assert_eq!(ns(&utc_exact(-1)), -1);
    }

    #[test]
    fn out_of_range_fields_are_refused() {
        for s in [
            "2026-13-01",
            "2026-13-45",
            "2026-00-10",
            "2026-12-00",
            "2026-12-32",
            "2026-02-29",
            "2026-04-31",
            "2026-12-01T24:00:00Z",
            "2026-12-01T10:60:00Z",
            "2026-12-01T10:00:61Z",
            "2026-12-01T10:00:00+26:00",
            "2026-12-01T10:00:00+02:60",
            "@99999999999999999999",
        ] {
            let e = parse(s).expect_err(s);
            assert_eq!(e.input, s);
            assert_ne!(e.reason, "not a time", "{s}: the reason is jiff's");
        }
    }

    #[test]
    fn other_forms_are_refused_with_the_list() {
        for s in [
            "",
            "20261201",
            "1796083200",
            "1796083200000000000",
            "20261201T100000Z",
            "2026-335",
            "2026-W49-2",
            "2026-12",
            "26-12-01",
            "+002026-12-01",
            "2026/12/01",
            "2026-12-1",
            "2026-12-01T10Z",
            "2026-12-01T10:00:00.1234567890Z",
            "2026-12-01T10:00:00.Z",
            "2026-12-01T10:00:00+0200",
            "2026-12-01T10:00:00+02",
            "2026-12-01T10:00:00Z[Europe/Paris]",
            "2026-12-01Z",
            "2026-12-01T",
            " 2026-12-01",
            "2026-12-01\n",
            "@",
            "@1.",
            "@.5",
            "@1e9",
            "@+1",
            "yesterday",
            "now",
        ] {
            let e = parse(s).expect_err(s);
            assert_eq!(e.reason, "not a time", "{s:?}");
            let shown = e.to_string();
            assert!(shown.starts_with("not a time; TIME is one of: "), "{shown}");
            for form in ["YYYY-MM-DD", "Z or +HH:MM", "@SECONDS"] {
                assert!(shown.contains(form), "{shown}");
            }
        }
    }
}
