//! What happened in the current step, as the semantic checks need it: the facts gathered while
//! the step's events are read, judged at its end and then cleared.

use std::sync::Arc;

use smallvec::SmallVec;
use uuid::Uuid;

use super::Violation;

/// How the observer sees a frame end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum End {
    /// It called `complete`, or (a batch child) answered.
    Success,
    /// Its model call failed (or its reply was rejected).
    Error,
    /// It made as many passes as its limit allows.
    Limit,
    /// The user's cancel word unwound it.
    Cancel,
    /// An intervention deleted it (or a frame below it).
    Deleted,
    /// The watchdog interrupted it (seed 004): the interruption model decides.
    Interrupted,
    /// The main frame's reply had no tool use: it answered the user.
    Answered,
}

/// A session operation the journal must hold.
#[derive(Clone, Debug)]
pub(super) struct Expect {
    pub(super) kind: &'static str,
    pub(super) session: Uuid,
    pub(super) id: Option<Arc<str>>,
    pub(super) is_error: Option<bool>,
    pub(super) frame: Arc<str>,
}

/// What happened in the current step, cleared at its end.
#[derive(Clone, Debug, Default)]
pub(super) struct StepFacts {
    /// Frames whose model call failed or whose reply was rejected.
    pub(super) failed: SmallVec<[Uuid; 2]>,
    /// Frames that got a child's result.
    pub(super) resumed: SmallVec<[Uuid; 2]>,
    /// Frames the watchdog spoke about: conversation and frame name.
    pub(super) watchdog: SmallVec<[(usize, Arc<str>); 2]>,
    /// Batch children that answered.
    pub(super) delegated: SmallVec<[Uuid; 2]>,
    /// Main frames that answered the user (a reply with no tool use).
    pub(super) answered: SmallVec<[Uuid; 2]>,
    /// Frames given "Cancelled by user." that the unwind must remove in this step.
    pub(super) cancel_skips: SmallVec<[(Uuid, Arc<str>); 2]>,
    /// Frames given "Agent deleted by user." that the deletion must remove in this step.
    pub(super) delete_skips: SmallVec<[(Uuid, Arc<str>); 2]>,
    /// Children whose `complete` succeeded: they must leave the stack in this step.
    pub(super) completing: SmallVec<[(Uuid, Arc<str>); 1]>,
    /// Frames whose reply holds an `ask_user` to answer at once (`query_user: none`).
    pub(super) at_once: SmallVec<[Uuid; 1]>,
    /// Batch children whose reply ended their send: conversation and frame.
    pub(super) batch_due: SmallVec<[(usize, Uuid); 1]>,
    /// Text sent to the user: conversation and text.
    pub(super) sent: SmallVec<[(usize, Arc<str>); 2]>,
    /// A main frame that failed, by conversation: its answer must say so.
    pub(super) main_failure: SmallVec<[(usize, End); 1]>,
    /// Session operations the journal must hold.
    pub(super) expected: Vec<Expect>,
    /// The first semantic violation seen during the step's events (reported after the
    /// structural checks of the step, which it may only be a symptom of).
    pub(super) deferred: Option<Violation>,
    /// The lists something was added to since the last [`StepFacts::clear`], one bit each (see
    /// [`fact`]; every addition goes through [`StepFacts::mark`], so that an empty step costs
    /// one test, and a clear touches only the lists used).
    pub(super) dirty: u16,
}

/// Which of [`StepFacts`]' lists hold something: one bit each, set by [`StepFacts::mark`].
pub(super) mod fact {
    pub const FAILED: u16 = 1;
    pub(crate) const RESUMED: u16 = 1 << 1;
    pub(crate) const WATCHDOG: u16 = 1 << 2;
    pub(crate) const DELEGATED: u16 = 1 << 3;
    pub(crate) const ANSWERED: u16 = 1 << 4;
    pub(crate) const CANCEL_SKIPS: u16 = 1 << 5;
    pub(crate) const DELETE_SKIPS: u16 = 1 << 6;
    pub(crate) const COMPLETING: u16 = 1 << 7;
    pub(crate) const AT_ONCE: u16 = 1 << 8;
    pub(crate) const BATCH_DUE: u16 = 1 << 9;
    pub(crate) const SENT: u16 = 1 << 10;
    pub(crate) const MAIN_FAILURE: u16 = 1 << 11;
    pub(crate) const EXPECTED: u16 = 1 << 12;
    pub(crate) const DEFERRED: u16 = 1 << 13;
}

impl StepFacts {
    /// The facts, to add one to the lists `lists` names (bits of [`fact`]).
    #[inline(always)]
    pub(super) fn mark(&mut self, lists: u16) -> &mut StepFacts {
        self.dirty |= lists;
        self
    }

    #[inline]
    pub(super) fn is_empty(&self) -> bool {
        debug_assert!(
            {
                let clean = |bit: u16, empty: bool| self.dirty & bit != 0 || empty;
                clean(fact::FAILED, self.failed.is_empty())
                    && clean(fact::RESUMED, self.resumed.is_empty())
                    && clean(fact::WATCHDOG, self.watchdog.is_empty())
                    && clean(fact::DELEGATED, self.delegated.is_empty())
                    && clean(fact::ANSWERED, self.answered.is_empty())
                    && clean(fact::CANCEL_SKIPS, self.cancel_skips.is_empty())
                    && clean(fact::DELETE_SKIPS, self.delete_skips.is_empty())
                    && clean(fact::COMPLETING, self.completing.is_empty())
                    && clean(fact::AT_ONCE, self.at_once.is_empty())
                    && clean(fact::BATCH_DUE, self.batch_due.is_empty())
                    && clean(fact::SENT, self.sent.is_empty())
                    && clean(fact::MAIN_FAILURE, self.main_failure.is_empty())
                    && clean(fact::EXPECTED, self.expected.is_empty())
                    && clean(fact::DEFERRED, self.deferred.is_none())
            },
            "a fact was added without StepFacts::mark naming its list"
        );
        self.dirty == 0
    }

    /// Empties the lists that hold something (their room is kept).
    pub(super) fn clear(&mut self) {
        let dirty = std::mem::take(&mut self.dirty);
        if dirty == 0 {
            return;
        }
        let marked = |bit: u16| dirty & bit != 0;
        if marked(fact::FAILED) {
            self.failed.clear();
        }
        if marked(fact::RESUMED) {
            self.resumed.clear();
        }
        if marked(fact::WATCHDOG) {
            self.watchdog.clear();
        }
        if marked(fact::DELEGATED) {
            self.delegated.clear();
        }
        if marked(fact::ANSWERED) {
            self.answered.clear();
        }
        if marked(fact::CANCEL_SKIPS) {
            self.cancel_skips.clear();
        }
        if marked(fact::DELETE_SKIPS) {
            self.delete_skips.clear();
        }
        if marked(fact::COMPLETING) {
            self.completing.clear();
        }
        if marked(fact::AT_ONCE) {
            self.at_once.clear();
        }
        if marked(fact::BATCH_DUE) {
            self.batch_due.clear();
        }
        if marked(fact::SENT) {
            self.sent.clear();
        }
        if marked(fact::MAIN_FAILURE) {
            self.main_failure.clear();
        }
        if marked(fact::EXPECTED) {
            self.expected.clear();
        }
        if marked(fact::DEFERRED) {
            self.deferred = None;
        }
    }
}
