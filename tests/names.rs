//! Any legal name works everywhere (SPEC §8, issue 10): a name of 255 bytes, names that
//! are not UTF-8 (100 bytes of 0xff, and of 0xfe, which an older store could not tell
//! apart) and a name with a newline, a tab and an escape survive `export` with their
//! exact bytes, and `show`, `history`, `log`, MANIFEST, `.history/` and `.archive/` show
//! each as itself: quoted in text (never a raw control character on a terminal), exactly
//! in `--json` (`path`, plus `path_hex` for a name that is not UTF-8).

mod common;
use common::*;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::Command;

/// The hostile names, and how text output quotes each.
fn names() -> Vec<(Vec<u8>, String)> {
    let octal = |b: u8, n: usize| format!("\"{}\"", format!("\\{b:o}").repeat(n));
    vec![
        (vec![b'L'; 255], "L".repeat(255)),
        (vec![0xff; 100], octal(0xff, 100)),
        (vec![0xfe; 100], octal(0xfe, 100)),
        (
            b"a\nb\tc\x1b[31md".to_vec(),
            r#""a\nb\tc\033[31md""#.to_string(),
        ),
    ]
}

/// `scratchfs ARGS` (raw bytes) on the mount's database: exit code, stdout, stderr.
fn run(m: &Mount, args: &[&[u8]]) -> (i32, Vec<u8>, String) {
    let o = Command::new(BIN)
        .args(args.iter().map(|a| OsStr::from_bytes(a)))
        .env("SCRATCHFS_DB", &m.db)
        .output()
        .expect("run scratchfs");
    (
        o.status.code().unwrap_or(-1),
        o.stdout,
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// Text output that succeeded, checked to hold no raw control character but newlines.
fn text(m: &Mount, args: &[&[u8]]) -> String {
    let (code, out, err) = run(m, args);
    assert_eq!(code, 0, "{args:?}: {err}");
    let out = String::from_utf8(out).expect("text output is UTF-8");
    assert!(
        !out.chars().any(|c| c.is_control() && c != '\n'),
        "{args:?} printed a raw control character:\n{out:?}"
    );
    out
}

/// The exact bytes a `--json` object gives for its name field `key`.
fn json_name(o: &serde_json::Value, key: &str) -> Vec<u8> {
    match o.get(format!("{key}_hex")).and_then(|h| h.as_str()) {
        Some(hex) => (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
            .collect(),
        None => o[key].as_str().unwrap().as_bytes().to_vec(),
    }
}

/// Every line of `--json` output, parsed.
fn json_lines(m: &Mount, args: &[&[u8]]) -> Vec<serde_json::Value> {
    let (code, out, err) = run(m, args);
    assert_eq!(code, 0, "{args:?}: {err}");
    String::from_utf8(out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The names in a directory, as raw bytes, sorted.
fn listing(dir: &Path) -> Vec<Vec<u8>> {
    let mut v: Vec<Vec<u8>> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().file_name().as_bytes().to_vec())
        .collect();
    v.sort();
    v
}

fn join(a: &[u8], b: &[u8]) -> Vec<u8> {
    [a, b"/", b].concat()
}

#[test]
fn every_legal_name_survives_export_show_history_log_and_the_views() {
    // Names of 255 bytes, each shown as `\377` (four characters a byte): MANIFEST gets
    // a budget large enough to list every one whole.
    let m = Mount::with_args(&["--manifest-tokens", "20000"]);
    let names = names();
    let at = |rel: &[u8]| m.mnt.join(OsStr::from_bytes(rel));
    std::fs::create_dir(m.path("old")).unwrap();
    // Each name: a live file with three versions (create, v1, v2), and the same name
    // under old/, written and deleted.
    for (i, (name, _)) in names.iter().enumerate() {
        std::fs::write(at(name), format!("v1 {i}\n")).unwrap();
        std::fs::write(at(name), format!("v2 {i}\n")).unwrap();
        std::fs::write(at(&join(b"old", name)), format!("old {i}\n")).unwrap();
        std::fs::remove_file(at(&join(b"old", name))).unwrap();
    }

    // export: every name with its exact bytes and its content; none clash.
    let out = m.dir.path().join("export");
    let (code, _, err) = run(&m, &[b"export", out.as_os_str().as_bytes()]);
    assert_eq!(code, 0, "{err}");
    let mut want: Vec<Vec<u8>> = names.iter().map(|(n, _)| n.clone()).collect();
    // old/ is empty now, and part of the tree (issue 14: export writes the namespace).
    want.extend([&b"findings.md"[..], b"plan.md", b"state.json", b"old"].map(|n| n.to_vec()));
    want.sort();
    assert_eq!(listing(&out), want);
    for (i, (name, _)) in names.iter().enumerate() {
        let got = std::fs::read(out.join(OsStr::from_bytes(name))).unwrap();
        assert_eq!(got, format!("v2 {i}\n").as_bytes());
    }

    let manifest = read(m.path("MANIFEST"));
    assert!(
        !manifest.chars().any(|c| c.is_control() && c != '\n'),
        "{manifest:?}"
    );
    let full_log = text(&m, &[b"log"]);
    for (i, (name, quoted)) in names.iter().enumerate() {
        let old = join(b"old", name);
        let quoted_old = match quoted.strip_prefix('"') {
            Some(q) => format!("\"old/{q}"),
            None => format!("old/{quoted}"),
        };
        // show: the bytes of each version, found by the exact name.
        let (code, bytes, err) = run(&m, &[b"show", name]);
        assert_eq!(
            (code, bytes),
            (0, format!("v2 {i}\n").into_bytes()),
            "{err}"
        );
        let spec = [&name[..], b"@1"].concat();
        let (code, bytes, err) = run(&m, &[b"show", &spec]);
        assert_eq!(
            (code, bytes),
            (0, format!("v1 {i}\n").into_bytes()),
            "{err}"
        );
        let spec = [&old[..], b"@1"].concat();
        let (code, bytes, err) = run(&m, &[b"show", &spec]);
        assert_eq!(
            (code, bytes),
            (0, format!("old {i}\n").into_bytes()),
            "{err}"
        );
        let shown = &json_lines(&m, &[b"show", b"--json", name])[0];
        assert_eq!(json_name(shown, "path"), *name);
        assert_eq!(shown["content"], format!("v2 {i}\n"));

        // history: two versions, each on one line with the name quoted.
        let h = text(&m, &[b"history", name]);
        assert_eq!(h.lines().count(), 3, "a header and two versions: {h}");
        assert!(
            h.lines()
                .skip(1)
                .all(|l| l.contains(&format!("  {quoted}  names-"))),
            "{h}"
        );
        let h = json_lines(&m, &[b"history", b"--json", name]);
        assert_eq!(h.len(), 2);
        assert!(h.iter().all(|v| json_name(v, "path") == *name));
        let h = text(&m, &[b"history", &old]);
        assert_eq!(h.lines().count(), 2, "a header and one version: {h}");
        assert!(h.contains(&quoted_old), "{h}");

        // log: the name's own rows, and its deletion under old/.
        let l = text(&m, &[b"log", name]);
        let ops: Vec<&str> = l
            .lines()
            .map(|r| r.split_whitespace().nth(2).unwrap())
            .collect();
        assert_eq!(ops, ["create", "write"], "{l}");
        assert!(
            l.lines().all(|r| r.contains(&format!(" {quoted}  v"))),
            "{l}"
        );
        let l = json_lines(&m, &[b"log", b"--json", &old]);
        assert_eq!(l.len(), 2, "{l:?}");
        assert!(l.iter().all(|e| json_name(e, "path") == old));
        assert_eq!(l[1]["op"], "unlink");
        assert!(
            full_log.contains(&format!("unlink   {quoted_old}  ")),
            "{full_log}"
        );

        // MANIFEST: one row per live file, named as quoted.
        let rows: Vec<&str> = manifest
            .lines()
            .filter(|r| r.starts_with(&format!("{quoted} ")))
            .collect();
        assert_eq!(rows.len(), 1, "{manifest}");

        // .history/<name>/: its versions; .history/old/<name>/ and .archive/old/<name>.
        let hist = at(&join(b".history", name));
        assert_eq!(listing(&hist), [b"000001", b"000002"].map(|n| n.to_vec()));
        assert_eq!(read(hist.join("000001")), format!("v1 {i}\n"));
        let hist_old = at(&join(b".history", &old));
        assert_eq!(read(hist_old.join("000001")), format!("old {i}\n"));
        assert_eq!(read(at(&join(b".archive", &old))), format!("old {i}\n"));
        if name.len() + b".outline".len() <= 255 {
            // A file of 5 bytes is its own outline (an outline is never larger than its
            // file; the header's quoting: tests/views.rs).
            let outline = read(at(&[&name[..], b".outline"].concat()));
            assert_eq!(outline, read(at(name)), "{quoted}");
        }
    }
    // The trees list every name with its exact bytes.
    let mut live: Vec<Vec<u8>> = names.iter().map(|(n, _)| n.clone()).collect();
    live.sort();
    let history_root = listing(&m.path(".history"));
    assert!(
        live.iter().all(|n| history_root.contains(n)),
        "{history_root:?}"
    );
    assert_eq!(listing(&m.path(".history/old")), live);
    assert_eq!(listing(&m.path(".archive/old")), live);
    // MANIFEST lists the latest three deletions, newest first, where to get them back.
    let restorable: Vec<&str> = manifest
        .lines()
        .skip_while(|l| *l != "restorable:")
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .collect();
    assert_eq!(restorable.len(), 3, "{manifest}");
    for (line, (_, quoted)) in restorable.iter().zip(names.iter().rev()) {
        let q = quoted.trim_matches('"');
        let (file, archive) = if quoted.starts_with('"') {
            (format!("\"old/{q}\""), format!("\".archive/old/{q}\""))
        } else {
            (format!("old/{q}"), format!(".archive/old/{q}"))
        };
        assert!(line.starts_with(&format!("  {file} deleted by ")), "{line}");
        assert!(line.ends_with(&format!(": {archive}")), "{line}");
    }
    // diff and restore find each name too.
    for (i, (name, quoted)) in names.iter().enumerate() {
        let spec = [&name[..], b"@1"].concat();
        let d = text(&m, &[b"diff", &spec]);
        let label = match quoted.strip_suffix('"') {
            Some(q) => format!("{q}@1\""),
            None => format!("{quoted}@1"),
        };
        assert!(d.starts_with(&format!("--- {label}\n")), "{d}");
        assert!(d.contains(&format!("-v1 {i}\n+v2 {i}\n")), "{d}");
        let r = text(&m, &[b"restore", &spec]);
        assert!(r.ends_with(": version 1 restored\n"), "{r}");
        assert_eq!(
            std::fs::read(at(name)).unwrap(),
            format!("v1 {i}\n").as_bytes()
        );
    }
    let (code, _, err) = run(&m, &[b"fsck"]);
    assert_eq!(code, 0, "{err}");
}

/// A database written before paths were stored losslessly holds each byte that is not
/// UTF-8 as U+FFFD. Its files are still found by their exact names: by the commands, and
/// in `.history/` and `.archive/` once mounted again; `export` skips, with a warning, what
/// such paths make clash or too long.
#[test]
fn an_older_databases_lossy_paths_are_still_found() {
    let mut m = Mount::new();
    let at = |m: &Mount, rel: &[u8]| m.mnt.join(OsStr::from_bytes(rel));
    std::fs::write(at(&m, b"k\xff"), "kept\n").unwrap();
    std::fs::write(at(&m, b"k\xfe"), "other\n").unwrap();
    std::fs::write(at(&m, &[0xff; 100]), "long\n").unwrap();
    std::fs::write(at(&m, b"gone\xfe"), "gone\n").unwrap();
    std::fs::remove_file(at(&m, b"gone\xfe")).unwrap();
    m.unmount();
    // What an older scratchfs wrote: U+FFFD (65533) where the store now writes U+EFxx.
    m.sql(
        "UPDATE files SET path = replace(replace(path, char(61439), char(65533)), char(61438), char(65533));
         UPDATE versions SET path = replace(replace(path, char(61439), char(65533)), char(61438), char(65533));
         UPDATE events SET path = replace(replace(path, char(61439), char(65533)), char(61438), char(65533));",
    );
    assert_eq!(
        m.sql("SELECT count(*) FROM versions WHERE path = 'k' || char(65533)"),
        "2"
    );
    let (code, out, err) = run(&m, &[b"show", b"k\xff"]);
    assert_eq!((code, out), (0, b"kept\n".to_vec()), "{err}");
    let (code, out, err) = run(&m, &[b"show", b"k\xfe"]);
    assert_eq!((code, out), (0, b"other\n".to_vec()), "{err}");
    // export writes the tree from the namespace log (issue 14), whose names are the
    // nodes' exact bytes even in such a database: nothing clashes, nothing is too long.
    let out = m.dir.path().join("export");
    let (code, _, err) = run(&m, &[b"export", out.as_os_str().as_bytes()]);
    assert_eq!(code, 0, "{err}");
    assert!(!err.contains("stored lossily"), "{err}");
    assert_eq!(listing(&out).len(), 6, "{:?}", listing(&out));
    assert_eq!(read(out.join(OsStr::from_bytes(b"k\xfe"))), "other\n");
    assert_eq!(read(out.join(OsStr::from_bytes(&[0xff; 100]))), "long\n");
    let h = text(&m, &[b"history", b"gone\xfe"]);
    assert_eq!(h.lines().count(), 2, "a header and one version: {h}");
    let l = text(&m, &[b"log", b"gone\xfe"]);
    assert_eq!(l.lines().count(), 2, "{l}");
    m.start();
    assert_eq!(read(at(&m, b".history/k\xff/000001")), "kept\n");
    assert_eq!(read(at(&m, b".archive/gone\xfe")), "gone\n");
    // A new version of the live file is recorded under its exact name.
    std::fs::write(at(&m, b"k\xff"), "new\n").unwrap();
    assert_eq!(
        listing(&at(&m, b".history/k\xff")),
        [b"000001", b"000002"].map(|n| n.to_vec())
    );
    let (code, out, err) = run(&m, &[b"show", b"k\xff@1"]);
    assert_eq!((code, out), (0, b"kept\n".to_vec()), "{err}");
}

/// A version's inputs in `--json` name a file that is not UTF-8 as every other path
/// field does (U+FFFD and `path_hex`), never in the store's own form (U+EF80-U+EFFF:
/// helper finding).
#[test]
fn inputs_in_json_name_a_file_that_is_not_utf8_losslessly() {
    let m = Mount::new();
    let name: &[u8] = b"in\xff\xfe";
    std::fs::write(m.mnt.join(OsStr::from_bytes(name)), "source\n").unwrap();
    // One process reads it, then writes out.txt: out.txt's version has it as input.
    m.sh_ok(
        "python3 -c 'import os; os.read(os.open(b\"in\\xff\\xfe\", os.O_RDONLY), 100); \
         open(\"out.txt\", \"w\").write(\"derived\\n\")'",
    );
    let h = json_lines(&m, &[b"history", b"--json", b"out.txt"]);
    let inputs = h[0]["inputs"].as_array().expect("inputs");
    assert_eq!(inputs.len(), 1, "{h:?}");
    assert_eq!(json_name(&inputs[0], "path"), name, "{h:?}");
    let (code, out, err) = run(&m, &[b"log", b"--json", b"out.txt"]);
    assert_eq!(code, 0, "{err}");
    let out = String::from_utf8(out).unwrap();
    assert!(out.contains("path_hex"), "{out}");
    assert!(
        !out.chars().any(|c| ('\u{ef80}'..='\u{efff}').contains(&c)),
        "the store's form of a path leaked: {out}"
    );
}
