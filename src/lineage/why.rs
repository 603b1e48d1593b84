//! `scratchfs why PATH[:KEY]` (issue 13): the lineage of a file's current version, or of
//! one JSON key's current value: the version that set it (writer, executable, step,
//! time), the versions that writer had read ([`crate::store::Store::inputs`]), and
//! recursively theirs, up to a depth. For an input that is a JSON file, the keys it held
//! and the version that set each.
//!
//! Works on a read connection to the database, whose questions are the store's
//! ([`crate::store::sql::lineage`]), so the command line and the daemon (the MCP tool
//! `why`) share it through [`crate::store::History::why`].

use crate::store::sql::Conn;
use crate::store::sql::lineage as q;
use std::collections::HashSet;

use crate::store::error::{ErrorKind, Result, StoreError};
use crate::store::{ContentRef, InputInfo, inputs_of, read_all};

/// Default depth of `why`: the version, what its writer read, what their writers read.
pub const DEFAULT_DEPTH: usize = 3;

/// Most versions looked back through to find the version that set a key's value.
const SETTER_LOOKBACK: usize = 256;

/// Largest JSON content parsed for keys (4 MiB); a larger file's keys are not shown.
const JSON_MAX: u64 = 4 << 20;

/// Most keys shown for a JSON input.
const KEYS_SHOWN: usize = 12;

/// One version, with its provenance.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct VersionFacts {
    /// `versions.id`.
    pub id: i64,
    /// Lineage (`files.id`).
    pub file_id: i64,
    /// Path at commit time, as stored ([`crate::store::paths`]).
    pub path: String,
    /// Version number within its lineage.
    pub version: i64,
    /// `create`, `write`, `append`, `truncate`, `rename`, `restore`.
    pub op: String,
    /// Writer name.
    pub writer: String,
    /// Executable of the writing process.
    pub exe: String,
    /// Agent step, when the writer had one.
    pub step: Option<i64>,
    /// Process id of the writer.
    pub tgid: u32,
    /// Commit time, ns since the epoch.
    pub time_ns: i64,
    /// Its bytes (not printed).
    #[serde(skip)]
    pub content: ContentRef,
    /// For a version that brought back earlier bytes (a `rollback`, a `restore`): the
    /// version whose bytes it brought back (`versions.id`; issue 35).
    pub restored_from: Option<i64>,
    /// Its content's digest (not printed: what a version it was adopted from must match).
    #[serde(skip)]
    pub blake3: String,
    /// For a version brought from another scratchpad (`adopt`, a tree-only `fork`): the
    /// version there (`origins`, docs/schema.md).
    pub origin: Option<crate::store::Origin>,
}

/// A key of a JSON version and the version that set its value there.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct KeyFacts {
    /// The key (dotted for nested keys).
    pub key: String,
    /// Its value, as JSON text.
    pub value: String,
    /// The version that set it (the oldest of the versions up to this one that all hold
    /// this value, within 256 versions; through a rollback or restore that brought the
    /// value back, the version whose bytes it brought back, and so on).
    pub set_by: VersionFacts,
    /// The rollbacks and restores that brought the value back on the way from this
    /// version to `set_by`, newest first; empty when none did.
    pub brought_back_by: Vec<VersionFacts>,
}

/// A node of the lineage: a version, what it was made from.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Node {
    /// The version.
    pub version: VersionFacts,
    /// For an input: how the version above got it (`read`, `rename`) and when, ns.
    pub via: Option<String>,
    /// When it was read (or renamed), ns.
    pub read_ns: Option<i64>,
    /// For an input that is a JSON object: its keys and who set them (at most 12).
    pub keys: Vec<KeyFacts>,
    /// Its inputs, each a node; empty at the depth limit (then `truncated` says so).
    pub inputs: Vec<Node>,
    /// Inputs not followed: the depth limit, a version already shown above, or one gc
    /// forgot.
    pub truncated: Vec<String>,
    /// For a version with an `origin`: the same question asked in the scratchpad it came
    /// from, at the version it came from (filled by [`crate::report::follow_origins`],
    /// which opens that database; `None` until then or when it could not).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub adopted: Option<Box<Why>>,
    /// Why the origin was not followed (the database is gone, not ours to trust, or
    /// holds other bytes there); `None` when it was or there is none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub adopted_not_followed: Option<String>,
}

/// The answer to `why PATH[:KEY]`.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Why {
    /// The path asked about, as stored.
    pub path: String,
    /// The key asked about, if any.
    pub key: Option<String>,
    /// The key's current value, as JSON text.
    pub value: Option<String>,
    /// The version that set it (the file's current version when no key was asked), and
    /// its lineage.
    pub lineage: Node,
    /// For a key: the rollbacks and restores that brought its value back since the
    /// version that set it, newest first (issue 35); empty when none did, and for a
    /// whole file (whose current version's `restore` input shows it instead).
    pub brought_back_by: Vec<VersionFacts>,
}

/// The value at dotted `key` of a JSON document (`a.b`, `items.0.sku`).
pub fn lookup<'v>(doc: &'v serde_json::Value, key: &str) -> Option<&'v serde_json::Value> {
    if let Some(v) = doc.get(key) {
        return Some(v);
    }
    let mut at = doc;
    for part in key.split('.') {
        at = match at {
            serde_json::Value::Object(m) => m.get(part)?,
            serde_json::Value::Array(a) => a.get(part.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(at)
}

/// Most bytes of JSON one `why` parses (64 MiB): past it, keys' setters are looked for no
/// further back (they show the version reached).
const PARSE_BUDGET: u64 = 64 << 20;

/// The JSON documents one `why` has parsed, by version, and the bytes it may still parse.
struct Docs {
    parsed: std::collections::HashMap<i64, Option<std::rc::Rc<serde_json::Value>>>,
    budget: u64,
}

impl Docs {
    fn new() -> Docs {
        Docs {
            parsed: std::collections::HashMap::new(),
            budget: PARSE_BUDGET,
        }
    }

    /// Version `v` as JSON: `None` when it is not JSON, over [`JSON_MAX`], or past the
    /// budget.
    fn get(&mut self, conn: &dyn Conn, v: &VersionFacts) -> Option<std::rc::Rc<serde_json::Value>> {
        if let Some(d) = self.parsed.get(&v.id) {
            return d.clone();
        }
        if v.content.len > JSON_MAX || v.content.len > self.budget {
            return None;
        }
        self.budget -= v.content.len;
        let doc = read_all(conn, v.content)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .map(std::rc::Rc::new);
        self.parsed.insert(v.id, doc.clone());
        doc
    }
}

/// Most rollbacks and restores one key's setter is followed through.
const RESTORE_HOPS: usize = 16;

/// The oldest of the versions up to `at` of its lineage that all hold `value` at `key`.
fn oldest_holding(
    conn: &dyn Conn,
    docs: &mut Docs,
    at: &VersionFacts,
    key: &str,
    value: &serde_json::Value,
) -> Result<VersionFacts> {
    let ids = q::earlier_versions(conn, at.file_id, at.version, SETTER_LOOKBACK)?;
    let mut set_by = at.clone();
    for id in ids {
        let Some(v) = q::version_facts(conn, id)? else {
            break;
        };
        match docs.get(conn, &v) {
            Some(doc) if lookup(&doc, key) == Some(value) => set_by = v,
            _ => break,
        }
    }
    Ok(set_by)
}

/// The version that set `key` to the value it has in version `at`: the oldest of the
/// versions up to `at` that all hold that value; when that one is a rollback or restore
/// whose brought-back version holds the same value, the setter of it there, and so on
/// (at most [`RESTORE_HOPS`]). Returns it and the rollbacks and restores passed through,
/// newest first.
fn setter(
    conn: &dyn Conn,
    docs: &mut Docs,
    at: &VersionFacts,
    key: &str,
    value: &serde_json::Value,
) -> Result<(VersionFacts, Vec<VersionFacts>)> {
    let mut brought_back_by = Vec::new();
    let mut set_by = oldest_holding(conn, docs, at, key, value)?;
    while brought_back_by.len() < RESTORE_HOPS {
        let Some(from) = set_by.restored_from else {
            break;
        };
        // A version brought back is older than what brought it back: no cycle.
        let Some(source) = q::version_facts(conn, from)?.filter(|s| s.id < set_by.id) else {
            break;
        };
        let holds = docs
            .get(conn, &source)
            .is_some_and(|doc| lookup(&doc, key) == Some(value));
        if !holds {
            break;
        }
        let next = oldest_holding(conn, docs, &source, key, value)?;
        brought_back_by.push(std::mem::replace(&mut set_by, next));
    }
    Ok((set_by, brought_back_by))
}

/// For grounding (issue 35): when version `id` brought back earlier bytes (a rollback, a
/// restore) and `key` (dotted) holds `value` there, the version that set the value and
/// the rollbacks and restores that brought it back, newest first; `None` when `id` is
/// no such version or the value is not the one brought back.
pub fn brought_back_setter(
    conn: &dyn Conn,
    id: i64,
    key: &str,
    value: &serde_json::Value,
) -> Result<Option<(VersionFacts, Vec<VersionFacts>)>> {
    let Some(v) = q::version_facts(conn, id)? else {
        return Ok(None);
    };
    if v.restored_from.is_none() {
        return Ok(None);
    }
    let mut docs = Docs::new();
    let (set_by, by) = setter(conn, &mut docs, &v, key, value)?;
    Ok((!by.is_empty()).then_some((set_by, by)))
}

fn keys_of(conn: &dyn Conn, docs: &mut Docs, v: &VersionFacts) -> Result<Vec<KeyFacts>> {
    let Some(doc) = docs.get(conn, v) else {
        return Ok(Vec::new());
    };
    let serde_json::Value::Object(map) = &*doc else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for (k, value) in map.iter().take(KEYS_SHOWN) {
        let (set_by, brought_back_by) = setter(conn, docs, v, k, value)?;
        out.push(KeyFacts {
            key: k.clone(),
            value: value.to_string(),
            set_by,
            brought_back_by,
        });
    }
    Ok(out)
}

fn node(
    conn: &dyn Conn,
    docs: &mut Docs,
    v: VersionFacts,
    via: Option<&InputInfo>,
    depth: usize,
    seen: &mut HashSet<i64>,
) -> Result<Node> {
    seen.insert(v.id);
    let keys = if via.is_some() {
        keys_of(conn, docs, &v)?
    } else {
        Vec::new()
    };
    let mut n = Node {
        via: via.map(|i| i.via.clone()),
        read_ns: via.map(|i| i.read_ns),
        keys,
        inputs: Vec::new(),
        truncated: Vec::new(),
        adopted: None,
        adopted_not_followed: None,
        version: v,
    };
    // A rollback's or restore's first input: the version whose bytes it brought back.
    let mut inputs = Vec::new();
    if let Some(from) = n.version.restored_from {
        let f = q::version_facts(conn, from)?;
        inputs.push(InputInfo {
            version_id: from,
            path: f.as_ref().map(|f| f.path.clone()),
            version: f.as_ref().map(|f| f.version),
            writer: f.map(|f| f.writer),
            via: "restore".into(),
            read_ns: n.version.time_ns,
        });
    }
    inputs.extend(inputs_of(conn, n.version.id).unwrap_or_default());
    for i in inputs {
        let name = format!(
            "{}@{}",
            i.path.as_deref().unwrap_or("?"),
            i.version.map_or_else(|| "?".to_string(), |n| n.to_string())
        );
        if depth == 0 {
            n.truncated.push(format!("{name} (depth limit)"));
            continue;
        }
        if seen.contains(&i.version_id) {
            n.truncated.push(format!("{name} (shown above)"));
            continue;
        }
        match q::version_facts(conn, i.version_id)? {
            Some(f) => n
                .inputs
                .push(node(conn, docs, f, Some(&i), depth - 1, seen)?),
            None => {
                // By a gc or by the retention policy (which rule), as `show` says.
                let by = crate::store::sql::policy::forgotten_by(conn, i.version_id)?
                    .unwrap_or_else(|| "gc".to_string());
                n.truncated.push(format!("{name} (forgotten by {by})"))
            }
        }
    }
    Ok(n)
}

/// The lineage of `path` (stored form; `None` key: its current version) or of `key` of
/// it (dotted for nested keys), `depth` levels of inputs deep. Errors: `ENOENT` when no
/// live file is at `path` or the key is not in its current version, `EINVAL` when the file
/// is not a JSON document and a key was asked.
pub fn why(conn: &dyn Conn, path: &str, key: Option<&str>, depth: usize) -> Result<Why> {
    let (_, head) = q::live_head(conn, path)?
        .ok_or_else(|| StoreError::new(ErrorKind::NotFound, format!("{path}: no such file")))?;
    let head = q::version_facts(conn, head)?
        .ok_or_else(|| StoreError::new(ErrorKind::NotFound, format!("{path}: no version")))?;
    why_from(conn, path, head, key, depth)
}

/// [`why`] of version `id` (`versions.id`) instead of a live file's current one: what an
/// adopted version's origin is asked in the scratchpad it came from (issue 35). Errors:
/// `ENOENT` when there is no such version (gc forgot it) or the key is not in it.
pub fn why_at(conn: &dyn Conn, id: i64, key: Option<&str>, depth: usize) -> Result<Why> {
    let v = q::version_facts(conn, id)?.ok_or_else(|| {
        StoreError::new(
            ErrorKind::NotFound,
            format!("version {id}: not in this scratchpad"),
        )
    })?;
    let path = v.path.clone();
    why_from(conn, &path, v, key, depth)
}

fn why_from(
    conn: &dyn Conn,
    path: &str,
    head: VersionFacts,
    key: Option<&str>,
    depth: usize,
) -> Result<Why> {
    let mut seen = HashSet::new();
    let mut docs = Docs::new();
    let Some(key) = key else {
        return Ok(Why {
            path: path.to_string(),
            key: None,
            value: None,
            lineage: node(conn, &mut docs, head, None, depth, &mut seen)?,
            brought_back_by: Vec::new(),
        });
    };
    let doc = docs.get(conn, &head).ok_or_else(|| {
        StoreError::new(
            ErrorKind::Invalid,
            format!("{path}: not a JSON document (at most 4 MiB): it has no keys"),
        )
    })?;
    let value = lookup(&doc, key)
        .ok_or_else(|| StoreError::new(ErrorKind::NotFound, format!("{path}: no key {key:?}")))?
        .clone();
    let (set_by, brought_back_by) = setter(conn, &mut docs, &head, key, &value)?;
    seen.extend(brought_back_by.iter().map(|v| v.id));
    Ok(Why {
        path: path.to_string(),
        key: Some(key.to_string()),
        value: Some(value.to_string()),
        lineage: node(conn, &mut docs, set_by, None, depth, &mut seen)?,
        brought_back_by,
    })
}

/// `PATH` or `PATH:KEY` of `why`: the whole argument when a live file has that path, else
/// split at its last `:`.
pub fn split_target<'a>(
    store: &dyn crate::store::History,
    arg: &'a str,
) -> Result<(&'a str, Option<&'a str>)> {
    if store.live_head(arg)?.is_some() {
        return Ok((arg, None));
    }
    Ok(match arg.rsplit_once(':') {
        Some((p, k)) if !p.is_empty() && !k.is_empty() => (p, Some(k)),
        _ => (arg, None),
    })
}

fn describe(v: &VersionFacts) -> String {
    let exe = v.exe.rsplit('/').next().unwrap_or_default();
    let mut s = format!(
        "{}@{} ({} by {}",
        crate::views::quote_stored(&v.path),
        v.version,
        v.op,
        crate::views::quote_path(&v.writer)
    );
    if let Some(step) = v.step {
        s += &format!(", step {step}");
    }
    s += &format!(
        ", {} {}, {})",
        v.tgid,
        crate::views::quote_path(exe),
        crate::cli::time::utc(v.time_ns)
    );
    s
}

fn render_node(n: &Node, indent: usize, out: &mut String) {
    let pad = "  ".repeat(indent);
    let arrow = match n.via.as_deref() {
        Some("rename") => "<- renamed from ",
        Some("restore") => "<- brought back from ",
        Some(_) => "<- read ",
        None => "",
    };
    let when = match (n.via.as_deref(), n.read_ns) {
        (Some("read"), Some(t)) => format!(" at {}", crate::cli::time::utc(t)),
        _ => String::new(),
    };
    out.push_str(&format!("{pad}{arrow}{}{when}\n", describe(&n.version)));
    for k in &n.keys {
        let by = if k.set_by.id == n.version.id {
            "here".to_string()
        } else {
            let mut s = format!("set in v{} by {}", k.set_by.version, k.set_by.writer);
            if let Some(step) = k.set_by.step {
                s += &format!(" step {step}");
            }
            if let Some(b) = k.brought_back_by.first() {
                s += &format!(", brought back by {} v{}", b.op, b.version);
            }
            s
        };
        out.push_str(&format!(
            "{pad}    {} = {}  ({by})\n",
            crate::views::one_line(&k.key),
            crate::views::one_line(&clip(&k.value, 80))
        ));
    }
    if let Some(o) = &n.version.origin {
        let from = format!(
            "{pad}  <- adopted from {}: {}@{} by {}",
            crate::views::quote_path(&o.source),
            crate::views::quote_stored(&o.path),
            o.version,
            crate::views::quote_path(&o.writer)
        );
        match (&n.adopted, &n.adopted_not_followed) {
            (Some(there), _) => {
                out.push_str(&format!("{from}; there set by\n"));
                render_node(&there.lineage, indent + 2, out);
            }
            (None, Some(e)) => out.push_str(&format!("{from} (not followed: {e})\n")),
            (None, None) => out.push_str(&format!("{from}\n")),
        }
    }
    for i in &n.inputs {
        render_node(i, indent + 1, out);
    }
    for t in &n.truncated {
        out.push_str(&format!("{pad}  <- {t}\n"));
    }
}

fn clip(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let mut out: String = s.chars().take(max).collect();
    out.push('…');
    out
}

/// The text `why` prints: the target and its value, then the lineage as an indented
/// tree, `<-` before what each version was read or renamed from.
pub fn render(w: &Why) -> String {
    let mut out = String::new();
    let target = match &w.key {
        Some(k) => format!("{}:{}", crate::views::quote_stored(&w.path), k),
        None => crate::views::quote_stored(&w.path).into_owned(),
    };
    match &w.value {
        Some(v) => out.push_str(&format!(
            "{} = {}\n",
            crate::views::one_line(&target),
            crate::views::one_line(&clip(v, 200))
        )),
        None => out.push_str(&format!("{}\n", crate::views::one_line(&target))),
    }
    out.push_str("set by ");
    let mut body = String::new();
    render_node(&w.lineage, 0, &mut body);
    // The rollbacks and restores that brought the value back, under the version that set
    // it (issue 35).
    let first_line = body.find('\n').map_or(body.len(), |i| i + 1);
    let brought: String = w
        .brought_back_by
        .iter()
        .map(|v| format!("  brought back by {}\n", describe(v)))
        .collect();
    body.insert_str(first_line, &brought);
    out.push_str(&body);
    if w.lineage.inputs.is_empty() && w.lineage.truncated.is_empty() {
        out.push_str("  (its writer had read nothing on the mount before)\n");
    }
    out
}
