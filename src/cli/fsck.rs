//! `scratchfs fsck`: re-hashes every stored byte with blake3 and checks the invariants of
//! docs/schema.md. Prints one line per fault; any fault is exit status 1.

use std::io::IsTerminal;
use std::path::Path;

use super::Failure;
use crate::store::FsckProgress;

/// Runs every check ([`crate::store::History::fsck`]); `Ok` only when no fault was found.
pub fn fsck(db: &Path, json: bool) -> Result<(), Failure> {
    let store = super::open_history(db)?;
    let bar = if std::io::stderr().is_terminal() {
        indicatif::ProgressBar::new(0)
    } else {
        indicatif::ProgressBar::hidden()
    };
    let report = store
        .fsck(&mut |p| match p {
            FsckProgress::Total(n) => bar.set_length(n),
            FsckProgress::Checked => bar.inc(1),
        })
        .map_err(|e| e.to_string())?;
    bar.finish_and_clear();
    let (total, faults) = (report.checked, report.faults);
    if json {
        println!(
            "{}",
            serde_json::json!({ "checked": total, "faults": faults })
        );
    } else {
        for f in &faults {
            println!("fault: {f}");
        }
    }
    if faults.is_empty() {
        if !json {
            println!("fsck: clean ({total} blobs and versions checked)");
        }
        Ok(())
    } else {
        Err(format!("fsck: {} faults", faults.len()))
    }
}
