//! `scratchfs pads list|create|archive --db URL` (issue 34): the scratchpads of one
//! PostgreSQL database, a schema each, for its administrator (docs/deploy.md "Many
//! scratchpads on one server"). The work and its SQL are the store's
//! ([`crate::store::postgres::pads`]); this file only prints. PostgreSQL authenticates
//! the caller (the URL's role) and decides what it may do: a host role's `create` or
//! `archive` is refused by the server (`EACCES`, exit 1).

use std::path::Path;

use super::Failure;
use crate::store::postgres::pads;
use crate::views::manifest::human_bytes;

/// The URL `db` is, or a failure saying that `pads` works on a PostgreSQL database.
fn url(db: &Path) -> Result<&str, Failure> {
    super::postgres_url(db).ok_or_else(|| {
        if db == Path::new("scratchpad.db") {
            return "pads: give the PostgreSQL database with --db postgres://... (or set \
                    SCRATCHFS_DB)"
                .to_string();
        }
        format!(
            "pads: {}: not a PostgreSQL URL; pads manages the scratchpads of one \
             PostgreSQL database, a schema each (an SQLite scratchpad is a file of its own)",
            db.display()
        )
    })
}

/// The URL of scratchpad `name` in the database `url` names, as a mount takes it, to
/// print: `url` with `options=-csearch_path%3DNAME` (an `options` it had is replaced) and
/// without a password (in the user part or a `password` parameter).
pub fn pad_url(url: &str, name: &str) -> String {
    let (base, query) = url.split_once('?').unwrap_or((url, ""));
    let base = match base.split_once("://") {
        Some((scheme, rest)) => match rest.rsplit_once('@') {
            Some((user, host)) => {
                let user = user.split_once(':').map_or(user, |(u, _)| u);
                format!("{scheme}://{user}@{host}")
            }
            None => base.to_string(),
        },
        None => base.to_string(),
    };
    // Keys as the URL parser reads them: percent-decoded (`%70assword` is `password`).
    let key = |p: &str| -> String {
        let k = p.split('=').next().unwrap_or_default().as_bytes();
        let mut out = Vec::new();
        let mut i = 0;
        while i < k.len() {
            let hex = k
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok());
            match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                Some(b) if k[i] == b'%' => {
                    out.push(b);
                    i += 3;
                }
                _ => {
                    out.push(k[i]);
                    i += 1;
                }
            }
        }
        String::from_utf8_lossy(&out).into_owned()
    };
    let mut params: Vec<&str> = query
        .split('&')
        .filter(|p| !p.is_empty() && !matches!(key(p).as_str(), "options" | "password"))
        .collect();
    let opt = format!("options=-csearch_path%3D{name}");
    params.push(&opt);
    format!("{base}?{}", params.join("&"))
}

/// `scratchfs pads list`: one line per scratchpad (name, live files, versions, size on
/// disk, daemons mounted, archived), or a JSON array of [`pads::PadInfo`].
pub fn list(db: &Path, json: bool) -> Result<(), Failure> {
    let url = url(db)?;
    let pads = pads::list(url).map_err(|e| e.to_string())?;
    if json {
        println!("{}", serde_json::to_string(&pads).expect("plain data"));
        return Ok(());
    }
    if pads.is_empty() {
        println!(
            "no scratchpads in {} (scratchfs pads create NAME makes one)",
            crate::store::postgres::display_name(url)
        );
        return Ok(());
    }
    let known = |n: Option<i64>| n.map_or("?".to_string(), |n| n.to_string());
    let width = pads.iter().map(|p| p.name.len()).max().unwrap_or(4).max(4);
    println!(
        "{:width$}  {:>7}  {:>9}  {:>8}  {:>7}  STATE",
        "NAME", "FILES", "VERSIONS", "SIZE", "DAEMONS"
    );
    for p in &pads {
        let state = match (&p.archived, p.files) {
            (Some(at), _) => format!("archived {at}"),
            (None, None) => "not readable by this role".to_string(),
            (None, Some(_)) => "active".to_string(),
        };
        println!(
            "{:width$}  {:>7}  {:>9}  {:>8}  {:>7}  {state}",
            p.name,
            known(p.files),
            known(p.versions),
            human_bytes(p.bytes.max(0) as u64),
            known(p.daemons),
        );
    }
    Ok(())
}

/// `scratchfs pads create NAME [--role ROLE]...`: makes the scratchpad and grants each
/// role what a host needs; prints the URL to mount it with.
pub fn create(db: &Path, name: &str, roles: &[String], json: bool) -> Result<(), Failure> {
    let url = url(db)?;
    pads::create(url, name, roles).map_err(|e| e.to_string())?;
    let mount_url = pad_url(url, name);
    if json {
        println!(
            "{}",
            serde_json::json!({"created": name, "roles": roles, "url": mount_url})
        );
    } else if roles.is_empty() {
        println!("created scratchpad {name}; mount it with --db '{mount_url}'");
    } else {
        println!("created scratchpad {name}");
        for r in roles {
            println!(
                "  role {r} has its rows (docs/deploy.md \"Roles\"); its host mounts it \
                 with --db '{}'",
                with_user(&mount_url, r)
            );
        }
    }
    Ok(())
}

/// `scratchfs pads archive NAME`: makes it read-only for good (see [`pads::archive`]).
pub fn archive(db: &Path, name: &str, json: bool) -> Result<(), Failure> {
    let url = url(db)?;
    let done = pads::archive(url, name).map_err(|e| e.to_string())?;
    if json {
        println!("{}", serde_json::to_string(&done).expect("plain data"));
    } else if done.already {
        println!(
            "{name} was archived already ({}); nothing changed",
            done.archived
        );
    } else {
        println!(
            "archived {name} ({}): no mount opens it for writing",
            done.archived
        );
        if !done.revoked.is_empty() {
            println!("  revoked writing from {}", done.revoked.join(", "));
        }
    }
    Ok(())
}

/// `url` with `user` as its user name (percent-encoded where a URL needs it).
fn with_user(url: &str, user: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let (authority, tail) = rest.split_at(rest.find(['/', '?']).unwrap_or(rest.len()));
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let user: String = user
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect();
    format!("{scheme}://{user}@{host}{tail}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hosts_url_names_its_role() {
        assert_eq!(
            with_user("postgres://admin@h:5432/db?options=-cx", "host a"),
            "postgres://host%20a@h:5432/db?options=-cx"
        );
        assert_eq!(with_user("postgres://h/db", "r"), "postgres://r@h/db");
    }

    #[test]
    fn a_pads_url_sets_its_search_path() {
        assert_eq!(
            pad_url("postgres://h/db", "p1"),
            "postgres://h/db?options=-csearch_path%3Dp1"
        );
        assert_eq!(
            pad_url(
                "postgres://u:secret@h/db?sslmode=verify-full&options=-cx%3Dy&password=s",
                "p1"
            ),
            "postgres://u@h/db?sslmode=verify-full&options=-csearch_path%3Dp1"
        );
        assert_eq!(
            pad_url(
                "postgres://h/db?%70assword=s&%6Fptions=x&sslmode=require",
                "p1"
            ),
            "postgres://h/db?sslmode=require&options=-csearch_path%3Dp1"
        );
    }
}
