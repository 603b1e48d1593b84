//! Through a pooler in transaction mode (PgBouncer's `pool_mode = transaction`, issue 34
//! item 3): a server session serves one transaction of one client, then another's, so
//! nothing may outlive a transaction on it. A URL says so with `pooler=transaction`, and
//! names the server itself for what needs a session of its own (the listener: `LISTEN`,
//! its session advisory lock) with `direct_host`, `direct_port` and/or `direct_dbname`
//! (what it leaves out is the pooler's). Its connections ([`super::PgConn`]) then:
//!
//! - prepare no statement by name past its transaction: each statement text is prepared
//!   once, inside a transaction, for its parameter and column types only, and closed in
//!   that transaction; it is then sent as text with its parameters as typed literals
//!   (`CAST(literal AS type)`), or, when a parameter is large or selects bytes, as the
//!   protocol's unnamed statement (one round trip, the types given);
//! - set nothing for the session: the settings of [`super::PgConn::connect`]
//!   (`lock_timeout`, `idle_in_transaction_session_timeout`, `synchronous_commit`) and the
//!   URL's `options` (`-c search_path=NAME`: a scratchpad's schema) are set in each
//!   transaction with `set_config(..., true)` (the pooler refuses `options` at login);
//! - run every statement in a transaction (one that came alone is wrapped), but `VACUUM`,
//!   which cannot be, and names its tables with the schema instead ([`qualified_vacuum`]);
//! - keep temporary tables only until their transaction ends (`ON COMMIT DROP`).
//!
//! PgBouncer 1.18 (Debian 12's) is what this was tested with (tests/pooler.rs); it tracks
//! no prepared statement, which later versions do (`max_prepared_statements`), and this
//! does not need.

use tokio_postgres::Config;
use tokio_postgres::config::Host;

use crate::store::error::{ErrorKind, Result, StoreError};

/// The parameters of a URL this module reads (removed from what tokio-postgres parses).
pub const PARAMS: &[&str] = &["pooler", "direct_host", "direct_port", "direct_dbname"];

/// What a URL with `pooler=transaction` says.
#[derive(Debug, Clone)]
pub struct Pooler {
    /// The server's own address, for the listener: the pooler's configuration with the
    /// `direct_*` parameters and the URL's `options` (a direct session takes them).
    pub direct: Config,
    /// The `-c NAME=VALUE` settings of the URL's `options`, in order: set in each
    /// transaction ([`set_config_sql`]).
    pub settings: Vec<(String, String)>,
}

fn invalid(what: String) -> StoreError {
    StoreError::new(ErrorKind::Invalid, what)
}

/// The pooler `params` (every parameter of a URL, [`super::tls::params`]) describe, for
/// `config` (the pooler's, as parsed without them): `None` without `pooler`. `EINVAL`
/// for a `pooler` other than `transaction`, `direct_*` without it, `pooler=transaction`
/// without any `direct_*` (its listener would go through the pooler, which cannot keep a
/// `LISTEN`), a `direct_port` that is not a port, or `options` other than `-c
/// NAME=VALUE` settings.
pub fn of(params: &[(String, String)], config: &Config) -> Result<Option<Pooler>> {
    let param = |name: &str| super::tls::last(params, name);
    let direct_given = PARAMS[1..].iter().any(|k| param(k).is_some());
    match param("pooler") {
        None if direct_given => {
            return Err(invalid(
                "direct_host, direct_port and direct_dbname name the server behind a pooler: \
                 they need pooler=transaction"
                    .to_owned(),
            ));
        }
        None => return Ok(None),
        Some("transaction") => {}
        Some(other) => {
            return Err(invalid(format!(
                "pooler={other:?}: the only value is transaction (a pooler in session mode \
                 needs no parameter)"
            )));
        }
    }
    if !direct_given {
        return Err(invalid(
            "pooler=transaction needs the server's own address for the listener, which \
             cannot go through the pooler (LISTEN lasts a session): give direct_host \
             and/or direct_port (and direct_dbname if the pooler's database name differs)"
                .to_owned(),
        ));
    }
    let port = match param("direct_port") {
        None => None,
        Some(p) => Some(
            p.parse::<u16>()
                .map_err(|_| invalid(format!("direct_port {p:?} is not a port number")))?,
        ),
    };
    let options = param("options");
    let settings = match options {
        Some(o) => parse_options(o)?,
        None => Vec::new(),
    };
    let direct = direct_config(
        config,
        param("direct_host"),
        port,
        param("direct_dbname"),
        options,
    );
    Ok(Some(Pooler { direct, settings }))
}

/// The settings of a libpq `options` string: `-c NAME=VALUE`, `-cNAME=VALUE` or
/// `--NAME=VALUE`, separated by white space (`\` escapes the next character). `EINVAL`
/// for anything else, or a name that is not a setting's (letters, digits, `_`, `.`).
fn parse_options(options: &str) -> Result<Vec<(String, String)>> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut chars = options.chars();
    let mut in_word = false;
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let Some(n) = chars.next() {
                    word.push(n);
                }
                in_word = true;
            }
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            c => {
                word.push(c);
                in_word = true;
            }
        }
    }
    if in_word {
        words.push(word);
    }
    let mut out = Vec::new();
    let mut words = words.into_iter();
    while let Some(w) = words.next() {
        let setting = if w == "-c" {
            words.next().unwrap_or_default()
        } else if let Some(s) = w.strip_prefix("-c").or_else(|| w.strip_prefix("--")) {
            s.to_owned()
        } else {
            return Err(invalid(format!(
                "options: {w:?} cannot be set through a pooler (only -c NAME=VALUE settings, \
                 which are set in each transaction)"
            )));
        };
        let Some((name, value)) = setting.split_once('=') else {
            return Err(invalid(format!("options: {setting:?} is not NAME=VALUE")));
        };
        let name = name.replace('-', "_");
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
        {
            return Err(invalid(format!(
                "options: {name:?} is not a setting's name"
            )));
        }
        out.push((name, value.to_owned()));
    }
    Ok(out)
}

/// The configuration of a direct session to the server behind the pooler: `pooled`'s
/// login (user, password, database, application name, TLS mode, timeouts, keepalives)
/// at `host` (comma-separated; else the pooler's hosts) and `port` (else the pooler's),
/// database `dbname` (else the pooler's), with `options`.
fn direct_config(
    pooled: &Config,
    host: Option<&str>,
    port: Option<u16>,
    dbname: Option<&str>,
    options: Option<&str>,
) -> Config {
    let mut c = Config::new();
    if let Some(u) = pooled.get_user() {
        c.user(u);
    }
    if let Some(p) = pooled.get_password() {
        c.password(p);
    }
    if let Some(d) = dbname.or(pooled.get_dbname()) {
        c.dbname(d);
    }
    if let Some(a) = pooled.get_application_name() {
        c.application_name(a);
    }
    if let Some(o) = options {
        c.options(o);
    }
    c.ssl_mode(pooled.get_ssl_mode());
    if let Some(t) = pooled.get_connect_timeout() {
        c.connect_timeout(*t);
    }
    c.keepalives(pooled.get_keepalives());
    c.keepalives_idle(pooled.get_keepalives_idle());
    match host {
        Some(hosts) => {
            for h in hosts.split(',') {
                c.host(h.trim());
            }
        }
        None => {
            for h in pooled.get_hosts() {
                match h {
                    Host::Tcp(name) => c.host(name),
                    Host::Unix(path) => c.host_path(path),
                };
            }
            for a in pooled.get_hostaddrs() {
                c.hostaddr(*a);
            }
        }
    }
    match port {
        Some(p) => {
            c.port(p);
        }
        None => {
            for p in pooled.get_ports() {
                c.port(*p);
            }
        }
    }
    c
}

/// One statement that sets `settings` for the open transaction only:
/// `SELECT set_config('NAME', 'VALUE', true), ...` (names checked by [`of`], values
/// quoted as string literals).
pub fn set_config_sql(settings: &[(String, String)]) -> String {
    let mut out = String::from("SELECT ");
    for (i, (name, value)) in settings.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        out.push_str(&format!("set_config('{name}', "));
        super::conn::quote_text(&mut out, value);
        out.push_str(", true)");
    }
    out
}

/// `VACUUM a, b` with each table named in `schema` (`VACUUM "s".a, "s".b`): a `VACUUM`
/// cannot run in a transaction, where the search path is set, so through a pooler it
/// names its schema. `None` for anything else.
pub fn qualified_vacuum(sql: &str, schema: &str) -> Option<String> {
    let sql = sql.trim().trim_end_matches(';').trim();
    let (word, tables) = sql.split_once(char::is_whitespace)?;
    if !word.eq_ignore_ascii_case("VACUUM") {
        return None;
    }
    let quoted = format!("\"{}\"", schema.replace('"', "\"\""));
    let tables: Vec<String> = tables
        .split(',')
        .map(|t| t.trim())
        .map(|t| {
            if t.is_empty() || !t.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                None
            } else {
                Some(format!("{quoted}.{t}"))
            }
        })
        .collect::<Option<_>>()?;
    Some(format!("VACUUM {}", tables.join(", ")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::str::FromStr;

    fn p(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn a_pooler_needs_the_servers_address_and_says_so() {
        let c = Config::from_str("postgres://u:pw@pooler:6432/d").unwrap();
        assert!(of(&p(&[]), &c).unwrap().is_none());
        let e = of(&p(&[("pooler", "transaction")]), &c).unwrap_err();
        assert!(e.reason.contains("direct_host"), "{}", e.reason);
        let e = of(&p(&[("pooler", "session")]), &c).unwrap_err();
        assert!(
            e.reason.contains("only value is transaction"),
            "{}",
            e.reason
        );
        let e = of(&p(&[("direct_port", "5432")]), &c).unwrap_err();
        assert!(e.reason.contains("need pooler=transaction"), "{}", e.reason);
        let e = of(&p(&[("pooler", "transaction"), ("direct_port", "x")]), &c).unwrap_err();
        assert!(e.reason.contains("not a port"), "{}", e.reason);
        let got = of(
            &p(&[
                ("pooler", "transaction"),
                ("direct_port", "5432"),
                ("options", "-c search_path=pad_a --lock-timeout=5s"),
            ]),
            &c,
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            got.settings,
            p(&[("search_path", "pad_a"), ("lock_timeout", "5s")])
        );
        assert_eq!(got.direct.get_ports(), &[5432]);
        assert_eq!(got.direct.get_hosts(), &[Host::Tcp("pooler".to_owned())]);
        assert_eq!(got.direct.get_user(), Some("u"));
        assert_eq!(got.direct.get_password(), Some(&b"pw"[..]));
        assert_eq!(got.direct.get_dbname(), Some("d"));
        assert_eq!(
            got.direct.get_options(),
            Some("-c search_path=pad_a --lock-timeout=5s")
        );
        let got = of(
            &p(&[
                ("pooler", "transaction"),
                ("direct_host", "db1,db2"),
                ("direct_dbname", "real"),
            ]),
            &c,
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            got.direct.get_hosts(),
            &[Host::Tcp("db1".to_owned()), Host::Tcp("db2".to_owned())]
        );
        assert_eq!(got.direct.get_ports(), &[6432]);
        assert_eq!(got.direct.get_dbname(), Some("real"));
        let e = of(
            &p(&[
                ("pooler", "transaction"),
                ("direct_port", "1"),
                ("options", "-f x"),
            ]),
            &c,
        )
        .unwrap_err();
        assert!(e.reason.contains("-c NAME=VALUE"), "{}", e.reason);
        let e = of(
            &p(&[
                ("pooler", "transaction"),
                ("direct_port", "1"),
                ("options", "-c a'b=1"),
            ]),
            &c,
        )
        .unwrap_err();
        assert!(e.reason.contains("not a setting's name"), "{}", e.reason);
    }

    #[test]
    fn settings_are_one_statement_and_vacuum_names_its_schema() {
        assert_eq!(
            set_config_sql(&p(&[("search_path", "pad_a"), ("x.y", "it's")])),
            "SELECT set_config('search_path', E'pad_a', true), set_config('x.y', E'it''s', true)"
        );
        assert_eq!(
            qualified_vacuum("VACUUM extents, blobs", "pad_a").as_deref(),
            Some("VACUUM \"pad_a\".extents, \"pad_a\".blobs")
        );
        assert_eq!(qualified_vacuum("ANALYZE x", "s"), None);
        assert_eq!(qualified_vacuum("VACUUM x; DROP TABLE y", "s"), None);
    }
}
