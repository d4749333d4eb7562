//! Coverage of the runtime's behaviour as named features, read from a run's events: pushes and
//! pops by kind, reason and depth band, each skip reason, model errors and tool failures by
//! frame kind, stalls, hangs, restarts by phase, batch delegation, and the situation each
//! invariant needs before it can break (its precondition). `agentsim explore` reports which
//! features its runs reached and steers generation toward the rare ones.

use std::sync::Arc;

use uuid::Uuid;

use crate::agents::tools::builtin;
use crate::agents::tree::{Intervention, InterventionOutcome, Status};
use crate::model::agent::AgentKind;
use crate::model::llm::LlmErrorKind;
use crate::model::messages;
use crate::observe::names;
use crate::protocol::{Event, PopReason};

const BANDS: [&str; 3] = ["depth 2", "depth 3-4", "depth 5+"];
const CHILD_POPS: [&str; 4] = ["completed", "max iterations", "error", "cancelled"];
const MAIN_POPS: [&str; 4] = ["answered", "max iterations", "error", "cancelled"];
const SKIPS: [&str; 4] = [
    messages::SKIPPED_AFTER_COMPLETE,
    messages::SKIPPED_AFTER_LIMIT,
    messages::CANCELLED_BY_USER,
    messages::TOOL_INTERRUPTED,
];
const FORK_ENDS: [&str; 4] = ["completed", "failed", "cancelled", "deleted"];
const INTERVENTIONS: [&str; 4] = ["deletion", "modification", "refused", "not found"];
const ERRORS: [&str; 4] = ["rate limit", "overloaded", "network", "other"];

/// The workflow steps entered that coverage counts.
const WORKFLOW_STEPS: [&str; 5] = ["clarify", "blocking", "subquestions", "main", "summary"];

const PUSH: usize = 0; // 2 kinds x 3 bands
const POP_CHILD: usize = PUSH + 6; // 4 reasons x 3 bands
const POP_MAIN: usize = POP_CHILD + 12; // 4 reasons
const SKIP: usize = POP_MAIN + 4; // 4 reasons
const MODEL_ERROR: usize = SKIP + 4; // 4 kinds x main/child
const TOOL_FAILED: usize = MODEL_ERROR + 8; // main/child
const TOOL_TIMEOUT: usize = TOOL_FAILED + 2; // main/child
const STALL: usize = TOOL_TIMEOUT + 2;
const HANG: usize = STALL + 1;
const RESTART_IDLE: usize = HANG + 1;
const RESTART_MID_TURN: usize = RESTART_IDLE + 1;
const DELEGATION_ANSWER: usize = RESTART_MID_TURN + 1;
const DELEGATION_SUMMARY: usize = DELEGATION_ANSWER + 1;
const FORK_ENDED: usize = DELEGATION_SUMMARY + 1; // 4 ways
const INTERVENTION: usize = FORK_ENDED + 4; // 4 outcomes
const TASK_CHANGED: usize = INTERVENTION + 4;
const FORK_ASKS: usize = TASK_CHANGED + 1;
const FORK_ANSWERED: usize = FORK_ASKS + 1;
const WORKFLOW_STEP: usize = FORK_ANSWERED + 1; // 5 steps entered
const WORKFLOW_ASKS: usize = WORKFLOW_STEP + 5;
const WORKFLOW_WAITS: usize = WORKFLOW_ASKS + 1;
const WORKFLOW_DONE: usize = WORKFLOW_WAITS + 1;
const SESSION_END: usize = WORKFLOW_DONE + 1; // completed, failed
const QUESTION_TIMEOUT: usize = SESSION_END + 2; // default answer, failed, expired
const REFUSED: usize = QUESTION_TIMEOUT + 3; // outside a whitelist, fork or wait not offered
const PRE: usize = REFUSED + 2; // one per invariant
/// How many features there are.
pub const FEATURES: usize = PRE + names::ALL.len();
// A run's features are the bits of a `u128`.
const _: () = assert!(FEATURES <= 128);

/// The name of feature `i` (`i < FEATURES`).
pub fn feature_name(i: usize) -> String {
    let side = |j: usize| if j == 0 { "main" } else { "child" };
    match i {
        _ if i < POP_CHILD => {
            let (kind, band) = ((i - PUSH) / 3, (i - PUSH) % 3);
            let kind = if kind == 0 { "skill" } else { "agent" };
            format!("push {kind} at {}", BANDS[band])
        }
        _ if i < POP_MAIN => {
            let (reason, band) = ((i - POP_CHILD) / 3, (i - POP_CHILD) % 3);
            format!("pop child ({}) from {}", CHILD_POPS[reason], BANDS[band])
        }
        _ if i < SKIP => format!("pop main ({})", MAIN_POPS[i - POP_MAIN]),
        _ if i < MODEL_ERROR => format!("skip {:?}", SKIPS[i - SKIP]),
        _ if i < TOOL_FAILED => {
            let (kind, j) = ((i - MODEL_ERROR) / 2, (i - MODEL_ERROR) % 2);
            format!("model error ({}) in {}", ERRORS[kind], side(j))
        }
        _ if i < TOOL_TIMEOUT => format!("tool failure in {}", side(i - TOOL_FAILED)),
        _ if i < STALL => format!("tool timeout in {}", side(i - TOOL_TIMEOUT)),
        STALL => "model stall".into(),
        HANG => "tool hang".into(),
        RESTART_IDLE => "restart while idle".into(),
        RESTART_MID_TURN => "restart mid-turn".into(),
        DELEGATION_ANSWER => "batch child answers".into(),
        DELEGATION_SUMMARY => "batch child asked for a summary".into(),
        _ if i < INTERVENTION => format!("fork {}", FORK_ENDS[i - FORK_ENDED]),
        _ if i < TASK_CHANGED => format!("intervention: {}", INTERVENTIONS[i - INTERVENTION]),
        TASK_CHANGED => "modified task delivered".into(),
        FORK_ASKS => "fork asks the user".into(),
        FORK_ANSWERED => "user message answers a fork".into(),
        _ if i < WORKFLOW_ASKS => format!("workflow enters {}", WORKFLOW_STEPS[i - WORKFLOW_STEP]),
        WORKFLOW_ASKS => "workflow asks the user".into(),
        WORKFLOW_WAITS => "workflow waits for its subagents".into(),
        WORKFLOW_DONE => "workflow ends with its summary".into(),
        _ if i < QUESTION_TIMEOUT => {
            format!("async session {}", ["completed", "failed"][i - SESSION_END])
        }
        _ if i < REFUSED => format!(
            "async question {}",
            [
                "timed out with its default answer",
                "timed out failing its session",
                "left open by its session's expiry"
            ][i - QUESTION_TIMEOUT]
        ),
        REFUSED => "tool refused outside its agent's whitelist".into(),
        _ if i < PRE => "fork or wait refused to an agent without fork: true".into(),
        _ => format!("precondition of {}", names::ALL[i - PRE]),
    }
}

fn pre(invariant: &str) -> usize {
    PRE + names::ALL
        .iter()
        .position(|n| *n == invariant)
        .expect("a known invariant")
}

fn band(depth: usize) -> usize {
    match depth {
        0..=2 => 0,
        3..=4 => 1,
        _ => 2,
    }
}

/// The features one run reached, and what it needs to tell them from its events.
#[derive(Clone, Debug, Default)]
pub struct RunCoverage {
    bits: u128,
    persist: bool,
    /// A parent that just got a child's result: the frame and the link (a tool result of another
    /// tool use before its next model call is a pass on resuming).
    resumed: Option<(Uuid, Arc<str>)>,
    /// Links of children popped and not yet delivered.
    popped_links: Vec<Arc<str>>,
}

impl RunCoverage {
    /// Coverage of a run whose runtime persists (`persist`) or not.
    pub fn new(persist: bool) -> RunCoverage {
        RunCoverage {
            persist,
            ..RunCoverage::default()
        }
    }

    /// The features reached, one bit each.
    pub fn bits(&self) -> u128 {
        self.bits
    }

    fn hit(&mut self, i: usize) {
        self.bits |= 1 << i;
    }

    /// A restart, in the middle of a turn or not.
    pub fn restart(&mut self, mid_turn: bool) {
        self.hit(if mid_turn {
            RESTART_MID_TURN
        } else {
            RESTART_IDLE
        });
        self.hit(pre(names::RESTART_EQUIVALENCE));
    }

    /// The scripted model stalled, or a tool hung.
    pub fn stalled(&mut self, model: bool) {
        self.hit(if model { STALL } else { HANG });
    }

    /// One step's events.
    pub fn step(&mut self, events: &[Event]) {
        for event in events {
            self.event(event);
        }
    }

    fn event(&mut self, event: &Event) {
        let side = |name: &str| usize::from(name != "main");
        match event {
            Event::Push { frame, depth, .. } => {
                if frame.kind == AgentKind::Main {
                    self.hit(pre(names::MAIN_AT_BOTTOM));
                } else {
                    let kind = usize::from(frame.kind == AgentKind::Agent);
                    self.hit(PUSH + kind * 3 + band(*depth));
                    self.hit(pre(names::STACK_LINKAGE));
                    if self.persist {
                        self.hit(pre(names::JOURNAL_BEFORE_STATE));
                    }
                }
            }
            Event::Pop {
                frame,
                depth,
                reason,
                ..
            } => {
                if *reason == PopReason::MaxIterations {
                    self.hit(pre(names::ITERATION_BOUND));
                }
                if *reason == PopReason::Deleted {
                    // The end its pop stands for is a move to deleted (see the `agent-state`
                    // arm below).
                    self.hit(pre(names::STATUS_TRANSITIONS));
                }
                if frame.kind == AgentKind::Main {
                    let r = match reason {
                        PopReason::Answered | PopReason::Completed => 0,
                        PopReason::MaxIterations => 1,
                        PopReason::Error => 2,
                        PopReason::Cancelled | PopReason::Deleted => 3,
                    };
                    self.hit(POP_MAIN + r);
                    return;
                }
                let r = match reason {
                    PopReason::Completed | PopReason::Answered => 0,
                    PopReason::MaxIterations => 1,
                    PopReason::Error => 2,
                    PopReason::Cancelled | PopReason::Deleted => 3,
                };
                self.hit(POP_CHILD + r * 3 + band(depth + 1));
                self.hit(pre(names::SINGLE_DELIVERY));
                if r != 0 {
                    self.hit(pre(names::ERROR_PROPAGATION));
                }
                if let Some(link) = &frame.parent_tool_use_id {
                    self.popped_links.push(link.clone());
                }
            }
            Event::ToolResult {
                frame,
                frame_id,
                tool_use_id,
                content,
                ..
            } => {
                if let Some(i) = SKIPS.iter().position(|s| **s == **content) {
                    self.hit(SKIP + i);
                    self.hit(pre(names::TOOL_EXECUTION));
                } else if content.starts_with("Tool execution failed") {
                    self.hit(TOOL_FAILED + side(frame));
                } else if content.starts_with("Tool '") && content.contains("timed out after") {
                    self.hit(TOOL_TIMEOUT + side(frame));
                    self.hit(pre(names::TOOL_RUNS));
                } else if content.starts_with("Tool '") {
                    if content.ends_with("' is not available to this agent")
                        && !content.starts_with("Tool 'complete'")
                    {
                        self.hit(REFUSED);
                    } else if messages::is_tool_not_found(content, builtin::FORK)
                        || messages::is_tool_not_found(content, builtin::WAIT)
                    {
                        self.hit(REFUSED + 1);
                    }
                }
                if let Some(i) = self.popped_links.iter().position(|l| l == tool_use_id) {
                    self.popped_links.swap_remove(i);
                    self.resumed = Some((*frame_id, tool_use_id.clone()));
                } else if let Some((f, link)) = &self.resumed {
                    if f == frame_id && link != tool_use_id {
                        self.hit(pre(names::ITERATION_ACCOUNTING));
                        self.resumed = None;
                    }
                }
            }
            Event::LlmRequest {
                frame_id, messages, ..
            } => {
                self.hit(pre(names::PROGRESS));
                if *messages >= 3 {
                    self.hit(pre(names::TOOL_PAIRING));
                }
                if self.resumed.as_ref().is_some_and(|(f, _)| f == frame_id) {
                    self.resumed = None;
                }
            }
            Event::LlmError { frame, kind, .. } => {
                let k = match kind {
                    LlmErrorKind::RateLimit => 0,
                    LlmErrorKind::Overloaded => 1,
                    LlmErrorKind::Network => 2,
                    _ => 3,
                };
                self.hit(MODEL_ERROR + k * 2 + side(frame));
            }
            Event::UserMessage { frame, .. } if &**frame != "main" => {
                if frame.starts_with("fork:") {
                    self.hit(FORK_ANSWERED);
                }
                self.hit(pre(names::ROUTING));
            }
            Event::Queued { .. } => self.hit(pre(names::MESSAGE_DELIVERY)),
            Event::Cancelled { frames, .. } if *frames >= 2 => self.hit(pre(names::CLEANUP)),
            Event::Sent { text, .. } if messages::display_only(text).is_some() => {
                self.hit(pre(names::NO_DISPLAY_LEAK));
            }
            Event::ForkStarted { .. } => self.hit(pre(names::TREE_CONSISTENCY)),
            Event::Wait { .. } => self.hit(pre(names::FORK_WAIT)),
            Event::ForkEnded { status, result, .. } => {
                let way = match status {
                    Status::Completed => 0,
                    Status::Deleted => 3,
                    _ if **result == *messages::FORK_CANCELLED => 2,
                    _ => 1,
                };
                self.hit(FORK_ENDED + way);
            }
            Event::Intervention {
                outcome,
                user_comment,
                user_content,
                status,
                ..
            } => {
                let i = Intervention {
                    user_comment: user_comment.clone(),
                    user_content: user_content.clone(),
                    status: *status,
                };
                let o = match outcome {
                    InterventionOutcome::Accepted if i.deletes() => 0,
                    InterventionOutcome::Accepted if i.modifies() => 1,
                    InterventionOutcome::Accepted => return,
                    InterventionOutcome::Refused { .. } => 2,
                    InterventionOutcome::NotFound => 3,
                };
                self.hit(INTERVENTION + o);
                if o < 2 {
                    self.hit(pre(names::TREE_CONSISTENCY));
                }
            }
            Event::TaskChanged { .. } => self.hit(TASK_CHANGED),
            Event::WorkflowStep { step, .. } => {
                if let Some(i) = WORKFLOW_STEPS.iter().position(|s| *s == step.as_str()) {
                    self.hit(WORKFLOW_STEP + i);
                }
            }
            Event::Question {
                tool_use_id: None, ..
            } => self.hit(WORKFLOW_ASKS),
            Event::WaitSubagents { waiting: true, .. } => self.hit(WORKFLOW_WAITS),
            Event::WorkflowDone { .. } => self.hit(WORKFLOW_DONE),
            Event::Triggered { started: true, .. } => self.hit(pre(names::SESSION_LIFECYCLE)),
            Event::SessionEnded { completed, .. } => {
                self.hit(SESSION_END + usize::from(!*completed));
            }
            Event::QuestionTimedOut {
                answer, expired, ..
            } => self.hit(
                QUESTION_TIMEOUT
                    + match (answer, expired) {
                        (Some(_), _) => 0,
                        (None, false) => 1,
                        (None, true) => 2,
                    },
            ),
            Event::Question { frame, .. } if frame.starts_with("fork:") => self.hit(FORK_ASKS),

            Event::AgentState {
                from: Some(_),
                status: Status::AwaitingUser | Status::Modified | Status::Deleted,
                ..
            } => self.hit(pre(names::STATUS_TRANSITIONS)),
            Event::Delegation { what, .. } => {
                self.hit(pre(names::BATCH_ANSWER));
                self.hit(if *what == "answer" {
                    DELEGATION_ANSWER
                } else {
                    DELEGATION_SUMMARY
                });
            }
            _ => {}
        }
    }
}

/// Coverage summed over many runs: how many runs reached each feature.
#[derive(Clone, Debug)]
pub struct Coverage {
    /// Runs that reached each feature.
    pub runs: [u64; FEATURES],
}

impl Default for Coverage {
    fn default() -> Coverage {
        Coverage {
            runs: [0; FEATURES],
        }
    }
}

impl Coverage {
    /// Adds one run's features.
    pub fn add(&mut self, bits: u128) {
        for (i, n) in self.runs.iter_mut().enumerate() {
            if bits & (1 << i) != 0 {
                *n += 1;
            }
        }
    }

    /// Adds another summary.
    pub(crate) fn merge(&mut self, other: &Coverage) {
        for (a, b) in self.runs.iter_mut().zip(other.runs.iter()) {
            *a += b;
        }
    }

    /// How many features at least one run reached.
    pub fn reached(&self) -> usize {
        self.runs.iter().filter(|n| **n > 0).count()
    }

    /// The names of the features no run reached.
    pub fn never(&self) -> Vec<String> {
        (0..FEATURES)
            .filter(|&i| self.runs[i] == 0)
            .map(feature_name)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_feature_has_its_own_name() {
        let names: std::collections::BTreeSet<String> = (0..FEATURES).map(feature_name).collect();
        assert_eq!(names.len(), FEATURES);
    }

    #[test]
    fn events_reach_their_features() {
        use crate::protocol::FrameInfo;
        let child = FrameInfo {
            frame_id: Uuid::from_u128(2),
            name: "skill:r".into(),
            kind: AgentKind::Skill,
            parent_tool_use_id: Some("t1".into()),
            session_id: Uuid::from_u128(3),
        };
        let key: Arc<str> = "k".into();
        let mut c = RunCoverage::new(true);
        c.step(&[
            Event::Push {
                key: key.clone(),
                frame: child.clone(),
                depth: 2,
                frame_ref: crate::model::ids::FrameId::new(1, 0),
            },
            Event::ToolResult {
                key: key.clone(),
                frame: child.name.clone(),
                frame_id: child.frame_id,
                session_id: child.session_id,
                tool_use_id: "t9".into(),
                content: messages::SKIPPED_AFTER_COMPLETE.into(),
                is_error: true,
            },
            Event::Pop {
                key,
                frame: child,
                depth: 1,
                reason: PopReason::Error,
                iterations: 1,
                from: crate::agents::tree::Status::Running,
            },
        ]);
        let mut total = Coverage::default();
        total.add(c.bits());
        let reached: Vec<String> = (0..FEATURES)
            .filter(|&i| total.runs[i] > 0)
            .map(feature_name)
            .collect();
        assert_eq!(
            reached,
            [
                "push skill at depth 2",
                "pop child (error) from depth 2",
                "skip \"Skipped: agent completed.\"",
                "precondition of stack-linkage",
                "precondition of single-delivery",
                "precondition of error-propagation",
                "precondition of tool-execution",
                "precondition of journal-before-state",
            ]
        );
        assert_eq!(total.reached(), 8);
        assert_eq!(total.never().len(), FEATURES - 8);
    }
}
