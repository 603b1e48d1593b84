//! Refusals at the pad's quota (issue 36, docs/rules.md "Retention and quotas"): a
//! refusal is a record (an event, [`EVENT_RECORD_BYTES`], and any refused content), and a
//! caller bound by the quota could otherwise grow a full pad without bound by being
//! refused (attack rounds of sessions 30 and 31: 5,000 refused creates, 660 KB). So once
//! the pad is at its quota, a refusal keeps its size and digest instead of its content;
//! past the quota by [`REFUSAL_SLACK_BYTES`], refusals are counted instead of recorded
//! one by one, and one record at most every [`UNRECORDED_EVERY`] says how many there
//! were, by which writers, and the last one's path, errno and reason.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::Fs;
use super::policy::QuotaHold;
use super::tree::now_ns;
use crate::identity::Caller;
use crate::store::EVENT_RECORD_BYTES;

/// How far past `quota.bytes` refusals' records of callers bound by it may take the pad,
/// bytes: 64 records ([`EVENT_RECORD_BYTES`] each), so the refusals that tell why the pad
/// is full are on record one by one.
pub const REFUSAL_SLACK_BYTES: u64 = 64 * EVENT_RECORD_BYTES;

/// How often, at most, one record counts the refusals not recorded one by one.
pub const UNRECORDED_EVERY: Duration = Duration::from_secs(60);

/// At most this many writers are named in a count's record; the rest are "others".
const WRITERS_NAMED: usize = 8;

/// What the row of a process that deleted at the quota keeps of its arguments
/// ([`Fs::recorded_caller`]).
pub const ARGUMENTS_NOT_KEPT: &str = "(arguments not kept: the pad was at its quota)";

/// How a refusal is recorded ([`Fs::refusal_room`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RefusalRoom {
    /// Whole: path, errno, reason and the refused content (SPEC §6).
    Whole,
    /// Without its content, whose size and blake3 the reason gives: the content would take
    /// the pad past its quota.
    WithoutContent,
    /// Counted, not recorded: the pad is past its quota by [`REFUSAL_SLACK_BYTES`].
    Counted,
}

/// Refusals counted and not yet on record ([`Fs::record_refusal`]).
#[derive(Debug, Default)]
pub(super) struct Unrecorded {
    count: u64,
    first_ns: i64,
    last_ns: i64,
    /// When the first of them came (the count's record goes at the first refusal
    /// [`UNRECORDED_EVERY`] after it, at the next policy pass after that, or at unmount).
    since: Option<Instant>,
    by: BTreeMap<String, u64>,
    /// The last one: path, errno, reason.
    last: Option<(String, i32, String)>,
}

impl Unrecorded {
    fn add(&mut self, path: &str, errno: i32, reason: &str, caller: &Caller, now_ns: i64) {
        if self.count == 0 {
            self.first_ns = now_ns;
            self.since = Some(Instant::now());
        }
        self.count += 1;
        self.last_ns = now_ns;
        *self.by.entry(caller.writer.to_string()).or_default() += 1;
        self.last = Some((path.into(), errno, reason.into()));
    }

    /// The record's reason, path and errno, and this count emptied; `None` when nothing
    /// is counted.
    fn take(&mut self) -> Option<(String, String, i32)> {
        let (path, errno, reason) = self.last.take()?;
        let mut by: Vec<(String, u64)> = std::mem::take(&mut self.by).into_iter().collect();
        by.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        let others: u64 = by.iter().skip(WRITERS_NAMED).map(|(_, n)| n).sum();
        let mut writers: Vec<String> = by
            .iter()
            .take(WRITERS_NAMED)
            .map(|(w, n)| format!("{w} {n}"))
            .collect();
        if others > 0 {
            writers.push(format!("others {others}"));
        }
        let text = format!(
            "{} refusals past the pad's quota not recorded one by one, {} to {} (by writer: {}); the last: {reason}",
            self.count,
            time(self.first_ns),
            time(self.last_ns),
            writers.join(", ")
        );
        *self = Unrecorded::default();
        Some((text, path, errno))
    }
}

/// `ns` since the epoch as `2026-12-06T19:04:05Z`.
fn time(ns: i64) -> String {
    jiff::Timestamp::from_nanosecond(i128::from(ns))
        .unwrap_or(jiff::Timestamp::UNIX_EPOCH)
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

impl Fs {
    /// `caller` as a change the quota never refuses (a deletion) records it: whole, unless
    /// the quota binds it and its process's new row would not fit
    /// ([`Fs::process_row_fits`]); then without its arguments ([`ARGUMENTS_NOT_KEPT`]) and
    /// with its executable's path cut to 256 bytes (a row of a few hundred bytes: its
    /// writer, uid, pid and namespaces as always).
    pub(super) fn recorded_caller<'a>(&self, caller: &'a Caller) -> Cow<'a, Caller> {
        if self.process_row_fits(caller).is_some() {
            return Cow::Borrowed(caller);
        }
        Cow::Owned(Caller {
            argv: vec![ARGUMENTS_NOT_KEPT.into()],
            exe: crate::text::cut(caller.exe.clone(), 256),
            ..caller.clone()
        })
    }

    /// How a refusal of `caller` that would keep `content` bytes is recorded under the
    /// pad's quota: whole when the quota does not bind the caller (no `quota.bytes`, root
    /// or the user who mounted) or its record and content fit; without its content when
    /// they do not and the record fits within [`REFUSAL_SLACK_BYTES`] past the quota;
    /// counted otherwise. What it records is held against the quota until the returned
    /// hold is dropped (after the record was counted), so that refusals at once cannot
    /// each fit alone and pass it together (attack round of session 33: 64 refused
    /// 100 KB writes at once with 107 KB free kept four).
    pub(super) fn refusal_room(
        &self,
        caller: &Caller,
        texts: u64,
        content: u64,
    ) -> (RefusalRoom, Option<QuotaHold<'_>>) {
        let Some(limit) = self.quota().and_then(|q| q.bytes) else {
            return (RefusalRoom::Whole, None);
        };
        if self.gate.is_trusted(caller) || !matches!(self.usage(), Ok(Some(_))) {
            return (RefusalRoom::Whole, None);
        }
        // A new process's row, which its record would insert.
        let texts = texts.saturating_add(self.store.process_record_cost(caller));
        let mut count = self.usage.lock();
        let used = count
            .counted
            .map_or(0, |u| u.bytes)
            .saturating_add(count.held)
            .saturating_add(EVENT_RECORD_BYTES + texts);
        let (room, holds) = if used.saturating_add(content) <= limit {
            (RefusalRoom::Whole, EVENT_RECORD_BYTES + texts + content)
        } else if used <= limit.saturating_add(REFUSAL_SLACK_BYTES) {
            (RefusalRoom::WithoutContent, EVENT_RECORD_BYTES + texts)
        } else {
            return (RefusalRoom::Counted, None);
        };
        count.held += holds;
        (room, Some(QuotaHold::taken(self, holds)))
    }

    /// Counts a refusal that is not recorded one by one ([`RefusalRoom::Counted`]), and
    /// records the count when the first counted came [`UNRECORDED_EVERY`] ago.
    pub(super) fn count_refusal(&self, path: &str, errno: i32, reason: &str, caller: &Caller) {
        let due = {
            let mut u = self.unrecorded.lock();
            u.add(path, errno, reason, caller, now_ns());
            u.since.is_some_and(|s| s.elapsed() >= UNRECORDED_EVERY)
        };
        if due {
            self.record_unrecorded();
        }
    }

    /// Records the count of refusals not recorded one by one, if any: one event (`op`
    /// `rejected`, the last one's path and errno) by the daemon's own writer `scratchfs`
    /// (so that no caller's refusal can pass for it, nor it for one caller's: attack
    /// round of session 33), whose reason says how many, when, by which writers, and the
    /// last one's reason. Called when due, by the policy pass when due, and at unmount.
    pub(super) fn record_unrecorded(&self) {
        let Some((reason, path, errno)) = self.unrecorded.lock().take() else {
            return;
        };
        let caller = Caller::internal("scratchfs");
        let reason = super::gate::cut(reason, super::gate::RECORD_REASON_MAX);
        match self.store.reject(
            &path,
            errno,
            &reason,
            &caller,
            crate::store::Refused::Nothing,
        ) {
            Ok(()) => self.usage_added((path.len() + reason.len()) as u64, 0, 1, 0),
            Err(e) => log::error!("recording the refusals past the quota: {e}"),
        }
        self.views.changed(&[]);
    }

    /// [`Fs::record_unrecorded`] when the first refusal counted came
    /// [`UNRECORDED_EVERY`] ago.
    pub(super) fn record_unrecorded_if_due(&self) {
        let due = self
            .unrecorded
            .lock()
            .since
            .is_some_and(|s| s.elapsed() >= UNRECORDED_EVERY);
        if due {
            self.record_unrecorded();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_count_names_its_writers_the_last_refusal_and_empties() {
        let mut u = Unrecorded::default();
        assert!(u.take().is_none());
        let agent = Caller {
            writer: "agent".into(),
            uid: 1000,
            ..Default::default()
        };
        let tool = Caller {
            writer: "tool".into(),
            uid: 1001,
            ..Default::default()
        };
        u.add("a", libc::EDQUOT, "a: full", &agent, 0);
        u.add("b", libc::EDQUOT, "b: full", &agent, 1_000_000_000);
        u.add("c", libc::EACCES, "c: not yours", &tool, 2_000_000_000);
        let (reason, path, errno) = u.take().unwrap();
        assert_eq!(
            reason,
            "3 refusals past the pad's quota not recorded one by one, 1970-01-01T00:00:00Z to 1970-01-01T00:00:02Z (by writer: agent 2, tool 1); the last: c: not yours"
        );
        assert_eq!((path.as_str(), errno), ("c", libc::EACCES));
        assert!(u.take().is_none(), "taken once");
        for i in 0..10 {
            let w = Caller {
                writer: format!("w{i}"),
                ..Default::default()
            };
            u.add("p", libc::EDQUOT, "full", &w, 0);
        }
        let (reason, ..) = u.take().unwrap();
        assert!(reason.contains("w7 1, others 2);"), "{reason}");
    }
}
