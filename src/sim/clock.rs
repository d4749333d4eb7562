//! Virtual time: a clock in integer milliseconds and the queue of inputs due at given times.
//!
//! Items due at the same millisecond are ordered by a key drawn from the seed, so the order of
//! concurrent completions (two parallel tools with equal latency, a tool result and a timer) is
//! the seed's choice and replays exactly. Pieces of one streamed reply share a key and keep their
//! order through a sequence number.

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap};

use crate::runtime::Input;
use crate::stack::CallId;

/// One scheduled input.
#[derive(Clone, Debug)]
pub struct Scheduled {
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
pub struct Clock {
    now: u64,
    seq: u64,
    queue: BinaryHeap<Reverse<Scheduled>>,
    cancelled: BTreeSet<CallId>,
}

impl Clock {
    /// Current virtual time in ms.
    pub fn now(&self) -> u64 {
        self.now
    }

    /// Schedules `input` at `now + after_ms`.
    pub fn schedule(&mut self, after_ms: u64, order: u64, input: Input) {
        self.seq += 1;
        self.queue.push(Reverse(Scheduled {
            at: self.now.saturating_add(after_ms),
            order,
            seq: self.seq,
            input,
        }));
    }

    /// Forgets a timer: when it comes due it is dropped without a step.
    pub fn cancel_timer(&mut self, timer: CallId) {
        self.cancelled.insert(timer);
    }

    fn skip_cancelled(&mut self) {
        while let Some(Reverse(s)) = self.queue.peek() {
            match s.input {
                Input::Timer { timer } if self.cancelled.contains(&timer) => {
                    self.cancelled.remove(&timer);
                    self.queue.pop();
                }
                _ => break,
            }
        }
    }

    /// Pops the next live item due at or before `limit`, moving the clock to its time.
    pub fn pop_due(&mut self, limit: u64) -> Option<Scheduled> {
        self.skip_cancelled();
        match self.queue.peek() {
            Some(Reverse(s)) if s.at <= limit => {
                let Reverse(item) = self.queue.pop().expect("peeked");
                self.now = self.now.max(item.at);
                Some(item)
            }
            _ => None,
        }
    }

    /// Moves the clock forward to `to` (never backwards).
    pub fn advance_to(&mut self, to: u64) {
        self.now = self.now.max(to);
    }
}
