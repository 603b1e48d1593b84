//! The code's layout holds what issue 15 asks of the store: it is a port, so no SQL lives
//! outside the backends (`src/store/`). Every command, view and tool reads through
//! [`scratchfs::store::History`] and writes through [`scratchfs::store::Store`]; a
//! statement written anywhere else would bypass them (and one of the two backends).

use std::path::{Path, PathBuf};

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let p = e.unwrap().path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// A line that spells an SQL statement in a string literal: a quote then a statement's
/// first words (`"SELECT `, `"INSERT INTO`, ...), or such words at the start of a line of a
/// multi-line literal.
fn sql_in(line: &str) -> bool {
    const STARTS: [&str; 6] = [
        "SELECT ",
        "INSERT INTO ",
        "UPDATE ",
        "DELETE FROM ",
        "CREATE TABLE",
        "WITH RECURSIVE",
    ];
    let t = line.trim_start();
    if t.starts_with("//") {
        return false;
    }
    STARTS.iter().any(|s| {
        line.contains(&format!("\"{s}")) || line.contains(&format!("r\"{s}")) || t.starts_with(s)
    })
}

#[test]
fn no_sql_lives_outside_the_store() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    sources(&root.join("src"), &mut files);
    assert!(files.len() > 50, "found only {} source files", files.len());
    let store = root.join("src/store");
    let mut found = Vec::new();
    let mut seen_in_store = 0;
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        for (i, line) in text.lines().enumerate() {
            if sql_in(line) {
                if f.starts_with(&store) {
                    seen_in_store += 1;
                } else {
                    found.push(format!(
                        "{}:{}: {}",
                        f.strip_prefix(root).unwrap().display(),
                        i + 1,
                        line.trim()
                    ));
                }
            }
        }
    }
    // The check sees the statements where they belong (it is not blind).
    assert!(
        seen_in_store > 100,
        "only {seen_in_store} statements found in src/store"
    );
    assert!(
        found.is_empty(),
        "SQL outside src/store (put it behind store::History or store::Store):\n{}",
        found.join("\n")
    );
}
