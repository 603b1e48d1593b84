//! `scratchfs why PATH[:KEY] [--depth N] [--json]` (issue 13): the lineage of a file's
//! current version or of one JSON key's current value ([`crate::lineage::why`]).

use std::ffi::OsStr;
use std::path::Path;

use super::{Failure, open_history};

/// Prints the lineage of `target` (`PATH` or `PATH:KEY`, raw bytes): as an indented tree,
/// or with `json` as one JSON object ([`crate::lineage::why::Why`]).
pub fn why(db: &Path, target: &OsStr, depth: usize, json: bool) -> Result<(), Failure> {
    let store = open_history(db)?;
    let arg = super::arg(target);
    let arg = arg.trim_start_matches('/');
    let (path, key) = crate::lineage::why::split_target(&*store, arg).map_err(|e| e.reason)?;
    let w = store.why(path, key, depth).map_err(|e| e.reason)?;
    if json {
        println!("{}", serde_json::to_string(&w).map_err(|e| e.to_string())?);
    } else {
        print!("{}", crate::lineage::why::render(&w));
    }
    Ok(())
}
