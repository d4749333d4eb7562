//! [`ScenarioError`]: a scenario file that could not be loaded, located at a line and column.

use std::fmt;
use std::path::PathBuf;

/// A scenario file could not be loaded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct ScenarioError {
    /// The file.
    pub path: PathBuf,
    /// 1-based line (0 when the file could not be read at all).
    pub line: u32,
    /// 1-based column.
    pub column: u32,
    /// What was wrong and what was expected.
    pub message: String,
}

impl fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "{}: {}", self.path.display(), self.message)
        } else {
            write!(
                f,
                "{}:{}:{}: {}",
                self.path.display(),
                self.line,
                self.column,
                self.message
            )
        }
    }
}

/// A line or column as an error holds it: at least 1, and saturated.
pub(super) fn clamp(n: u64) -> u32 {
    u32::try_from(n.max(1)).unwrap_or(u32::MAX)
}
