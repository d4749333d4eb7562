//! The numbers of protocol 1: its version and its limits (re-exported by [`super::codec`]).

/// The protocol version this module speaks.
pub const PROTOCOL_VERSION: u64 = 1;

/// The most bytes a line may hold, not counting its line ending (1 MiB).
pub const MAX_LINE: usize = 1 << 20;

/// The largest integer a line may carry: 2^53 − 1, the largest that every JSON reader holds
/// exactly.
pub const MAX_INTEGER: u64 = (1 << 53) - 1;

/// The most lines a runtime may write in one run before it is a `flood` (counted by the driver,
/// across the run's processes).
pub const MAX_LINES_PER_RUN: u64 = 100_000;

/// How many characters of an offending line a [`ProtocolError`](super::error::ProtocolError) quotes.
pub const QUOTE_CHARS: usize = 200;
