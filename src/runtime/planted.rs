//! Planted bugs: realistic stack bugs the runtime can be configured to have, so that tests can show
//! the harness finds and shrinks them. They are configuration, never compiled in by a feature flag
//! scattered through the core: each is checked at exactly one place through
//! [`crate::runtime::RuntimeConfig::has_bug`], and the default configuration has none.

use std::fmt;
use std::str::FromStr;

/// A bug the runtime can be told to have.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PlantedBug {
    /// A child completes but its result never reaches the parent's session.
    DropCascadeResult,
    /// A child's result is appended to the parent's session twice.
    DoubleDelivery,
    /// The iteration limit allows one model call too many.
    IterationOffByOne,
    /// A user message goes to the frame below the top.
    RouteBelowTop,
    /// After a child completes, the parent calls the model without running its remaining tool uses.
    SkipUnresolvedAfterChild,
    /// The main agent's `complete` is accepted: main pops as if it were a child.
    MainCompleteAccepted,
    /// A child at its limit hands the user-facing "Agent reached maximum steps." to its parent.
    DisplayLeak,
    /// A cancel unwinds every frame but the main one.
    CancelLeavesFrame,
    /// Parallel tool results are appended in completion order instead of reply order.
    CompletionOrderResults,
    /// An empty model reply is added to the session as an empty assistant message.
    EmptyReplyRecorded,
    /// A restore rebuilds children's sessions without their initial message.
    RestoreForgetsFirstMessage,
    /// A child whose model call failed hands its parent the error text as a success.
    ChildErrorAsSuccess,
    /// The main agent at its iteration limit ends the turn quietly, as if it had answered.
    MainLimitSilent,
    /// A reply that arrives on a frame's last iteration has its tool uses skipped as "at the
    /// limit" instead of run.
    ToolsSkippedOnLastIteration,
    /// Ending the main agent's turn clears the conversation's inbox with its stack, losing the
    /// messages that arrived during the turn.
    InboxClearedWithTurn,
    /// A pass that only runs the tool uses left when a child returned is not counted.
    ToolPassUncounted,
    /// A restore starts every frame's iteration count again from zero.
    RestoreResetsIterations,
    /// The main agent's user messages are not journaled (only children's sessions are).
    MainMessagesUnjournaled,
    /// The user's answer to `ask_user` counts as an iteration, like a new message.
    AnswerCountsAnIteration,
    /// A sequential tool run is recorded as awaited but never handed to the driver.
    ToolRunNeverIssued,
    /// A `wait` on a fork still running answers at once that it runs, instead of parking.
    WaitReturnsEarly,
    /// A caller's parked `wait` resumes when any of its forks ends, with that fork's result.
    WaitResumedByAnyFork,
    /// Deleting an agent leaves the open tool uses of the frames it ends unanswered.
    DeleteLeavesToolUses,
    /// A deleted agent is marked deleted at once, then ends again when its frame is removed.
    DeletedThenEnded,
    /// A tool's timeout is honoured only for a sequential run: a parallel batch waits for its
    /// slowest tool whatever the timeout says.
    BatchTimeoutIgnored,
    /// A batch child's blank answer is replaced by the latest non-blank text of its session, the
    /// user's messages included (the role filter forgotten): its task, or the summary prompt.
    BatchExtractsUserText,
}

impl PlantedBug {
    /// Every planted bug.
    pub const ALL: [PlantedBug; 26] = [
        PlantedBug::DropCascadeResult,
        PlantedBug::DoubleDelivery,
        PlantedBug::IterationOffByOne,
        PlantedBug::RouteBelowTop,
        PlantedBug::SkipUnresolvedAfterChild,
        PlantedBug::MainCompleteAccepted,
        PlantedBug::DisplayLeak,
        PlantedBug::CancelLeavesFrame,
        PlantedBug::CompletionOrderResults,
        PlantedBug::EmptyReplyRecorded,
        PlantedBug::RestoreForgetsFirstMessage,
        PlantedBug::ChildErrorAsSuccess,
        PlantedBug::MainLimitSilent,
        PlantedBug::ToolsSkippedOnLastIteration,
        PlantedBug::InboxClearedWithTurn,
        PlantedBug::ToolPassUncounted,
        PlantedBug::RestoreResetsIterations,
        PlantedBug::MainMessagesUnjournaled,
        PlantedBug::AnswerCountsAnIteration,
        PlantedBug::ToolRunNeverIssued,
        PlantedBug::WaitReturnsEarly,
        PlantedBug::WaitResumedByAnyFork,
        PlantedBug::DeleteLeavesToolUses,
        PlantedBug::DeletedThenEnded,
        PlantedBug::BatchTimeoutIgnored,
        PlantedBug::BatchExtractsUserText,
    ];

    /// The kebab-case name used on the command line and in scenario files.
    pub fn name(self) -> &'static str {
        match self {
            PlantedBug::DropCascadeResult => "drop-cascade-result",
            PlantedBug::DoubleDelivery => "double-delivery",
            PlantedBug::IterationOffByOne => "iteration-off-by-one",
            PlantedBug::RouteBelowTop => "route-below-top",
            PlantedBug::SkipUnresolvedAfterChild => "skip-unresolved-after-child",
            PlantedBug::MainCompleteAccepted => "main-complete-accepted",
            PlantedBug::DisplayLeak => "display-leak",
            PlantedBug::CancelLeavesFrame => "cancel-leaves-frame",
            PlantedBug::CompletionOrderResults => "completion-order-results",
            PlantedBug::EmptyReplyRecorded => "empty-reply-recorded",
            PlantedBug::RestoreForgetsFirstMessage => "restore-forgets-first-message",
            PlantedBug::ChildErrorAsSuccess => "child-error-as-success",
            PlantedBug::MainLimitSilent => "main-limit-silent",
            PlantedBug::ToolsSkippedOnLastIteration => "tools-skipped-on-last-iteration",
            PlantedBug::InboxClearedWithTurn => "inbox-cleared-with-turn",
            PlantedBug::ToolPassUncounted => "tool-pass-uncounted",
            PlantedBug::RestoreResetsIterations => "restore-resets-iterations",
            PlantedBug::MainMessagesUnjournaled => "main-messages-unjournaled",
            PlantedBug::AnswerCountsAnIteration => "answer-counts-an-iteration",
            PlantedBug::ToolRunNeverIssued => "tool-run-never-issued",
            PlantedBug::WaitReturnsEarly => "wait-returns-early",
            PlantedBug::WaitResumedByAnyFork => "wait-resumed-by-any-fork",
            PlantedBug::DeleteLeavesToolUses => "delete-leaves-tool-uses",
            PlantedBug::DeletedThenEnded => "deleted-then-ended",
            PlantedBug::BatchTimeoutIgnored => "batch-timeout-ignored",
            PlantedBug::BatchExtractsUserText => "batch-extracts-user-text",
        }
    }
}

impl fmt::Display for PlantedBug {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for PlantedBug {
    type Err = String;
    fn from_str(s: &str) -> Result<PlantedBug, String> {
        PlantedBug::ALL
            .into_iter()
            .find(|b| b.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = PlantedBug::ALL.iter().map(|b| b.name()).collect();
                format!("unknown planted bug `{s}` (known: {})", names.join(", "))
            })
    }
}
