//! The vocabulary every other module speaks: conversations ([`transcript`]), model replies and
//! requests ([`llm`]), agent definitions ([`agent`]), ids ([`ids`]), the fixed hasher ([`hash`]) and
//! the exact strings the runtime writes ([`messages`]). Pure data; it imports nothing else of the
//! crate.

pub mod agent;
pub mod hash;
pub mod ids;
pub mod llm;
pub mod messages;
pub(crate) mod rng;
pub mod transcript;
