//! [`Conn`] over a `rusqlite` connection (a transaction derefs to one): statements from
//! rusqlite's per-connection cache, parameters and values as SQLite stores them.

use rusqlite::types::{ToSqlOutput, ValueRef};

use crate::store::error::{Result, StoreError};
use crate::store::sql::{Conn, Dialect, Flow, Param, Row, Value};

impl rusqlite::ToSql for Param<'_> {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::Borrowed(match *self {
            Param::Null => ValueRef::Null,
            Param::Int(i) => ValueRef::Integer(i),
            Param::Text(s) => ValueRef::Text(s.as_bytes()),
            Param::Blob(b) => ValueRef::Blob(b),
        }))
    }
}

impl Row for rusqlite::Row<'_> {
    fn value(&self, i: usize) -> Result<Value<'_>> {
        Ok(match self.get_ref(i)? {
            ValueRef::Null => Value::Null,
            ValueRef::Integer(v) => Value::Int(v),
            ValueRef::Text(t) => Value::Text(
                std::str::from_utf8(t)
                    .map_err(|e| StoreError::failed(format!("column {i}: {e}")))?,
            ),
            ValueRef::Blob(b) => Value::Blob(b),
            ValueRef::Real(_) => {
                return Err(StoreError::failed(format!(
                    "column {i} is a floating-point number"
                )));
            }
        })
    }
}

impl Conn for rusqlite::Connection {
    fn each(
        &self,
        sql: &str,
        params: &[Param<'_>],
        f: &mut dyn FnMut(&dyn Row) -> Result<Flow>,
    ) -> Result<()> {
        crate::store::count::statement();
        let mut stmt = self.prepare_cached(sql)?;
        let writes = !stmt.readonly();
        let mut rows = stmt.query(rusqlite::params_from_iter(params.iter()))?;
        while let Some(r) = rows.next()? {
            if f(r)? == Flow::Stop {
                break;
            }
        }
        // A statement that writes (`INSERT ... RETURNING`) is stepped to its end: outside
        // a transaction its implicit COMMIT runs there, and a failure of it (SQLITE_FULL)
        // must reach the caller. Dropped half-way, the statement is reset, whose error
        // rusqlite drops: the caller took an id whose row was rolled back (helper finding:
        // a later commit failed "FOREIGN KEY constraint failed" on a full disk).
        if writes {
            while rows.next()?.is_some() {}
        }
        Ok(())
    }

    fn exec(&self, sql: &str, params: &[Param<'_>]) -> Result<()> {
        crate::store::count::statement();
        self.prepare_cached(sql)?
            .execute(rusqlite::params_from_iter(params.iter()))?;
        Ok(())
    }

    fn batch(&self, sql: &str) -> Result<()> {
        crate::store::count::statement();
        self.execute_batch(sql)?;
        Ok(())
    }

    fn dialect(&self) -> Dialect {
        Dialect::Sqlite
    }
}

macro_rules! delegate {
    ($($t:ty),*) => {$(
impl Conn for $t {
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
        Dialect::Sqlite
    }
}
    )*};
}

delegate!(
    rusqlite::Transaction<'_>,
    rusqlite::Savepoint<'_>,
    crate::sync::MutexGuard<'_, rusqlite::Connection>
);
