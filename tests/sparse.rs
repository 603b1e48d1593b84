//! Issue 10 item 1: sparse files. Truncate, ftruncate, fallocate and written zeros store
//! no zeros (a hole is a range without an extent); holes read as zeros; sizes past the
//! maximum get EFBIG; fallocate's default and keep-size modes work, the others answer
//! EOPNOTSUPP; SEEK_DATA/SEEK_HOLE answer as the kernel's default (docs/SEMANTICS.md).

mod common;
use common::*;

/// Bytes stored in extents (inline data and blobs) for `path`'s current version's stream.
fn stored_bytes(m: &Mount, path: &str) -> u64 {
    m.sql(&format!(
        "SELECT COALESCE(SUM(e.len), 0) FROM extents e
         WHERE e.stream = (SELECT stream FROM heads WHERE current_path = '{path}' AND deleted_ns IS NULL)"
    ))
    .parse()
    .unwrap()
}

#[test]
fn a_terabyte_sparse_file_stores_a_few_bytes_and_reads_zeros() {
    let m = Mount::new();
    let before = m.db_bytes();
    m.sh_ok("truncate -s 1T big && printf tail >> big");
    assert_eq!(
        std::fs::metadata(m.path("big")).unwrap().len(),
        (1u64 << 40) + 4
    );
    assert_eq!(m.sh_ok("tail -c 4 big"), "tail");
    // A read inside the hole: zeros.
    assert_eq!(
        m.sh_ok("dd if=big bs=1M skip=500000 count=1 status=none | tr -d '\\0' | wc -c"),
        "0\n"
    );
    // Stored: the appended bytes and the one byte that marks the end of the hole.
    assert!(
        stored_bytes(&m, "big") <= 5,
        "{} bytes stored",
        stored_bytes(&m, "big")
    );
    m.sql("SELECT 1");
    assert!(
        m.db_bytes() - before < 2 << 20,
        "the database grew by {} bytes",
        m.db_bytes() - before
    );
    // Versions: the truncation and the append, each with its digest (block form past
    // 1 GiB), which fsck recomputes.
    let v = m.versions("big");
    assert_eq!(v.last().unwrap().2, (1u64 << 40) + 4, "{v:?}");
    assert!(
        m.head_hash("big").starts_with("b3m:"),
        "{}",
        m.head_hash("big")
    );
    assert_eq!(
        m.sh_ok("getfattr --only-values -n user.scratchfs.blake3 big"),
        m.head_hash("big")
    );
    let (code, out, err) = cli(&m, &["fsck"]);
    assert_eq!(code, 0, "{out} {err}");
}

#[test]
fn holes_and_written_zeros_read_back_like_a_sparse_file_on_tmpfs() {
    let m = Mount::new();
    // The same operations on the mount and on a plain file outside it; then the bytes
    // (and the digest of small content: plain blake3) must be the same.
    let reference = m.dir.path().join("ref");
    let ops = |f: &str| {
        format!(
            "printf head > {f} && truncate -s 3M {f} && printf mid | dd of={f} bs=1 seek=2000000 conv=notrunc status=none \
             && dd if=/dev/zero bs=1M count=2 status=none >> {f} && printf end >> {f} && truncate -s 6M {f}"
        )
    };
    m.sh_ok(&ops("f"));
    m.sh_ok(&ops(reference.to_str().unwrap()));
    assert_eq!(
        std::fs::read(m.path("f")).unwrap(),
        std::fs::read(&reference).unwrap()
    );
    assert_eq!(
        m.head_hash("f"),
        blake3::hash(&std::fs::read(&reference).unwrap())
            .to_hex()
            .to_string()
    );
    // Written zeros were not stored either.
    assert!(
        stored_bytes(&m, "f") < 64 << 10,
        "{}",
        stored_bytes(&m, "f")
    );
    // Every version reads back whole from .history (holes included).
    let n = m.versions("f").len();
    assert!(n >= 6, "{n} versions");
    let (code, out, err) = cli(&m, &["fsck"]);
    assert_eq!(code, 0, "{out} {err}");
}

#[test]
fn sizes_past_the_maximum_get_efbig() {
    let m = Mount::new();
    let py = |code: &str| {
        m.sh(&format!("python3 -c '{code}'"))
            .status
            .code()
            .unwrap_or(-1)
    };
    let script = "
import os, errno, sys
fd = os.open(\"f\", os.O_CREAT | os.O_WRONLY)
def efbig(f, *a):
    try:
        f(*a)
    except OSError as e:
        if e.errno == errno.EFBIG:
            return
        print(f.__name__, e); sys.exit(2)
    print(f.__name__, \"succeeded\"); sys.exit(3)
efbig(os.ftruncate, fd, 1 << 60)
efbig(os.pwrite, fd, b\"x\", (1 << 53))
efbig(os.posix_fallocate, fd, 1 << 62, 10)
os.ftruncate(fd, (1 << 53) - 1)
os.close(fd)
";
    assert_eq!(py(script), 0);
    assert_eq!(
        std::fs::metadata(m.path("f")).unwrap().len(),
        (1u64 << 53) - 1
    );
    let e = m.sh("truncate -s 16E f");
    assert!(!e.status.success());
    assert_eq!(
        std::fs::metadata(m.path("f")).unwrap().len(),
        (1u64 << 53) - 1
    );
}

#[test]
fn fallocate_default_and_keep_size_work_other_modes_are_eopnotsupp() {
    let m = Mount::new();
    m.sh_ok("printf abc > f && fallocate -l 1G f");
    assert_eq!(std::fs::metadata(m.path("f")).unwrap().len(), 1 << 30);
    assert_eq!(m.sh_ok("head -c 3 f"), "abc");
    // Keep-size changes nothing; a range inside the file changes nothing.
    m.sh_ok("fallocate -n -o 0 -l 2G f && fallocate -o 10 -l 100 f");
    assert_eq!(std::fs::metadata(m.path("f")).unwrap().len(), 1 << 30);
    let before = m.versions("f").len();
    for (mode, flag) in [
        ("punch hole", "-p"),
        ("zero range", "-z"),
        ("collapse range", "-c"),
        ("insert range", "-i"),
    ] {
        let o = m.sh(&format!("fallocate {flag} -o 0 -l 4096 f"));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{mode} succeeded");
        assert!(
            err.contains("not supported") || err.contains("unsupported"),
            "{mode}: {err}"
        );
    }
    assert_eq!(m.versions("f").len(), before);
    // glibc's posix_fallocate (what databases call) works.
    m.sh_ok("python3 -c 'import os; fd = os.open(\"g\", os.O_CREAT | os.O_WRONLY); os.posix_fallocate(fd, 0, 5 << 20); os.close(fd)'");
    assert_eq!(std::fs::metadata(m.path("g")).unwrap().len(), 5 << 20);
    assert!(stored_bytes(&m, "g") <= 1);
}

#[test]
fn seek_data_and_seek_hole_answer_as_the_kernel_default() {
    let m = Mount::new();
    m.sh_ok("truncate -s 10M f && printf x >> f");
    // No FUSE lseek: the kernel's generic answer: data from 0, the only hole at EOF.
    let out = m.sh_ok(
        "python3 -c 'import os; fd = os.open(\"f\", os.O_RDONLY); print(os.lseek(fd, 5, os.SEEK_DATA), os.lseek(fd, 5, os.SEEK_HOLE))'",
    );
    let size = (10u64 << 20) + 1;
    assert_eq!(out, format!("5 {size}\n"));
}

#[test]
fn stress_ng_fsize_with_verify_passes_five_runs_in_a_row() {
    let m = Mount::new();
    for run in 1..=5 {
        let o = m.sh("stress-ng --fsize 2 --fsize-ops 1000 --verify --temp-path . 2>&1");
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success() && out.contains("successful run completed"),
            "stress-ng run {run} (is stress-ng installed? scripts/deps installs it):\n{out}"
        );
    }
    // The mount still answers.
    m.sh_ok("echo ok > after && cat after");
}

#[test]
fn export_keeps_holes_and_show_streams_them() {
    let m = Mount::new();
    m.sh_ok(
        "truncate -s 1T big && printf tail >> big && printf x > small && truncate -s 100000 small",
    );
    let out = m.dir.path().join("out");
    let (code, o, e) = cli(&m, &["export", out.to_str().unwrap()]);
    assert_eq!(code, 0, "{o} {e}");
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(out.join("big")).unwrap();
    assert_eq!(meta.len(), (1u64 << 40) + 4);
    // Sparse: a few blocks, not a terabyte.
    assert!(meta.blocks() < 1024, "{} blocks", meta.blocks());
    let f = std::fs::File::open(out.join("big")).unwrap();
    let mut tail = [0u8; 4];
    std::os::unix::fs::FileExt::read_exact_at(&f, &mut tail, 1u64 << 40).unwrap();
    assert_eq!(&tail, b"tail");
    let mut small = b"x".to_vec();
    small.resize(100000, 0);
    assert_eq!(std::fs::read(out.join("small")).unwrap(), small);
    let (code, o, _) = cli(&m, &["show", "small"]);
    assert_eq!(code, 0);
    assert_eq!(o.len(), 100000);
}

/// gc cuts a stream back to its longest kept version; a kept version ending in a hole
/// keeps its end marker, so fsck stays clean and appends read right.
#[test]
fn gc_keeps_the_end_of_a_version_ending_in_a_hole() {
    let m = Mount::new();
    m.sh_ok(
        "truncate -s 200000 f && printf X | dd of=f bs=1 seek=199990 conv=notrunc status=none \
         && truncate -s 190000 f",
    );
    let (code, o, e) = cli(&m, &["gc", "--keep-last", "1"]);
    assert_eq!(code, 0, "{o} {e}");
    let (code, o, e) = cli(&m, &["fsck"]);
    assert_eq!(code, 0, "fsck after gc: {o} {e}");
    m.sh_ok("printf Y >> f");
    let mut want = vec![0u8; 190000];
    want.push(b'Y');
    assert_eq!(std::fs::read(m.path("f")).unwrap(), want);
    let (code, o, e) = cli(&m, &["fsck"]);
    assert_eq!(code, 0, "{o} {e}");
}
