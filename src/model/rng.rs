//! The simulator's one random generator: `Pcg64Mcg` (a named, version-stable algorithm from
//! `rand_pcg`), seeded from the scenario's `u64` seed through SplitMix64. Every random choice of a
//! run derives from it, in a fixed order, so a seed replays the same run.

use rand_core::{RngCore, SeedableRng};
use rand_pcg::Pcg64Mcg;

use crate::model::ids::splitmix64;

/// A seeded generator.
#[derive(Clone, Debug)]
pub(crate) struct SimRng {
    inner: Pcg64Mcg,
}

impl SimRng {
    /// The generator for `seed`.
    pub fn new(seed: u64) -> SimRng {
        let hi = splitmix64(seed);
        let lo = splitmix64(hi ^ seed);
        let state = (u128::from(hi) << 64) | u128::from(lo);
        SimRng {
            inner: Pcg64Mcg::from_seed(state.to_le_bytes()),
        }
    }

    /// An independent generator for one purpose (`stream` names it), so that adding draws for one
    /// purpose does not shift the draws of another.
    pub fn fork(&self, seed: u64, stream: u64) -> SimRng {
        SimRng::new(splitmix64(seed ^ splitmix64(stream.wrapping_add(0x5151))))
    }

    /// The next 64 random bits.
    pub(crate) fn next_u64(&mut self) -> u64 {
        self.inner.next_u64()
    }

    /// A number in `0..n` (`n > 0`), by Lemire's multiply-shift (bias below 2^-64 · n).
    pub fn below(&mut self, n: u64) -> u64 {
        debug_assert!(n > 0, "below(0) has no values");
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// True with probability `p`.
    pub(crate) fn chance(&mut self, p: f64) -> bool {
        ((self.next_u64() >> 11) as f64 / (1u64 << 53) as f64) < p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_stream_and_forks_are_independent() {
        let mut a = SimRng::new(42);
        let mut b = SimRng::new(42);
        let xs: Vec<u64> = (0..4).map(|_| a.next_u64()).collect();
        let ys: Vec<u64> = (0..4).map(|_| b.next_u64()).collect();
        assert_eq!(xs, ys);
        let mut c = SimRng::new(43);
        assert_ne!(xs[0], c.next_u64());
        let mut f1 = a.fork(42, 1);
        let mut f2 = a.fork(42, 2);
        assert_ne!(f1.next_u64(), f2.next_u64());
        for _ in 0..100 {
            assert!(a.below(7) < 7);
        }
    }
}
