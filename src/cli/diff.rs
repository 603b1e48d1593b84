//! `scratchfs diff PATH@A [PATH@B]`: a unified diff between two versions (B defaults to
//! the current one), computed with the `similar` crate.

use std::path::Path;

use super::{Failure, open, parse_spec, version_of};
use crate::views::quote_path;

/// Prints the unified diff of `a` → `b` (default: the current version of `a`'s path).
pub fn diff(db: &Path, a: &str, b: Option<&str>, json: bool) -> Result<(), Failure> {
    let conn = open(db)?;
    let va = version_of(&conn, a)?;
    let b = match b {
        Some(b) => b.to_string(),
        None => parse_spec(a)?.0,
    };
    let vb = version_of(&conn, &b)?;
    let read = |v: &super::VersionRow| {
        crate::store::read_all(&conn, v.content())
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .map_err(|e| e.reason)
    };
    let (ta, tb) = (read(&va)?, read(&vb)?);
    let d = similar::TextDiff::from_lines(&ta, &tb);
    let (ha, hb) = (
        format!("{}@{}", va.path, va.version),
        format!("{}@{}", vb.path, vb.version),
    );
    // The text headers quote a name that could break them (`--- "a\nb@2"`), as git does.
    let (qa, qb) = if json {
        (ha.clone(), hb.clone())
    } else {
        (quote_path(&ha).into_owned(), quote_path(&hb).into_owned())
    };
    let text = d
        .unified_diff()
        .context_radius(3)
        .header(&qa, &qb)
        .to_string();
    if json {
        println!("{}", serde_json::json!({ "a": ha, "b": hb, "diff": text }));
    } else {
        print!("{text}");
    }
    Ok(())
}
