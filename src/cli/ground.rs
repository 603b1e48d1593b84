//! `scratchfs ground [FILE|-] [--json]` (issue 13): for every number and identifier of a
//! reply, where the scratchpad holds it ([`crate::lineage::ground`]); exit status 1 when a
//! number has no source, or only a model's.

use std::io::Read;
use std::path::Path;

use super::Failure;

/// Reads the reply from `file` (`None` or `-`: standard input), grounds it against what
/// the database holds now ([`crate::lineage::sources`]) and prints one line per token and
/// a summary, or with `json` one object `{"tokens": [...], "exit": N}`. `Err` (exit
/// status 1) when a number is unsourced or only asserted by a model.
pub fn ground(db: &Path, file: Option<&Path>, json: bool) -> Result<(), Failure> {
    let mut reply = Vec::new();
    match file {
        Some(f) if f != Path::new("-") => {
            reply = std::fs::read(f).map_err(|e| format!("{}: {e}", f.display()))?;
        }
        _ => {
            std::io::stdin()
                .read_to_end(&mut reply)
                .map_err(|e| format!("standard input: {e}"))?;
        }
    }
    let reply = String::from_utf8_lossy(&reply);
    let mut found = super::open_history(db)?
        .ground_sources()
        .map_err(|e| e.reason)?;
    // A value adopted from another scratchpad: credited to who set it there.
    crate::report::follow_ground_origins(&mut found);
    let findings = crate::lineage::ground::ground(&reply, &found.sources);
    let status = crate::lineage::ground::exit_status(&findings);
    if json {
        let o = serde_json::json!({ "tokens": findings, "exit": status, "skipped": found.skipped });
        println!("{o}");
    } else {
        print!("{}", crate::lineage::ground::render(&findings));
        if let Some(note) = skipped_note(&found.skipped) {
            println!("{note}");
        }
    }
    if status != 0 {
        let n = findings
            .iter()
            .filter(|f| {
                matches!(
                    f.token.kind,
                    crate::lineage::ground::TokenKind::Number
                        | crate::lineage::ground::TokenKind::Amount
                ) && f.status != crate::lineage::ground::Status::Sourced
            })
            .count();
        return Err(format!(
            "ground: {n} number{} of the reply unsourced or only asserted by a model",
            if n == 1 { "" } else { "s" }
        ));
    }
    Ok(())
}

/// A line naming the files `ground` did not search (their size), if any.
pub fn skipped_note(skipped: &[String]) -> Option<String> {
    let first = skipped.first()?;
    let more = match skipped.len() {
        1 => String::new(),
        n => format!(" and {} more", n - 1),
    };
    Some(format!(
        "not searched (over {} MiB, or past {} MiB in all): {}{more}",
        crate::lineage::sources::SOURCE_FILE_MAX >> 20,
        crate::lineage::sources::SOURCE_BYTES_MAX >> 20,
        crate::views::quote_stored(first)
    ))
}
