//! Writer rules (SPEC §5): the rules file, its check, and writer resolution.
//!
//! The file format is parsed and checked (`scratchfs rules check FILE`, errors with line
//! and column); a caller's facts resolve to a writer name; [`enforce`] decides whether a
//! writer may modify, create or remove a path (writers and modes). Content validation
//! (formats, fields, max_bytes, secrets) is not enforced yet (issue 3).

pub mod enforce;

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::identity::Caller;

/// A writer's matchers (SPEC §5): all given must match. `uid`, `gid`, `user` and `exe`
/// are enforced by the kernel (the caller cannot forge them); `comm` can be changed by
/// the process itself (prctl), and `env` is a cooperative claim.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Matchers {
    /// fsuid of the caller.
    pub uid: Option<u32>,
    /// fsgid of the caller.
    pub gid: Option<u32>,
    /// User name, resolved to a uid when the rules are loaded.
    pub user: Option<String>,
    /// Absolute path of the executable (`/proc/<pid>/exe`).
    pub exe: Option<String>,
    /// Command name (`/proc/<pid>/comm`, 15 bytes at most).
    pub comm: Option<String>,
    /// Value of `SCRATCHFS_WRITER` in the caller's environment.
    pub env: Option<String>,
}

/// `mode` of a path rule.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Any change (default).
    #[default]
    ReadWrite,
    /// Existing bytes may never change.
    AppendOnly,
    /// Created once, never changed or deleted.
    WriteOnce,
    /// No writes.
    ReadOnly,
}

/// `format` of a path rule: content must be UTF-8 and, for json/jsonl, parse.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// One JSON value.
    Json,
    /// One JSON value per line.
    Jsonl,
    /// Markdown (UTF-8).
    Markdown,
    /// UTF-8 text.
    Text,
}

/// `on_conflict` of a path rule (SPEC §4).
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum OnConflict {
    /// A lost update is refused with `ESTALE` (default).
    #[default]
    Refuse,
    /// The later commit wins.
    Overwrite,
}

/// JSON type of a field.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum FieldType {
    /// A string.
    String,
    /// An integer.
    Integer,
    /// Any number.
    Number,
    /// true or false.
    Boolean,
    /// An object.
    Object,
    /// An array.
    Array,
    /// null.
    Null,
}

/// Rule for one top-level key of a JSON object.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Field {
    /// Writers that may add, change or remove the key (`*`: any).
    #[serde(default)]
    pub writers: Vec<String>,
    /// Its type, when constrained.
    #[serde(rename = "type")]
    pub ty: Option<FieldType>,
}

/// One entry of `paths`: the first whose glob matches a path applies.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct PathRule {
    /// Glob (globset syntax: `*` within a component, `**` across).
    pub path: String,
    /// Writers that may write here (`*`: any). Absent: any.
    pub writers: Option<Vec<String>>,
    /// Mode.
    #[serde(default)]
    pub mode: Mode,
    /// Content format.
    pub format: Option<Format>,
    /// Per-key rules of a JSON object.
    pub fields: Option<BTreeMap<String, Field>>,
    /// Keys not in `fields` allowed (default true).
    pub additional_fields: Option<bool>,
    /// Largest content, bytes.
    pub max_bytes: Option<u64>,
    /// Refuse private keys and well-known token formats.
    #[serde(default)]
    pub deny_secrets: bool,
    /// Lost-update policy.
    #[serde(default)]
    pub on_conflict: OnConflict,
}

/// A rules file (SPEC §5).
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Rules {
    /// Writer names and their matchers, in file order (the first that matches names the
    /// caller).
    #[serde(default, deserialize_with = "ordered")]
    pub writers: Vec<(String, Matchers)>,
    /// Path rules, first match wins; a path no rule matches cannot be created.
    #[serde(default)]
    pub paths: Vec<PathRule>,
    /// Globs of editor and tool temporaries kept out of MANIFEST.
    #[serde(default)]
    pub ephemeral: Vec<String>,
}

/// Deserializes a JSON object into its entries in file order.
fn ordered<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<(String, Matchers)>, D::Error> {
    struct V;
    impl<'de> serde::de::Visitor<'de> for V {
        type Value = Vec<(String, Matchers)>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("an object of writer names to matchers")
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(
            self,
            mut m: A,
        ) -> Result<Self::Value, A::Error> {
            let mut out = Vec::new();
            while let Some((k, v)) = m.next_entry::<String, Matchers>()? {
                out.push((k, v));
            }
            Ok(out)
        }
    }
    d.deserialize_map(V)
}

/// One problem in a rules file: `line:column: message`, 1-based.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// 1-based line.
    pub line: usize,
    /// 1-based column.
    pub column: usize,
    /// What is wrong, naming the offending key or value.
    pub message: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}: {}", self.line, self.column, self.message)
    }
}

/// Line and column (1-based) of the first occurrence of `needle` in `text`, else 1:1.
fn position(text: &str, needle: &str) -> (usize, usize) {
    match text.find(needle) {
        Some(at) => {
            let before = &text[..at];
            let line = before.matches('\n').count() + 1;
            let column = at - before.rfind('\n').map(|i| i + 1).unwrap_or(0) + 1;
            (line, column)
        }
        None => (1, 1),
    }
}

impl Rules {
    /// Parses and checks a rules file. Every problem names its line, column and the
    /// offending key: syntax errors, unknown keys, wrong types, unknown writer names,
    /// invalid globs, writers without matchers, `fields` without `format: json`.
    pub fn parse(text: &str) -> Result<Rules, Vec<Problem>> {
        let rules: Rules = serde_json::from_str(text).map_err(|e| {
            vec![Problem {
                line: e.line(),
                column: e.column(),
                message: e
                    .to_string()
                    .split(" at line ")
                    .next()
                    .unwrap_or_default()
                    .to_string(),
            }]
        })?;
        let mut problems = Vec::new();
        let mut problem = |needle: &str, message: String| {
            let (line, column) = position(text, needle);
            problems.push(Problem {
                line,
                column,
                message,
            });
        };
        let known: Vec<&str> = rules.writers.iter().map(|(n, _)| n.as_str()).collect();
        for (name, m) in &rules.writers {
            if *m == Matchers::default() {
                problem(
                    &format!("\"{name}\""),
                    format!("writer \"{name}\" has no matchers"),
                );
            }
            if let Some(exe) = &m.exe
                && !exe.starts_with('/')
            {
                problem(
                    &format!("\"{exe}\""),
                    format!("writer \"{name}\": exe must be an absolute path"),
                );
            }
            if let Some(u) = &m.user
                && user_uid(u).is_none()
            {
                problem(
                    &format!("\"{u}\""),
                    format!("writer \"{name}\": no such user \"{u}\""),
                );
            }
        }
        for (i, p) in rules.paths.iter().enumerate() {
            if let Err(e) = globset::Glob::new(&p.path) {
                problem(&format!("\"{}\"", p.path), format!("paths[{i}].path: {e}"));
            }
            let mut check_writers = |ws: &[String], at: &str| {
                for w in ws {
                    if w != "*" && !known.contains(&w.as_str()) {
                        problem(&format!("\"{w}\""), format!("{at}: unknown writer \"{w}\""));
                    }
                }
            };
            check_writers(
                p.writers.as_deref().unwrap_or_default(),
                &format!("paths[{i}].writers"),
            );
            if let Some(fields) = &p.fields {
                for (k, f) in fields {
                    check_writers(&f.writers, &format!("paths[{i}].fields.{k}.writers"));
                }
                if p.format != Some(Format::Json) {
                    problem(
                        "\"fields\"",
                        format!("paths[{i}].fields needs \"format\": \"json\""),
                    );
                }
            }
        }
        for g in &rules.ephemeral {
            if let Err(e) = globset::Glob::new(g) {
                problem(&format!("\"{g}\""), format!("ephemeral: {e}"));
            }
        }
        if problems.is_empty() {
            Ok(rules)
        } else {
            Err(problems)
        }
    }

    /// The writer a caller is (SPEC §5): the first writer, in file order, all of whose
    /// matchers match; `anonymous` if none.
    pub fn writer_for(&self, c: &Caller, comm: &str) -> String {
        for (name, m) in &self.writers {
            let ok = m.uid.is_none_or(|u| u == c.uid)
                && m.gid.is_none_or(|g| g == c.gid)
                && m.user.as_deref().is_none_or(|u| user_uid(u) == Some(c.uid))
                && m.exe.as_deref().is_none_or(|e| e == c.exe)
                && m.comm.as_deref().is_none_or(|x| x == comm)
                && m.env
                    .as_deref()
                    .is_none_or(|e| c.env_writer.as_deref() == Some(e));
            if ok {
                return name.clone();
            }
        }
        "anonymous".into()
    }
}

/// uid of a user name (getpwnam(3)).
fn user_uid(name: &str) -> Option<u32> {
    let c = std::ffi::CString::new(name).ok()?;
    let pw = unsafe { libc::getpwnam(c.as_ptr()) };
    (!pw.is_null()).then(|| unsafe { (*pw).pw_uid })
}

/// `scratchfs rules check FILE`: prints `FILE:LINE:COLUMN: message` per problem.
pub fn check_file(path: &std::path::Path) -> Result<(), String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    match Rules::parse(&text) {
        Ok(r) => {
            println!(
                "{}: ok ({} writers, {} path rules)",
                path.display(),
                r.writers.len(),
                r.paths.len()
            );
            Ok(())
        }
        Err(problems) => {
            for p in &problems {
                println!("{}:{p}", path.display());
            }
            Err(format!("{}: {} problems", path.display(), problems.len()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The SPEC §5 example, as shipped for users and scripts.
    const SPEC_EXAMPLE: &str = include_str!("../../examples/spec-rules.json");

    #[test]
    fn the_spec_example_parses_and_resolves_writers_in_order() {
        let r = Rules::parse(SPEC_EXAMPLE).unwrap();
        assert_eq!(r.writers.len(), 5);
        assert_eq!(r.paths[1].mode, Mode::AppendOnly);
        let c = |uid, env: Option<&str>| Caller {
            uid,
            env_writer: env.map(String::from),
            ..Default::default()
        };
        assert_eq!(r.writer_for(&c(1000, None), "bash"), "agent");
        assert_eq!(
            r.writer_for(&c(1000, Some("get_order")), "python3"),
            "agent",
            "first match wins"
        );
        assert_eq!(
            r.writer_for(&c(1001, Some("get_order")), "python3"),
            "get_order"
        );
        assert_eq!(r.writer_for(&c(1001, None), "sh"), "anonymous");
    }

    #[test]
    fn problems_name_line_column_and_key() {
        let bad = SPEC_EXAMPLE.replace("\"mode\": \"append-only\"", "\"mdoe\": \"append-only\"");
        let p = Rules::parse(&bad).unwrap_err();
        assert_eq!((p[0].line, p[0].column > 1), (11, true), "{p:?}");
        assert!(p[0].message.contains("unknown field `mdoe`"), "{p:?}");
        let bad = SPEC_EXAMPLE.replace(
            "[\"get_order\"], \"type\": \"string\"",
            "[\"get_ordr\"], \"type\": \"string\"",
        );
        let p = Rules::parse(&bad).unwrap_err();
        assert_eq!(p.len(), 1, "{p:?}");
        assert_eq!(p[0].line, 15, "{p:?}");
        assert!(
            p[0].message.contains("unknown writer \"get_ordr\""),
            "{p:?}"
        );
        let p = Rules::parse("{\"paths\": [ {\"path\": \"a[\"} ]}").unwrap_err();
        assert!(p[0].message.contains("paths[0].path"), "{p:?}");
        let p = Rules::parse("{\"writers\": {\"x\": {}}, \n \"paths\": 3}").unwrap_err();
        assert_eq!(p[0].line, 2, "{p:?}");
    }
}
