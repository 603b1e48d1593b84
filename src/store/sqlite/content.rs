//! Content: streams of extents, blobs deduplicated by blake3, reading a version's bytes
//! and writing new ones (docs/schema.md, "Content model").

use super::*;

/// The whole content of `content`, read through `conn`: memory of its size, so only for
/// content known to be small (redact's versions); everything else streams with
/// [`ContentReader`].
pub fn read_all(conn: &Connection, content: ContentRef) -> Result<Vec<u8>> {
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
    conn: &'c Connection,
    content: ContentRef,
    pos: u64,
}

impl<'c> ContentReader<'c> {
    /// A reader of `content` from its first byte.
    pub fn new(conn: &'c Connection, content: ContentRef) -> Self {
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
        let n = read_at(self.conn, self.content, self.pos, buf).map_err(|e| {
            std::io::Error::new(std::io::Error::from_raw_os_error(e.errno).kind(), e.reason)
        })?;
        self.pos += n as u64;
        Ok(n)
    }
}

/// Reads `buf.len()` bytes (or fewer at EOF) of `content` at `offset` through `conn`.
pub(super) fn read_at(
    conn: &Connection,
    content: ContentRef,
    offset: u64,
    buf: &mut [u8],
) -> Result<usize> {
    if offset >= content.len || buf.is_empty() {
        return Ok(0);
    }
    let end = content.len.min(offset + buf.len() as u64);
    let first: Option<i64> = conn
        .prepare_cached(
            "SELECT offset FROM extents WHERE stream = ?1 AND offset <= ?2 ORDER BY offset DESC LIMIT 1",
        )?
        .query_row(params![content.stream, offset as i64], |r| r.get(0))
        .optional()?;
    let from = first.unwrap_or(0);
    let mut stmt = conn.prepare_cached(
        "SELECT e.offset, e.len, e.blob_off, COALESCE(e.data, b.data) FROM extents e
         LEFT JOIN blobs b ON b.id = e.blob
         WHERE e.stream = ?1 AND e.offset >= ?2 AND e.offset < ?3 ORDER BY e.offset",
    )?;
    let mut rows = stmt.query(params![content.stream, from, end as i64])?;
    let mut covered = offset;
    while let Some(row) = rows.next()? {
        let e_off = row.get::<_, i64>(0)? as u64;
        let e_len = row.get::<_, i64>(1)? as u64;
        let b_off = row.get::<_, i64>(2)? as u64;
        let data = row.get_ref(3)?.as_blob().map_err(Error::store)?;
        let lo = e_off.max(offset);
        let hi = (e_off + e_len).min(end);
        if lo >= hi {
            continue;
        }
        if lo > covered {
            buf[(covered - offset) as usize..(lo - offset) as usize].fill(0);
        }
        let src = (b_off + lo - e_off) as usize..(b_off + hi - e_off) as usize;
        let src = data
            .get(src)
            .ok_or_else(|| Error::new(libc::EIO, "store: extent points past its blob"))?;
        buf[(lo - offset) as usize..(hi - offset) as usize].copy_from_slice(src);
        covered = hi;
    }
    if covered < end {
        buf[(covered - offset) as usize..(end - offset) as usize].fill(0);
    }
    Ok((end - offset) as usize)
}

/// Stores one chunk as a blob (deduplicated) and returns its id.
pub(super) fn put_blob(tx: &Connection, data: &[u8]) -> Result<i64> {
    let hash = blake3::hash(data);
    let id: Option<i64> = tx
        .prepare_cached("SELECT id FROM blobs WHERE hash = ?1")?
        .query_row([hash.as_bytes().as_slice()], |r| r.get(0))
        .optional()?;
    if let Some(id) = id {
        return Ok(id);
    }
    tx.prepare_cached("INSERT INTO blobs(hash, size, data) VALUES (?1, ?2, ?3)")?
        .execute(params![hash.as_bytes().as_slice(), data.len() as i64, data])?;
    Ok(tx.last_insert_rowid())
}

/// Pieces smaller than this are stored inline in their extent, not as a blob: deduplicating
/// them would cost more than it saves (and a small append then dirties fewer pages).
pub(super) const INLINE_MAX: usize = 4096;

/// The empty stream, shared by every empty version; it never grows.
pub(super) const EMPTY_STREAM: i64 = 0;

pub(super) fn new_stream(tx: &Connection) -> Result<i64> {
    tx.prepare_cached("INSERT INTO streams DEFAULT VALUES")?
        .execute([])?;
    Ok(tx.last_insert_rowid())
}

/// Length of a stream: the end of its last extent.
pub(super) fn stream_end(tx: &Connection, stream: i64) -> Result<u64> {
    Ok(tx
        .prepare_cached(
            "SELECT offset + len FROM extents WHERE stream = ?1 ORDER BY offset DESC LIMIT 1",
        )?
        .query_row([stream], |r| r.get::<_, i64>(0))
        .optional()?
        .unwrap_or(0) as u64)
}

/// Appends bytes `[from, to)` of the new content to `stream` at stream offset `from`,
/// in chunks of at most [`CHUNK`], feeding `hasher`. `fill(offset, buf)` supplies bytes.
pub(super) fn write_range(
    tx: &Connection,
    stream: i64,
    from: u64,
    to: u64,
    hasher: &mut blake3::Hasher,
    fill: &mut dyn FnMut(u64, &mut [u8]) -> Result<()>,
    buf: &mut Vec<u8>,
) -> Result<()> {
    let mut at = from;
    while at < to {
        let n = ((to - at) as usize).min(CHUNK);
        buf.resize(n, 0);
        fill(at, &mut buf[..n])?;
        hasher.update(&buf[..n]);
        if n < INLINE_MAX {
            tx.prepare_cached(
                "INSERT INTO extents(stream, offset, len, blob, blob_off, data)
                 VALUES (?1, ?2, ?3, NULL, 0, ?4)",
            )?
            .execute(params![stream, at as i64, n as i64, &buf[..n]])?;
        } else {
            let blob = put_blob(tx, &buf[..n])?;
            tx.prepare_cached(
                "INSERT INTO extents(stream, offset, len, blob, blob_off) VALUES (?1, ?2, ?3, ?4, 0)",
            )?
            .execute(params![stream, at as i64, n as i64, blob])?;
        }
        at += n as u64;
    }
    Ok(())
}

/// blake3 state after the first `len` bytes of `content`.
pub(super) fn hash_prefix(
    conn: &Connection,
    content: ContentRef,
    len: u64,
) -> Result<blake3::Hasher> {
    let mut hasher = blake3::Hasher::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut at = 0u64;
    let view = ContentRef {
        stream: content.stream,
        len: len.min(content.len),
    };
    while at < view.len {
        let n = read_at(conn, view, at, &mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        at += n as u64;
    }
    Ok(hasher)
}
