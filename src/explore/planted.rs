//! Which invariant catches each planted bug (see [`crate::runtime::planted`]): the explorer's
//! tests and `agentsim explore --planted` check that exploration finds each bug through it.

use crate::observe::names::*;
use crate::runtime::planted::PlantedBug;

/// The invariant that catches `bug`.
pub fn caught_by(bug: PlantedBug) -> &'static str {
    match bug {
        PlantedBug::DropCascadeResult | PlantedBug::DoubleDelivery => SINGLE_DELIVERY,
        PlantedBug::IterationOffByOne => ITERATION_BOUND,
        PlantedBug::RouteBelowTop => ROUTING,
        PlantedBug::SkipUnresolvedAfterChild
        | PlantedBug::CompletionOrderResults
        | PlantedBug::EmptyReplyRecorded => TOOL_PAIRING,
        // A restart compares the restored sessions with those at the crash.
        PlantedBug::RestoreForgetsFirstMessage => RESTART_EQUIVALENCE,
        PlantedBug::MainCompleteAccepted => SINGLE_DELIVERY,
        PlantedBug::DisplayLeak => NO_DISPLAY_LEAK,
        PlantedBug::CancelLeavesFrame => CLEANUP,
        PlantedBug::ChildErrorAsSuccess | PlantedBug::MainLimitSilent => ERROR_PROPAGATION,
        PlantedBug::ToolsSkippedOnLastIteration => TOOL_EXECUTION,
        PlantedBug::InboxClearedWithTurn => MESSAGE_DELIVERY,
        PlantedBug::ToolPassUncounted | PlantedBug::AnswerCountsAnIteration => ITERATION_ACCOUNTING,
        // A restart compares the restored frames with those at the crash, counts included.
        PlantedBug::RestoreResetsIterations => RESTART_EQUIVALENCE,
        PlantedBug::MainMessagesUnjournaled => JOURNAL_BEFORE_STATE,
        PlantedBug::ToolRunNeverIssued => PROGRESS,
        PlantedBug::WaitReturnsEarly | PlantedBug::WaitResumedByAnyFork => FORK_WAIT,
        // The parent's spawning tool use is left open too: the deleted child delivers nothing.
        PlantedBug::DeleteLeavesToolUses => SINGLE_DELIVERY,
        PlantedBug::DeletedThenEnded => STATUS_TRANSITIONS,
        PlantedBug::BatchTimeoutIgnored => TOOL_RUNS,
        PlantedBug::BatchExtractsUserText => BATCH_ANSWER,
    }
}
