//! Where persisted bytes go when they leave memory: the file store of `state.json` and
//! `context.jsonl`. The formats themselves are pure and live in [`crate::persist`].

mod file;

pub use file::FileStore;
