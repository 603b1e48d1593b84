//! Writer rules (SPEC §5): the rules file, its check, and writer resolution.
//!
//! The file format is parsed and checked ([`check`]: `scratchfs rules check FILE` and
//! `mount --rules FILE`, every error and warning with line and column); a caller's facts
//! resolve to a writer name; [`enforce`] holds the rule evaluations the gate composes
//! (writers, modes, content, fields, secrets).

pub mod check;
pub mod enforce;

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::identity::Caller;

/// A writer's matchers (SPEC §5): all given must match. `uid`, `gid` and `user` are the
/// kernel's (the caller cannot forge them), and so is `exe` as it is matched: by the
/// identity of the file the process executes, never by the path its namespace shows
/// ([`ExePins`]); `comm` can be changed by the process itself (prctl), and `env` and
/// `mcp_client` are cooperative claims (docs/rules.md, "Which matchers the kernel vouches
/// for").
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Matchers {
    /// fsuid of the caller.
    pub uid: Option<u32>,
    /// fsgid of the caller.
    pub gid: Option<u32>,
    /// User name, resolved to a uid when the rules are loaded.
    pub user: Option<String>,
    /// Absolute path of the executable. Matched by identity ([`ExePins`]): the process
    /// must execute the very file (device and inode) the daemon finds at this path, not a
    /// file it may write itself, and from the daemon's own mount and user namespaces
    /// unless `exe_any_namespace`.
    pub exe: Option<String>,
    /// Command name (`/proc/<pid>/comm`, 15 bytes at most).
    pub comm: Option<String>,
    /// Value of `SCRATCHFS_WRITER` in the caller's environment.
    pub env: Option<String>,
    /// The MCP client's name from its handshake (`clientInfo.name`, issue 12): declared
    /// by the client, as trustworthy as `env`. Never matches a call through the mount.
    pub mcp_client: Option<String>,
    /// Not a matcher: what this writer writes is asserted by a model, so `scratchfs
    /// ground` reports a value only it wrote as "asserted by model", not as sourced
    /// (issue 13). Default `false`.
    #[serde(default)]
    pub model: bool,
    /// Not a matcher: `exe` also matches a process in another mount or user namespace
    /// than the daemon's (a container's tool, say). Default `false`: such a process,
    /// which may have put any file at any path it sees, matches no `exe` matcher.
    #[serde(default)]
    pub exe_any_namespace: bool,
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
    /// Glob (globset syntax with its defaults, as [`enforce::Compiled`] compiles it:
    /// `*` matches any characters, `/` included, so `*.md` also matches `notes/a.md`;
    /// `dir/**` everything under `dir`), matched against the path relative to the mount
    /// root.
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
    /// How much history of each file here is kept (issue 36; absent: all of it).
    pub keep: Option<Keep>,
}

/// `keep` of a path rule (issue 36, docs/rules.md "Retention and quotas"): limits on
/// the history of each file the rule applies to, applied by the daemon's policy pass
/// ([`crate::fs::policy`]). Each limit given is a bound the kept history must stay
/// within: an older version is forgotten when it falls outside any of them. Never
/// forgotten whatever the limits: the live version of a file (for a deleted file, its
/// last version, except under `days`), the versions a checkpoint holds, the versions a
/// JSON key's provenance names, and, unless `including` names them, the versions a live
/// version was read from (`inputs`) and refused content (`refusals`).
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Keep {
    /// Keep the newest N versions of each file (the live one among them), N >= 1.
    pub versions: Option<u64>,
    /// Forget versions committed more than D days ago (D > 0, fractions allowed); a
    /// deleted file's last version D days after its deletion.
    pub days: Option<Days>,
    /// Keep at most B bytes of each file's history beyond its live version: the sizes
    /// of the older versions kept, newest first, add up to at most B.
    pub bytes: Option<u64>,
    /// What the limits also apply to, which is otherwise kept whatever they say.
    #[serde(default)]
    pub including: Vec<Including>,
}

impl Keep {
    /// The longest a version is kept, ns (`days` as nanoseconds), if limited.
    pub fn max_age_ns(&self) -> Option<i64> {
        self.days
            .map(|d| (d.0 * 86_400.0 * 1e9).min(i64::MAX as f64) as i64)
    }
}

/// A number of days (`keep.days`), a finite number above 0.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq)]
pub struct Days(pub f64);

impl Eq for Days {}

/// What `keep.including` may name.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Including {
    /// The versions a live version was read from (its lineage inputs).
    Inputs,
    /// The content of writes refused at the path (the refusal's record stays: its
    /// reason, size and digest).
    Refusals,
}

/// `quota` of a rules file (issue 36): the pad's bounds. A write that would take the
/// pad past one fails with `EDQUOT` (quotactl(2)'s errno for a quota exceeded).
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Quota {
    /// Bytes of content the pad stores: live, history and archive together, each byte
    /// counted once however many versions share it.
    pub bytes: Option<u64>,
    /// Live files.
    pub files: Option<u64>,
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
    /// Globs of editor and tool temporaries kept out of MANIFEST (besides the built-in
    /// ones, [`crate::views::ephemeral`]).
    #[serde(default)]
    pub ephemeral: Vec<String>,
    /// MANIFEST's budget in estimated tokens (`mount --manifest-tokens` overrides it;
    /// default [`crate::views::manifest::DEFAULT_BUDGET_TOKENS`]).
    pub manifest_tokens: Option<u64>,
    /// Who may take and roll back checkpoints (issue 14).
    #[serde(default)]
    pub checkpoints: CheckpointRule,
    /// The pad's quota (issue 36; absent: none).
    pub quota: Option<Quota>,
}

/// `checkpoints` in a rules file (issue 14, docs/rules.md): who may take a checkpoint
/// (through the mount's attribute, the CLI, MCP) and who may roll back to one besides root
/// and the user who mounted.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct CheckpointRule {
    /// Writers that may take a checkpoint (`*`: any), besides root and the user who
    /// mounted. Absent: any.
    pub take: Option<Vec<String>>,
    /// Writers that may roll back (`*`: any), besides root and the user who mounted.
    /// Absent: none.
    #[serde(default)]
    pub rollback: Vec<String>,
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

/// How bad a [`Problem`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    /// The file is refused: `rules check` exits 1, a mount does not start.
    Error,
    /// Something in the file can never take effect (a writer or a rule that never
    /// matches); the file is usable: `rules check` exits 0, a mount starts and prints it.
    Warning,
}

/// One problem in a rules file: `LINE:COLUMN: message`, or `LINE:COLUMN: warning:
/// message`; 1-based, the column in bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// 1-based line.
    pub line: usize,
    /// 1-based column (bytes).
    pub column: usize,
    /// Error or warning.
    pub severity: Severity,
    /// What is wrong, naming the offending key or value (`paths[1].mode: ...`).
    pub message: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.severity {
            // The message quotes the file's own text, which may hold control characters:
            // never written raw to a terminal.
            Severity::Error => write!(
                f,
                "{}:{}: {}",
                self.line,
                self.column,
                crate::views::one_line(&self.message)
            ),
            Severity::Warning => write!(
                f,
                "{}:{}: warning: {}",
                self.line,
                self.column,
                crate::views::one_line(&self.message)
            ),
        }
    }
}

impl Rules {
    /// Parses and checks a rules file ([`check::check`]): the rules if the text has no
    /// errors (its warnings are dropped), else its errors, each with line, column and the
    /// offending key.
    pub fn parse(text: &str) -> Result<Rules, Vec<Problem>> {
        let checked = check::check(text);
        checked.rules.ok_or_else(|| {
            checked
                .problems
                .into_iter()
                .filter(|p| p.severity == Severity::Error)
                .collect()
        })
    }

    /// Whether a caller that names writer `name` itself (`scratchfs mcp --writer`, an MCP
    /// call over a mount's socket, issue 12) is that writer. The claim counts as the
    /// writer's own `env` tag and `mcp_client` name, nothing more: the caller must then be
    /// `name` as a process of the mount would be ([`Rules::writer_for`], the first writer
    /// in file order whose matchers all match, SPEC §5), so a claim never lets a process
    /// out of a writer its uid, gid, user, exe or comm pin it to (uid 1000 that the rules
    /// make `agent` cannot write as a tool's writer). `None`: no writer of that name;
    /// `Some(Err(w))`: the caller is writer `w` whatever it claims.
    pub fn claim(
        &self,
        name: &str,
        c: &Caller,
        comm: &str,
        pins: &ExePins,
    ) -> Option<Result<(), String>> {
        let (_, m) = self.writers.iter().find(|(n, _)| n == name)?;
        let claimed = Caller {
            env_writer: m.env.clone().or_else(|| c.env_writer.clone()),
            client: m.mcp_client.clone().or_else(|| c.client.clone()),
            ..c.clone()
        };
        let is = self.writer_for(&claimed, comm, pins);
        Some(if is == name { Ok(()) } else { Err(is) })
    }

    /// The writer a caller is (SPEC §5): the first writer, in file order, all of whose
    /// matchers match; `anonymous` if none. `exe` is matched by `pins`.
    pub fn writer_for(&self, c: &Caller, comm: &str, pins: &ExePins) -> String {
        for (name, m) in &self.writers {
            let ok = m.uid.is_none_or(|u| u == c.uid)
                && m.gid.is_none_or(|g| g == c.gid)
                && m.user.as_deref().is_none_or(|u| user_uid(u) == Some(c.uid))
                && m.comm.as_deref().is_none_or(|x| x == comm)
                && m.env
                    .as_deref()
                    .is_none_or(|e| c.env_writer.as_deref() == Some(e))
                && m.mcp_client
                    .as_deref()
                    .is_none_or(|x| c.client.as_deref() == Some(x))
                && m.exe
                    .as_deref()
                    .is_none_or(|e| pins.matches(e, m.exe_any_namespace, c));
            if ok {
                return name.clone();
            }
        }
        "anonymous".into()
    }
}

/// The files the rules' `exe` matchers name, by identity (issue 31): the device and
/// inode `stat(2)` gives for each configured path as the daemon sees it, taken when the
/// rules load. A process matches `exe` when the file it executes (`stat` of
/// `/proc/<pid>/exe`, [`Caller::exe_file`]) is that file, and
///
/// - it may not write that file itself (it owns it, or the mode lets its group or
///   everyone write; root excepted), and
/// - it runs in the daemon's mount and user namespaces, unless the writer says
///   `exe_any_namespace`.
///
/// The path a process's `/proc/<pid>/exe` shows is never compared: the kernel renders it
/// in the caller's namespace, where a bind mount puts any binary at any path. When the
/// file at a configured path is replaced (a package upgrade), a process executing the new
/// file and showing that path makes the daemon look again; the new identity is taken only
/// if no one but root and the daemon's user can replace the file (it and every directory
/// above it are theirs and not writable by group or others), so an agent that can write
/// the directory cannot make its own binary the pinned one.
#[derive(Debug, Default)]
pub struct ExePins {
    pins: std::collections::HashMap<String, crate::sync::Mutex<Option<crate::identity::FileKey>>>,
}

impl ExePins {
    /// The identities of every `exe` the rules name, taken now.
    pub fn take(rules: &Rules) -> ExePins {
        let pins = rules
            .writers
            .iter()
            .filter_map(|(_, m)| m.exe.clone())
            .map(|p| {
                let id = crate::identity::exe_file(&p).map(|f| f.id);
                (p, crate::sync::Mutex::new(id))
            })
            .collect();
        ExePins { pins }
    }

    /// Whether process `c` executes the file pinned at `path` ([`ExePins`]) as a process
    /// its own user cannot control ([`Caller::sealed`]: it runs the file set-group-ID or
    /// set-user-ID, is not dumpable, and its code is in files the user cannot write), or
    /// is root's; in the daemon's namespaces unless `any_namespace`; and may not write the
    /// file itself.
    pub fn matches(&self, path: &str, any_namespace: bool, c: &Caller) -> bool {
        let Some(f) = c.exe_file else { return false };
        if !(c.same_ns || any_namespace)
            || (c.uid != 0 && (!c.sealed || f.writable_by(c.uid, c.gid, &c.groups)))
        {
            return false;
        }
        let Some(pin) = self.pins.get(path) else {
            return false;
        };
        if *pin.lock() == Some(f.id) {
            return true;
        }
        // Replaced since the rules loaded? Only a process that shows this very path makes
        // the daemon look, and only a file no one else may replace is taken.
        if c.exe != path || !replaceable_only_by_admins(path) {
            return false;
        }
        let now = crate::identity::exe_file(path).map(|n| n.id);
        *pin.lock() = now;
        now == Some(f.id)
    }
}

/// Whether the file at `path` and every directory above it belong to root or to this
/// process's user and are not writable by group or others: no one else can put another
/// file there ([`ExePins`]).
pub fn replaceable_only_by_admins(path: &str) -> bool {
    use std::os::unix::fs::MetadataExt;
    let me = unsafe { libc::geteuid() };
    let mut p = Some(std::path::Path::new(path));
    while let Some(at) = p {
        match std::fs::metadata(at) {
            Ok(m) if (m.uid() == 0 || m.uid() == me) && m.mode() & 0o022 == 0 => {}
            _ => return false,
        }
        p = at.parent();
    }
    true
}

/// uid of a user name (getpwnam(3)).
pub(crate) fn user_uid(name: &str) -> Option<u32> {
    let c = std::ffi::CString::new(name).ok()?;
    let pw = unsafe { libc::getpwnam(c.as_ptr()) };
    (!pw.is_null()).then(|| unsafe { (*pw).pw_uid })
}

/// `N errors, M warnings`, for summaries.
fn counts(checked: &check::Checked) -> String {
    let plural = |n: usize, what: &str| format!("{n} {what}{}", if n == 1 { "" } else { "s" });
    let (e, w) = (checked.errors().count(), checked.warnings().count());
    match (e, w) {
        (0, w) => plural(w, "warning"),
        (e, 0) => plural(e, "error"),
        (e, w) => format!("{}, {}", plural(e, "error"), plural(w, "warning")),
    }
}

/// `scratchfs rules check FILE`: prints `FILE:LINE:COLUMN: message` for each error and
/// `FILE:LINE:COLUMN: warning: message` for each warning, on stdout, in file order.
/// `Err` (exit status 1) when there is an error; with warnings only, `FILE: ok (...; N
/// warnings)` and exit status 0. With `json`, one JSON object per line instead
/// ([`check_file_json`]).
pub fn check_file(path: &std::path::Path, json: bool) -> Result<(), String> {
    let shown = shown(path);
    let text = std::fs::read_to_string(path).map_err(|e| format!("{shown}: {e}"))?;
    let checked = check::check(&text);
    if json {
        return check_file_json(path, &shown, &checked);
    }
    for p in &checked.problems {
        println!("{shown}:{p}");
    }
    match &checked.rules {
        Some(r) => {
            let warnings = checked.warnings().count();
            println!(
                "{shown}: ok ({} writers, {} path rules{})",
                r.writers.len(),
                r.paths.len(),
                if warnings > 0 {
                    format!("; {}", counts(&checked))
                } else {
                    String::new()
                }
            );
            Ok(())
        }
        None => Err(format!("{shown}: {}", counts(&checked))),
    }
}

/// `scratchfs rules check FILE --json`: one object per problem, in file order,
/// `{"file", "line", "column", "severity": "error"|"warning", "message"}`, then one
/// summary `{"file", "ok", "errors", "warnings", "writers", "paths"}` (`writers` and
/// `paths` count the rules, `null` when there is an error). The file name is exact
/// (`file_hex` too when it is not UTF-8, as every `--json` output). `Err` (exit status 1,
/// one line on stderr) when there is an error, as without `--json`.
fn check_file_json(
    path: &std::path::Path,
    shown: &str,
    checked: &check::Checked,
) -> Result<(), String> {
    use std::os::unix::ffi::OsStrExt;
    let with_file = |mut o: serde_json::Value| {
        crate::cli::json_name(&mut o, "file", path.as_os_str().as_bytes());
        o
    };
    let mut out = String::new();
    for p in &checked.problems {
        let o = with_file(serde_json::json!({
            "line": p.line,
            "column": p.column,
            "severity": match p.severity {
                Severity::Error => "error",
                Severity::Warning => "warning",
            },
            "message": p.message,
        }));
        out.push_str(&format!("{o}\n"));
    }
    let summary = with_file(serde_json::json!({
        "ok": checked.rules.is_some(),
        "errors": checked.errors().count(),
        "warnings": checked.warnings().count(),
        "writers": checked.rules.as_ref().map(|r| r.writers.len()),
        "paths": checked.rules.as_ref().map(|r| r.paths.len()),
    }));
    out.push_str(&format!("{summary}\n"));
    print!("{out}");
    match checked.rules {
        Some(_) => Ok(()),
        None => Err(format!("{shown}: {}", counts(checked))),
    }
}

/// A rules file's name as printed: quoted if it holds a control character or a byte that
/// is not UTF-8.
fn shown(path: &std::path::Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    crate::views::quote_path_bytes(path.as_os_str().as_bytes()).into_owned()
}

/// Reads and checks the rules file of a mount (`mount --rules FILE`): every problem is
/// printed on stderr as `rules check` prints it (`FILE:LINE:COLUMN: [warning: ]message`);
/// the text and the rules when there is no error, else `Err("rules FILE: N errors ...")`
/// (the mount is refused, exit status 1).
pub fn load(path: &std::path::Path) -> Result<(String, Rules), String> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("rules {}: {e}", path.display()))?;
    let checked = check::check(&text);
    for p in &checked.problems {
        // Never a panic on a stderr that cannot be written (a full disk).
        use std::io::Write;
        let _ = writeln!(std::io::stderr(), "{}:{p}", shown(path));
    }
    match checked.rules {
        Some(rules) => Ok((text, rules)),
        None => Err(format!(
            "rules {}: {} (see above, or scratchfs rules check {})",
            path.display(),
            counts(&checked),
            path.display()
        )),
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
        let pins = ExePins::take(&r);
        assert_eq!(r.writer_for(&c(1000, None), "bash", &pins), "agent");
        assert_eq!(
            r.writer_for(&c(1000, Some("get_order")), "python3", &pins),
            "agent",
            "first match wins"
        );
        assert_eq!(
            r.writer_for(&c(1001, Some("get_order")), "python3", &pins),
            "get_order"
        );
        assert_eq!(r.writer_for(&c(1001, None), "sh", &pins), "anonymous");
    }

    /// `exe` names a file by identity (issue 31 item 1): the path a caller shows is never
    /// enough, a file the caller may write never matches, nor a process its own user
    /// controls, nor a caller in another namespace unless the writer allows it.
    #[test]
    fn exe_matches_the_file_by_identity_not_the_path_a_caller_shows() {
        let dir = tempfile::tempdir().unwrap();
        let (tool, other) = (dir.path().join("tool"), dir.path().join("other"));
        std::fs::write(&tool, b"#!/bin/true\n").unwrap();
        std::fs::write(&other, b"#!/bin/false\n").unwrap();
        for f in [&tool, &other] {
            std::fs::set_permissions(f, std::os::unix::fs::PermissionsExt::from_mode(0o755))
                .unwrap();
        }
        let tool_path = tool.to_str().unwrap();
        let text = format!(
            r#"{{"writers": {{"tool": {{"exe": "{tool_path}"}},
                "boxed": {{"exe": "{tool_path}", "exe_any_namespace": true, "env": "boxed"}}}},
               "paths": [{{"path": "**"}}]}}"#
        );
        let r = Rules::parse(&text).unwrap();
        let pins = ExePins::take(&r);
        let f = |p: &std::path::Path| crate::identity::exe_file(p.to_str().unwrap());
        // Callers sealed (a set-group-ID tool's process), unless root's.
        let caller = |file, exe: &str, uid, same_ns| Caller {
            uid,
            gid: uid,
            exe: exe.into(),
            exe_file: file,
            same_ns,
            sealed: uid != 0,
            ..Default::default()
        };
        // The tool itself, as root or another user that may not write it.
        assert_eq!(
            r.writer_for(&caller(f(&tool), tool_path, 0, true), "t", &pins),
            "tool"
        );
        assert_eq!(
            r.writer_for(&caller(f(&tool), tool_path, 1000, true), "t", &pins),
            "tool"
        );
        // The tool run by a user who controls the process (it may preload, trace, or set
        // its executable): not the tool (attack round of issue 32).
        let controlled = Caller {
            sealed: false,
            ..caller(f(&tool), tool_path, 1000, true)
        };
        assert_eq!(r.writer_for(&controlled, "t", &pins), "anonymous");
        // Another file shown at the tool's path (a bind mount in the caller's namespace).
        assert_eq!(
            r.writer_for(&caller(f(&other), tool_path, 1000, true), "t", &pins),
            "anonymous"
        );
        // The tool's file, owned by the caller (it could have written anything into it).
        std::os::unix::fs::chown(&tool, Some(1000), Some(1000)).unwrap();
        assert_eq!(
            r.writer_for(&caller(f(&tool), tool_path, 1000, true), "t", &pins),
            "anonymous"
        );
        std::os::unix::fs::chown(&tool, Some(0), Some(0)).unwrap();
        // Writable by everyone.
        std::fs::set_permissions(&tool, std::os::unix::fs::PermissionsExt::from_mode(0o757))
            .unwrap();
        assert_eq!(
            r.writer_for(&caller(f(&tool), tool_path, 1000, true), "t", &pins),
            "anonymous"
        );
        std::fs::set_permissions(&tool, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        // Another namespace: only the writer that says so.
        let boxed = Caller {
            env_writer: Some("boxed".into()),
            ..caller(f(&tool), tool_path, 1000, false)
        };
        assert_eq!(r.writer_for(&boxed, "t", &pins), "boxed");
        let unboxed = Caller {
            env_writer: None,
            ..boxed
        };
        assert_eq!(r.writer_for(&unboxed, "t", &pins), "anonymous");
        // Unknown executable.
        assert_eq!(
            r.writer_for(&caller(None, tool_path, 1000, true), "t", &pins),
            "anonymous"
        );
    }

    #[test]
    fn problems_name_line_column_and_key() {
        let bad = SPEC_EXAMPLE.replace("\"mode\": \"append-only\"", "\"mdoe\": \"append-only\"");
        let p = Rules::parse(&bad).unwrap_err();
        assert_eq!((p[0].line, p[0].column), (11, 52), "{p:?}");
        assert!(p[0].message.contains("unknown key \"mdoe\""), "{p:?}");
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
        // Every problem, not only the first.
        let p = Rules::parse("{\"writers\": {\"x\": {}}, \n \"paths\": 3}").unwrap_err();
        assert_eq!(p.len(), 2, "{p:?}");
        assert_eq!((p[0].line, p[0].column), (1, 14), "{p:?}");
        assert_eq!(p[0].message, "writer \"x\" has no matchers");
        assert_eq!((p[1].line, p[1].column), (2, 11), "{p:?}");
        assert_eq!(p[1].message, "paths: expected an array of rules, found 3");
    }
}
