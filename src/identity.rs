//! Who is calling: the facts of the process behind a FUSE request, read from `/proc`.
//!
//! The request pid (FUSE protocol `fuse_in_header.pid`) is a *thread* id, may be 0 (requests
//! the kernel makes on its own, or callers in another pid namespace) and can be reused, so
//! it is only a hint (FUSE-TRAPS §17). It is mapped to its thread group id through
//! `/proc/<pid>/status` (`Tgid:`), and the process is identified by `(tgid, start time)`,
//! the start time being field 22 of `/proc/<tgid>/stat` (clock ticks since boot, proc(5)).
//! uid and gid come from the request header (the kernel's fsuid/fsgid, not forgeable);
//! `exe`, `argv` and the environment come from `/proc/<tgid>/{exe,cmdline,environ}`.
//! `exe` is the path as the *caller's* mount namespace renders it, so it names nothing the
//! kernel vouches for (a bind mount in a private namespace puts any binary at any path);
//! what identifies the executable is [`ExeFile`], the device and inode `stat(2)` of the
//! magic link `/proc/<tgid>/exe` gives (the kernel follows it to the file itself), with
//! whether the process shares the daemon's mount and user namespaces (docs/security.md).
//! `SCRATCHFS_WRITER` and `SCRATCHFS_STEP` are read from the environment the process was
//! started with (later `setenv` calls are invisible), and are cooperative claims.

use std::collections::HashMap;
use std::sync::Arc;

use crate::sync::Mutex;

/// Environment variable naming the writer a process claims (SPEC §5, cooperative).
pub const WRITER_ENV: &str = "SCRATCHFS_WRITER";
/// Environment variable carrying the agent step, an integer (SPEC §5).
pub const STEP_ENV: &str = "SCRATCHFS_STEP";

/// The facts about one calling process, as recorded in provenance.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize)]
pub struct Caller {
    /// Resolved writer name (SPEC §5): without writer rules, the `SCRATCHFS_WRITER` tag if
    /// set, else `anonymous`.
    pub writer: String,
    /// The request's pid (a thread id; 0 when the kernel sent the request on its own).
    pub pid: u32,
    /// Thread group id (the process id) of `pid`; 0 when unknown.
    pub tgid: u32,
    /// Process start time, in clock ticks since boot (proc(5) `stat` field 22); 0 if unknown.
    pub start_time: u64,
    /// fsuid of the request.
    pub uid: u32,
    /// fsgid of the request.
    pub gid: u32,
    /// Absolute path of the executable, empty when unreadable.
    pub exe: String,
    /// Command line, one element per argument, well-known secrets redacted.
    pub argv: Vec<String>,
    /// Value of `SCRATCHFS_WRITER` in the process environment.
    pub env_writer: Option<String>,
    /// Value of `SCRATCHFS_STEP`, when it parses as an integer (for an MCP call: the
    /// call's `step` argument).
    pub step: Option<i64>,
    /// How the change arrived when not through the mount: `mcp` (issue 12); `None` for
    /// the mount and the command line.
    #[serde(default)]
    pub transport: Option<String>,
    /// The MCP client's name from its handshake (`initialize`'s `clientInfo.name`);
    /// `None` outside MCP.
    #[serde(default)]
    pub client: Option<String>,
    /// The MCP client's version (`clientInfo.version`).
    #[serde(default)]
    pub client_version: Option<String>,
    /// The executable's identity and owner (`stat(2)` of `/proc/<tgid>/exe`); `None` when
    /// it could not be read. What an `exe` matcher compares (docs/rules.md).
    #[serde(skip)]
    pub exe_file: Option<ExeFile>,
    /// Whether the process runs in the daemon's own mount and user namespaces (their
    /// inode numbers, `/proc/<tgid>/ns/{mnt,user}`, namespaces(7)); `false` when they
    /// cannot be read. A process in another namespace matches no `exe` matcher unless the
    /// writer says `exe_any_namespace`. Recorded with the provenance (`processes.own_ns`).
    #[serde(default)]
    pub same_ns: bool,
    /// The user namespace the process runs in, by its inode number
    /// (`/proc/<tgid>/ns/user`); 0 when unknown. A uid of a request is the kernel's view
    /// in the namespace the mount was made in: root inside an agent's user namespace that
    /// maps it to root outside is root here (docs/security.md). Recorded with the
    /// provenance (`processes.user_ns`).
    #[serde(default)]
    pub user_ns: u64,
    /// Supplementary groups (`/proc/<tgid>/status` `Groups:`), to tell whether the process
    /// may write its own executable.
    #[serde(skip)]
    pub groups: Vec<u32>,
    /// The process runs the program it shows as a set-user-ID or set-group-ID program
    /// ([`ExeFile::set_id_of`]: its ids came from executing that very file) and no other
    /// process of the request's uid may control it (the kernel names another user as its
    /// controller, [`controller_of`]: it is not dumpable, so no `ptrace`, no
    /// `/proc/<pid>/mem`, and the loader ignored `LD_PRELOAD`). A process its own uid
    /// controls may be made to run any code, may make itself non-dumpable, and may even
    /// show another executable (`PR_SET_MM_MAP` with `exe_fd`, from a child sharing its
    /// memory in a user namespace of its own): it matches no `exe` matcher unless it is
    /// root's (docs/rules.md).
    #[serde(skip)]
    pub sealed: bool,
}

/// What `stat(2)` of `/proc/<pid>/exe` says of the file a process executes: the kernel
/// follows the magic link to the file itself (proc(5)), so, unlike its `readlink`, the
/// answer does not depend on which path the caller's mount namespace shows for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ExeFile {
    /// `st_dev` and `st_ino`: the file's identity.
    pub id: FileKey,
    /// `st_uid`, the file's owner.
    pub uid: u32,
    /// `st_gid`.
    pub gid: u32,
    /// `st_mode` (permission bits and type).
    pub mode: u32,
}

/// A file's identity: `(st_dev, st_ino)` (stat(2)).
pub type FileKey = (u64, u64);

impl ExeFile {
    /// Whether a process with `ids` got them by executing this file as a set-user-ID or
    /// set-group-ID program (execve(2)): the file is set-user-ID and the process's
    /// effective uid is the file's owner but its real uid is not, or set-group-ID (with
    /// group execute) and its effective gid is the file's group but its real gid is not.
    /// A process cannot give itself such ids without executing such a file (setresgid(2)
    /// needs `CAP_SETGID`), while anything it may do to itself (`PR_SET_DUMPABLE`,
    /// `PR_SET_MM_MAP` with `exe_fd`) leaves them as they were.
    pub fn set_id_of(&self, ids: &Ids) -> bool {
        let (mode, [ruid, euid, ..], [rgid, egid, ..]) = (self.mode, ids.uid, ids.gid);
        let setuid = mode & libc::S_ISUID != 0 && euid == self.uid && ruid != self.uid;
        let setgid = mode & (libc::S_ISGID | libc::S_IXGRP) == (libc::S_ISGID | libc::S_IXGRP)
            && egid == self.gid
            && rgid != self.gid;
        setuid || setgid
    }

    /// Whether a process of `uid` with groups `gid` and `groups` may write this file or
    /// change its mode: it owns it, or its mode lets its group or everyone write. Such a
    /// file names no one but its writers: an `exe` matcher never matches a process that
    /// may write its own executable (root excepted, who may write anything and is trusted,
    /// docs/security.md).
    pub fn writable_by(&self, uid: u32, gid: u32, groups: &[u32]) -> bool {
        self.uid == uid
            || self.mode & 0o002 != 0
            || (self.mode & 0o020 != 0 && (self.gid == gid || groups.contains(&self.gid)))
    }
}

/// `stat(2)` of `path` (following links, and so the magic link `/proc/<pid>/exe`).
pub fn exe_file(path: &str) -> Option<ExeFile> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some(ExeFile {
        id: (m.dev(), m.ino()),
        uid: m.uid(),
        gid: m.gid(),
        mode: m.mode(),
    })
}

/// The user the kernel lets control process `tgid` (ptrace(2) "access mode checks"): the
/// owner of `/proc/<tgid>/stat`, which procfs sets afresh at every lookup of the path to
/// the process's effective uid while it is dumpable, and to root (of the user namespace
/// its memory belongs to) once it is not (proc(5); the directory `/proc/<tgid>` itself
/// keeps the effective uid either way). `None` once the process is gone.
pub fn controller_of(tgid: u32) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(format!("/proc/{tgid}/stat"))
        .ok()
        .map(|m| m.uid())
}

/// Whether every piece of code process `tgid` may run comes from a file its user cannot
/// write, the executable `exe` among them: each executable mapping of
/// `/proc/<tgid>/maps` (proc(5)) is the kernel's (`[vdso]`, `[vsyscall]`) or a file,
/// found through the process's own root (`/proc/<tgid>/root`, so in its mount namespace)
/// with the device and inode the mapping names, that neither the request's ids nor the
/// process's real ones (`ids`, with `groups`) may write ([`ExeFile::writable_by`]).
/// Anonymous executable memory (a JIT's, or code copied there), a memfd or a deleted
/// file fails it. A set-group-ID tool that may make files with its group's
/// set-group-ID bit (`cp --preserve=mode` of the agent's own binary) would otherwise
/// mint the agent a program that runs with the tool's group, whose code is the agent's
/// and which may show the tool as its executable (`PR_SET_MM_MAP`; third attack round of
/// issue 32). Read only for a process [`ExeFile::set_id_of`] already holds.
fn code_is_sealed(tgid: u32, exe: &ExeFile, ids: &Ids, gid: u32, groups: &[u32]) -> bool {
    let Ok(maps) = std::fs::read_to_string(format!("/proc/{tgid}/maps")) else {
        return false;
    };
    let mut exe_mapped = false;
    for line in maps.lines() {
        // address perms offset dev inode [path]
        let mut f = line.splitn(6, ' ');
        let (Some(_), Some(perms), Some(_), Some(dev), Some(inode)) =
            (f.next(), f.next(), f.next(), f.next(), f.next())
        else {
            return false;
        };
        if perms.as_bytes().get(2) != Some(&b'x') {
            continue;
        }
        let path = f.next().unwrap_or("").trim_start();
        let Ok(inode) = inode.parse::<u64>() else {
            return false;
        };
        if inode == 0 {
            if path == "[vdso]" || path == "[vsyscall]" {
                continue;
            }
            return false;
        }
        let Some((major, minor)) = dev.split_once(':').and_then(|(a, b)| {
            Some((
                u32::from_str_radix(a, 16).ok()?,
                u32::from_str_radix(b, 16).ok()?,
            ))
        }) else {
            return false;
        };
        if !path.starts_with('/') || path.ends_with(" (deleted)") {
            return false;
        }
        let Some(file) = exe_file(&format!("/proc/{tgid}/root{path}")) else {
            return false;
        };
        if file.id != (libc::makedev(major, minor), inode) {
            return false;
        }
        let [ruid, _, _, fsuid] = ids.uid;
        if file.writable_by(fsuid, gid, groups) || file.writable_by(ruid, ids.gid[0], groups) {
            return false;
        }
        exe_mapped |= file.id == exe.id;
    }
    exe_mapped
}

/// The inode number of namespace `kind` (`mnt`, `user`) of process `pid` (`self` for
/// this one): `stat(2)` of `/proc/<pid>/ns/<kind>` (namespaces(7)); `None` when it cannot
/// be read (another user's process, for a daemon that is not root).
fn namespace(pid: &str, kind: &str) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(format!("/proc/{pid}/ns/{kind}"))
        .ok()
        .map(|m| m.ino())
}

/// This process's own mount and user namespaces, read once.
fn own_namespaces() -> (Option<u64>, Option<u64>) {
    static OWN: std::sync::OnceLock<(Option<u64>, Option<u64>)> = std::sync::OnceLock::new();
    *OWN.get_or_init(|| (namespace("self", "mnt"), namespace("self", "user")))
}

impl Caller {
    /// The caller used for work the daemon or a CLI command does on its own behalf.
    pub fn internal(writer: &str) -> Caller {
        let pid = std::process::id();
        Caller {
            writer: writer.to_string(),
            pid,
            tgid: pid,
            uid: unsafe { libc::geteuid() },
            gid: unsafe { libc::getegid() },
            exe: std::env::current_exe()
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
            argv: std::env::args().collect(),
            env_writer: std::env::var(WRITER_ENV).ok(),
            step: std::env::var(STEP_ENV).ok().and_then(|s| s.parse().ok()),
            exe_file: exe_file("/proc/self/exe"),
            same_ns: true,
            user_ns: own_namespaces().1.unwrap_or(0),
            ..Default::default()
        }
    }
}

/// Resolves request pids to [`Caller`]s, caching per process and re-checking the start
/// time so that a reused pid is never mistaken for the earlier process.
#[derive(Default)]
pub struct Resolver {
    cache: Mutex<HashMap<u32, Cached>>,
}

/// A resolved caller, with what vouches for it: its stat key and, for the first
/// [`KEPT_STAT_FILES`] entries, its `/proc/<pid>/stat` kept open, so that a hit costs one
/// `pread` rather than an open, a read and a close (a path walk through procfs; issue 32).
/// A file kept open names the process, not the number: once the process is gone, reading
/// it fails (`ESRCH`) even if the pid is reused, and the entry is resolved afresh.
struct Cached {
    key: StatKey,
    caller: Arc<Caller>,
    stat: Option<Arc<std::fs::File>>,
}

/// How many cache entries keep their `/proc/<pid>/stat` open (file descriptors held).
const KEPT_STAT_FILES: usize = 256;

/// What makes a cached caller still valid for a pid: (thread start time, stack start).
type StatKey = (u64, u64);

/// Entries kept before the cache is cleared (bounded memory under pid churn).
const CACHE_LIMIT: usize = 4096;

impl Resolver {
    /// A resolver with an empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// The caller behind a request with header `pid`, `uid`, `gid`. Never fails: facts that
    /// cannot be read (process already gone, pid 0) are left empty.
    ///
    /// A cache hit costs one read of `/proc/<pid>/stat`: the entry for `pid` is reused only
    /// if that thread's start time and its address space's stack start (proc(5) fields 22
    /// and 28; the latter changes at every `execve`, so a process that forks and then
    /// execs is resolved afresh) and the request's uid and gid are unchanged.
    pub fn resolve(&self, pid: u32, uid: u32, gid: u32) -> Arc<Caller> {
        if pid == 0 {
            return Arc::new(Self::lookup(pid, uid, gid));
        }
        let cached = self
            .cache
            .lock()
            .get(&pid)
            .map(|e| (e.key, e.caller.clone(), e.stat.clone()));
        if let Some((k, c, stat)) = cached {
            let now = match &stat {
                Some(f) => key_of(f),
                None => stat_key(pid),
            };
            if now == Some(k) && c.uid == uid && c.gid == gid && still_sealed(&c) {
                return c;
            }
        }
        let stat = std::fs::File::open(format!("/proc/{pid}/stat")).ok();
        let Some(key) = stat.as_ref().and_then(key_of) else {
            return Arc::new(Self::lookup(pid, uid, gid));
        };
        // An exec between the two reads of the stat key would mix two programs' facts (the
        // old program's argv with the new one's exe): read again, and cache only facts
        // read between two equal keys.
        let (mut key, mut c, mut tries) = (key, Self::lookup(pid, uid, gid), 0);
        loop {
            match stat.as_ref().and_then(key_of) {
                Some(after) if after == key => break,
                Some(after) if tries < 3 => {
                    (key, c, tries) = (after, Self::lookup(pid, uid, gid), tries + 1);
                }
                // Gone, or still changing: facts nothing vouches for, not cached.
                _ => {
                    c.exe_file = None;
                    return Arc::new(c);
                }
            }
        }
        let c = Arc::new(c);
        let mut cache = self.cache.lock();
        if cache.len() >= CACHE_LIMIT {
            cache.clear();
        }
        cache.remove(&pid);
        let kept = cache.values().filter(|e| e.stat.is_some()).count();
        cache.insert(
            pid,
            Cached {
                key,
                caller: c.clone(),
                stat: stat.filter(|_| kept < KEPT_STAT_FILES).map(Arc::new),
            },
        );
        c
    }

    /// Reads every fact of the caller from `/proc`.
    fn lookup(pid: u32, uid: u32, gid: u32) -> Caller {
        // One read of the thread's status: its thread group, and the groups (the same for
        // every thread of the process).
        let (tgid, groups, ids) = if pid == 0 {
            (0, Vec::new(), None)
        } else {
            let st = status_of(pid);
            (st.tgid.unwrap_or(pid), st.groups, st.ids)
        };
        let mut c = Caller {
            pid,
            tgid,
            start_time: if tgid == 0 {
                0
            } else {
                stat_key(tgid).map(|k| k.0).unwrap_or(0)
            },
            uid,
            gid,
            ..Default::default()
        };
        if tgid != 0 {
            c.exe = std::fs::read_link(format!("/proc/{tgid}/exe"))
                .map(|p| p.display().to_string())
                .unwrap_or_default();
            c.exe_file = exe_file(&format!("/proc/{tgid}/exe"));
            c.sealed = c.exe_file.zip(ids).is_some_and(|(f, ids)| {
                f.set_id_of(&ids)
                    && controller_of(tgid).is_some_and(|owner| owner != uid)
                    && code_is_sealed(tgid, &f, &ids, gid, &groups)
            });
            let t = tgid.to_string();
            let (mnt, user) = (namespace(&t, "mnt"), namespace(&t, "user"));
            let (own_mnt, own_user) = own_namespaces();
            c.same_ns = mnt.is_some() && mnt == own_mnt && user.is_some() && user == own_user;
            c.user_ns = user.unwrap_or(0);
            c.groups = groups;
            // A command line can carry a secret (`echo KEY > f`): stored redacted, like
            // refused content (SPEC §10 "no secret at rest").
            c.argv = read_nul_list(&format!("/proc/{tgid}/cmdline"))
                .into_iter()
                .map(|a| {
                    String::from_utf8_lossy(&crate::rules::enforce::redact_secrets(a.as_bytes()))
                        .into_owned()
                })
                .collect();
            for kv in read_nul_list(&format!("/proc/{tgid}/environ")) {
                if let Some(v) = kv.strip_prefix("SCRATCHFS_WRITER=") {
                    // Redacted like argv: a secret-looking tag names no writer. At most
                    // ENV_WRITER_MAX bytes of it are kept (a writer name is at most 64:
                    // a longer tag names none; 130 KB tags were stored whole with every
                    // process, attack round of session 34).
                    let v = crate::rules::enforce::redact_secrets(v.as_bytes());
                    c.env_writer = Some(crate::text::cut(
                        String::from_utf8_lossy(&v).into_owned(),
                        ENV_WRITER_MAX,
                    ));
                } else if let Some(v) = kv.strip_prefix("SCRATCHFS_STEP=") {
                    c.step = v.trim().parse().ok();
                }
            }
        }
        c.writer = c
            .env_writer
            .clone()
            .filter(|w| is_writer_name(w))
            .unwrap_or_else(|| "anonymous".to_string());
        c
    }
}

/// Whether a cached caller that was [`Caller::sealed`] still is, and still executes the
/// same file; always true for one that was not (nothing it could match depends on it).
/// The stat key does not tell a sealed tool that exec'd a program its caller named from
/// the tool (the program keeps the tool's set-group-ID, so it stays sealed, and it may
/// put the old stack start back, `PR_SET_MM_MAP`, or run with ASLR off): its executable
/// does. Two `stat`s per request, for sealed callers only (attack round of issue 32).
fn still_sealed(c: &Caller) -> bool {
    if !c.sealed {
        return true;
    }
    controller_of(c.tgid).is_some_and(|owner| owner != c.uid)
        && exe_file(&format!("/proc/{}/exe", c.tgid)).map(|f| f.id) == c.exe_file.map(|f| f.id)
}

/// At most this many bytes of a process's `SCRATCHFS_WRITER` are recorded
/// (`processes.env_writer`; [`is_writer_name`] takes at most 64).
pub const ENV_WRITER_MAX: usize = 256;

/// A `SCRATCHFS_WRITER` value names a writer when it is 1 to 64 printable characters
/// without spaces; anything else (a newline, say) leaves the caller `anonymous`, while the
/// raw value is still recorded as `env_writer`.
pub fn is_writer_name(w: &str) -> bool {
    !w.is_empty()
        && w.len() <= 64
        && w.chars().all(|c| {
            c.is_ascii_graphic() || (!c.is_ascii() && !c.is_control() && !c.is_whitespace())
        })
}

/// Supplementary groups of process `pid` (`/proc/<pid>/status` `Groups:`); empty when
/// unreadable.
pub fn groups_of(pid: u32) -> Vec<u32> {
    status_of(pid).groups
}

/// A process's user and group ids (`/proc/<pid>/status` `Uid:` and `Gid:`, proc(5)):
/// real, effective, saved, filesystem.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ids {
    /// Real, effective, saved and filesystem uid.
    pub uid: [u32; 4],
    /// Real, effective, saved and filesystem gid.
    pub gid: [u32; 4],
}

/// What [`Resolver`] reads of `/proc/<pid>/status` (proc(5)).
struct Status {
    /// `Tgid:`.
    tgid: Option<u32>,
    /// `Groups:`, the supplementary groups.
    groups: Vec<u32>,
    /// `Uid:` and `Gid:`.
    ids: Option<Ids>,
}

/// `Tgid:`, `Groups:`, `Uid:` and `Gid:` of `/proc/<pid>/status` (proc(5)).
fn status_of(pid: u32) -> Status {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return Status {
            tgid: None,
            groups: Vec::new(),
            ids: None,
        };
    };
    let field = |name: &str| status.lines().find_map(|l| l.strip_prefix(name));
    let numbers = |v: &str| -> Vec<u32> {
        v.split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect()
    };
    let four = |name: &str| -> Option<[u32; 4]> { numbers(field(name)?).try_into().ok() };
    Status {
        tgid: field("Tgid:").and_then(|v| v.trim().parse().ok()),
        groups: field("Groups:").map(numbers).unwrap_or_default(),
        ids: four("Uid:")
            .zip(four("Gid:"))
            .map(|(uid, gid)| Ids { uid, gid }),
    }
}

/// Fields 22 (start time, clock ticks since boot) and 28 (start of the stack) of
/// `/proc/<pid>/stat`. The command name (field 2) may contain spaces and parentheses, so
/// fields are counted after its closing parenthesis.
fn stat_key(pid: u32) -> Option<StatKey> {
    key_of(&std::fs::File::open(format!("/proc/{pid}/stat")).ok()?)
}

/// The stat key read from an open `/proc/<pid>/stat` (one `pread` at offset 0, which
/// procfs answers afresh); `None` once the process is gone.
fn key_of(f: &std::fs::File) -> Option<StatKey> {
    use std::os::unix::fs::FileExt;
    let mut buf = [0u8; 1024];
    let n = f.read_at(&mut buf, 0).ok()?;
    let stat = std::str::from_utf8(&buf[..n]).ok()?;
    let mut rest = stat[stat.rfind(')')? + 1..].split_whitespace();
    let start = rest.nth(19)?.parse().ok()?;
    let stack = rest.nth(5)?.parse().ok()?;
    Some((start, stack))
}

fn read_nul_list(path: &str) -> Vec<String> {
    std::fs::read(path)
        .map(|b| {
            b.split(|&c| c == 0)
                .filter(|s| !s.is_empty())
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_own_process() {
        let r = Resolver::new();
        let me = std::process::id();
        let c = r.resolve(me, 0, 0);
        assert_eq!(c.tgid, me);
        assert!(c.start_time > 0);
        assert!(c.exe.contains("scratchfs"), "exe {}", c.exe);
        assert!(!c.argv.is_empty());
    }

    #[test]
    fn exec_in_the_same_process_is_a_new_caller() {
        // A shell that opens a file, then execs another program under the same pid.
        let r = Resolver::new();
        let mut child = std::process::Command::new("bash")
            .arg("-c")
            .arg("read -r _; exec env SCRATCHFS_WRITER=after sleep 5")
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(200));
        let before = r.resolve(child.id(), 0, 0);
        assert!(before.exe.ends_with("bash"), "{}", before.exe);
        use std::io::Write;
        child.stdin.as_mut().unwrap().write_all(b"go\n").unwrap();
        std::thread::sleep(std::time::Duration::from_millis(300));
        let after = r.resolve(child.id(), 0, 0);
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(after.exe.ends_with("sleep"), "{}", after.exe);
        assert_eq!(after.env_writer.as_deref(), Some("after"));
        assert_eq!(after.start_time, before.start_time);
    }

    #[test]
    fn a_process_gone_is_not_its_cached_caller() {
        // Its `/proc/<pid>/stat` is kept open by the cache; once the process is gone, that
        // file reads nothing, and the pid (free for reuse) is resolved afresh.
        let r = Resolver::new();
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id();
        let before = r.resolve(pid, 0, 0);
        assert!(before.exe.ends_with("sleep"), "{}", before.exe);
        assert!(
            r.cache.lock().get(&pid).is_some_and(|e| e.stat.is_some()),
            "the entry keeps its stat file open"
        );
        child.kill().unwrap();
        child.wait().unwrap();
        let after = r.resolve(pid, 0, 0);
        assert!(
            !Arc::ptr_eq(&before, &after),
            "the cached caller of a process gone"
        );
        assert_eq!(after.exe, "", "facts of a process gone: {after:?}");
    }

    /// Runs a copy of `sleep` as uid 1000 (no supplementary groups) from a directory uid
    /// 1000 may enter; `setgid`: the copy is set-group-ID `nogroup` (65534), so that the
    /// process is not dumpable. Needs root (the test suite runs as root).
    fn sleep_as_agent(dir: &std::path::Path, setgid: bool) -> std::process::Child {
        use std::os::unix::fs::PermissionsExt;
        use std::os::unix::process::CommandExt;
        let bin = dir.join(if setgid { "sealed-sleep" } else { "sleep" });
        let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: `c` is a NUL-terminated path and `st` a buffer statvfs fills.
        let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
        assert_eq!(unsafe { libc::statvfs(c.as_ptr(), &mut st) }, 0);
        assert!(
            st.f_flag & libc::ST_NOSUID == 0,
            "cannot test a set-group-ID program: {} is on a nosuid filesystem",
            dir.display()
        );
        std::fs::copy("/bin/sleep", &bin).unwrap();
        if setgid {
            std::os::unix::fs::chown(&bin, Some(0), Some(65534)).unwrap();
        }
        let mode = if setgid { 0o2755 } else { 0o755 };
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(mode)).unwrap();
        std::process::Command::new(&bin)
            .arg("30")
            .uid(1000)
            .gid(1000)
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot run {} as uid 1000 (root needed): {e}",
                    bin.display()
                )
            })
    }

    /// A process of uid 1000 is sealed only when it runs a set-group-ID program, the
    /// kernel names another controller (not when it merely made itself non-dumpable) and
    /// its code is in files the agent cannot write (not a set-group-ID binary of the
    /// agent's own); a sealed caller's cached facts are reused only while it
    /// still executes the same file, whatever its stat key says (attack round of issue
    /// 32: a tool that exec'd its caller's program, stack start put back).
    #[test]
    fn a_sealed_caller_is_reused_only_while_it_executes_the_same_file() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let r = Resolver::new();
        let mut plain = sleep_as_agent(dir.path(), false);
        let mut sealed = sleep_as_agent(dir.path(), true);
        let c = r.resolve(plain.id(), 1000, 1000);
        assert!(c.exe.ends_with("/sleep") && !c.sealed, "{c:?}");
        // A process that made itself non-dumpable is still its user's: it could have done
        // anything to itself first (helper finding).
        // Here a set-group-ID copy of the interpreter, run with no_new_privs: the kernel
        // ignores the bit (as for a traced exec), so the process keeps the agent's gid
        // and its code is the agent's (a preloaded library would be loaded).
        let python = dir.path().join("sealed-python");
        std::fs::copy(std::fs::canonicalize("/usr/bin/python3").unwrap(), &python).unwrap();
        std::os::unix::fs::chown(&python, Some(0), Some(65534)).unwrap();
        std::fs::set_permissions(&python, std::fs::Permissions::from_mode(0o2755)).unwrap();
        let mut own = {
            use std::os::unix::process::CommandExt;
            let mut cmd = std::process::Command::new(&python);
            cmd.args(["-c", "import ctypes, time\nctypes.CDLL(None).prctl(4, 0, 0, 0, 0)\nprint(flush=True)\ntime.sleep(30)"])
                .uid(1000)
                .gid(1000)
                .stdout(std::process::Stdio::piped());
            // SAFETY: prctl only sets a flag of the child, between fork and exec.
            unsafe {
                cmd.pre_exec(|| {
                    if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
            cmd.spawn().unwrap()
        };
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(own.stdout.as_mut().unwrap()),
            &mut line,
        )
        .unwrap();
        assert_eq!(controller_of(own.id()), Some(0), "not dumpable");
        let c = r.resolve(own.id(), 1000, 1000);
        assert!(!c.sealed, "a process that made itself non-dumpable: {c:?}");
        // A set-group-ID binary of the agent's own (a tool that may set modes minted it,
        // `cp --preserve=mode`): the tool's group, not dumpable, but the agent's code
        // (third attack round).
        let minted = dir.path().join("minted");
        std::fs::copy("/bin/sleep", &minted).unwrap();
        std::os::unix::fs::chown(&minted, Some(1000), Some(65534)).unwrap();
        std::fs::set_permissions(&minted, std::fs::Permissions::from_mode(0o2755)).unwrap();
        let mut mint = {
            use std::os::unix::process::CommandExt;
            std::process::Command::new(&minted)
                .arg("30")
                .uid(1000)
                .gid(1000)
                .spawn()
                .unwrap()
        };
        let c = r.resolve(mint.id(), 1000, 1000);
        assert!(
            c.exe_file.is_some_and(|f| f.gid == 65534) && !c.sealed,
            "the agent's own set-group-ID binary: {c:?}"
        );
        let pid = sealed.id();
        let c = r.resolve(pid, 1000, 1000);
        assert!(c.exe.ends_with("/sealed-sleep") && c.sealed, "{c:?}");
        assert!(Arc::ptr_eq(&c, &r.resolve(pid, 1000, 1000)), "a hit");
        // As if it had exec'd another file with the stat key unchanged.
        let mut other = (*c).clone();
        other.exe_file = exe_file("/bin/sh");
        r.cache.lock().get_mut(&pid).unwrap().caller = Arc::new(other);
        let again = r.resolve(pid, 1000, 1000);
        assert_eq!(
            again.exe_file, c.exe_file,
            "the facts of the file it executes"
        );
        for child in [&mut plain, &mut sealed, &mut own, &mut mint] {
            child.kill().unwrap();
            child.wait().unwrap();
        }
    }

    #[test]
    fn writer_names_are_printable_words() {
        assert!(is_writer_name("get_order") && is_writer_name("tool-7.v2"));
        for bad in ["", "a b", "evil\nwriter", &"x".repeat(65)] {
            assert!(!is_writer_name(bad), "{bad:?}");
        }
    }

    #[test]
    fn pid_zero_is_unknown_not_an_error() {
        let c = Resolver::new().resolve(0, 5, 6);
        assert_eq!((c.tgid, c.uid, c.gid), (0, 5, 6));
        assert_eq!(c.writer, "anonymous");
    }
}
