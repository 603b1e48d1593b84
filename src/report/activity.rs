//! The run over time for the review page's plots and `scratchfs log --activity`
//! (issue 35): a replay of the store's changes into spans.

use super::{Failure, json_paths};
use crate::store::History;

/// Widths a span of [`activity`] may have, ns: the smallest that makes at most the spans
/// asked for (a round number, so that "versions per minute" reads plainly).
const SPAN_WIDTHS_NS: &[i64] = &[
    1_000_000,
    10_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    1_000_000_000,
    2_000_000_000,
    5_000_000_000,
    10_000_000_000,
    15_000_000_000,
    30_000_000_000,
    60_000_000_000,
    120_000_000_000,
    300_000_000_000,
    600_000_000_000,
    900_000_000_000,
    1_800_000_000_000,
    3_600_000_000_000,
    7_200_000_000_000,
    21_600_000_000_000,
    43_200_000_000_000,
    86_400_000_000_000,
    604_800_000_000_000,
];

/// Most spans [`activity`] makes (500).
pub const SPANS_MAX: usize = 500;

/// How many of the busiest files [`activity`] gives a row of versions per span (20).
pub const BUSIEST_FILES: usize = 20;

/// How many of the busiest writers [`activity`] gives a row of versions per span (7); the
/// rest share one (`other_writers`), so that neither its memory nor its answer grows with
/// the number of writers (an agent may name a writer per commit: attack round, session
/// 28: 100,000 writers cost 54 s and 622 MB before).
pub const BUSIEST_WRITERS: usize = 7;

/// The run over time, replayed from the store ([`History::each_change`]), for the review
/// page's plots and `scratchfs log --activity --json`:
///
/// ```text
/// {"from_ns": NS, "span_ns": NS, "spans": N,            (at most `spans`, <= SPANS_MAX)
///  "writers": [{"writer": W, "versions": TOTAL, "per_span": [COUNT; N]}],  most first,
///      at most BUSIEST_WRITERS
///  "other_writers": {"writers": K, "versions": TOTAL, "per_span": [COUNT; N]} or null,
///  "bytes": {"live": [B; N], "history": [B; N], "archive": [B; N]},   at each span's end
///  "files": [{"path": P, "versions": TOTAL, "per_span": [COUNT; N]}]}  BUSIEST_FILES
/// ```
///
/// Bytes are content lengths as files have them (before chunks are shared): `live` the
/// current versions of live files, `archive` the last versions of unlinked files (what
/// `.archive/` shows), `history` every other version kept. Spans are equal, of a round
/// width ([`SPAN_WIDTHS_NS`]), from the first change's span. Memory: one entry per
/// lineage (its size now), whatever the number of versions.
pub fn activity(store: &dyn History, spans: usize) -> Result<serde_json::Value, Failure> {
    let spans = spans.clamp(1, SPANS_MAX);
    let e = |e: crate::store::StoreError| e.to_string();
    let Some((first, last)) = store.time_span().map_err(e)? else {
        return Ok(serde_json::json!({
            "from_ns": null, "span_ns": null, "spans": 0, "writers": [], "other_writers": null,
            "bytes": {"live": [], "history": [], "archive": []}, "files": [],
        }));
    };
    let range = last - first + 1;
    let width = SPAN_WIDTHS_NS
        .iter()
        .copied()
        .find(|w| (range + w - 1) / w <= spans as i64)
        .unwrap_or_else(|| (range + spans as i64 - 1) / spans as i64);
    let from = first - first.rem_euclid(width);
    let n = ((last - from) / width + 1) as usize;
    let span_of = |t: i64| (((t - from) / width).clamp(0, n as i64 - 1)) as usize;
    let busiest = store.busiest_files(BUSIEST_FILES).map_err(e)?;
    let mut file_rows: std::collections::HashMap<i64, Vec<u64>> =
        busiest.iter().map(|(id, _, _)| (*id, vec![0; n])).collect();
    let (top, all_writers) = store.busiest_writers(BUSIEST_WRITERS).map_err(e)?;
    let mut writers: Vec<(String, u64, Vec<u64>)> =
        top.into_iter().map(|(w, _)| (w, 0, vec![0; n])).collect();
    let mut others: (u64, Vec<u64>) = (0, vec![0; n]);
    // Per lineage: (size of its newest version, whether it is live).
    let mut state: std::collections::HashMap<i64, (i64, bool)> = Default::default();
    let (mut live, mut archive, mut total) = (0i64, 0i64, 0i64);
    let mut bytes = [vec![0i64; n], vec![0i64; n], vec![0i64; n]];
    let mut at = 0usize;
    let mut close = |upto: usize, live: i64, archive: i64, total: i64, at: &mut usize| {
        while *at < upto {
            bytes[0][*at] = live;
            bytes[1][*at] = total - live - archive;
            bytes[2][*at] = archive;
            *at += 1;
        }
    };
    store
        .each_change(&mut |c| {
            use crate::store::Change;
            let t = match c {
                Change::Version { time_ns, .. }
                | Change::Unlink { time_ns, .. }
                | Change::Merged { time_ns, .. } => time_ns,
            };
            close(span_of(t), live, archive, total, &mut at);
            match c {
                Change::Version {
                    file,
                    size,
                    writer,
                    time_ns,
                } => {
                    total += size;
                    match state.insert(file, (size, true)) {
                        Some((old, true)) => live += size - old,
                        Some((old, false)) => {
                            archive -= old;
                            live += size;
                        }
                        None => live += size,
                    }
                    let s = span_of(time_ns);
                    if let Some(row) = file_rows.get_mut(&file) {
                        row[s] += 1;
                    }
                    let (count, per) = match writers.iter_mut().find(|w| w.0 == writer) {
                        Some(w) => (&mut w.1, &mut w.2),
                        None => (&mut others.0, &mut others.1),
                    };
                    *count += 1;
                    per[s] += 1;
                }
                Change::Unlink { file, .. } => {
                    if let Some((size, alive @ true)) = state.get_mut(&file) {
                        *alive = false;
                        live -= *size;
                        archive += *size;
                    }
                }
                Change::Merged { file, .. } => {
                    // Its content lives on as the other lineage's version: neither live
                    // nor archived under this lineage.
                    if let Some((size, alive)) = state.remove(&file) {
                        if alive {
                            live -= size;
                        } else {
                            archive -= size;
                        }
                    }
                }
            }
            Ok(())
        })
        .map_err(e)?;
    close(n, live, archive, total, &mut at);
    writers.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let files: Vec<serde_json::Value> = busiest
        .iter()
        .map(|(id, path, count)| {
            let mut o = serde_json::json!({
                "path": path, "versions": count, "per_span": file_rows.get(id),
            });
            json_paths(&mut o, &["path"]);
            o
        })
        .collect();
    let [live, history, archive] = bytes;
    Ok(serde_json::json!({
        "from_ns": from,
        "span_ns": width,
        "spans": n,
        "writers": writers.iter().map(|(w, total, per)| serde_json::json!({
            "writer": w, "versions": total, "per_span": per,
        })).collect::<Vec<_>>(),
        "other_writers": (others.0 > 0).then(|| serde_json::json!({
            "writers": all_writers - writers.len() as i64,
            "versions": others.0,
            "per_span": others.1,
        })),
        "bytes": {"live": live, "history": history, "archive": archive},
        "files": files,
    }))
}
