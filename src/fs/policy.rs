//! Retention by policy (issue 36, docs/rules.md "Retention and quotas"): what the rules'
//! `keep` limits forget, chosen lineage by lineage ([`choose`], a pure function), found by
//! a walk of the whole history a page at a time ([`select`]: `scratchfs gc --policy
//! --dry-run` prints it), and forgotten by the daemon itself ([`Fs::policy_pass`]) in short
//! transactions of a bounded size, paced so that writers are never held up for long. No
//! agent's process runs it: the daemon's own thread does ([`spawn`]), or root through
//! `scratchfs gc --policy` (the gate's `Erase`, like any gc).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use super::Fs;
use super::gate::Change;
use crate::error::{Error, Result};
use crate::identity::Caller;
use crate::rules::enforce::Compiled;
use crate::rules::{Including, Keep, PathRule};
use crate::store::{
    EVENT_RECORD_BYTES, ForgetBatch, History, PolicyFile, PolicyRow, Protected, Usage,
    VERSION_RECORD_BYTES,
};

/// The size of the next batch after one of `batch` versions took `took`: scaled toward
/// [`BATCH_TIME`] (at most halved or doubled at a time, between 16 and 4,096). A batch
/// has a fixed cost too (on PostgreSQL about 15 ms of round trips and temporary tables
/// at 1,000,000 versions): a rule that only halved past the target and doubled below a
/// quarter of it left batches of 16 to 32 versions there, all fixed cost (400 a second).
fn next_batch(batch: usize, took: Duration) -> usize {
    let ratio = (BATCH_TIME.as_secs_f64() / took.as_secs_f64().max(1e-6)).clamp(0.5, 2.0);
    ((batch as f64 * ratio) as usize).clamp(16, 4_096)
}

/// A paced pass's pause after a batch, in multiples of the time the batch took, while
/// the pad is being written and while it is not (a quarter). A batch holds the daemon's
/// writer (SQLite's write lock; the PostgreSQL store's one writing connection), so while
/// the agent writes the pass holds it at most a fortieth of the time (a twentieth until
/// session 31; docs/benchmarks.md "Issue 36, session 31": the pass's cost to the writers
/// on PostgreSQL was then mostly its batches' generic plans, since fixed). What it defers
/// is done when the agent pauses, at the idle pace.
const BUSY_PAUSE: u32 = 39;
const IDLE_PAUSE: u32 = 3;

/// Versions read per page of the walk.
const PAGE: usize = 5_000;
/// Refusals read per page.
const REFUSAL_PAGE: usize = 1_000;
/// Versions a first batch forgets; later batches grow or shrink toward [`BATCH_TIME`].
const FIRST_BATCH: usize = 64;
/// The longest a batch should hold the write lock (the bench's bound is 50 ms).
const BATCH_TIME: Duration = Duration::from_millis(20);
/// Every how many of its passes the daemon's thread judges the whole history; the others
/// judge the lineages written since the pass before. `SCRATCHFS_POLICY_FULL_EVERY` in
/// the daemon's environment says otherwise (an integer from 1).
const FULL_EVERY: u64 = 10;
/// How often the daemon's thread runs a pass, unless `SCRATCHFS_POLICY_INTERVAL`
/// (seconds) says otherwise.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(60);

/// The `meta` row where a pass asked for through the mount (`scratchfs gc --policy`)
/// leaves its [`PassReport`] (JSON) for the command, which gets only the errno back.
pub const LAST_POLICY: &str = "last_policy";

/// Which limit forgot a version (or a refusal's content).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Limit {
    /// Not among the newest `versions`.
    Versions,
    /// Older than `days`.
    Days,
    /// Past `bytes` of history.
    Bytes,
}

/// One thing a pass forgets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Chosen {
    /// A version.
    Version {
        /// Index of the rule in `paths`.
        rule: usize,
        /// Its lineage's path (a deleted file's last), as stored.
        path: String,
        /// The version.
        row: PolicyRow,
        /// The limit it is past.
        limit: Limit,
        /// Whether the rule names `inputs` (it may go even if a live version was read
        /// from it).
        inputs_go: bool,
    },
    /// The content of a refusal (the refusal's record stays).
    Refusal {
        /// Index of the rule in `paths`.
        rule: usize,
        /// `events.id`.
        event: i64,
        /// The path refused, as stored.
        path: String,
        /// Bytes of content.
        size: u64,
        /// When it was refused, ns.
        time_ns: i64,
    },
}

/// How a rule is named in events and listings: `paths[1] logs/** (versions 5, days 7)`
/// (the glob quoted as a stored path is: only when it needs it).
pub fn label(index: usize, rule: &PathRule) -> String {
    let mut limits = Vec::new();
    if let Some(keep) = &rule.keep {
        if let Some(n) = keep.versions {
            limits.push(format!("versions {n}"));
        }
        if let Some(d) = keep.days {
            limits.push(format!("days {}", d.0));
        }
        if let Some(b) = keep.bytes {
            limits.push(format!("bytes {b}"));
        }
        for what in &keep.including {
            limits.push(match what {
                Including::Inputs => "including inputs".to_string(),
                Including::Refusals => "including refusals".to_string(),
            });
        }
    }
    format!(
        "paths[{index}] {} ({})",
        crate::views::quote_stored(&rule.path),
        limits.join(", ")
    )
}

/// Whether the rules forget anything at all (some path rule has a limit).
pub fn has_limits(rules: &Compiled) -> bool {
    rules.rules.paths.iter().any(|r| {
        r.keep
            .as_ref()
            .is_some_and(|k| k.versions.is_some() || k.days.is_some() || k.bytes.is_some())
    })
}

/// Which of one lineage's `versions` (oldest first) `keep` forgets, as indexes into
/// `versions` with the limit each is past. Kept whatever the limits say: the newest
/// version of a live lineage; a lineage's newest version otherwise, except under `days`
/// counted from the lineage's end; a version a checkpoint holds (its lineage's newest at
/// or below a checkpoint's `version_seq`), a JSON key's provenance names, MANIFEST shows
/// (`shown`), or a live version was read from or brought back (unless `including`
/// names `inputs`). The limits cut the rest newest first: a version is kept while it is
/// among the newest `versions`, younger than `days`, and the older versions kept so far
/// (the protected ones not counted) with it add up to at most `bytes`; from the first
/// that is not, every older one goes too.
pub fn choose(
    file: &PolicyFile,
    versions: &[PolicyRow],
    keep: &Keep,
    protected: &Protected,
    shown: &HashSet<i64>,
    now_ns: i64,
) -> Vec<(usize, Limit)> {
    let mut out = Vec::new();
    let Some(newest) = versions.len().checked_sub(1) else {
        return out;
    };
    let inputs_go = keep.including.contains(&Including::Inputs);
    let oldest_kept = keep.max_age_ns().map(|a| now_ns.saturating_sub(a));
    let held = |i: usize| {
        let v = &versions[i];
        let newer = versions.get(i + 1).map_or(i64::MAX, |n| n.id);
        let at = protected.checkpoints.partition_point(|&c| c < v.id);
        protected.checkpoints.get(at).is_some_and(|&c| c < newer)
            || protected.fields.contains(&v.id)
            || shown.contains(&v.id)
            || (!inputs_go && protected.inputs.contains(&v.id))
    };
    // The newest version: the live content, or what a deleted file held.
    if !file.live
        && let (Some(oldest), Some(ended)) = (oldest_kept, file.ended_ns)
        && ended < oldest
        && !held(newest)
    {
        out.push((newest, Limit::Days));
    }
    let mut cut: Option<Limit> = None;
    let mut bytes = 0u64;
    for i in (0..newest).rev() {
        let rank = (newest - i) as u64; // 1: the second newest
        if held(i) {
            continue;
        }
        if cut.is_none() {
            let v = &versions[i];
            cut = if keep.versions.is_some_and(|n| rank >= n) {
                Some(Limit::Versions)
            } else if oldest_kept.is_some_and(|o| v.time_ns < o) {
                Some(Limit::Days)
            } else if keep.bytes.is_some_and(|b| bytes.saturating_add(v.size) > b) {
                Some(Limit::Bytes)
            } else {
                bytes = bytes.saturating_add(v.size);
                None
            };
        }
        if let Some(limit) = cut {
            out.push((i, limit));
        }
    }
    out.sort_unstable_by_key(|&(i, _)| i);
    out
}

/// Walks the whole history (versions a page at a time, then the refusals that kept
/// content) and passes each thing the rules' limits forget to `f`, lineage by lineage.
/// With `since` (a version id), only the lineages with a version committed after it are
/// judged, and no refusal: what a new version can push past `versions` or `bytes`
/// (the daemon's passes between full ones). Memory: one page, the lineage being read
/// and what [`Protected`] holds. `read` is told how long each read of the store took,
/// after it (the daemon's pass paces its reads by it).
#[allow(clippy::too_many_arguments)]
pub fn select<H: History + ?Sized>(
    history: &H,
    rules: &Compiled,
    protected: &Protected,
    shown: &HashSet<i64>,
    now_ns: i64,
    since: Option<i64>,
    read: &mut dyn FnMut(Duration),
    f: &mut dyn FnMut(Chosen) -> Result<()>,
) -> Result<()> {
    // Each read of the store, timed for `read`.
    let mut timed = |started: Instant| read(started.elapsed());
    let mut after = (0i64, 0i64);
    let mut lineage: Vec<PolicyRow> = Vec::new();
    let mut files: HashMap<i64, PolicyFile> = HashMap::new();
    let mut judge = |rows: &[PolicyRow], files: &HashMap<i64, PolicyFile>| -> Result<()> {
        let Some(first) = rows.first() else {
            return Ok(());
        };
        let Some(file) = files.get(&first.file_id) else {
            return Ok(());
        };
        let Some(index) = rules.rule_index_for(&file.path) else {
            return Ok(());
        };
        let rule = &rules.rules.paths[index];
        let Some(keep) = &rule.keep else {
            return Ok(());
        };
        for (i, limit) in choose(file, rows, keep, protected, shown, now_ns) {
            f(Chosen::Version {
                rule: index,
                path: file.path.clone(),
                row: rows[i],
                limit,
                inputs_go: keep.including.contains(&Including::Inputs),
            })?;
        }
        Ok(())
    };
    if let Some(since) = since {
        let started = Instant::now();
        let changed = history.policy_changed(since)?;
        timed(started);
        for id in changed {
            let started = Instant::now();
            let files: HashMap<i64, PolicyFile> = history
                .policy_files(id, id)?
                .into_iter()
                .map(|f| (f.file_id, f))
                .collect();
            timed(started);
            let mut rows: Vec<PolicyRow> = Vec::new();
            let mut at = (id, 0i64);
            loop {
                let started = Instant::now();
                let page = history.policy_rows(at, PAGE)?;
                timed(started);
                let mine: Vec<PolicyRow> = page
                    .iter()
                    .take_while(|r| r.file_id == id)
                    .copied()
                    .collect();
                let full = mine.len() == PAGE;
                if let Some(last) = mine.last() {
                    at = (id, last.version);
                }
                rows.extend(mine);
                if !full {
                    break;
                }
            }
            judge(&rows, &files)?;
        }
        return Ok(());
    }
    loop {
        let started = Instant::now();
        let page = history.policy_rows(after, PAGE)?;
        timed(started);
        let Some(last) = page.last() else { break };
        after = (last.file_id, last.version);
        let (lo, hi) = (page[0].file_id, last.file_id);
        files.retain(|&id, _| id >= lo);
        let started = Instant::now();
        let read_files = history.policy_files(lo, hi)?;
        timed(started);
        for file in read_files {
            files.insert(file.file_id, file);
        }
        for row in &page {
            if lineage.last().is_some_and(|l| l.file_id != row.file_id) {
                judge(&lineage, &files)?;
                lineage.clear();
            }
            lineage.push(*row);
        }
        if page.len() < PAGE {
            break;
        }
    }
    judge(&lineage, &files)?;
    // Refused content, under `days` of a rule that names `refusals`.
    let mut after = 0i64;
    loop {
        let started = Instant::now();
        let page = history.policy_refusals(after, REFUSAL_PAGE)?;
        timed(started);
        let Some(last) = page.last() else { break };
        after = last.event;
        for r in &page {
            let Some(index) = rules.rule_index_for(&r.path) else {
                continue;
            };
            let Some(keep) = &rules.rules.paths[index].keep else {
                continue;
            };
            if keep.including.contains(&Including::Refusals)
                && keep
                    .max_age_ns()
                    .is_some_and(|a| r.time_ns < now_ns.saturating_sub(a))
            {
                f(Chosen::Refusal {
                    rule: index,
                    event: r.event,
                    path: r.path.clone(),
                    size: r.size,
                    time_ns: r.time_ns,
                })?;
            }
        }
        if page.len() < REFUSAL_PAGE {
            break;
        }
    }
    Ok(())
}

/// What a pass would forget now ([`select`] as the daemon's pass runs it: MANIFEST's
/// `restorable:` versions kept too), for any reader of the history with `rules`
/// (`scratchfs gc --policy --dry-run`, `scratchfs du`). Changes nothing.
pub fn preview<H: History + ?Sized>(
    history: &H,
    rules: &Compiled,
    now_ns: i64,
    f: &mut dyn FnMut(Chosen) -> Result<()>,
) -> Result<()> {
    let ephemeral = |path: &str| {
        let name = path.rsplit('/').next().unwrap_or(path);
        crate::views::ephemeral::is_builtin(name) || rules.is_ephemeral(path)
    };
    let shown: HashSet<i64> = super::serve_views::restorable_shown(history, &ephemeral)?
        .iter()
        .map(|r| r.version_id)
        .collect();
    let protected = history.policy_protected(None)?;
    select(
        history,
        rules,
        &protected,
        &shown,
        now_ns,
        None,
        &mut |_| {},
        f,
    )
}

/// What a pass forgot, by rule and in all.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct PassReport {
    /// Versions forgotten.
    pub versions: u64,
    /// Refusals whose content was forgotten.
    pub refusals: u64,
    /// Bytes of content deleted.
    pub bytes: u64,
    /// Transactions it took.
    pub batches: u64,
    /// The longest of them, ms.
    pub longest_batch_ms: f64,
    /// How many took over 50 ms (the bound a writer should wait at most).
    #[serde(default)]
    pub batches_over_50ms: u64,
    /// Reads of the store the pass made (what it protects, pages of the walk, the
    /// lineages', the usage count).
    #[serde(default)]
    pub reads: u64,
    /// Their time in all, ms.
    #[serde(default)]
    pub read_ms: f64,
    /// The longest of them, ms.
    #[serde(default)]
    pub longest_read_ms: f64,
    /// Each rule that forgot something: its label, versions, refusals, bytes, event.
    pub rules: Vec<(String, u64, u64, u64, Option<i64>)>,
    /// The newest version id when it began: the next pass between full ones judges only
    /// lineages with a newer one.
    #[serde(default)]
    pub snapshot: i64,
}

impl PassReport {
    /// What the pass did, in one line (the daemon's log, `gc --policy`): `forgot N
    /// versions, the content of R refusals and B bytes of content in T transactions (the
    /// longest X ms, K over 50 ms); R reads in Y ms (the longest Z ms)`.
    pub fn summary(&self) -> String {
        format!(
            "forgot {} versions, the content of {} refusals and {} bytes of content in {} \
             transactions (the longest {:.1} ms, {} over 50 ms); {} reads in {:.0} ms (the \
             longest {:.1} ms)",
            self.versions,
            self.refusals,
            self.bytes,
            self.batches,
            self.longest_batch_ms,
            self.batches_over_50ms,
            self.reads,
            self.read_ms,
            self.longest_read_ms
        )
    }

    /// Counts one read of the store that took `took`.
    fn read(&mut self, took: Duration) {
        let ms = took.as_secs_f64() * 1e3;
        self.reads += 1;
        self.read_ms += ms;
        self.longest_read_ms = self.longest_read_ms.max(ms);
    }
}

/// One rule's part of a pass in progress.
#[derive(Default)]
struct RuleRun {
    event: Option<i64>,
    totals: (u64, u64, u64),
    versions: Vec<(i64, bool)>,
    refusals: Vec<i64>,
}

impl Fs {
    /// Runs the retention policy of the rules this mount enforces (issue 36): every
    /// version and refused content the limits forget ([`select`]) is forgotten, a batch
    /// per transaction, each batch an update of the run's event (op `policy`) for its
    /// rule, by the daemon itself (writer `scratchfs`). With `pace`, the pass waits after
    /// each batch [`BUSY_PAUSE`] times as long as the batch took while this daemon is
    /// writing (at most a fortieth of the write lock's time), else [`IDLE_PAUSE`] times
    /// (a quarter). A restore waits for a batch (the `gc` guard); content open handles
    /// read is kept. Nothing to do without limits.
    pub fn policy_pass(&self, pace: bool) -> Result<PassReport> {
        self.policy_pass_since(pace, None)
    }

    /// [`Fs::policy_pass`] judging only the lineages with a version after `since` (a
    /// version id; `None`: all, and the refusals), as the daemon's thread does between
    /// its full passes.
    pub fn policy_pass_since(&self, pace: bool, since: Option<i64>) -> Result<PassReport> {
        let mut report = PassReport::default();
        let Some(rules) = self.gate.rules.load() else {
            return Ok(report);
        };
        if !has_limits(&rules) {
            // A quota alone: the usage counted again (another daemon's changes).
            if rules.rules.quota.is_some() {
                self.recount_usage()?;
            }
            return Ok(report);
        }
        let caller = Caller::internal("scratchfs");
        let shown: HashSet<i64> = self
            .restorable_shown()?
            .iter()
            .map(|r| r.version_id)
            .collect();
        let now = crate::store::sql::now_ns();
        let mut runs: HashMap<usize, RuleRun> = HashMap::new();
        let mut batch = FIRST_BATCH;
        let writes_seen =
            std::cell::Cell::new(self.writes.load(std::sync::atomic::Ordering::Relaxed));
        // After a batch or a read that took `took`: while the pad is written (a change
        // since the pause before), a fortieth of the writer's time, else a quarter: the
        // writers come first. Reads are paced as batches are (they share the server's CPU
        // with the writers; a full pass over 1,000,000 versions on PostgreSQL: 421 reads
        // in 2.2 s, against 250 s of batches).
        let pause = |took: Duration| {
            if pace {
                let writes = self.writes.load(std::sync::atomic::Ordering::Relaxed);
                let busy = writes != writes_seen.replace(writes);
                std::thread::sleep(took * if busy { BUSY_PAUSE } else { IDLE_PAUSE });
            }
        };
        let reads = std::cell::RefCell::new(PassReport::default());
        let read = |took: Duration| {
            reads.borrow_mut().read(took);
            pause(took);
        };
        // What is protected: read whole on a full pass; between full ones, what the
        // versions since the last pass name added to what that pass read (a superset of
        // what the live versions name: those committed before were live then).
        let started = Instant::now();
        let protected = {
            let mut last = self.protected.lock();
            let protected = match (since, last.take()) {
                (Some(since), Some(mut p)) if p.snapshot == since => {
                    let new = self.store.policy_protected(Some(since))?;
                    p.inputs.extend(new.inputs);
                    Protected {
                        inputs: p.inputs,
                        ..new
                    }
                }
                _ => self.store.policy_protected(None)?,
            };
            *last = Some(protected.clone());
            protected
        };
        read(started.elapsed());
        let snapshot = protected.snapshot;
        report.snapshot = snapshot;
        let flush = |runs: &mut HashMap<usize, RuleRun>,
                     index: usize,
                     batch: &mut usize,
                     snapshot: i64,
                     report: &mut PassReport|
         -> Result<()> {
            let Some(run) = runs.get_mut(&index) else {
                return Ok(());
            };
            if run.versions.is_empty() && run.refusals.is_empty() {
                return Ok(());
            }
            let label = label(index, &rules.rules.paths[index]);
            let pressure = crate::pressure::Pressure::now();
            let started = Instant::now();
            let forgot = {
                let _restores = self.gc_guard.write();
                let open = self.open_contents();
                self.store.forget(
                    &ForgetBatch {
                        rule: &label,
                        event: run.event,
                        totals: run.totals,
                        snapshot,
                        versions: std::mem::take(&mut run.versions),
                        refusals: std::mem::take(&mut run.refusals),
                        protected: &open,
                    },
                    &caller,
                )?
            };
            let took = started.elapsed();
            run.event = forgot.event.or(run.event);
            run.totals.0 += forgot.versions;
            run.totals.1 += forgot.refusals;
            run.totals.2 += forgot.bytes;
            report.versions += forgot.versions;
            report.refusals += forgot.refusals;
            report.bytes += forgot.bytes;
            report.batches += 1;
            report.longest_batch_ms = report.longest_batch_ms.max(took.as_secs_f64() * 1e3);
            if took > Duration::from_millis(50) {
                report.batches_over_50ms += 1;
                // With what the machine stalled meanwhile (PSI): a batch slow for want of
                // a CPU or of the disk, not for its own work.
                let (cpu, io) = pressure.until(&crate::pressure::Pressure::now());
                let ms =
                    |us: Option<u64>| us.map_or("?".into(), |us| format!("{:.1}", us as f64 / 1e3));
                log::info!(
                    "policy: a transaction of {} versions and {} refusals took {:.1} ms \
                     (meanwhile some task waited {} ms for a CPU and {} ms for I/O)",
                    forgot.versions,
                    forgot.refusals,
                    took.as_secs_f64() * 1e3,
                    ms(cpu),
                    ms(io)
                );
            }
            *batch = next_batch(*batch, took);
            pause(took);
            Ok(())
        };
        select(
            &*self.store,
            &rules,
            &protected,
            &shown,
            now,
            since,
            &mut |took| read(took),
            &mut |chosen| {
                let index = match &chosen {
                    Chosen::Version { rule, .. } | Chosen::Refusal { rule, .. } => *rule,
                };
                let run = runs.entry(index).or_default();
                match chosen {
                    Chosen::Version { row, inputs_go, .. } => {
                        run.versions.push((row.id, inputs_go))
                    }
                    Chosen::Refusal { event, .. } => run.refusals.push(event),
                }
                if run.versions.len() + run.refusals.len() >= batch {
                    flush(&mut runs, index, &mut batch, snapshot, &mut report)?;
                }
                Ok(())
            },
        )?;
        let mut left: Vec<usize> = runs.keys().copied().collect();
        left.sort_unstable();
        for index in left {
            flush(&mut runs, index, &mut batch, snapshot, &mut report)?;
        }
        let mut done: Vec<(usize, &RuleRun)> = runs.iter().map(|(i, r)| (*i, r)).collect();
        done.sort_unstable_by_key(|(i, _)| *i);
        report.rules = done
            .into_iter()
            .filter(|(_, r)| r.event.is_some())
            .map(|(i, r)| {
                (
                    label(i, &rules.rules.paths[i]),
                    r.totals.0,
                    r.totals.1,
                    r.totals.2,
                    r.event,
                )
            })
            .collect();
        // Counted again on a full pass (it reads every extent: 0.15 s at 900,000
        // versions); in between, what this pass forgot is taken off.
        if since.is_none() {
            let started = Instant::now();
            if let Err(e) = self.recount_usage() {
                log::warn!("policy: counting the pad's usage: {e}");
            }
            reads.borrow_mut().read(started.elapsed());
        } else {
            self.usage_forgot(report.bytes, report.versions);
        }
        {
            let r = reads.borrow();
            (report.reads, report.read_ms, report.longest_read_ms) =
                (r.reads, r.read_ms, r.longest_read_ms);
        }
        if report.versions + report.refusals > 0 {
            // The history index's rows of what went went with them.
            *self.history_index.lock() = Default::default();
            self.views.changed(&[]);
            if let Err(e) = self.store.reclaim() {
                log::warn!("policy: giving the space back: {e}");
            }
            log::info!("policy: {}", report.summary());
        } else {
            log::debug!("policy: {}", report.summary());
        }
        Ok(report)
    }

    /// Runs [`Fs::policy_pass`] for `ctx`'s caller (`scratchfs gc --policy`): root or the
    /// user who mounted only (`EPERM`, recorded), as for any gc.
    pub fn policy_pass_for(&self, ctx: super::Ctx) -> Result<PassReport> {
        let caller = self.caller(ctx);
        self.admit(
            &caller,
            &Change::Erase {
                what: "gc",
                path: "",
            },
            || None,
        )?;
        self.policy_pass(false)
    }
}

/// The pad's usage as [`Fs::usage`] keeps it.
#[derive(Debug, Default)]
pub(crate) struct UsageCount {
    /// As last counted from the store, plus what this daemon's changes added since.
    pub(crate) counted: Option<Usage>,
    /// Bytes the commits under way hold against the quota ([`QuotaHold`]).
    pub(crate) held: u64,
    /// While counts from the store run ([`Fs::recount_usage`]): how many, and what this
    /// daemon's changes added and took off meanwhile, applied to what they count (a
    /// change the count saw too is then counted twice until the next count: the safe
    /// way; before, a commit counted while the count ran was lost, and 8 writers passed
    /// a quota by 0.6%, attack round of session 31).
    recounts: usize,
    during: UsageDelta,
}

/// What a change, or the changes while a count ran, added to and took off the usage.
#[derive(Debug, Default, Clone, Copy)]
struct UsageDelta {
    bytes_added: u64,
    bytes_taken: u64,
    versions_added: u64,
    versions_taken: u64,
    forgotten: u64,
    files: i64,
}

impl UsageDelta {
    /// Adds `other` to this one.
    fn add(&mut self, other: &UsageDelta) {
        self.bytes_added = self.bytes_added.saturating_add(other.bytes_added);
        self.bytes_taken = self.bytes_taken.saturating_add(other.bytes_taken);
        self.versions_added = self.versions_added.saturating_add(other.versions_added);
        self.versions_taken = self.versions_taken.saturating_add(other.versions_taken);
        self.forgotten = self.forgotten.saturating_add(other.forgotten);
        self.files = self.files.saturating_add(other.files);
    }

    /// Applies this to `u`.
    fn apply(&self, u: &mut Usage) {
        u.bytes = u
            .bytes
            .saturating_add(self.bytes_added)
            .saturating_sub(self.bytes_taken);
        u.versions = u
            .versions
            .saturating_add(self.versions_added)
            .saturating_sub(self.versions_taken);
        u.forgotten = u.forgotten.saturating_add(self.forgotten);
        u.files = u.files.saturating_add_signed(self.files);
    }
}

/// Bytes a commit holds against the pad's quota from its verdict until it is dropped
/// ([`Fs::quota_allows_bytes`]); by then the commit has counted what it stored.
pub(crate) struct QuotaHold<'a> {
    fs: &'a Fs,
    bytes: u64,
}

impl<'a> QuotaHold<'a> {
    /// A hold of `bytes` the caller has added to [`UsageCount::held`] already, under the
    /// usage's lock.
    pub(super) fn taken(fs: &'a Fs, bytes: u64) -> QuotaHold<'a> {
        QuotaHold { fs, bytes }
    }
}

impl Drop for QuotaHold<'_> {
    fn drop(&mut self) {
        if self.bytes > 0 {
            let mut count = self.fs.usage.lock();
            count.held = count.held.saturating_sub(self.bytes);
        }
    }
}

impl Fs {
    /// The pad's quota, if the rules set one.
    pub fn quota(&self) -> Option<crate::rules::Quota> {
        self.gate.rules.load().and_then(|r| r.rules.quota.clone())
    }

    /// What the pad holds (issue 36), when the rules set a quota or a limit (`None`
    /// otherwise: MANIFEST and `list` then say nothing of it): counted once from the
    /// store, then kept up to date by this daemon's commits, creates and deletions and
    /// counted again after every policy pass (another daemon's changes on PostgreSQL
    /// show at the next count).
    pub fn usage(&self) -> Result<Option<Usage>> {
        let Some(rules) = self.gate.rules.load() else {
            return Ok(None);
        };
        if rules.rules.quota.is_none() && !has_limits(&rules) {
            return Ok(None);
        }
        // The `processes` rows the store inserted since (a process's first change or
        // read), counted here rather than by every change that may insert one.
        let processes = self.store.take_process_bytes();
        if processes > 0 {
            self.usage_changed(UsageDelta {
                bytes_added: processes,
                ..Default::default()
            });
        }
        if let Some(u) = self.usage.lock().counted {
            return Ok(Some(u));
        }
        self.recount_usage().map(Some)
    }

    /// Counts the pad's usage from the store again, adding what this daemon's changes
    /// counted while the count ran ([`UsageCount`]).
    pub(crate) fn recount_usage(&self) -> Result<Usage> {
        {
            let mut count = self.usage.lock();
            if count.recounts == 0 {
                count.during = UsageDelta::default();
            }
            count.recounts += 1;
        }
        // The rows inserted before the count are in it (those inserted while it runs may
        // be counted twice until the next count: the safe way).
        self.store.take_process_bytes();
        let counted = self.store.usage();
        let mut count = self.usage.lock();
        count.recounts -= 1;
        let mut u = counted?;
        count.during.apply(&mut u);
        count.counted = Some(u);
        Ok(u)
    }

    /// Takes what a pass forgot off the usage counted (when counted): `bytes` of content
    /// and `versions` (their records too).
    fn usage_forgot(&self, bytes: u64, versions: u64) {
        self.usage_changed(UsageDelta {
            bytes_taken: bytes.saturating_add(versions * VERSION_RECORD_BYTES),
            versions_taken: versions,
            forgotten: versions,
            ..Default::default()
        });
    }

    /// Adds what a change stored to the usage counted (when counted): `bytes` of content,
    /// `versions` (their records, [`VERSION_RECORD_BYTES`]), `records` (namespace changes
    /// and refusals, [`EVENT_RECORD_BYTES`]), `files` (live files and directories, or
    /// fewer).
    pub(super) fn usage_added(&self, bytes: u64, versions: u64, records: u64, files: i64) {
        self.usage_changed(UsageDelta {
            bytes_added: bytes
                .saturating_add(versions * VERSION_RECORD_BYTES)
                .saturating_add(records * EVENT_RECORD_BYTES),
            versions_added: versions,
            files,
            ..Default::default()
        });
    }

    /// Applies `d` to the usage counted (when counted), and to what the counts under way
    /// will add to theirs.
    fn usage_changed(&self, d: UsageDelta) {
        let mut count = self.usage.lock();
        if count.recounts > 0 {
            count.during.add(&d);
        }
        if let Some(u) = count.counted.as_mut() {
            d.apply(u);
        }
    }

    /// The quota's verdict on a commit that may store up to `adds` more bytes (the new
    /// content, or an append's new bytes) and one version's record
    /// ([`VERSION_RECORD_BYTES`]), for a caller other than root and the user who mounted
    /// (they may go past it): `EDQUOT` when it would take the pad past `quota.bytes`,
    /// recorded with the reason and the content's size and digest (`digest`: bytes,
    /// blake3 hex; in the record's columns, not its reason, which the caller reads:
    /// [`crate::store::Refused`]), never the content itself: keeping it is what the quota
    /// forbids. Allowed, the commit holds what it may add against the quota until the
    /// returned [`QuotaHold`] is dropped (after the commit counted what it stored, or
    /// failed), so that commits judged at once cannot each fit alone and pass it together.
    pub(super) fn quota_allows_bytes(
        &self,
        caller: &Caller,
        path: &str,
        adds: u64,
        digest: impl FnOnce() -> Option<(u64, String)>,
    ) -> Result<QuotaHold<'_>> {
        let record = VERSION_RECORD_BYTES + path.len() as u64;
        self.quota_allows(caller, path, adds.saturating_add(record), || {
            (
                format!("this commit of up to {adds} bytes and its record would pass it; its content is not kept"),
                digest(),
            )
        })
    }

    /// The quota's verdict on a rename from a path of `old_len` bytes to `path`, as
    /// [`Fs::quota_allows_bytes`]'s: its event's record ([`EVENT_RECORD_BYTES`] and both
    /// paths) and, for a file's rename, which makes a version, the version's
    /// ([`VERSION_RECORD_BYTES`] and its path); no content.
    pub(super) fn quota_allows_rename(
        &self,
        caller: &Caller,
        path: &str,
        old_len: usize,
        file: bool,
    ) -> Result<QuotaHold<'_>> {
        let paths = (old_len + path.len()) as u64;
        let adds = EVENT_RECORD_BYTES
            + paths
            + if file {
                VERSION_RECORD_BYTES + path.len() as u64
            } else {
                0
            };
        self.quota_allows(caller, path, adds, || {
            let what = if file {
                format!("this rename's version and event ({adds} bytes of records) would pass it")
            } else {
                format!("this rename's event ({adds} bytes of record) would pass it")
            };
            (what, None)
        })
    }

    /// The quota's verdict on a change that stores a record ([`EVENT_RECORD_BYTES`]) and
    /// `text` more bytes (a checkpoint's note), as [`Fs::quota_allows_bytes`]'s; `what`
    /// names the change in the refusal's reason.
    pub(super) fn quota_allows_record(
        &self,
        caller: &Caller,
        path: &str,
        what: &str,
        text: u64,
    ) -> Result<QuotaHold<'_>> {
        let adds = EVENT_RECORD_BYTES + text + path.len() as u64;
        self.quota_allows(caller, path, adds, || {
            (
                format!("this {what}'s record ({adds} bytes) would pass it"),
                None,
            )
        })
    }

    /// The quota's verdict on a change that stores only its event (a create, a `mkdir`,
    /// a change of mode, owner or times: [`EVENT_RECORD_BYTES`]), as
    /// [`Fs::quota_allows_bytes`]'s; `what` names the change in the refusal's reason.
    pub(super) fn quota_allows_event(
        &self,
        caller: &Caller,
        path: &str,
        what: &str,
    ) -> Result<QuotaHold<'_>> {
        let adds = EVENT_RECORD_BYTES + path.len() as u64;
        self.quota_allows(caller, path, adds, || {
            (
                format!("this {what}'s record ({adds} bytes) would pass it"),
                None,
            )
        })
    }

    /// The quota's verdict on a change that may add `adds` bytes (`what` says which, for
    /// the refusal's reason, and the refused content's size and digest, for its record):
    /// see [`Fs::quota_allows_bytes`].
    fn quota_allows(
        &self,
        caller: &Caller,
        path: &str,
        adds: u64,
        what: impl FnOnce() -> (String, Option<(u64, String)>),
    ) -> Result<QuotaHold<'_>> {
        let free = QuotaHold { fs: self, bytes: 0 };
        let Some(limit) = self.quota().and_then(|q| q.bytes) else {
            return Ok(free);
        };
        if self.gate.is_trusted(caller) {
            return Ok(free);
        }
        if self.usage()?.is_none() {
            return Ok(free);
        }
        // A new process's row, which the change would insert
        // ([`crate::store::Store::process_record_cost`]).
        let adds = adds.saturating_add(self.store.process_record_cost(caller));
        let (holds, held) = {
            let mut count = self.usage.lock();
            let holds = count.counted.map_or(0, |u| u.bytes);
            let held = count.held;
            if holds.saturating_add(held).saturating_add(adds) <= limit {
                count.held += adds;
                return Ok(QuotaHold {
                    fs: self,
                    bytes: adds,
                });
            }
            (holds, held)
        };
        let under_way = if held > 0 {
            format!(" (and commits under way {held} more)")
        } else {
            String::new()
        };
        let (what, digest) = what();
        let e = Error::new(
            libc::EDQUOT,
            format!(
                "{path}: the pad's quota is {limit} bytes and it holds {holds}{under_way}: {what} (delete files or write less; the policy, keep, forgets history)"
            ),
        );
        self.record_refusal_with(path, caller, &e, None, digest);
        Err(e)
    }

    /// Whether a change the quota cannot refuse (a read, a deletion) may add `caller`'s
    /// process row to the store: a process the store has no row for yet adds one
    /// ([`crate::store::Store::process_record_cost`]), and reads alone would otherwise
    /// grow a pad at its quota a row a process (64 readers a minute with long arguments
    /// added 1.5 MB a minute, attack round of session 31), deletions of files made before
    /// too (2.7 MB at a 60,000-byte quota, attack round of session 34). `None`: it does not
    /// fit (a read is then not written to the store; a deletion is recorded by a smaller
    /// row, [`Fs::recorded_caller`]). Else a hold on what the row adds, to drop once it is
    /// stored.
    pub(super) fn process_row_fits(&self, caller: &Caller) -> Option<QuotaHold<'_>> {
        let free = QuotaHold { fs: self, bytes: 0 };
        let Some(limit) = self.quota().and_then(|q| q.bytes) else {
            return Some(free);
        };
        if self.gate.is_trusted(caller) || !matches!(self.usage(), Ok(Some(_))) {
            return Some(free);
        }
        let adds = self.store.process_record_cost(caller);
        if adds == 0 {
            return Some(free);
        }
        let mut count = self.usage.lock();
        let holds = count.counted.map_or(0, |u| u.bytes);
        if holds.saturating_add(count.held).saturating_add(adds) > limit {
            return None;
        }
        count.held += adds;
        Some(QuotaHold {
            fs: self,
            bytes: adds,
        })
    }

    /// The quota's verdict on creating one more file or directory: `EDQUOT` (recorded)
    /// when the pad holds `quota.files` live files and directories already (not for root
    /// and the user who mounted).
    pub(super) fn quota_allows_file(&self, caller: &Caller, path: &str) -> Result<()> {
        let Some(limit) = self.quota().and_then(|q| q.files) else {
            return Ok(());
        };
        if self.gate.is_trusted(caller) {
            return Ok(());
        }
        let Some(usage) = self.usage()? else {
            return Ok(());
        };
        if usage.files < limit {
            return Ok(());
        }
        let e = Error::new(
            libc::EDQUOT,
            format!(
                "{path}: the pad's quota is {limit} files and directories and it holds {}: delete one first",
                usage.files
            ),
        );
        self.record_refusal(path, caller, &e, None);
        Err(e)
    }
}

/// Starts the daemon's policy thread for `fs` when its rules have limits: a pass every
/// `SCRATCHFS_POLICY_INTERVAL` seconds (default [`DEFAULT_INTERVAL`]), paced
/// ([`Fs::policy_pass`]). It ends when the filesystem is dropped.
pub fn spawn(fs: &Arc<Fs>) {
    let has = fs
        .gate
        .rules
        .load()
        .is_some_and(|r| has_limits(&r) || r.rules.quota.is_some());
    if !has {
        return;
    }
    let interval = std::env::var("SCRATCHFS_POLICY_INTERVAL")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0)
        .map_or(DEFAULT_INTERVAL, Duration::from_secs_f64);
    let full_every = std::env::var("SCRATCHFS_POLICY_FULL_EVERY")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .filter(|&n| n > 0)
        .unwrap_or(FULL_EVERY);
    let weak: Weak<Fs> = Arc::downgrade(fs);
    let spawned = std::thread::Builder::new()
        .name("scratchfs-policy".into())
        .spawn(move || {
            // Background work: the lowest CPU priority for this thread (setpriority(2)
            // on a thread id: Linux's nice is per thread), so a pass takes only what the
            // agent's requests leave of the cores.
            // SAFETY: plain system calls on this thread's own id.
            let set =
                unsafe { libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, 19) };
            if set != 0 {
                log::warn!(
                    "policy thread: nice 19: {}",
                    std::io::Error::last_os_error()
                );
            }
            // A full pass every `full_every` ticks (what only time or a released protection
            // lets go: `days`, a dropped checkpoint, a superseded read), else only the
            // lineages written since the last pass.
            let mut since: Option<i64> = None;
            for tick in 0u64.. {
                std::thread::sleep(interval);
                let Some(fs) = weak.upgrade() else { return };
                let only = since.filter(|_| tick % full_every != 0);
                match fs.policy_pass_since(true, only) {
                    Ok(r) => since = Some(r.snapshot),
                    Err(e) => log::warn!("policy pass: {e}"),
                }
                fs.record_unrecorded_if_due();
            }
        });
    if let Err(e) = spawned {
        log::error!("policy thread: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::Days;

    /// A batch that took under the target grows toward it, even when its fixed cost
    /// keeps it above a quarter of the target (the rule before left it at 16 for good);
    /// one over it shrinks; at most 2x either way, within 16..=4096.
    #[test]
    fn the_next_batch_is_scaled_toward_the_target_time() {
        let ms = Duration::from_millis;
        assert_eq!(next_batch(16, ms(16)), 20);
        assert_eq!(next_batch(100, ms(10)), 200);
        assert_eq!(next_batch(100, ms(1)), 200);
        assert_eq!(next_batch(100, ms(40)), 50);
        assert_eq!(next_batch(100, ms(400)), 50);
        assert_eq!(next_batch(16, ms(400)), 16);
        assert_eq!(next_batch(4_096, ms(1)), 4_096);
        assert_eq!(next_batch(100, Duration::ZERO), 200);
    }

    fn rows(times: &[(i64, u64)]) -> Vec<PolicyRow> {
        times
            .iter()
            .enumerate()
            .map(|(i, &(t, size))| PolicyRow {
                id: 10 * (i as i64 + 1),
                file_id: 1,
                version: i as i64 + 1,
                size,
                time_ns: t,
            })
            .collect()
    }

    fn file(live: bool, ended_ns: Option<i64>) -> PolicyFile {
        PolicyFile {
            file_id: 1,
            path: "a".into(),
            live,
            ended_ns,
        }
    }

    const DAY: i64 = 86_400_000_000_000;

    #[test]
    fn each_limit_cuts_the_oldest_and_protected_versions_stay() {
        let now = 100 * DAY;
        // Ten versions, a day apart, the newest today; 100 bytes each.
        let v = rows(
            &(0..10)
                .map(|i| (now - (9 - i) * DAY, 100))
                .collect::<Vec<_>>(),
        );
        let none = HashSet::new();
        let p = Protected::default();
        let ids =
            |out: Vec<(usize, Limit)>| out.iter().map(|(i, _)| v[*i].version).collect::<Vec<_>>();
        let keep = Keep {
            versions: Some(3),
            ..Default::default()
        };
        assert_eq!(
            ids(choose(&file(true, None), &v, &keep, &p, &none, now)),
            [1, 2, 3, 4, 5, 6, 7]
        );
        let keep = Keep {
            days: Some(Days(4.5)),
            ..Default::default()
        };
        assert_eq!(
            ids(choose(&file(true, None), &v, &keep, &p, &none, now)),
            [1, 2, 3, 4, 5]
        );
        // 250 bytes beyond the live version: two older versions.
        let keep = Keep {
            bytes: Some(250),
            ..Default::default()
        };
        assert_eq!(
            ids(choose(&file(true, None), &v, &keep, &p, &none, now)),
            [1, 2, 3, 4, 5, 6, 7]
        );
        let keep = Keep {
            bytes: Some(0),
            ..Default::default()
        };
        assert_eq!(
            choose(&file(true, None), &v, &keep, &p, &none, now).len(),
            9
        );
        // Every limit at once: the tightest wins.
        let keep = Keep {
            versions: Some(5),
            days: Some(Days(2.5)),
            bytes: Some(1000),
            ..Default::default()
        };
        assert_eq!(
            ids(choose(&file(true, None), &v, &keep, &p, &none, now)),
            [1, 2, 3, 4, 5, 6, 7]
        );
        // Protected: a checkpoint holding v2 (seq between v2's id 20 and v3's 30), a
        // field naming v4, an input of a live version v5, MANIFEST showing v6.
        let p = Protected {
            checkpoints: vec![25],
            fields: [40].into(),
            inputs: [50].into(),
            ..Default::default()
        };
        let shown: HashSet<i64> = [60].into();
        let keep = Keep {
            versions: Some(1),
            ..Default::default()
        };
        assert_eq!(
            ids(choose(&file(true, None), &v, &keep, &p, &shown, now)),
            [1, 3, 7, 8, 9]
        );
        let keep = Keep {
            versions: Some(1),
            including: vec![Including::Inputs],
            ..Default::default()
        };
        assert_eq!(
            ids(choose(&file(true, None), &v, &keep, &p, &shown, now)),
            [1, 3, 5, 7, 8, 9]
        );
        // Protected versions are not counted against bytes.
        let keep = Keep {
            bytes: Some(100),
            ..Default::default()
        };
        assert_eq!(
            ids(choose(&file(true, None), &v, &keep, &p, &shown, now)),
            [1, 3, 7, 8]
        );
    }

    #[test]
    fn a_deleted_files_last_version_goes_only_by_days_from_its_deletion() {
        let now = 100 * DAY;
        let v = rows(&[(now - 10 * DAY, 5), (now - 9 * DAY, 5)]);
        let none = HashSet::new();
        let p = Protected::default();
        let keep = Keep {
            versions: Some(1),
            ..Default::default()
        };
        assert_eq!(
            choose(&file(false, Some(now - 8 * DAY)), &v, &keep, &p, &none, now),
            [(0, Limit::Versions)]
        );
        let keep = Keep {
            days: Some(Days(7.0)),
            ..Default::default()
        };
        assert_eq!(
            choose(&file(false, Some(now - 8 * DAY)), &v, &keep, &p, &none, now),
            [(0, Limit::Days), (1, Limit::Days)]
        );
        // Deleted yesterday: its last version stays, the older one is past 7 days.
        assert_eq!(
            choose(&file(false, Some(now - DAY)), &v, &keep, &p, &none, now),
            [(0, Limit::Days)]
        );
        // The live version never goes, however old.
        assert_eq!(
            choose(&file(true, None), &v, &keep, &p, &none, now),
            [(0, Limit::Days)]
        );
    }
}
