//! The redo log: how a small commit is acknowledged before SQLite writes it.
//!
//! A small commit (at most [`MAX_PAYLOAD`] bytes of new content, no fsync) and a create
//! (file or directory) are applied to the writer connection inside one long SQLite
//! transaction, the *batch*, and appended to `<db>-redo` as one record with one
//! `write(2)`; the FUSE reply follows that write. An unlink (or rmdir) is appended and
//! answered at once, and applied to the batch before the next operation or by the fold
//! thread; sequence numbers give the order in which SQLite sees the changes (an operation
//! takes its number before its work, so the log's file order may differ; numbers of
//! operations that stored nothing are skipped).
//!
//! The batch is committed to SQLite (*folded*) within a few ms by the fold thread, before
//! any other kind of change, at `fsync`, and at unmount; the fold records the last
//! sequence number it holds in `meta.redo_seq`, in the same SQLite transaction. A record
//! in the page cache survives `kill -9` of the daemon, so an acknowledged change does
//! too: the next open of the database applies the records after `meta.redo_seq` again, in
//! sequence order, and folds them (docs/schema.md, docs/SEMANTICS.md).
//!
//! Replaying gives the same inode numbers and row ids as the first run because the
//! records are applied, in the same order, to the same state: every change that is not
//! logged folds the batch before it is made.
//!
//! Record layout (little-endian): `u32 body_len`, body, 16 bytes of blake3(body). Body:
//! `u64 seq`, `u32 header_len`, the [`Op`] as JSON, then the payload (the content bytes
//! the commit's source supplied, its `pieces` concatenated). A record whose length or
//! checksum does not match at the end of the file (the last record, or zeros to the end)
//! ends the log: a write cut short by the kill, never acknowledged. Damage anywhere
//! before that is never dropped silently: opening the database fails ([`Damage`]) until
//! `scratchfs recover --accept-loss` applies the intact records before it, keeps the
//! whole damaged log as `<db>-redo.damaged-<ns>` and records the loss as an event.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{Attrs, ContentRef, Kind};
use crate::identity::Caller;
use crate::store::error::{ErrorKind, Result, StoreError};

/// Most bytes of new content a commit may carry through the redo log; a larger commit (or
/// one made by `fsync`) is written to SQLite at once, in its own transaction.
pub const MAX_PAYLOAD: u64 = 256 * 1024;

const CHECK_LEN: usize = 16;

/// Largest body a record can have: the payload limit and a generous header.
const MAX_BODY: usize = MAX_PAYLOAD as usize + (16 << 20);

/// Damage in the middle of the log: bytes that are neither whole records nor a tail cut
/// short, with more bytes after them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    /// The log file.
    pub path: PathBuf,
    /// Offset of the first byte that is not part of a whole record, bytes.
    pub offset: u64,
    /// Size of the log file, bytes.
    pub len: u64,
    /// Whole records before the damage.
    pub records: usize,
}

impl Damage {
    /// The refusal to open, as the user reads it ([`ErrorKind::Corrupt`], errno `EIO`):
    /// the file, the offset and what to do.
    pub fn error(&self, db: &Path) -> StoreError {
        StoreError::new(
            ErrorKind::Corrupt,
            format!(
                "the redo log {} is damaged at byte {} of {} ({} whole records before it; the bytes after it are not a write cut short by a crash): the database was not opened, so that no acknowledged change is dropped silently. To apply the {} intact records, keep a copy of the damaged log and record the loss, run: scratchfs recover --accept-loss --db {}",
                self.path.display(),
                self.offset,
                self.len,
                self.records,
                self.records,
                db.display()
            ),
        )
    }
}

/// A store operation as logged: enough to apply it again to the same state.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Op {
    /// [`super::Store::create`].
    Create {
        parent: u64,
        name: Vec<u8>,
        path: String,
        kind: Kind,
        attrs: Attrs,
        caller: Caller,
    },
    /// [`super::Store::unlink`] (a file, `file_id` set) or rmdir.
    Unlink {
        ino: u64,
        file_id: Option<i64>,
        path: String,
        caller: Caller,
        time_ns: i64,
    },
    /// [`super::Store::commit`]; `pieces` are the `(offset, len)` ranges of the commit's
    /// source, whose bytes are the record's payload, in this order.
    Commit {
        ino: u64,
        path: String,
        op: String,
        expect_head: Option<i64>,
        build: LoggedBuild,
        caller: Caller,
        time_ns: i64,
        set_mtime: bool,
        pieces: Vec<(u64, u64)>,
        /// [`super::CommitRequest::inputs`] (absent in logs of older scratchfs).
        #[serde(default)]
        inputs: Vec<super::Input>,
        /// [`super::CommitRequest::origin`] (absent in logs of older scratchfs).
        #[serde(default)]
        origin: Option<super::Origin>,
        /// [`super::CommitRequest::restores`] (absent in logs of older scratchfs).
        #[serde(default)]
        restores: Option<i64>,
    },
    /// [`super::Store::note_read`].
    Read {
        file_id: i64,
        version_id: i64,
        version: i64,
        caller: Caller,
        time_ns: i64,
    },
}

impl Op {
    /// The process the operation was made by.
    pub fn caller(&self) -> &Caller {
        match self {
            Op::Create { caller, .. }
            | Op::Unlink { caller, .. }
            | Op::Commit { caller, .. }
            | Op::Read { caller, .. } => caller,
        }
    }
}

/// [`super::Build`] without borrows.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum LoggedBuild {
    /// [`super::Build::Overlay`].
    Overlay {
        base: ContentRef,
        base_limit: u64,
        size: u64,
        dirty: Vec<(u64, u64)>,
    },
    /// [`super::Build::Append`].
    Append { len: u64 },
    /// [`super::Build::Truncate`].
    Truncate { size: u64 },
}

impl LoggedBuild {
    /// The build this stands for.
    pub fn as_build(&self) -> super::Build<'_> {
        match self {
            LoggedBuild::Overlay {
                base,
                base_limit,
                size,
                dirty,
            } => super::Build::Overlay {
                base: *base,
                base_limit: *base_limit,
                size: *size,
                dirty,
            },
            LoggedBuild::Append { len } => super::Build::Append { len: *len },
            LoggedBuild::Truncate { size } => super::Build::Truncate { size: *size },
        }
    }

    /// Copies `build`.
    pub fn of(build: &super::Build<'_>) -> LoggedBuild {
        match *build {
            super::Build::Overlay {
                base,
                base_limit,
                size,
                dirty,
            } => LoggedBuild::Overlay {
                base,
                base_limit,
                size,
                dirty: dirty.to_vec(),
            },
            super::Build::Append { len } => LoggedBuild::Append { len },
            super::Build::Truncate { size } => LoggedBuild::Truncate { size },
        }
    }

    /// The `(offset, len)` ranges the commit reads from its source: the dirty ranges of
    /// an overlay (source offsets are file offsets), `0..len` of an append, none for a
    /// truncation.
    pub fn source_ranges(&self) -> Vec<(u64, u64)> {
        match self {
            LoggedBuild::Overlay { dirty, .. } => dirty
                .iter()
                .map(|&(s, e)| (s, e.saturating_sub(s)))
                .collect(),
            LoggedBuild::Append { len } => vec![(0, *len)],
            LoggedBuild::Truncate { .. } => Vec::new(),
        }
    }
}

/// One record read back from the log.
#[derive(Debug)]
pub struct Record {
    /// Sequence number, increasing by one per record over the life of the database.
    pub seq: u64,
    /// The operation.
    pub op: Op,
    /// The content bytes of a commit's `pieces`, concatenated.
    pub payload: Vec<u8>,
}

/// Content bytes a commit's source supplied: `ranges` (`(offset, len)`), whose bytes are
/// `data` in order. Serves as the source when the commit is applied.
pub struct Pieces<'a> {
    ranges: &'a [(u64, u64)],
    data: &'a [u8],
}

impl<'a> Pieces<'a> {
    /// Reads `ranges` from `source` into one buffer (at most [`MAX_PAYLOAD`] bytes when
    /// the caller checked the ranges first).
    pub fn capture(
        ranges: &[(u64, u64)],
        source: &mut dyn FnMut(u64, &mut [u8]) -> std::io::Result<()>,
    ) -> std::io::Result<Vec<u8>> {
        let total: u64 = ranges.iter().map(|&(_, n)| n).sum();
        let mut data = vec![0u8; total as usize];
        let mut at = 0usize;
        for &(off, n) in ranges {
            source(off, &mut data[at..at + n as usize])?;
            at += n as usize;
        }
        Ok(data)
    }

    /// The pieces `ranges` of `data`; `data` must hold their lengths' sum.
    pub fn new(ranges: &'a [(u64, u64)], data: &'a [u8]) -> Result<Pieces<'a>> {
        let total: u64 = ranges.iter().map(|&(_, n)| n).sum();
        if total != data.len() as u64 {
            return Err(StoreError::new(
                ErrorKind::Failed,
                format!(
                    "redo log: a commit names {total} bytes but carries {}",
                    data.len()
                ),
            ));
        }
        Ok(Pieces { ranges, data })
    }

    /// Fills `buf` with the source bytes at `off`; every byte must lie in one range.
    pub fn read(&self, off: u64, buf: &mut [u8]) -> std::io::Result<()> {
        let mut at = 0u64;
        for &(s, n) in self.ranges {
            if s <= off && off + buf.len() as u64 <= s + n {
                let from = (at + off - s) as usize;
                buf.copy_from_slice(&self.data[from..from + buf.len()]);
                return Ok(());
            }
            at += n;
        }
        Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "redo log: bytes {off}..{} are not in the record",
                off + buf.len() as u64
            ),
        ))
    }
}

/// The log file, `<db>-redo`, opened for appending.
pub struct RedoLog {
    file: File,
    path: PathBuf,
    len: u64,
}

impl RedoLog {
    /// The log's path for the database at `db`.
    pub fn path_for(db: &Path) -> PathBuf {
        let mut p = db.as_os_str().to_owned();
        p.push("-redo");
        PathBuf::from(p)
    }

    /// Opens (creating, mode 0600) the log of the database at `db`. `EACCES` for a log that
    /// holds records and belongs to neither the database file's owner nor root.
    pub fn open(db: &Path) -> Result<RedoLog> {
        use std::os::unix::fs::OpenOptionsExt;
        let path = Self::path_for(db);
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .mode(0o600)
            .open(&path)
            .map_err(|e| io_error(&path, e))?;
        let meta = file.metadata().map_err(|e| io_error(&path, e))?;
        // A log someone else left beside the database is not applied into it (issue 14: a
        // planted log beside a fork's target): the daemon and the commands that write it
        // run as the database's owner, or as root.
        {
            use std::os::unix::fs::MetadataExt;
            let db_uid = std::fs::metadata(db).map(|m| m.uid()).ok();
            if meta.len() > 0
                && let Some(owner) = db_uid
                && meta.uid() != owner
                && meta.uid() != 0
            {
                return Err(StoreError::new(
                    ErrorKind::Denied,
                    format!(
                        "its redo log {} belongs to uid {}, the database to uid {owner}: not \
                         applied (move it aside if the database's changes are in it)",
                        path.display(),
                        meta.uid()
                    ),
                ));
            }
        }
        let len = meta.len();
        Ok(RedoLog { file, path, len })
    }

    /// A log that holds nothing and takes nothing (`/dev/null`, read-only): the log of a
    /// store opened to read the past ([`super::Sqlite::open_frozen`]), which never writes.
    pub fn detached() -> Result<RedoLog> {
        let path = PathBuf::from("/dev/null");
        let file = File::open(&path).map_err(|e| io_error(&path, e))?;
        Ok(RedoLog { file, path, len: 0 })
    }

    /// Size of the log file, bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the log holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The records of the log, up to a tail cut short by a crash (ignored, with a
    /// warning). Errors: `EIO` ([`Damage::error`]) if the log is damaged before its tail.
    pub fn read_all(&mut self) -> Result<Vec<Record>> {
        let (records, damage) = self.read_checked()?;
        match damage {
            None => Ok(records),
            Some(d) => Err(d.error(&self.db_path())),
        }
    }

    /// The whole records before the first that is not whole, and the damage if what
    /// follows is more than a tail cut short: bytes that cannot be decoded are a torn tail
    /// when they are all zeros (a power cut), or when no whole record starts anywhere
    /// after them and they are no longer than one record (the last `write(2)`, cut short
    /// or damaged, its length field included); anything else is damage.
    pub fn read_checked(&mut self) -> Result<(Vec<Record>, Option<Damage>)> {
        let mut bytes = Vec::new();
        File::open(&self.path)
            .and_then(|mut f| f.read_to_end(&mut bytes))
            .map_err(|e| io_error(&self.path, e))?;
        let mut out = Vec::new();
        let mut at = 0usize;
        while let Some(rec) = decode(&bytes[at..]) {
            at += rec.1;
            out.push(rec.0);
        }
        if at == bytes.len() {
            return Ok((out, None));
        }
        let rest = &bytes[at..];
        // The last record, whatever its damage (its length field included), or zeros: a
        // tail. A whole record found anywhere after the damage: damage in the middle.
        let torn = rest.iter().all(|&b| b == 0)
            || (rest.len() <= 4 + MAX_BODY + CHECK_LEN && !whole_record_after(&bytes, at));
        if torn {
            log::warn!(
                "{}: {} bytes after the last whole record ignored (a write cut short)",
                self.path.display(),
                rest.len()
            );
            return Ok((out, None));
        }
        let damage = Damage {
            path: self.path.clone(),
            offset: at as u64,
            len: bytes.len() as u64,
            records: out.len(),
        };
        Ok((out, Some(damage)))
    }

    /// Accepts the loss of everything from `d.offset` on: copies the whole log to
    /// `<log>.damaged-<ns since the epoch>` (nothing is deleted), then cuts the log back
    /// to its intact records. Returns the copy's path.
    pub fn cut_at_damage(&mut self, d: &Damage) -> Result<PathBuf> {
        let ns = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |t| t.as_nanos());
        let mut copy = self.path.as_os_str().to_owned();
        copy.push(format!(".damaged-{ns}"));
        let copy = PathBuf::from(copy);
        std::fs::copy(&self.path, &copy).map_err(|e| io_error(&copy, e))?;
        self.file
            .set_len(d.offset)
            .map_err(|e| io_error(&self.path, e))?;
        self.file.sync_all().map_err(|e| io_error(&self.path, e))?;
        self.len = d.offset;
        Ok(copy)
    }

    /// The database this log belongs to (its path without `-redo`).
    fn db_path(&self) -> PathBuf {
        let s = self.path.as_os_str().as_encoded_bytes();
        let db = s.strip_suffix(b"-redo").unwrap_or(s);
        PathBuf::from(std::ffi::OsStr::from_bytes(db))
    }

    /// Appends one record with one `write(2)`. On failure the file is cut back to its
    /// previous length, so that no partial record stays; the error keeps its errno
    /// (`ENOSPC` when the disk is full).
    pub fn append(&mut self, seq: u64, op: &Op, payload: &[u8]) -> Result<()> {
        let header = serde_json::to_vec(op)
            .map_err(|e| StoreError::new(ErrorKind::Failed, format!("redo log: encoding: {e}")))?;
        let body_len = 8 + 4 + header.len() + payload.len();
        let mut rec = Vec::with_capacity(4 + body_len + CHECK_LEN);
        rec.extend_from_slice(&(body_len as u32).to_le_bytes());
        rec.extend_from_slice(&seq.to_le_bytes());
        rec.extend_from_slice(&(header.len() as u32).to_le_bytes());
        rec.extend_from_slice(&header);
        rec.extend_from_slice(payload);
        let check = blake3::hash(&rec[4..]);
        rec.extend_from_slice(&check.as_bytes()[..CHECK_LEN]);
        if let Err(e) = self.file.write_all(&rec) {
            let _ = self.file.set_len(self.len);
            return Err(io_error(&self.path, e));
        }
        self.len += rec.len() as u64;
        Ok(())
    }

    /// Empties the log (every record in it is in SQLite).
    pub fn clear(&mut self) -> Result<()> {
        self.file.set_len(0).map_err(|e| io_error(&self.path, e))?;
        self.len = 0;
        Ok(())
    }
}

fn io_error(path: &Path, e: std::io::Error) -> StoreError {
    StoreError::new(ErrorKind::of_io(&e), format!("{}: {e}", path.display()))
}

/// Whether a whole, intact record starts at some offset after `at` in `b`. Offsets are
/// tried only where a plausible length, a header length that fits and the `{` of the
/// header's JSON line up, so that the checksum is computed rarely.
fn whole_record_after(b: &[u8], at: usize) -> bool {
    let min = 4 + 12 + CHECK_LEN;
    let mut o = at + 1;
    while o + min <= b.len() {
        let body_len = u32::from_le_bytes(b[o..o + 4].try_into().unwrap()) as usize;
        let fits = (12..=MAX_BODY).contains(&body_len) && o + 4 + body_len + CHECK_LEN <= b.len();
        if fits && b.get(o + 16) == Some(&b'{') {
            let header_len = u32::from_le_bytes(b[o + 12..o + 16].try_into().unwrap()) as usize;
            if header_len <= body_len - 12 && decode(&b[o..]).is_some() {
                return true;
            }
        }
        o += 1;
    }
    false
}

/// The record at the start of `b` and its length in bytes, if it is whole and intact.
fn decode(b: &[u8]) -> Option<(Record, usize)> {
    let body_len = u32::from_le_bytes(b.get(..4)?.try_into().ok()?) as usize;
    let body = b.get(4..4 + body_len)?;
    let check = b.get(4 + body_len..4 + body_len + CHECK_LEN)?;
    if blake3::hash(body).as_bytes()[..CHECK_LEN] != *check || body_len < 12 {
        return None;
    }
    let seq = u64::from_le_bytes(body[..8].try_into().ok()?);
    let header_len = u32::from_le_bytes(body[8..12].try_into().ok()?) as usize;
    let header = body.get(12..12 + header_len)?;
    let op: Op = serde_json::from_slice(header).ok()?;
    let payload = body[12 + header_len..].to_vec();
    Some((Record { seq, op, payload }, 4 + body_len + CHECK_LEN))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(n: u64) -> Op {
        Op::Commit {
            ino: n,
            path: format!("f{n}"),
            op: "write".into(),
            expect_head: Some(7),
            build: LoggedBuild::Append { len: 3 },
            caller: Caller::internal("test"),
            time_ns: 5,
            set_mtime: false,
            pieces: vec![(0, 3)],
            inputs: Vec::new(),
            origin: None,
            restores: None,
        }
    }

    #[test]
    fn records_round_trip_and_a_torn_tail_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("db");
        let mut log = RedoLog::open(&db).unwrap();
        log.append(1, &op(1), b"abc").unwrap();
        log.append(2, &op(2), b"def").unwrap();
        let whole = log.len();
        // A third record cut short, as by a kill during the write.
        let mut f = OpenOptions::new()
            .append(true)
            .open(RedoLog::path_for(&db))
            .unwrap();
        f.write_all(&[200, 0, 0, 0, 1, 2, 3]).unwrap();
        let mut log = RedoLog::open(&db).unwrap();
        assert_eq!(log.len(), whole + 7);
        let recs = log.read_all().unwrap();
        assert_eq!(recs.len(), 2);
        assert_eq!(recs[1].seq, 2);
        assert_eq!(recs[1].payload, b"def");
        assert!(matches!(&recs[0].op, Op::Commit { ino: 1, path, .. } if path == "f1"));
    }

    #[test]
    fn a_flipped_byte_in_the_last_record_ends_the_log_there() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("db");
        let mut log = RedoLog::open(&db).unwrap();
        log.append(1, &op(1), b"abc").unwrap();
        let first = log.len() as usize;
        log.append(2, &op(2), b"def").unwrap();
        let p = RedoLog::path_for(&db);
        let mut bytes = std::fs::read(&p).unwrap();
        bytes[first + 10] ^= 1;
        std::fs::write(&p, &bytes).unwrap();
        assert_eq!(RedoLog::open(&db).unwrap().read_all().unwrap().len(), 1);
        // Zeros to the end (a power cut) are a torn tail too.
        bytes.truncate(first);
        bytes.extend_from_slice(&[0u8; 4096]);
        std::fs::write(&p, &bytes).unwrap();
        assert_eq!(RedoLog::open(&db).unwrap().read_all().unwrap().len(), 1);
    }

    #[test]
    fn a_damaged_length_field_before_whole_records_is_damage_not_a_tail() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("db");
        let mut log = RedoLog::open(&db).unwrap();
        log.append(1, &op(1), b"abc").unwrap();
        let first = log.len() as usize;
        log.append(2, &op(2), b"def").unwrap();
        log.append(3, &op(3), b"ghi").unwrap();
        let p = RedoLog::path_for(&db);
        let mut bytes = std::fs::read(&p).unwrap();
        // The second record's length now points past the end of the file.
        bytes[first + 2] ^= 0x01;
        std::fs::write(&p, &bytes).unwrap();
        let (recs, damage) = RedoLog::open(&db).unwrap().read_checked().unwrap();
        assert_eq!(recs.len(), 1);
        assert_eq!(damage.unwrap().offset, first as u64);
    }

    #[test]
    fn damage_before_the_tail_is_refused_then_cut_only_when_accepted() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("db");
        let mut log = RedoLog::open(&db).unwrap();
        log.append(1, &op(1), b"abc").unwrap();
        let first = log.len() as usize;
        log.append(2, &op(2), b"def").unwrap();
        log.append(3, &op(3), b"ghi").unwrap();
        let p = RedoLog::path_for(&db);
        let mut bytes = std::fs::read(&p).unwrap();
        bytes[first + 10] ^= 1;
        std::fs::write(&p, &bytes).unwrap();
        let mut log = RedoLog::open(&db).unwrap();
        let e = log.read_all().unwrap_err();
        assert_eq!(e.kind, ErrorKind::Corrupt);
        assert!(
            e.reason
                .contains(&format!("damaged at byte {first} of {}", bytes.len())),
            "{}",
            e.reason
        );
        assert!(
            e.reason.contains("scratchfs recover --accept-loss --db"),
            "{}",
            e.reason
        );
        let (recs, damage) = log.read_checked().unwrap();
        assert_eq!(recs.len(), 1);
        let damage = damage.unwrap();
        let copy = log.cut_at_damage(&damage).unwrap();
        assert_eq!(std::fs::read(&copy).unwrap(), bytes);
        assert_eq!(RedoLog::open(&db).unwrap().read_all().unwrap().len(), 1);
    }

    #[test]
    fn pieces_serve_reads_inside_their_ranges_only() {
        let ranges = [(10, 3), (100, 2)];
        let p = Pieces::new(&ranges, b"abcde").unwrap();
        let mut b = [0u8; 2];
        p.read(11, &mut b).unwrap();
        assert_eq!(&b, b"bc");
        p.read(100, &mut b).unwrap();
        assert_eq!(&b, b"de");
        assert!(p.read(12, &mut b).is_err());
        assert!(Pieces::new(&ranges, b"abcd").is_err());
    }
}
