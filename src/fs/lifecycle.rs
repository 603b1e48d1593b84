//! The end of a task (issue 36 item 5): a promotion recorded in the pad it came from,
//! and a pad retired (read-only for good). `scratchfs promote` and `scratchfs retire`
//! ([`crate::cli::promote`]) call these; the promotion itself is [`Fs::bring_from`].

use super::Fs;
use crate::error::{Error, Result};
use crate::identity::Caller;

/// The `meta` row that says a pad was retired: `TIME by uid UID`. A store refuses to open
/// such a pad for writing ([`crate::store::Sqlite::open_with`], the PostgreSQL `open`).
pub const RETIRED: &str = "retired";

/// The longest reason a promotion's record keeps, bytes.
const NOTE_MAX: usize = 4096;

impl Fs {
    /// Records that `caller` promoted the file at `path` (stored form) of this pad
    /// elsewhere (an event, op `promote`, `reason` saying what went where; secrets in it
    /// redacted). Root and the user who mounted only (`EPERM`, recorded): the record is
    /// evidence, and an agent must not forge it.
    pub fn note_promoted(&self, path: &str, reason: &str, caller: &Caller) -> Result<()> {
        if !self.gate.is_trusted(caller) {
            let e = Error::new(
                libc::EPERM,
                "promote: recording a promotion is for root and the user who mounted",
            );
            self.record_refusal(path, caller, &e, None);
            return Err(e);
        }
        if reason.len() > NOTE_MAX || path.len() > NOTE_MAX {
            return Err(Error::new(
                libc::E2BIG,
                format!("promote: a record of at most {NOTE_MAX} bytes"),
            ));
        }
        let redact = |s: &str| {
            String::from_utf8_lossy(&super::gate::Gate::redact(s.as_bytes())).into_owned()
        };
        self.store
            .note_event("promote", &redact(path), &redact(reason), caller)?;
        self.views.changed(&[]);
        Ok(())
    }

    /// When this pad was retired (`TIME by uid UID`), if it was.
    pub fn retired(&self) -> Result<Option<String>> {
        Ok(self.store.meta(RETIRED)?)
    }

    /// Retires this pad for `caller` (root or the user who mounted; `EPERM` otherwise,
    /// recorded): an event (op `retire`, `what` its reason), then [`RETIRED`], after which
    /// no store opens it for writing. Returns the `TIME by uid UID` recorded.
    pub fn retire(&self, what: &str, caller: &Caller) -> Result<String> {
        self.admit(
            caller,
            &super::gate::Change::Erase {
                what: "retire",
                path: "",
            },
            || None,
        )?;
        let when = format!(
            "{} by uid {}",
            crate::views::utc(crate::store::sql::now_ns()),
            caller.uid
        );
        self.store.note_event("retire", "", what, caller)?;
        self.store.set_meta(RETIRED, &when)?;
        Ok(when)
    }
}
