//! What a run looks like to people and to CI: the transcript's text and JSON renderings, and
//! `check`'s JUnit XML and JSON reports ([`check`]).

pub mod check;
pub mod diff;
pub mod escape;
pub mod html;
mod transcript;

pub use escape::{markup, printable, terminal};
pub use transcript::{block, json, line, records_text, text, text_colored, verdict};
