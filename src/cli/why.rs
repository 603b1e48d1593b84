//! `scratchfs why PATH[:KEY] [--key KEY] [--depth N] [--json]` (issue 13): the lineage of a
//! file's current version or of one JSON key's current value ([`crate::lineage::why`]).

use std::ffi::OsStr;
use std::path::Path;

use super::{Failure, open_history};

/// Prints the lineage of `target` (`PATH` or `PATH:KEY`, raw bytes; with `key`, PATH
/// whole and that key of it): as an indented tree, or with `json` as one JSON object
/// ([`crate::lineage::why::Why`]).
pub fn why(
    db: &Path,
    target: &OsStr,
    key: Option<&str>,
    depth: usize,
    json: bool,
) -> Result<(), Failure> {
    let store = open_history(db)?;
    let arg = super::arg(target);
    let arg = arg.trim_start_matches('/');
    let (path, key) = match key {
        Some(k) => (arg, Some(k)),
        None => crate::lineage::why::split_target(&*store, arg).map_err(|e| e.reason)?,
    };
    // A file named `c.json:k` beside `c.json`: the file wins; say how to ask for the key.
    if key.is_none()
        && let Some((p, k)) = arg.rsplit_once(':')
        && !p.is_empty()
        && !k.is_empty()
        && store.live_head(p).is_ok_and(|h| h.is_some())
    {
        eprintln!(
            "scratchfs: note: {} names the file of that name; for key {k:?} of {}: why {} --key {k}",
            crate::views::quote_stored(arg),
            crate::views::quote_stored(p),
            crate::views::quote_stored(p)
        );
    }
    let mut w = store.why(path, key, depth).map_err(|e| e.reason)?;
    // An adopted version: the same question in the scratchpad it came from.
    crate::report::follow_origins(&mut w, depth);
    if json {
        println!("{}", serde_json::to_string(&w).map_err(|e| e.to_string())?);
    } else {
        print!("{}", crate::lineage::why::render(&w));
    }
    Ok(())
}
