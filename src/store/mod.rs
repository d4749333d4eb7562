//! Where persisted bytes go when they leave memory: the file store of `state.json` and
//! `context.jsonl` (the formats themselves are pure and live in [`crate::persist`]), and the
//! async-question store of seed 003 ([`questions`]: in memory, or in SQLite with the feature
//! `sqlite`), and the lock that makes one process their owner ([`lock`]).

mod file;
pub mod lock;
pub mod questions;
#[cfg(feature = "sqlite")]
pub mod sqlite;

pub use file::FileStore;
pub use lock::OwnerLock;
pub use questions::{MemoryQuestions, QuestionStore};
#[cfg(feature = "sqlite")]
pub use sqlite::SqliteQuestions;
