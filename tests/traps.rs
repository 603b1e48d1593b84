//! One test per FUSE trap of ../shared/FUSE-TRAPS.md that applies to scratchfs, each on a
//! real mount. The trap number is in the test's doc comment.

mod common;
use common::*;

/// Trap 1 and 3: after another process commits, a fresh stat and read see the new size
/// and content at once, growing and shrinking.
#[test]
fn stale_size_or_content_after_another_process_commit() {
    let m = Mount::new();
    for i in 0..30 {
        let expect = if i % 3 == 2 {
            format!("{i}\n")
        } else {
            "x".repeat(i * 97)
        };
        m.sh_ok(&format!("printf '%s' '{expect}' > f"));
        let out = m.sh_ok("stat -c %s f; wc -c < f; cat f");
        let mut lines = out.splitn(3, '\n');
        let st: usize = lines.next().unwrap().trim().parse().unwrap();
        let wc: usize = lines.next().unwrap().trim().parse().unwrap();
        assert_eq!(st, expect.len(), "stat size after commit {i}");
        assert_eq!(wc, expect.len(), "read size after commit {i}");
        assert_eq!(lines.next().unwrap_or(""), expect);
    }
    // A reader that keeps its file open across the commits sees whole versions only.
    let out = m.sh_ok("printf old > g; exec 3<g; printf newer > g; cat <&3; echo; cat g");
    assert_eq!(out, "old\nnewer");
}

/// Trap 3: the size of an open, written, not yet committed handle is what stat reports.
#[test]
fn pending_size_is_reported_while_writing() {
    let m = Mount::new();
    let out = m.sh_ok("exec 3>f; printf abc >&3; stat -c %s f; exec 3>&-; stat -c %s f; cat f");
    assert_eq!(out, "3\n3\nabc");
}

/// Trap 5: `echo hi > f` — the shell's dup2 flushes the handle before echo writes.
#[test]
fn echo_redirect_flush_before_write() {
    let m = Mount::new();
    m.sh_ok("echo hi > f");
    assert_eq!(read(m.path("f")), "hi\n");
    let v = m.versions("f");
    assert_eq!(v.last().unwrap().2, 3, "{v:?}");
    assert_eq!(v[0].1, "create");
}

/// Trap 5: a forked child's exit flushes the parent's descriptor; later writes still land.
#[test]
fn flush_from_forked_child() {
    let m = Mount::new();
    m.sh_ok("(exec 3>g; sh -c true; printf x >&3; sh -c true; printf y >&3)");
    assert_eq!(read(m.path("g")), "xy");
    m.sh_ok("yes | head -c 3000000 | dd of=h bs=1M status=none");
    assert_eq!(std::fs::metadata(m.path("h")).unwrap().len(), 3_000_000);
    let v = m.versions("h");
    assert_eq!(v.last().unwrap().2, 3_000_000, "{v:?}");
}

/// Trap 4: a shorter O_TRUNC overwrite leaves no old tail; truncate and touch work.
#[test]
fn shorter_o_trunc_overwrite() {
    let m = Mount::new();
    m.sh_ok("printf abc > f; printf 1 > f");
    assert_eq!(read(m.path("f")), "1");
    m.sh_ok("truncate -s 0 f");
    assert_eq!(std::fs::metadata(m.path("f")).unwrap().len(), 0);
    m.sh_ok("touch -d '2001-02-03 04:05:06 UTC' f");
    assert_eq!(m.sh_ok("date -u -r f +%Y"), "2001\n");
    let v = m.versions("f");
    assert_eq!(
        v.last().unwrap(),
        &(v.len() as i64, "truncate".to_string(), 0)
    );
}

/// Trap 4 and 5: the shell flushes an O_TRUNC handle (its dup2) before writing; that
/// flush owes the truncation rather than committing an empty version. The handle's
/// release commits it (and an opener waits for a release on its way); while the handle
/// stays open, other processes see the committed content (issue 11: readers never see
/// what was never committed).
#[test]
fn o_trunc_flush_before_write_makes_one_version_and_hides_nothing() {
    let m = Mount::new();
    m.sh_ok("printf 'old text' > f; echo new > f");
    let ops: Vec<String> = m.versions("f").into_iter().map(|v| v.1).collect();
    assert_eq!(ops, ["create", "write"]);
    // Emptying a file with a bare redirection commits the truncation.
    assert_eq!(m.sh_ok(": > f; wc -c < f; stat -c %s f"), "0\n0\n");
    assert_eq!(m.versions("f").last().unwrap().1, "truncate");
    // Held open (its copies flushed by the children that exit): other processes see the
    // committed content; the close commits what the handle wrote, one version.
    m.sh_ok("printf 'again' > g");
    let out = m.sh_ok("exec 3>g; stat -c %s g; cat g | wc -c; printf z >&3; exec 3>&-; cat g");
    assert_eq!(out, "5\n5\nz");
    let ops: Vec<String> = m.versions("g").into_iter().map(|v| v.1).collect();
    assert_eq!(ops, ["create", "write"]);
}

/// Trap 8: rm -rf of a 2,000-entry directory (readdir cookies stay stable while entries
/// disappear between calls).
#[test]
fn rm_rf_of_2000_entry_directory() {
    let m = Mount::new();
    m.sh_ok("mkdir d && cd d && touch $(seq 1 2000)");
    assert_eq!(m.sh_ok("ls d | wc -l").trim(), "2000");
    assert_eq!(m.sh_ok("ls -f d | wc -l").trim(), "2002");
    m.sh_ok("rm -rf d");
    assert!(!m.path("d").exists());
    assert_eq!(
        m.sql("SELECT COUNT(*) FROM events WHERE op = 'unlink'"),
        "2000"
    );
}

/// Trap 10: df and stat -f show non-zero figures.
#[test]
fn df_shows_nonzero_figures() {
    let m = Mount::new();
    let out = m.sh_ok("df -B1 --output=size,avail . | tail -1");
    let nums: Vec<u64> = out.split_whitespace().map(|s| s.parse().unwrap()).collect();
    assert!(nums[0] > 0 && nums[1] > 0, "df: {out}");
    let out = m.sh_ok("stat -f -c '%S %l %c' .");
    let f: Vec<u64> = out.split_whitespace().map(|s| s.parse().unwrap()).collect();
    assert_eq!(f[0], 4096);
    assert_eq!(f[1], 255);
    assert!(f[2] > 0);
}

/// Trap 11: cp -a into and out of the mount succeeds although xattrs are unsupported.
#[test]
fn cp_a_into_and_out_of_the_mount() {
    let m = Mount::new();
    let src = m.dir.path().join("src");
    std::fs::create_dir(&src).unwrap();
    std::fs::write(src.join("f"), "data\n").unwrap();
    let out = m.sh(&format!(
        "chmod 640 {0}/f && touch -d '2010-01-01' {0}/f && cp -a {0}/f . && cp -a {0} sub && cp -a sub {1}/back",
        src.display(),
        m.dir.path().display()
    ));
    assert!(
        out.status.success(),
        "cp -a failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(read(m.path("f")), "data\n");
    assert_eq!(
        m.sh_ok("stat -c '%a %Y' f"),
        m.sh_ok(&format!("stat -c '%a %Y' {}/f", src.display()))
    );
    assert_eq!(read(m.dir.path().join("back/f")), "data\n");
    let err = m.sh("setfattr -n user.k -v v f");
    assert!(!err.status.success());
    assert!(
        String::from_utf8_lossy(&err.stderr).contains("not supported"),
        "setfattr: {}",
        String::from_utf8_lossy(&err.stderr)
    );
}

/// Trap 7: rename over a file another process holds open: the reader keeps the old
/// content, a new open sees the new one, and the target's history continues.
#[test]
fn rename_over_open_file_keeps_reader_content() {
    let m = Mount::new();
    m.sh_ok("printf old > f; printf new > t");
    let out = m.sh_ok("exec 3<f; mv t f; cat <&3; echo; cat f");
    assert_eq!(out, "old\nnew");
    let v = m.versions("f");
    let ops: Vec<&str> = v.iter().map(|x| x.1.as_str()).collect();
    assert_eq!(ops, ["create", "rename"], "{v:?}");
    assert_eq!(v[1].2, 3);
    // A writer whose file was replaced under it is refused at close with ESTALE, and the
    // file that replaced it is intact.
    let out = m.sh_ok(
        "python3 -c '
import errno, os
f = open(\"f\", \"a\")
open(\"f2\", \"w\").write(\"x\")
os.replace(\"f2\", \"f\")
f.write(\"late\")
try:
    f.close(); print(\"closed\")
except OSError as e:
    print(errno.errorcode[e.errno])
'",
    );
    assert_eq!(out.trim(), "ESTALE");
    assert_eq!(read(m.path("f")), "x");
}

/// Trap 1 and 3: a reader of an older version and a reader of the newer one, both open,
/// never mix their bytes through the shared page cache, and the older reader's short
/// read does not leave a stale size behind for others.
#[test]
fn readers_of_two_versions_never_mix_and_size_stays_right() {
    let m = Mount::new();
    let out = m.sh_ok(
        "python3 -c '
import os
f = \"mix\"; n = 1 << 20
open(f, \"wb\").write(b\"A\" * n)
r1 = os.open(f, os.O_RDONLY); first = os.read(r1, 65536)
w = os.open(f, os.O_WRONLY); os.write(w, b\"B\" * n); os.close(w)
r2 = os.open(f, os.O_RDONLY); second = os.read(r2, n); os.close(r2)
rest = b\"\".join(iter(lambda: os.read(r1, 65536), b\"\"))
print((first + rest).count(b\"A\"), second.count(b\"B\"))
'",
    );
    assert_eq!(out, "1048576 1048576\n");
    // A rewrite: the open reader keeps its 5,000 bytes; the size others see is the new one.
    let out = m.sh_ok(
        "head -c 5000 /dev/zero | tr '\\0' E > s; exec 3< s; \
         head -c 25000 /dev/zero | tr '\\0' F > s; r=$(cat <&3); echo ${#r} ${r//E/-}; \
         r=$(cat s); echo ${#r} ${r//F/}; stat -c %s s",
    );
    assert_eq!(out, format!("5000 {}\n25000\n25000\n", "-".repeat(5000)));
    // An append: the open reader follows it (issue 11, `tail -f`).
    let out = m.sh_ok(
        "head -c 5000 /dev/zero | tr '\\0' E > s; exec 3< s; \
         head -c 20000 /dev/zero | tr '\\0' F >> s; cat <&3 | wc -c; \
         stat -c %s s; head -c 100000 s | wc -c",
    );
    assert_eq!(out, "25000\n25000\n25000\n");
}
