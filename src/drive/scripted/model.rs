//! The scripted model: one script per agent, consumed in order across every frame of that agent.
//!
//! A script that runs out is an error naming the agent and the call number, never a silent
//! default reply. `tool_use` ids that the script leaves out are numbered per run (`toolu_01`,
//! `toolu_02`, ...), so transcripts stay readable and identical for a given scenario.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use serde_json::Value;

use crate::drive::backend::{BackendError, Delivery, Model, ModelAnswer};
use crate::drive::Note;
use crate::model::llm::{LlmErrorKind, LlmRequest, Usage};
use crate::model::transcript::{Block, Content};

/// A content block as a script states it.
#[derive(Clone, Debug, PartialEq)]
pub enum ScriptBlock {
    /// Text.
    Text(Arc<str>),
    /// The model's reasoning (served by `agentsim mock-llm` as an Anthropic `thinking` block or
    /// an OpenAI Responses `reasoning` item; the simulator's runtime never sees it).
    Thinking(Arc<str>),
    /// A tool use; `id: None` gets the next generated id.
    ToolUse {
        /// Explicit id (to script duplicates or pin one).
        id: Option<Arc<str>>,
        /// Tool name.
        name: Arc<str>,
        /// JSON input.
        input: Arc<Value>,
    },
}

/// One piece of a streamed reply.
#[derive(Clone, Debug, PartialEq)]
pub struct ScriptChunk {
    /// The piece.
    pub block: ScriptBlock,
    /// Delay after the previous piece, in ms.
    pub after_ms: u64,
}

/// What one model call does.
#[derive(Clone, Debug, PartialEq)]
pub enum ReplyKind {
    /// Replies with these blocks (none: an empty reply).
    Content(Vec<ScriptBlock>),
    /// Replies in pieces.
    Stream(Vec<ScriptChunk>),
    /// Fails.
    Error {
        /// Category.
        kind: LlmErrorKind,
        /// Message.
        message: Arc<str>,
        /// In the middle of a stream (`agentsim mock-llm` sends part of the next reply first;
        /// the simulator fails the call as for any error).
        mid_stream: bool,
        /// How many attempts of its turn fail (`agentsim mock-llm`, where a client retries the
        /// same turn); the simulator's runtime does not retry, so there it fails one call.
        times: Attempts,
        /// The delay `agentsim mock-llm` asks a client to wait before retrying (`retry-after-ms`
        /// and `retry-after` headers), in ms; `None`: a rate limit asks for 1 s, other errors
        /// ask for nothing.
        retry_after_ms: Option<u64>,
    },
    /// Never answers.
    Stall,
}

/// How many attempts of a turn a scripted error fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attempts {
    /// This many (1 or more): the retry after the last of them gets the script's next entry.
    Times(u32),
    /// Every attempt: the turn never gets a reply.
    Always,
}

impl Default for Attempts {
    fn default() -> Attempts {
        Attempts::Times(1)
    }
}

/// One scripted model call.
#[derive(Clone, Debug, PartialEq)]
pub struct ScriptedReply {
    /// The behaviour.
    pub kind: ReplyKind,
    /// Latency before the reply (or its first chunk), in ms.
    pub after_ms: u64,
    /// Token usage reported with the reply.
    pub usage: Usage,
}

/// A model call that the script could answer.
#[derive(Clone, Debug, PartialEq)]
pub struct Answer {
    /// What to deliver.
    pub delivery: Delivery,
    /// Latency before the reply (or its first chunk), in ms.
    pub after_ms: u64,
    /// Token usage reported with the reply.
    pub usage: Usage,
    /// 1-based number of this call for its agent.
    pub call: usize,
}

/// The script ran out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Exhausted {
    /// The agent.
    pub agent: String,
    /// 1-based number of the call that found no entry.
    pub call: usize,
}

/// One agent's script and how much of it was used.
#[derive(Clone, Debug, Default)]
struct Script {
    agent: String,
    replies: Vec<ScriptedReply>,
    used: usize,
}

/// Where replies come from once an agent's script is used up: generated scenarios give their
/// agents as many replies as their conversations need this way. It must answer the same reply for
/// the same agent and call number every time (runs are deterministic).
pub trait MoreReplies: fmt::Debug + Send + Sync {
    /// The reply for call `call` (1-based) of `agent`, or `None` to let the script run out.
    fn reply(&self, agent: &str, call: usize) -> Option<ScriptedReply>;
}

/// Scripts for every agent.
#[derive(Clone, Debug, Default)]
pub struct MockLlm {
    /// The scripts, in the order their agents were first named.
    scripts: Vec<Script>,
    /// Where each agent's script is: hashed, since every model call looks its agent up (among a
    /// hundred agents, a search of an ordered map compares a name seven times). Never iterated
    /// into output ([`MockLlm::unused`] orders what it lists).
    by_agent: crate::model::hash::FxHashMap<String, usize>,
    /// The scripts of the last call and of the one before it: most calls come from the agent
    /// that made the one before (a tool loop) or the one before that (a parent and its child
    /// taking turns), and comparing a name or two costs less than hashing it.
    last: usize,
    before: usize,
    next_id: u64,
    /// Replies past the end of a script, if the scripts are open-ended.
    more: Option<Arc<dyn MoreReplies>>,
}

impl MockLlm {
    /// Scripts keyed by agent name (`main`, or a skill's or agent's name).
    pub fn new(scripts: BTreeMap<String, Vec<ScriptedReply>>) -> MockLlm {
        let scripts: Vec<Script> = scripts
            .into_iter()
            .map(|(agent, replies)| Script {
                agent,
                replies,
                used: 0,
            })
            .collect();
        let by_agent = scripts
            .iter()
            .enumerate()
            .map(|(i, s)| (s.agent.clone(), i))
            .collect();
        MockLlm {
            scripts,
            by_agent,
            last: usize::MAX,
            before: usize::MAX,
            next_id: 0,
            more: None,
        }
    }

    /// Scripts that go on past their end with replies from `more`.
    pub fn with_more(mut self, more: Option<Arc<dyn MoreReplies>>) -> MockLlm {
        self.more = more;
        self
    }

    /// The next reply for `agent` (one map lookup; the scripted reply is not copied).
    pub fn next(&mut self, agent: &str) -> Result<Answer, Exhausted> {
        let same = |i: usize| {
            self.scripts
                .get(i)
                .is_some_and(|s| crate::model::ids::same_id(&s.agent, agent))
        };
        let i = if same(self.last) {
            self.last
        } else if same(self.before) {
            std::mem::swap(&mut self.last, &mut self.before);
            self.last
        } else {
            self.find(agent)
        };
        let script = &mut self.scripts[i];
        script.used += 1;
        let call = script.used;
        self.answer_at(i, agent, call)
    }

    /// The reply of call `call` (1-based) of `agent` again, without moving its script on: what a
    /// call issued again after a restart gets, when the call it replaces had that reply.
    pub fn replay(&mut self, agent: &str, call: usize) -> Result<Answer, Exhausted> {
        let i = self.find(agent);
        self.answer_at(i, agent, call.max(1))
    }

    /// The answer of call `call` of script `i` (of `agent`).
    #[inline]
    fn answer_at(&mut self, i: usize, agent: &str, call: usize) -> Result<Answer, Exhausted> {
        let script = &mut self.scripts[i];
        if call == script.replies.len() + 1 {
            if let Some(reply) = self.more.as_ref().and_then(|m| m.reply(agent, call)) {
                script.replies.push(reply);
            }
        }
        let Some(reply) = script.replies.get(call - 1) else {
            return Err(Exhausted {
                agent: agent.to_owned(),
                call,
            });
        };
        let next_id = &mut self.next_id;
        let mut make = |b: &ScriptBlock| match b {
            ScriptBlock::Text(t) => Some(Block::Text { text: t.clone() }),
            ScriptBlock::Thinking(_) => None,
            ScriptBlock::ToolUse { id, name, input } => {
                let id = match id {
                    Some(id) => id.clone(),
                    None => {
                        *next_id += 1;
                        tool_use_id(*next_id)
                    }
                };
                Some(Block::ToolUse {
                    id,
                    name: name.clone(),
                    input: input.clone(),
                })
            }
        };
        let delivery = match &reply.kind {
            ReplyKind::Content(content) => {
                let mut blocks = Content::with_capacity(content.len());
                blocks.extend(content.iter().filter_map(&mut make));
                Delivery::Content(blocks)
            }
            ReplyKind::Stream(chunks) => Delivery::Stream(
                chunks
                    .iter()
                    .filter_map(|c| Some((c.after_ms, make(&c.block)?)))
                    .collect(),
            ),
            ReplyKind::Error { kind, message, .. } => Delivery::Error {
                kind: *kind,
                message: message.clone(),
            },
            ReplyKind::Stall => Delivery::Stall,
        };
        Ok(Answer {
            delivery,
            after_ms: reply.after_ms,
            usage: reply.usage,
            call,
        })
    }

    /// Where `agent`'s script is, remembered as the last one. An agent without a script gets an
    /// empty one: its calls are still counted, for the error and for `calls`.
    #[cold]
    fn find(&mut self, agent: &str) -> usize {
        let i = match self.by_agent.get(agent) {
            Some(&i) => i,
            None => {
                self.scripts.push(Script {
                    agent: agent.to_owned(),
                    ..Script::default()
                });
                self.by_agent
                    .insert(agent.to_owned(), self.scripts.len() - 1);
                self.scripts.len() - 1
            }
        };
        self.before = self.last;
        self.last = i;
        i
    }

    fn script(&self, agent: &str) -> Option<&Script> {
        self.by_agent.get(agent).map(|&i| &self.scripts[i])
    }

    /// The scripted reply behind call `call` (1-based) of `agent`.
    pub fn scripted(&self, agent: &str, call: usize) -> Option<&ScriptedReply> {
        self.script(agent)?.replies.get(call.checked_sub(1)?)
    }

    /// Whether `agent` has a script (a declared agent's, or a fork's or workflow child's).
    pub(crate) fn has_script(&self, agent: &str) -> bool {
        self.by_agent.contains_key(agent)
    }

    /// Calls made so far for `agent`.
    pub fn calls(&self, agent: &str) -> usize {
        self.script(agent).map_or(0, |s| s.used)
    }

    /// How far every script was used, as JSON (`{"calls": {agent: n}, "next_id": n}`): what a
    /// service persists so that a restart goes on where the scripts were instead of replaying
    /// them from the start ([`MockLlm::resume`]).
    pub fn position(&self) -> Value {
        let calls: BTreeMap<&str, usize> = self
            .scripts
            .iter()
            .filter(|s| s.used > 0)
            .map(|s| (s.agent.as_str(), s.used))
            .collect();
        serde_json::json!({ "calls": calls, "next_id": self.next_id })
    }

    /// Goes on from a [`MockLlm::position`]: each agent's next call is the one after those it
    /// made. A position that is not one is an error saying what is wrong.
    pub fn resume(&mut self, position: &Value) -> Result<(), String> {
        let calls = position
            .get("calls")
            .and_then(Value::as_object)
            .ok_or("no `calls` object")?;
        let next_id = position
            .get("next_id")
            .and_then(Value::as_u64)
            .ok_or("no `next_id` number")?;
        for (agent, used) in calls {
            let used = used
                .as_u64()
                .ok_or_else(|| format!("calls of {agent:?} is not a count"))?;
            let i = self.find(agent);
            self.scripts[i].used = used as usize;
        }
        self.next_id = next_id;
        Ok(())
    }

    /// Script entries left unused, by agent.
    pub fn unused(&self) -> BTreeMap<&str, usize> {
        self.scripts
            .iter()
            .map(|s| (s.agent.as_str(), s.replies.len().saturating_sub(s.used)))
            .filter(|(_, n)| *n > 0)
            .collect()
    }
}

impl Model for MockLlm {
    fn answer(
        &mut self,
        request: &LlmRequest<'_>,
        _notes: &mut Vec<Note>,
    ) -> Result<ModelAnswer, BackendError> {
        let answer = self
            .next(&request.agent.name)
            .map_err(|e| BackendError::ScriptExhausted {
                agent: e.agent,
                call: e.call,
            })?;
        Ok(ModelAnswer {
            delivery: answer.delivery,
            after_ms: answer.after_ms,
            usage: answer.usage,
        })
    }
}

/// Ids below this are built once per process and shared.
const SHARED_IDS: u64 = 1024;

/// `toolu_01`, `toolu_02`, ... `toolu_100`: at least two digits. The first [`SHARED_IDS`] are
/// built once per process and shared by every run (building them was a visible share of a turn).
fn tool_use_id(n: u64) -> Arc<str> {
    static IDS: std::sync::OnceLock<Vec<Arc<str>>> = std::sync::OnceLock::new();
    if n < SHARED_IDS {
        let ids = IDS.get_or_init(|| (0..SHARED_IDS).map(build_tool_use_id).collect());
        return ids[n as usize].clone();
    }
    build_tool_use_id(n)
}

fn build_tool_use_id(n: u64) -> Arc<str> {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    let mut n = n;
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    if digits.len() - i < 2 {
        i -= 1;
        digits[i] = b'0';
    }
    let mut s = String::with_capacity(6 + digits.len() - i);
    s.push_str("toolu_");
    s.push_str(std::str::from_utf8(&digits[i..]).expect("ASCII digits"));
    s.into()
}

#[cfg(test)]
mod tests {
    #[test]
    fn tool_use_ids_have_at_least_two_digits() {
        assert_eq!(&*super::tool_use_id(1), "toolu_01");
        assert_eq!(&*super::tool_use_id(42), "toolu_42");
        assert_eq!(&*super::tool_use_id(100), "toolu_100");
    }
}
