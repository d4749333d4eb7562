//! The order of an exchange (section 5 of the runtime protocol), checked line by line: the
//! sequence errors of section 9 that a runtime's line commits given what agentsim wrote before it.
//!
//! A [`Session`] lives for one run, across the run's processes: agentsim tells it every line it
//! writes ([`Session::sent`]) and asks it about every line the runtime writes
//! ([`Session::received`], or [`Session::receive_line`] to decode and check in one call). It does
//! no IO and reads no clock.
//!
//! What is remembered for how long, where the specification leaves room:
//! - A new process is recognized by its `hello` (one not preceded by a `reset`): it must answer
//!   `ready` again, and its call ids start afresh ("unique within this process's life").
//!   Conversations, the `seq`s sent and the highest `idle` are the run's, so they survive a
//!   restart: a restarted runtime's `stack` for a restored conversation, or its `idle` for
//!   `hello.awaiting_idle`, is in order.
//! - A `reset` starts a new run in the same process: conversations, `seq`s, the highest `idle`,
//!   `ready` and the call ids are forgotten (agentsim sends no result of a call made before a
//!   `reset` after it, so an id used again cannot be mistaken; and a finding never depends on the
//!   runs a process served before, which a rerun of its seed alone would not repeat).
//! - A `ready` is accepted before agentsim's `hello` is recorded (the two lines may cross); a
//!   `tool_call` checked before any `hello` names an unknown agent.
//! - After `shutdown`, lines "are recorded in the transcript and judged by nothing": every decoded
//!   line is accepted, except `error`, which still reports `runtime-error`.
//! - A `tool_call` of a tool outside the calling agent's own whitelist (`hello.agents[].tools`) is
//!   not a protocol error (section 9 does not name it); judging it is a check's business.
//! - `flood` is counted by the driver across the run's processes
//!   ([`super::codec::MAX_LINES_PER_RUN`]); a `Session` does not see blank lines.

use std::collections::BTreeSet;

use super::codec::{
    decode_line, AgentKind, FromRuntime, Hello, ProtocolError, ProtocolErrorKind, ToRuntime,
};

/// The sequence checker of one run. See the module documentation for what it remembers.
#[derive(Clone, Debug, Default)]
pub struct Session {
    /// The runtime's `ready` answered the current `hello`.
    ready: bool,
    /// agentsim wrote `shutdown`.
    shut_down: bool,
    /// The agents of the last `hello`.
    agents: BTreeSet<String>,
    /// The names a `tool_call` may use: the tools of the last `hello` and its passthrough skills'
    /// frame names.
    tools: BTreeSet<String>,
    /// Every conversation agentsim sent a `user` for in this run.
    conversations: BTreeSet<String>,
    /// Every `seq` agentsim sent in this run.
    seqs: BTreeSet<u64>,
    /// The highest `idle` received in this run.
    idle: Option<u64>,
    /// The call ids this process used since it started or was last reset.
    calls: BTreeSet<String>,
}

impl Session {
    /// A session before anything was written.
    pub fn new() -> Session {
        Session::default()
    }

    /// Records a line agentsim wrote.
    pub fn sent(&mut self, message: &ToRuntime) {
        match message {
            ToRuntime::Hello(hello) => self.sent_hello(hello),
            ToRuntime::User(user) => self.sent_user(user.seq, &user.conversation),
            ToRuntime::ToolResult(_) => {}
            ToRuntime::Reset => self.sent_reset(),
            ToRuntime::Shutdown => self.sent_shutdown(),
        }
    }

    /// Records a `hello`: the agents and tools a `tool_call` may name. `ready` is awaited again
    /// and the call ids start afresh (a new process, or a new run after `reset`).
    pub fn sent_hello(&mut self, hello: &Hello) {
        self.calls.clear();
        self.ready = false;
        self.shut_down = false;
        self.agents = hello.agents.iter().map(|a| a.name.clone()).collect();
        self.tools = hello.tools.iter().map(|t| t.name.clone()).collect();
        self.tools.extend(
            hello
                .agents
                .iter()
                .filter(|a| a.passthrough && a.kind == AgentKind::Skill)
                .map(|a| a.frame.clone()),
        );
    }

    /// Records a `user`: its `seq` may now be idled, its conversation named.
    pub fn sent_user(&mut self, seq: u64, conversation: &str) {
        self.seqs.insert(seq);
        if !self.conversations.contains(conversation) {
            self.conversations.insert(conversation.to_owned());
        }
    }

    /// Records a `reset`: a new run in the same process.
    pub fn sent_reset(&mut self) {
        self.ready = false;
        self.calls.clear();
        self.conversations.clear();
        self.seqs.clear();
        self.idle = None;
    }

    /// Records a `shutdown`: later lines are judged by nothing but `error`.
    pub fn sent_shutdown(&mut self) {
        self.shut_down = true;
    }

    /// Whether the runtime answered the current `hello` with `ready`.
    pub fn is_ready(&self) -> bool {
        self.ready
    }

    /// The highest `seq` the runtime reported `idle` for in this run.
    pub fn last_idle(&self) -> Option<u64> {
        self.idle
    }

    /// Decodes the runtime's line number `line` and checks it in order: `Ok(None)` for a blank
    /// line, the message if it is in order, else the first protocol error it commits.
    pub fn receive_line(
        &mut self,
        raw: &[u8],
        line: u64,
    ) -> Result<Option<FromRuntime>, ProtocolError> {
        let Some(message) = decode_line(raw, line)? else {
            return Ok(None);
        };
        self.received(&message, line, raw)?;
        Ok(Some(message))
    }

    /// Checks a decoded line of the runtime (number `line`, whose bytes `raw` are quoted in an
    /// error) against what agentsim wrote before it, and records it. An `error` line is always
    /// `runtime-error`. The checks, in order: `not-ready`, `unknown-conversation`, then for a
    /// `tool_call` `unknown-agent`, `unknown-tool` and `duplicate-call`, for an `idle`
    /// `unknown-seq`.
    pub fn received(
        &mut self,
        message: &FromRuntime,
        line: u64,
        raw: &[u8],
    ) -> Result<(), ProtocolError> {
        let err = |kind, text: String| Err(ProtocolError::new(kind, line, text, raw));
        if let FromRuntime::Error(e) = message {
            let about = match e.line {
                Some(n) => format!(" (about agentsim's line {n})"),
                None => String::new(),
            };
            return err(
                ProtocolErrorKind::RuntimeError,
                format!("the runtime reported an error{about}: {}", e.message),
            );
        }
        if self.shut_down {
            return Ok(());
        }
        if let FromRuntime::Ready(_) = message {
            if self.ready {
                return err(
                    ProtocolErrorKind::NotReady,
                    "a second `ready` for the same `hello`".to_owned(),
                );
            }
            self.ready = true;
            return Ok(());
        }
        if !self.ready {
            return err(
                ProtocolErrorKind::NotReady,
                format!(
                    "a `{}` line before `ready` (only `ready` and `error` may come first)",
                    message.kind()
                ),
            );
        }
        if let Some(conversation) = message.conversation() {
            if !self.conversations.contains(conversation) {
                return err(
                    ProtocolErrorKind::UnknownConversation,
                    format!(
                        "`{}` names the conversation \"{}\", which agentsim never sent a `user` for",
                        message.kind(),
                        conversation.escape_debug()
                    ),
                );
            }
        }
        match message {
            FromRuntime::ToolCall(call) => {
                if !self.agents.contains(&call.agent) {
                    return err(
                        ProtocolErrorKind::UnknownAgent,
                        format!(
                            "`tool_call.agent` \"{}\" is not an agent of `hello.agents`",
                            call.agent.escape_debug()
                        ),
                    );
                }
                if !self.tools.contains(&call.name) {
                    return err(
                        ProtocolErrorKind::UnknownTool,
                        format!(
                            "`tool_call.name` \"{}\" is not a tool of `hello.tools` nor a passthrough skill's frame",
                            call.name.escape_debug()
                        ),
                    );
                }
                if self.calls.contains(&call.call) {
                    return err(
                        ProtocolErrorKind::DuplicateCall,
                        format!(
                            "`tool_call.call` \"{}\" was already used by this process",
                            call.call.escape_debug()
                        ),
                    );
                }
                self.calls.insert(call.call.clone());
            }
            FromRuntime::Idle(idle) => {
                if !self.seqs.contains(&idle.seq) {
                    let last = match self.seqs.last() {
                        Some(last) => format!("the last `seq` sent is {last}"),
                        None => "no `user` was sent".to_owned(),
                    };
                    return err(
                        ProtocolErrorKind::UnknownSeq,
                        format!("`idle` for seq {}, never sent ({last})", idle.seq),
                    );
                }
                if let Some(previous) = self.idle.filter(|&p| idle.seq < p) {
                    return err(
                        ProtocolErrorKind::UnknownSeq,
                        format!(
                            "`idle` for seq {} after an `idle` for seq {previous} (it never decreases)",
                            idle.seq
                        ),
                    );
                }
                self.idle = Some(idle.seq);
            }
            _ => {}
        }
        Ok(())
    }
}
