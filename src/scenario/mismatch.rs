//! [`Mismatch`]: one expectation of a step that did not hold, as the `expect` checks (and the
//! tree's, in [`super::tree`]) report it and a failure prints it.

use std::fmt;

/// One expectation that did not hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mismatch {
    /// Which key of the `expect` (e.g. `sent`, `tool_result.content`).
    pub what: String,
    /// What the scenario expected.
    pub expected: String,
    /// What the run did.
    pub actual: String,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:\n      expected: {}\n      actual:   {}",
            self.what, self.expected, self.actual
        )
    }
}
