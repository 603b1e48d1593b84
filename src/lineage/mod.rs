//! Lineage and grounding (issue 13; docs/SEMANTICS.md "Lineage"): what each version was
//! derived from, lost updates across opens, and which numbers of a reply have a source.
//!
//! - [`ReadLog`]: read provenance in the daemon's memory. When a process opens a file for
//!   reading (an `open`, not each `read`), the daemon notes the version it got; a version
//!   that process commits records those reads as its `inputs` (the store's `inputs`
//!   table), and a commit that replaces a file the process had read at an older version
//!   than the current one, committed by another process since, is a lost update
//!   (`ESTALE`, decided in the store's transaction, as every lost update is).
//! - [`why`]: the lineage of a file or of one JSON key, walked through the store.
//! - [`ground`]: the tokens of a reply and where the scratchpad holds each.

pub mod ground;
pub mod sources;
pub mod why;

use std::collections::HashMap;

use crate::store::Input;
use crate::sync::Mutex;

/// The inputs of a version as JSON (the `user.scratchfs.inputs` attribute, `log --json`,
/// `history --json`): an array of objects `{"path", "version", "writer", "via", "read",
/// "read_ns"}`, `read` as RFC 3339 UTC; `path`, `version` and `writer` are `null` for a
/// version gc forgot; a path that is not UTF-8 has U+FFFD for its bytes and `path_hex`
/// beside it ([`crate::cli::json_name`]).
pub fn inputs_json(inputs: &[crate::store::InputInfo]) -> serde_json::Value {
    inputs
        .iter()
        .map(|i| {
            let mut o = serde_json::json!({
                "path": i.path,
                "version": i.version,
                "writer": i.writer,
                "via": i.via,
                "read": crate::cli::time::utc(i.read_ns).replace(' ', "T"),
                "read_ns": i.read_ns,
            });
            // The path as the other JSON outputs give it: not the stored form of a name
            // that is not UTF-8, but U+FFFD for its bytes and `path_hex` beside it.
            crate::cli::json_paths(&mut o, &["path"]);
            o
        })
        .collect()
}

/// Reads kept per process: the latest read of each of its last 64 files. A commit records
/// at most this many inputs.
pub const READS_PER_PROCESS: usize = 64;

/// Processes whose reads are kept: the 1,024 that read or wrote last. A process beyond
/// that loses its reads (its later commits record fewer inputs, and a lost update of its
/// goes unseen; docs/SEMANTICS.md).
pub const PROCESSES: usize = 1024;

/// A process, as provenance identifies it: thread group id and start time (proc(5)
/// `stat` field 22, clock ticks), so that a reused pid is another process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ProcessKey {
    /// Thread group id.
    pub tgid: u32,
    /// Start time, clock ticks since boot.
    pub start_time: u64,
}

impl ProcessKey {
    /// The key of `caller`; `None` when its process is unknown (a request the kernel sent
    /// on its own, pid 0).
    pub fn of(caller: &crate::identity::Caller) -> Option<ProcessKey> {
        (caller.tgid != 0).then_some(ProcessKey {
            tgid: caller.tgid,
            start_time: caller.start_time,
        })
    }
}

/// What a process knows of one lineage.
#[derive(Debug, Clone, Copy)]
struct Seen {
    file_id: i64,
    /// Its latest read: the version (`versions.id`) and when, ns.
    read: Option<Input>,
    /// The latest version of the live file it read, or committed itself after such a read
    /// (`versions.id`): a commit of its that replaces the file from another open is a lost
    /// update when the file's head is later than this. `None`: it never read the live file.
    known: Option<i64>,
}

#[derive(Debug, Default)]
struct Process {
    /// Most recently seen last; at most [`READS_PER_PROCESS`].
    seen: Vec<Seen>,
    /// When it last read or wrote ([`Inner::tick`]), for eviction.
    touched: u64,
}

#[derive(Debug, Default)]
struct Inner {
    procs: HashMap<ProcessKey, Process>,
    tick: u64,
}

impl Inner {
    fn process(&mut self, key: ProcessKey) -> &mut Process {
        self.tick += 1;
        let tick = self.tick;
        if !self.procs.contains_key(&key) && self.procs.len() >= PROCESSES {
            let oldest = self
                .procs
                .iter()
                .min_by_key(|(_, p)| p.touched)
                .map(|(k, _)| *k);
            if let Some(k) = oldest {
                self.procs.remove(&k);
            }
        }
        let p = self.procs.entry(key).or_default();
        p.touched = tick;
        p
    }
}

impl Process {
    /// The entry of `file_id`, moved to the end (most recent); a new one evicts the
    /// least recent beyond [`READS_PER_PROCESS`].
    fn entry(&mut self, file_id: i64) -> &mut Seen {
        match self.seen.iter().position(|s| s.file_id == file_id) {
            Some(i) => {
                let s = self.seen.remove(i);
                self.seen.push(s);
            }
            None => {
                if self.seen.len() >= READS_PER_PROCESS {
                    self.seen.remove(0);
                }
                self.seen.push(Seen {
                    file_id,
                    read: None,
                    known: None,
                });
            }
        }
        self.seen.last_mut().expect("just pushed")
    }
}

/// Read provenance of the processes using the mount (see the module's docs). Memory:
/// at most [`PROCESSES`] × [`READS_PER_PROCESS`] entries of 40 bytes (2.6 MB).
#[derive(Debug, Default)]
pub struct ReadLog {
    inner: Mutex<Inner>,
}

impl ReadLog {
    /// Notes that process `key` opened version `version_id` of lineage `file_id` for
    /// reading at `read_ns`.
    pub fn note_read(&self, key: ProcessKey, file_id: i64, version_id: i64, read_ns: i64) {
        self.record(key, file_id, version_id, read_ns, true);
    }

    /// Notes that process `key` read version `version_id` of lineage `file_id` that is not
    /// the live file's (under `.history` or `.archive`): an input of its next commit, but
    /// not what it knows of the live file (`cp .history/f/3 f` restores, it loses nothing).
    pub fn note_input(&self, key: ProcessKey, file_id: i64, version_id: i64, read_ns: i64) {
        self.record(key, file_id, version_id, read_ns, false);
    }

    fn record(&self, key: ProcessKey, file_id: i64, version_id: i64, read_ns: i64, live: bool) {
        let mut inner = self.inner.lock();
        let s = inner.process(key).entry(file_id);
        s.read = Some(Input {
            version_id,
            read_ns,
        });
        if live {
            s.known = Some(s.known.map_or(version_id, |k| k.max(version_id)));
        }
    }

    /// Notes that process `key` committed version `version_id` of lineage `file_id`: if it
    /// had read the file, it knows this content too (its next commit there is not a lost
    /// update for it).
    pub fn note_write(&self, key: ProcessKey, file_id: i64, version_id: i64) {
        let mut inner = self.inner.lock();
        let s = inner.process(key).entry(file_id);
        s.known = s.known.map(|k| k.max(version_id));
    }

    /// The latest version of lineage `file_id` process `key` read (or committed after
    /// reading it), `versions.id`: the base its next replacing commit from a write-only
    /// open is checked against. `None` for a lineage it never read live (a blind write is
    /// not checked).
    pub fn known(&self, key: ProcessKey, file_id: i64) -> Option<i64> {
        let inner = self.inner.lock();
        let p = inner.procs.get(&key)?;
        p.seen
            .iter()
            .find(|s| s.file_id == file_id)
            .and_then(|s| s.known)
    }

    /// The reads of process `key`, oldest first: the inputs of its next commit.
    pub fn inputs(&self, key: ProcessKey) -> Vec<Input> {
        let inner = self.inner.lock();
        let Some(p) = inner.procs.get(&key) else {
            return Vec::new();
        };
        let mut out: Vec<Input> = p.seen.iter().filter_map(|s| s.read).collect();
        out.sort_by_key(|i| (i.read_ns, i.version_id));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: ProcessKey = ProcessKey {
        tgid: 10,
        start_time: 5,
    };
    const Q: ProcessKey = ProcessKey {
        tgid: 10,
        start_time: 6,
    };

    #[test]
    fn reads_become_inputs_and_known_versions() {
        let log = ReadLog::default();
        log.note_read(P, 1, 11, 100);
        log.note_read(P, 2, 21, 200);
        log.note_read(P, 1, 12, 300);
        assert_eq!(
            log.inputs(P),
            vec![
                Input {
                    version_id: 21,
                    read_ns: 200
                },
                Input {
                    version_id: 12,
                    read_ns: 300
                }
            ]
        );
        assert_eq!(log.known(P, 1), Some(12));
        // Another process with the same pid (reused) knows nothing.
        assert_eq!(log.known(Q, 1), None);
        assert!(log.inputs(Q).is_empty());
        // A commit moves what it knows on; a file only written is not checked.
        log.note_write(P, 1, 15);
        assert_eq!(log.known(P, 1), Some(15));
        log.note_write(P, 3, 31);
        assert_eq!(log.known(P, 3), None);
        assert_eq!(log.inputs(P).len(), 2);
        // A read of an old version (a restore) is an input, not knowledge of the file.
        log.note_input(P, 4, 41, 400);
        assert_eq!(log.known(P, 4), None);
        assert_eq!(log.inputs(P).len(), 3);
    }

    #[test]
    fn bounded_per_process_and_in_processes() {
        let log = ReadLog::default();
        for f in 0..(READS_PER_PROCESS as i64 + 10) {
            log.note_read(P, f, f + 1000, f);
        }
        let inputs = log.inputs(P);
        assert_eq!(inputs.len(), READS_PER_PROCESS);
        assert_eq!(inputs[0].version_id, 1010, "the oldest reads went first");
        for t in 0..(PROCESSES as u32 + 5) {
            let k = ProcessKey {
                tgid: 100 + t,
                start_time: 1,
            };
            log.note_read(k, 1, 1, 1);
        }
        assert!(log.inner.lock().procs.len() <= PROCESSES);
        assert_eq!(log.known(P, 5), None, "the least recent process went first");
    }
}
