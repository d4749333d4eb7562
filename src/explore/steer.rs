//! Steering: generated scenarios are drawn from a few swarm configurations ([`Knobs`]), each
//! leaning toward some behaviour (deep nesting, failures, limits, cancels, batch children,
//! questions, odd tools), and the explorer weights each configuration by the rare features of
//! [`crate::observe::coverage`] its runs reached.
//!
//! Deterministic whatever the number of workers: runs are grouped in epochs of [`EPOCH`] seeds,
//! and the configuration of a seed in epoch `e` is drawn from that seed with weights computed
//! from the finished epochs `0..e-1` only (a worker that gets ahead waits for epoch `e-2` to
//! finish, which with sequential seeds it almost never has to).

use std::sync::{Condvar, Mutex};

use crate::explore::generate::Knobs;
use crate::model::rng::SimRng;
use crate::observe::coverage::{Coverage, FEATURES};

/// Seeds per epoch.
pub const EPOCH: u64 = 500;
/// Stream of the draw of a seed's configuration.
const STEER_STREAM: u64 = 0x57EE;
/// Each configuration keeps at least this share of the runs, so that none is starved on the
/// evidence of a few epochs.
const FLOOR: f64 = 0.04;

/// The swarm configurations, by name.
pub fn configurations() -> Vec<(&'static str, Knobs)> {
    let d = Knobs::default();
    vec![
        ("default", d),
        (
            "deep",
            Knobs {
                replies: [10, 20, 25, 70, 85, 90, 95],
                ..d
            },
        ),
        (
            "failing",
            Knobs {
                replies: [20, 35, 42, 55, 68, 72, 95],
                low_limits: true,
                ..d
            },
        ),
        (
            "limits",
            Knobs {
                low_limits: true,
                ..d
            },
        ),
        ("cancels", Knobs { cancel: 0.5, ..d }),
        (
            "batch",
            Knobs {
                // Text next to tool uses and empty replies, for the empty-answer policies.
                replies: [10, 22, 40, 62, 75, 86, 92],
                batch: 0.8,
                ..d
            },
        ),
        (
            "questions",
            Knobs {
                replies: [15, 30, 35, 50, 62, 75, 82],
                ..d
            },
        ),
        ("tree", Knobs { tree: 0.9, ..d }),
        (
            "workflow",
            Knobs {
                workflow: 0.9,
                tree: 0.3,
                ..d
            },
        ),
        ("sessions", Knobs { sessions: 0.9, ..d }),
        (
            "odd-tools",
            Knobs {
                hang: 0.1,
                duplicate_ids: 0.3,
                ..d
            },
        ),
    ]
}

/// What the finished runs of one epoch reached, by configuration.
#[derive(Clone, Debug)]
struct Epoch {
    done: u64,
    runs: Vec<u64>,
    reached: Vec<Coverage>,
}

/// The steering state shared by the workers of one exploration.
#[derive(Debug)]
pub struct Steer {
    first: u64,
    knobs: Vec<Knobs>,
    state: Mutex<State>,
    finished: Condvar,
}

#[derive(Debug, Default)]
struct State {
    epochs: Vec<Epoch>,
    /// Weights for each epoch, computed when first needed.
    weights: Vec<Vec<f64>>,
}

impl Steer {
    /// Steering for the seeds `first`, `first + 1`, ...
    pub fn new(first: u64) -> Steer {
        Steer {
            first,
            knobs: configurations().into_iter().map(|(_, k)| k).collect(),
            state: Mutex::new(State::default()),
            finished: Condvar::new(),
        }
    }

    /// The configuration for run `i` (seed `first + i`): its index and knobs. Waits, if need
    /// be, for the epoch two before to finish; `None` if `stopping` says to stop meanwhile.
    pub fn choose(&self, i: u64, stopping: impl Fn() -> bool) -> Option<(usize, Knobs)> {
        let epoch = (i / EPOCH) as usize;
        let mut state = self.state.lock().expect("no worker panics");
        while epoch >= 2 && !self.epoch_done(&state, epoch - 2) {
            if stopping() {
                return None;
            }
            let wait = std::time::Duration::from_millis(50);
            state = self
                .finished
                .wait_timeout(state, wait)
                .expect("no worker panics")
                .0;
        }
        while state.weights.len() <= epoch {
            let e = state.weights.len();
            let w = self.weights_for(&state, e);
            state.weights.push(w);
        }
        let weights = &state.weights[epoch];
        let seed = self.first.wrapping_add(i);
        let mut rng = SimRng::new(seed).fork(seed, STEER_STREAM);
        let total: f64 = weights.iter().sum();
        let mut x = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64 * total;
        let mut c = weights.len() - 1;
        for (j, w) in weights.iter().enumerate() {
            if x < *w {
                c = j;
                break;
            }
            x -= w;
        }
        Some((c, self.knobs[c]))
    }

    /// Records that run `i` (configuration `c`) reached `bits`.
    pub fn record(&self, i: u64, c: usize, bits: u128) {
        let epoch = (i / EPOCH) as usize;
        let mut state = self.state.lock().expect("no worker panics");
        while state.epochs.len() <= epoch {
            let n = self.knobs.len();
            state.epochs.push(Epoch {
                done: 0,
                runs: vec![0; n],
                reached: vec![Coverage::default(); n],
            });
        }
        let e = &mut state.epochs[epoch];
        e.done += 1;
        e.runs[c] += 1;
        e.reached[c].add(bits);
        if e.done == EPOCH {
            self.finished.notify_all();
        }
    }

    /// Whether every run of `epoch` finished (a run interrupted by Ctrl-C never finishes: the
    /// workers stop choosing then).
    fn epoch_done(&self, state: &State, epoch: usize) -> bool {
        state.epochs.get(epoch).is_some_and(|e| e.done == EPOCH)
    }

    /// Weights for epoch `e`, from the epochs before `e - 1`: each configuration's score is the
    /// rarity of what its runs reached (per run), rare features counting most; every
    /// configuration keeps a floor.
    fn weights_for(&self, state: &State, e: usize) -> Vec<f64> {
        let n = self.knobs.len();
        if e < 2 {
            return vec![1.0; n];
        }
        let past = &state.epochs[..e - 1];
        let mut total = Coverage::default();
        for epoch in past {
            for c in &epoch.reached {
                total.merge(c);
            }
        }
        let mut scores = vec![0.0; n];
        for (c, score) in scores.iter_mut().enumerate() {
            let runs: u64 = past.iter().map(|p| p.runs[c]).sum();
            if runs == 0 {
                *score = 1.0;
                continue;
            }
            let mut s = 0.0;
            for f in 0..FEATURES {
                let mine: u64 = past.iter().map(|p| p.reached[c].runs[f]).sum();
                if mine > 0 {
                    s += mine as f64 / (1.0 + total.runs[f] as f64);
                }
            }
            *score = s / runs as f64;
        }
        let sum: f64 = scores.iter().sum();
        if sum <= 0.0 {
            return vec![1.0; n];
        }
        scores.iter().map(|s| (s / sum).max(FLOOR)).collect()
    }
}
