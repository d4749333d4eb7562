//! Seed 001's six-step workflow (DESIGN §8), as data: where a workflow agent is, the prompts of
//! its decision calls, and how a decision's text is read. The runtime moves an agent through the
//! steps (`runtime/workflow.rs`); every decision is an ordinary model call of the agent, so every
//! invariant applies to it.
//!
//! 1. **Clarify**: the reply `NO` goes on; any other text is a question to the user.
//! 2. **Blocking questions**: `NO_QUESTION` goes on; any other text is a question, at most three.
//! 3. **Subquestions**: `NONE`, or lines, of which the first four non-empty ones are kept; skipped
//!    at the agent's `max_depth`.
//! 4. **Main execution**: one child per subquestion runs the same workflow concurrently (a fork of
//!    the agent's definition, with only the subquestion as its task) while the agent runs its
//!    ordinary tool loop; the first reply without a tool use ends it. The agent then waits for
//!    every child.
//! 5. **Checkpoints**: interventions act as they do for any agent (before each model call and
//!    tool dispatch, at once while it waits).
//! 6. **Summary**: one call, given each child's status and result. A summary that contains
//!    `needs_more_info: yes` (in any case) asks the user it as a question, once; the answer runs
//!    one more main execution and one more summary, which is final. The summary is the agent's
//!    result, and `metadata.subagents` lists each child's id, status and result.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// The reply that declines step 1's clarification.
pub const NO: &str = "NO";
/// The reply that ends step 2's blocking questions.
pub const NO_QUESTION: &str = "NO_QUESTION";
/// The reply of step 3 with no subquestion.
pub const NONE: &str = "NONE";
/// The mark of a summary that needs more information (matched in any case).
pub(crate) const NEEDS_MORE_INFO: &str = "needs_more_info: yes";
/// At most this many blocking questions.
pub(crate) const MAX_BLOCKING: u8 = 3;
/// At most this many subquestions.
pub(crate) const MAX_SUBQUESTIONS: usize = 4;

/// Step 1's prompt.
pub(crate) const CLARIFY_PROMPT: &str = "Workflow step 1, clarify: if the task is unclear, reply with one question for the user; otherwise reply NO.";
/// Step 2's prompt.
pub(crate) const BLOCKING_PROMPT: &str = "Workflow step 2, blocking questions: if something must be answered before you can start, reply with one question for the user; otherwise reply NO_QUESTION.";
/// Step 3's prompt.
pub(crate) const SUBQUESTIONS_PROMPT: &str = "Workflow step 3, subquestions: list up to four independent subquestions, one per line, or reply NONE.";
/// Step 4's prompt.
pub(crate) const MAIN_PROMPT: &str = "Workflow step 4: carry out the task.";
/// Step 4's prompt after the user answered a summary's question.
pub(crate) const MAIN_AGAIN_PROMPT: &str =
    "Workflow step 4 again: carry out the task with the user's answer.";

pub use crate::model::agent::{WorkflowDef, DEFAULT_MAX_DEPTH};

/// Where a workflow agent is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Step {
    /// Created, its task in its session; the workflow begins at its first turn.
    Pending,
    /// Step 1.
    Clarify,
    /// Step 2.
    Blocking,
    /// Step 3.
    Subquestions,
    /// Step 4: the ordinary tool loop, then the wait for every child.
    Main,
    /// Step 6.
    Summary,
    /// Step 6 asked the user for more information.
    MoreInfo,
}

impl Step {
    /// Its name in events and `state.json`.
    pub fn as_str(self) -> &'static str {
        match self {
            Step::Pending => "pending",
            Step::Clarify => "clarify",
            Step::Blocking => "blocking",
            Step::Subquestions => "subquestions",
            Step::Main => "main",
            Step::Summary => "summary",
            Step::MoreInfo => "more_info",
        }
    }
}

/// A workflow agent's progress, kept in its node (and in `state.json`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkflowRun {
    /// The step it is at.
    pub step: Step,
    /// Its depth: 0 for an agent a user or a tool started, its parent's plus one for a child.
    pub depth: u32,
    /// Blocking questions asked so far.
    pub asked: u8,
    /// Whether a summary already asked for more information.
    pub more_info: bool,
}

impl WorkflowRun {
    /// A run at `depth` that has not begun.
    pub fn pending(depth: u32) -> WorkflowRun {
        WorkflowRun {
            step: Step::Pending,
            depth,
            asked: 0,
            more_info: false,
        }
    }
}

/// Whether a decision's text is exactly `sentinel` (surrounding blanks ignored).
pub fn is(text: &str, sentinel: &str) -> bool {
    text.trim() == sentinel
}

/// Step 3's subquestions: `NONE` gives none; otherwise each non-empty trimmed line, the first
/// four.
pub fn subquestions(text: &str) -> Vec<Arc<str>> {
    if is(text, NONE) {
        return Vec::new();
    }
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .take(MAX_SUBQUESTIONS)
        .map(Arc::from)
        .collect()
}

/// Whether a summary asks for more information.
pub fn needs_more_info(summary: &str) -> bool {
    summary.to_lowercase().contains(NEEDS_MORE_INFO)
}

/// The question a workflow agent waits on: the text of its last reply (the decision that asked).
pub(crate) fn question_of(session: &crate::model::transcript::Session) -> String {
    session
        .messages
        .iter()
        .rev()
        .find(|m| m.role == crate::model::transcript::Role::Assistant)
        .map(|m| m.text())
        .unwrap_or_default()
}

/// Step 6's prompt, with each child's task, status and result.
pub(crate) fn summary_prompt(children: &[(Arc<str>, &str, Arc<str>)]) -> String {
    let mut prompt = String::from(
        "Workflow step 6, summary: summarize what you found. If you need more information from the user, include the line needs_more_info: yes.",
    );
    if !children.is_empty() {
        prompt.push_str("\nSubagents:");
        for (task, status, result) in children {
            prompt.push_str(&format!("\n- {task} [{status}]: {result}"));
        }
    }
    prompt
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subquestions_keep_the_first_four_non_empty_lines() {
        assert!(subquestions("  NONE \n").is_empty());
        let qs = subquestions("a\n\n  b  \nc\nd\ne\nf");
        let qs: Vec<&str> = qs.iter().map(|q| &**q).collect();
        assert_eq!(qs, ["a", "b", "c", "d"]);
        // NONE among other lines is a line like any other.
        assert_eq!(subquestions("NONE\nx").len(), 2);
        assert!(subquestions("").is_empty());
    }

    #[test]
    fn sentinels_and_the_more_info_mark() {
        assert!(is(" NO\n", NO));
        assert!(!is("NO, but", NO));
        assert!(!is("no", NO));
        assert!(needs_more_info("Done.\nNEEDS_MORE_INFO: YES"));
        assert!(!needs_more_info("needs_more_info: no"));
    }
}
