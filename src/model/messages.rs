//! The exact strings the runtime writes into conversations or sends to the user.
//!
//! DESIGN §3 fixes them so that runs are comparable with the Python original of seed 000. Strings
//! in the second group are display-only: the `no-display-leak` invariant reports any of them that
//! reaches a conversation as model-visible content.

/// Result a parent receives when its child exceeds its iteration limit.
pub(crate) const CHILD_MAX_ITERATIONS: &str = "Agent reached maximum iterations.";
/// Result for tool uses that follow `complete` in the same reply.
pub(crate) const SKIPPED_AFTER_COMPLETE: &str = "Skipped: agent completed.";
/// Result for tool uses still unresolved when a frame stops at its iteration limit.
pub(crate) const SKIPPED_AFTER_LIMIT: &str = "Skipped: agent reached maximum iterations.";
/// Result for every pending `tool_use` when the user cancels.
pub(crate) const CANCELLED_BY_USER: &str = "Cancelled by user.";

/// Sent to the user when the main agent exceeds its iteration limit (display-only).
pub(crate) const USER_MAX_STEPS: &str = "Agent reached maximum steps.";
/// Sent to the user after a cancel word unwound the stack (display-only).
pub(crate) const USER_CANCELLED: &str = "Cancelled.";
/// Sent to the user when an intervention deleted the main agent during its turn (display-only).
pub(crate) const USER_AGENT_DELETED: &str = "Stopped: the agent was deleted.";

/// Result of every tool use a deleted agent leaves open, and the error result its parent gets
/// (DESIGN §8); also the deleted node's result.
pub(crate) const AGENT_DELETED: &str = "Agent deleted by user.";
/// Result of a fork cancelled because its caller's frame ended (DESIGN §8).
pub(crate) const FORK_CANCELLED: &str = "Cancelled: parent ended.";

/// `Tool '<name>' is not available to a fork`: a fork never takes over the conversation, so it
/// does not delegate interactively (its questions wait for an answer by id instead).
pub(crate) fn not_available_to_fork(name: &str) -> String {
    tool_says(name, FOR_FORK)
}

/// Whether `content` is [`not_available_to_fork`]`(name)` (without building it).
pub(crate) fn is_not_available_to_fork(content: &str, name: &str) -> bool {
    is_tool_saying(content, name, FOR_FORK)
}

/// `No fork with handle <n>` (DESIGN §8).
pub(crate) fn no_fork(handle: &str) -> String {
    format!("No fork with handle {handle}")
}

/// `LLM error: <message>`: the result a parent receives when its child's LLM call fails, and, at
/// the bottom of the stack, what the user is sent (as the Python original of seed 000 does).
pub(crate) fn llm_error(message: &str) -> String {
    format!("LLM error: {message}")
}

/// The refusals name the tool between these and one of the tails below.
const TOOL_OPEN: &str = "Tool '";
const TOOL_CLOSE: &str = "'";
const NOT_FOUND: &str = " not found";
const NOT_AVAILABLE: &str = " is not available to this agent";
const FOR_FORK: &str = " is not available to a fork";

fn tool_says(name: &str, tail: &str) -> String {
    [TOOL_OPEN, name, TOOL_CLOSE, tail].concat()
}

/// Whether `content` is `tool_says(name, tail)`: read in place, since the observer asks it of
/// every result of a built-in tool.
fn is_tool_saying(content: &str, name: &str, tail: &str) -> bool {
    content
        .strip_prefix(TOOL_OPEN)
        .and_then(|rest| rest.strip_suffix(tail))
        .and_then(|rest| rest.strip_suffix(TOOL_CLOSE))
        == Some(name)
}

/// `Tool '<name>' not found`.
pub(crate) fn tool_not_found(name: &str) -> String {
    tool_says(name, NOT_FOUND)
}

/// Whether `content` is [`tool_not_found`]`(name)` (without building it).
pub(crate) fn is_tool_not_found(content: &str, name: &str) -> bool {
    is_tool_saying(content, name, NOT_FOUND)
}

/// `Tool execution failed: <message>`.
pub(crate) fn tool_failed(message: &str) -> String {
    format!("Tool execution failed: {message}")
}

/// `Tool '<name>' is not available to this agent` (outside the frame's whitelist, or `complete`
/// called by the main agent).
pub(crate) fn tool_not_available(name: &str) -> String {
    tool_says(name, NOT_AVAILABLE)
}

/// Whether `content` is [`tool_not_available`]`(name)` (without building it).
pub(crate) fn is_tool_not_available(content: &str, name: &str) -> bool {
    is_tool_saying(content, name, NOT_AVAILABLE)
}

/// `Tool '<name>' timed out after <N>s` (DESIGN §3 item 10).
pub(crate) fn tool_timed_out(name: &str, timeout_ms: u64) -> String {
    if timeout_ms % 1000 == 0 {
        format!("Tool '{name}' timed out after {}s", timeout_ms / 1000)
    } else {
        format!(
            "Tool '{name}' timed out after {}s",
            timeout_ms as f64 / 1000.0
        )
    }
}

/// Skills cannot call `use_skill` (DESIGN §3 item 4).
pub(crate) const SKILL_CANNOT_USE_SKILL: &str = "Skills cannot call use_skill";

/// `Agent '<name>' cannot invoke itself` (DESIGN §3 item 4).
pub(crate) fn cannot_invoke_itself(name: &str) -> String {
    format!("Agent '{name}' cannot invoke itself")
}

/// `Missing required field: <field>` (DESIGN §3 item 13).
pub(crate) fn missing_field(field: &str) -> String {
    format!("Missing required field: {field}")
}

/// `Skill '<name>' not found. Available: a, b` or `Agent '<name>' ...` (DESIGN §3 item 13).
pub(crate) fn not_found_available<'a>(
    what: &str,
    name: &str,
    available: impl Iterator<Item = &'a str>,
) -> String {
    let list: Vec<&str> = available.collect();
    format!("{what} '{name}' not found. Available: {}", list.join(", "))
}

/// The display-only sentinel of seed 004's runtime.
pub(crate) const INTERRUPTED_SENTINEL: &str = "Interrupted. Tell Ally what to do instead.";

/// If `content` is (or, for seed 004's sentinel, contains) a display-only string, that string.
/// The `no-display-leak` invariant calls this on every `tool_result` the runtime writes.
#[inline]
pub(crate) fn display_only(content: &str) -> Option<&'static str> {
    // The length test spares building a substring searcher for the usual short result.
    if content.len() >= INTERRUPTED_SENTINEL.len() && content.contains(INTERRUPTED_SENTINEL) {
        return Some(INTERRUPTED_SENTINEL);
    }
    [USER_MAX_STEPS, USER_CANCELLED, USER_AGENT_DELETED]
        .into_iter()
        .find(|d| content == *d)
}

/// The second message a batch delegation sends a child whose answer was empty (seed 004).
pub(crate) const SUMMARY_PROMPT: &str = "Please provide a concise summary of what you accomplished, found, or determined while working on this task.";

/// Result for `ask_user` called by a batch child, which cannot talk to the user.
pub(crate) const ASK_USER_IN_BATCH: &str = "Tool 'ask_user' is not available to a batch agent";

/// The answer to `ask_user` when no user is there (`settings: { query_user: none }`).
pub(crate) const NO_ANSWER: &str = "No answer from the user.";

/// The continuation prompt an agent gets after an activity timeout it may continue from.
pub(crate) const CONTINUATION_PROMPT: &str = "Continue the task from where you left off.";

/// Result for tool uses aborted by an interruption.
pub(crate) const TOOL_INTERRUPTED: &str = "[Request interrupted by user for tool use]";

/// `Agent interrupted: <cause>`, the failed tool result a fixed batch delegation returns.
pub(crate) fn agent_interrupted(cause: &str) -> String {
    format!("Agent interrupted: {cause}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    type Refusal = (fn(&str) -> String, fn(&str, &str) -> bool);
    const REFUSALS: [Refusal; 3] = [
        (tool_not_found, is_tool_not_found),
        (tool_not_available, is_tool_not_available),
        (not_available_to_fork, is_not_available_to_fork),
    ];

    #[test]
    fn a_refusal_is_recognised_in_place_only_for_its_own_tool_and_kind() {
        assert_eq!(tool_not_found("echo"), "Tool 'echo' not found");
        assert!(is_tool_not_found("Tool 'echo' not found", "echo"));
        assert!(!is_tool_not_found("Tool 'echo' not found", "ech"));
        assert!(!is_tool_not_found(
            "Tool 'echo' is not available to this agent",
            "echo"
        ));
        assert!(!is_tool_not_available("Tool 'echo' not found", "echo"));
        assert!(!is_tool_not_found("Tool 'echo not found", "echo"));
        assert!(!is_tool_not_found("tool 'echo' not found", "echo"));
        // A name that holds a tail of its own is read whole.
        let odd = "x' not found";
        assert!(is_tool_not_found(&tool_not_found(odd), odd));
        assert!(!is_tool_not_found(&tool_not_found(odd), "x"));
    }

    proptest! {
        #[test]
        fn reading_a_refusal_in_place_agrees_with_building_it(
            name in "[a-z' ]{0,6}",
            other in "[a-z' ]{0,6}",
            kind in 0usize..3,
            built in any::<bool>(),
        ) {
            let (make, is) = REFUSALS[kind];
            let content = if built { make(&other) } else { other.clone() };
            prop_assert_eq!(is(&content, &name), content == make(&name));
            for (make_other, _) in REFUSALS {
                prop_assert_eq!(is(&make_other(&name), &name), make_other(&name) == make(&name));
            }
        }
    }
}
