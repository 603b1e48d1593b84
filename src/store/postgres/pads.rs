//! Many scratchpads in one PostgreSQL database, a schema each (issue 34): what `scratchfs
//! pads list|create|archive` does for the database's administrator (docs/deploy.md "Many
//! scratchpads on one server").
//!
//! Here a scratchpad is a schema holding the tables `meta`, `nodes` and `versions`: what
//! the catalog says, which only a role that may create in the schema can change (a host
//! role can edit `meta`'s rows, so they do not decide what is listed or archived). Its
//! daemons find it by the search path of their URL (`options=-csearch_path%3DNAME`): a
//! schema that does not exist, or one the role may not use, is refused when mounting and
//! nothing is created, so a mistyped name never makes a new scratchpad; only [`create`]
//! does. Who may do what is PostgreSQL's to say:
//! `create` needs `CREATE` on the database (and `GRANT` rights on the roles it names),
//! `archive` needs to own the schema's tables; a host role gets `EACCES` from the server.

use super::PgConn;
use super::notify::PadKeys;
use super::store::{SCHEMA_VERSION, lock_schema, schema_hash};
use crate::p;
use crate::store::error::{ErrorKind, Result, StoreError};
use crate::store::sql::{Conn, ConnExt};

/// One scratchpad of a database, as [`list`] finds it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PadInfo {
    /// Its schema's name.
    pub name: String,
    /// Bytes on disk of its tables, their indexes and TOAST (`pg_total_relation_size`).
    pub bytes: i64,
    /// Live files (nodes of kind `file` not unlinked); `None` when the caller's role may
    /// not read its tables.
    pub files: Option<i64>,
    /// Versions kept (`versions` rows); `None` as for `files`.
    pub versions: Option<i64>,
    /// Daemons listening on it now (sessions holding its daemons' advisory lock); `None`
    /// as for `files` (its lock's key is a secret of its readers: [`PadKeys`]).
    pub daemons: Option<i64>,
    /// `"TIME by ROLE"` when it was archived ([`archive`]), else `None`.
    pub archived: Option<String>,
}

/// Refuses a name that is not a plain lowercase SQL identifier (`[a-z_][a-z0-9_]*`, at
/// most 63 bytes: PostgreSQL's `NAMEDATALEN` - 1), or one PostgreSQL reserves (`pg_*`,
/// `information_schema`), or `public` (the database's own scratchpad, made by mounting
/// it). `EINVAL`, naming it. Such a name needs no quoting in a URL's `search_path`.
pub fn check_name(name: &str) -> Result<()> {
    let ok_chars = name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    let why = if name.is_empty() || name.len() > 63 {
        Some("1 to 63 bytes")
    } else if !ok_chars || name.as_bytes()[0].is_ascii_digit() {
        Some("lowercase letters, digits and _, not starting with a digit")
    } else if name.starts_with("pg_") || name == "information_schema" || name == "public" {
        Some("not pg_*, information_schema or public")
    } else {
        None
    };
    match why {
        Some(why) => Err(StoreError::new(
            ErrorKind::Invalid,
            format!("{name:?} is not a scratchpad name ({why})"),
        )),
        None => Ok(()),
    }
}

/// `text` from a row a host role may have written, to print: each control character
/// (a terminal's escape sequences) as `?`.
fn printable(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

/// `name` as an SQL identifier, in double quotes (a `"` doubled).
fn ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// The scratchpads of the database `url` names, by name (module docs: by the catalog), with `files` and
/// `versions` unknown for those the caller's role may not read. One statement for the
/// catalog, one for the daemons' locks, one per readable scratchpad.
pub fn list(url: &str) -> Result<Vec<PadInfo>> {
    let conn = PgConn::connect(url)?;
    let schemas: Vec<(String, i64, bool)> = conn.all(
        "SELECT CAST(n.nspname AS TEXT),
                CAST(COALESCE((SELECT SUM(pg_total_relation_size(t.oid)) FROM pg_class t
                               WHERE t.relnamespace = n.oid AND t.relkind = 'r'), 0) AS BIGINT),
                has_schema_privilege(n.oid, 'USAGE') AND has_table_privilege(m.oid, 'SELECT')
         FROM pg_namespace n JOIN pg_class m ON m.relnamespace = n.oid
         WHERE m.relname = 'meta' AND m.relkind = 'r'
           AND (SELECT COUNT(*) FROM pg_class t WHERE t.relnamespace = n.oid
                AND t.relkind = 'r' AND t.relname IN ('nodes', 'versions')) = 2
         ORDER BY 1",
        p![],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
    )?;
    let locks = daemon_locks(&conn)?;
    let mut pads = Vec::new();
    for (name, bytes, readable) in schemas {
        if !readable {
            pads.push(PadInfo {
                name,
                bytes,
                files: None,
                versions: None,
                daemons: None,
                archived: None,
            });
            continue;
        }
        let s = ident(&name);
        let (archived, files, versions, secret): (Option<String>, i64, i64, Option<String>) = conn
            .one(
                &format!(
                    "SELECT (SELECT value FROM {s}.meta WHERE key = 'archived'),
                            (SELECT COUNT(*) FROM {s}.nodes
                             WHERE kind = 'file' AND unlinked_ns IS NULL),
                            (SELECT COUNT(*) FROM {s}.versions),
                            (SELECT value FROM {s}.meta WHERE key = 'scratchpad_id')"
                ),
                p![],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
            )?;
        let keys = PadKeys::of_pad(&name, &secret.unwrap_or_default());
        let daemons = Some(locks_of(&locks, &keys));
        pads.push(PadInfo {
            name,
            bytes,
            files: Some(files),
            versions: Some(versions),
            daemons,
            archived: archived.map(|a| printable(&a)),
        });
    }
    Ok(pads)
}

/// The sessions holding each scratchpad's daemons' lock in this database: (KEY2 as the
/// catalog's unsigned `objid`, count), for [`PadKeys`]' first key.
fn daemon_locks(conn: &PgConn) -> Result<Vec<(i64, i64)>> {
    conn.all(
        "SELECT CAST(objid AS BIGINT), COUNT(*) FROM pg_locks
         WHERE locktype = 'advisory' AND objsubid = 2 AND granted
           AND CAST(classid AS BIGINT) = ?1
           AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
         GROUP BY 1",
        p![i64::from(PadKeys::default().daemons_lock.0 as u32)],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )
}

/// How many daemons listen on the scratchpad of `keys`, from [`daemon_locks`].
fn locks_of(locks: &[(i64, i64)], keys: &PadKeys) -> i64 {
    let key = i64::from(keys.daemons_lock.1 as u32);
    locks.iter().find(|(k, _)| *k == key).map_or(0, |(_, n)| *n)
}

/// Makes the scratchpad `name` in the database `url` names: the schema, its tables (this
/// build's schema text) and `meta` rows, and for each of `roles` the grants of
/// docs/deploy.md "Roles" (rows only: no DDL, no gc). One transaction: nothing stays when
/// any step fails. The first mount gives it its root directory, owned by the mounting
/// user. Errors: `EINVAL` for a bad name ([`check_name`]) or a role the server does not
/// have, `EEXIST` when the schema exists (a scratchpad or not), `EACCES` when the caller
/// may not create schemas or grant.
pub fn create(url: &str, name: &str, roles: &[String]) -> Result<()> {
    check_name(name)?;
    let conn = PgConn::connect(url)?;
    let db = super::display_name(url);
    conn.transaction(|c| {
        lock_schema(c, name)?;
        let exists: bool = c.value(
            "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = ?1)",
            p![name],
        )?;
        if exists {
            return Err(StoreError::new(
                ErrorKind::Exists,
                format!("{db}: a schema {name} exists already; nothing was changed"),
            ));
        }
        for role in roles {
            let known: bool = c.value(
                "SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = ?1)",
                p![role.as_str()],
            )?;
            if !known {
                return Err(StoreError::new(
                    ErrorKind::Invalid,
                    format!("{db}: no role {role:?} on the server; nothing was created"),
                ));
            }
        }
        let s = ident(name);
        c.batch(&format!("CREATE SCHEMA {s}; SET LOCAL search_path TO {s}"))?;
        c.batch(super::SCHEMA)?;
        for (key, value) in [
            ("schema_sql", schema_hash()),
            ("schema_version", SCHEMA_VERSION.to_owned()),
            (
                "scratchpad_id",
                crate::store::sql::new_scratchpad_id(&format!("{db} {name}")),
            ),
        ] {
            c.exec(
                "INSERT INTO meta(key, value) VALUES (?1, ?2)",
                p![key, value.as_str()],
            )?;
        }
        for role in roles {
            let r = ident(role);
            c.batch(&format!(
                "GRANT USAGE ON SCHEMA {s} TO {r};
                 GRANT SELECT, INSERT, UPDATE ON ALL TABLES IN SCHEMA {s} TO {r};
                 GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA {s} TO {r};
                 GRANT DELETE ON {s}.fields, {s}.daemons TO {r}"
            ))?;
        }
        Ok(())
    })
    .map_err(|e| e.context(format_args!("creating scratchpad {name}")))
}

/// What [`archive`] did.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Archived {
    /// `"TIME by ROLE"` (RFC 3339, UTC, to the microsecond), as `meta.archived` holds it.
    pub archived: String,
    /// The roles whose rights to change rows were revoked (`PUBLIC` for everyone's).
    pub revoked: Vec<String>,
    /// Whether it was archived before (then nothing was changed).
    pub already: bool,
}

/// Archives the scratchpad `name` of the database `url` names: records `meta.archived`
/// (`TIME by ROLE`, UTC; over an `archived` row another role wrote) and revokes every
/// right to change its rows (`INSERT`, `UPDATE`, `DELETE`, `TRUNCATE`, and sequences'
/// `USAGE`, `UPDATE`) from every role but the tables' owner, so that no mount opens it
/// for writing (`Postgres::open` refuses it, `EROFS`) and no host role can change it by
/// other means; reading it (`mount --at TIME`, `log`, `export`)
/// still works. Nothing is deleted. Errors: `EINVAL` for a bad name, `ENOENT` when there
/// is no such scratchpad, `EBUSY` while daemons listen on it (unmount them first),
/// `EACCES` when the caller does not own its tables.
pub fn archive(url: &str, name: &str) -> Result<Archived> {
    check_name(name)?;
    let conn = PgConn::connect(url)?;
    let db = super::display_name(url);
    conn.transaction(|c| {
        lock_schema(c, name)?;
        let s = ident(name);
        // Only its owner: a host role may insert rows into `meta`, and its REVOKE of
        // what it did not grant would change nothing. Asked of the catalog, which every
        // role may read (a role without the schema's USAGE learns only the owner's name).
        let owner: Option<String> = c.opt_value(
            "SELECT CAST(CAST(m.relowner AS regrole) AS TEXT)
             FROM pg_namespace n JOIN pg_class m ON m.relnamespace = n.oid
             WHERE n.nspname = ?1 AND m.relname = 'meta' AND m.relkind = 'r'
               AND NOT pg_has_role(m.relowner, 'MEMBER')",
            p![name],
        )?;
        if let Some(owner) = owner {
            return Err(StoreError::new(
                ErrorKind::Denied,
                format!(
                    "{db}: only the owner of scratchpad {name}'s tables ({owner}) may \
                     archive it; nothing was changed"
                ),
            ));
        }
        let holds: bool = c.value(
            "SELECT COUNT(*) = 3 FROM pg_namespace n JOIN pg_class t ON t.relnamespace = n.oid
             WHERE n.nspname = ?1 AND t.relkind = 'r'
               AND t.relname IN ('meta', 'nodes', 'versions')",
            p![name],
        )?;
        if !holds {
            return Err(StoreError::new(
                ErrorKind::NotFound,
                format!(
                    "{db}: no scratchpad named {name} (`scratchfs pads list` names them); \
                     nothing was changed"
                ),
            ));
        }
        let secret: Option<String> = c.opt_value(
            &format!("SELECT value FROM {s}.meta WHERE key = 'scratchpad_id'"),
            p![],
        )?;
        let keys = PadKeys::of_pad(name, &secret.unwrap_or_default());
        let listening = locks_of(&daemon_locks(c)?, &keys);
        if listening > 0 {
            return Err(StoreError::new(
                ErrorKind::Busy,
                format!(
                    "{db}: scratchpad {name} is mounted by {listening} daemon(s): unmount \
                     them first; nothing was changed"
                ),
            ));
        }
        // Every other role's rights to change rows go, whatever `meta` says (a host role
        // may have written an `archived` row of its own before).
        let grantees: Vec<Option<String>> = c.all(
            "SELECT DISTINCT CASE WHEN a.grantee = 0 THEN NULL
                                  ELSE CAST(CAST(a.grantee AS regrole) AS TEXT) END
             FROM pg_class t, aclexplode(t.relacl) a
             WHERE t.relnamespace = CAST(CAST(?1 AS TEXT) AS regnamespace)
               AND a.grantee <> t.relowner
               AND a.privilege_type IN ('INSERT', 'UPDATE', 'DELETE', 'TRUNCATE', 'USAGE')
             ORDER BY 1",
            p![name],
            |r| r.get(0),
        )?;
        let mut revoked = Vec::new();
        for g in grantees {
            // regrole's text is the role's name, quoted where it needs it.
            let role = g.unwrap_or_else(|| "PUBLIC".to_owned());
            c.batch(&format!(
                "REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON ALL TABLES IN SCHEMA {s} FROM {role};
                 REVOKE USAGE, UPDATE ON ALL SEQUENCES IN SCHEMA {s} FROM {role}"
            ))?;
            revoked.push(printable(&role));
        }
        let before: Option<String> = c.opt_value(
            &format!("SELECT value FROM {s}.meta WHERE key = 'archived'"),
            p![],
        )?;
        // Archived before by the owner (no other role could have written since): as it
        // was. Else the row is the owner's now.
        if let Some(at) = before.filter(|_| revoked.is_empty()) {
            return Ok(Archived {
                archived: printable(&at),
                revoked,
                already: true,
            });
        }
        let at: String = c.value(
            "SELECT to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')
                    || ' by ' || CAST(current_user AS TEXT)",
            p![],
        )?;
        c.exec(
            &format!(
                "INSERT INTO {s}.meta(key, value) VALUES ('archived', ?1)
                 ON CONFLICT(key) DO UPDATE SET value = excluded.value"
            ),
            p![at.as_str()],
        )?;
        Ok(Archived {
            archived: printable(&at),
            revoked,
            already: false,
        })
    })
    .map_err(|e| e.context(format_args!("archiving scratchpad {name}")))
}

/// Refuses to open for writing the scratchpad of the current schema when it is archived
/// ([`archive`]): `EROFS`, saying when and by whom, and how to read it.
pub(super) fn refuse_archived(c: &dyn Conn) -> Result<()> {
    match c.opt_value::<String>("SELECT value FROM meta WHERE key = 'archived'", p![])? {
        None => Ok(()),
        Some(at) => {
            let at = printable(&at);
            let time = at.split(' ').next().unwrap_or_default();
            Err(StoreError::new(
                ErrorKind::ReadOnly,
                format!(
                    "this scratchpad was archived ({at}): nothing may be written to it; \
                     `scratchfs mount --at {time}` shows it read-only"
                ),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pad_names_are_plain_identifiers() {
        for ok in ["a", "pad_1", "_x", &"p".repeat(63)] {
            assert!(check_name(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "Pad",
            "1pad",
            "pad-1",
            "pad 1",
            "pad\"x",
            "pg_x",
            "public",
            "information_schema",
            &"p".repeat(64),
        ] {
            let e = check_name(bad).unwrap_err();
            assert_eq!(e.errno(), libc::EINVAL, "{bad}");
        }
    }

    #[test]
    fn rows_are_printed_without_control_characters() {
        assert_eq!(printable("t by r\u{1b}]0;x\u{7}\n"), "t by r?]0;x??");
    }

    #[test]
    fn identifiers_are_quoted() {
        assert_eq!(ident("a\"b"), "\"a\"\"b\"");
    }
}
