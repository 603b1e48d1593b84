//! Checking a rules file (`scratchfs rules check FILE`, and every `mount --rules FILE`):
//! every problem in the file, each with its line and column, before any rule is used.
//!
//! serde_json finds syntax errors (with their position) but stops at the first problem
//! of any other kind and keeps no positions. So a syntactically valid text is scanned once
//! more into a tree of `Node`s that remember where each value and key starts, and the
//! checks walk that tree: the shape of the file (a top-level object, duplicate keys at
//! any level, unknown keys, wrong types, a rule without `path`), then what the values mean
//! (unknown writer names, invalid globs, writers or rules that can never apply). Only a
//! file without errors is then deserialized into [`Rules`] (whose own errors, should the
//! checks have missed one, are reported too). Lines and columns are 1-based; columns
//! count bytes, as serde_json's do. The cases are listed in docs/rules.md.

use std::collections::HashMap;

use super::{Problem, Rules, Severity};

/// What a rules text holds: the rules, when it has no errors, and every problem found
/// (errors and warnings), in the order of their positions in the text.
#[derive(Debug, Clone)]
pub struct Checked {
    /// The rules; `None` when any problem is an error.
    pub rules: Option<Rules>,
    /// Every error and warning, by line and column.
    pub problems: Vec<Problem>,
}

impl Checked {
    /// The errors among the problems.
    pub fn errors(&self) -> impl Iterator<Item = &Problem> {
        self.problems
            .iter()
            .filter(|p| p.severity == Severity::Error)
    }

    /// The warnings among the problems.
    pub fn warnings(&self) -> impl Iterator<Item = &Problem> {
        self.problems
            .iter()
            .filter(|p| p.severity == Severity::Warning)
    }
}

/// Largest rules file, bytes (1 MiB): a real one is a few KB; the checks compare rules
/// pairwise, so a bound keeps a generated or hostile file from taking minutes.
pub const MAX_RULES_BYTES: usize = 1 << 20;

/// Deepest nesting of arrays and objects accepted (serde_json's own default limit).
pub const MAX_DEPTH: usize = 128;

/// The offset of the first `[` or `{` nested deeper than [`MAX_DEPTH`], outside strings
/// (an iterative scan: the recursive checks never see such a text).
fn too_deep(b: &[u8]) -> Option<usize> {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for (i, &c) in b.iter().enumerate() {
        if in_string {
            match c {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > MAX_DEPTH {
                    return Some(i);
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    None
}

/// The keys of a writer's matchers (SPEC §5).
const MATCHER_KEYS: &[&str] = &["uid", "gid", "user", "exe", "comm", "env", "mcp_client"];
/// The keys of a writer: its matchers, and `model` (issue 13: what it writes is asserted
/// by a model, not a source for `scratchfs ground`).
const WRITER_KEYS: &[&str] = &[
    "uid",
    "gid",
    "user",
    "exe",
    "comm",
    "env",
    "mcp_client",
    "model",
    "exe_any_namespace",
];
/// The keys of a path rule.
const PATH_KEYS: &[&str] = &[
    "path",
    "writers",
    "mode",
    "format",
    "fields",
    "additional_fields",
    "max_bytes",
    "deny_secrets",
    "on_conflict",
    "keep",
];
/// The keys of a path rule's `keep`.
const KEEP_KEYS: &[&str] = &["versions", "days", "bytes", "including"];
/// What `keep.including` may name.
const INCLUDING: &[&str] = &["inputs", "refusals"];
/// The keys of `quota`.
const QUOTA_KEYS: &[&str] = &["bytes", "files"];
/// The most days `keep.days` may say (a thousand years).
const MAX_DAYS: f64 = 365_250.0;
/// The keys of a field rule.
const FIELD_KEYS: &[&str] = &["writers", "type"];
/// The keys of the file.
const TOP_KEYS: &[&str] = &[
    "writers",
    "paths",
    "ephemeral",
    "manifest_tokens",
    "checkpoints",
    "quota",
];
const CHECKPOINT_KEYS: &[&str] = &["take", "rollback"];
const MODES: &[&str] = &["read-write", "append-only", "write-once", "read-only"];
const FORMATS: &[&str] = &["json", "jsonl", "markdown", "text"];
const CONFLICTS: &[&str] = &["refuse", "overwrite"];
const TYPES: &[&str] = &[
    "string", "integer", "number", "boolean", "object", "array", "null",
];
/// Globs that match every path (globset's `*` also matches `/`; `**/` also nothing).
const EVERY_PATH: &[&str] = &["*", "**", "**/*"];
/// Bytes of a command name the kernel keeps (`TASK_COMM_LEN` - 1, proc(5) `comm`).
const COMM_MAX: usize = 15;

/// A JSON value of the rules text, with the byte offset where it starts.
#[derive(Debug)]
struct Node {
    at: usize,
    kind: Kind,
}

#[derive(Debug)]
enum Kind {
    Null,
    Bool,
    Number(Option<serde_json::Number>),
    Str(String),
    Array(Vec<Node>),
    Object(Vec<Member>),
}

/// A key of an object, where it starts, and its value.
#[derive(Debug)]
struct Member {
    key: String,
    at: usize,
    value: Node,
}

impl Node {
    /// The value of the first `key` of an object.
    fn get(&self, key: &str) -> Option<&Node> {
        self.members()?
            .iter()
            .find(|m| m.key == key)
            .map(|m| &m.value)
    }

    /// The first member named `key` of an object.
    fn member(&self, key: &str) -> Option<&Member> {
        self.members()?.iter().find(|m| m.key == key)
    }

    fn members(&self) -> Option<&[Member]> {
        match &self.kind {
            Kind::Object(m) => Some(m),
            _ => None,
        }
    }

    fn items(&self) -> Option<&[Node]> {
        match &self.kind {
            Kind::Array(v) => Some(v),
            _ => None,
        }
    }

    fn str(&self) -> Option<&str> {
        match &self.kind {
            Kind::Str(s) => Some(s),
            _ => None,
        }
    }

    /// What the value is, for messages: `an array`, `"readonly"`, `3.5`.
    fn shown(&self) -> String {
        match &self.kind {
            Kind::Null => "null".into(),
            Kind::Bool => "a boolean".into(),
            Kind::Number(Some(n)) => n.to_string(),
            Kind::Number(None) => "a number".into(),
            Kind::Str(s) => format!("{s:?}"),
            Kind::Array(_) => "an array".into(),
            Kind::Object(_) => "an object".into(),
        }
    }
}

/// Scans a text that serde_json has already parsed (so it is valid JSON) into [`Node`]s.
/// Defensive all the same: an unexpected byte ends the value, it never panics.
struct Scan<'a> {
    b: &'a [u8],
    i: usize,
}

impl Scan<'_> {
    fn peek(&self) -> u8 {
        self.b.get(self.i).copied().unwrap_or(0)
    }

    fn blank(&mut self) {
        while matches!(self.peek(), b' ' | b'\t' | b'\n' | b'\r') {
            self.i += 1;
        }
    }

    fn value(&mut self) -> Node {
        self.blank();
        let at = self.i;
        let kind = match self.peek() {
            b'{' => {
                self.i += 1;
                let mut members = Vec::new();
                loop {
                    self.blank();
                    if self.peek() != b'"' {
                        break;
                    }
                    let key_at = self.i;
                    let key = self.string();
                    self.blank();
                    if self.peek() == b':' {
                        self.i += 1;
                    }
                    let value = self.value();
                    members.push(Member {
                        key,
                        at: key_at,
                        value,
                    });
                    self.blank();
                    if self.peek() == b',' {
                        self.i += 1;
                    }
                }
                if self.peek() == b'}' {
                    self.i += 1;
                }
                Kind::Object(members)
            }
            b'[' => {
                self.i += 1;
                let mut items = Vec::new();
                loop {
                    self.blank();
                    if matches!(self.peek(), b']' | 0) {
                        break;
                    }
                    let before = self.i;
                    items.push(self.value());
                    self.blank();
                    if self.peek() == b',' {
                        self.i += 1;
                    } else if self.i == before {
                        break;
                    }
                }
                if self.peek() == b']' {
                    self.i += 1;
                }
                Kind::Array(items)
            }
            b'"' => Kind::Str(self.string()),
            b't' | b'f' | b'n' => {
                let null = self.peek() == b'n';
                while self.peek().is_ascii_alphabetic() {
                    self.i += 1;
                }
                if null { Kind::Null } else { Kind::Bool }
            }
            _ => {
                while matches!(self.peek(), b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E') {
                    self.i += 1;
                }
                Kind::Number(serde_json::from_slice(&self.b[at..self.i]).ok())
            }
        };
        Node { at, kind }
    }

    /// A string token, decoded by serde_json (escapes and all).
    fn string(&mut self) -> String {
        let start = self.i;
        self.i += 1;
        loop {
            match self.peek() {
                b'\\' => self.i += 2,
                b'"' => {
                    self.i += 1;
                    break;
                }
                0 if self.i >= self.b.len() => break,
                _ => self.i += 1,
            }
        }
        let end = self.i.min(self.b.len());
        serde_json::from_slice(&self.b[start..end]).unwrap_or_default()
    }
}

/// Line and column (1-based; the column in bytes) of byte offset `at` in `text`.
pub(super) fn line_column(text: &str, at: usize) -> (usize, usize) {
    let before = &text.as_bytes()[..at.min(text.len())];
    let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
    let start = before
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |i| i + 1);
    (line, at.min(text.len()) - start + 1)
}

/// The problems found so far.
struct Found<'a> {
    text: &'a str,
    problems: Vec<Problem>,
}

impl Found<'_> {
    fn add(&mut self, severity: Severity, at: usize, message: String) {
        let (line, column) = line_column(self.text, at);
        self.problems.push(Problem {
            line,
            column,
            severity,
            message,
        });
    }

    fn error(&mut self, at: usize, message: String) {
        self.add(Severity::Error, at, message);
    }

    fn warn(&mut self, at: usize, message: String) {
        self.add(Severity::Warning, at, message);
    }

    /// `L:C`, for messages that point at another place.
    fn place(&self, at: usize) -> String {
        let (l, c) = line_column(self.text, at);
        format!("{l}:{c}")
    }

    /// Unknown keys of an object named `what` (each reported, with the allowed keys).
    fn keys(&mut self, node: &Node, what: &str, allowed: &[&str]) {
        for m in node.members().unwrap_or_default() {
            if !allowed.contains(&m.key.as_str()) {
                self.error(
                    m.at,
                    format!(
                        "{what}: unknown key {:?} (expected one of: {})",
                        m.key,
                        allowed.join(", ")
                    ),
                );
            }
        }
    }

    /// A type error unless `ok`.
    fn expect(&mut self, ok: bool, node: &Node, what: &str, expected: &str) -> bool {
        if !ok {
            self.error(
                node.at,
                format!("{what}: expected {expected}, found {}", node.shown()),
            );
        }
        ok
    }

    fn object(&mut self, node: &Node, what: &str) -> bool {
        self.expect(node.members().is_some(), node, what, "an object")
    }

    fn string_list(&mut self, node: &Node, what: &str) {
        if self.expect(node.items().is_some(), node, what, "an array of strings") {
            for (i, item) in node.items().unwrap_or_default().iter().enumerate() {
                self.expect(
                    item.str().is_some(),
                    item,
                    &format!("{what}[{i}]"),
                    "a string",
                );
            }
        }
    }

    fn one_of(&mut self, node: &Node, what: &str, values: &[&str], nullable: bool) {
        if nullable && matches!(node.kind, Kind::Null) {
            return;
        }
        let ok = node.str().is_some_and(|s| values.contains(&s));
        let list: Vec<String> = values.iter().map(|v| format!("{v:?}")).collect();
        self.expect(ok, node, what, &format!("one of {}", list.join(", ")));
    }

    fn integer(&mut self, node: &Node, what: &str, max: u64) {
        let ok = match &node.kind {
            Kind::Null => true,
            Kind::Number(Some(n)) => n.as_u64().is_some_and(|n| n <= max),
            _ => false,
        };
        self.expect(ok, node, what, &format!("an integer from 0 to {max}"));
    }

    fn boolean(&mut self, node: &Node, what: &str, nullable: bool) {
        let ok = matches!(node.kind, Kind::Bool) || (nullable && matches!(node.kind, Kind::Null));
        self.expect(ok, node, what, "true or false");
    }
}

/// Every object's repeated keys, anywhere in the file (serde would refuse some and
/// silently keep one of the others).
fn duplicates(found: &mut Found, node: &Node, what: &str) {
    match &node.kind {
        Kind::Object(members) => {
            let mut first: HashMap<&str, usize> = HashMap::new();
            for m in members {
                if let Some(&at) = first.get(m.key.as_str()) {
                    let noun = match what {
                        "writers" => "writer",
                        w if w.starts_with("paths[") && w.ends_with(".fields") => "field",
                        _ => "key",
                    };
                    let place = found.place(at);
                    found.error(
                        m.at,
                        format!(
                            "{}: duplicate {noun} {:?} (first at {place})",
                            if what.is_empty() { "the file" } else { what },
                            m.key
                        ),
                    );
                } else {
                    first.insert(&m.key, m.at);
                }
                let inner = if what.is_empty() {
                    m.key.clone()
                } else {
                    format!("{what}.{}", m.key)
                };
                duplicates(found, &m.value, &inner);
            }
        }
        Kind::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                duplicates(found, item, &format!("{what}[{i}]"));
            }
        }
        _ => {}
    }
}

/// The shape of the file: keys and types, as [`Rules`] deserializes them.
fn shape(found: &mut Found, root: &Node) {
    found.keys(root, "the file", TOP_KEYS);
    if let Some(w) = root.get("writers")
        && found.object(w, "writers")
    {
        for m in w.members().unwrap_or_default() {
            let what = format!("writers.{}", m.key);
            if !found.object(&m.value, &what) {
                continue;
            }
            found.keys(&m.value, &what, WRITER_KEYS);
            for k in ["model", "exe_any_namespace"] {
                if let Some(v) = m.value.get(k) {
                    found.expect(
                        matches!(v.kind, Kind::Bool),
                        v,
                        &format!("{what}.{k}"),
                        "true or false",
                    );
                }
            }
            for k in MATCHER_KEYS {
                let Some(v) = m.value.get(k) else { continue };
                let at = format!("{what}.{k}");
                if matches!(*k, "uid" | "gid") {
                    found.integer(v, &at, u64::from(u32::MAX));
                } else {
                    let ok = matches!(v.kind, Kind::Str(_) | Kind::Null);
                    found.expect(ok, v, &at, "a string");
                }
            }
        }
    }
    if let Some(paths) = root.get("paths")
        && found.expect(paths.items().is_some(), paths, "paths", "an array of rules")
    {
        for (i, rule) in paths.items().unwrap_or_default().iter().enumerate() {
            let what = format!("paths[{i}]");
            if !found.object(rule, &what) {
                continue;
            }
            found.keys(rule, &what, PATH_KEYS);
            match rule.get("path") {
                Some(p) => {
                    found.expect(p.str().is_some(), p, &format!("{what}.path"), "a glob");
                }
                None => found.error(rule.at, format!("{what}: no \"path\" (its glob)")),
            }
            if let Some(w) = rule.get("writers")
                && !matches!(w.kind, Kind::Null)
            {
                found.string_list(w, &format!("{what}.writers"));
            }
            if let Some(v) = rule.get("mode") {
                found.one_of(v, &format!("{what}.mode"), MODES, false);
            }
            if let Some(v) = rule.get("format") {
                found.one_of(v, &format!("{what}.format"), FORMATS, true);
            }
            if let Some(v) = rule.get("on_conflict") {
                found.one_of(v, &format!("{what}.on_conflict"), CONFLICTS, false);
            }
            if let Some(v) = rule.get("additional_fields") {
                found.boolean(v, &format!("{what}.additional_fields"), true);
            }
            if let Some(v) = rule.get("deny_secrets") {
                found.boolean(v, &format!("{what}.deny_secrets"), false);
            }
            if let Some(v) = rule.get("max_bytes") {
                found.integer(v, &format!("{what}.max_bytes"), u64::MAX);
            }
            if let Some(k) = rule.get("keep")
                && !matches!(k.kind, Kind::Null)
            {
                keep(found, k, &format!("{what}.keep"));
            }
            if let Some(fields) = rule.get("fields")
                && !matches!(fields.kind, Kind::Null)
                && found.object(fields, &format!("{what}.fields"))
            {
                for f in fields.members().unwrap_or_default() {
                    let what = format!("{what}.fields.{}", f.key);
                    if !found.object(&f.value, &what) {
                        continue;
                    }
                    found.keys(&f.value, &what, FIELD_KEYS);
                    if let Some(w) = f.value.get("writers") {
                        found.string_list(w, &format!("{what}.writers"));
                    }
                    if let Some(t) = f.value.get("type") {
                        found.one_of(t, &format!("{what}.type"), TYPES, true);
                    }
                }
            }
        }
    }
    if let Some(e) = root.get("ephemeral") {
        found.string_list(e, "ephemeral");
    }
    if let Some(t) = root.get("manifest_tokens") {
        use crate::views::manifest::{MAX_BUDGET_TOKENS, MIN_BUDGET_TOKENS};
        let ok = match &t.kind {
            Kind::Null => true,
            Kind::Number(Some(n)) => n.as_u64().is_some_and(|n| {
                (MIN_BUDGET_TOKENS as u64..=MAX_BUDGET_TOKENS as u64).contains(&n)
            }),
            _ => false,
        };
        found.expect(
            ok,
            t,
            "manifest_tokens",
            &format!("an integer from {MIN_BUDGET_TOKENS} to {MAX_BUDGET_TOKENS} (MANIFEST's budget in estimated tokens)"),
        );
    }
}

/// A path rule's `keep` (issue 36): `versions` from 1, `days` a number above 0, `bytes`
/// from 0, `including` names of what the limits also apply to.
fn keep(found: &mut Found, k: &Node, what: &str) {
    if !found.object(k, what) {
        return;
    }
    found.keys(k, what, KEEP_KEYS);
    if let Some(v) = k.get("versions") {
        let ok = match &v.kind {
            Kind::Null => true,
            Kind::Number(Some(n)) => n
                .as_u64()
                .is_some_and(|n| (1..=u64::from(u32::MAX)).contains(&n)),
            _ => false,
        };
        found.expect(
            ok,
            v,
            &format!("{what}.versions"),
            &format!(
                "an integer from 1 to {} (the live version is always kept)",
                u32::MAX
            ),
        );
    }
    if let Some(v) = k.get("days") {
        let ok = match &v.kind {
            Kind::Null => true,
            Kind::Number(Some(n)) => n.as_f64().is_some_and(|d| d > 0.0 && d <= MAX_DAYS),
            _ => false,
        };
        found.expect(
            ok,
            v,
            &format!("{what}.days"),
            &format!("a number of days above 0 and at most {MAX_DAYS} (0.5 is twelve hours)"),
        );
    }
    if let Some(v) = k.get("bytes") {
        found.integer(v, &format!("{what}.bytes"), i64::MAX as u64);
    }
    if let Some(list) = k.get("including") {
        let at = format!("{what}.including");
        found.string_list(list, &at);
        for (j, item) in list.items().unwrap_or_default().iter().enumerate() {
            match item.str() {
                Some("checkpointed") => found.error(
                    item.at,
                    format!(
                        "{at}[{j}]: a checkpoint's versions are released by dropping the \
                         checkpoint (scratchfs gc --drop-checkpoint NAME), not by a rule"
                    ),
                ),
                Some(s) if !INCLUDING.contains(&s) => {
                    found.one_of(item, &format!("{at}[{j}]"), INCLUDING, false)
                }
                _ => {}
            }
        }
    }
    let names = |item: &Node| item.str() == Some("refusals");
    if let Some(list) = k.get("including")
        && let Some(r) = list.items().unwrap_or_default().iter().find(|i| names(i))
        && k.get("days").is_none_or(|d| matches!(d.kind, Kind::Null))
    {
        found.warn(
            r.at,
            format!("{what}.including: \"refusals\" without \"days\": refused content is forgotten only by days"),
        );
    }
    let limits = ["versions", "days", "bytes"];
    if !limits
        .iter()
        .any(|l| k.get(l).is_some_and(|v| !matches!(v.kind, Kind::Null)))
        && k.members()
            .is_some_and(|m| m.iter().all(|m| KEEP_KEYS.contains(&m.key.as_str())))
    {
        found.warn(
            k.at,
            format!("{what}: no limit (versions, days, bytes): everything is kept"),
        );
    }
}

/// `quota` (issue 36): `bytes` and `files`, integers from 1.
fn quota(found: &mut Found, root: &Node) {
    let Some(q) = root.get("quota") else { return };
    if matches!(q.kind, Kind::Null) || !found.object(q, "quota") {
        return;
    }
    found.keys(q, "quota", QUOTA_KEYS);
    for key in QUOTA_KEYS {
        let Some(v) = q.get(key) else { continue };
        let ok = match &v.kind {
            Kind::Null => true,
            Kind::Number(Some(n)) => n.as_u64().is_some_and(|n| n >= 1 && n <= i64::MAX as u64),
            _ => false,
        };
        found.expect(
            ok,
            v,
            &format!("quota.{key}"),
            &format!("an integer from 1 to {}", i64::MAX),
        );
    }
}

/// `checkpoints`: an object with `take` and `rollback`, lists of known writers or `*`.
fn checkpoints(found: &mut Found, root: &Node, known: &[String]) {
    let Some(c) = root.get("checkpoints") else {
        return;
    };
    if !found.object(c, "checkpoints") {
        return;
    }
    found.keys(c, "checkpoints", CHECKPOINT_KEYS);
    for key in CHECKPOINT_KEYS {
        let Some(list) = c.get(key) else { continue };
        let what = format!("checkpoints.{key}");
        found.string_list(list, &what);
        for (j, w) in list.items().unwrap_or_default().iter().enumerate() {
            if let Some(name) = w.str()
                && name != "*"
                && !known.iter().any(|k| k == name)
            {
                found.error(w.at, format!("{what}[{j}]: unknown writer {name:?}"));
            }
        }
    }
}

/// A writer's matchers as the caller must have them: the uid from `uid` or `user`.
#[derive(Debug, Default, PartialEq, Eq)]
struct Wants<'a> {
    uid: Option<u32>,
    gid: Option<u32>,
    exe: Option<&'a str>,
    comm: Option<&'a str>,
    env: Option<&'a str>,
    mcp_client: Option<&'a str>,
}

impl Wants<'_> {
    /// Whether every caller `other` matches is matched by `self` too.
    fn covers(&self, other: &Wants) -> bool {
        fn sub<T: PartialEq>(mine: &Option<T>, theirs: &Option<T>) -> bool {
            mine.is_none() || mine == theirs
        }
        sub(&self.uid, &other.uid)
            && sub(&self.gid, &other.gid)
            && sub(&self.exe, &other.exe)
            && sub(&self.comm, &other.comm)
            && sub(&self.env, &other.env)
            && sub(&self.mcp_client, &other.mcp_client)
    }
}

/// The writers: errors (no matchers, `exe` not absolute, unknown user) and the writers
/// that can never name a caller (warnings).
fn writers(found: &mut Found, root: &Node, used: &[String]) {
    let Some(members) = root.get("writers").and_then(Node::members) else {
        return;
    };
    // The writers before this one, first occurrence of each name.
    let mut earlier: Vec<(&str, usize, Wants)> = Vec::new();
    // Writers only self-set matchers identify (env, comm, mcp_client), at their place.
    let mut self_set: Vec<(&str, usize)> = Vec::new();
    // The group of each set-group-ID `exe`, by writer, to tell writers that share one.
    let mut tool_groups: Vec<(u32, String)> = Vec::new();
    for m in members {
        let name = &m.key;
        // A name defined twice is an error already (only its first definition counts).
        if m.value.members().is_none() || earlier.iter().any(|(n, _, _)| n == name) {
            continue;
        }
        let s = |k: &str| m.value.get(k).and_then(Node::str);
        let n = |k: &str| match m.value.get(k).map(|v| &v.kind) {
            Some(Kind::Number(Some(n))) => n.as_u64().and_then(|n| u32::try_from(n).ok()),
            _ => None,
        };
        let mut wants = Wants {
            uid: n("uid"),
            gid: n("gid"),
            exe: s("exe"),
            comm: s("comm"),
            env: s("env"),
            mcp_client: s("mcp_client"),
        };
        let user = m.value.get("user").filter(|v| v.str().is_some());
        // A matcher of the wrong type is an error already.
        let given =
            m.value.members().unwrap_or_default().iter().any(|k| {
                MATCHER_KEYS.contains(&k.key.as_str()) && !matches!(k.value.kind, Kind::Null)
            });
        if !given {
            found.error(m.at, format!("writer {name:?} has no matchers"));
            continue;
        }
        let mut never: Option<(usize, String)> = None;
        if let Some(u) = user {
            let uname = u.str().unwrap_or_default();
            match super::user_uid(uname) {
                None => found.error(u.at, format!("writer {name:?}: no such user {uname:?}")),
                Some(uid) if wants.uid.is_some_and(|w| w != uid) => {
                    never = Some((
                        u.at,
                        format!(
                            "user {uname:?} is uid {uid}, not the uid {} it also asks for",
                            wants.uid.unwrap_or_default()
                        ),
                    ));
                }
                Some(uid) => wants.uid = Some(uid),
            }
        }
        if let Some(exe) = m.value.get("exe").filter(|v| v.str().is_some()) {
            let path = exe.str().unwrap_or_default();
            if !path.starts_with('/') {
                found.error(
                    exe.at,
                    format!("writer {name:?}: exe must be an absolute path"),
                );
            } else if !canonical(path) {
                never = Some((
                    exe.at,
                    format!("exe {path:?} is not a canonical path, and /proc/PID/exe always is"),
                ));
            } else if let Ok(target) = std::fs::canonicalize(path)
                && target.as_os_str() != path
            {
                never = Some((
                    exe.at,
                    format!(
                        "exe {path:?} is a link to {:?} on this machine, and /proc/PID/exe \
                         names the target",
                        target.display().to_string()
                    ),
                ));
            } else if let Ok(meta) = std::fs::metadata(path)
                && meta.is_file()
                && std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o2010 == 0o2010
            {
                let gid = std::os::unix::fs::MetadataExt::gid(&meta);
                if let Some((_, other)) = tool_groups.iter().find(|(g, w)| *g == gid && w != name) {
                    found.warn(
                        exe.at,
                        format!(
                            "writer {name:?}: exe {path:?} is set-group-ID to group {gid}, as \
                             writer {other:?}'s is: a process of either tool has that group, so \
                             what one can make (a set-group-ID file, a program it runs) may pass \
                             as the other; give each tool a group of its own (docs/rules.md)"
                        ),
                    );
                }
                tool_groups.push((gid, name.clone()));
            } else if let Ok(meta) = std::fs::metadata(path)
                && meta.is_file()
                && std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o4000 == 0
            {
                // Neither set-user-ID nor set-group-ID with group execute (without it the
                // kernel does not honour the bit, execve(2)).
                found.warn(
                    exe.at,
                    format!(
                        "writer {name:?}: exe {path:?} is neither set-user-ID nor set-group-ID \
                         on this machine, so only root's processes of it match: a process \
                         another user runs is that user's to control (docs/rules.md, \
                         \"Which matchers the kernel vouches for\")"
                    ),
                );
            }
        }
        if let Some(comm) = m.value.get("comm").filter(|v| v.str().is_some()) {
            let c = comm.str().unwrap_or_default();
            if c.len() > COMM_MAX {
                never = Some((
                    comm.at,
                    format!(
                        "comm {c:?} is {} bytes, and the kernel keeps {COMM_MAX} of a command name",
                        c.len()
                    ),
                ));
            }
        }
        if let Some(env) = m.value.get("env").filter(|v| v.str().is_some()) {
            let e = env.str().unwrap_or_default();
            if let Some(kind) = super::enforce::secret_in(e.as_bytes()) {
                never = Some((
                    env.at,
                    format!(
                        "env holds {kind}, and a SCRATCHFS_WRITER value holding a secret is \
                         redacted before it is matched"
                    ),
                ));
            }
        }
        if never.is_none()
            && let Some((first, at, _)) = earlier.iter().find(|(_, _, w)| w.covers(&wants))
        {
            never = Some((
                m.at,
                format!(
                    "every caller it matches is writer {first:?} (at {}) first, and the first \
                     writer that matches names the caller",
                    found.place(*at)
                ),
            ));
        }
        if let Some((at, why)) = never {
            found.warn(at, format!("writer {name:?} never matches: {why}"));
        } else if !used.contains(name) {
            found.warn(
                m.at,
                format!(
                    "writer {name:?} is named in no rule's writers (it only names callers in \
                     provenance)"
                ),
            );
        }
        let kernel = wants.uid.is_some() || wants.gid.is_some() || wants.exe.is_some();
        if !kernel {
            self_set.push((name, m.at));
        } else if let Some(uid) = wants.uid.filter(|&u| u != 0) {
            // A process of this uid that sets a self-set writer's tags is that writer, not
            // this one: the first writer that matches names it.
            for (w, at) in &self_set {
                found.warn(
                    *at,
                    format!(
                        "writer {w:?} is identified only by matchers a process sets itself (env, \
                         comm, mcp_client): a process of uid {uid} (writer {name:?}, listed after \
                         it) that sets them is {w:?}; list {name:?} first, or pin {w:?} with uid, \
                         gid or exe (docs/rules.md, \"Which matchers the kernel vouches for\")"
                    ),
                );
            }
        }
        earlier.push((name, m.at, wants));
    }
}

/// Whether an absolute path is canonical as the kernel prints it: no empty, `.` or `..`
/// component, no trailing `/`.
fn canonical(path: &str) -> bool {
    path == "/"
        || path
            .strip_prefix('/')
            .is_some_and(|rest| rest.split('/').all(|c| !matches!(c, "" | "." | "..")))
}

/// Why `glob` can never match a path under the mount (paths are relative, `/`-separated,
/// without empty, `.` or `..` components), if it cannot.
fn never_matches(glob: &str) -> Option<&'static str> {
    if glob.is_empty() {
        Some("an empty glob matches no path")
    } else if glob.starts_with('/') {
        Some("paths are matched without a leading \"/\" (write \"plan.md\", not \"/plan.md\")")
    } else if glob.ends_with('/') {
        Some("no path ends with \"/\" (a directory is matched by its name)")
    } else if glob.contains("//") {
        Some("no path holds \"//\"")
    } else if glob.split('/').any(|c| c == "." || c == "..") {
        Some("no path holds a \".\" or \"..\" component")
    } else {
        None
    }
}

/// Whether `glob` has no glob syntax (it matches exactly one path: itself).
fn literal(glob: &str) -> bool {
    !glob.contains(['*', '?', '[', ']', '{', '}', '\\'])
}

/// Why no path `glob` matches can be a file's, if it matches only names reserved for
/// views (`views::is_reserved`): `MANIFEST`, `.history` and `.archive` at the root, and
/// every name ending in `.outline`. No file is ever at such a path, so a rule for it never
/// applies.
fn names_a_view(glob: &str) -> Option<&'static str> {
    match glob.split('/').next().unwrap_or_default() {
        _ if glob == "MANIFEST" => Some("MANIFEST is the view scratchfs serves at the root"),
        ".history" => Some(".history is the view of every version, served by scratchfs"),
        ".archive" => Some(".archive is the view of deleted files, served by scratchfs"),
        _ if glob.ends_with(".outline") => {
            Some("names ending in \".outline\" are reserved for outline views")
        }
        _ => None,
    }
}

/// The path rules and ephemeral globs: unknown writers, invalid, duplicate and shadowed
/// globs, `fields` without `format: json`.
fn paths(found: &mut Found, root: &Node, known: &[String]) {
    let rules = root.get("paths").and_then(Node::items).unwrap_or_default();
    // (index, glob, where, compiled), for the rules before this one.
    let mut earlier: Vec<(usize, &str, usize, Option<globset::GlobMatcher>)> = Vec::new();
    let check_writers = |found: &mut Found, list: Option<&Node>, what: &str| {
        for (j, w) in list
            .and_then(Node::items)
            .unwrap_or_default()
            .iter()
            .enumerate()
        {
            if let Some(name) = w.str()
                && name != "*"
                && !known.iter().any(|k| k == name)
            {
                found.error(w.at, format!("{what}[{j}]: unknown writer {name:?}"));
            }
        }
    };
    for (i, rule) in rules.iter().enumerate() {
        let what = format!("paths[{i}]");
        check_writers(found, rule.get("writers"), &format!("{what}.writers"));
        if let Some(fields) = rule.member("fields")
            && let Some(members) = fields.value.members()
        {
            for f in members {
                check_writers(
                    found,
                    f.value.get("writers"),
                    &format!("{what}.fields.{}.writers", f.key),
                );
            }
            if rule.get("format").and_then(Node::str) != Some("json") {
                found.error(
                    fields.at,
                    format!("{what}.fields needs \"format\": \"json\""),
                );
            }
        }
        let Some(node) = rule.get("path") else {
            continue;
        };
        let Some(glob) = node.str() else { continue };
        let compiled = match globset::Glob::new(glob) {
            Ok(g) => Some(g.compile_matcher()),
            Err(e) => {
                found.error(node.at, format!("{what}.path: {e}"));
                None
            }
        };
        if let Some((k, _, at, _)) = earlier.iter().find(|(_, g, _, _)| *g == glob) {
            let place = found.place(*at);
            found.error(
                node.at,
                format!(
                    "{what}.path: duplicate glob {glob:?} (paths[{k}], at {place}): the first \
                     rule whose glob matches applies, so this one never would"
                ),
            );
        } else if compiled.is_some() {
            if let Some(why) = never_matches(glob) {
                found.warn(
                    node.at,
                    format!("{what}.path: {glob:?} never matches: {why}"),
                );
            } else if let Some(why) = names_a_view(glob) {
                found.warn(
                    node.at,
                    format!("{what}.path: rule {glob:?} never applies: {why}, never a file"),
                );
            } else if let Some((k, g, at, _)) = earlier.iter().find(|(_, g, _, m)| {
                EVERY_PATH.contains(g)
                    || (literal(glob) && m.as_ref().is_some_and(|m| m.is_match(glob)))
            }) {
                let place = found.place(*at);
                found.warn(
                    node.at,
                    format!(
                        "{what}.path: rule {glob:?} never applies: paths[{k}] ({g:?}, at \
                         {place}) matches {} first, and the first rule whose glob matches \
                         applies",
                        if EVERY_PATH.contains(g) {
                            "every path"
                        } else {
                            "it"
                        }
                    ),
                );
            }
        }
        earlier.push((i, glob, node.at, compiled));
    }
    let ephemeral = root
        .get("ephemeral")
        .and_then(Node::items)
        .unwrap_or_default();
    for (j, node) in ephemeral.iter().enumerate() {
        let Some(glob) = node.str() else { continue };
        if let Err(e) = globset::Glob::new(glob) {
            found.error(node.at, format!("ephemeral[{j}]: {e}"));
        } else if let Some(why) = never_matches(glob) {
            found.warn(
                node.at,
                format!("ephemeral[{j}]: {glob:?} never matches: {why}"),
            );
        }
    }
}

/// The writer names the rules give permissions to (`writers` of path rules and fields,
/// `checkpoints.take` and `checkpoints.rollback`).
fn named_writers(root: &Node) -> Vec<String> {
    let mut used = Vec::new();
    let mut add = |list: Option<&Node>| {
        for w in list.and_then(Node::items).unwrap_or_default() {
            if let Some(s) = w.str() {
                used.push(s.to_string());
            }
        }
    };
    for rule in root.get("paths").and_then(Node::items).unwrap_or_default() {
        add(rule.get("writers"));
        for f in rule
            .get("fields")
            .and_then(Node::members)
            .unwrap_or_default()
        {
            add(f.value.get("writers"));
        }
    }
    if let Some(c) = root.get("checkpoints") {
        for key in CHECKPOINT_KEYS {
            add(c.get(key));
        }
    }
    used
}

/// Checks a rules text: every problem, by position (module docs).
pub fn check(text: &str) -> Checked {
    let mut found = Found {
        text,
        problems: Vec::new(),
    };
    // Bounds first: the checks below walk the text recursively and compare rules pairwise.
    let refuse = |found: &mut Found, at: usize, message: String| {
        found.error(at, message);
        Checked {
            rules: None,
            problems: std::mem::take(&mut found.problems),
        }
    };
    if text.len() > MAX_RULES_BYTES {
        return refuse(
            &mut found,
            0,
            format!(
                "the file is {} bytes; a rules file may have at most {MAX_RULES_BYTES}",
                text.len()
            ),
        );
    }
    if let Some(at) = too_deep(text.as_bytes()) {
        return refuse(
            &mut found,
            at,
            format!("values nested deeper than {MAX_DEPTH} levels"),
        );
    }
    if let Err(e) = serde_json::from_str::<serde::de::IgnoredAny>(text) {
        found.problems.push(Problem {
            line: e.line(),
            column: e.column().max(1),
            severity: Severity::Error,
            message: serde_message(&e),
        });
        return Checked {
            rules: None,
            problems: found.problems,
        };
    }
    let root = Scan {
        b: text.as_bytes(),
        i: 0,
    }
    .value();
    if root.members().is_none() {
        found.error(
            root.at,
            format!(
                "the rules must be a JSON object with \"writers\", \"paths\" and \"ephemeral\" \
                 (SPEC §5), not {}",
                root.shown()
            ),
        );
    } else {
        duplicates(&mut found, &root, "");
        shape(&mut found, &root);
        let known: Vec<String> = root
            .get("writers")
            .and_then(Node::members)
            .unwrap_or_default()
            .iter()
            .map(|m| m.key.clone())
            .collect();
        writers(&mut found, &root, &named_writers(&root));
        paths(&mut found, &root, &known);
        checkpoints(&mut found, &root, &known);
        quota(&mut found, &root);
    }
    let mut rules = None;
    if !found.problems.iter().any(|p| p.severity == Severity::Error) {
        match serde_json::from_str::<Rules>(text) {
            Ok(r) => rules = Some(r),
            // What the checks above missed, if anything: serde's word for it.
            Err(e) => found.problems.push(Problem {
                line: e.line(),
                column: e.column().max(1),
                severity: Severity::Error,
                message: serde_message(&e),
            }),
        }
    }
    found.problems.sort_by_key(|p| (p.line, p.column));
    Checked {
        rules,
        problems: found.problems,
    }
}

/// serde_json's message without its ` at line L column C` (the position is the Problem's).
fn serde_message(e: &serde_json::Error) -> String {
    let text = e.to_string();
    match text.rfind(" at line ") {
        Some(i) => text[..i].to_string(),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `(line, column, message)` of each problem, warnings with `warning: `.
    fn problems(text: &str) -> Vec<(usize, usize, String)> {
        check(text)
            .problems
            .into_iter()
            .map(|p| {
                let m = match p.severity {
                    Severity::Error => p.message,
                    Severity::Warning => format!("warning: {}", p.message),
                };
                (p.line, p.column, m)
            })
            .collect()
    }

    /// The one problem of `text`.
    fn one(text: &str) -> (usize, usize, String) {
        let p = problems(text);
        assert_eq!(p.len(), 1, "{text}: {p:#?}");
        p.into_iter().next().unwrap()
    }

    #[test]
    fn deep_nesting_and_huge_files_are_refused_not_a_crash() {
        let deep = format!(
            "{{\"writers\":{}{}}}",
            "[".repeat(30_000),
            "]".repeat(30_000)
        );
        let (line, col, msg) = one(&deep);
        // The object is level 1: the 128th `[` is the 129th level, at byte 11 + 127.
        assert_eq!((line, col), (1, 11 + MAX_DEPTH));
        assert!(msg.contains("nested deeper than 128"), "{msg}");
        // Brackets inside strings do not count.
        let quoted = format!("{{\"paths\": [{{\"path\": \"{}\"}}]}}", "[".repeat(500));
        assert!(!problems(&quoted).iter().any(|p| p.2.contains("nested")));
        let big = format!("{{\"paths\": []{}}}", " ".repeat(MAX_RULES_BYTES));
        assert!(one(&big).2.contains("at most 1048576"));
    }

    #[test]
    fn the_spec_example_has_no_problem() {
        let c = check(include_str!("../../examples/spec-rules.json"));
        assert!(c.problems.is_empty(), "{:#?}", c.problems);
        assert!(c.rules.is_some());
    }

    #[test]
    fn syntax_errors_are_serde_jsons() {
        let (l, c, m) = one("{\n  \"paths\": [,]\n}");
        assert_eq!((l, c), (2, 13));
        assert_eq!(m, "expected value");
        let (l, c, m) = one("");
        assert_eq!((l, c), (1, 1), "a column, never 0");
        assert_eq!(m, "EOF while parsing a value");
        let (_, _, m) = one("{} {}");
        assert_eq!(m, "trailing characters");
    }

    #[test]
    fn the_top_level_must_be_an_object() {
        for (text, shown, column) in [
            ("[]", "an array", 1),
            ("  3", "3", 3),
            ("\"rules\"", "\"rules\"", 1),
            ("null", "null", 1),
            ("true", "a boolean", 1),
        ] {
            let (l, c, m) = one(text);
            assert_eq!((l, c), (1, column), "{text}");
            assert!(m.starts_with("the rules must be a JSON object"), "{m}");
            assert!(m.ends_with(&format!("not {shown}")), "{m}");
        }
        assert!(check("[]").rules.is_none());
    }

    #[test]
    fn duplicate_keys_at_every_level() {
        let text = r#"{
  "writers": { "a": { "uid": 1, "uid": 2 }, "a": { "uid": 3 } },
  "paths": [
    { "path": "s.json", "format": "json", "path": "t.json",
      "fields": { "k": { "writers": ["a"], "writers": ["*"] }, "k": {} } },
    { "path": "s.json" }
  ],
  "paths": []
}"#;
        assert_eq!(
            problems(text),
            vec![
                (2, 33, r#"writers.a: duplicate key "uid" (first at 2:23)"#.into()),
                (2, 45, r#"writers: duplicate writer "a" (first at 2:16)"#.into()),
                (4, 43, r#"paths[0]: duplicate key "path" (first at 4:7)"#.into()),
                (
                    5,
                    44,
                    r#"paths[0].fields.k: duplicate key "writers" (first at 5:26)"#.into()
                ),
                (
                    5,
                    64,
                    r#"paths[0].fields: duplicate field "k" (first at 5:19)"#.into()
                ),
                (
                    6,
                    15,
                    r#"paths[1].path: duplicate glob "s.json" (paths[0], at 4:15): the first rule whose glob matches applies, so this one never would"#.into()
                ),
                (8, 3, r#"the file: duplicate key "paths" (first at 3:3)"#.into()),
            ]
        );
        // Also inside values no rule reads.
        let p = problems(r#"{"paths": [{"path": "**"}], "x": {"y": 1, "y": 2}}"#);
        assert_eq!(
            p[1],
            (1, 43, r#"x: duplicate key "y" (first at 1:35)"#.into())
        );
    }

    #[test]
    fn every_unknown_key_and_wrong_type_is_reported() {
        let text = r#"{
  "writer": {},
  "writers": { "a": { "uid": "1000", "exe": 3, "euid": 0 } },
  "paths": [
    { "path": "x/*", "writers": "a", "mdoe": "x", "mode": "readonly", "format": "yaml",
      "max_bytes": -1, "deny_secrets": "yes", "on_conflict": null, "additional_fields": 1 },
    { "path": "s.json", "format": "json", "fields": { "k": { "writer": ["a"], "type": "int" } } },
    { "writers": ["a"] },
    3,
    { "path": 7 }
  ],
  "ephemeral": ["*.swp", false],
  "manifest_tokens": 20
}"#;
        let got: Vec<String> = problems(text)
            .into_iter()
            .map(|(l, c, m)| format!("{l}:{c}: {m}"))
            .collect();
        let want = [
            r#"2:3: the file: unknown key "writer" (expected one of: writers, paths, ephemeral, manifest_tokens, checkpoints, quota)"#,
            r#"3:30: writers.a.uid: expected an integer from 0 to 4294967295, found "1000""#,
            r#"3:45: writers.a.exe: expected a string, found 3"#,
            r#"3:48: writers.a: unknown key "euid" (expected one of: uid, gid, user, exe, comm, env, mcp_client, model, exe_any_namespace)"#,
            r#"5:33: paths[0].writers: expected an array of strings, found "a""#,
            r#"5:38: paths[0]: unknown key "mdoe" (expected one of: path, writers, mode, format, fields, additional_fields, max_bytes, deny_secrets, on_conflict, keep)"#,
            r#"5:59: paths[0].mode: expected one of "read-write", "append-only", "write-once", "read-only", found "readonly""#,
            r#"5:81: paths[0].format: expected one of "json", "jsonl", "markdown", "text", found "yaml""#,
            r#"6:20: paths[0].max_bytes: expected an integer from 0 to 18446744073709551615, found -1"#,
            r#"6:40: paths[0].deny_secrets: expected true or false, found "yes""#,
            r#"6:62: paths[0].on_conflict: expected one of "refuse", "overwrite", found null"#,
            r#"6:89: paths[0].additional_fields: expected true or false, found 1"#,
            r#"7:62: paths[1].fields.k: unknown key "writer" (expected one of: writers, type)"#,
            r#"7:87: paths[1].fields.k.type: expected one of "string", "integer", "number", "boolean", "object", "array", "null", found "int""#,
            r#"8:5: paths[2]: no "path" (its glob)"#,
            r#"9:5: paths[3]: expected an object, found 3"#,
            r#"10:15: paths[4].path: expected a glob, found 7"#,
            r#"12:26: ephemeral[1]: expected a string, found a boolean"#,
            r#"13:22: manifest_tokens: expected an integer from 100 to 1000000 (MANIFEST's budget in estimated tokens), found 20"#,
        ];
        assert_eq!(got, want, "{got:#?}");
        assert!(check(text).rules.is_none());
    }

    #[test]
    fn keep_and_quota_are_checked_key_by_key() {
        let text = r#"{"paths": [
  {"path": "logs/**", "keep": {"versions": 0, "days": -1, "bytes": "1k", "ages": 3,
                               "including": ["checkpointed", "inputs", "reads"]}},
  {"path": "a/**", "keep": {}},
  {"path": "b/**", "keep": [5]},
  {"path": "c/**", "keep": {"versions": 1, "including": ["refusals"]}},
  {"path": "**", "keep": {"versions": 5, "days": 0.5, "bytes": 1000000,
                          "including": ["inputs", "refusals"]}}],
 "quota": {"bytes": 0, "files": 1.5, "inodes": 3}}"#;
        let got: Vec<String> = problems(text)
            .into_iter()
            .map(|(l, c, m)| format!("{l}:{c}: {m}"))
            .collect();
        let want = [
            r#"2:44: paths[0].keep.versions: expected an integer from 1 to 4294967295 (the live version is always kept), found 0"#,
            r#"2:55: paths[0].keep.days: expected a number of days above 0 and at most 365250 (0.5 is twelve hours), found -1"#,
            r#"2:68: paths[0].keep.bytes: expected an integer from 0 to 9223372036854775807, found "1k""#,
            r#"2:74: paths[0].keep: unknown key "ages" (expected one of: versions, days, bytes, including)"#,
            r#"3:46: paths[0].keep.including[0]: a checkpoint's versions are released by dropping the checkpoint (scratchfs gc --drop-checkpoint NAME), not by a rule"#,
            r#"3:72: paths[0].keep.including[2]: expected one of "inputs", "refusals", found "reads""#,
            r#"4:28: warning: paths[1].keep: no limit (versions, days, bytes): everything is kept"#,
            r#"5:28: paths[2].keep: expected an object, found an array"#,
            r#"6:58: warning: paths[3].keep.including: "refusals" without "days": refused content is forgotten only by days"#,
            r#"9:21: quota.bytes: expected an integer from 1 to 9223372036854775807, found 0"#,
            r#"9:33: quota.files: expected an integer from 1 to 9223372036854775807, found 1.5"#,
            r#"9:38: quota: unknown key "inodes" (expected one of: bytes, files)"#,
        ];
        assert_eq!(got, want, "{got:#?}");
        let ok = check(
            r#"{"paths": [{"path": "**", "keep": {"versions": 5, "days": 0.5, "bytes": 0,
                 "including": ["refusals"]}}], "quota": {"bytes": 50000000, "files": 1000}}"#,
        );
        let rules = ok.rules.expect("valid");
        let keep = rules.paths[0].keep.as_ref().unwrap();
        assert_eq!(keep.versions, Some(5));
        assert_eq!(keep.max_age_ns(), Some(43_200_000_000_000));
        assert_eq!(keep.including, [crate::rules::Including::Refusals]);
        assert_eq!(rules.quota.unwrap().files, Some(1000));
    }

    #[test]
    fn checkpoints_name_known_writers() {
        let p = problems(
            r#"{"writers": {"a": {"uid": 1}, "c": {"uid": 3}},
  "checkpoints": {"take": ["a", "b"], "rollback": "a", "undo": []},
  "paths": [{"path": "**"}]}"#,
        );
        let got: Vec<String> = p
            .into_iter()
            .map(|(l, c, m)| format!("{l}:{c}: {m}"))
            .collect();
        assert_eq!(
            got,
            [
                r#"1:31: warning: writer "c" is named in no rule's writers (it only names callers in provenance)"#,
                r#"2:33: checkpoints.take[1]: unknown writer "b""#,
                r#"2:51: checkpoints.rollback: expected an array of strings, found "a""#,
                r#"2:56: checkpoints: unknown key "undo" (expected one of: take, rollback)"#,
            ],
            "{got:#?}"
        );
        let ok = check(
            r#"{"writers": {"a": {"uid": 1}}, "checkpoints": {"take": ["*"], "rollback": ["a"]},
                "paths": [{"path": "**"}]}"#,
        );
        assert_eq!(
            ok.rules.unwrap().checkpoints.rollback,
            vec!["a".to_string()]
        );
    }

    #[test]
    fn nulls_are_accepted_where_serde_takes_them() {
        let c = check(
            r#"{"writers": {"a": {"uid": 1, "gid": null, "exe": null}},
                "paths": [{"path": "**", "writers": null, "format": null, "fields": null,
                           "additional_fields": null, "max_bytes": null},
                          {"path": "x", "format": "json", "fields": {"k": {"writers": ["a"], "type": null}}}]}"#,
        );
        let errors: Vec<_> = c.errors().collect();
        assert!(errors.is_empty(), "{errors:#?}");
        assert!(c.rules.is_some());
    }

    #[test]
    fn meaning_errors_point_at_their_value() {
        let text = r#"{
  "writers": { "a": { "uid": 1 }, "none": {}, "rel": { "exe": "bin/python3" },
               "who": { "user": "no-such-user-here" } },
  "paths": [
    { "path": "a[", "writers": ["a", "b"] },
    { "path": "s.json", "fields": { "k": { "writers": ["*", "c"] } } },
    { "path": "**", "writers": ["none", "rel", "who"] }
  ],
  "ephemeral": ["x{"]
}"#;
        let got: Vec<String> = problems(text)
            .into_iter()
            .map(|(l, c, m)| format!("{l}:{c}: {m}"))
            .collect();
        let want = [
            r#"2:35: writer "none" has no matchers"#,
            r#"2:63: writer "rel": exe must be an absolute path"#,
            r#"3:33: writer "who": no such user "no-such-user-here""#,
            r#"5:15: paths[0].path: error parsing glob 'a[': unclosed character class; missing ']'"#,
            r#"5:38: paths[0].writers[1]: unknown writer "b""#,
            r#"6:25: paths[1].fields needs "format": "json""#,
            r#"6:61: paths[1].fields.k.writers[1]: unknown writer "c""#,
            r#"9:17: ephemeral[0]: error parsing glob 'x{': unclosed alternate group; missing '}' (maybe escape '{' with '[{]'?)"#,
        ];
        assert_eq!(got, want, "{got:#?}");
    }

    #[test]
    fn writers_that_never_match_are_warnings() {
        let dir = tempfile::tempdir().unwrap();
        let link = dir.path().join("py");
        std::os::unix::fs::symlink("/bin/sh", &link).unwrap();
        let target = std::fs::canonicalize("/bin/sh").unwrap();
        let text = format!(
            r#"{{
  "writers": {{
    "agent": {{ "uid": 1000 }},
    "tool": {{ "uid": 1000, "env": "tool" }},
    "root": {{ "user": "root", "uid": 5 }},
    "zero": {{ "uid": 0 }},
    "admin": {{ "user": "root", "env": "admin" }},
    "long": {{ "comm": "a-very-long-command" }},
    "dots": {{ "exe": "/usr/bin/../bin/env" }},
    "link": {{ "exe": "{}" }},
    "leak": {{ "env": "ghp_{}" }},
    "spare": {{ "gid": 7 }},
    "claude": {{ "mcp_client": "claude-code" }},
    "cursor": {{ "mcp_client": "cursor" }}
  }},
  "paths": [ {{ "path": "**",
    "writers": ["agent", "tool", "root", "zero", "admin", "long", "dots", "link", "leak",
      "claude", "cursor"] }} ]
}}"#,
            link.display(),
            "a".repeat(36)
        );
        let c = check(&text);
        assert!(c.rules.is_some(), "warnings only: {:#?}", c.problems);
        let got: Vec<String> = c
            .problems
            .iter()
            .map(|p| {
                assert_eq!(p.severity, Severity::Warning, "{p}");
                format!("{}:{}: {}", p.line, p.column, p.message)
            })
            .collect();
        let want = [
            r#"4:5: writer "tool" never matches: every caller it matches is writer "agent" (at 3:5) first, and the first writer that matches names the caller"#.to_string(),
            r#"5:23: writer "root" never matches: user "root" is uid 0, not the uid 5 it also asks for"#.into(),
            r#"7:5: writer "admin" never matches: every caller it matches is writer "zero" (at 6:5) first, and the first writer that matches names the caller"#.into(),
            r#"8:23: writer "long" never matches: comm "a-very-long-command" is 19 bytes, and the kernel keeps 15 of a command name"#.into(),
            r#"9:22: writer "dots" never matches: exe "/usr/bin/../bin/env" is not a canonical path, and /proc/PID/exe always is"#.into(),
            format!(
                r#"10:22: writer "link" never matches: exe "{}" is a link to "{}" on this machine, and /proc/PID/exe names the target"#,
                link.display(),
                target.display()
            ),
            r#"11:22: writer "leak" never matches: env holds a GitHub token, and a SCRATCHFS_WRITER value holding a secret is redacted before it is matched"#.into(),
            r#"12:5: writer "spare" is named in no rule's writers (it only names callers in provenance)"#.into(),
        ];
        assert_eq!(got, want, "{got:#?}");
        // A tool binary any user runs as itself: only root's processes of it match.
        let dir = tempfile::tempdir().unwrap();
        let tool = dir.path().join("tool");
        std::fs::write(&tool, b"#!/bin/true\n").unwrap();
        let mode = |m| {
            std::fs::set_permissions(&tool, std::os::unix::fs::PermissionsExt::from_mode(m))
                .unwrap()
        };
        mode(0o755);
        let text = format!(
            r#"{{"writers": {{"tool": {{"exe": "{}"}}}}, "paths": [{{"path": "**", "writers": ["tool"]}}]}}"#,
            tool.display()
        );
        let c = check(&text);
        let got: Vec<String> = c.problems.iter().map(|p| p.message.clone()).collect();
        assert_eq!(
            got,
            [format!(
                r#"writer "tool": exe "{}" is neither set-user-ID nor set-group-ID on this machine, so only root's processes of it match: a process another user runs is that user's to control (docs/rules.md, "Which matchers the kernel vouches for")"#,
                tool.display()
            )]
        );
        mode(0o2745);
        assert_eq!(
            check(&text).problems.len(),
            1,
            "set-group-ID without group execute"
        );
        mode(0o2755);
        assert!(check(&text).problems.is_empty(), "set-group-ID: no warning");
        // Two tools of one group: each can pass as the other.
        let text2 = format!(
            r#"{{"writers": {{"tool": {{"exe": "{0}"}}, "twin": {{"exe": "{0}", "env": "t"}}}},
                "paths": [{{"path": "**", "writers": ["tool", "twin"]}}]}}"#,
            tool.display()
        );
        let got: Vec<String> = check(&text2)
            .problems
            .iter()
            .map(|p| p.message.clone())
            .collect();
        assert!(
            got.iter().any(|m| m.starts_with(r#"writer "twin": exe"#)
                && m.contains(r#"as writer "tool"'s is"#)),
            "{got:#?}"
        );
        // Not shadowed: a narrower writer first, or a different value.
        let c = check(
            r#"{"writers": {"tool": {"uid": 1000, "env": "tool"}, "agent": {"uid": 1000},
                            "other": {"uid": 1001}, "bin": {"exe": "/"}},
                "paths": [{"path": "**", "writers": ["tool", "agent", "other", "bin"]}]}"#,
        );
        assert!(c.problems.is_empty(), "{:#?}", c.problems);
    }

    /// Issue 31: a writer only self-set matchers name is claimed by any process that sets
    /// them, the agent's uid included when its writer is listed after it.
    #[test]
    fn a_writer_only_self_set_matchers_name_warns_when_a_later_uid_can_claim_it() {
        let c = check(
            r#"{"writers": {"tool": {"env": "tool"}, "agent": {"uid": 1000}, "admin": {"uid": 0}},
                "paths": [{"path": "**", "writers": ["tool", "agent", "admin"]}]}"#,
        );
        let got: Vec<String> = c.problems.iter().map(|p| p.to_string()).collect();
        assert_eq!(got.len(), 1, "{got:#?}");
        assert!(
            got[0].starts_with(
                "1:14: warning: writer \"tool\" is identified only by matchers a \
                                process sets itself"
            ) && got[0].contains("a process of uid 1000 (writer \"agent\", listed after it)"),
            "{got:#?}"
        );
        // The agent's writer first (the SPEC example's order), or the tool pinned: none.
        for ok in [
            r#"{"writers": {"agent": {"uid": 1000}, "tool": {"env": "tool"}},
                "paths": [{"path": "**", "writers": ["tool", "agent"]}]}"#,
            r#"{"writers": {"tool": {"env": "tool", "uid": 1001}, "agent": {"uid": 1000}},
                "paths": [{"path": "**", "writers": ["tool", "agent"]}]}"#,
        ] {
            let c = check(ok);
            assert!(c.problems.is_empty(), "{:#?}", c.problems);
        }
    }

    #[test]
    fn globs_that_never_match_are_warnings() {
        let text = r#"{
  "paths": [
    { "path": "*.md" },
    { "path": "plan.md" },
    { "path": "/abs.md" },
    { "path": "notes//a" },
    { "path": "notes/" },
    { "path": "./a" },
    { "path": "a/../b" },
    { "path": "" },
    { "path": "MANIFEST" },
    { "path": ".history/**" },
    { "path": ".archive" },
    { "path": "**/*.outline" },
    { "path": "**" },
    { "path": "later" },
    { "path": "later/*" }
  ],
  "ephemeral": ["*.swp", "/tmp/*", "a//b"]
}"#;
        let c = check(text);
        assert!(c.rules.is_some(), "warnings only: {:#?}", c.problems);
        let got: Vec<String> = c
            .problems
            .iter()
            .map(|p| {
                assert_eq!(p.severity, Severity::Warning, "{p}");
                format!("{}:{}: {}", p.line, p.column, p.message)
            })
            .collect();
        let want = [
            r#"4:15: paths[1].path: rule "plan.md" never applies: paths[0] ("*.md", at 3:15) matches it first, and the first rule whose glob matches applies"#,
            r#"5:15: paths[2].path: "/abs.md" never matches: paths are matched without a leading "/" (write "plan.md", not "/plan.md")"#,
            r#"6:15: paths[3].path: "notes//a" never matches: no path holds "//""#,
            r#"7:15: paths[4].path: "notes/" never matches: no path ends with "/" (a directory is matched by its name)"#,
            r#"8:15: paths[5].path: "./a" never matches: no path holds a "." or ".." component"#,
            r#"9:15: paths[6].path: "a/../b" never matches: no path holds a "." or ".." component"#,
            r#"10:15: paths[7].path: "" never matches: an empty glob matches no path"#,
            r#"11:15: paths[8].path: rule "MANIFEST" never applies: MANIFEST is the view scratchfs serves at the root, never a file"#,
            r#"12:15: paths[9].path: rule ".history/**" never applies: .history is the view of every version, served by scratchfs, never a file"#,
            r#"13:15: paths[10].path: rule ".archive" never applies: .archive is the view of deleted files, served by scratchfs, never a file"#,
            r#"14:15: paths[11].path: rule "**/*.outline" never applies: names ending in ".outline" are reserved for outline views, never a file"#,
            r#"16:15: paths[13].path: rule "later" never applies: paths[12] ("**", at 15:15) matches every path first, and the first rule whose glob matches applies"#,
            r#"17:15: paths[14].path: rule "later/*" never applies: paths[12] ("**", at 15:15) matches every path first, and the first rule whose glob matches applies"#,
            r#"19:26: ephemeral[1]: "/tmp/*" never matches: paths are matched without a leading "/" (write "plan.md", not "/plan.md")"#,
            r#"19:36: ephemeral[2]: "a//b" never matches: no path holds "//""#,
        ];
        assert_eq!(got, want, "{got:#?}");
        // A glob after a narrower one, or a literal no earlier glob matches: no warning.
        let c = check(
            r#"{"paths": [{"path": "notes/**"}, {"path": "notes"}, {"path": "*.md"},
                          {"path": "notes/**/*.txt"}, {"path": "a.txt"}, {"path": "**"}]}"#,
        );
        assert!(c.problems.is_empty(), "{:#?}", c.problems);
    }

    /// The globs [`EVERY_PATH`] names match every path, as enforce.rs compiles them
    /// (globset's defaults, where `*` also matches `/`).
    #[test]
    fn every_path_globs_match_every_path() {
        for g in EVERY_PATH {
            let m = globset::Glob::new(g).unwrap().compile_matcher();
            for p in [
                "a", "plan.md", ".hidden", "a/b", "a/b/c.d", "a/.b/c", "x y/z",
            ] {
                assert!(m.is_match(p), "{g} {p}");
            }
        }
        // As docs/rules.md says: `*.md` matches in subdirectories too.
        let md = globset::Glob::new("*.md").unwrap().compile_matcher();
        assert!(md.is_match("notes/a.md"));
        let notes = globset::Glob::new("notes/**").unwrap().compile_matcher();
        assert!(notes.is_match("notes/a/b") && !notes.is_match("notes"));
    }

    #[test]
    fn columns_count_bytes_like_serde_json() {
        let text = "{\"é\": 1,\n \"ü\": 2}";
        let (l, c, _) = one(&text.replace("2}", "2,}"));
        let e = serde_json::from_str::<serde_json::Value>(&text.replace("2}", "2,}")).unwrap_err();
        assert_eq!((l, c), (e.line(), e.column()));
        let p = problems(text);
        assert_eq!((p[0].0, p[0].1), (1, 2), "{p:?}");
        assert_eq!((p[1].0, p[1].1), (2, 2), "{p:?}");
        assert_eq!(line_column("aé\nb", 4), (2, 1));
        assert_eq!(line_column("aé\nb", 3), (1, 4));
    }

    #[test]
    fn keys_with_escapes_are_decoded() {
        let (_, _, m) = one(r#"{"paths": [{"path": "**"}], "\u0070aths": []}"#);
        assert_eq!(m, r#"the file: duplicate key "paths" (first at 1:2)"#);
    }
}
