//! The mock server's book of conversations, pure: which agent a request is for, which of that
//! agent's conversations, which turn, and so which script entry answers it. No IO, no clock; the
//! HTTP server holds one `Book` behind a lock and asks it about each request.
//!
//! **Addressing, never guessing.**
//!
//! 1. *Agent.* A request whose `x-agentsim-agent` header names an agent with a script is that
//!    agent's, whatever the rules say (an unknown name is a miss). Otherwise, each agent with a
//!    script has a rule: its `match:` conditions when the scenario
//!    gives them (all must hold: the system prompt contains a text, the model name, a header's
//!    value, the tool set), otherwise the request's model name equals the agent's `model` (or its
//!    name) or the request's system prompt equals the agent's `system`. Exactly one agent must
//!    match; none or several is a miss that lists every agent's rule, except that among agents
//!    matched by these default rules the one whose model name is the request's wins (a fork of
//!    seed 001 sends its script name, `main#1`, as its model, with its caller's system prompt).
//! 2. *Conversation.* How is the agent's `history:` policy. `exact` (the default): a conversation
//!    is named by its agent and its first user message. Among the conversations of that name
//!    (several when a runtime starts alike conversations, in parallel or one after another), the
//!    request belongs to the first, in order of first appearance, whose replies the request
//!    replays exactly (no reply yet counts too: a retry after a fault); a request with no
//!    assistant turn that fits none starts a new conversation. `continuation`: every turn the
//!    server sends is indexed by the chain of served turns it follows; the request's assistant
//!    messages are followed along those chains, by hash, and the last served turn they reach names
//!    the conversation, whichever agents its turns were sent to (a handoff, a supervisor and its
//!    workers); messages off the chain are the client's own unless they hold a tool use the server
//!    sent (then the request rewrote or dropped history). `lenient`: the same lookup, where any
//!    served turn the request still holds names the conversation, and nothing is compared.
//! 3. *Turn.* The turn is the agent's: the number of turns the server sent to that agent in the
//!    conversation (under `exact`, the assistant turns the request replays; an empty reply the
//!    server sent is never replayed, as no provider takes an empty assistant message: a request
//!    that replays the turns before it and says more than the request that got it is past it).
//!    A turn takes the
//!    agent's next script entries when it is first asked for: the scripted errors before a reply,
//!    each served to as many requests for the turn as its `times` says (one by default; so the
//!    client's retry meets the next entry once an error's count is used), then the reply. An
//!    error of `times: always` ends the turn's entries: every attempt of that turn fails, and the
//!    entries after it go to the next turn asked for. A script is
//!    shared by all conversations of its agent, handed out in the order turns are first asked for,
//!    as the simulator does; so that concurrent conversations of one agent get the same replies in
//!    every run, give them different agents (`match: { first_user_contains }`), or give the agent
//!    `script: per_conversation` (each conversation gets the whole script from its first entry).
//!
//! A request that replays assistant turns the server never sent in that conversation (rewritten or
//! dropped history) breaks `replayed-history`; a request no conversation fits, or a turn the script
//! has no entry for, is a miss: an error that names what was looked for and what the script holds.
//!
//! This file holds the [`Book`] and its answers (the turn's script entries, the reply encoded);
//! the first step of addressing is `route.rs` ([`Route`]), the second `conversation.rs`.

mod conversation;
mod route;

use std::sync::Arc;

use crate::drive::scripted::{Attempts, ReplyKind, ScriptBlock, ScriptedReply};
use crate::model::llm::{LlmErrorKind, Usage};
use crate::model::transcript::{Block, Message, Role};
pub use crate::scenario::MatchRule;
use crate::wire::reply::{OutBlock, Reply, Stop};
use crate::wire::{Provider, Request};

pub use crate::scenario::format::HistoryPolicy;
use conversation::{sent_of, sent_of_out, Conversation, Found, Index, Sent};
pub use route::{Route, AGENT_HEADER, CONVERSATION_HEADER};

/// One agent's script and how requests find it.
#[derive(Clone, Debug)]
pub struct AgentScript {
    /// The agent's name.
    pub name: String,
    /// How it is recognised.
    pub route: Route,
    /// Its replies, in order.
    pub entries: Vec<ScriptedReply>,
    /// Each conversation of this agent gets the whole script from its first entry (instead of
    /// the conversations sharing one script, handed out turn by turn).
    pub per_conversation: bool,
    /// How the history its requests replay is held to what the server sent.
    pub history: HistoryPolicy,
}

/// Where a request was routed.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Address {
    /// The agent.
    pub agent: String,
    /// The conversation's number, from 1, in order of first appearance (all agents).
    pub conversation: usize,
    /// The turn: the assistant turns the request replays.
    pub turn: usize,
    /// The script entry that answers it, from 1, if there is one.
    pub entry: Option<usize>,
}

/// What answers a request.
#[derive(Clone, Debug, PartialEq)]
pub enum Answer {
    /// A reply.
    Reply {
        /// The reply to encode.
        reply: Reply,
        /// Latency before the reply (or its first event), in ms.
        after_ms: u64,
    },
    /// A scripted error.
    Error {
        /// Its kind.
        kind: LlmErrorKind,
        /// Its message.
        message: Arc<str>,
        /// Latency before it, in ms.
        after_ms: u64,
        /// For an error in the middle of a stream: the reply whose first half a streamed answer
        /// sends before the error (the turn's reply, which the retry gets whole).
        partial: Option<Box<Reply>>,
        /// The delay the client is asked to wait before retrying, in ms, when the script gives
        /// one.
        retry_after_ms: Option<u64>,
    },
    /// No answer, ever (until the server stops).
    Stall,
}

/// A request the book could not answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Miss {
    /// The invariant it breaks, when the runtime under test is at fault (`replayed-history`);
    /// `None` for a request the scenario has no reply for.
    pub violation: Option<&'static str>,
    /// What was looked for and what the script holds.
    pub message: String,
    /// Where it was routed, as far as it got.
    pub address: Option<Address>,
}

/// The book.
#[derive(Clone, Debug)]
pub struct Book {
    agents: Vec<AgentScript>,
    /// Per agent: the next unassigned entry.
    cursors: Vec<usize>,
    conversations: Vec<Conversation>,
    /// The lookups (never iterated).
    index: Index,
    /// The reasoning sent: each thinking block's signature and each reasoning item's id, to its
    /// text (never iterated).
    reasoning: std::collections::HashMap<String, String>,
    /// A reply whose script gives no `usage` reports an estimate (true) or zero tokens.
    estimate_usage: bool,
}

impl Book {
    /// A book over these agents' scripts.
    pub fn new(agents: Vec<AgentScript>) -> Book {
        Book {
            cursors: vec![0; agents.len()],
            agents,
            conversations: Vec::new(),
            index: Index::default(),
            reasoning: std::collections::HashMap::new(),
            estimate_usage: true,
        }
    }

    /// Replies whose script gives no `usage` report zero tokens instead of an estimate, as the
    /// simulator counts them: so a runtime under test that sums what it is sent sums what the
    /// scenario's `usage` expectations say (`run --runtime`).
    pub fn scripted_usage_only(&mut self) {
        self.estimate_usage = false;
    }

    /// The agents.
    pub fn agents(&self) -> &[AgentScript] {
        &self.agents
    }

    /// How many conversations have been seen.
    pub fn conversations(&self) -> usize {
        self.conversations.len()
    }

    /// Takes back the reply just given at `address` (a fault was injected in its place): the
    /// conversation did not receive it, and the next request for that turn gets it again.
    pub fn retract(&mut self, address: &Address) {
        let Some(agent) = self.agents.iter().position(|a| a.name == address.agent) else {
            return;
        };
        let conversation = address.conversation.wrapping_sub(1);
        self.unrecord(conversation, agent, address.turn);
        let Some(c) = self.conversations.get_mut(conversation) else {
            return;
        };
        if let Some((_, done)) = c.plans.get_mut(&(agent, address.turn)) {
            *done = done.saturating_sub(1);
        }
    }

    /// The entries never served, per agent (1-based), agents in the book's order: those no
    /// conversation's turn has served (a reply taken back for a fault counts as not served).
    pub fn unused(&self) -> Vec<(String, Vec<usize>)> {
        let mut served: Vec<Vec<bool>> = self
            .agents
            .iter()
            .map(|a| vec![false; a.entries.len()])
            .collect();
        for c in &self.conversations {
            for (&(agent, _), (plan, done)) in &c.plans {
                let entries = &self.agents[agent].entries;
                // An entry is served once an attempt reached it.
                let mut start = 0u64;
                for &entry in plan {
                    if (*done as u64) <= start {
                        break;
                    }
                    served[agent][entry] = true;
                    match attempts(&entries[entry]) {
                        Some(n) => start += u64::from(n),
                        None => break,
                    }
                }
            }
        }
        self.agents
            .iter()
            .zip(served)
            .filter_map(|(a, served)| {
                let left: Vec<usize> = served
                    .iter()
                    .enumerate()
                    .filter(|(_, s)| !**s)
                    .map(|(i, _)| i + 1)
                    .collect();
                (!left.is_empty()).then(|| (a.name.clone(), left))
            })
            .collect()
    }

    /// Routes `request` (with its HTTP `headers`) and takes what answers it.
    pub fn answer(
        &mut self,
        provider: Provider,
        request: &Request,
        headers: &[(&str, &str)],
    ) -> Result<(Address, Answer), Miss> {
        let first = first_user_text(request);
        let agent = self.route(request, &first, headers)?;
        if self.agents[agent].history != HistoryPolicy::Lenient {
            self.check_reasoning(provider, request)?;
        }
        let replayed: Vec<Vec<Sent>> = request
            .messages
            .iter()
            .filter(|m| m.role == Role::Assistant)
            .map(sent_of)
            .collect();
        // How much the request says: its blocks, all messages counted (a turn past an empty
        // reply has more of them than the request that got it).
        let asked: usize = request.messages.iter().map(|m| m.content.len()).sum();
        let Found {
            conversation,
            turn,
            parent,
        } = match self.agents[agent].history {
            HistoryPolicy::Exact => self.conversation(agent, &first, &replayed, asked)?,
            HistoryPolicy::Continuation => {
                self.continuation(agent, &first, &replayed, asked, false)?
            }
            HistoryPolicy::Lenient => self.continuation(agent, &first, &replayed, asked, true)?,
        };
        // The reply's ids are numbered by its place in the conversation (unique there, whichever
        // agent it is sent to).
        let place = self.conversations[conversation].turns.len();
        let mut address = Address {
            agent: self.agents[agent].name.clone(),
            conversation: conversation + 1,
            turn,
            entry: None,
        };
        if !self.conversations[conversation]
            .plans
            .contains_key(&(agent, turn))
        {
            let plan = self.plan(agent, conversation);
            self.conversations[conversation]
                .plans
                .insert((agent, turn), (plan, 0));
        }
        let (plan, done) = self.conversations[conversation]
            .plans
            .get_mut(&(agent, turn))
            .expect("the turn's plan");
        let Some(&entry) = position(&self.agents[agent].entries, plan, *done).map(|p| &plan[p])
        else {
            let script = &self.agents[agent];
            return Err(Miss {
                violation: None,
                message: format!(
                    "no scripted reply for agent `{}`, conversation {} (first user message {:?}), turn {}: the script holds {} {}, all taken by earlier turns",
                    script.name,
                    conversation + 1,
                    clip(&first, 60),
                    turn,
                    script.entries.len(),
                    if script.entries.len() == 1 { "reply" } else { "replies" },
                ),
                address: Some(address),
            });
        };
        if let Some(message) = unoffered_builtin(&self.agents[agent].entries[entry], request) {
            return Err(Miss {
                violation: None,
                message,
                address: Some(address),
            });
        }
        *done += 1;
        let last = plan.last().copied();
        address.entry = Some(entry + 1);
        let scripted = &self.agents[agent].entries[entry];
        let answer = match &scripted.kind {
            ReplyKind::Error {
                kind,
                message,
                mid_stream,
                retry_after_ms,
                ..
            } => {
                let partial = mid_stream.then(|| {
                    // The turn's reply, the last entry of its plan (none if the script ends in
                    // errors: then an empty reply's first events).
                    let last = last.map(|e| &self.agents[agent].entries[e]);
                    let (blocks, of) = match last.map(|l| (&l.kind, l)) {
                        Some((ReplyKind::Content(blocks), l)) => {
                            (blocks.iter().map(|b| (0, b)).collect(), l)
                        }
                        Some((ReplyKind::Stream(chunks), l)) => {
                            (chunks.iter().map(|c| (c.after_ms, &c.block)).collect(), l)
                        }
                        _ => (Vec::new(), scripted),
                    };
                    Box::new(self.reply(provider, conversation, place, &blocks, of, request))
                });
                Answer::Error {
                    kind: *kind,
                    message: message.clone(),
                    after_ms: scripted.after_ms,
                    partial,
                    retry_after_ms: *retry_after_ms,
                }
            }
            ReplyKind::Stall => Answer::Stall,
            ReplyKind::Content(blocks) => {
                let blocks: Vec<_> = blocks.iter().map(|b| (0, b)).collect();
                Answer::Reply {
                    reply: self.reply(provider, conversation, place, &blocks, scripted, request),
                    after_ms: scripted.after_ms,
                }
            }
            ReplyKind::Stream(chunks) => {
                let blocks: Vec<_> = chunks.iter().map(|c| (c.after_ms, &c.block)).collect();
                Answer::Reply {
                    reply: self.reply(provider, conversation, place, &blocks, scripted, request),
                    after_ms: scripted.after_ms,
                }
            }
        };
        if let Answer::Reply { reply, .. } = &answer {
            let sent = reply.blocks.iter().filter_map(sent_of_out).collect();
            for block in &reply.blocks {
                if let (OutBlock::Thinking { id, .. }, Some(text)) = (block, block.reasoning()) {
                    self.reasoning.insert(id.clone(), text);
                }
            }
            self.record(conversation, agent, sent, asked, parent, &first);
        }
        Ok((address, answer))
    }

    /// Every thinking block or reasoning item `request` replays is one the server sent, unchanged
    /// (by its signature or id); a client may leave reasoning out of the history it replays, but
    /// not write its own or alter the server's.
    fn check_reasoning(&self, provider: Provider, request: &Request) -> Result<(), Miss> {
        let what = match provider {
            Provider::Anthropic => "thinking block",
            _ => "reasoning item",
        };
        let key = match provider {
            Provider::Anthropic => "signature",
            _ => "id",
        };
        for r in &request.reasoning {
            let sent = r.id.as_ref().and_then(|id| self.reasoning.get(id));
            let problem = match (sent, &r.text) {
                (Some(sent), Some(text)) if sent == text => continue,
                (Some(sent), Some(text)) => format!(
                    "whose text differs from what the server sent under that {key}: sent {:?}, replayed {:?}",
                    clip(sent, 60),
                    clip(text, 60)
                ),
                (_, None) => "that is redacted, and the server never sends a redacted block".to_owned(),
                (None, _) => match &r.id {
                    Some(id) => format!("with the {key} {:?}, which the server never sent", clip(id, 60)),
                    None => format!("without a {key}, so not one the server sent"),
                },
            };
            return Err(Miss {
                violation: Some(REPLAYED_HISTORY),
                message: format!("the request replays a {what} at {} {problem}", r.path),
                address: None,
            });
        }
        Ok(())
    }

    /// The next entries of `agent`'s script for a new turn: its errors, then one reply (or an
    /// error that fails every attempt, which ends the turn's entries).
    fn plan(&mut self, agent: usize, conversation: usize) -> Vec<usize> {
        let entries = &self.agents[agent].entries;
        let cursor = if self.agents[agent].per_conversation {
            let cursors = &mut self.conversations[conversation].cursors;
            let at = match cursors.iter().position(|(a, _)| *a == agent) {
                Some(at) => at,
                None => {
                    cursors.push((agent, 0));
                    cursors.len() - 1
                }
            };
            &mut cursors[at].1
        } else {
            &mut self.cursors[agent]
        };
        let mut plan = Vec::new();
        while *cursor < entries.len() {
            plan.push(*cursor);
            let more = matches!(
                entries[*cursor].kind,
                ReplyKind::Error {
                    times: Attempts::Times(_),
                    ..
                }
            );
            *cursor += 1;
            if !more {
                break;
            }
        }
        plan
    }

    /// The scripted reply `blocks` (each with its delay when streamed), encoded.
    fn reply(
        &self,
        provider: Provider,
        conversation: usize,
        place: usize,
        blocks: &[(u64, &ScriptBlock)],
        scripted: &ScriptedReply,
        request: &Request,
    ) -> Reply {
        let tag = format!("{}_{}", letters(conversation), letters(place));
        let tool_prefix = match provider {
            Provider::Anthropic => "toolu",
            _ => "call",
        };
        let mut out: Vec<OutBlock> = Vec::new();
        let mut tool_uses = 0usize;
        let mut thoughts = 0usize;
        for (after, block) in blocks {
            match block {
                // OpenAI Chat has no reasoning content: the reply goes without it.
                ScriptBlock::Thinking(_) if provider == Provider::OpenAiChat => {}
                ScriptBlock::Thinking(t) => match out.last_mut() {
                    Some(OutBlock::Thinking { pieces, .. }) => pieces.push((*after, t.to_string())),
                    _ => {
                        let id = match provider {
                            Provider::Anthropic => format!("sig_as_{tag}_{}", letters(thoughts)),
                            _ => format!("rs_as_{tag}_{}", letters(thoughts)),
                        };
                        thoughts += 1;
                        out.push(OutBlock::Thinking {
                            id,
                            pieces: vec![(*after, t.to_string())],
                        });
                    }
                },
                ScriptBlock::Text(t) => match out.last_mut() {
                    Some(OutBlock::Text(pieces)) => pieces.push((*after, t.to_string())),
                    _ => out.push(OutBlock::Text(vec![(*after, t.to_string())])),
                },
                ScriptBlock::ToolUse { id, name, input } => {
                    let id = match id {
                        Some(id) => id.to_string(),
                        None => format!("{tool_prefix}_as_{tag}_{}", letters(tool_uses)),
                    };
                    tool_uses += 1;
                    out.push(OutBlock::ToolUse {
                        after_ms: *after,
                        id,
                        name: name.to_string(),
                        input: (**input).clone(),
                    });
                }
            }
        }
        let usage = if scripted.usage == Usage::default() && self.estimate_usage {
            Usage {
                input_tokens: estimate_tokens(request),
                output_tokens: out
                    .iter()
                    .map(|b| match b {
                        OutBlock::Text(p) | OutBlock::Thinking { pieces: p, .. } => {
                            p.iter().map(|(_, t)| t.len()).sum::<usize>()
                        }
                        OutBlock::ToolUse { input, .. } => input.to_string().len(),
                    })
                    .sum::<usize>()
                    .div_ceil(4)
                    .max(1) as u64,
            }
        } else {
            scripted.usage
        };
        let id = match provider {
            Provider::Anthropic => format!("msg_as_{tag}"),
            Provider::OpenAiChat => format!("chatcmpl-as_{tag}"),
            Provider::OpenAiResponses => format!("resp_as_{tag}"),
        };
        Reply {
            id,
            model: request.model.clone().unwrap_or_default(),
            stop: if tool_uses > 0 {
                Stop::ToolUse
            } else {
                Stop::EndTurn
            },
            blocks: out,
            usage,
        }
    }
}

/// The refusal of a reply that calls one of agentsim's own tools (`ask_user`, `use_skill`, ...)
/// which the request does not offer: a runtime under test has its own tools, and a call to one it
/// never offered would be served as an unknown tool. A request that offers any of agentsim's own
/// tools is from agentsim's runtime (the reference runtime over the wire, whose scenarios call a
/// built-in it withheld on purpose) and gets the reply as scripted.
fn unoffered_builtin(entry: &ScriptedReply, request: &Request) -> Option<String> {
    let is_builtin = crate::agents::tools::builtin::is_builtin;
    if request.tools.iter().any(|t| is_builtin(t)) {
        return None;
    }
    let blocks: Vec<&ScriptBlock> = match &entry.kind {
        ReplyKind::Content(blocks) => blocks.iter().collect(),
        ReplyKind::Stream(chunks) => chunks.iter().map(|c| &c.block).collect(),
        _ => return None,
    };
    let name = blocks.iter().find_map(|b| match b {
        ScriptBlock::ToolUse { name, .. } if is_builtin(name) => Some(name.clone()),
        _ => None,
    })?;
    let shorthand = if ["ask_user", "use_skill", "use_agent", "complete"].contains(&&*name) {
        format!(" (the shorthand `{name}:` is that call)")
    } else {
        String::new()
    };
    Some(format!(
        "the scripted reply calls `{name}`{shorthand}, a tool of agentsim's own runtime, but the request offers no tool of that name (tools [{}]): script the runtime's own tool instead, as `tool_use: {{ name: ..., input: ... }}`",
        request.tools.join(", ")
    ))
}

/// How many attempts an entry answers: an error its `times` (`None`: every attempt), a reply one.
fn attempts(entry: &ScriptedReply) -> Option<u32> {
    match entry.kind {
        ReplyKind::Error {
            times: Attempts::Times(n),
            ..
        } => Some(n),
        ReplyKind::Error {
            times: Attempts::Always,
            ..
        } => None,
        _ => Some(1),
    }
}

/// Which of a turn's `plan` entries answers its attempt `done` (from 0), if any is left.
fn position(entries: &[ScriptedReply], plan: &[usize], done: usize) -> Option<usize> {
    let mut start = 0u64;
    for (i, &entry) in plan.iter().enumerate() {
        match attempts(&entries[entry]) {
            None => return Some(i),
            Some(n) => {
                start += u64::from(n);
                if (done as u64) < start {
                    return Some(i);
                }
            }
        }
    }
    None
}

/// The invariant a runtime breaks by replaying history the server did not send.
pub const REPLAYED_HISTORY: &str = crate::observe::names::REPLAYED_HISTORY;

fn estimate_tokens(request: &Request) -> u64 {
    let chars: usize = request.system.as_deref().map_or(0, str::len)
        + request
            .messages
            .iter()
            .flat_map(|m| m.content.iter())
            .map(|b| match b {
                Block::Text { text } => text.len(),
                Block::ToolUse { input, .. } => input.to_string().len(),
                Block::ToolResult { content, .. } => content.len(),
            })
            .sum::<usize>();
    (chars.div_ceil(4)).max(1) as u64
}

/// The text of a request's first user message ("" if none): what tells its conversation.
pub(super) fn first_user_text(request: &Request) -> String {
    request
        .messages
        .iter()
        .find(|m| m.role == Role::User)
        .map(Message::text)
        .unwrap_or_default()
}

/// `text` cut to `max` characters, with an ellipsis when cut.
pub fn clip(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

/// `n` in base 26 with the digits `a` to `z` (`a`, `b`, … `z`, `ba`, …): ids free of digits, so
/// no id looks like a status code to a runtime that retries on one in an error's text.
pub fn letters(n: usize) -> String {
    let mut digits = Vec::new();
    let mut n = n;
    loop {
        digits.push(b'a' + (n % 26) as u8);
        n /= 26;
        if n == 0 {
            break;
        }
    }
    digits.reverse();
    String::from_utf8(digits).expect("ascii")
}

#[cfg(test)]
mod tests;
