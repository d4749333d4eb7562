//! A frame: everything needed to pause and resume one agent (seed 000's `StackFrame`), and the
//! [`Phase`] that says what it waits for.

use std::sync::Arc;

use smallvec::SmallVec;

use uuid::Uuid;

use crate::agents::tree::Status;
use crate::model::agent::{AgentDef, AgentKind};
use crate::model::ids::{CallId, FrameId};
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
    /// Waiting for the children it spawned (one for an interactive delegation).
    AwaitChildren {
        /// The children, in spawn order.
        children: SmallVec<[FrameId; 1]>,
    },
    /// The frame sent text and waits for the user's next message.
    AwaitUser,
    /// The frame asked the user a question with `ask_user`; the answer becomes the tool's result.
    AwaitAnswer {
        /// The `ask_user` tool use (`None` for a workflow's question, which the model's decision
        /// text asked).
        tool_use_id: Option<Arc<str>>,
        /// The question's id (an answer may name it).
        question: Uuid,
        /// An async question's timeout (seed 003) and when it fires, in the driver's ms.
        timer: Option<(CallId, u64)>,
    },
    /// A workflow agent's main execution ended; it waits for every fork it started to end.
    AwaitSubagents,
    /// The frame's `wait` tool waits for one of its forks to end.
    AwaitFork {
        /// The `wait` tool use.
        at: BlockAt,
        /// The fork's handle.
        handle: u32,
    },
}

/// A fork a frame started (seed 001's `fork(prompt)`), by handle.
#[derive(Clone, Debug, PartialEq)]
pub struct ForkRecord {
    /// Its handle: 1, 2, ... per frame.
    pub handle: u32,
    /// The fork's agent id.
    pub agent_id: Uuid,
    /// The fork's frame while it runs.
    pub frame: Option<FrameId>,
    /// Its final text and whether it failed, once it ended.
    pub result: Option<(Arc<str>, bool)>,
    /// Its status: running, then how it ended.
    pub status: Status,
    /// The task it was started with.
    pub task: Arc<str>,
}

/// What makes a frame a fork: its caller and its handle there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ForkOf {
    /// The frame that called `fork`.
    pub caller: FrameId,
    /// The handle the caller got.
    pub handle: u32,
}

/// A frame's place in the agent tree (DESIGN §8): the node fields that are not the frame's own.
/// What most nodes never have is boxed in [`NodeMore`], so that a frame stays small to move.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeState {
    /// Its status.
    pub status: Status,
    /// The agent that started it (`None` for a main frame).
    pub parent_agent: Option<Uuid>,
    /// The task it was started with, or the one a `modify` gave it.
    pub user_content: Arc<str>,
    /// The agents it started, in order.
    pub subagents: Vec<Uuid>,
    /// When it started.
    pub created_at: u64,
    /// Its place in the order of creation (the tree lists nodes in it).
    pub order: u64,
    /// The rest, once it has any (see [`NodeState::more`]).
    pub more: Option<Box<NodeMore>>,
}

/// The node fields few frames ever set: a user's comment, metadata, a pending modification,
/// forks.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeMore {
    /// The last comment a user gave it.
    pub user_comment: Option<Arc<str>>,
    /// Free-form data.
    pub metadata: std::collections::BTreeMap<String, serde_json::Value>,
    /// A modification's new task, delivered before its next model call.
    pub pending_modify: Option<Arc<str>>,
    /// Its forks, by handle.
    pub forks: Vec<ForkRecord>,
    /// Set when the frame is itself a fork.
    pub fork_of: Option<ForkOf>,
    /// A workflow agent's progress (`workflow: six_step`).
    pub workflow: Option<crate::agents::workflow::WorkflowRun>,
}

static NO_MORE: NodeMore = NodeMore {
    user_comment: None,
    metadata: std::collections::BTreeMap::new(),
    pending_modify: None,
    forks: Vec::new(),
    fork_of: None,
    workflow: None,
};

impl NodeState {
    /// The rarely set fields (empty ones when none was ever set).
    #[inline]
    pub fn more(&self) -> &NodeMore {
        self.more.as_deref().unwrap_or(&NO_MORE)
    }

    /// The rarely set fields, to change.
    #[inline]
    pub(crate) fn more_mut(&mut self) -> &mut NodeMore {
        self.more.get_or_insert_with(Box::default)
    }

    /// Whether the frame is a fork.
    #[inline]
    pub(crate) fn is_fork(&self) -> bool {
        self.more.as_ref().is_some_and(|m| m.fork_of.is_some())
    }
}

/// Everything needed to pause and resume one agent (seed 000's `StackFrame`).
///
/// Its fields belong to the runtime; a driver, an observer or a test reads a frame through the
/// methods below.
#[derive(Clone, Debug)]
pub struct StackFrame {
    /// Its place in the runtime's frame arena (set when it is pushed).
    pub(crate) id: FrameId,
    /// The conversation it belongs to (the slot of its session key).
    pub(crate) conversation: u32,
    /// The frame that spawned it; `None` for a main frame.
    pub(crate) parent: Option<FrameId>,
    /// Unique, stable id (persisted; the agent id of the tree to come).
    pub(crate) frame_id: Uuid,
    /// The agent's definition (name, kind, prompt, limits, whitelist).
    pub(crate) agent: Arc<AgentDef>,
    /// The frame's conversation.
    pub(crate) session: Session,
    /// Cached system prompt.
    pub(crate) system_prompt: Arc<str>,
    /// Iterations used over the frame's whole life.
    pub(crate) iteration: u32,
    /// The frame's iteration limit.
    pub(crate) max_iterations: u32,
    /// The parent's `tool_use` this frame answers when it completes; `None` for the main frame.
    pub(crate) parent_tool_use_id: Option<Arc<str>>,
    /// Tags this frame's entries in `context.jsonl`.
    pub(crate) agent_session_id: Uuid,
    /// Token usage of this frame's model calls.
    pub(crate) usage: Usage,
    /// Where the frame is in its turn.
    pub(crate) phase: Phase,
    /// Index in `session.messages` where the current user turn began (for
    /// [`crate::model::agent::AgentResponse`]).
    pub(crate) turn_start: usize,
    /// The frame resumes after a child's result (only the skip-unresolved-after-child planted bug
    /// reads it).
    pub(crate) resumed_from_child: bool,
    /// Sends made to a batch child so far (0 for interactive frames).
    pub(crate) batch_sends: u32,
    /// Watchdog and interruption state (used only when interruptions are modelled).
    pub(crate) watch: crate::agents::watchdog::Watch,
    /// Its node in the agent tree.
    pub(crate) node: NodeState,
}

impl StackFrame {
    /// The one constructor of a frame: `agent` running `session` (tagged `agent_session_id` in the
    /// journal), answering `parent_tool_use_id` when it ends (`None` for a main frame). It starts
    /// at the loop head with no iterations used; the arena gives it its [`FrameId`] when it is
    /// pushed.
    pub(crate) fn new(
        frame_id: Uuid,
        agent: Arc<AgentDef>,
        session: Session,
        agent_session_id: Uuid,
        parent_tool_use_id: Option<Arc<str>>,
    ) -> StackFrame {
        let user_content = Arc::default();
        StackFrame::with_task(
            frame_id,
            agent,
            session,
            agent_session_id,
            parent_tool_use_id,
            0,
            user_content,
        )
    }

    /// [`StackFrame::new`] with its task (`user_content`) and its batch sends so far given:
    /// built whole, so that a frame built in its place is never copied.
    #[inline(always)]
    pub(crate) fn with_task(
        frame_id: Uuid,
        agent: Arc<AgentDef>,
        session: Session,
        agent_session_id: Uuid,
        parent_tool_use_id: Option<Arc<str>>,
        batch_sends: u32,
        user_content: Arc<str>,
    ) -> StackFrame {
        StackFrame {
            id: FrameId::new(u32::MAX, 0),
            conversation: 0,
            parent: None,
            frame_id,
            system_prompt: agent.system_prompt.clone(),
            max_iterations: agent.max_iterations,
            agent,
            session,
            iteration: 0,
            parent_tool_use_id,
            agent_session_id,
            usage: Usage::default(),
            phase: Phase::Loop,
            turn_start: 0,
            resumed_from_child: false,
            batch_sends,
            watch: Default::default(),
            node: NodeState {
                user_content,
                ..NodeState::default()
            },
        }
    }

    /// Its id in the runtime.
    pub fn id(&self) -> FrameId {
        self.id
    }

    /// The frame that spawned it (`None` for a main frame).
    pub fn parent(&self) -> Option<FrameId> {
        self.parent
    }

    /// Its stable id, as events and the persisted state name it.
    pub fn frame_id(&self) -> Uuid {
        self.frame_id
    }

    /// The agent it runs.
    pub fn agent(&self) -> &Arc<AgentDef> {
        &self.agent
    }

    /// Its conversation with the model.
    pub fn session(&self) -> &Session {
        &self.session
    }

    /// Its session's id (the tag of its journal entries).
    pub fn agent_session_id(&self) -> Uuid {
        self.agent_session_id
    }

    /// Model iterations used so far, over the frame's whole life.
    pub fn iteration(&self) -> u32 {
        self.iteration
    }

    /// Its iteration limit.
    pub fn max_iterations(&self) -> u32 {
        self.max_iterations
    }

    /// The parent's `tool_use` it answers when it ends.
    pub fn parent_tool_use_id(&self) -> Option<&Arc<str>> {
        self.parent_tool_use_id.as_ref()
    }

    /// Token usage of its model calls.
    pub fn usage(&self) -> Usage {
        self.usage
    }

    /// What it waits for.
    pub fn phase(&self) -> &Phase {
        &self.phase
    }

    /// `main`, `skill:<name>` or `agent:<name>`.
    pub fn agent_name(&self) -> &Arc<str> {
        &self.agent.frame_name
    }

    /// Whether this is the main agent's frame (a fork of the main agent is not).
    pub(crate) fn is_main(&self) -> bool {
        self.agent.kind == AgentKind::Main && !self.node.is_fork()
    }

    /// Its status in the agent tree.
    pub fn status(&self) -> Status {
        self.node.status
    }

    /// Its node state in the agent tree.
    pub fn node(&self) -> &NodeState {
        &self.node
    }

    /// Whether it is a fork (it runs beside its caller, off every stack).
    pub(crate) fn is_fork(&self) -> bool {
        self.node.is_fork()
    }

    /// Whether the frame waits for the user (after sending text or asking a question).
    pub(crate) fn awaits_user(&self) -> bool {
        matches!(self.phase, Phase::AwaitUser | Phase::AwaitAnswer { .. })
    }
}
