//! A frame: everything needed to pause and resume one agent (seed 000's `StackFrame`), and the
//! [`Phase`] that says what it waits for.

use std::sync::Arc;

use uuid::Uuid;

use crate::model::agent::{AgentDef, AgentKind};
use crate::model::ids::CallId;
use crate::model::llm::Usage;
use crate::model::transcript::{BlockAt, Content, Session};

/// One tool of a parallel batch (DESIGN §3 item 9).
#[derive(Clone, Debug, PartialEq)]
pub struct BatchItem {
    /// The run's id.
    pub call: CallId,
    /// The `tool_use` it answers.
    pub at: BlockAt,
    /// The outcome, once the tool finished.
    pub output: Option<(Arc<str>, bool)>,
    /// Whether its result is already in the session (only the planted completion-order bug
    /// appends results before the whole batch finished).
    pub appended: bool,
    /// The timeout timer, if the tool has one.
    pub timer: Option<CallId>,
}

/// Where a frame is in its turn: what it waits for, if anything.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum Phase {
    /// At the head of the iteration loop: the next step checks the limit and calls the model or
    /// runs unresolved tool uses.
    #[default]
    Loop,
    /// Running the unresolved tool uses of the last reply, in order.
    RunTools,
    /// Waiting for a model reply; `partial` collects a streamed reply.
    AwaitLlm {
        /// The call.
        call: CallId,
        /// Blocks streamed so far.
        partial: Content,
    },
    /// Waiting for one external tool.
    AwaitTool {
        /// The run.
        call: CallId,
        /// The `tool_use` it answers.
        at: BlockAt,
        /// The name it runs under when it is not the tool use's own (a passthrough skill).
        name: Option<Arc<str>>,
        /// The timeout timer, if any.
        timer: Option<CallId>,
    },
    /// Waiting for a parallel batch of external tools.
    AwaitTools {
        /// The batch, in reply order.
        batch: Vec<BatchItem>,
    },
    /// A child frame is above this one.
    AwaitChild,
    /// The frame sent text and waits for the user's next message.
    AwaitUser,
    /// The frame asked the user a question with `ask_user`; the answer becomes the tool's result.
    AwaitAnswer {
        /// The `ask_user` tool use.
        tool_use_id: Arc<str>,
    },
}

/// Everything needed to pause and resume one agent (seed 000's `StackFrame`).
#[derive(Clone, Debug)]
pub struct StackFrame {
    /// Unique id.
    pub frame_id: Uuid,
    /// The agent's definition (name, kind, prompt, limits, whitelist).
    pub agent: Arc<AgentDef>,
    /// The frame's conversation.
    pub session: Session,
    /// Cached system prompt.
    pub system_prompt: Arc<str>,
    /// Iterations used over the frame's whole life.
    pub iteration: u32,
    /// The frame's iteration limit.
    pub max_iterations: u32,
    /// The parent's `tool_use` this frame answers when it completes; `None` for the main frame.
    pub parent_tool_use_id: Option<Arc<str>>,
    /// Tags this frame's entries in `context.jsonl`.
    pub agent_session_id: Uuid,
    /// Token usage of this frame's model calls.
    pub usage: Usage,
    /// Where the frame is in its turn.
    pub phase: Phase,
    /// Index in `session.messages` where the current user turn began (for [`crate::model::agent::AgentResponse`]).
    pub turn_start: usize,
    /// The frame resumes after a child's result (only the skip-unresolved-after-child planted bug
    /// reads it).
    pub resumed_from_child: bool,
    /// Sends made to a batch child so far (0 for interactive frames).
    pub batch_sends: u32,
    /// Watchdog and interruption state (used only when interruptions are modelled).
    pub watch: crate::agents::watchdog::Watch,
}

impl StackFrame {
    /// `main`, `skill:<name>` or `agent:<name>`.
    pub fn agent_name(&self) -> &Arc<str> {
        &self.agent.frame_name
    }

    /// `main`, `skill` or `agent`.
    pub fn agent_type(&self) -> AgentKind {
        self.agent.kind
    }

    /// Whether this is the main agent's frame.
    pub fn is_main(&self) -> bool {
        self.agent.kind == AgentKind::Main
    }

    /// Whether the frame waits for the user (after sending text or asking a question).
    pub fn awaits_user(&self) -> bool {
        matches!(self.phase, Phase::AwaitUser | Phase::AwaitAnswer { .. })
    }
}
