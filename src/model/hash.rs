//! A small, fixed, fast hasher for the sets and maps that are only looked up (never iterated into
//! output): `tool_use` ids, frame ids. The standard SipHash is built to resist hash flooding, which
//! a simulator fed by its own scripts does not need, and it showed up as the largest single cost
//! of a turn in profiles. The hasher is rustc's `FxHasher`, from the `rustc-hash` crate.

pub use rustc_hash::{FxBuildHasher, FxHashMap, FxHashSet, FxHasher};

/// How many hashes an [`IdHashes`] holds before it moves them into a hash set.
const INLINE_HASHES: usize = 8;

/// A set of 64-bit hashes (of `tool_use` ids) that holds its first few members inline and moves
/// them into an [`FxHashSet`] when it outgrows that. Most sessions use a handful of tool ids, so
/// most never allocate or hash-index them; a long session still looks one up in constant time.
#[derive(Clone, Debug)]
pub(crate) enum IdHashes {
    /// Up to `INLINE_HASHES` hashes, the first `len` of `items`, searched linearly.
    Inline {
        /// Members in use.
        len: u8,
        /// The members.
        items: [u64; INLINE_HASHES],
    },
    /// Every member, once there were more than fit inline.
    Spilled(FxHashSet<u64>),
}

impl Default for IdHashes {
    fn default() -> IdHashes {
        IdHashes::Inline {
            len: 0,
            items: [0; INLINE_HASHES],
        }
    }
}

impl IdHashes {
    /// Adds `hash` (a member already present stays once).
    #[inline]
    pub fn insert(&mut self, hash: u64) {
        match self {
            IdHashes::Inline { len, items } => {
                let n = usize::from(*len);
                if items[..n].contains(&hash) {
                    return;
                }
                if n < INLINE_HASHES {
                    items[n] = hash;
                    *len += 1;
                } else {
                    let mut set =
                        FxHashSet::with_capacity_and_hasher(4 * INLINE_HASHES, FxBuildHasher);
                    set.extend(items.iter().copied());
                    set.insert(hash);
                    *self = IdHashes::Spilled(set);
                }
            }
            IdHashes::Spilled(set) => {
                set.insert(hash);
            }
        }
    }

    /// Whether `hash` is a member.
    #[inline]
    pub fn contains(&self, hash: u64) -> bool {
        match self {
            IdHashes::Inline { len, items } => items[..usize::from(*len)].contains(&hash),
            IdHashes::Spilled(set) => set.contains(&hash),
        }
    }

    /// Members.
    pub fn len(&self) -> usize {
        match self {
            IdHashes::Inline { len, .. } => usize::from(*len),
            IdHashes::Spilled(set) => set.len(),
        }
    }
}

/// Set equality, whichever form each side is in.
impl PartialEq for IdHashes {
    fn eq(&self, other: &IdHashes) -> bool {
        // Members are distinct, so equal counts and one side within the other make them equal.
        let within = |a: &IdHashes, b: &IdHashes| match a {
            IdHashes::Inline { len, items } => {
                items[..usize::from(*len)].iter().all(|&h| b.contains(h))
            }
            IdHashes::Spilled(set) => set.iter().all(|&h| b.contains(h)),
        };
        self.len() == other.len() && within(self, other)
    }
}

impl FromIterator<u64> for IdHashes {
    fn from_iter<I: IntoIterator<Item = u64>>(iter: I) -> IdHashes {
        let mut set = IdHashes::default();
        for hash in iter {
            set.insert(hash);
        }
        set
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id_hashes_answer_the_same_inline_and_spilled() {
        let mut set = IdHashes::default();
        assert!(set.len() == 0 && !set.contains(0));
        for h in 0..INLINE_HASHES as u64 {
            set.insert(h * 7);
            set.insert(h * 7); // a repeat is kept once
        }
        assert!(matches!(set, IdHashes::Inline { .. }));
        assert_eq!(set.len(), INLINE_HASHES);
        set.insert(1000);
        assert!(matches!(set, IdHashes::Spilled(_)));
        assert_eq!(set.len(), INLINE_HASHES + 1);
        for h in 0..INLINE_HASHES as u64 {
            assert!(set.contains(h * 7));
            assert!(!set.contains(h * 7 + 1));
        }
        assert!(set.contains(1000));
        let collected: IdHashes = (0..20).collect();
        assert_eq!(collected, (0..20).rev().collect::<IdHashes>());
        assert_ne!(collected, (0..19).collect::<IdHashes>());
        let few: IdHashes = [3, 1, 2].into_iter().collect();
        assert_eq!(few, [1, 2, 3].into_iter().collect::<IdHashes>());
        assert_eq!(collected.len(), 20);
        assert!((0..20).all(|h| collected.contains(h)) && !collected.contains(20));
    }
}
