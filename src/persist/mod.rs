//! Persistence (DESIGN §3 item 11, seed 000 v2): `state.json` holds the active stacks' frame
//! metadata and is rewritten whole (atomically) whenever a conversation goes quiet;
//! `context.jsonl` is an append-only journal of every session operation, each entry tagged with
//! its `agent_session_id`, including each child's initial message and a completion entry when a
//! frame completes or fails.
//!
//! The runtime emits both as effects ([`crate::protocol::Effect::WriteState`],
//! [`crate::protocol::Effect::AppendContext`]); the simulator keeps the bytes in memory (for restart
//! properties), [`crate::store::FileStore`] writes them to disk (for real use). [`crate::runtime::Runtime::restore`]
//! rebuilds every frame from them. A torn last line of `context.jsonl` (a crash mid-write) is
//! ignored; any other unreadable line is an error naming it, so nothing recorded is silently lost.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::model::agent::AgentKind;
use crate::model::llm::Usage;
use crate::model::transcript::{Content, Session};

/// Version of the `state.json` format.
pub(crate) const STATE_VERSION: u32 = 1;

/// One line of `context.jsonl`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum ContextEntry {
    /// A child frame's session starts (seed 000's `AgentSessionEntry`), with its initial message.
    AgentSession {
        /// The child's session.
        agent_session_id: Uuid,
        /// Catalog name of the agent.
        agent_name: String,
        /// Skill or agent.
        agent_type: AgentKind,
        /// The parent's `tool_use` it answers.
        parent_tool_use_id: Arc<str>,
        /// The initial user message.
        message: Arc<str>,
    },
    /// User text added to a session.
    User {
        /// The session.
        agent_session_id: Uuid,
        /// The text.
        text: Arc<str>,
    },
    /// A model reply added to a session.
    Assistant {
        /// The session.
        agent_session_id: Uuid,
        /// Its blocks.
        content: Content,
    },
    /// A `tool_result` added to a session.
    ToolResult {
        /// The session.
        agent_session_id: Uuid,
        /// The `tool_use` it answers.
        tool_use_id: Arc<str>,
        /// Content.
        content: Arc<str>,
        /// Whether it is an error.
        is_error: bool,
    },
    /// A fork's session starts (seed 001): a copy of its caller's first `messages` messages, then
    /// the prompt as user text.
    ForkSession {
        /// The fork's session.
        agent_session_id: Uuid,
        /// Its caller's session, as the journal has it at this line.
        caller_session_id: Uuid,
        /// How many of the caller's messages it starts with.
        messages: usize,
        /// The prompt the caller gave it.
        prompt: Arc<str>,
    },
    /// A frame completed or failed (seed 000's `AgentSessionCompleteEntry`).
    AgentSessionComplete {
        /// The session.
        agent_session_id: Uuid,
        /// The result or error text its parent received.
        result: Arc<str>,
        /// Whether it failed.
        is_error: bool,
    },
}

impl ContextEntry {
    /// The entry as one JSON line, newline included.
    pub fn line(&self) -> String {
        let mut s = serde_json::to_string(self).expect("context entries serialise");
        s.push('\n');
        s
    }
}

/// What a frame waits for when the state is written (at the end of every input the runtime
/// handles). A frame restored while it waited for a model call or a tool issues that call again.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "for", rename_all = "snake_case")]
pub enum Waiting {
    /// The user's next message.
    User,
    /// The answer to an `ask_user`.
    Answer {
        /// The `ask_user` tool use (absent for a workflow's question).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tool_use_id: Option<Arc<str>>,
        /// The question's id.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        question: Option<Uuid>,
        /// When an async question times out, in the driver's ms (seed 003).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        deadline: Option<u64>,
        /// The id of that timeout's timer, which a restore sets again under the same id.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timer: Option<u64>,
    },
    /// A child above it.
    Child,
    /// A model call (streamed chunks received so far are not kept: the call is issued again).
    Llm,
    /// One tool run.
    Tool {
        /// The `tool_use` it answers.
        tool_use_id: Arc<str>,
        /// The name it runs under when not the tool use's own (a passthrough skill).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<Arc<str>>,
    },
    /// A parallel batch of tool runs, in reply order.
    Tools {
        /// Each run of the batch.
        runs: Vec<BatchRun>,
    },
    /// A workflow agent's wait for every fork it started.
    Subagents,
    /// A `wait` for one of its forks.
    Fork {
        /// The `wait` tool use.
        tool_use_id: Arc<str>,
        /// The fork's handle.
        handle: u32,
    },
}

/// One run of a parallel batch in `state.json`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchRun {
    /// The `tool_use` it answers.
    pub tool_use_id: Arc<str>,
    /// Its outcome if it finished (kept until the whole batch is in): content and error flag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<(Arc<str>, bool)>,
}

/// A frame in `state.json` (seed 000's `StackFrameMeta`, plus what it waits for).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FrameMeta {
    /// Frame id.
    pub frame_id: Uuid,
    /// Its session in `context.jsonl`.
    pub agent_session_id: Uuid,
    /// Catalog name.
    pub agent_name: String,
    /// Main, skill or agent.
    pub agent_type: AgentKind,
    /// Model name.
    pub model: Option<String>,
    /// Iterations used.
    pub iteration: u32,
    /// Iteration limit.
    pub max_iterations: u32,
    /// The parent's `tool_use` it answers.
    pub parent_tool_use_id: Option<Arc<str>>,
    /// Tool whitelist (empty: every tool).
    pub effective_tools: Vec<String>,
    /// Whether it is a skill.
    pub is_skill_agent: bool,
    /// Sandbox environment (unused by the simulator, kept for the format).
    pub environment: BTreeMap<String, String>,
    /// What it waits for.
    pub waiting: Waiting,
    /// Where the current user turn began in its session.
    pub turn_start: usize,
    /// Its token usage.
    pub usage: Usage,
    /// Sends made to it if it is a batch child (0 for interactive frames).
    #[serde(default)]
    pub batch_sends: u32,
    /// Its place in the runtime's frame arena, which numbers its calls (a restore puts it
    /// back there, so that calls are numbered as they would have been).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slot: Option<u32>,
    /// Its node in the agent tree (absent in states written before the tree existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<NodeMeta>,
}

/// A frame's node in the agent tree, as `state.json` keeps it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeMeta {
    /// Its status.
    pub status: crate::agents::tree::Status,
    /// The agent that started it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_agent: Option<Uuid>,
    /// The last comment a user gave it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_comment: Option<Arc<str>>,
    /// Its task.
    pub user_content: Arc<str>,
    /// The agents it started.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subagents: Vec<Uuid>,
    /// Free-form data.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, serde_json::Value>,
    /// When it started.
    pub created_at: u64,
    /// Its place in the order of creation.
    pub order: u64,
    /// A modification not yet delivered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_modify: Option<Arc<str>>,
    /// The forks it started, by handle.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub forks: Vec<ForkMeta>,
    /// What makes it a fork: its caller and its handle there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fork_of: Option<ForkOfMeta>,
    /// A workflow agent's progress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow: Option<crate::agents::workflow::WorkflowRun>,
}

/// A fork a frame started, as `state.json` keeps it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ForkMeta {
    /// Its handle.
    pub handle: u32,
    /// Its agent id (the fork's `frame_id` while it runs).
    pub agent_id: Uuid,
    /// Its final text and whether it failed, once it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<(Arc<str>, bool)>,
    /// How it ended (absent while it runs, and in states written before it was kept: then read
    /// from the error flag).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<crate::agents::tree::Status>,
    /// The task it was started with.
    #[serde(default, skip_serializing_if = "str::is_empty")]
    pub task: Arc<str>,
}

/// A fork's caller and handle, as `state.json` keeps them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForkOfMeta {
    /// The caller's agent id.
    pub caller: Uuid,
    /// The handle the caller got.
    pub handle: u32,
}

/// One conversation in `state.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ConversationState {
    /// Session key.
    pub key: String,
    /// The main agent's session in `context.jsonl`.
    pub main_session_id: Uuid,
    /// Token usage so far.
    pub usage: Usage,
    /// Messages waiting for the top frame.
    pub inbox: Vec<String>,
    /// The active stack, bottom first (empty when no turn is in progress).
    pub active_stack: Vec<FrameMeta>,
    /// Forks running off the stack (seed 001), in the order they started (a fork's caller
    /// before it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub forks: Vec<FrameMeta>,
    /// The session a trigger started, when it is one (seed 003).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<SessionMeta>,
}

/// A triggered session, as `state.json` keeps it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SessionMeta {
    /// Its id.
    pub id: Uuid,
    /// The agent it runs (a catalog name).
    pub agent: String,
    /// Whether it ended.
    #[serde(default)]
    pub ended: bool,
    /// Whether it failed while its agent still ran.
    #[serde(default)]
    pub failed: bool,
    /// When it expires (B26), in the driver's ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<u64>,
    /// The webhook envelope it started with, as JSON text: empty in the states written now,
    /// which keep it once, in `context.jsonl` (the main session's first message).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub payload: String,
    /// Whether its agent's end completed it (with `result`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub completed: bool,
    /// Its final text, or why it failed, once its agent ended it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
}

/// The whole `state.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct State {
    /// Format version.
    pub version: u32,
    /// Ids handed out so far (the id source continues from here).
    pub ids: u64,
    /// Calls issued so far.
    pub seq: u64,
    /// Every conversation.
    pub conversations: Vec<ConversationState>,
}

/// Persisted state could not be restored.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RestoreError {
    /// `state.json` is not valid.
    #[error("state.json: {0}")]
    State(String),
    /// A line of `context.jsonl` other than a torn last line is not valid.
    #[error("context.jsonl line {line}: {message}")]
    Context {
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// A frame names an agent the catalog does not declare.
    #[error("state.json names agent '{0}', which is not declared")]
    MissingAgent(String),
    /// A frame's session has no entry in `context.jsonl`.
    #[error("no context.jsonl entries for session {0}")]
    MissingSession(Uuid),
}

/// Parses `state.json`.
pub(crate) fn parse_state(json: &str) -> Result<State, RestoreError> {
    let state: State =
        serde_json::from_str(json).map_err(|e| RestoreError::State(e.to_string()))?;
    if state.version != STATE_VERSION {
        return Err(RestoreError::State(format!(
            "version {} is not supported (expected {STATE_VERSION})",
            state.version
        )));
    }
    Ok(state)
}

/// The sessions rebuilt from `context.jsonl`, and how many torn trailing bytes were ignored.
pub struct Replayed {
    /// Sessions by id.
    pub sessions: BTreeMap<Uuid, Session>,
    /// Length of an ignored torn last line (0 if the file ended cleanly).
    pub torn_bytes: usize,
}

/// Rebuilds every session from `context.jsonl`. `skip_initial` drops children's initial messages
/// (only the restore-forgets-first-message planted bug asks for that).
pub fn replay_context(context: &str, skip_initial: bool) -> Result<Replayed, RestoreError> {
    let mut sessions: BTreeMap<Uuid, Session> = BTreeMap::new();
    let mut torn_bytes = 0;
    let ends_cleanly = context.is_empty() || context.ends_with('\n');
    let lines: Vec<&str> = context.split_terminator('\n').collect();
    for (i, line) in lines.iter().enumerate() {
        let last = i + 1 == lines.len();
        let entry: ContextEntry = match serde_json::from_str(line) {
            Ok(e) => e,
            Err(_) if last && !ends_cleanly => {
                torn_bytes = line.len();
                break;
            }
            Err(e) => {
                return Err(RestoreError::Context {
                    line: i + 1,
                    message: e.to_string(),
                })
            }
        };
        match entry {
            ContextEntry::AgentSession {
                agent_session_id,
                message,
                ..
            } => {
                let s = session(&mut sessions, agent_session_id);
                if !skip_initial {
                    s.add_user_message(message);
                }
            }
            ContextEntry::User {
                agent_session_id,
                text,
            } => {
                session(&mut sessions, agent_session_id).add_user_message(text);
            }
            ContextEntry::Assistant {
                agent_session_id,
                content,
            } => {
                session(&mut sessions, agent_session_id).add_assistant_message(content);
            }
            ContextEntry::ToolResult {
                agent_session_id,
                tool_use_id,
                content,
                is_error,
            } => {
                session(&mut sessions, agent_session_id).add_tool_result(
                    tool_use_id,
                    content,
                    is_error,
                );
            }
            ContextEntry::ForkSession {
                agent_session_id,
                caller_session_id,
                messages,
                prompt,
            } => {
                let caller = sessions.get(&caller_session_id);
                let have = caller.map_or(0, |c| c.messages.len());
                if have < messages {
                    return Err(RestoreError::Context {
                        line: i + 1,
                        message: format!(
                            "fork session {agent_session_id} starts with {messages} messages of session {caller_session_id}, which has {have}"
                        ),
                    });
                }
                let empty = Session::default();
                let forked = Session::forked(
                    agent_session_id,
                    caller.unwrap_or(&empty),
                    messages,
                    &prompt,
                );
                sessions.insert(agent_session_id, forked);
            }
            ContextEntry::AgentSessionComplete { .. } => {}
        }
    }
    Ok(Replayed {
        sessions,
        torn_bytes,
    })
}

fn session(sessions: &mut BTreeMap<Uuid, Session>, id: Uuid) -> &mut Session {
    sessions.entry(id).or_insert_with(|| Session::with_id(id))
}
