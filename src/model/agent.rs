//! Agent definitions and the seed 002 agent-level types: [`AgentDef`] (what the workspace
//! configuration declares), the [`Catalog`] of skills and agents, and [`AgentResponse`].
//!
//! The agent core loop itself (LLM → tools → LLM until a text reply) is the runtime's turn (`runtime/turn.rs`), run by the
//! orchestration loop in [`crate::runtime`]; the main agent is the frame at the bottom of the stack.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Default iteration limit of the main agent (seed 002 `max_tool_iterations`).
pub(crate) const MAIN_MAX_ITERATIONS: u32 = 10;
/// Default iteration limit of a stack frame (seed 000 `StackFrame.max_iterations`).
pub(crate) const FRAME_MAX_ITERATIONS: u32 = 25;

/// What kind of agent a definition is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AgentKind {
    /// The main agent, at the bottom of every stack.
    Main,
    /// A skill, invoked with `use_skill`. Skills cannot call `use_skill`.
    Skill,
    /// An agent, invoked with `use_agent`.
    Agent,
}

impl AgentKind {
    /// The `agent_type` string of seed 000.
    pub fn as_str(self) -> &'static str {
        match self {
            AgentKind::Main => "main",
            AgentKind::Skill => "skill",
            AgentKind::Agent => "agent",
        }
    }
}

/// A declared agent or skill (seed 002's workspace configuration).
#[derive(Clone, Debug, PartialEq)]
pub struct AgentDef {
    /// Name in the catalog, e.g. `research`.
    pub name: String,
    /// Main, skill or agent.
    pub kind: AgentKind,
    /// Frame name shown in transcripts: `main`, `skill:research`, `agent:research`.
    pub frame_name: Arc<str>,
    /// One-line description.
    pub description: String,
    /// System prompt, cached in each frame and sent with every request.
    pub system_prompt: Arc<str>,
    /// Model name, if set.
    pub model: Option<String>,
    /// Iteration limit of a frame of this agent.
    pub max_iterations: u32,
    /// Whitelist of external tools; `None` allows every registered tool.
    pub tools: Option<Vec<String>>,
    /// Publish stream events (text deltas, tool start/finish indicators).
    pub stream: bool,
    /// Run the external tools of one reply concurrently (DESIGN §3 item 9).
    pub parallel_tools: bool,
    /// A built-in passthrough skill (seed 000's `claude-code`, DESIGN §3 item 14): no frame is
    /// pushed; the call is one external execution.
    pub passthrough: bool,
    /// Batch delegation (DESIGN §3 item 12): the child runs to completion inside the tool call and
    /// its final text is the tool result; `None` for interactive delegation.
    pub batch: Option<EmptyAnswer>,
    /// Offered seed 001's `fork` and `wait` (DESIGN §8).
    pub fork: bool,
    /// Runs seed 001's six-step workflow (DESIGN §8).
    pub workflow: Option<WorkflowDef>,
    /// Asks by persisted questions in a triggered session (seed 003, DESIGN §9).
    pub async_questions: Option<AsyncQuestions>,
}

/// How an agent asks in a triggered session (`async_questions: true`, seed 003).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AsyncQuestions {
    /// How long a question waits for its answer (default: the runtime's
    /// `question_timeout_ms`).
    pub timeout_ms: Option<u64>,
    /// What a question that timed out does.
    pub on_timeout: OnTimeout,
    /// Where its questions' callbacks go (`question_callback`; default: the runtime's
    /// `callbacks.url`).
    pub callback: Option<Arc<str>>,
}

/// What an async question that timed out does (B22).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OnTimeout {
    /// The session fails; later answers are not found.
    Fail,
    /// This text is stored as the answer and the agent resumes with it.
    DefaultAnswer(Arc<str>),
}

/// The default depth bound: the agent a user starts is at depth 0, its children at 1, theirs at
/// 2, which spawn none.
pub const DEFAULT_MAX_DEPTH: u32 = 2;

/// An agent's workflow option (`workflow: six_step`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkflowDef {
    /// Children are spawned only by agents at a depth below this.
    pub max_depth: u32,
}

impl Default for WorkflowDef {
    fn default() -> WorkflowDef {
        WorkflowDef {
            max_depth: DEFAULT_MAX_DEPTH,
        }
    }
}

/// What a batch delegation does when the child's final answer is empty (seed 004's `AgentTool`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EmptyAnswer {
    /// The empty text is the result.
    AcceptEmpty,
    /// The last non-empty assistant text of the child's conversation is the result.
    ExtractFromConversation,
    /// Extract as above; if there is none, send the child a second message asking for a summary
    /// (seed 004's "double sendMessage").
    AskForSummary,
}

impl AgentDef {
    /// A definition with the defaults of its kind.
    pub fn new(name: impl Into<String>, kind: AgentKind) -> AgentDef {
        let name = name.into();
        let frame_name: Arc<str> = match kind {
            AgentKind::Main => "main".into(),
            AgentKind::Skill => format!("skill:{name}").into(),
            AgentKind::Agent => format!("agent:{name}").into(),
        };
        let max_iterations = match kind {
            AgentKind::Main => MAIN_MAX_ITERATIONS,
            _ => FRAME_MAX_ITERATIONS,
        };
        AgentDef {
            system_prompt: format!("You are {frame_name}.").into(),
            name,
            kind,
            frame_name,
            description: String::new(),
            model: None,
            max_iterations,
            tools: None,
            stream: false,
            parallel_tools: false,
            passthrough: false,
            batch: None,
            fork: false,
            workflow: None,
            async_questions: None,
        }
    }

    /// Whether an external tool is on this agent's whitelist.
    pub fn allows(&self, tool: &str) -> bool {
        match &self.tools {
            None => true,
            Some(list) => list.iter().any(|t| t == tool),
        }
    }
}

/// The declared main agent, skills and agents.
#[derive(Clone, Debug)]
pub struct Catalog {
    /// The main agent.
    pub main: Arc<AgentDef>,
    /// Skills by name.
    pub skills: BTreeMap<String, Arc<AgentDef>>,
    /// Agents by name.
    pub agents: BTreeMap<String, Arc<AgentDef>>,
}

impl Default for Catalog {
    fn default() -> Catalog {
        Catalog::new(AgentDef::new("main", AgentKind::Main))
    }
}

impl Catalog {
    /// A catalog with only a main agent.
    pub fn new(main: AgentDef) -> Catalog {
        Catalog {
            main: Arc::new(main),
            skills: BTreeMap::new(),
            agents: BTreeMap::new(),
        }
    }

    /// The agent named `name`: main, a skill or an agent.
    pub fn get(&self, name: &str) -> Option<&AgentDef> {
        if self.main.name == name {
            return Some(&self.main);
        }
        self.skills
            .get(name)
            .or_else(|| self.agents.get(name))
            .map(|d| &**d)
    }

    /// The agent named `name`, to change: main, a skill or an agent.
    pub fn get_mut(&mut self, name: &str) -> Option<&mut Arc<AgentDef>> {
        if self.main.name == name {
            return Some(&mut self.main);
        }
        match self.skills.get_mut(name) {
            Some(def) => Some(def),
            None => self.agents.get_mut(name),
        }
    }

    /// Adds a skill or an agent (by its kind).
    pub fn add(&mut self, def: AgentDef) -> &mut Catalog {
        let map = match def.kind {
            AgentKind::Skill => &mut self.skills,
            AgentKind::Agent => &mut self.agents,
            AgentKind::Main => {
                self.main = Arc::new(def);
                return self;
            }
        };
        map.insert(def.name.clone(), Arc::new(def));
        self
    }
}

/// One tool call of a turn, with its outcome (seed 002's `tool_calls` entries).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ToolCallRecord {
    /// The `tool_use` id.
    pub id: Arc<str>,
    /// Tool name.
    pub name: Arc<str>,
    /// JSON input.
    pub input: Arc<Value>,
    /// Result text (empty if the tool never answered).
    pub result: Arc<str>,
    /// Whether the result is an error.
    pub is_error: bool,
}

/// Seed 002's `AgentResponse`: what one user message to the main agent produced.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AgentResponse {
    /// The text sent to the user (a limit or error notice when the turn failed).
    pub text: Arc<str>,
    /// Every tool call of the turn, in order.
    pub tool_calls: Vec<ToolCallRecord>,
    /// Iterations the main frame used.
    pub iterations: u32,
}
