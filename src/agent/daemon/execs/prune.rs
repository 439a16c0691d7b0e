//! Bounds how many ended execs the daemon keeps. Past the limit the ones that ended first go,
//! record and directory, so the state directory, the records loaded at start and `exec.list`
//! stay bounded however many execs a workspace runs. A running exec is never pruned; a pruned
//! one answers `not_found`.

use super::entry::{Entries, Entry};
use super::meta::is_final;

/// How many ended execs a daemon keeps unless `--max-ended-execs` says otherwise.
pub const DEFAULT_MAX_ENDED_EXECS: usize = 1000;

/// Prunes the registry's ended execs down to `max_ended`; cheap to clone into a task.
#[derive(Clone)]
pub(super) struct Pruner {
    pub(super) entries: Entries,
    pub(super) max_ended: usize,
}

impl Pruner {
    /// Removes the ended execs past the limit, those that ended first (then those created first)
    /// first, and deletes their directories; returns how many went. Blocks on the file system.
    pub(super) fn prune(&self) -> usize {
        let gone: Vec<Entry> = {
            let mut entries = self.entries.lock();
            let mut ended: Vec<(String, u64, String)> = entries
                .iter()
                .filter_map(|(id, entry)| {
                    let meta = entry.record.meta.lock();
                    is_final(&meta.state).then(|| {
                        let ended_at = meta.ended_at.clone().unwrap_or_default();
                        (ended_at, meta.created_ms, id.clone())
                    })
                })
                .collect();
            let Some(excess) = ended.len().checked_sub(self.max_ended).filter(|&n| n > 0) else {
                return 0;
            };
            // Timestamps have one fixed-width form, so their text sorts as their time does.
            ended.sort_unstable();
            ended
                .into_iter()
                .take(excess)
                .filter_map(|(_, _, id)| entries.remove(&id))
                .collect()
        };
        for entry in &gone {
            let record = &entry.record;
            if let Err(e) = std::fs::remove_dir_all(&record.dir) {
                tracing::warn!(exec_id = %record.id, error = %e, "cannot remove a pruned exec's directory");
            }
        }
        if !gone.is_empty() {
            tracing::info!(
                pruned = gone.len(),
                kept = self.max_ended,
                "pruned ended execs"
            );
        }
        gone.len()
    }
}
