//! Deciding, from the rules a mount was started with, whether a writer may do something
//! to a path (SPEC §5, §6). Pure: the filesystem core asks, and records what is refused.

use globset::{Glob, GlobMatcher, GlobSet, GlobSetBuilder};

use super::{Mode, PathRule, Rules};
use crate::error::Error;
use crate::identity::Caller;

/// What a writer is about to do to a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Open an existing file for writing (or truncate it, or chmod it).
    Modify,
    /// Create a file.
    Create,
    /// Create a directory.
    Mkdir,
    /// Remove, or rename away, or rename over.
    Remove,
}

/// Rules with their globs compiled.
#[derive(Debug)]
pub struct Compiled {
    /// The rules as written.
    pub rules: Rules,
    globs: Vec<GlobMatcher>,
    /// The `ephemeral` globs as one matcher.
    ephemeral: GlobSet,
    /// The identities of the files the `exe` matchers name, taken when compiled.
    pub exe_pins: super::ExePins,
}

impl Compiled {
    /// Compiles checked rules (see [`Rules::parse`]).
    pub fn new(rules: Rules) -> Compiled {
        let globs = rules
            .paths
            .iter()
            .map(|p| {
                Glob::new(&p.path)
                    .map(|g| g.compile_matcher())
                    .unwrap_or_else(|_| Glob::new("!").unwrap().compile_matcher())
            })
            .collect();
        let mut ephemeral = GlobSetBuilder::new();
        for g in rules.ephemeral.iter().filter_map(|g| Glob::new(g).ok()) {
            ephemeral.add(g);
        }
        let ephemeral = ephemeral.build().unwrap_or_else(|_| GlobSet::empty());
        Compiled {
            exe_pins: super::ExePins::take(&rules),
            rules,
            globs,
            ephemeral,
        }
    }

    /// The writer `caller` is ([`Rules::writer_for`], `exe` by identity).
    pub fn writer_for(&self, caller: &Caller, comm: &str) -> String {
        self.rules.writer_for(caller, comm, &self.exe_pins)
    }

    /// Whether `caller`, claiming writer `name`, is that writer ([`Rules::claim`]).
    pub fn claim(&self, name: &str, caller: &Caller, comm: &str) -> Option<Result<(), String>> {
        self.rules.claim(name, caller, comm, &self.exe_pins)
    }

    /// The index in `paths` of the first path rule whose glob matches `path`.
    pub fn rule_index_for(&self, path: &str) -> Option<usize> {
        self.globs.iter().position(|g| g.is_match(path))
    }

    /// The first path rule whose glob matches `path`.
    pub fn rule_for(&self, path: &str) -> Option<&PathRule> {
        self.globs
            .iter()
            .position(|g| g.is_match(path))
            .map(|i| &self.rules.paths[i])
    }

    /// Whether `caller` may do `action` to `path`: `Ok`, or the refusal to record and
    /// return (`EACCES`, SPEC §6: "writer may not write/create/delete/rename this path",
    /// "write to a read-only or write-once file").
    pub fn check(&self, path: &str, caller: &Caller, action: Action) -> Result<(), Error> {
        let refuse = |rule: &str, what: String| {
            Err(Error::new(
                libc::EACCES,
                format!(
                    "{path}: writer {} refused by rule {rule}: {what}",
                    caller.writer
                ),
            ))
        };
        let Some(rule) = self.rule_for(path) else {
            return refuse("(none)", "no path rule matches".into());
        };
        let name = format!("\"{}\"", rule.path);
        if let Some(ws) = &rule.writers
            && !ws.iter().any(|w| w == "*" || *w == caller.writer)
        {
            let why = if ws.is_empty() {
                "no writer may write here (its writers list is empty)".to_string()
            } else {
                format!("only {} may write here", ws.join(", "))
            };
            return refuse(&name, why);
        }
        // A directory may be made under a write-once or append-only rule (they are about
        // files' bytes), not where the rule says read-only (docs/rules.md: create, mkdir).
        if action == Action::Mkdir && rule.mode != Mode::ReadOnly {
            return Ok(());
        }
        match (rule.mode, action) {
            (Mode::ReadOnly, _) => refuse(&name, "read-only".into()),
            (Mode::WriteOnce, Action::Modify | Action::Remove) => refuse(
                &name,
                "write-once: written once, never changed or deleted".into(),
            ),
            (Mode::AppendOnly, Action::Remove) => {
                refuse(&name, "append-only: existing bytes never go".into())
            }
            _ => Ok(()),
        }
    }
}

impl Compiled {
    /// Whether `path` is an editor or tool temporary (`ephemeral` globs, matched against
    /// the file name and the whole path).
    pub fn is_ephemeral(&self, path: &str) -> bool {
        let name = path.rsplit('/').next().unwrap_or(path);
        !self.ephemeral.is_empty()
            && (self.ephemeral.is_match(name) || self.ephemeral.is_match(path))
    }

    /// Whether the rules declare `ephemeral` globs.
    pub fn has_ephemeral(&self) -> bool {
        !self.ephemeral.is_empty()
    }

    /// One short line per path rule (for MANIFEST): glob, writers, mode, format, fields.
    pub fn summary(&self) -> Vec<String> {
        self.rules
            .paths
            .iter()
            .map(|p| {
                let mut line = format!(
                    "{}: {}",
                    p.path,
                    p.writers
                        .as_ref()
                        .map(|w| w.join(", "))
                        .unwrap_or_else(|| "*".into())
                );
                match p.mode {
                    Mode::ReadWrite => {}
                    Mode::AppendOnly => line += ", append-only",
                    Mode::WriteOnce => line += ", write-once",
                    Mode::ReadOnly => line += ", read-only",
                }
                if let Some(f) = p.format {
                    line += &format!(", {f:?}").to_lowercase();
                }
                if let Some(max) = p.max_bytes {
                    line += &format!(", max_bytes {max}");
                }
                if p.deny_secrets {
                    line += ", deny_secrets";
                }
                if let Some(fields) = &p.fields {
                    let fs: Vec<String> = fields
                        .iter()
                        .filter(|(_, f)| !f.writers.iter().any(|w| w == "*"))
                        .map(|(k, f)| format!("{k} by {}", f.writers.join("/")))
                        .collect();
                    if !fs.is_empty() {
                        line += &format!("; {}", fs.join(", "));
                    }
                }
                line
            })
            .collect()
    }

    /// Whether commits to `path` need their content checked ([`Compiled::validate`]).
    pub fn checks_content(&self, path: &str) -> bool {
        self.rule_for(path).is_some_and(|r| {
            r.format.is_some() || r.max_bytes.is_some() || r.fields.is_some() || r.deny_secrets
        })
    }

    /// Per-key rules of a JSON object (SPEC §5 `fields`): the top-level keys whose value
    /// changes from `old` to `new` (compared as JSON values, so reformatting is no change)
    /// must be writable by `writer`, keys outside `fields` need `additional_fields`, and
    /// new values must have their field's type. `Err(reason)` for `EINVAL`.
    pub fn validate_fields(
        &self,
        path: &str,
        writer: &str,
        old: &[u8],
        new: &[u8],
    ) -> Result<(), String> {
        let Some(rule) = self.rule_for(path) else {
            return Ok(());
        };
        let Some(fields) = &rule.fields else {
            return Ok(());
        };
        let refuse = |what: String| {
            Err(format!(
                "{path}: writer {writer} refused by rule \"{}\": {what}",
                rule.path
            ))
        };
        let object = |b: &[u8]| match serde_json::from_slice::<serde_json::Value>(b) {
            Ok(serde_json::Value::Object(m)) => Some(m),
            _ => None,
        };
        let old = object(old).unwrap_or_default();
        let Some(new_map) = object(new) else {
            return refuse("not a JSON object".into());
        };
        // Parsers disagree on a repeated key (serde_json and Python keep the last value,
        // SQLite's json_extract the first), so a document with one cannot be judged.
        if let Some(k) = duplicate_key(new) {
            return refuse(format!("key \"{k}\" appears twice"));
        }
        let new = new_map;
        let keys: std::collections::BTreeSet<&String> = old.keys().chain(new.keys()).collect();
        for k in keys {
            let (before, after) = (old.get(k), new.get(k));
            if before == after {
                continue;
            }
            let Some(field) = fields.get(k) else {
                if rule.additional_fields == Some(false) {
                    return refuse(format!("key \"{k}\" is not among the fields"));
                }
                continue;
            };
            if !field.writers.iter().any(|w| w == "*" || w == writer) {
                return refuse(format!(
                    "key \"{k}\" may be written only by {}",
                    field.writers.join(", ")
                ));
            }
            if let (Some(ty), Some(v)) = (field.ty, after) {
                use super::FieldType as T;
                let ok = match ty {
                    T::String => v.is_string(),
                    T::Integer => v.is_i64() || v.is_u64(),
                    T::Number => v.is_number(),
                    T::Boolean => v.is_boolean(),
                    T::Object => v.is_object(),
                    T::Array => v.is_array(),
                    T::Null => v.is_null(),
                };
                if !ok {
                    return refuse(format!("key \"{k}\" must be of type {ty:?}").to_lowercase());
                }
            }
        }
        Ok(())
    }

    /// The check SPEC §6 makes at `write` already, when a failure is certain: for a path
    /// whose rule has a `format` (all of them are text), `data` written at `offset` (bytes)
    /// holding a byte sequence that is not UTF-8 whatever comes after it. Up to 3 leading
    /// continuation bytes are allowed when `offset > 0` (a character split between two
    /// writes) and an incomplete sequence at the end is left to the commit. `Err(reason)`
    /// for `EINVAL`.
    pub fn validate_write(
        &self,
        path: &str,
        writer: &str,
        offset: u64,
        data: &[u8],
    ) -> Result<(), String> {
        let Some(rule) = self.rule_for(path).filter(|r| r.format.is_some()) else {
            return Ok(());
        };
        let skip = if offset > 0 {
            data.iter()
                .take(3)
                .take_while(|b| (0x80..0xc0).contains(*b))
                .count()
        } else {
            0
        };
        match std::str::from_utf8(&data[skip..]) {
            Err(e) if e.error_len().is_some() => Err(format!(
                "{path}: writer {writer} refused by rule \"{}\": not UTF-8 (byte {})",
                rule.path,
                offset + (skip + e.valid_up_to()) as u64
            )),
            _ => Ok(()),
        }
    }

    /// Whether `path`'s rule has `"format": "json"` (so [`Compiled::validate_json_prefix`]
    /// applies to it).
    pub fn is_json(&self, path: &str) -> bool {
        self.rule_for(path)
            .is_some_and(|r| r.format == Some(super::Format::Json))
    }

    /// The JSON half of the check at `write` (SPEC §6 "a JSON syntax error before the end
    /// of the data"): `content` is everything a handle would commit so far, written up to
    /// its end; for a `json` path, a syntax error (not the end of input) means no later
    /// bytes can make it JSON, for a writer that writes in order (callers use it only for
    /// writes that end at the handle's end). `Err(reason)` for `EINVAL`.
    pub fn validate_json_prefix(
        &self,
        path: &str,
        writer: &str,
        content: &[u8],
    ) -> Result<(), String> {
        let Some(rule) = self.rule_for(path).filter(|_| self.is_json(path)) else {
            return Ok(());
        };
        match serde_json::from_slice::<serde::de::IgnoredAny>(content) {
            Err(e) if !e.is_eof() => Err(format!(
                "{path}: writer {writer} refused by rule \"{}\": not JSON: {e}",
                rule.path
            )),
            _ => Ok(()),
        }
    }

    /// Checks the content a commit would give `path` against its rule's `max_bytes` and
    /// `format` (SPEC §5): `Err(reason)` for `EINVAL`.
    pub fn validate(&self, path: &str, writer: &str, content: &[u8]) -> Result<(), String> {
        let Some(rule) = self.rule_for(path) else {
            return Ok(());
        };
        let refuse = |what: String| {
            Err(format!(
                "{path}: writer {writer} refused by rule \"{}\": {what}",
                rule.path
            ))
        };
        if let Some(max) = rule.max_bytes
            && content.len() as u64 > max
        {
            return refuse(format!(
                "max_bytes {max} exceeded ({} bytes)",
                content.len()
            ));
        }
        if rule.deny_secrets
            && let Some(kind) = secret_in(content)
        {
            return refuse(format!("deny_secrets: content holds {kind}"));
        }
        let Some(format) = rule.format else {
            return Ok(());
        };
        let text = match std::str::from_utf8(content) {
            Ok(t) => t,
            Err(e) => return refuse(format!("not UTF-8 (byte {})", e.valid_up_to())),
        };
        match format {
            super::Format::Json => {
                if let Err(e) = serde_json::from_str::<serde_json::Value>(text) {
                    return refuse(format!("not JSON: {e}"));
                }
            }
            super::Format::Jsonl => {
                for (i, l) in text
                    .lines()
                    .enumerate()
                    .filter(|(_, l)| !l.trim().is_empty())
                {
                    if let Err(e) = serde_json::from_str::<serde_json::Value>(l) {
                        return refuse(format!("line {} is not JSON: {e}", i + 1));
                    }
                }
            }
            super::Format::Markdown | super::Format::Text => {}
        }
        Ok(())
    }
}

/// The first top-level key that appears twice in the JSON object `bytes`, if any
/// (`None` also for what is not a JSON object).
pub fn duplicate_key(bytes: &[u8]) -> Option<String> {
    use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};
    struct Keys;
    impl<'de> Visitor<'de> for Keys {
        type Value = Option<String>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut seen = std::collections::HashSet::new();
            let mut dup = None;
            while let Some(k) = map.next_key::<String>()? {
                map.next_value::<IgnoredAny>()?;
                if dup.is_none() && !seen.insert(k.clone()) {
                    dup = Some(k);
                }
            }
            Ok(dup)
        }
    }
    let mut de = serde_json::Deserializer::from_slice(bytes);
    de.deserialize_map(Keys).ok().flatten()
}

/// Well-known secret formats (`deny_secrets`, SPEC §5): private key blocks, cloud access
/// keys, and the token formats of code hosts, chat and LLM APIs, and JWTs. The patterns
/// follow the vendors' documented prefixes (as gitleaks' and GitHub secret scanning's rules
/// do); no maintained Rust crate ships such a list. Formats with a fixed prefix match also
/// inside a longer word (`xAKIA…x`): refusing a look-alike costs less than storing a key.
const SECRETS: &[(&str, &str)] = &[
    (
        "a private key",
        // The whole block, up to its END line or the end of the content, so that a
        // redaction leaves none of the key's body.
        r"(?s)-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----.*?(?:-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|\z)",
    ),
    ("an AWS access key id", r"(?:AKIA|ASIA)[0-9A-Z]{16}"),
    (
        "an AWS secret access key",
        r"(?i)aws_?secret_?access_?key\W{0,4}[=:]\s*\W?[A-Za-z0-9/+=]{40}",
    ),
    ("a Google API key", r"AIza[0-9A-Za-z_\-]{35}"),
    (
        "a GitHub token",
        r"(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,})",
    ),
    ("a GitLab token", r"glpat-[A-Za-z0-9_\-]{20,}"),
    ("a Slack token", r"xox[abprs]-[A-Za-z0-9\-]{10,}"),
    ("an Anthropic API key", r"\bsk-ant-[A-Za-z0-9_\-]{20,}"),
    ("an OpenAI API key", r"\bsk-(?:proj-)?[A-Za-z0-9_\-]{20,}"),
    ("a Stripe secret key", r"[sr]k_live_[0-9A-Za-z]{20,}"),
    (
        "a JSON Web Token",
        r"\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}",
    ),
    (
        // `scheme://user:password@` (RFC 3986 userinfo): a database URL on a command
        // line (`scratchfs adopt --from postgres://u:pw@h/db`) is recorded redacted.
        "a password in a URL",
        r"(?i)\b[a-z][a-z0-9+.\-]*://[^\s/?#@:]*:[^\s/?#@]+@",
    ),
    (
        // libpq's URL parameters (`postgres://h/db?password=pw`, `&sslpassword=`).
        "a password in a URL",
        r"(?i)[?&](?:ssl)?password=[^&\s#]*",
    ),
];

/// The kind of secret whose redaction marker carries no digest: a password may be short
/// and guessable, so a digest of it would let whoever reads the store test guesses
/// offline; the other kinds are long random tokens.
const GUESSABLE: &str = "a password in a URL";

fn secret_patterns() -> &'static [(&'static str, regex::bytes::Regex)] {
    static SET: std::sync::OnceLock<Vec<(&'static str, regex::bytes::Regex)>> =
        std::sync::OnceLock::new();
    SET.get_or_init(|| {
        SECRETS
            .iter()
            .map(|(k, p)| (*k, regex::bytes::Regex::new(p).expect("secret pattern")))
            .collect()
    })
}

/// The kind of the first well-known secret in `content`, if any.
pub fn secret_in(content: &[u8]) -> Option<&'static str> {
    secret_patterns()
        .iter()
        .find(|(_, re)| re.is_match(content))
        .map(|(k, _)| *k)
}

/// Every well-known secret in `content`: (kind, the secret's bytes), in pattern order.
pub fn secrets_found(content: &[u8]) -> Vec<(&'static str, Vec<u8>)> {
    let mut out = Vec::new();
    for (kind, re) in secret_patterns() {
        for m in re.find_iter(content) {
            out.push((*kind, m.as_bytes().to_vec()));
        }
    }
    out
}

/// `content` with every well-known secret replaced by `[REDACTED <kind> blake3:<16 hex
/// digits of the secret's blake3>]`, so that a repeat is recognised and the secret never
/// recovered (SPEC §10 "no secret at rest"); a URL's password by `[REDACTED a password
/// in a URL]` ([`GUESSABLE`]). Borrowed unchanged when nothing matches.
pub fn redact_secrets(content: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    let mut out = std::borrow::Cow::Borrowed(content);
    for (kind, re) in secret_patterns() {
        if !re.is_match(&out) {
            continue;
        }
        let replaced = re
            .replace_all(&out, |c: &regex::bytes::Captures<'_>| marker(kind, &c[0]))
            .into_owned();
        out = std::borrow::Cow::Owned(replaced);
    }
    out
}

/// What [`redact_secrets`] puts in place of `secret`, a secret of kind `kind`.
fn marker(kind: &str, secret: &[u8]) -> Vec<u8> {
    if kind == GUESSABLE {
        return format!("[REDACTED {kind}]").into_bytes();
    }
    let h = blake3::hash(secret).to_hex();
    format!("[REDACTED {kind} blake3:{}]", &h[..16]).into_bytes()
}

/// Known secrets, as (kind, bytes) from [`secrets_found`], to find and redact wherever
/// they are: also where the context their pattern needs is missing (a secret cut out of
/// its line, say), which [`redact_secrets`] alone would leave.
#[derive(Debug)]
pub struct KnownSecrets {
    secrets: Vec<(&'static str, Vec<u8>)>,
    any: Option<regex::bytes::Regex>,
}

/// The parts of `secret` (a match of the pattern of `kind`) that are secret without the
/// context the pattern needs: an AWS secret access key's 40 characters without its
/// `aws_secret_access_key =`, each line of a private key's body (32 characters or more)
/// without its BEGIN and END lines. None for a password in a URL ([`GUESSABLE`]): a short
/// password searched for alone would match unrelated text.
fn values_of(kind: &str, secret: &[u8]) -> Vec<Vec<u8>> {
    match kind {
        "an AWS secret access key" if secret.len() >= 40 => {
            vec![secret[secret.len() - 40..].to_vec()]
        }
        "a private key" => secret
            .split(|&b| b == b'\n')
            .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
            .filter(|l| {
                l.len() >= 32
                    && l.iter()
                        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'='))
            })
            .map(<[u8]>::to_vec)
            .collect(),
        _ => Vec::new(),
    }
}

impl KnownSecrets {
    /// The set of `secrets`, each with its parts that are secret alone (an AWS secret
    /// key's value without its name, a private key's body lines), duplicates and empty
    /// ones dropped.
    pub fn new(secrets: Vec<(&'static str, Vec<u8>)>) -> KnownSecrets {
        let values: Vec<(&'static str, Vec<u8>)> = secrets
            .iter()
            .flat_map(|(k, s)| values_of(k, s).into_iter().map(move |v| (*k, v)))
            .collect();
        let mut secrets = secrets;
        secrets.extend(values);
        secrets.retain(|(_, s)| !s.is_empty());
        secrets.sort();
        secrets.dedup();
        // Each byte spelled as an escape: the secrets are bytes, not text.
        let alternatives: Vec<String> = secrets
            .iter()
            .map(|(_, s)| s.iter().map(|b| format!("\\x{b:02x}")).collect())
            .collect();
        let any = (!alternatives.is_empty()).then(|| {
            regex::bytes::RegexBuilder::new(&format!("(?-u:{})", alternatives.join("|")))
                .size_limit(64 << 20)
                .build()
                .expect("escaped bytes make a valid pattern")
        });
        KnownSecrets { secrets, any }
    }

    /// The longest secret's length in bytes (0 when there is none): a search of a stream
    /// piece by piece keeps this many bytes less one from each piece for the next.
    pub fn longest(&self) -> usize {
        self.secrets.iter().map(|(_, s)| s.len()).max().unwrap_or(0)
    }

    /// Whether `content` holds one of the secrets, byte for byte.
    pub fn found_in(&self, content: &[u8]) -> bool {
        self.any.as_ref().is_some_and(|re| re.is_match(content))
    }

    /// `content` with every well-known secret redacted ([`redact_secrets`]), then every
    /// one of these secrets still in it, by the same marker.
    pub fn redact<'a>(&self, content: &'a [u8]) -> std::borrow::Cow<'a, [u8]> {
        let out = redact_secrets(content);
        let Some(re) = &self.any else { return out };
        if !re.is_match(&out) {
            return out;
        }
        let replaced = re
            .replace_all(&out, |c: &regex::bytes::Captures<'_>| {
                let kind = self
                    .secrets
                    .iter()
                    .find(|(_, s)| s.as_slice() == &c[0])
                    .map_or("a secret", |(k, _)| *k);
                marker(kind, &c[0])
            })
            .into_owned();
        std::borrow::Cow::Owned(replaced)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules() -> Compiled {
        Compiled::new(
            Rules::parse(
                r#"{"writers": {"agent": {"uid": 1000}, "tool": {"env": "tool"}},
                    "paths": [
                      {"path": "plan.md", "writers": ["agent"]},
                      {"path": "findings.md", "mode": "append-only"},
                      {"path": "frozen/*", "mode": "write-once"},
                      {"path": "ro.txt", "mode": "read-only"},
                      {"path": "nobody.md", "writers": []},
                      {"path": "notes/**", "writers": ["*"]}
                    ]}"#,
            )
            .unwrap(),
        )
    }

    fn who(writer: &str) -> Caller {
        Caller {
            writer: writer.into(),
            ..Default::default()
        }
    }

    #[test]
    fn a_json_prefix_is_refused_only_after_a_syntax_error() {
        let r = Compiled::new(
            Rules::parse(r#"{"paths": [{"path": "s.json", "format": "json"}, {"path": "**"}]}"#)
                .unwrap(),
        );
        for ok in ["", "{", "{\"a\": [1, tr", "{\"a\": \"x", "{}", "{}\n", "12"] {
            assert!(
                r.validate_json_prefix("s.json", "w", ok.as_bytes()).is_ok(),
                "{ok}"
            );
        }
        for bad in ["{\"a\" 1", "{} x", "{'a'", "[1,,"] {
            let err = r
                .validate_json_prefix("s.json", "w", bad.as_bytes())
                .unwrap_err();
            assert!(err.contains("not JSON"), "{bad}: {err}");
        }
        assert!(r.validate_json_prefix("t.md", "w", b"{'a'").is_ok());
    }

    #[test]
    fn a_write_is_refused_only_when_not_utf8_whatever_follows() {
        let r = Compiled::new(
            Rules::parse(r#"{"paths": [{"path": "*.md", "format": "markdown"}, {"path": "**"}]}"#)
                .unwrap(),
        );
        let e = "é".as_bytes(); // [0xc3, 0xa9]
        assert!(r.validate_write("a.md", "w", 0, b"plain").is_ok());
        // A character split between two writes: its end, then its start.
        assert!(r.validate_write("a.md", "w", 4, &[e[1], b'x']).is_ok());
        assert!(r.validate_write("a.md", "w", 0, &[b'x', e[0]]).is_ok());
        // At offset 0 a continuation byte cannot be the end of a split character.
        assert!(r.validate_write("a.md", "w", 0, &[e[1]]).is_err());
        let err = r.validate_write("a.md", "w", 10, b"ok\xffok").unwrap_err();
        assert!(err.contains("not UTF-8 (byte 12)"), "{err}");
        // No format: any bytes.
        assert!(r.validate_write("a.bin", "w", 0, b"\xff").is_ok());
    }

    #[test]
    fn fields_writers_types_and_additional_fields() {
        let r = Compiled::new(
            Rules::parse(
                r#"{"writers": {"get_order": {"env": "get_order"}, "agent": {"uid": 1000}},
                    "paths": [{"path": "state.json", "format": "json", "additional_fields": false,
                      "fields": {"order_total_cents": {"writers": ["get_order"], "type": "integer"},
                                 "note": {"writers": ["*"]}}}]}"#,
            )
            .unwrap(),
        );
        let old = br#"{"order_total_cents": 18000, "note": "x"}"#;
        // The agent may not assert a number only get_order may produce.
        let e = r
            .validate_fields(
                "state.json",
                "agent",
                old,
                br#"{"order_total_cents": 54000, "note": "x"}"#,
            )
            .unwrap_err();
        assert!(e.contains("may be written only by get_order"), "{e}");
        // Reformatting and reordering is no change; other keys are free.
        assert!(
            r.validate_fields(
                "state.json",
                "agent",
                old,
                br#"{ "note": "y",  "order_total_cents": 18000 }"#
            )
            .is_ok()
        );
        assert!(
            r.validate_fields(
                "state.json",
                "get_order",
                old,
                br#"{"order_total_cents": "lots", "note": "x"}"#
            )
            .unwrap_err()
            .contains("type integer")
        );
        assert!(
            r.validate_fields(
                "state.json",
                "agent",
                old,
                br#"{"order_total_cents": 18000, "note": "x", "extra": 1}"#
            )
            .unwrap_err()
            .contains("not among the fields")
        );
    }

    #[test]
    fn a_private_key_is_redacted_whole() {
        let pem = "before\n-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA1234\nabcd\n-----END RSA PRIVATE KEY-----\nafter\n";
        let r = redact_secrets(pem.as_bytes());
        let s = String::from_utf8_lossy(&r);
        assert!(!s.contains("MIIEpAIB") && !s.contains("END RSA"), "{s}");
        assert!(
            s.starts_with("before\n[REDACTED a private key blake3:"),
            "{s}"
        );
        assert!(s.ends_with("]\nafter\n"), "{s}");
        // A block cut short: redacted to the end.
        let r = redact_secrets(b"-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk");
        assert!(!String::from_utf8_lossy(&r).contains("b3Bl"));
    }

    #[test]
    fn a_repeated_key_cannot_be_judged() {
        let r = Compiled::new(
            Rules::parse(
                r#"{"writers": {"get_order": {"env": "get_order"}},
                    "paths": [{"path": "s.json", "format": "json",
                      "fields": {"total": {"writers": ["get_order"]}}}]}"#,
            )
            .unwrap(),
        );
        let e = r
            .validate_fields(
                "s.json",
                "agent",
                br#"{"total": 1}"#,
                br#"{"total": 9, "total": 1}"#,
            )
            .unwrap_err();
        assert!(e.contains("key \"total\" appears twice"), "{e}");
        assert_eq!(duplicate_key(br#"{"a": {"b": 1, "b": 2}}"#), None);
        assert_eq!(duplicate_key(b"[1, 1]"), None);
    }

    #[test]
    fn well_known_secrets_are_found() {
        for (text, kind) in [
            (
                "-----BEGIN OPENSSH PRIVATE KEY-----\nb3Bl\n",
                "a private key",
            ),
            ("key = AKIAIOSFODNN7EXAMPLE", "an AWS access key id"),
            (
                "token ghp_0123456789abcdefghijABCDEFGHIJ012345",
                "a GitHub token",
            ),
            (
                "sk-ant-api03-abcdefghijklmnopqrstuv",
                "an Anthropic API key",
            ),
            ("xoxb-123456789012-abcdef", "a Slack token"),
            (
                "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
                "a JSON Web Token",
            ),
        ] {
            assert_eq!(secret_in(text.as_bytes()), Some(kind), "{text}");
        }
        assert_eq!(
            secret_in(b"order 1042 total 180.00; ask-for-approval"),
            None
        );
        for embedded in [
            "xAKIAIOSFODNN7EXAMPLEx",
            "_AKIAIOSFODNN7EXAMPLE_",
            "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        ] {
            assert!(secret_in(embedded.as_bytes()).is_some(), "{embedded}");
        }
        assert_eq!(secret_in(b"task-this-is-a-long-kebab-case-name-here"), None);
        assert_eq!(
            secret_in(b"--from postgres://agent:s3cret@db.internal/pad"),
            Some("a password in a URL")
        );
        for plain in [
            "postgres://agent@db.internal:5432/pad",
            "ssh://git@github.com:22/x",
            "http://host:8080/a?b=c@d",
        ] {
            assert_eq!(secret_in(plain.as_bytes()), None, "{plain}");
        }
        let r = redact_secrets(b"postgresql://agent:s3cret@db/pad");
        assert_eq!(
            String::from_utf8_lossy(&r),
            "[REDACTED a password in a URL]db/pad",
            "no digest of a guessable password"
        );
        for (url, kept) in [
            ("postgres://db/pad?password=s3cret", "postgres://db/pad"),
            (
                "POSTGRES://db/pad?sslmode=require&PASSWORD=s3cret&user=a",
                "POSTGRES://db/pad?sslmode=require",
            ),
            (
                "postgres://db/pad?sslpassword=s3cret#x",
                "postgres://db/pad",
            ),
        ] {
            let r = redact_secrets(url.as_bytes());
            let r = String::from_utf8_lossy(&r);
            assert!(!r.contains("s3cret") && r.starts_with(kept), "{url}: {r}");
        }
    }

    #[test]
    fn formats_and_max_bytes() {
        let r = Compiled::new(
            Rules::parse(
                r#"{"paths": [{"path": "s.json", "format": "json"},
                              {"path": "l.jsonl", "format": "jsonl"},
                              {"path": "t.md", "format": "markdown", "max_bytes": 5}]}"#,
            )
            .unwrap(),
        );
        assert!(r.validate("s.json", "w", br#"{"a": 1}"#).is_ok());
        assert!(
            r.validate("s.json", "w", br#"{"a": "#)
                .unwrap_err()
                .contains("not JSON")
        );
        assert!(
            r.validate("l.jsonl", "w", b"{}\nnope\n")
                .unwrap_err()
                .contains("line 2")
        );
        assert!(r.validate("t.md", "w", b"abc").is_ok());
        assert!(
            r.validate("t.md", "w", b"abcdef")
                .unwrap_err()
                .contains("max_bytes 5")
        );
        assert!(
            r.validate("t.md", "w", &[0xff])
                .unwrap_err()
                .contains("not UTF-8")
        );
    }

    #[test]
    fn writers_modes_and_unmatched_paths() {
        let r = rules();
        assert!(r.check("plan.md", &who("agent"), Action::Modify).is_ok());
        let e = r
            .check("plan.md", &who("tool"), Action::Modify)
            .unwrap_err();
        assert_eq!(e.errno, libc::EACCES);
        assert!(
            e.reason.contains("only agent may write here"),
            "{}",
            e.reason
        );
        let e = r
            .check("nobody.md", &who("agent"), Action::Create)
            .unwrap_err();
        assert!(
            e.reason
                .ends_with("no writer may write here (its writers list is empty)"),
            "{}",
            e.reason
        );
        assert!(r.check("findings.md", &who("tool"), Action::Modify).is_ok());
        assert!(
            r.check("findings.md", &who("tool"), Action::Remove)
                .is_err()
        );
        assert!(r.check("frozen/a", &who("x"), Action::Create).is_ok());
        assert!(r.check("frozen/a", &who("x"), Action::Modify).is_err());
        assert!(r.check("ro.txt", &who("x"), Action::Create).is_err());
        assert!(
            r.check("notes/deep/n.md", &who("anonymous"), Action::Create)
                .is_ok()
        );
        let e = r
            .check("elsewhere", &who("agent"), Action::Create)
            .unwrap_err();
        assert!(e.reason.contains("no path rule matches"), "{}", e.reason);
    }

    /// A known secret is found and redacted byte for byte, also where its pattern does
    /// not see it (glued to a word, `\b` fails).
    #[test]
    fn known_secrets_are_found_without_their_context() {
        let key: &[u8] = b"sk-ant-abcdefghijklmnopqrstuvwxyz012345";
        let found = secrets_found(&[b"key ", key].concat());
        assert!(!found.is_empty());
        let known = KnownSecrets::new(found);
        assert_eq!(known.longest(), key.len());
        let glued = [b"x", key, b"\n"].concat();
        assert!(secret_in(&glued).is_none());
        assert!(known.found_in(&glued));
        let out = known.redact(&glued);
        assert!(!out.windows(key.len()).any(|w| w == key), "{out:?}");
        assert!(
            out.starts_with(b"x[REDACTED an Anthropic API key blake3:"),
            "{}",
            String::from_utf8_lossy(&out)
        );
        assert!(!known.found_in(b"nothing here"));
        let none = KnownSecrets::new(Vec::new());
        assert_eq!(none.longest(), 0);
        assert!(!none.found_in(&glued));
        // The value of a secret found with its name is found alone.
        let v = "wJalrXUtnFEMIK7MDENGbPxRfiCYEXAMPLEKEYab";
        let known = KnownSecrets::new(secrets_found(
            format!("aws_secret_access_key = {v}\n").as_bytes(),
        ));
        let bare = format!("later: {v}\n");
        assert!(secret_in(bare.as_bytes()).is_none());
        assert!(known.found_in(bare.as_bytes()));
        assert!(
            !known
                .redact(bare.as_bytes())
                .windows(v.len())
                .any(|w| w == v.as_bytes())
        );
        // A private key's body lines without its BEGIN and END lines.
        let body = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7";
        let known = KnownSecrets::new(secrets_found(
            format!("-----BEGIN PRIVATE KEY-----\n{body}\n-----END PRIVATE KEY-----\n").as_bytes(),
        ));
        assert!(known.found_in(format!("copied {body} here").as_bytes()));
        // Bytes that are not UTF-8 are searched as bytes.
        let raw = KnownSecrets::new(vec![("a test secret", vec![0xff, 0x00, b'.'])]);
        assert!(raw.found_in(b"a\xff\x00.b"));
        assert!(!raw.found_in(b"a\xff\x00xb"));
    }
}
