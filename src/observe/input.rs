//! What the driver feeds, seen before the runtime takes it ([`Observer::before_input`]): the
//! user's messages the observer counts, and the model's replies, listed as the tool uses the
//! semantic checks hold each frame to (with the refusal or delegation each must get, judged from
//! the definitions), stashed until the step shows what the runtime did with them.

use std::sync::Arc;

use smallvec::SmallVec;

use crate::agents::tools::builtin;
use crate::model::agent::{AgentDef, AgentKind};
use crate::model::ids::{same_id, CallId};
use crate::model::llm::Chunk;
use crate::model::messages;
use crate::model::transcript::Block;
use crate::protocol::{Event, Input};
use crate::runtime::{QueryUser, Runtime};

use super::step::fact;
use super::Observer;

/// One `tool_use` of a frame's latest reply.
#[derive(Clone, Debug)]
pub(super) struct Use {
    pub(super) id: Arc<str>,
    pub(super) name: Arc<str>,
    pub(super) answered: bool,
    /// The refusal it must get, when the agent may not use it (judged from the definitions).
    pub(super) refusal: Option<Arc<str>>,
    /// How a `use_skill` must run its skill (judged from the definitions).
    pub(super) delegation: Delegation,
    /// A frame was pushed to answer it.
    pub(super) pushed: bool,
    /// An `ask_user` that must be answered at once (`query_user: none`).
    pub(super) at_once: bool,
}

/// How a `use_skill` runs its skill (DESIGN §3 items 5 and 14), from the skill's definition.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) enum Delegation {
    /// Not a `use_skill`, or one not judged (a skill not declared, a batch skill, a reply that
    /// arrived streamed).
    #[default]
    Unjudged,
    /// A passthrough skill: one external run, never a frame.
    Passthrough,
    /// An interactive skill: a child frame, whose result answers the call.
    Frame,
}

/// A reply being streamed: what the observer needs of it.
#[derive(Clone, Debug, Default)]
pub(super) struct Partial {
    pub(super) uses: SmallVec<[Use; 1]>,
    pub(super) text: bool,
    /// Some of its uses must be answered in the step it is applied in.
    pub(super) at_once: bool,
    /// Its text blocks joined, kept only for a batch child (`batch-answer`).
    pub(super) said: Option<String>,
}

/// The reply this step's input carried, to be matched with what the runtime did with it.
#[derive(Clone, Debug)]
pub(super) struct Stashed {
    pub(super) call: CallId,
    /// Where its caller was found (checked again when the reply is taken).
    pub(super) at: (usize, usize),
    pub(super) reply: Partial,
}

/// A reply's tool uses as the observer lists them.
#[derive(Default)]
struct Listing {
    uses: SmallVec<[Use; 1]>,
    /// It holds text (or a tool result).
    text: bool,
    /// It holds a `use_skill` (whose skill's definition says how it runs).
    skills: bool,
    /// It holds an `ask_user`.
    asks: bool,
}

fn uses_of(content: &[Block]) -> Listing {
    let mut listing = Listing::default();
    // Room for them all at once (a wide reply would grow the list three times).
    if content.len() > 2 {
        let count = content
            .iter()
            .filter(|b| matches!(b, Block::ToolUse { .. }))
            .count();
        listing.uses.reserve_exact(count);
    }
    for block in content {
        match block {
            Block::Text { text: t } => listing.text |= !t.is_empty(),
            Block::ToolUse { id, name, .. } => {
                listing.skills |= &**name == builtin::USE_SKILL;
                listing.asks |= &**name == builtin::ASK_USER;
                listing.uses.push(Use {
                    id: id.clone(),
                    name: name.clone(),
                    answered: false,
                    refusal: None,
                    delegation: Delegation::Unjudged,
                    pushed: false,
                    at_once: false,
                });
            }
            Block::ToolResult { .. } => listing.text = true,
        }
    }
    listing
}

/// The text blocks of `content`, joined (as the session keeps a reply's text).
#[cold]
fn joined_text(content: &[Block]) -> String {
    let mut out = String::new();
    for block in content {
        if let Block::Text { text } = block {
            out.push_str(text);
        }
    }
    out
}

/// The `input` of each `tool_use` of `content`, in order (a reply's uses line up with them).
fn tool_inputs(content: &[Block]) -> impl Iterator<Item = &Arc<serde_json::Value>> {
    content.iter().filter_map(|b| match b {
        Block::ToolUse { input, .. } => Some(input),
        _ => None,
    })
}

/// Whether `text` is one of `words` (DESIGN §3: the whole message, trimmed, case ignored). The
/// observer judges this itself from the configured words, never by asking the runtime it checks.
pub(super) fn is_cancel_word(words: &[String], text: &str) -> bool {
    let text = text.trim();
    words.iter().any(|w| w.eq_ignore_ascii_case(text))
}

impl Observer {
    /// Tells the observer what the driver is about to feed, before [`Runtime::handle`]: the
    /// replies it checks tool execution against, and the user messages it counts.
    pub fn before_input(&mut self, rt: &Runtime, input: &Input) {
        match input {
            Input::User { key, text } if !text.is_empty() => {
                let k = self.input_key_index(key);
                let m = &mut self.keys[k];
                let cancel = is_cancel_word(&rt.config().cancel_words, text);
                if !m.frames.is_empty() && cancel {
                    m.cancels += 1;
                    self.cancel_sent = true;
                } else {
                    m.pending += 1;
                    m.pending_cancels += u32::from(cancel);
                    if !m.listed {
                        m.listed = true;
                        self.pending_keys.push(k);
                    }
                }
            }
            Input::Intervene {
                agent_id,
                intervention,
            } if intervention.deletes() => {
                self.delete_target = Some(*agent_id);
            }
            Input::LlmReply { call, reply } => {
                let Some(at) = self.caller(*call) else {
                    return;
                };
                let Listing {
                    mut uses,
                    text,
                    skills,
                    asks,
                } = uses_of(&reply.content);
                self.refusals(rt, *call, at, &mut uses);
                if skills {
                    Observer::delegations(rt, &reply.content, &mut uses);
                }
                let at_once = asks
                    && rt.config().query_user == QueryUser::None
                    && !self.keys[at.0].session
                    && Observer::answered_at_once(&reply.content, &mut uses);
                let said = self.keys[at.0].frames[at.1]
                    .batch
                    .is_some()
                    .then(|| joined_text(&reply.content));
                self.stash = Some(Stashed {
                    call: *call,
                    at,
                    reply: Partial {
                        uses,
                        text,
                        at_once,
                        said,
                    },
                });
            }
            Input::LlmChunk { call, chunk } => {
                let Some((k, i)) = self.caller(*call) else {
                    return;
                };
                let batch = self.keys[k].frames[i].batch.is_some();
                let partial = self.partials.entry(*call).or_default();
                match chunk {
                    Chunk::Text(t) => {
                        partial.text |= !t.is_empty();
                        if batch {
                            partial.said.get_or_insert_with(String::new).push_str(t);
                        }
                    }
                    Chunk::ToolUse(block) => {
                        let listing = uses_of(std::slice::from_ref(block));
                        partial.uses.extend(listing.uses);
                        partial.text |= listing.text;
                    }
                }
            }
            Input::ToolDone { call, result } => self.tools.on_tool_done(*call, result, rt.now()),
            Input::Answer { question_id, .. } => self.tree.on_answer_input(*question_id),
            Input::Trigger { agent, .. } => self
                .sessions
                .on_trigger_input(agent, rt.catalog().get(agent).is_some()),
            Input::LlmEnd { call, .. } => {
                let Some(at) = self.caller(*call) else {
                    return;
                };
                let mut reply = self.partials.remove(call).unwrap_or_default();
                self.refusals(rt, *call, at, &mut reply.uses);
                self.stash = Some(Stashed {
                    call: *call,
                    at,
                    reply,
                });
            }
            _ => {}
        }
    }

    /// Which of a reply's tool uses the agent that made call `call` may not use, and the refusal
    /// each must get (DESIGN §3): `complete` in a main agent; `fork` and `wait` outside an agent
    /// declared `fork: true`, and any tool the settings do not declare (not found); a declared tool
    /// outside the agent's whitelist; `ask_user` in a batch agent. Read from the definitions (the
    /// agent, its kind in the observer's model, the settings' tools), never from the runtime's
    /// dispatch.
    fn refusals(&mut self, rt: &Runtime, call: CallId, (k, i): (usize, usize), uses: &mut [Use]) {
        if uses.is_empty() {
            return;
        }
        let Some(request) = rt.request(call) else {
            return;
        };
        let main = self.keys[k].frames[i].info.kind == AgentKind::Main;
        let def = request.agent;
        for u in uses {
            // The tool this agent last used as allowed (the usual case: a reply repeats its tools).
            if matches!(&self.allowed, Some((d, tool)) if Arc::ptr_eq(d, def) && same_id(tool, &u.name))
            {
                u.refusal = None;
                continue;
            }
            let name = &*u.name;
            u.refusal = match name {
                builtin::COMPLETE if main => Some(messages::tool_not_available(name).into()),
                builtin::ASK_USER if def.batch.is_some() => {
                    Some(messages::ASK_USER_IN_BATCH.into())
                }
                builtin::COMPLETE | builtin::USE_SKILL | builtin::USE_AGENT | builtin::ASK_USER => {
                    None
                }
                builtin::FORK | builtin::WAIT if def.fork => None,
                _ => self.declared_refusal(rt, def, &u.name),
            };
        }
    }

    /// The refusal a use of tool `name` (no built-in the agent may use) must get: not found
    /// unless the settings declare it, not available outside the agent's whitelist. The agent
    /// and tool are remembered when allowed, since replies repeat their tools.
    fn declared_refusal(
        &mut self,
        rt: &Runtime,
        def: &Arc<AgentDef>,
        name: &Arc<str>,
    ) -> Option<Arc<str>> {
        if !rt.config().tools.contains_key(&**name) {
            return Some(messages::tool_not_found(name).into());
        }
        if !def.allows(name) {
            return Some(messages::tool_not_available(name).into());
        }
        self.allowed = Some((def.clone(), name.clone()));
        None
    }

    /// With `query_user: none`, which `ask_user`s of a reply must be answered at once with
    /// `No answer from the user.`: those with a question, of an agent allowed to ask, outside a
    /// triggered session (whose questions go to the store).
    /// Returns whether any must.
    #[cold]
    fn answered_at_once(content: &[Block], uses: &mut [Use]) -> bool {
        let mut any = false;
        for (u, input) in uses.iter_mut().zip(tool_inputs(content)) {
            u.at_once = &*u.name == builtin::ASK_USER
                && u.refusal.is_none()
                && input.get("question").is_some_and(|q| q.is_string());
            any |= u.at_once;
        }
        any
    }

    /// How each `use_skill` of a reply must run its skill, read from the skill's definition.
    #[cold]
    fn delegations(rt: &Runtime, content: &[Block], uses: &mut [Use]) {
        for (u, input) in uses.iter_mut().zip(tool_inputs(content)) {
            if &*u.name != builtin::USE_SKILL || u.refusal.is_some() {
                continue;
            }
            let skill = input.get("skill").and_then(|s| s.as_str());
            let Some(def) = skill.and_then(|s| rt.catalog().skills.get(s)) else {
                continue;
            };
            u.delegation = match (def.passthrough, def.batch.is_some()) {
                (true, _) => Delegation::Passthrough,
                (false, false) => Delegation::Frame,
                (false, true) => Delegation::Unjudged,
            };
        }
    }

    /// Applies the reply this step's input carried, unless the runtime found it stale or
    /// rejected it.
    pub(super) fn take_stash(&mut self, events: &[Event]) {
        let Some(Stashed { call, at, reply }) = self.stash.take() else {
            return;
        };
        // Where the caller was when the reply was stashed, unless the model moved since.
        let here = |(k, i): (usize, usize)| {
            self.keys
                .get(k)
                .and_then(|m| m.frames.get(i))
                .is_some_and(|f| f.call == Some(call))
        };
        let Some((k, i)) = Some(at)
            .filter(|&at| here(at))
            .or_else(|| self.caller(call))
        else {
            return;
        };
        let frame_id = self.keys[k].frames[i].info.frame_id;
        // Stale (a call nobody waits for) or rejected (a failed turn): not the frame's reply.
        let ignored = events.iter().any(|e| match e {
            Event::Stale { call: c, .. } => *c == call,
            Event::LlmError { frame_id: f, .. } => *f == frame_id,
            _ => false,
        });
        if ignored {
            return;
        }
        let f = &mut self.keys[k].frames[i];
        f.call = None;
        f.completed = false;
        f.at_limit = false;
        let content = reply.text || !reply.uses.is_empty();
        let answered = reply.uses.is_empty() && f.info.kind == AgentKind::Main;
        if let Some(b) = f.batch.as_deref_mut() {
            if b.on_reply(reply.said.map(Arc::from), reply.uses.is_empty()) {
                self.step
                    .mark(fact::BATCH_DUE)
                    .batch_due
                    .push((k, frame_id));
            }
        }
        f.uses = reply.uses;
        if reply.at_once {
            self.step.mark(fact::AT_ONCE).at_once.push(frame_id);
        }
        let (session, name) = (f.info.session_id, f.info.name.clone());
        if answered {
            self.step.mark(fact::ANSWERED).answered.push(frame_id);
        }
        if content {
            self.expect("assistant", session, None, None, &name);
        }
    }

    /// The conversation and stack index of the frame whose model call `call` is in flight: the
    /// latest conversation's frames first, from the top.
    fn caller(&self, call: CallId) -> Option<(usize, usize)> {
        let find = |k: usize| {
            self.keys[k]
                .frames
                .iter()
                .rposition(|f| f.call == Some(call))
                .map(|i| (k, i))
        };
        if let Some(hit) = (self.last < self.keys.len())
            .then(|| find(self.last))
            .flatten()
        {
            return Some(hit);
        }
        (0..self.keys.len())
            .filter(|&k| k != self.last)
            .find_map(find)
    }
}
