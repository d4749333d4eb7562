//! Names of the invariants, as printed when one breaks.

/// Every model request is valid under the Anthropic and OpenAI message rules.
pub(crate) const TOOL_PAIRING: &str = "tool-pairing";
/// Each frame above the bottom names an unresolved `tool_use` of the frame below.
pub(crate) const STACK_LINKAGE: &str = "stack-linkage";
/// A non-empty stack has exactly one main frame, at the bottom.
pub(crate) const MAIN_AT_BOTTOM: &str = "main-at-bottom";
/// No frame runs more model iterations than its limit.
pub(crate) const ITERATION_BOUND: &str = "iteration-bound";
/// Each popped frame delivers exactly one result to exactly its parent.
pub(crate) const SINGLE_DELIVERY: &str = "single-delivery";
/// Each user message goes to the frame on top, or to main when the stack is empty, or to the
/// fork with a question open that the top frame's parked `wait` leads to.
pub(crate) const ROUTING: &str = "routing";
/// After the main agent answers, or after an unwind, no frame of that session remains.
pub(crate) const CLEANUP: &str = "cleanup";
/// No user-facing or display-only string enters a conversation as model-visible content.
pub(crate) const NO_DISPLAY_LEAK: &str = "no-display-leak";
/// Restoring the persisted state at a quiescent point continues as the uninterrupted run (a
/// restore that fails breaks it; a restore that continues differently is caught by the other
/// invariants and by the restart property test).
pub(crate) const RESTART_EQUIVALENCE: &str = "restart-equivalence";
/// A frame that fails delivers an error result, one that completes a success, and a main
/// frame that fails tells the user so.
pub(crate) const ERROR_PROPAGATION: &str = "error-propagation";
/// Every `tool_use` of a reply is run, or skipped for the documented reason in the documented
/// situation (after `complete`, at the limit on resuming, on a cancel, on an interruption).
pub(crate) const TOOL_EXECUTION: &str = "tool-execution";
/// Every user message is delivered to one frame or dropped by a cancel word by the time its
/// conversation is idle.
pub(crate) const MESSAGE_DELIVERY: &str = "message-delivery";
/// A frame's iteration count is the number of passes it made.
pub(crate) const ITERATION_ACCOUNTING: &str = "iteration-accounting";
/// Every session operation is journaled before the state that follows it is written.
pub(crate) const JOURNAL_BEFORE_STATE: &str = "journal-before-state";
/// A run never waits in vain: when nothing is scheduled, every conversation is idle, unless
/// a model call stalled or a tool hung (checked by the simulator, which knows).
pub(crate) const PROGRESS: &str = "progress";
/// The runtime has as many live frames as the events left agents alive, and every agent a
/// step touched agrees with the runtime: a live one has its frame with its status under a
/// parent that lists it, an ended one leaves no fork running.
pub(crate) const TREE_CONSISTENCY: &str = "tree-consistency";
/// Every status change is one the status machine allows, from the status the agent had;
/// terminal statuses are absorbing.
pub(crate) const STATUS_TRANSITIONS: &str = "status-transitions";
/// A `wait(h)` answers only once fork `h` of its caller has ended, with exactly that fork's
/// result and error flag (`No fork with handle <h>` when the caller starts no such fork; a
/// skip text only when the caller ends in the step).
pub(crate) const FORK_WAIT: &str = "fork-wait";
/// An async session (seed 003) moves only `running → pending_input → running → completed |
/// failed` or `pending_input → failed`, one question at a time, and agrees with the runtime.
pub(crate) const SESSION_LIFECYCLE: &str = "session-lifecycle";
/// An external tool run's result is the output its tool gave, or its timeout text once its
/// deadline passed with no output before it, or a documented skip; and it joins the session
/// as soon as its run is in (for a parallel batch, once every run of the batch is in).
pub(crate) const TOOL_RUNS: &str = "tool-runs";
/// A batch child's answer is its final text, or, when that is blank, what its agent's
/// empty-answer policy makes of it (its latest non-blank text, or one request for a summary);
/// its caller receives exactly that answer.
pub(crate) const BATCH_ANSWER: &str = "batch-answer";

/// Every invariant the observer checks, in a stable order.
pub const ALL: [&str; 21] = [
    TOOL_PAIRING,
    STACK_LINKAGE,
    MAIN_AT_BOTTOM,
    ITERATION_BOUND,
    SINGLE_DELIVERY,
    ROUTING,
    CLEANUP,
    NO_DISPLAY_LEAK,
    RESTART_EQUIVALENCE,
    ERROR_PROPAGATION,
    TOOL_EXECUTION,
    MESSAGE_DELIVERY,
    ITERATION_ACCOUNTING,
    JOURNAL_BEFORE_STATE,
    PROGRESS,
    TREE_CONSISTENCY,
    STATUS_TRANSITIONS,
    FORK_WAIT,
    SESSION_LIFECYCLE,
    TOOL_RUNS,
    BATCH_ANSWER,
];

/// A request to `agentsim mock-llm` replays the assistant turns the server sent in its
/// conversation, unchanged and complete.
pub(crate) const REPLAYED_HISTORY: &str = "replayed-history";
/// A request to `agentsim mock-llm` is a well-formed request of its provider.
pub(crate) const REQUEST_FORMAT: &str = "request-format";

/// Against an outside runtime (`--runtime`): nothing happens after the runtime said it was
/// idle (no line, no model request) until agentsim's next line.
pub(crate) const IDLE: &str = "idle";
/// Against an outside runtime: a child's `complete(result)` reaches its parent as a tool result
/// of exactly that text, not as an error (the outside face of `error-propagation`).
pub(crate) const COMPLETE_DELIVERY: &str = "complete-delivery";
/// Against an outside runtime: a child that ends by a failed model call or its iteration limit
/// reaches its parent as an error result (the outside face of `error-propagation`).
pub(crate) const ERROR_CASCADE: &str = "error-cascade";
/// Against an outside runtime: no frame makes more model calls than its iteration limit, as
/// read from the model requests (the outside face of `iteration-bound`).
pub(crate) const ITERATION_LIMIT: &str = "iteration-limit";
/// Against an outside runtime: after a kill and restart, the next request of every conversation
/// replays what had been served before the kill (nothing lost, nothing duplicated, no tool use
/// left unanswered), and the user is not sent a text twice.
pub(crate) const RESTART: &str = "restart";

/// The checks of a run against an outside runtime that have no in-process invariant of the
/// same name.
pub(crate) const OUTSIDE: [&str; 5] = [
    IDLE,
    COMPLETE_DELIVERY,
    ERROR_CASCADE,
    ITERATION_LIMIT,
    RESTART,
];

/// Whether a broken check `broke` is what a scenario's `expect_violation: expected` asks for:
/// the same name, or an outside check and the in-process invariant it stands for, so that one
/// bug report runs against agentsim's runtime and an outside one alike.
pub(crate) fn same_check(broke: &str, expected: &str) -> bool {
    fn stands_for(name: &str) -> Option<&'static str> {
        match name {
            COMPLETE_DELIVERY | ERROR_CASCADE => Some(ERROR_PROPAGATION),
            ITERATION_LIMIT => Some(ITERATION_BOUND),
            _ => None,
        }
    }
    broke == expected || stands_for(broke) == Some(expected) || stands_for(expected) == Some(broke)
}

/// The invariants `agentsim mock-llm` checks on a foreign runtime's requests, besides
/// `tool-pairing`.
pub(crate) const WIRE: [&str; 2] = [REPLAYED_HISTORY, REQUEST_FORMAT];
