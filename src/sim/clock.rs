//! Virtual time: a clock in integer milliseconds and the queue of inputs due at given times.
//!
//! Items due at the same millisecond are ordered by a key drawn from the seed, so the order of
//! concurrent completions (two parallel tools with equal latency, a tool result and a timer) is
//! the seed's choice and replays exactly. Pieces of one streamed reply share a key and keep their
//! order through a sequence number.

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap};

use crate::model::ids::CallId;
use crate::protocol::Input;

/// One scheduled input.
#[derive(Clone, Debug)]
pub(crate) struct Scheduled {
    /// Due time in ms.
    pub at: u64,
    /// Tie-break drawn from the seed.
    pub order: u64,
    /// Insertion sequence, the last tie-break.
    pub seq: u64,
    /// What to feed.
    pub input: Input,
}

impl PartialEq for Scheduled {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.order, self.seq) == (other.at, other.order, other.seq)
    }
}
impl Eq for Scheduled {}
impl PartialOrd for Scheduled {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Scheduled {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.at, self.order, self.seq).cmp(&(other.at, other.order, other.seq))
    }
}

/// The virtual clock and its queue.
#[derive(Clone, Debug, Default)]
pub(crate) struct Clock {
    now: u64,
    seq: u64,
    /// The only item, when exactly one is scheduled (then `queue` is empty): a sequential run
    /// (one model call or one tool at a time) never touches the heap.
    only: Option<Scheduled>,
    queue: BinaryHeap<Reverse<Scheduled>>,
    cancelled: BTreeSet<CallId>,
}

impl Clock {
    /// Current virtual time in ms.
    pub fn now(&self) -> u64 {
        self.now
    }

    /// Schedules `input` at `now + after_ms`.
    pub(crate) fn schedule(&mut self, after_ms: u64, order: u64, input: Input) {
        self.seq += 1;
        let item = Scheduled {
            at: self.now.saturating_add(after_ms),
            order,
            seq: self.seq,
            input,
        };
        if self.only.is_none() && self.queue.is_empty() {
            self.only = Some(item);
            return;
        }
        if let Some(only) = self.only.take() {
            self.spill(only);
        }
        self.queue.push(Reverse(item));
    }

    /// A second item is scheduled: the only one moves into the heap. Most likely a parallel
    /// batch starts, so the heap first gets room for a wide one, rather than growing (and
    /// copying its items) through 4 and 8.
    #[cold]
    fn spill(&mut self, only: Scheduled) {
        if self.queue.capacity() == 0 {
            self.queue.reserve(16);
        }
        self.queue.push(Reverse(only));
    }

    fn peek(&self) -> Option<&Scheduled> {
        match &self.only {
            Some(only) => Some(only),
            None => self.queue.peek().map(|Reverse(s)| s),
        }
    }

    #[inline]
    fn pop(&mut self) -> Option<Scheduled> {
        match self.only.take() {
            Some(only) => Some(only),
            None => self.queue.pop().map(|Reverse(s)| s),
        }
    }

    /// Whether a live item is scheduled.
    pub(crate) fn has_pending(&mut self) -> bool {
        self.skip_cancelled();
        self.peek().is_some()
    }

    /// Drops every timer: a restarted runtime's process lost them, and the restored runtime sets
    /// the ones it still needs again. Each live timer dropped, with its tie-break (so that one set
    /// again under the same id keeps its place among items due at the same time).
    pub(crate) fn drop_timers(&mut self) -> Vec<(CallId, u64)> {
        let mut dropped = Vec::new();
        let mut keep = |s: &Scheduled| match s.input {
            Input::Timer { timer } => {
                if !self.cancelled.contains(&timer) {
                    dropped.push((timer, s.order));
                }
                false
            }
            _ => true,
        };
        if let Some(only) = &self.only {
            if !keep(only) {
                self.only = None;
            }
        }
        self.queue.retain(|Reverse(s)| keep(s));
        self.cancelled.clear();
        dropped
    }

    /// Forgets a timer: when it comes due it is dropped without a step.
    pub(crate) fn cancel_timer(&mut self, timer: CallId) {
        self.cancelled.insert(timer);
    }

    /// Drops the cancelled timers at the front (the test inlined: most steps have none).
    #[inline]
    fn skip_cancelled(&mut self) {
        if !self.cancelled.is_empty() {
            self.drop_cancelled();
        }
    }

    #[inline(never)]
    fn drop_cancelled(&mut self) {
        while let Some(s) = self.peek() {
            match s.input {
                Input::Timer { timer } if self.cancelled.contains(&timer) => {
                    self.cancelled.remove(&timer);
                    self.pop();
                }
                _ => break,
            }
        }
    }

    /// Pops the next live item due at or before `limit`, moving the clock to its time.
    #[inline]
    pub(crate) fn pop_due(&mut self, limit: u64) -> Option<Scheduled> {
        self.skip_cancelled();
        if self.peek()?.at > limit {
            return None;
        }
        let item = self.pop()?;
        self.now = self.now.max(item.at);
        Some(item)
    }

    /// Moves the clock forward to `to` (never backwards).
    pub(crate) fn advance_to(&mut self, to: u64) {
        self.now = self.now.max(to);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timer(t: CallId) -> Input {
        Input::Timer { timer: t }
    }

    fn popped(clock: &mut Clock) -> Vec<(u64, CallId)> {
        std::iter::from_fn(|| clock.pop_due(u64::MAX))
            .map(|s| match s.input {
                Input::Timer { timer } => (s.at, timer),
                other => panic!("unexpected {other:?}"),
            })
            .collect()
    }

    #[test]
    fn items_come_out_by_time_then_seeded_order_then_insertion() {
        let mut clock = Clock::default();
        clock.schedule(5, 9, timer(1));
        clock.schedule(5, 3, timer(2));
        clock.schedule(1, 7, timer(3));
        clock.schedule(5, 3, timer(4));
        assert_eq!(popped(&mut clock), [(1, 3), (5, 2), (5, 4), (5, 1)]);
        assert_eq!(clock.now(), 5);
    }

    #[test]
    fn a_lone_item_and_the_heap_take_turns_without_reordering() {
        let mut clock = Clock::default();
        clock.schedule(2, 0, timer(1));
        assert_eq!(clock.pop_due(1).map(|s| s.at), None, "not due yet");
        clock.schedule(1, 0, timer(2)); // The lone item moves into the heap beside this one.
        assert_eq!(popped(&mut clock), [(1, 2), (2, 1)]);
        clock.schedule(3, 0, timer(3));
        assert_eq!(popped(&mut clock), [(5, 3)]);
    }

    #[test]
    fn cancelled_timers_are_skipped_whether_alone_or_queued() {
        let mut clock = Clock::default();
        clock.schedule(1, 0, timer(1));
        clock.cancel_timer(1);
        assert!(clock.pop_due(u64::MAX).is_none());
        clock.schedule(1, 0, timer(2));
        clock.schedule(2, 0, timer(3));
        clock.cancel_timer(2);
        // A skipped timer does not move the clock: the survivor is due at 0 + 2.
        assert_eq!(popped(&mut clock), [(2, 3)]);
    }

    #[test]
    fn dropping_timers_keeps_other_items_and_reports_each_live_timer_with_its_tie_break() {
        let mut clock = Clock::default();
        clock.schedule(5, 7, timer(1));
        clock.schedule(
            3,
            8,
            Input::Trigger {
                agent: "a".into(),
                payload: serde_json::Value::Null,
            },
        );
        clock.schedule(9, 4, timer(2));
        clock.cancel_timer(2);
        assert_eq!(clock.drop_timers(), vec![(1, 7)]);
        let left: Vec<u64> = std::iter::from_fn(|| clock.pop_due(u64::MAX))
            .map(|s| s.at)
            .collect();
        assert_eq!(left, vec![3], "only the trigger is left");
        // A lone timer outside the heap goes too.
        clock.schedule(1, 2, timer(3));
        assert_eq!(clock.drop_timers(), vec![(3, 2)]);
        assert!(!clock.has_pending());
    }
}
