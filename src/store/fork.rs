//! `scratchfs fork` with history between any two backends (issues 14 and 15;
//! docs/checkpoints.md). Between two SQLite files the file is copied
//! ([`crate::store::sqlite::fork_file`]); from or to PostgreSQL the rows are: the source
//! read in one snapshot, the new scratchpad made in one transaction, both by the shared
//! [`crate::store::sql::fork`].

use std::path::Path;

use crate::checkpoint::Point;
use crate::store::error::Result;
use crate::store::postgres::{PgConn, Postgres, is_url};
use crate::store::sql::{Conn, fork};

/// Makes the new scratchpad `dst` a fork of `src` at `point`: its history up to the
/// point (same ids), its tree the tree then. `src` and `dst` are each an SQLite file's
/// path or a PostgreSQL URL. `max_checkpoint`: checkpoints with a higher id are left out
/// (a fork at a checkpoint keeps it and the ones before it). `forked_from` is kept as
/// `meta.forked_from` (JSON: where it came from). `EEXIST` when `dst` exists (an SQLite
/// file) or holds a scratchpad (a PostgreSQL database, which must exist); a failed fork
/// leaves nothing behind. `src` may be mounted meanwhile: it is only read.
pub fn fork_full(
    src: &Path,
    dst: &Path,
    point: Point,
    max_checkpoint: Option<i64>,
    forked_from: &str,
) -> Result<()> {
    let url = |p: &Path| p.to_str().filter(|s| is_url(s)).map(str::to_string);
    let (src_url, dst_url) = (url(src), url(dst));
    if src_url.is_none() && dst_url.is_none() {
        return super::sqlite::fork_file(src, dst, point, max_checkpoint, forked_from);
    }
    // The source in one snapshot, read only.
    let from: Box<dyn Conn> = match &src_url {
        Some(u) => {
            let c = PgConn::connect(u)?;
            c.begin_snapshot()?;
            Box::new(c)
        }
        None => {
            let c = super::open_read_only(src)?;
            c.execute_batch("BEGIN")?;
            Box::new(c)
        }
    };
    let place = match &dst_url {
        Some(u) => crate::store::postgres::display_name(u),
        None => dst.to_string_lossy().into_owned(),
    };
    let fill = |tx: &dyn Conn| -> Result<()> {
        fork::copy_tables(&*from, tx)?;
        fork::trim(
            tx,
            point,
            max_checkpoint.unwrap_or(i64::MAX),
            forked_from,
            &place,
        )?;
        fork::move_identities(tx)
    };
    let done = match &dst_url {
        Some(u) => Postgres::create_with(u, fill),
        None => super::sqlite::create_with(dst, fill),
    };
    let _ = from.batch("ROLLBACK");
    done
}
