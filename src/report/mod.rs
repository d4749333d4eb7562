//! What a run looks like to people and to CI: the transcript's text and JSON renderings, and
//! `check`'s JUnit XML and JSON reports ([`check`]).

pub mod check;
pub mod diff;
pub mod html;
mod transcript;

pub use transcript::{block, json, line, printable, records_text, text, text_colored, verdict};
