//! The stack of a runtime under test, inferred from its model requests (DESIGN 14), and the
//! named checks that the wire alone can judge: `routing`, `complete-delivery`, `error-cascade`
//! and `iteration-limit`.
//!
//! The mock server routes every request to an agent of the scenario. Read in order, the routed
//! requests tell the stack of one conversation:
//! - with an empty stack, a request of the main agent pushes `main`;
//! - a spawning tool use (`use_skill`, `use_agent`) in a frame's reply, followed by a request of
//!   the agent it names, pushes that agent's frame;
//! - a request of an agent lower on the stack pops the frames above it: the child's `complete`,
//!   its failed model call or its iteration limit ended it, and the parent's request carries the
//!   child's result;
//! - the main frame's reply without a tool use ends its turn (the stack empties);
//! - a cancel word empties the stack;
//! - when the runtime says it is idle, every frame that is not waiting for the user has ended
//!   ([`Inference::settle`]).
//!
//! A frame's iterations are its model calls; a request right after a failed one of the same
//! frame is a retry and counts once. Tool results are those a frame's request carries after its
//! last assistant turn: a result that never reached a model is not seen.
//!
//! This module is pure: the caller decodes the requests and replies (with [`crate::wire`]) and
//! feeds them in the order the runtime made them.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use crate::agents::tools::{builtin as tool_names, complete_result};
use crate::model::agent::{AgentKind, Catalog};
use crate::model::transcript::{Block, Message, Role};
use crate::observe::names;

use super::codec::{EndReason, EndedFrame, StackFrame};

/// An agent as the inference knows it.
#[derive(Clone, Debug)]
struct Agent {
    kind: AgentKind,
    frame_name: String,
    limit: u64,
}

/// What a frame's last model call gave.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Last {
    /// No call yet.
    Nothing,
    /// A reply without a tool use (text, or nothing at all).
    Text,
    /// A reply with tool uses.
    Tools {
        /// It asks the user (`ask_user`): the frame waits for the user.
        asks: bool,
        /// `complete`'s result, if the frame called it.
        complete: Option<String>,
        /// The spawning tool uses, as (tool use id, agent name), in order.
        spawns: Vec<(String, String)>,
    },
    /// The call failed (an error reply, a cut stream, a dropped connection).
    Failed,
}

#[derive(Clone, Debug)]
struct Frame {
    agent: String,
    name: String,
    iterations: u64,
    limit: u64,
    /// The parent's tool use that spawned it.
    spawned_by: Option<String>,
    last: Last,
    /// Tool results already seen in its requests, by tool use id.
    results: BTreeSet<String>,
    /// The names of the tools its replies used, in order.
    tools: Vec<String>,
    /// The request it waits the answer of.
    awaiting: Option<u64>,
    /// The tools its last reply used.
    last_tools: Vec<String>,
}

impl Frame {
    /// Whether it waits for the user's next message (and so is still on the stack at idle).
    fn waits_for_user(&self, main: bool, asks_wait: bool) -> bool {
        match &self.last {
            Last::Text => !main,
            Last::Tools { asks, .. } => *asks && asks_wait,
            Last::Nothing | Last::Failed => false,
        }
    }

    /// Why it ended, when it ended without waiting for the user.
    fn end_reason(&self, main: bool) -> EndReason {
        match &self.last {
            Last::Tools {
                complete: Some(_), ..
            } => EndReason::Completed,
            Last::Text if main => EndReason::Answered,
            Last::Failed => EndReason::Error,
            _ if self.iterations >= self.limit => EndReason::MaxIterations,
            _ => EndReason::Error,
        }
    }
}

/// One model request of the runtime, decoded.
#[derive(Clone, Copy, Debug)]
pub struct Exchange<'a> {
    /// The mock server's exchange number.
    pub number: u64,
    /// The agent the request was routed to.
    pub agent: &'a str,
    /// The request's messages.
    pub messages: &'a [Message],
}

/// A named check the requests broke.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// The check (`routing`, `complete-delivery`, `error-cascade`, `iteration-limit`).
    pub check: &'static str,
    /// The exchange that broke it.
    pub exchange: u64,
    /// What was seen.
    pub message: String,
}

/// A tool result a frame's request carried.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeenResult {
    /// The frame's name.
    pub frame: String,
    /// The result's text.
    pub content: String,
    /// Whether it is an error result.
    pub is_error: bool,
}

/// The main frame's turn that ended: the outside face of the `response` event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeenResponse {
    /// The last text sent to the user in the turn (empty if none).
    pub text: String,
    /// The main frame's iterations.
    pub iterations: u64,
    /// The tools the main frame's replies used, in order.
    pub tool_calls: Vec<String>,
}

/// The inferred stack of one conversation.
#[derive(Clone, Debug)]
pub struct Inference {
    agents: BTreeMap<String, Agent>,
    main: String,
    frames: Vec<Frame>,
    /// Frames that ended, in order.
    pub ended: Vec<EndedFrame>,
    /// Tool results carried by requests, in order.
    pub results: Vec<SeenResult>,
    /// Frames that ended after a reply with tool uses, by name, with those tools: results to
    /// them went into no later request, so they cannot be read from the wire.
    pub unseen: BTreeMap<String, Vec<String>>,
    /// The main frame's turns that ended, in order; the last one's text is filled as the
    /// runtime sends texts until the next user message.
    pub responses: Vec<SeenResponse>,
    /// Whether the last response's text may still change (its turn's sends are still coming).
    response_open: bool,
    /// The last text sent to the user since the user's last message.
    last_sent: Option<String>,
    /// A user message not yet followed by a request (for `routing`).
    user_pending: bool,
    /// Why the stack could not be followed, from the first request that lost it.
    lost: Option<String>,
    /// `ask_user` waits for the user (`query_user: interactive`), else it is answered at once.
    asks_wait: bool,
}

impl Inference {
    /// An empty stack over the agents of `catalog`.
    pub fn new(catalog: &Catalog) -> Inference {
        let agents = std::iter::once(&catalog.main)
            .chain(catalog.skills.values())
            .chain(catalog.agents.values())
            .map(|d| {
                (
                    d.name.clone(),
                    Agent {
                        kind: d.kind,
                        frame_name: d.frame_name.to_string(),
                        limit: u64::from(d.max_iterations),
                    },
                )
            })
            .collect();
        Inference {
            agents,
            main: catalog.main.name.clone(),
            frames: Vec::new(),
            ended: Vec::new(),
            results: Vec::new(),
            unseen: BTreeMap::new(),
            responses: Vec::new(),
            response_open: false,
            last_sent: None,
            user_pending: false,
            lost: None,
            asks_wait: true,
        }
    }

    /// `ask_user` is answered at once (`query_user: none`): a frame that asked does not wait
    /// for the user.
    pub fn asks_answered_at_once(&mut self) {
        self.asks_wait = false;
    }

    /// The live frames, bottom first, or why the stack could not be inferred.
    pub fn frames(&self) -> Result<Vec<StackFrame>, String> {
        if let Some(why) = &self.lost {
            return Err(why.clone());
        }
        Ok(self
            .frames
            .iter()
            .map(|f| StackFrame {
                name: f.name.clone(),
                iterations: Some(f.iterations),
            })
            .collect())
    }

    /// The runtime sent `text` to the user.
    pub fn sent(&mut self, text: &str) {
        if self.response_open {
            if let Some(r) = self.responses.last_mut() {
                text.clone_into(&mut r.text);
            }
        }
        self.last_sent = Some(text.to_owned());
    }

    /// The user sent a message; `cancel` when it is a cancel word.
    pub fn user(&mut self, cancel: bool) {
        self.response_open = false;
        self.last_sent = None;
        if cancel && !self.frames.is_empty() {
            while let Some(f) = self.frames.pop() {
                self.end(f, EndReason::Cancelled);
            }
            // A cancel word is not delivered to a model.
            self.user_pending = false;
        } else {
            self.user_pending = true;
        }
    }

    /// The runtime said it is idle: every frame that does not wait for the user has ended.
    pub fn settle(&mut self) {
        // A user message that reached a top frame with all its iterations used, and made no
        // request: the frame ended at its limit (seed 002), the runtime told the user so.
        if self.user_pending {
            let main = self.frames.len() == 1;
            if self
                .frames
                .last()
                .is_some_and(|t| t.iterations >= t.limit && t.waits_for_user(main, self.asks_wait))
            {
                self.user_pending = false;
                let f = self.frames.pop().expect("a top frame");
                self.end(f, EndReason::MaxIterations);
            }
        }
        while let Some(top) = self.frames.last() {
            let main = self.frames.len() == 1;
            if top.waits_for_user(main, self.asks_wait) {
                break;
            }
            let reason = top.end_reason(main);
            let f = self.frames.pop().expect("a top frame");
            self.end(f, reason);
        }
    }

    fn end(&mut self, f: Frame, reason: EndReason) {
        // `complete` answers its own tool use before the frame pops: a result no later request
        // carries, since the frame is gone.
        if let Last::Tools {
            complete: Some(result),
            ..
        } = &f.last
        {
            self.results.push(SeenResult {
                frame: f.name.clone(),
                content: result.clone(),
                is_error: false,
            });
        }
        let unseen: Vec<String> = f
            .last_tools
            .iter()
            .filter(|t| *t != tool_names::COMPLETE)
            .cloned()
            .collect();
        if !unseen.is_empty() && !matches!(f.last, Last::Failed) {
            self.unseen.insert(f.name.clone(), unseen);
        }
        if f.spawned_by.is_none() && reason != EndReason::Cancelled {
            self.responses.push(SeenResponse {
                text: self.last_sent.clone().unwrap_or_default(),
                iterations: f.iterations,
                tool_calls: f.tools.clone(),
            });
            self.response_open = true;
        }
        self.ended.push(EndedFrame {
            name: f.name,
            iterations: Some(f.iterations),
            reason,
        });
    }

    fn push(&mut self, agent: &str, spawned_by: Option<String>) {
        let known = self.agents.get(agent);
        if let Some(a) = known {
            self.unseen.remove(&a.frame_name);
        }
        let (name, limit) = known.map_or((agent.to_owned(), u64::MAX), |a| {
            (a.frame_name.clone(), a.limit)
        });
        self.frames.push(Frame {
            agent: agent.to_owned(),
            name,
            iterations: 0,
            limit,
            spawned_by,
            last: Last::Nothing,
            results: BTreeSet::new(),
            tools: Vec::new(),
            awaiting: None,
            last_tools: Vec::new(),
        });
    }

    fn names(&self) -> String {
        let names: Vec<&str> = self.frames.iter().map(|f| f.name.as_str()).collect();
        format!("[{}]", names.join(", "))
    }

    /// Reads one request, as it arrives (its answer comes to [`Inference::reply`]); gives the
    /// checks it broke.
    pub fn request(&mut self, x: &Exchange<'_>) -> Vec<Violation> {
        let mut out = Vec::new();
        if self.lost.is_some() {
            return out;
        }
        let violation = |check, message: String| Violation {
            check,
            exchange: x.number,
            message,
        };
        let user = std::mem::take(&mut self.user_pending);
        let top = self.frames.last();
        let spawned = top.and_then(|t| match &t.last {
            Last::Tools { spawns, .. } => spawns
                .iter()
                // An agent cannot invoke itself: that spawn is refused, nothing is pushed.
                .find(|(_, a)| a == x.agent && *a != t.agent)
                .map(|(id, _)| id.clone()),
            _ => None,
        });
        let below = self.frames.iter().rposition(|f| f.agent == x.agent);
        if self.frames.is_empty() {
            if x.agent != self.main {
                if user {
                    out.push(violation(
                        names::ROUTING,
                        format!(
                            "the user's message with an empty stack goes to the main agent `{}`, but model request #{} went to `{}`",
                            self.main, x.number, x.agent
                        ),
                    ));
                }
                self.lost = Some(format!(
                    "model request #{} went to `{}` while no frame was on the stack; only the main agent `{}` starts one",
                    x.number, x.agent, self.main
                ));
                return out;
            }
            self.push(x.agent, None);
        } else if top.is_some_and(|t| t.agent == x.agent) && spawned.is_none() {
            // The top frame's next call.
        } else if let (Some(id), false) = (spawned, user) {
            self.push(x.agent, Some(id));
        } else if let Some(i) = below.filter(|&i| i + 1 < self.frames.len()) {
            // A top frame that has used all its iterations takes the user's message and ends at
            // its limit without a model call (seed 002): its parent's request comes first.
            let spent = self.frames.last().is_some_and(|f| f.iterations >= f.limit);
            if user && !spent {
                out.push(violation(
                    names::ROUTING,
                    format!(
                        "the user's message goes to the frame on top of the stack {}, `{}`, but model request #{} went to `{}`",
                        self.names(),
                        self.frames.last().map_or("", |f| f.name.as_str()),
                        x.number,
                        x.agent
                    ),
                ));
            }
            self.pop_to(i, x, &mut out);
        } else {
            if user {
                out.push(violation(
                    names::ROUTING,
                    format!(
                        "the user's message goes to the frame on top of the stack {}, but model request #{} went to `{}`, which is not on it",
                        self.names(),
                        x.number,
                        x.agent
                    ),
                ));
            }
            self.lost = Some(format!(
                "model request #{} went to `{}`, which is neither on the stack {} nor spawned by its top frame",
                x.number,
                x.agent,
                self.names()
            ));
            return out;
        }
        let frame = self.frames.last_mut().expect("a frame was found or pushed");
        // A request right after a failed one of the same frame is its retry.
        if frame.last != Last::Failed {
            frame.iterations += 1;
        }
        frame.awaiting = Some(x.number);
        if frame.iterations > frame.limit {
            out.push(violation(
                names::ITERATION_LIMIT,
                format!(
                    "frame {} made model call {} (request #{}) past its limit of {} iterations",
                    frame.name, frame.iterations, x.number, frame.limit
                ),
            ));
        }
        for (id, content, is_error) in trailing_results(x.messages) {
            if frame.results.insert(id) {
                self.results.push(SeenResult {
                    frame: frame.name.clone(),
                    content,
                    is_error,
                });
            }
        }
        out
    }

    /// Reads the answer to request `number`: the reply's blocks, or `None` when it failed.
    pub fn reply(&mut self, number: u64, reply: Option<&[Block]>) {
        let Some(i) = self.frames.iter().rposition(|f| f.awaiting == Some(number)) else {
            // Its frame is gone (a cancel), or the stack was lost.
            return;
        };
        let frame = &mut self.frames[i];
        frame.awaiting = None;
        frame.last_tools.clear();
        frame.last = match reply {
            None => Last::Failed,
            Some(blocks) => last_of(blocks, &self.agents),
        };
        for b in reply.unwrap_or_default() {
            if let Block::ToolUse { name, .. } = b {
                frame.tools.push(name.to_string());
                frame.last_tools.push(name.to_string());
            }
        }
        if i == 0 && self.frames.len() == 1 && self.frames[0].last == Last::Text {
            let f = self.frames.pop().expect("the main frame");
            self.end(f, EndReason::Answered);
        }
    }

    /// Pops the frames above `i`, whose agent made request `x`; judges the result of the child
    /// directly above it.
    fn pop_to(&mut self, i: usize, x: &Exchange<'_>, out: &mut Vec<Violation>) {
        let results: BTreeMap<String, (String, bool)> = trailing_results(x.messages)
            .into_iter()
            .map(|(id, content, is_error)| (id, (content, is_error)))
            .collect();
        while self.frames.len() > i + 1 {
            let f = self.frames.pop().expect("a frame above");
            let reason = f.end_reason(false);
            if self.frames.len() == i + 1 {
                let got = f.spawned_by.as_ref().and_then(|id| results.get(id));
                if let Some((content, is_error)) = got {
                    judge_delivery(&f, reason, content, *is_error, x.number, out);
                }
            }
            self.end(f, reason);
        }
    }
}

/// `complete-delivery` and `error-cascade` on the result a child's parent received.
fn judge_delivery(
    child: &Frame,
    reason: EndReason,
    content: &str,
    is_error: bool,
    exchange: u64,
    out: &mut Vec<Violation>,
) {
    match (&child.last, reason) {
        (
            Last::Tools {
                complete: Some(result),
                ..
            },
            _,
        ) if is_error || content != result => {
            out.push(Violation {
                check: names::COMPLETE_DELIVERY,
                exchange,
                message: format!(
                    "{} completed with {result:?}, but its parent's request #{exchange} carries {content:?}{} as the result",
                    child.name,
                    if is_error { " (is_error: true)" } else { "" }
                ),
            });
        }
        (
            Last::Tools {
                complete: Some(_), ..
            },
            _,
        ) => {}
        (_, EndReason::Error | EndReason::MaxIterations) if !is_error => {
            let why = match (&child.last, reason) {
                (_, EndReason::MaxIterations) => "it reached its iteration limit",
                (Last::Failed, _) => "its model call failed",
                // Its last reply asked for tools, or said something, and no `complete` came: a
                // cancel or an error of the runtime cut it off.
                _ => "it was cut off before it completed",
            };
            out.push(Violation {
                check: names::ERROR_CASCADE,
                exchange,
                message: format!(
                    "{} ended because {why}, but its parent's request #{exchange} carries {content:?} as a result that is not an error",
                    child.name
                ),
            });
        }
        _ => {}
    }
}

/// What a reply means for its frame.
fn last_of(blocks: &[Block], agents: &BTreeMap<String, Agent>) -> Last {
    let mut any = false;
    let mut asks = false;
    let mut complete = None;
    let mut spawns = Vec::new();
    for b in blocks {
        let Block::ToolUse { id, name, input } = b else {
            continue;
        };
        any = true;
        match &**name {
            tool_names::COMPLETE => {
                complete.get_or_insert_with(|| complete_result(input).to_string());
            }
            tool_names::ASK_USER => asks = true,
            tool_names::USE_SKILL | tool_names::USE_AGENT => {
                let (field, kind) = if &**name == tool_names::USE_SKILL {
                    ("skill", AgentKind::Skill)
                } else {
                    ("agent", AgentKind::Agent)
                };
                if let Some(target) = input.get(field).and_then(Value::as_str) {
                    if agents.get(target).is_some_and(|a| a.kind == kind) {
                        spawns.push((id.to_string(), target.to_owned()));
                    }
                }
            }
            _ => {}
        }
    }
    if any {
        Last::Tools {
            asks,
            complete,
            spawns,
        }
    } else {
        Last::Text
    }
}

/// The tool results of the messages after the last assistant turn, as (id, content, is_error).
fn trailing_results(messages: &[Message]) -> Vec<(String, String, bool)> {
    let start = messages
        .iter()
        .rposition(|m| m.role == Role::Assistant)
        .map_or(0, |i| i + 1);
    let mut out = Vec::new();
    for m in &messages[start..] {
        for b in m.content.iter() {
            if let Block::ToolResult {
                tool_use_id,
                content,
                is_error,
            } = b
            {
                out.push((tool_use_id.to_string(), content.to_string(), *is_error));
            }
        }
    }
    out
}
