//! The one interface the backend-neutral store code talks to a database through: run a
//! statement with parameters, visit its rows. SQLite (`rusqlite`) and PostgreSQL
//! (`postgres`) implement it in their own folders; the shared code (content model,
//! versions, events, checkpoints, the read side) is written once against it, in the SQL
//! both databases accept (docs/schema.md, "One SQL for two databases"):
//!
//! - placeholders `?1`, `?2`, ... (the PostgreSQL connection rewrites them to `$1`, ...);
//! - every integer column is 64 bits, and a parameter or a result is an [`i64`], a text, a
//!   byte string or NULL ([`Param`], [`Value`]): no booleans, no floats;
//! - `INSERT ... RETURNING id` instead of a last-insert id, `ON CONFLICT` instead of
//!   `INSERT OR ...`, `IS NOT DISTINCT FROM` instead of SQLite's `IS`, `"offset"` quoted;
//! - `CAST(SUM(x) AS BIGINT)`: PostgreSQL sums integers as `numeric`.
//!
//! Errors are the store's [`StoreError`]: each backend classifies its own failures into an
//! [`crate::store::ErrorKind`] (`Full`, `Busy`, `ReadOnly`, `Failed`; on PostgreSQL
//! `Exists` for a unique-key conflict, `Unavailable` for a lost connection), whose errno
//! is SPEC §6's.

use crate::store::error::{Result, StoreError};

/// A statement parameter, borrowed from the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Param<'a> {
    /// SQL NULL.
    Null,
    /// A 64-bit integer (also booleans, as 0 or 1, and unsigned ids up to `i64::MAX`).
    Int(i64),
    /// UTF-8 text.
    Text(&'a str),
    /// Bytes (`BLOB` in SQLite, `bytea` in PostgreSQL).
    Blob(&'a [u8]),
}

impl From<i64> for Param<'_> {
    fn from(v: i64) -> Self {
        Param::Int(v)
    }
}
impl From<u64> for Param<'_> {
    fn from(v: u64) -> Self {
        Param::Int(v as i64)
    }
}
impl From<u32> for Param<'_> {
    fn from(v: u32) -> Self {
        Param::Int(v as i64)
    }
}
impl From<i32> for Param<'_> {
    fn from(v: i32) -> Self {
        Param::Int(v as i64)
    }
}
impl From<usize> for Param<'_> {
    fn from(v: usize) -> Self {
        Param::Int(v as i64)
    }
}
impl From<bool> for Param<'_> {
    fn from(v: bool) -> Self {
        Param::Int(v as i64)
    }
}
impl<'a> From<&'a str> for Param<'a> {
    fn from(v: &'a str) -> Self {
        Param::Text(v)
    }
}
impl<'a> From<&'a String> for Param<'a> {
    fn from(v: &'a String) -> Self {
        Param::Text(v)
    }
}
impl<'a> From<&'a std::sync::Arc<str>> for Param<'a> {
    fn from(v: &'a std::sync::Arc<str>) -> Self {
        Param::Text(v)
    }
}
impl<'a> From<&'a [u8]> for Param<'a> {
    fn from(v: &'a [u8]) -> Self {
        Param::Blob(v)
    }
}
impl<'a> From<&'a Vec<u8>> for Param<'a> {
    fn from(v: &'a Vec<u8>) -> Self {
        Param::Blob(v)
    }
}
macro_rules! by_ref {
    ($($t:ty),*) => {$(
        impl From<&$t> for Param<'_> {
            fn from(v: &$t) -> Self {
                Param::from(*v)
            }
        }
    )*};
}
by_ref!(i64, u64, u32, i32, usize, bool);
impl<'a> From<&'a Option<String>> for Param<'a> {
    fn from(v: &'a Option<String>) -> Self {
        v.as_deref().into()
    }
}
impl From<&Option<i64>> for Param<'_> {
    fn from(v: &Option<i64>) -> Self {
        (*v).into()
    }
}

impl<'a, T> From<Option<T>> for Param<'a>
where
    T: Into<Param<'a>>,
{
    fn from(v: Option<T>) -> Self {
        v.map_or(Param::Null, Into::into)
    }
}

/// The parameters of a statement: `p![a, b, c]` is `&[Param::from(a), ...]`.
#[macro_export]
macro_rules! p {
    () => { &[][..] as &[$crate::store::sql::Param<'_>] };
    ($($e:expr),+ $(,)?) => { &[$($crate::store::sql::Param::from($e)),+][..] };
}

/// One column value of a result row, borrowed from the row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Value<'a> {
    /// SQL NULL.
    Null,
    /// An integer (a boolean is 0 or 1).
    Int(i64),
    /// Text.
    Text(&'a str),
    /// Bytes.
    Blob(&'a [u8]),
}

/// A result row, as a backend exposes it.
pub trait Row {
    /// Column `i` (0-based). `EIO` when there is no such column or the backend holds a
    /// type the shared code never selects.
    fn value(&self, i: usize) -> Result<Value<'_>>;
}

impl dyn Row + '_ {
    /// Column `i` as `T` ([`Column`]).
    pub fn get<T: Column>(&self, i: usize) -> Result<T> {
        T::from_value(self.value(i)?).map_err(|what| {
            StoreError::corrupt(format_args!("column {i} is {what}, not the type expected"))
        })
    }
}

/// A Rust type a column converts to.
pub trait Column: Sized {
    /// Converts; `Err` names what the value was.
    fn from_value(v: Value<'_>) -> std::result::Result<Self, &'static str>;
}

fn kind(v: Value<'_>) -> &'static str {
    match v {
        Value::Null => "NULL",
        Value::Int(_) => "an integer",
        Value::Text(_) => "text",
        Value::Blob(_) => "bytes",
    }
}

impl Column for i64 {
    fn from_value(v: Value<'_>) -> std::result::Result<Self, &'static str> {
        match v {
            Value::Int(i) => Ok(i),
            other => Err(kind(other)),
        }
    }
}
impl Column for u64 {
    fn from_value(v: Value<'_>) -> std::result::Result<Self, &'static str> {
        i64::from_value(v).map(|i| i as u64)
    }
}
impl Column for u32 {
    fn from_value(v: Value<'_>) -> std::result::Result<Self, &'static str> {
        i64::from_value(v).map(|i| i as u32)
    }
}
impl Column for i32 {
    fn from_value(v: Value<'_>) -> std::result::Result<Self, &'static str> {
        i64::from_value(v).map(|i| i as i32)
    }
}
impl Column for bool {
    fn from_value(v: Value<'_>) -> std::result::Result<Self, &'static str> {
        i64::from_value(v).map(|i| i != 0)
    }
}
impl Column for String {
    fn from_value(v: Value<'_>) -> std::result::Result<Self, &'static str> {
        match v {
            Value::Text(s) => Ok(s.to_owned()),
            other => Err(kind(other)),
        }
    }
}
impl Column for std::sync::Arc<str> {
    fn from_value(v: Value<'_>) -> std::result::Result<Self, &'static str> {
        match v {
            Value::Text(s) => Ok(s.into()),
            other => Err(kind(other)),
        }
    }
}
impl Column for Vec<u8> {
    fn from_value(v: Value<'_>) -> std::result::Result<Self, &'static str> {
        match v {
            Value::Blob(b) => Ok(b.to_vec()),
            Value::Text(s) => Ok(s.as_bytes().to_vec()),
            other => Err(kind(other)),
        }
    }
}
impl<T: Column> Column for Option<T> {
    fn from_value(v: Value<'_>) -> std::result::Result<Self, &'static str> {
        match v {
            Value::Null => Ok(None),
            v => T::from_value(v).map(Some),
        }
    }
}

/// What a row visitor wants next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// The next row.
    Next,
    /// No more rows.
    Stop,
}

/// A database connection as the shared store code uses it. Statements are prepared once
/// per connection and cached by their text. Every call runs inside whatever transaction
/// the backend has open on the connection.
pub trait Conn {
    /// Runs `sql` and calls `f` with each row, in order, until it returns [`Flow::Stop`].
    fn each(
        &self,
        sql: &str,
        params: &[Param<'_>],
        f: &mut dyn FnMut(&dyn Row) -> Result<Flow>,
    ) -> Result<()>;
    /// Runs `sql` (no rows). Inside a transaction a backend may send it later, with the
    /// next statement whose result is needed (PostgreSQL pipelines so): its failure is
    /// then that statement's error, or `COMMIT`'s, and the transaction does not commit.
    /// (No row count: a statement whose effect must be checked says so with `RETURNING`
    /// through [`Conn::each`].)
    fn exec(&self, sql: &str, params: &[Param<'_>]) -> Result<()>;
    /// Runs several statements without parameters (no caching): DDL, temporary tables.
    fn batch(&self, sql: &str) -> Result<()>;
    /// Which database this is (for the few statements the two spell differently).
    fn dialect(&self) -> Dialect;
    /// An id for a new row of `table`, handed out in advance, so that its insert needs
    /// no answer from the server (no `RETURNING` round trip) and is sent with the next
    /// statement whose answer is needed. `None`: insert and read it back (SQLite, where a
    /// statement is a function call; the default). Only for ids whose order means
    /// nothing: streams, lineages, inodes; never events or the namespace log, whose order
    /// is commit order (checkpoints' points). [`IdOf::Versions`] is the one exception:
    /// an id the open transaction took after its locks, in the round trip that took them
    /// (a PostgreSQL commit: `PgConn::begin_commit`), handed out once; `None` otherwise.
    fn reserved_id(&self, table: IdOf) -> Result<Option<i64>> {
        let _ = table;
        Ok(None)
    }
}

/// The tables whose ids [`Conn::reserved_id`] may hand out in advance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IdOf {
    /// `streams.id`.
    Streams,
    /// `files.id` (lineages).
    Files,
    /// `nodes.ino`.
    Nodes,
    /// `versions.id`: never in advance, only one the open transaction took after its
    /// locks ([`Conn::reserved_id`]).
    Versions,
}

impl IdOf {
    /// The table and its identity column.
    pub fn column(self) -> (&'static str, &'static str) {
        match self {
            IdOf::Streams => ("streams", "id"),
            IdOf::Files => ("files", "id"),
            IdOf::Nodes => ("nodes", "ino"),
            IdOf::Versions => ("versions", "id"),
        }
    }
}

/// The database behind a [`Conn`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// SQLite 3.45 or later.
    Sqlite,
    /// PostgreSQL 13 or later.
    Postgres,
}

/// The helpers every [`Conn`] has (a connection, a transaction, a guard of either, or a
/// `dyn Conn`): the first row, one value, all rows, an insert's id.
pub trait ConnExt: Conn {
    /// The first row of `sql`, through `f`; `None` when there is none.
    fn opt<T>(
        &self,
        sql: &str,
        params: &[Param<'_>],
        f: impl FnOnce(&dyn Row) -> Result<T>,
    ) -> Result<Option<T>> {
        let mut f = Some(f);
        let mut out = None;
        self.each(sql, params, &mut |r| {
            if let Some(f) = f.take() {
                out = Some(f(r)?);
            }
            Ok(Flow::Stop)
        })?;
        Ok(out)
    }

    /// The first row of `sql`, through `f`; `EIO` when there is none (a statement that
    /// always returns a row: an aggregate, `RETURNING`).
    fn one<T>(
        &self,
        sql: &str,
        params: &[Param<'_>],
        f: impl FnOnce(&dyn Row) -> Result<T>,
    ) -> Result<T> {
        self.opt(sql, params, f)?
            .ok_or_else(|| StoreError::corrupt("a statement returned no row"))
    }

    /// Column 0 of the first row, as `T`; `None` when there is no row.
    fn opt_value<T: Column>(&self, sql: &str, params: &[Param<'_>]) -> Result<Option<T>> {
        self.opt(sql, params, |r| r.get(0))
    }

    /// Column 0 of the first row, as `T`; `EIO` when there is no row.
    fn value<T: Column>(&self, sql: &str, params: &[Param<'_>]) -> Result<T> {
        self.one(sql, params, |r| r.get(0))
    }

    /// Every row of `sql`, each through `f`.
    fn all<T>(
        &self,
        sql: &str,
        params: &[Param<'_>],
        mut f: impl FnMut(&dyn Row) -> Result<T>,
    ) -> Result<Vec<T>> {
        let mut out = Vec::new();
        self.each(sql, params, &mut |r| {
            out.push(f(r)?);
            Ok(Flow::Next)
        })?;
        Ok(out)
    }

    /// Runs `f` in a transaction of its own that takes the write lock at once (SQLite's
    /// `BEGIN IMMEDIATE`; PostgreSQL's `BEGIN`): committed when `f` succeeds, rolled back
    /// when it fails (its error returned). The connection must not be in a transaction.
    fn transaction<T>(&self, f: impl FnOnce(&Self) -> Result<T>) -> Result<T> {
        self.batch(match self.dialect() {
            Dialect::Sqlite => "BEGIN IMMEDIATE",
            Dialect::Postgres => "BEGIN",
        })?;
        match f(self) {
            Ok(v) => {
                if let Err(e) = self.batch("COMMIT") {
                    let _ = self.batch("ROLLBACK");
                    return Err(e);
                }
                Ok(v)
            }
            Err(e) => {
                let _ = self.batch("ROLLBACK");
                Err(e)
            }
        }
    }

    /// Inserts with `... RETURNING id` and returns that id.
    fn insert(&self, sql: &str, params: &[Param<'_>]) -> Result<i64> {
        self.value(sql, params)
    }

    /// Inserts a row of `table` whose `columns` (comma-separated: this crate's constant
    /// text, never input) are `params` (`?1`, `?2`...) and returns its id: one handed out
    /// ahead ([`Conn::reserved_id`]), so the insert needs no answer and is queued, else
    /// read back with `RETURNING`.
    fn insert_row(&self, table: IdOf, columns: &'static str, params: &[Param<'_>]) -> Result<i64> {
        match self.reserved_id(table)? {
            Some(id) => {
                let mut with_id = params.to_vec();
                with_id.push(id.into());
                self.exec(insert_text(table, columns, with_id.len(), true), &with_id)?;
                Ok(id)
            }
            None => self.insert(insert_text(table, columns, params.len(), false), params),
        }
    }
}

impl<C: Conn + ?Sized> ConnExt for C {}

/// The text of [`ConnExt::insert_row`]'s statement: `INSERT INTO t(columns, id) VALUES
/// (?1, ...)` when the id is given (`with_id`), else `INSERT INTO t(columns) VALUES (...)
/// RETURNING id`, for `n` parameters. Made once per shape and kept (a handful: the
/// columns are this crate's constants), since a create made two of them per request
/// (issue 32: 5% of a create's instructions).
fn insert_text(table: IdOf, columns: &'static str, n: usize, with_id: bool) -> &'static str {
    type Key = (IdOf, &'static str, usize, bool);
    static TEXTS: std::sync::LazyLock<
        crate::sync::RwLock<std::collections::HashMap<Key, &'static str>>,
    > = std::sync::LazyLock::new(Default::default);
    let key = (table, columns, n, with_id);
    if let Some(&t) = TEXTS.read().get(&key) {
        return t;
    }
    let (t, id_column) = table.column();
    let marks = (1..=n)
        .map(|i| format!("?{i}"))
        .collect::<Vec<_>>()
        .join(", ");
    let text = if with_id {
        format!("INSERT INTO {t}({columns}, {id_column}) VALUES ({marks})")
    } else {
        format!("INSERT INTO {t}({columns}) VALUES ({marks}) RETURNING {id_column}")
    };
    let mut texts = TEXTS.write();
    texts
        .entry(key)
        .or_insert_with(|| Box::leak(text.into_boxed_str()))
}

/// A boxed connection (a command's, of either backend) is a connection.
impl<C: Conn + ?Sized> Conn for Box<C> {
    fn each(
        &self,
        sql: &str,
        params: &[Param<'_>],
        f: &mut dyn FnMut(&dyn Row) -> Result<Flow>,
    ) -> Result<()> {
        (**self).each(sql, params, f)
    }

    fn exec(&self, sql: &str, params: &[Param<'_>]) -> Result<()> {
        (**self).exec(sql, params)
    }

    fn batch(&self, sql: &str) -> Result<()> {
        (**self).batch(sql)
    }

    fn dialect(&self) -> Dialect {
        (**self).dialect()
    }
    fn reserved_id(&self, table: IdOf) -> Result<Option<i64>> {
        (**self).reserved_id(table)
    }
}
