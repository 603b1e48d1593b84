//! Issue 5 item 6: Anthropic's memory tool backend (BetaLocalFilesystemMemoryTool, from
//! the `anthropic` Python package, which scripts/deps installs) pointed at the mount.

mod common;
use common::*;
use std::process::Command;

#[test]
fn anthropic_memory_tool_session_is_recorded_and_restorable() {
    let m = Mount::new();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/memory-session.py");
    // The repository's own virtual environment, made by scripts/deps (stock Debian 12
    // refuses `pip install` into its system Python).
    let python = concat!(env!("CARGO_MANIFEST_DIR"), "/.venv/bin/python3");
    assert!(
        std::path::Path::new(python).exists(),
        "{python} is missing: run scripts/deps (it makes the virtual environment and installs anthropic)"
    );
    let o = Command::new(python)
        .arg(script)
        .arg(&m.mnt)
        .env("SCRATCHFS_WRITER", "memory_tool")
        .env("SCRATCHFS_STEP", "1")
        .output()
        .expect("run the virtual environment's python3");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "memory session failed (is the anthropic package in .venv? scripts/deps installs it):\n{out}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        out.contains("Successfully deleted /memories/scratch.md"),
        "{out}"
    );
    assert_eq!(
        read(m.path("memories/customers/1042.md")),
        "# Customer 1042\n- prefers email, never phone\n- order 1042: 180.00\n- double charge refunded on 2026-11-30\n"
    );
    // Every operation is in the history of the memory, through its renames.
    let hist = Command::new(BIN)
        .args(["history", "memories/customers/1042.md"])
        .env("SCRATCHFS_DB", &m.db)
        .output()
        .unwrap();
    let hist = String::from_utf8_lossy(&hist.stdout);
    let ops: Vec<&str> = hist
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().nth(3).unwrap())
        .collect();
    assert_eq!(ops, ["create", "rename", "rename", "rename"], "{hist}");
    assert!(
        hist.lines()
            .skip(1)
            .all(|l| l.contains("memory_tool") && l.contains("step 1")),
        "{hist}"
    );
    assert_eq!(
        m.sql("SELECT COUNT(*) FROM event_log WHERE op = 'unlink' AND path = 'memories/scratch.md' AND writer = 'memory_tool'"),
        "1"
    );
    // The deleted memory comes back from .archive.
    m.sh_ok("cp .archive/memories/scratch.md memories/scratch.md");
    assert_eq!(read(m.path("memories/scratch.md")), "temporary notes\n");
    let fsck = Command::new(BIN)
        .arg("fsck")
        .env("SCRATCHFS_DB", &m.db)
        .status()
        .unwrap();
    assert!(fsck.success(), "fsck found faults");
}
