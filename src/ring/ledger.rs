//! The eviction ledger: cumulative output bytes of evicted events (`Event::data_len`, what the
//! command wrote), so a reader that fell behind learns exactly how many bytes of output it lost.
//! Bounded; past the bound the count is a lower bound.

use std::collections::VecDeque;

/// How many evicted events the ledger remembers (8 bytes each, allocated only as events are
/// evicted). A reader whose cursor is further behind than this still gets the exact number of
/// dropped events, but `dropped_bytes` then counts only the bytes of the evicted events the
/// ledger remembers: a lower bound.
pub const LEDGER_LIMIT: usize = 65_536;

#[derive(Debug)]
pub struct Ledger {
    limit: usize,
    /// Seq of the event whose cumulative size is `cumulative[0]`.
    first_seq: u64,
    /// Encoded bytes of events `1..=first_seq - 1`: what the ledger has forgotten.
    forgotten: u64,
    /// `cumulative[i]` = encoded bytes of events `1..=first_seq + i`, all of them evicted.
    cumulative: VecDeque<u64>,
}

impl Default for Ledger {
    fn default() -> Self {
        Self::with_limit(LEDGER_LIMIT)
    }
}

impl Ledger {
    pub fn with_limit(limit: usize) -> Self {
        Self {
            limit: limit.max(1),
            first_seq: 1,
            forgotten: 0,
            cumulative: VecDeque::new(),
        }
    }

    /// Encoded bytes of every event evicted so far.
    pub fn evicted_bytes(&self) -> u64 {
        self.cumulative.back().copied().unwrap_or(self.forgotten)
    }

    /// Records the eviction of the next event (events are evicted in seq order).
    pub fn record(&mut self, encoded_len: usize) {
        let total = self.evicted_bytes() + encoded_len as u64;
        if self.cumulative.len() == self.limit {
            if let Some(oldest) = self.cumulative.pop_front() {
                self.forgotten = oldest;
                self.first_seq += 1;
            }
        }
        self.cumulative.push_back(total);
    }

    /// Encoded bytes of the evicted events after `cursor`: exact when `cursor` is 0 or within
    /// the ledger's memory, otherwise a lower bound (see [`LEDGER_LIMIT`]).
    pub fn dropped_after(&self, cursor: u64) -> u64 {
        let seen = if cursor == 0 || cursor < self.first_seq {
            // Before the ledger's memory, the bytes up to the cursor are unknown; counting them
            // as forgotten gives the exact answer at the boundary and a lower bound before it.
            if cursor == 0 {
                0
            } else {
                self.forgotten
            }
        } else {
            let index = usize::try_from(cursor - self.first_seq).unwrap_or(usize::MAX);
            self.cumulative
                .get(index)
                .copied()
                .unwrap_or_else(|| self.evicted_bytes())
        };
        self.evicted_bytes().saturating_sub(seen)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Evicts events of sizes 1, 2, 3, … and returns the ledger.
    fn evicted(count: u64, limit: usize) -> Ledger {
        let mut ledger = Ledger::with_limit(limit);
        for size in 1..=count {
            ledger.record(size as usize);
        }
        ledger
    }

    fn sum(from: u64, to: u64) -> u64 {
        (from..=to).sum()
    }

    #[test]
    fn drops_are_exact_within_the_limit() {
        let ledger = evicted(100, 1000);
        assert_eq!(ledger.evicted_bytes(), sum(1, 100));
        for cursor in 0..=100 {
            assert_eq!(
                ledger.dropped_after(cursor),
                sum(cursor + 1, 100),
                "cursor {cursor}"
            );
        }
    }

    #[test]
    fn past_the_limit_drops_are_a_lower_bound_and_exact_at_the_edge() {
        let ledger = evicted(100, 10);
        // The ledger remembers events 91..=100; cursor 90 sits on its edge.
        for cursor in 90..=100 {
            assert_eq!(ledger.dropped_after(cursor), sum(cursor + 1, 100));
        }
        assert_eq!(ledger.dropped_after(0), sum(1, 100));
        for cursor in 1..90 {
            let reported = ledger.dropped_after(cursor);
            assert!(reported <= sum(cursor + 1, 100));
            assert_eq!(reported, sum(91, 100));
        }
    }

    #[test]
    fn an_empty_ledger_reports_nothing_dropped() {
        assert_eq!(Ledger::default().dropped_after(0), 0);
        assert_eq!(Ledger::default().evicted_bytes(), 0);
    }
}
