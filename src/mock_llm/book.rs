//! The mock server's book of conversations, pure: which agent a request is for, which of that
//! agent's conversations, which turn, and so which script entry answers it. No IO, no clock; the
//! HTTP server holds one `Book` behind a lock and asks it about each request.
//!
//! **Addressing, never guessing.**
//!
//! 1. *Agent.* Each agent with a script has a rule: its `match:` conditions when the scenario
//!    gives them (all must hold: the system prompt contains a text, the model name, a header's
//!    value, the tool set), otherwise the request's model name equals the agent's `model` (or its
//!    name) or the request's system prompt equals the agent's `system`. Exactly one agent must
//!    match; none or several is a miss that lists every agent's rule, except that among agents
//!    matched by these default rules the one whose model name is the request's wins (a fork of
//!    seed 001 sends its script name, `main#1`, as its model, with its caller's system prompt).
//! 2. *Conversation.* A conversation is named by its agent and its first user message. Among the
//!    conversations of that name (several when a runtime starts alike conversations, in parallel
//!    or one after another), the request belongs to the first, in order of first appearance, whose
//!    replies the request replays exactly (no reply yet counts too: a retry after a fault); a
//!    request with no assistant turn that fits none starts a new conversation.
//! 3. *Turn.* The turn is the number of assistant turns the request replays (an empty reply the
//!    server sent is never replayed, as no provider takes an empty assistant message: a request
//!    that replays the turns before it and says more than the request that got it is past it).
//!    A turn takes the
//!    agent's next script entries when it is first asked for: the scripted errors before a reply,
//!    served one per request (so the client's retry meets the next), then the reply. A script is
//!    shared by all conversations of its agent, handed out in the order turns are first asked for,
//!    as the simulator does; so that concurrent conversations of one agent get the same replies in
//!    every run, give them different agents (`match: { first_user_contains }`), or give the agent
//!    `script: per_conversation` (each conversation gets the whole script from its first entry).
//!
//! A request that replays assistant turns the server never sent in that conversation (rewritten or
//! dropped history) breaks `replayed-history`; a request no conversation fits, or a turn the script
//! has no entry for, is a miss: an error that names what was looked for and what the script holds.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use serde_json::Value;

use crate::drive::scripted::{ReplyKind, ScriptBlock, ScriptedReply};
use crate::model::llm::{LlmErrorKind, Usage};
use crate::model::transcript::{Block, Message, Role};
pub use crate::scenario::MatchRule;
use crate::wire::reply::{OutBlock, Reply, Stop};
use crate::wire::{Provider, Request};

/// Whether `rule` holds for `request` with these HTTP headers.
fn holds(rule: &MatchRule, request: &Request, first: &str, headers: &[(&str, &str)]) -> bool {
    {
        if let Some(text) = &rule.first_user_contains {
            if !first.contains(text.as_str()) {
                return false;
            }
        }
        if let Some(text) = &rule.system_contains {
            if !request
                .system
                .as_deref()
                .unwrap_or("")
                .contains(text.as_str())
            {
                return false;
            }
        }
        if let Some(model) = &rule.model {
            if request.model.as_deref() != Some(model.as_str()) {
                return false;
            }
        }
        for (name, value) in &rule.headers {
            if !headers
                .iter()
                .any(|(n, v)| n.eq_ignore_ascii_case(name) && v == value)
            {
                return false;
            }
        }
        if let Some(tools) = &rule.tools {
            let mut want: Vec<&str> = tools.iter().map(String::as_str).collect();
            let mut got: Vec<&str> = request.tools.iter().map(String::as_str).collect();
            want.sort_unstable();
            got.sort_unstable();
            if want != got {
                return false;
            }
        }
        true
    }
}

/// How an agent is recognised.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Route {
    /// The scenario's `match:` conditions.
    Rule(MatchRule),
    /// The default: the model name, or the system prompt.
    Default {
        /// The model name that selects the agent (its `model`, or its name).
        model: String,
        /// The system prompt that selects it.
        system: String,
    },
}

impl Route {
    fn is_default(&self) -> bool {
        matches!(self, Route::Default { .. })
    }

    fn holds(&self, request: &Request, first: &str, headers: &[(&str, &str)]) -> bool {
        match self {
            Route::Rule(rule) => holds(rule, request, first, headers),
            Route::Default { model, system } => {
                request.model.as_deref() == Some(model.as_str())
                    || request.system.as_deref() == Some(system.as_str())
            }
        }
    }
}

impl fmt::Display for Route {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Route::Rule(rule) => rule.fmt(f),
            Route::Default { model, system } => {
                write!(f, "model {model:?} or system prompt {:?}", clip(system, 60))
            }
        }
    }
}

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
}

/// A block the server sent, as a later request must replay it.
#[derive(Clone, Debug, PartialEq)]
enum Sent {
    Text(String),
    ToolUse {
        id: String,
        name: String,
        input: Value,
    },
}

#[derive(Clone, Debug)]
struct Conversation {
    agent: usize,
    /// The assistant turns sent, in order (an empty reply is an empty turn).
    sent: Vec<Vec<Sent>>,
    /// For each turn sent: how many blocks the request it answered had.
    asked: Vec<usize>,
    /// Per turn: the script entries it took, and how many of them were served.
    plans: Vec<(Vec<usize>, usize)>,
    /// The next unassigned entry, for an agent whose conversations each have the whole script.
    cursor: usize,
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
    /// The conversations by first user message (lookups only, never iterated).
    by_first: HashMap<String, Vec<usize>>,
}

impl Book {
    /// A book over these agents' scripts.
    pub fn new(agents: Vec<AgentScript>) -> Book {
        Book {
            cursors: vec![0; agents.len()],
            agents,
            conversations: Vec::new(),
            by_first: HashMap::new(),
        }
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
        let Some(c) = self
            .conversations
            .get_mut(address.conversation.wrapping_sub(1))
        else {
            return;
        };
        if c.sent.len() == address.turn + 1 {
            c.sent.pop();
            c.asked.pop();
        }
        if let Some((_, done)) = c.plans.get_mut(address.turn) {
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
            for (plan, done) in &c.plans {
                for &entry in &plan[..*done] {
                    served[c.agent][entry] = true;
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
        let first = request
            .messages
            .iter()
            .find(|m| m.role == Role::User)
            .map(Message::text)
            .unwrap_or_default();
        let agent = self.route(request, &first, headers)?;
        let replayed: Vec<Vec<Sent>> = request
            .messages
            .iter()
            .filter(|m| m.role == Role::Assistant)
            .map(sent_of)
            .collect();
        // How much the request says: its blocks, all messages counted (a turn past an empty
        // reply has more of them than the request that got it).
        let asked: usize = request.messages.iter().map(|m| m.content.len()).sum();
        let (conversation, turn) = self.conversation(agent, &first, &replayed, asked)?;
        let mut address = Address {
            agent: self.agents[agent].name.clone(),
            conversation: conversation + 1,
            turn,
            entry: None,
        };
        if self.conversations[conversation].plans.len() <= turn {
            let plan = self.plan(agent, conversation);
            self.conversations[conversation].plans.push((plan, 0));
        }
        let (plan, done) = &mut self.conversations[conversation].plans[turn];
        let Some(&entry) = plan.get(*done) else {
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
        *done += 1;
        let last = plan.last().copied();
        address.entry = Some(entry + 1);
        let scripted = &self.agents[agent].entries[entry];
        let answer = match &scripted.kind {
            ReplyKind::Error {
                kind,
                message,
                mid_stream,
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
                    Box::new(self.reply(provider, conversation, turn, &blocks, of, request))
                });
                Answer::Error {
                    kind: *kind,
                    message: message.clone(),
                    after_ms: scripted.after_ms,
                    partial,
                }
            }
            ReplyKind::Stall => Answer::Stall,
            ReplyKind::Content(blocks) => {
                let blocks: Vec<_> = blocks.iter().map(|b| (0, b)).collect();
                Answer::Reply {
                    reply: self.reply(provider, conversation, turn, &blocks, scripted, request),
                    after_ms: scripted.after_ms,
                }
            }
            ReplyKind::Stream(chunks) => {
                let blocks: Vec<_> = chunks.iter().map(|c| (c.after_ms, &c.block)).collect();
                Answer::Reply {
                    reply: self.reply(provider, conversation, turn, &blocks, scripted, request),
                    after_ms: scripted.after_ms,
                }
            }
        };
        if let Answer::Reply { reply, .. } = &answer {
            let sent = reply.blocks.iter().map(sent_of_out).collect();
            let conv = &mut self.conversations[conversation];
            if conv.sent.len() == turn {
                conv.sent.push(sent);
                conv.asked.push(asked);
            }
        }
        Ok((address, answer))
    }

    fn route(
        &self,
        request: &Request,
        first: &str,
        headers: &[(&str, &str)],
    ) -> Result<usize, Miss> {
        let mut matching: Vec<usize> = (0..self.agents.len())
            .filter(|&i| self.agents[i].route.holds(request, first, headers))
            .collect();
        if matching.len() > 1 {
            // By default rules, the model name is the more specific key: a fork sends its script
            // name (`main#1`) as its model and keeps its caller's system prompt.
            let by_model: Vec<usize> = matching
                .iter()
                .copied()
                .filter(|&i| match &self.agents[i].route {
                    Route::Default { model, .. } => request.model.as_deref() == Some(model),
                    Route::Rule(_) => false,
                })
                .collect();
            if by_model.len() == 1 && matching.iter().all(|&i| self.agents[i].route.is_default()) {
                matching = by_model;
            }
        }
        match matching[..] {
            [one] => Ok(one),
            _ => {
                let rules = self
                    .agents
                    .iter()
                    .map(|a| format!("`{}` ({})", a.name, a.route))
                    .collect::<Vec<_>>()
                    .join("; ");
                let what = format!(
                    "model {:?}, system prompt {:?}, tools [{}]",
                    request.model.as_deref().unwrap_or(""),
                    clip(request.system.as_deref().unwrap_or(""), 60),
                    request.tools.join(", ")
                );
                let message = if matching.is_empty() {
                    format!(
                        "no agent of the scenario matches the request ({what}); agents: {rules}"
                    )
                } else {
                    let names = matching
                        .iter()
                        .map(|&i| format!("`{}`", self.agents[i].name))
                        .collect::<Vec<_>>()
                        .join(", ");
                    format!("the request ({what}) matches several agents: {names}; give them `match:` rules that tell them apart; agents: {rules}")
                };
                Err(Miss {
                    violation: None,
                    message,
                    address: None,
                })
            }
        }
    }

    /// The conversation `replayed` continues, and its turn. Empty replies the server sent are
    /// never replayed (no provider takes an empty assistant message): a request is past such a
    /// turn when it carries more blocks than the request that got it.
    fn conversation(
        &mut self,
        agent: usize,
        first: &str,
        replayed: &[Vec<Sent>],
        asked: usize,
    ) -> Result<(usize, usize), Miss> {
        let mut closest: Option<(usize, usize)> = None;
        let alike = self.by_first.get(first).map_or(&[][..], Vec::as_slice);
        for &i in alike {
            let c = &self.conversations[i];
            if c.agent != agent {
                continue;
            }
            let spoken: Vec<&Vec<Sent>> = c.sent.iter().filter(|t| !t.is_empty()).collect();
            let common = spoken
                .iter()
                .zip(replayed)
                .take_while(|(a, b)| same_turn(a, b))
                .count();
            if common == replayed.len() && spoken.len() == replayed.len() {
                // Past the last turn it replays, and past the empty turns that followed it
                // when the request has grown since.
                let mut turn = c
                    .sent
                    .iter()
                    .rposition(|t| !t.is_empty())
                    .map_or(0, |p| p + 1);
                while turn < c.sent.len() && c.sent[turn].is_empty() && asked > c.asked[turn] {
                    turn += 1;
                }
                if turn == c.sent.len() {
                    return Ok((i, turn));
                }
            }
            if closest.is_none_or(|(_, n)| common > n) {
                closest = Some((i, common));
            }
        }
        let turn = replayed.len();
        if turn == 0 {
            let i = self.conversations.len();
            self.conversations.push(Conversation {
                agent,
                sent: Vec::new(),
                asked: Vec::new(),
                plans: Vec::new(),
                cursor: 0,
            });
            self.by_first.entry(first.to_owned()).or_default().push(i);
            return Ok((i, 0));
        }
        let name = &self.agents[agent].name;
        let Some((i, common)) = closest else {
            return Err(Miss {
                violation: Some(REPLAYED_HISTORY),
                message: format!(
                    "the request replays {turn} assistant {} for agent `{name}` (first user message {:?}), but no conversation of that agent began with that message",
                    turns(turn),
                    clip(first, 60)
                ),
                address: None,
            });
        };
        let c = &self.conversations[i];
        let detail = if common < turn && common < c.sent.len() {
            format!(
                "assistant turn {} differs: the server sent {}, the request replays {}",
                common + 1,
                describe(&c.sent[common]),
                describe(&replayed[common])
            )
        } else if turn < c.sent.len() {
            format!(
                "it replays {turn} of the {} assistant turns the server sent: later turns were dropped",
                c.sent.len()
            )
        } else {
            format!(
                "it replays {turn} assistant {} but the server sent {}",
                turns(turn),
                c.sent.len()
            )
        };
        Err(Miss {
            violation: Some(REPLAYED_HISTORY),
            message: format!(
                "the request does not replay what the server sent in conversation {} of agent `{name}` (first user message {:?}): {detail}",
                i + 1,
                clip(first, 60)
            ),
            address: Some(Address {
                agent: name.clone(),
                conversation: i + 1,
                turn,
                entry: None,
            }),
        })
    }

    /// The next entries of `agent`'s script for a new turn: its errors, then one reply.
    fn plan(&mut self, agent: usize, conversation: usize) -> Vec<usize> {
        let entries = &self.agents[agent].entries;
        let cursor = if self.agents[agent].per_conversation {
            &mut self.conversations[conversation].cursor
        } else {
            &mut self.cursors[agent]
        };
        let mut plan = Vec::new();
        while *cursor < entries.len() {
            plan.push(*cursor);
            let is_error = matches!(entries[*cursor].kind, ReplyKind::Error { .. });
            *cursor += 1;
            if !is_error {
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
        turn: usize,
        blocks: &[(u64, &ScriptBlock)],
        scripted: &ScriptedReply,
        request: &Request,
    ) -> Reply {
        let tag = format!("{}_{}", letters(conversation), letters(turn));
        let tool_prefix = match provider {
            Provider::Anthropic => "toolu",
            _ => "call",
        };
        let mut out: Vec<OutBlock> = Vec::new();
        let mut tool_uses = 0usize;
        for (after, block) in blocks {
            match block {
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
        let usage = if scripted.usage == Usage::default() {
            Usage {
                input_tokens: estimate_tokens(request),
                output_tokens: out
                    .iter()
                    .map(|b| match b {
                        OutBlock::Text(p) => p.iter().map(|(_, t)| t.len()).sum::<usize>(),
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

fn sent_of(message: &Message) -> Vec<Sent> {
    message
        .content
        .iter()
        .filter_map(|b| match b {
            Block::Text { text } => Some(Sent::Text(text.to_string())),
            Block::ToolUse { id, name, input } => Some(Sent::ToolUse {
                id: id.to_string(),
                name: name.to_string(),
                input: (**input).clone(),
            }),
            Block::ToolResult { .. } => None,
        })
        .collect()
}

fn sent_of_out(block: &OutBlock) -> Sent {
    match block {
        OutBlock::Text(_) => Sent::Text(block.joined().unwrap_or_default()),
        OutBlock::ToolUse {
            id, name, input, ..
        } => Sent::ToolUse {
            id: id.clone(),
            name: name.clone(),
            input: input.clone(),
        },
    }
}

/// Whether a replayed turn is the one sent: the same text (surrounding whitespace aside; clients
/// split or join text blocks) and the same tool uses in order.
fn same_turn(sent: &[Sent], replayed: &[Sent]) -> bool {
    let text = |t: &[Sent]| {
        t.iter()
            .filter_map(|b| match b {
                Sent::Text(s) => Some(s.as_str()),
                Sent::ToolUse { .. } => None,
            })
            .collect::<String>()
    };
    let tools = |t: &[Sent]| {
        t.iter()
            .filter(|b| matches!(b, Sent::ToolUse { .. }))
            .cloned()
            .collect::<Vec<_>>()
    };
    text(sent).trim() == text(replayed).trim() && tools(sent) == tools(replayed)
}

fn describe(turn: &[Sent]) -> String {
    if turn.is_empty() {
        return "an empty turn".into();
    }
    turn.iter()
        .map(|b| match b {
            Sent::Text(t) => format!("text {:?}", clip(t, 40)),
            Sent::ToolUse { id, name, .. } => format!("tool use {name} ({id})"),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn turns(n: usize) -> &'static str {
    if n == 1 {
        "turn"
    } else {
        "turns"
    }
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
mod tests {
    use super::*;
    use crate::drive::scripted::ScriptedReply;
    use serde_json::json;

    fn text(t: &str) -> ScriptedReply {
        ScriptedReply {
            kind: ReplyKind::Content(vec![ScriptBlock::Text(t.into())]),
            after_ms: 0,
            usage: Usage::default(),
        }
    }

    fn tool(name: &str) -> ScriptedReply {
        ScriptedReply {
            kind: ReplyKind::Content(vec![ScriptBlock::ToolUse {
                id: None,
                name: name.into(),
                input: Arc::new(json!({"q": 1})),
            }]),
            after_ms: 0,
            usage: Usage::default(),
        }
    }

    fn error() -> ScriptedReply {
        ScriptedReply {
            kind: ReplyKind::Error {
                kind: LlmErrorKind::RateLimit,
                message: "slow down".into(),
                mid_stream: false,
            },
            after_ms: 0,
            usage: Usage::default(),
        }
    }

    fn agent(name: &str, entries: Vec<ScriptedReply>) -> AgentScript {
        AgentScript {
            name: name.into(),
            route: Route::Default {
                model: name.into(),
                system: format!("You are `{name}`."),
            },
            entries,
            per_conversation: false,
        }
    }

    fn request(model: &str, messages: Value) -> Request {
        crate::wire::anthropic::validate(&json!({
            "model": model, "max_tokens": 100, "messages": messages
        }))
        .expect("a valid request")
    }

    fn ask(book: &mut Book, model: &str, messages: Value) -> Result<(Address, Answer), Miss> {
        book.answer(Provider::Anthropic, &request(model, messages), &[])
    }

    fn tool_id(answer: &Answer) -> String {
        match answer {
            Answer::Reply { reply, .. } => match &reply.blocks[0] {
                OutBlock::ToolUse { id, .. } => id.clone(),
                other => panic!("not a tool use: {other:?}"),
            },
            other => panic!("not a reply: {other:?}"),
        }
    }

    #[test]
    fn an_empty_reply_is_not_replayed_and_the_grown_request_is_the_next_turn() {
        let empty = ScriptedReply {
            kind: ReplyKind::Content(Vec::new()),
            after_ms: 0,
            usage: Usage::default(),
        };
        let mut book = Book::new(vec![agent(
            "worker",
            vec![tool("search"), empty, text("summary")],
        )]);
        let (_, first) = ask(
            &mut book,
            "worker",
            json!([{"role": "user", "content": "go"}]),
        )
        .unwrap();
        let id = tool_id(&first);
        let turn1 = json!([
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": id, "name": "search", "input": {"q": 1}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": id, "content": "ok"}]}
        ]);
        let (a, _) = ask(&mut book, "worker", turn1.clone()).unwrap();
        assert_eq!((a.turn, a.entry), (1, Some(2)), "the empty reply");
        // The runtime keeps no empty assistant message: it asks again with more to say.
        let mut grown = turn1.clone();
        grown[2]["content"]
            .as_array_mut()
            .unwrap()
            .push(json!({"type": "text", "text": "summarise"}));
        let (a, answer) = ask(&mut book, "worker", grown).unwrap();
        assert_eq!((a.conversation, a.turn, a.entry), (1, 2, Some(3)));
        assert!(matches!(answer, Answer::Reply { .. }));
        assert!(book.unused().is_empty());
        // The request that got the empty reply, again, is not a new turn: nothing is left.
        let miss = ask(&mut book, "worker", turn1).unwrap_err();
        assert_eq!(miss.violation, Some(REPLAYED_HISTORY), "{}", miss.message);
    }

    #[test]
    fn a_per_conversation_script_starts_over_for_each_conversation() {
        let mut worker = agent("worker", vec![tool("search"), text("done")]);
        worker.per_conversation = true;
        let mut book = Book::new(vec![worker]);
        let mut ids = Vec::new();
        for task in ["task one", "task two", "task one"] {
            let (a, answer) = ask(
                &mut book,
                "worker",
                json!([{"role": "user", "content": task}]),
            )
            .unwrap();
            assert_eq!((a.turn, a.entry), (0, Some(1)), "{task}");
            ids.push((task, tool_id(&answer)));
        }
        assert_eq!(book.conversations(), 3);
        // Each goes on with its own second entry, in any order.
        for (task, id) in ids.iter().rev() {
            let (a, _) = ask(
                &mut book,
                "worker",
                json!([
                    {"role": "user", "content": task},
                    {"role": "assistant", "content": [{"type": "tool_use", "id": id, "name": "search", "input": {"q": 1}}]},
                    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": id, "content": "ok"}]}
                ]),
            )
            .unwrap();
            assert_eq!((a.turn, a.entry), (1, Some(2)), "{task}");
        }
        assert!(book.unused().is_empty());
        // A third turn is past the script's end: a miss, never a default.
        let (task, id) = &ids[0];
        let miss = ask(
            &mut book,
            "worker",
            json!([
                {"role": "user", "content": task},
                {"role": "assistant", "content": [{"type": "tool_use", "id": id, "name": "search", "input": {"q": 1}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": id, "content": "ok"}]},
                {"role": "assistant", "content": "done"},
                {"role": "user", "content": "more?"}
            ]),
        )
        .unwrap_err();
        assert!(miss.message.contains("turn 2"), "{}", miss.message);
    }

    #[test]
    fn a_tool_loop_is_addressed_by_agent_conversation_and_turn() {
        let mut book = Book::new(vec![agent("main", vec![tool("search"), text("done")])]);
        let (a, first) = ask(
            &mut book,
            "main",
            json!([{"role": "user", "content": "hi"}]),
        )
        .unwrap();
        assert_eq!((a.conversation, a.turn, a.entry), (1, 0, Some(1)));
        let id = tool_id(&first);
        assert_eq!(id, "toolu_as_a_a_a");
        let history = json!([
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": id, "name": "search", "input": {"q": 1}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": id, "content": "ok"}]}
        ]);
        let (a, second) = ask(&mut book, "main", history.clone()).unwrap();
        assert_eq!((a.conversation, a.turn, a.entry), (1, 1, Some(2)));
        assert!(matches!(second, Answer::Reply { .. }));
        assert!(book.unused().is_empty());
        // The same turn again, after its reply: the runtime dropped that reply.
        let miss = ask(&mut book, "main", history).unwrap_err();
        assert_eq!(miss.violation, Some(REPLAYED_HISTORY));
        assert!(
            miss.message.contains("later turns were dropped"),
            "{}",
            miss.message
        );
    }

    #[test]
    fn a_turn_past_the_script_is_a_miss_that_says_what_the_script_holds() {
        let mut book = Book::new(vec![agent("main", vec![tool("search")])]);
        let (_, first) = ask(
            &mut book,
            "main",
            json!([{"role": "user", "content": "hi"}]),
        )
        .unwrap();
        let id = tool_id(&first);
        let history = json!([
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": id, "name": "search", "input": {"q": 1}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": id, "content": "ok"}]}
        ]);
        let miss = ask(&mut book, "main", history).unwrap_err();
        assert_eq!(miss.violation, None);
        assert_eq!(
            miss.message,
            "no scripted reply for agent `main`, conversation 1 (first user message \"hi\"), turn 1: the script holds 1 reply, all taken by earlier turns"
        );
        assert_eq!(miss.address.unwrap().turn, 1);
    }

    #[test]
    fn scripted_errors_are_served_to_the_retries_of_their_turn() {
        let mut book = Book::new(vec![agent("main", vec![error(), error(), text("ok")])]);
        let hi = json!([{"role": "user", "content": "hi"}]);
        for n in 1..=2 {
            let (a, answer) = ask(&mut book, "main", hi.clone()).unwrap();
            assert_eq!((a.conversation, a.turn, a.entry), (1, 0, Some(n)));
            assert!(matches!(
                answer,
                Answer::Error {
                    kind: LlmErrorKind::RateLimit,
                    ..
                }
            ));
        }
        let (a, answer) = ask(&mut book, "main", hi).unwrap();
        assert_eq!((a.conversation, a.entry), (1, Some(3)));
        assert!(matches!(answer, Answer::Reply { .. }));
        assert_eq!(book.conversations(), 1);
    }

    #[test]
    fn rewritten_or_dropped_history_breaks_replayed_history() {
        let mut book = Book::new(vec![agent(
            "main",
            vec![text("one"), text("two"), text("three")],
        )]);
        ask(
            &mut book,
            "main",
            json!([{"role": "user", "content": "hi"}]),
        )
        .unwrap();
        let rewritten = json!([
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "uno"},
            {"role": "user", "content": "more"}
        ]);
        let miss = ask(&mut book, "main", rewritten).unwrap_err();
        assert_eq!(miss.violation, Some(REPLAYED_HISTORY));
        assert!(
            miss.message.contains("assistant turn 1 differs: the server sent text \"one\", the request replays text \"uno\""),
            "{}",
            miss.message
        );
        let good = json!([
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "one"},
            {"role": "user", "content": "more"}
        ]);
        ask(&mut book, "main", good).unwrap();
        let unknown = json!([
            {"role": "user", "content": "bye"},
            {"role": "assistant", "content": "one"},
            {"role": "user", "content": "more"}
        ]);
        let miss = ask(&mut book, "main", unknown).unwrap_err();
        assert_eq!(miss.violation, Some(REPLAYED_HISTORY));
        assert!(miss.message.contains("no conversation of that agent began"));
    }

    #[test]
    fn alike_conversations_are_told_apart_by_order_of_first_appearance() {
        let mut book = Book::new(vec![agent(
            "worker",
            vec![tool("a"), tool("b"), text("x"), text("y")],
        )]);
        let hi = json!([{"role": "user", "content": "same task"}]);
        let (a1, r1) = ask(&mut book, "worker", hi.clone()).unwrap();
        let (a2, r2) = ask(&mut book, "worker", hi).unwrap();
        assert_eq!((a1.conversation, a2.conversation), (1, 2));
        let (id1, id2) = (tool_id(&r1), tool_id(&r2));
        assert_ne!(id1, id2);
        // The second conversation continues first: it takes the next free entry.
        let turn = |id: &str, name: &str| {
            json!([
                {"role": "user", "content": "same task"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": id, "name": name, "input": {"q": 1}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": id, "content": "ok"}]}
            ])
        };
        let (b2, _) = ask(&mut book, "worker", turn(&id2, "b")).unwrap();
        assert_eq!((b2.conversation, b2.turn, b2.entry), (2, 1, Some(3)));
        let (b1, _) = ask(&mut book, "worker", turn(&id1, "a")).unwrap();
        assert_eq!((b1.conversation, b1.turn, b1.entry), (1, 1, Some(4)));
    }

    #[test]
    fn a_fork_is_found_by_its_model_name_though_it_keeps_its_callers_system_prompt() {
        let mut fork = agent("main#1", vec![text("forked")]);
        fork.route = Route::Default {
            model: "main#1".into(),
            system: String::new(),
        };
        let mut book = Book::new(vec![agent("main", vec![text("main")]), fork]);
        // The fork's request: its script name as the model, main's system prompt.
        let request = crate::wire::anthropic::validate(&json!({
            "model": "main#1", "max_tokens": 1, "system": "You are `main`.",
            "messages": [{"role": "user", "content": "hi"}]
        }))
        .unwrap();
        let (address, _) = book.answer(Provider::Anthropic, &request, &[]).unwrap();
        assert_eq!(address.agent, "main#1");
        // Main's own request still goes to main.
        let (address, _) = ask(
            &mut book,
            "main",
            json!([{"role": "user", "content": "hi"}]),
        )
        .unwrap();
        assert_eq!(address.agent, "main");
    }

    #[test]
    fn a_request_no_agent_or_two_agents_match_is_a_miss_listing_the_rules() {
        let mut book = Book::new(vec![
            agent("main", vec![text("a")]),
            AgentScript {
                name: "helper".into(),
                route: Route::Rule(MatchRule {
                    system_contains: Some("helper".into()),
                    ..MatchRule::default()
                }),
                entries: vec![text("b")],
                per_conversation: false,
            },
        ]);
        let miss = ask(
            &mut book,
            "gpt-x",
            json!([{"role": "user", "content": "hi"}]),
        )
        .unwrap_err();
        assert!(
            miss.message
                .starts_with("no agent of the scenario matches the request (model \"gpt-x\""),
            "{}",
            miss.message
        );
        assert!(
            miss.message
                .contains("`helper` (system prompt contains \"helper\")"),
            "{}",
            miss.message
        );
        let both = crate::wire::anthropic::validate(&json!({
            "model": "main", "max_tokens": 1, "system": "you are the helper",
            "messages": [{"role": "user", "content": "hi"}]
        }))
        .unwrap();
        let miss = book.answer(Provider::Anthropic, &both, &[]).unwrap_err();
        assert!(
            miss.message
                .contains("matches several agents: `main`, `helper`"),
            "{}",
            miss.message
        );
        assert_eq!(book.unused().len(), 2);
    }

    #[test]
    fn match_rules_read_headers_tools_and_model() {
        let rule = MatchRule {
            model: Some("m".into()),
            headers: [("x-agent".to_owned(), "planner".to_owned())].into(),
            tools: Some(vec!["b".into(), "a".into()]),
            ..MatchRule::default()
        };
        let req = crate::wire::anthropic::validate(&json!({
            "model": "m", "max_tokens": 1,
            "tools": [{"name": "a", "input_schema": {}}, {"name": "b", "input_schema": {}}],
            "messages": [{"role": "user", "content": "hi"}]
        }))
        .unwrap();
        let h = vec![("X-Agent", "planner")];
        assert!(holds(&rule, &req, "hi", &h));
        assert!(!holds(&rule, &req, "hi", &[]));
        let other = vec![("x-agent", "coder")];
        assert!(!holds(&rule, &req, "hi", &other));
        let rule = MatchRule {
            first_user_contains: Some("Rome".into()),
            ..rule
        };
        assert!(holds(&rule, &req, "Look up Rome", &h));
        assert!(!holds(&rule, &req, "Look up Paris", &h));
    }

    #[test]
    fn letters_count_without_digits() {
        assert_eq!(letters(0), "a");
        assert_eq!(letters(25), "z");
        assert_eq!(letters(26), "ba");
        assert_eq!(letters(429), "qn");
        assert_eq!(clip("abcdef", 3), "abc…");
        assert_eq!(clip("abc", 3), "abc");
    }
}
