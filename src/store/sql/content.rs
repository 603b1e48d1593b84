//! Content: streams of extents, blobs deduplicated by blake3, reading a version's bytes
//! and writing new ones (docs/schema.md, "Content model").

use crate::p;
use crate::store::digest::ContentHasher;
use crate::store::error::{ErrorKind, Result, StoreError};
use crate::store::sql::{Conn, ConnExt, Flow, IdOf, Row, Value};
use crate::store::{CHUNK, ContentRef};

/// The whole content of `content`, read through `conn`: memory of its size, so only for
/// content known to be small (redact's versions); everything else streams with
/// [`ContentReader`].
pub fn read_all(conn: &dyn Conn, content: ContentRef) -> Result<Vec<u8>> {
    let mut buf = vec![0u8; content.len as usize];
    let n = read_at(conn, content, 0, &mut buf)?;
    buf.truncate(n);
    Ok(buf)
}

/// Bytes a [`ContentReader`] user should ask for at a time: each `read` costs two index
/// lookups plus the extents it covers, so reading in chunks of this size (1 MiB) keeps
/// both the memory held and the per-read overhead small.
pub const READ_CHUNK: usize = 1 << 20;

/// Streams the bytes of one version (`content`, the first `len` bytes of its stream)
/// through `conn`, from offset 0 or [`ContentReader::at`], without ever holding more of
/// it than the caller's buffer: each [`std::io::Read::read`] fills up to `buf.len()`
/// bytes with `read_at` and returns 0 at the end. Use buffers of [`READ_CHUNK`] bytes
/// (`std::io::copy` from a `BufReader::with_capacity(READ_CHUNK, reader)`, or a loop).
/// A store failure is an `io::Error` of the kind of the store's errno (`EIO`, `ENOSPC`)
/// whose text is the store's reason.
pub struct ContentReader<'c> {
    conn: &'c dyn Conn,
    content: ContentRef,
    pos: u64,
}

impl<'c> ContentReader<'c> {
    /// A reader of `content` from its first byte.
    pub fn new(conn: &'c dyn Conn, content: ContentRef) -> Self {
        ContentReader {
            conn,
            content,
            pos: 0,
        }
    }

    /// The same reader starting at byte `offset` (at or past the end: reads nothing).
    pub fn at(mut self, offset: u64) -> Self {
        self.pos = offset;
        self
    }

    /// The offset of the next byte `read` returns.
    pub fn position(&self) -> u64 {
        self.pos
    }
}

impl std::io::Read for ContentReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = read_at(self.conn, self.content, self.pos, buf).map_err(std::io::Error::from)?;
        self.pos += n as u64;
        Ok(n)
    }
}

/// Reads `buf.len()` bytes (or fewer at EOF) of `content` at `offset` through `conn`.
pub fn read_at(conn: &dyn Conn, content: ContentRef, offset: u64, buf: &mut [u8]) -> Result<usize> {
    if offset >= content.len || buf.is_empty() {
        return Ok(0);
    }
    let end = content.len.min(offset + buf.len() as u64);
    let first: Option<i64> = conn.opt_value(
        r#"SELECT "offset" FROM extents WHERE stream = ?1 AND "offset" <= ?2
           ORDER BY "offset" DESC LIMIT 1"#,
        p![content.stream, offset],
    )?;
    let from = first.unwrap_or(0);
    let mut covered = offset;
    let mut hole = false;
    conn.each(
        r#"SELECT e."offset", e.len, e.blob_off, COALESCE(e.data, b.data) FROM extents e
           LEFT JOIN blobs b ON b.id = e.blob
           WHERE e.stream = ?1 AND e."offset" >= ?2 AND e."offset" < ?3 ORDER BY e."offset""#,
        p![content.stream, from, end],
        &mut |row| {
            let e_off = row.get::<u64>(0)?;
            let e_len = row.get::<u64>(1)?;
            let b_off = row.get::<u64>(2)?;
            let data = blob_of(row, 3)?;
            let lo = e_off.max(offset);
            let hi = (e_off + e_len).min(end);
            if lo >= hi {
                return Ok(Flow::Next);
            }
            if lo > covered {
                hole = true;
                buf[(covered - offset) as usize..(lo - offset) as usize].fill(0);
            }
            let src = (b_off + lo - e_off) as usize..(b_off + hi - e_off) as usize;
            let src = data
                .get(src)
                .ok_or_else(|| StoreError::corrupt("extent points past its blob"))?;
            buf[(lo - offset) as usize..(hi - offset) as usize].copy_from_slice(src);
            covered = hi;
            Ok(Flow::Next)
        },
    )?;
    if covered < end {
        hole = true;
        buf[(covered - offset) as usize..(end - offset) as usize].fill(0);
    }
    // A hole reads as zeros (a sparse file), unless the stream itself is gone: gc swept
    // the content of a version a handle still reads (one open on another daemon than the
    // one gc ran in: on PostgreSQL, or a mount of the past beside the live one). That is
    // an error, never zeros in its place.
    if hole
        && content.stream != EMPTY_STREAM
        && !conn.value::<bool>(
            "SELECT EXISTS (SELECT 1 FROM streams WHERE id = ?1)",
            p![content.stream],
        )?
    {
        return Err(StoreError::new(
            ErrorKind::Failed,
            "store: the content of this version was swept by gc while it was open",
        ));
    }
    Ok((end - offset) as usize)
}

/// Pieces smaller than this are stored inline in their extent, not as a blob: deduplicating
/// them would cost more than it saves (and a small append then dirties fewer pages).
pub const INLINE_MAX: usize = 4096;

/// The empty stream, shared by every empty version; it never grows.
pub const EMPTY_STREAM: i64 = 0;

/// A new, empty stream's id (a row of `streams`; an id handed out in advance when the
/// connection has one, [`Conn::reserved_id`]).
pub fn new_stream(tx: &dyn Conn) -> Result<i64> {
    match tx.reserved_id(IdOf::Streams)? {
        Some(id) => {
            tx.exec("INSERT INTO streams(id) VALUES (?1)", p![id])?;
            Ok(id)
        }
        None => tx.insert("INSERT INTO streams DEFAULT VALUES RETURNING id", p![]),
    }
}

/// Length of a stream: the end of its last extent (0 for a stream without extents).
pub fn stream_end(tx: &dyn Conn, stream: i64) -> Result<u64> {
    Ok(tx
        .opt_value::<u64>(
            r#"SELECT "offset" + len FROM extents WHERE stream = ?1 ORDER BY "offset" DESC LIMIT 1"#,
            p![stream],
        )?
        .unwrap_or(0))
}

/// What a range of new content is: bytes to store, or a hole (zeros, stored as nothing).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seg {
    /// Bytes supplied by `fill` (chunks that turn out to be all zeros are stored as holes).
    Data,
    /// Zeros: no extent.
    Hole,
}

/// Appends bytes `[from, to)` of the new content to `stream` at stream offset `from`,
/// feeding `hasher`. `next(at)` says what the content is from `at` and up to where
/// (`(Seg, end)`, `end > at`); `fill(offset, buf)` supplies the bytes of `Data` ranges,
/// stored in chunks of at most [`CHUNK`]. Holes and all-zero chunks get no extent (reads
/// return zeros, [`read_at`]); the stream's last extent always ends at `to` (a one-byte
/// zero extent if the content ends in a hole), so the stream's end is the longest
/// version's length and an append can tell that nothing follows (docs/schema.md).
#[allow(clippy::too_many_arguments)]
pub fn write_range(
    tx: &dyn Conn,
    stream: i64,
    from: u64,
    to: u64,
    hasher: &mut ContentHasher,
    next: &mut dyn FnMut(u64) -> Result<(Seg, u64)>,
    fill: &mut dyn FnMut(u64, &mut [u8]) -> Result<()>,
    buf: &mut Vec<u8>,
) -> Result<()> {
    let mut at = from;
    let mut stored_to = from;
    while at < to {
        let (seg, end) = next(at)?;
        let end = end.min(to);
        if end <= at {
            return Err(StoreError::new(
                ErrorKind::Failed,
                "store: an empty range of new content",
            ));
        }
        if seg == Seg::Hole {
            hasher.zeros(end - at);
            at = end;
            continue;
        }
        while at < end {
            let n = ((end - at) as usize).min(CHUNK);
            buf.resize(n, 0);
            fill(at, &mut buf[..n])?;
            hasher.update(&buf[..n]);
            if buf[..n].iter().all(|&b| b == 0) {
                at += n as u64;
                continue;
            }
            put_extent(tx, stream, at, &buf[..n])?;
            at += n as u64;
            stored_to = at;
        }
    }
    if to > from && stored_to < to {
        put_extent(tx, stream, to - 1, &[0])?;
    }
    Ok(())
}

/// Stores `data` (not empty) at stream offset `at`: inline under [`INLINE_MAX`] bytes,
/// else as a deduplicated blob.
fn put_extent(tx: &dyn Conn, stream: i64, at: u64, data: &[u8]) -> Result<()> {
    if data.len() < INLINE_MAX {
        tx.exec(
            r#"INSERT INTO extents(stream, "offset", len, blob, blob_off, data)
               VALUES (?1, ?2, ?3, NULL, 0, ?4)"#,
            p![stream, at, data.len(), data],
        )?;
    } else {
        // A deduplicated blob, named by its blake3: neither statement needs the other's
        // answer, so a server gets both without waiting (no round trip of its own).
        let hash = blake3::hash(data);
        let hash = hash.as_bytes().as_slice();
        tx.exec(
            "INSERT INTO blobs(hash, size, data) VALUES (?1, ?2, ?3) ON CONFLICT (hash) DO NOTHING",
            p![hash, data.len(), data],
        )?;
        tx.exec(
            r#"INSERT INTO extents(stream, "offset", len, blob, blob_off)
               VALUES (?1, ?2, ?3, (SELECT id FROM blobs WHERE hash = ?4), 0)"#,
            p![stream, at, data.len(), hash],
        )?;
    }
    Ok(())
}

/// Stores `bytes` (held in memory) as the new content of `stream` from offset 0 and
/// returns its digest.
pub fn write_bytes(tx: &dyn Conn, stream: i64, bytes: &[u8]) -> Result<String> {
    let len = bytes.len() as u64;
    let mut hasher = ContentHasher::new(len);
    let mut next = |_: u64| Ok((Seg::Data, len));
    let mut fill = |off: u64, buf: &mut [u8]| -> Result<()> {
        buf.copy_from_slice(&bytes[off as usize..off as usize + buf.len()]);
        Ok(())
    };
    write_range(
        tx,
        stream,
        0,
        len,
        &mut hasher,
        &mut next,
        &mut fill,
        &mut Vec::new(),
    )?;
    Ok(hasher.finalize())
}

/// What `content`'s stream holds at `at` (below `limit`): `(Data, end)` inside an extent,
/// `(Hole, end)` in a gap, with `end` at most `limit`.
pub fn stored_seg(conn: &dyn Conn, content: ContentRef, at: u64, limit: u64) -> Result<(Seg, u64)> {
    let cover: Option<(i64, i64)> = conn.opt(
        r#"SELECT "offset", len FROM extents WHERE stream = ?1 AND "offset" <= ?2
           ORDER BY "offset" DESC LIMIT 1"#,
        p![content.stream, at],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    if let Some((off, len)) = cover
        && (off + len) as u64 > at
    {
        return Ok((Seg::Data, ((off + len) as u64).min(limit)));
    }
    let next: Option<i64> = conn.opt_value(
        r#"SELECT "offset" FROM extents WHERE stream = ?1 AND "offset" > ?2
           ORDER BY "offset" LIMIT 1"#,
        p![content.stream, at],
    )?;
    Ok((Seg::Hole, next.map_or(limit, |n| (n as u64).min(limit))))
}

/// Digest state after the first `upto` bytes of `content`, for content that will be
/// `final_len` bytes long: reads the stored extents in order and feeds holes as zeros
/// without reading them (bounded memory: one extent at a time).
pub fn hash_prefix(
    conn: &dyn Conn,
    content: ContentRef,
    upto: u64,
    final_len: u64,
) -> Result<ContentHasher> {
    let upto = upto.min(content.len);
    let mut hasher = ContentHasher::new(final_len);
    let mut pos = 0u64;
    each_extent_below(conn, content.stream, upto, &mut |row| {
        let e_off = row.get::<u64>(0)?;
        let e_len = row.get::<u64>(1)?;
        let b_off = row.get::<u64>(2)?;
        let data = blob_of(row, 3)?;
        if e_off > pos {
            hasher.zeros(e_off - pos);
            pos = e_off;
        }
        let hi = (e_off + e_len).min(upto);
        if hi <= pos {
            return Ok(Flow::Next);
        }
        let src = (b_off + pos - e_off) as usize..(b_off + hi - e_off) as usize;
        let src = data
            .get(src)
            .ok_or_else(|| StoreError::corrupt("extent points past its blob"))?;
        hasher.update(src);
        pos = hi;
        Ok(Flow::Next)
    })?;
    if pos < upto {
        hasher.zeros(upto - pos);
    }
    Ok(hasher)
}

/// Calls `f(offset, bytes)` for each stored piece of `content`, in offset order, clipped to
/// its length: the data between its holes (a hole is never read or passed). One extent
/// (at most 64 KiB) in memory at a time. Used to copy a sparse file as a sparse file.
pub fn for_each_data(
    conn: &dyn Conn,
    content: ContentRef,
    mut f: impl FnMut(u64, &[u8]) -> Result<()>,
) -> Result<()> {
    each_extent_below(conn, content.stream, content.len, &mut |row| {
        let e_off = row.get::<u64>(0)?;
        let e_len = row.get::<u64>(1)?;
        let b_off = row.get::<u64>(2)?;
        let data = blob_of(row, 3)?;
        let hi = (e_off + e_len).min(content.len);
        let src = data
            .get(b_off as usize..(b_off + hi - e_off) as usize)
            .ok_or_else(|| StoreError::corrupt("extent points past its blob"))?;
        f(e_off, src)?;
        Ok(Flow::Next)
    })
}

/// The extents of a stream from an offset and below another, with their bytes, a window
/// at a time (`?1` stream, `?2` from, `?3` end; [`EXTENTS_WINDOW`] rows).
const EXTENTS_BELOW: &str = r#"SELECT e."offset", e.len, e.blob_off, COALESCE(e.data, b.data)
    FROM extents e LEFT JOIN blobs b ON b.id = e.blob
    WHERE e.stream = ?1 AND e."offset" >= ?2 AND e."offset" < ?3 ORDER BY e."offset"
    LIMIT 64"#;

/// Rows of [`EXTENTS_BELOW`] at a time: a PostgreSQL client reads a statement's rows
/// whole, so a window bounds what is held (64 extents of at most 64 KiB: 4 MiB).
const EXTENTS_WINDOW: usize = 64;

/// Calls `f` with each extent of `stream` below offset `end`, in offset order, with its
/// bytes (columns: offset, len, blob_off, data), a window of [`EXTENTS_WINDOW`] at a
/// time; stops when `f` says so.
fn each_extent_below(
    conn: &dyn Conn,
    stream: i64,
    end: u64,
    f: &mut dyn FnMut(&dyn Row) -> Result<Flow>,
) -> Result<()> {
    let mut from = 0u64;
    loop {
        let (mut rows, mut last, mut stopped) = (0usize, None, false);
        conn.each(EXTENTS_BELOW, p![stream, from, end], &mut |row| {
            rows += 1;
            last = Some(row.get::<u64>(0)?);
            let flow = f(row)?;
            stopped = flow == Flow::Stop;
            Ok(flow)
        })?;
        match last {
            Some(off) if !stopped && rows == EXTENTS_WINDOW => from = off + 1,
            _ => return Ok(()),
        }
    }
}

/// Column `i` of `row` as bytes (an extent's data), borrowed.
fn blob_of(row: &dyn Row, i: usize) -> Result<&[u8]> {
    match row.value(i)? {
        Value::Blob(b) => Ok(b),
        _ => Err(StoreError::corrupt("an extent without bytes")),
    }
}

/// The digest of `content` ([`crate::store::digest`]).
pub fn digest_of(conn: &dyn Conn, content: ContentRef) -> Result<String> {
    Ok(hash_prefix(conn, content, content.len, content.len)?.finalize())
}
