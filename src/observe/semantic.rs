//! The semantic half of the observer: the invariants that hold when every structure is valid but
//! the runtime still says something false (a failure reported as a success, a tool use skipped
//! for no documented reason, a message that reaches nobody, a pass left uncounted, a state that
//! runs ahead of its journal).
//!
//! Its model is built from what the driver fed (the model's replies, the user's messages; see
//! [`Observer::before_input`]), the events, and the effects the step asked for; the runtime's
//! state is read only to know whether a conversation is idle.

use std::borrow::Cow;
use std::sync::Arc;

use serde::Deserialize;
use smallvec::SmallVec;
use uuid::Uuid;

use crate::agents::tools::builtin;
use crate::model::agent::{AgentDef, AgentKind, EmptyAnswer};
use crate::model::ids::{same_id, CallId};
use crate::model::llm::Chunk;
use crate::model::messages;
use crate::model::transcript::Block;
use crate::protocol::{Effect, Event, Input};
use crate::runtime::{QueryUser, Runtime};

use super::batch::BatchModel;
use super::{names, same_text, violation, KeyModel, ModelFrame, Observer, Violation};

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

/// A `tool_result` event's parts.
pub(super) struct ResultSeen<'a> {
    pub(super) frame_id: Uuid,
    pub(super) session: Uuid,
    pub(super) tool_use_id: &'a Arc<str>,
    pub(super) content: &'a Arc<str>,
    pub(super) is_error: bool,
}

/// A reply being streamed: what the observer needs of it.
#[derive(Clone, Debug, Default)]
pub(super) struct Partial {
    uses: SmallVec<[Use; 1]>,
    text: bool,
    /// Some of its uses must be answered in the step it is applied in.
    at_once: bool,
    /// Its text blocks joined, kept only for a batch child (`batch-answer`).
    said: Option<String>,
}

/// The reply this step's input carried, to be matched with what the runtime did with it.
#[derive(Clone, Debug)]
pub(super) struct Stashed {
    call: CallId,
    /// Where its caller was found (checked again when the reply is taken).
    at: (usize, usize),
    reply: Partial,
}

/// How the observer sees a frame end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum End {
    /// It called `complete`, or (a batch child) answered.
    Success,
    /// Its model call failed (or its reply was rejected).
    Error,
    /// It made as many passes as its limit allows.
    Limit,
    /// The user's cancel word unwound it.
    Cancel,
    /// An intervention deleted it (or a frame below it).
    Deleted,
    /// The watchdog interrupted it (seed 004): the interruption model decides.
    Interrupted,
    /// The main frame's reply had no tool use: it answered the user.
    Answered,
}

/// A session operation the journal must hold.
#[derive(Clone, Debug)]
pub(super) struct Expect {
    kind: &'static str,
    session: Uuid,
    id: Option<Arc<str>>,
    is_error: Option<bool>,
    frame: Arc<str>,
}

/// What happened in the current step, cleared at its end.
#[derive(Clone, Debug, Default)]
pub(super) struct StepFacts {
    /// Frames whose model call failed or whose reply was rejected.
    failed: SmallVec<[Uuid; 2]>,
    /// Frames that got a child's result.
    resumed: SmallVec<[Uuid; 2]>,
    /// Frames the watchdog spoke about: conversation and frame name.
    pub(super) watchdog: SmallVec<[(usize, Arc<str>); 2]>,
    /// Batch children that answered.
    pub(super) delegated: SmallVec<[Uuid; 2]>,
    /// Main frames that answered the user (a reply with no tool use).
    answered: SmallVec<[Uuid; 2]>,
    /// Frames given "Cancelled by user." that the unwind must remove in this step.
    cancel_skips: SmallVec<[(Uuid, Arc<str>); 2]>,
    /// Frames given "Agent deleted by user." that the deletion must remove in this step.
    delete_skips: SmallVec<[(Uuid, Arc<str>); 2]>,
    /// Children whose `complete` succeeded: they must leave the stack in this step.
    completing: SmallVec<[(Uuid, Arc<str>); 1]>,
    /// Frames whose reply holds an `ask_user` to answer at once (`query_user: none`).
    at_once: SmallVec<[Uuid; 1]>,
    /// Batch children whose reply ended their send: conversation and frame.
    batch_due: SmallVec<[(usize, Uuid); 1]>,
    /// Text sent to the user: conversation and text.
    sent: SmallVec<[(usize, Arc<str>); 2]>,
    /// A main frame that failed, by conversation: its answer must say so.
    main_failure: SmallVec<[(usize, End); 1]>,
    /// Session operations the journal must hold.
    pub(super) expected: Vec<Expect>,
    /// The first semantic violation seen during the step's events (reported after the
    /// structural checks of the step, which it may only be a symptom of).
    pub(super) deferred: Option<Violation>,
    /// The lists something was added to since the last [`StepFacts::clear`], one bit each (see
    /// [`fact`]; every addition goes through [`StepFacts::mark`], so that an empty step costs
    /// one test, and a clear touches only the lists used).
    dirty: u16,
}

/// Which of [`StepFacts`]' lists hold something: one bit each, set by [`StepFacts::mark`].
pub(super) mod fact {
    pub const FAILED: u16 = 1;
    pub const RESUMED: u16 = 1 << 1;
    pub const WATCHDOG: u16 = 1 << 2;
    pub const DELEGATED: u16 = 1 << 3;
    pub const ANSWERED: u16 = 1 << 4;
    pub const CANCEL_SKIPS: u16 = 1 << 5;
    pub const DELETE_SKIPS: u16 = 1 << 6;
    pub const COMPLETING: u16 = 1 << 7;
    pub const AT_ONCE: u16 = 1 << 8;
    pub const BATCH_DUE: u16 = 1 << 9;
    pub const SENT: u16 = 1 << 10;
    pub const MAIN_FAILURE: u16 = 1 << 11;
    pub const EXPECTED: u16 = 1 << 12;
    pub const DEFERRED: u16 = 1 << 13;
}

impl StepFacts {
    /// The facts, to add one to the lists `lists` names (bits of [`fact`]).
    #[inline(always)]
    pub(super) fn mark(&mut self, lists: u16) -> &mut StepFacts {
        self.dirty |= lists;
        self
    }

    #[inline]
    pub(super) fn is_empty(&self) -> bool {
        debug_assert!(
            {
                let clean = |bit: u16, empty: bool| self.dirty & bit != 0 || empty;
                clean(fact::FAILED, self.failed.is_empty())
                    && clean(fact::RESUMED, self.resumed.is_empty())
                    && clean(fact::WATCHDOG, self.watchdog.is_empty())
                    && clean(fact::DELEGATED, self.delegated.is_empty())
                    && clean(fact::ANSWERED, self.answered.is_empty())
                    && clean(fact::CANCEL_SKIPS, self.cancel_skips.is_empty())
                    && clean(fact::DELETE_SKIPS, self.delete_skips.is_empty())
                    && clean(fact::COMPLETING, self.completing.is_empty())
                    && clean(fact::AT_ONCE, self.at_once.is_empty())
                    && clean(fact::BATCH_DUE, self.batch_due.is_empty())
                    && clean(fact::SENT, self.sent.is_empty())
                    && clean(fact::MAIN_FAILURE, self.main_failure.is_empty())
                    && clean(fact::EXPECTED, self.expected.is_empty())
                    && clean(fact::DEFERRED, self.deferred.is_none())
            },
            "a fact was added without StepFacts::mark naming its list"
        );
        self.dirty == 0
    }

    /// Empties the lists that hold something (their room is kept).
    fn clear(&mut self) {
        let dirty = std::mem::take(&mut self.dirty);
        if dirty == 0 {
            return;
        }
        let marked = |bit: u16| dirty & bit != 0;
        if marked(fact::FAILED) {
            self.failed.clear();
        }
        if marked(fact::RESUMED) {
            self.resumed.clear();
        }
        if marked(fact::WATCHDOG) {
            self.watchdog.clear();
        }
        if marked(fact::DELEGATED) {
            self.delegated.clear();
        }
        if marked(fact::ANSWERED) {
            self.answered.clear();
        }
        if marked(fact::CANCEL_SKIPS) {
            self.cancel_skips.clear();
        }
        if marked(fact::DELETE_SKIPS) {
            self.delete_skips.clear();
        }
        if marked(fact::COMPLETING) {
            self.completing.clear();
        }
        if marked(fact::AT_ONCE) {
            self.at_once.clear();
        }
        if marked(fact::BATCH_DUE) {
            self.batch_due.clear();
        }
        if marked(fact::SENT) {
            self.sent.clear();
        }
        if marked(fact::MAIN_FAILURE) {
            self.main_failure.clear();
        }
        if marked(fact::EXPECTED) {
            self.expected.clear();
        }
        if marked(fact::DEFERRED) {
            self.deferred = None;
        }
    }
}

/// The start of one `context.jsonl` line: what the journal check compares.
#[derive(Deserialize)]
struct Head<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    agent_session_id: Uuid,
    #[serde(default, borrow)]
    tool_use_id: Option<Cow<'a, str>>,
    #[serde(default)]
    is_error: Option<bool>,
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
fn is_cancel_word(words: &[String], text: &str) -> bool {
    let text = text.trim();
    words.iter().any(|w| w.eq_ignore_ascii_case(text))
}

impl Observer {
    /// A trigger started a session: its envelope is a message waiting for the session's main
    /// frame, as a user's message would be (the runtime names the session's key only now).
    pub(super) fn on_triggered(&mut self, key: &Arc<str>) {
        let k = self.key_index(key);
        let m = &mut self.keys[k];
        m.session = true;
        m.pending += 1;
        if !m.listed {
            m.listed = true;
            self.pending_keys.push(k);
        }
    }

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

    /// Records a semantic violation to report at the end of the step (the first one wins).
    pub(super) fn defer(&mut self, invariant: &'static str, message: String) {
        if self.step.deferred.is_none() {
            self.step.mark(fact::DEFERRED).deferred = Some(violation(invariant, message));
        }
    }

    pub(super) fn expect(
        &mut self,
        kind: &'static str,
        session: Uuid,
        id: Option<Arc<str>>,
        is_error: Option<bool>,
        frame: &Arc<str>,
    ) {
        if self.persist {
            self.step.mark(fact::EXPECTED).expected.push(Expect {
                kind,
                session,
                id,
                is_error,
                frame: frame.clone(),
            });
        }
    }

    /// A model call of frame `frame_id` (found in conversation `k`): one pass.
    pub(super) fn on_request(
        &mut self,
        k: usize,
        frame_id: Uuid,
        call: CallId,
        iteration: u32,
        max_iterations: u32,
        batch: Option<EmptyAnswer>,
    ) {
        let Some(f) = find(&mut self.keys[k], frame_id) else {
            return;
        };
        if let (Some(policy), None, false) = (batch, &f.batch, f.info.kind == AgentKind::Main) {
            f.batch = Some(Box::new(BatchModel::new(policy)));
        }
        f.passes += 1;
        f.limit = max_iterations;
        f.at_limit = false;
        let main = f.info.kind == AgentKind::Main;
        let old = f.call.replace(call);
        let (passes, lenient) = (f.passes, f.lenient);
        if let (Some(old), false) = (old, self.partials.is_empty()) {
            self.partials.remove(&old);
        }
        if main {
            self.keys[k].main_limit = max_iterations;
        }
        if !lenient && iteration != passes {
            let name = self.keys[k]
                .frames
                .iter()
                .rev()
                .find(|f| f.info.frame_id == frame_id)
                .map(|f| f.info.name.clone())
                .unwrap_or_default();
            self.defer(
                names::ITERATION_ACCOUNTING,
                format!("{name} made model call at iteration {iteration}, but it has made {passes} passes"),
            );
        }
    }

    /// A call the restored runtime issued again.
    pub(super) fn on_reissued(&mut self, k: usize, frame_id: Uuid, call: CallId) {
        let Some(f) = find(&mut self.keys[k], frame_id) else {
            return;
        };
        if let Some(old) = f.call.replace(call) {
            self.partials.remove(&old);
        }
    }

    pub(super) fn on_llm_error(&mut self, frame_id: Uuid) {
        self.step.mark(fact::FAILED).failed.push(frame_id);
    }

    pub(super) fn on_watchdog(&mut self, k: usize, frame: &Arc<str>) {
        let m = &mut self.keys[k];
        if m.cancels > 0 {
            // A cancel word that stops only the frame on top (seed 004's scope) acts here.
            m.cancels -= 1;
        }
        if let Some(f) = m.frames.iter_mut().rev().find(|f| f.info.name == *frame) {
            f.lenient = true;
        }
        self.step
            .mark(fact::WATCHDOG)
            .watchdog
            .push((k, frame.clone()));
    }

    /// A workflow agent's text reply was a decision of its workflow (it entered a step, asked a
    /// question, or waits for its children), not an answer to the user.
    pub(super) fn on_workflow_decision(&mut self, frame_id: Uuid) {
        self.step.answered.retain(|f| *f != frame_id);
    }

    /// A workflow agent ended its workflow with its summary: a success, like a batch child's
    /// answer.
    pub(super) fn on_workflow_done(&mut self, frame_id: Uuid) {
        self.step.mark(fact::DELEGATED).delegated.push(frame_id);
    }

    pub(super) fn on_sent(&mut self, k: usize, text: &Arc<str>) {
        self.step.mark(fact::SENT).sent.push((k, text.clone()));
    }

    /// A user message delivered to frame `frame_id`.
    pub(super) fn on_user_message(
        &mut self,
        rt: &Runtime,
        k: usize,
        frame_id: Uuid,
        text: &Arc<str>,
    ) {
        // A cancel word reaches a frame as a message only when it starts the conversation (an
        // empty stack, whose new main frame it is pushed for); on a stack it unwinds (DESIGN §3).
        // (Only a message that waited can be one: a cancel word sent to a stack acts at once.)
        if self.keys[k].pending_cancels > 0
            && is_cancel_word(&rt.config().cancel_words, text)
            && !self.pushed.iter().any(|p| (p.0, p.1) == (k, frame_id))
        {
            let key = self.keys[k].key.clone();
            self.defer(
                names::MESSAGE_DELIVERY,
                format!("the cancel word {text:?} was delivered in {key} as a message to a frame already on its stack, instead of unwinding it"),
            );
        }
        let m = &mut self.keys[k];
        if m.pending == 0 {
            let key = m.key.clone();
            self.defer(
                names::MESSAGE_DELIVERY,
                format!("a user message {text:?} was delivered in {key}, but none was waiting (delivered twice, or never sent)"),
            );
            return;
        }
        m.pending -= 1;
        if m.pending_cancels > m.pending {
            m.pending_cancels = m.pending;
        }
        let Some(f) = find(m, frame_id) else {
            return;
        };
        // An open `ask_user` takes the message as its answer (a `tool_result`, journaled as one).
        let answer = f
            .uses
            .iter()
            .any(|u| !u.answered && &*u.name == builtin::ASK_USER);
        if !answer {
            // The message resumes the frame at the loop head: a pass of its own when tool uses
            // of an earlier reply are left to run.
            resume(f);
            let (session, name) = (f.info.session_id, f.info.name.clone());
            self.step.mark(fact::RESUMED).resumed.push(frame_id);
            self.expect("user", session, None, None, &name);
        }
    }

    /// A cancel word unwound conversation `k`, dropping `dropped` queued messages.
    pub(super) fn on_cancelled(&mut self, k: usize, dropped: usize) {
        let m = &mut self.keys[k];
        if m.cancels > 0 {
            m.cancels -= 1;
        } else if m.pending_cancels > 0 {
            // A cancel word that waited in the queue.
            m.pending_cancels -= 1;
            m.pending -= 1;
        } else {
            let key = m.key.clone();
            self.defer(
                names::MESSAGE_DELIVERY,
                format!("{key} was unwound with no cancel word sent"),
            );
            return;
        }
        let dropped = u32::try_from(dropped).unwrap_or(u32::MAX);
        if dropped > m.pending {
            let (key, pending) = (m.key.clone(), m.pending);
            self.defer(
                names::MESSAGE_DELIVERY,
                format!("the unwind of {key} dropped {dropped} queued messages, but {pending} were waiting"),
            );
            return;
        }
        m.pending -= dropped;
        m.pending_cancels = m.pending_cancels.min(m.pending);
    }

    /// A `tool_result` entered the session of frame `frame_id`; `delivery` when it is the result
    /// of a child popped in this step.
    pub(super) fn on_tool_result(&mut self, k: usize, r: ResultSeen<'_>, delivery: bool) {
        let ResultSeen {
            frame_id,
            session,
            tool_use_id,
            content,
            is_error,
        } = r;
        let resumed = self.step.resumed.contains(&frame_id);
        let watched = self.step.watchdog.iter().any(|(wk, _)| *wk == k);
        // Frames at or above the agent an intervention deletes in this step go with it.
        let deleting = self.delete_target.is_some();
        let being_deleted = self.delete_target.is_some_and(|target| {
            let frames = &self.keys[k].frames;
            let at = frames.iter().position(|f| f.info.frame_id == target);
            let me = frames.iter().position(|f| f.info.frame_id == frame_id);
            matches!((at, me), (Some(t), Some(m)) if m >= t)
        });
        let Some(f) = find(&mut self.keys[k], frame_id) else {
            return;
        };
        let name = f.info.name.clone();
        let persist_session = f.info.session_id == session;
        let Some(i) = f
            .uses
            .iter()
            .position(|u| !u.answered && same_id(&u.id, tool_use_id))
        else {
            if persist_session {
                self.expect(
                    "tool_result",
                    session,
                    Some(tool_use_id.clone()),
                    Some(is_error),
                    &name,
                );
            }
            return;
        };
        let u = &mut f.uses[i];
        u.answered = true;
        let (use_name, refusal) = (u.name.clone(), u.refusal.clone());
        let frame_expected = u.delegation == Delegation::Frame && !u.pushed;
        let at_once = u.at_once;
        let (completed, passes, limit) = (f.completed, f.passes, f.limit);
        let over = f.at_limit;
        let problem = match &**content {
            messages::SKIPPED_AFTER_COMPLETE if !completed => Some(format!(
                "{tool_use_id} ({use_name}) of {name} was skipped as after `complete`, but {name} did not complete"
            )),
            messages::SKIPPED_AFTER_COMPLETE => None,
            messages::SKIPPED_AFTER_LIMIT if !(resumed && passes >= limit) => Some(format!(
                "{tool_use_id} ({use_name}) of {name} was skipped at the iteration limit, but {name} had made {passes} of {limit} passes{}",
                if resumed { "" } else { " and was not resuming at the loop head" }
            )),
            messages::SKIPPED_AFTER_LIMIT => None,
            messages::CANCELLED_BY_USER => {
                self.step.mark(fact::CANCEL_SKIPS).cancel_skips.push((frame_id, name.clone()));
                None
            }
            messages::TOOL_INTERRUPTED if !watched => Some(format!(
                "{tool_use_id} ({use_name}) of {name} was answered as interrupted, but nothing interrupted {name}"
            )),
            messages::TOOL_INTERRUPTED => None,
            // A fork's final text answers `wait`, whatever it says.
            _ if &*use_name == builtin::WAIT => None,
            _ if &*use_name == builtin::FORK && !is_error && !is_skip(content) => {
                if let Err(v) = self
                    .tree
                    .on_fork_answered(frame_id, &name, tool_use_id, content)
                {
                    self.step.mark(fact::DEFERRED).deferred.get_or_insert(v);
                }
                None
            }
            messages::AGENT_DELETED if !deleting => Some(format!(
                "{tool_use_id} ({use_name}) of {name} was answered as deleted, but no intervention deleted anything"
            )),
            messages::AGENT_DELETED if being_deleted => {
                self.step.mark(fact::DELETE_SKIPS).delete_skips.push((frame_id, name.clone()));
                None
            }
            messages::AGENT_DELETED if !delivery => Some(format!(
                "{tool_use_id} ({use_name}) of {name} was answered as deleted, but {name} is not being deleted"
            )),
            messages::AGENT_DELETED => None,
            _ if completed => Some(format!(
                "{tool_use_id} ({use_name}) of {name} ran after {name} called `complete`"
            )),
            _ => None,
        };
        let problem = problem.map(|m| (names::TOOL_EXECUTION, m)).or_else(|| {
            (over && !is_skip(content)).then(|| {
                let m = format!(
                    "{name} ran {tool_use_id} ({use_name}) in a pass over its limit of {limit}"
                );
                (names::ITERATION_BOUND, m)
            })
        });
        let main = f.info.kind == AgentKind::Main;
        // The built-in tools are the runtime's own: never "not found", and a child's `complete`
        // completes it.
        let builtin_name = matches!(
            &*use_name,
            builtin::COMPLETE | builtin::USE_SKILL | builtin::USE_AGENT | builtin::ASK_USER
        );
        let problem = problem.or_else(|| {
            (builtin_name && messages::is_tool_not_found(content, &use_name)).then(|| {
                let m = format!("{name} called the built-in {use_name} ({tool_use_id}), but it was answered as not found");
                (names::TOOL_EXECUTION, m)
            })
        });
        let problem = problem.or_else(|| {
            let m = match &refusal {
                Some(want) if !(is_skip(content) || (is_error && same_text(want, content))) => {
                    format!("{name} may not use {use_name}, so {tool_use_id} must be refused with {want:?}, but it got {content:?}")
                }
                None if is_error && is_refusal(&use_name, content) => format!(
                    "{tool_use_id} ({use_name}) was refused with {content:?}, but {name} may use it"
                ),
                _ => return None,
            };
            Some((names::TOOL_EXECUTION, m))
        });
        let problem = problem.or_else(|| {
            (at_once && !is_skip(content) && (is_error || **content != *messages::NO_ANSWER)).then(|| {
                let m = format!("{name}'s ask_user {tool_use_id} was answered {content:?}, but with query_user: none it is answered {:?}", messages::NO_ANSWER);
                (names::TOOL_EXECUTION, m)
            })
        });
        let problem = problem.or_else(|| {
            (frame_expected && !is_error && !is_skip(content)).then(|| {
                let m = format!("{name}'s use_skill {tool_use_id} was answered {content:?}, but its skill, which is not a passthrough skill, never ran as a child frame");
                (names::TOOL_EXECUTION, m)
            })
        });
        let problem = problem.or_else(|| {
            (&*use_name == builtin::COMPLETE && !main && is_error && !is_skip(content)).then(|| {
                let m = format!("{name} called `complete` ({tool_use_id}), but it was answered with the error {content:?}");
                (names::TOOL_EXECUTION, m)
            })
        });
        if &*use_name == builtin::COMPLETE && !is_error {
            f.completed = true;
            if !main {
                self.step
                    .mark(fact::COMPLETING)
                    .completing
                    .push((frame_id, name.clone()));
            }
        }
        // A child's result resumes its parent at the loop head: a pass of its own when tool uses
        // are left to run (DESIGN §3 item 6), unless the limit ends it there.
        if delivery && &**content != messages::CANCELLED_BY_USER && !being_deleted {
            self.step.mark(fact::RESUMED).resumed.push(frame_id);
            resume(f);
        }
        if let Some((invariant, message)) = problem {
            self.defer(invariant, message);
        }
        if persist_session {
            self.expect(
                "tool_result",
                session,
                Some(tool_use_id.clone()),
                Some(is_error),
                &name,
            );
        }
    }

    /// Frame `frame` left conversation `k`'s stack. Returns whether its result must be an
    /// error (`None`: the observer cannot tell, as after an interruption).
    pub(super) fn on_pop(
        &mut self,
        k: usize,
        popped: &ModelFrame,
        reason: crate::protocol::PopReason,
        iterations: u32,
    ) -> Option<bool> {
        use crate::protocol::PopReason as R;
        let id = popped.info.frame_id;
        let name = &popped.info.name;
        if let (Some(call), false) = (popped.call, self.partials.is_empty()) {
            self.partials.remove(&call);
        }
        if !popped.lenient && iterations > popped.limit && popped.limit > 0 {
            self.defer(
                names::ITERATION_BOUND,
                format!(
                    "{name} left the stack reporting {iterations} iterations, over its limit of {}",
                    popped.limit
                ),
            );
        } else if !popped.lenient && iterations != popped.passes {
            self.defer(
                names::ITERATION_ACCOUNTING,
                format!(
                    "{name} left the stack reporting {iterations} iterations, but it made {} passes",
                    popped.passes
                ),
            );
        }
        let main = popped.info.kind == AgentKind::Main;
        if !main {
            self.expect(
                "agent_session_complete",
                popped.info.session_id,
                None,
                None,
                name,
            );
        }
        let watched = self
            .step
            .watchdog
            .iter()
            .any(|(wk, n)| *wk == k && n == name);
        let end = if reason == R::Cancelled {
            End::Cancel
        } else if reason == R::Deleted {
            if self.delete_target.is_none() {
                self.defer(
                    names::ERROR_PROPAGATION,
                    format!("{name} left the stack as deleted, but no intervention deleted it"),
                );
                return Some(true);
            }
            End::Deleted
        } else if watched || popped.lenient {
            End::Interrupted
        } else if self.step.failed.contains(&id) {
            End::Error
        } else if popped.completed || self.step.delegated.contains(&id) {
            End::Success
        } else if main && self.step.answered.contains(&id) {
            End::Answered
        } else if popped.passes >= popped.limit {
            End::Limit
        } else {
            self.defer(
                names::ERROR_PROPAGATION,
                format!("{name} left the stack ({reason:?}) but did not complete, fail, reach its limit or get cancelled"),
            );
            return None;
        };
        let agrees = match end {
            End::Success => reason == R::Completed,
            End::Answered => reason == R::Answered,
            End::Error => reason == R::Error,
            End::Limit => reason == R::MaxIterations,
            End::Deleted => reason == R::Deleted,
            End::Cancel | End::Interrupted => true,
        };
        if !agrees {
            let saw = match end {
                End::Success => "completed",
                End::Answered => "answered",
                End::Error => "had its model call fail",
                End::Limit => "reached its iteration limit",
                End::Deleted => "was deleted",
                End::Cancel | End::Interrupted => "was interrupted",
            };
            self.defer(
                names::ERROR_PROPAGATION,
                format!("{name} {saw}, but left the stack as {reason:?}"),
            );
        }
        if main && matches!(end, End::Error | End::Limit) {
            self.step
                .mark(fact::MAIN_FAILURE)
                .main_failure
                .push((k, end));
        }
        match end {
            End::Success => Some(false),
            End::Error | End::Limit | End::Cancel | End::Deleted => Some(true),
            End::Interrupted | End::Answered => None,
        }
    }

    /// The main agent's turn ended with `text`: a failure must be told as one.
    pub(super) fn on_response(&mut self, k: usize, text: &Arc<str>) {
        let Some(i) = self.step.main_failure.iter().position(|(mk, _)| *mk == k) else {
            return;
        };
        let (_, end) = self.step.main_failure.swap_remove(i);
        let told = match end {
            End::Limit => &**text == messages::USER_MAX_STEPS,
            _ => text.starts_with("LLM error: "),
        };
        let sent = self.step.sent.iter().any(|(sk, s)| *sk == k && s == text);
        if !told || !sent {
            let what = if end == End::Limit {
                "reached its iteration limit"
            } else {
                "had its model call fail"
            };
            let key = self.keys[k].key.clone();
            self.defer(
                names::ERROR_PROPAGATION,
                format!(
                    "the main agent of {key} {what}, but the user was {} {text:?}",
                    if sent { "told" } else { "not sent" }
                ),
            );
        }
    }

    /// The end-of-step checks of the semantic invariants.
    /// `cancel_sent`: a cancel word was sent in the step (only then can one be left unhandled).
    pub(super) fn semantic_end(
        &mut self,
        rt: &Runtime,
        cancel_sent: bool,
    ) -> Result<(), Violation> {
        let result = self.semantic_checks(rt, cancel_sent);
        self.step.clear();
        result
    }

    fn semantic_checks(&mut self, rt: &Runtime, cancel_sent: bool) -> Result<(), Violation> {
        if let Some(v) = self.step.deferred.take() {
            return Err(v);
        }
        let on_stack = |id: &Uuid| {
            self.keys
                .iter()
                .any(|m| m.frames.iter().any(|f| f.info.frame_id == *id))
        };
        // Frames that had to leave the stack in this step: unwound, or completed.
        if let Some((_, name)) = self.step.cancel_skips.iter().find(|(id, _)| on_stack(id)) {
            return Err(violation(
                names::TOOL_EXECUTION,
                format!("tool uses of {name} were answered as cancelled by the user, but no cancel unwound {name}"),
            ));
        }
        if let Some((_, name)) = self.step.delete_skips.iter().find(|(id, _)| on_stack(id)) {
            return Err(violation(
                names::TOOL_EXECUTION,
                format!("tool uses of {name} were answered as deleted, but {name} is still on the stack"),
            ));
        }
        // With nobody to ask, an `ask_user` is answered in the step of its reply.
        for id in &self.step.at_once {
            let frame = self
                .keys
                .iter()
                .flat_map(|m| m.frames.iter())
                .find(|f| f.info.frame_id == *id);
            if let Some(f) = frame {
                if let Some(u) = f.uses.iter().find(|u| u.at_once && !u.answered) {
                    return Err(violation(
                        names::TOOL_EXECUTION,
                        format!("{}'s ask_user {} was left unanswered at the end of its reply's step, but with query_user: none it is answered at once", f.info.name, u.id),
                    ));
                }
            }
        }
        if let Some((_, name)) = self.step.completing.iter().find(|(id, _)| on_stack(id)) {
            return Err(violation(
                names::TOOL_EXECUTION,
                format!("{name} called `complete`, but it is still on the stack"),
            ));
        }
        for m in self.keys.iter_mut().filter(|_| cancel_sent) {
            if m.cancels > 0 {
                let key = m.key.clone();
                m.cancels = 0;
                return Err(violation(
                    names::MESSAGE_DELIVERY,
                    format!("a cancel word sent to {key} was neither acted on nor delivered"),
                ));
            }
        }
        let mut i = 0;
        while i < self.pending_keys.len() {
            let k = self.pending_keys[i];
            let m = &mut self.keys[k];
            if m.pending == 0 {
                m.listed = false;
                self.pending_keys.swap_remove(i);
                continue;
            }
            i += 1;
            let idle = rt.stack(&m.key).is_none_or(|v| {
                v.entry().inbox.is_empty() && v.top().is_none_or(|f| f.awaits_user())
            });
            if idle {
                return Err(violation(
                    names::MESSAGE_DELIVERY,
                    format!(
                        "{} is idle, but {} user message(s) sent to it were neither delivered nor dropped by a cancel",
                        m.key, m.pending
                    ),
                ));
            }
        }
        self.batch_checks(&self.step.batch_due)?;
        if self.persist {
            self.check_journal(rt.effects())?;
        }
        Ok(())
    }

    /// Every session operation of the step is in the journal lines it emitted, and no line
    /// follows the state written at its end.
    pub(super) fn check_journal<'a>(
        &self,
        effects: impl Iterator<Item = &'a Effect>,
    ) -> Result<(), Violation> {
        let mut lines: Vec<Head<'a>> = Vec::new();
        let mut state_written = false;
        for effect in effects {
            match effect {
                Effect::WriteState { .. } => state_written = true,
                Effect::AppendContext { line } => {
                    if state_written {
                        return Err(violation(
                            names::JOURNAL_BEFORE_STATE,
                            format!(
                                "the state was written before the journal line {}",
                                line.trim_end()
                            ),
                        ));
                    }
                    for one in line.lines() {
                        match serde_json::from_str::<Head<'_>>(one) {
                            Ok(head) => lines.push(head),
                            Err(e) => {
                                return Err(violation(
                                    names::JOURNAL_BEFORE_STATE,
                                    format!("an unreadable journal line ({e}): {one}"),
                                ))
                            }
                        }
                    }
                }
                _ => {}
            }
        }
        for want in &self.step.expected {
            let found = lines.iter().position(|h| {
                h.kind == want.kind
                    && h.agent_session_id == want.session
                    && want
                        .id
                        .as_deref()
                        .is_none_or(|id| h.tool_use_id.as_deref() == Some(id))
                    && want.is_error.is_none_or(|e| h.is_error == Some(e))
            });
            match found {
                Some(i) => {
                    lines.remove(i);
                }
                None => {
                    let what = match want.kind {
                        "agent_session" => "the start of the session".to_owned(),
                        "agent_session_complete" => "the end of the session".to_owned(),
                        "user" => "a user message".to_owned(),
                        "assistant" => "a model reply".to_owned(),
                        _ => format!("the tool_result for {}", want.id.as_deref().unwrap_or("?")),
                    };
                    return Err(violation(
                        names::JOURNAL_BEFORE_STATE,
                        format!(
                            "{what} of {} (session {}) was not journaled before the state that follows it",
                            want.frame, want.session
                        ),
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Frame `f` resumes at the loop head: a pass of its own when tool uses are left to run, unless
/// it has no pass left, when it must end there.
fn resume(f: &mut ModelFrame) {
    if f.uses.iter().any(|u| !u.answered) {
        if f.passes < f.limit {
            f.passes += 1;
        } else {
            f.at_limit = true;
        }
    }
}

/// Whether `content` is a refusal of tool `name`: not found, not available to the agent or to a
/// fork, or `ask_user` in a batch agent.
fn is_refusal(name: &str, content: &str) -> bool {
    messages::is_tool_not_found(content, name)
        || messages::is_tool_not_available(content, name)
        || messages::is_not_available_to_fork(content, name)
        || (name == builtin::ASK_USER && content == messages::ASK_USER_IN_BATCH)
}

/// Whether `content` is one of the documented skip results.
pub(super) fn is_skip(content: &str) -> bool {
    matches!(
        content,
        messages::SKIPPED_AFTER_COMPLETE
            | messages::SKIPPED_AFTER_LIMIT
            | messages::CANCELLED_BY_USER
            | messages::TOOL_INTERRUPTED
            | messages::AGENT_DELETED
    )
}

fn find(m: &mut KeyModel, frame_id: Uuid) -> Option<&mut ModelFrame> {
    m.frames
        .iter_mut()
        .rev()
        .find(|f| f.info.frame_id == frame_id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_is_one_of_the_documented_texts_for_its_tool() {
        assert!(is_refusal("t1", &messages::tool_not_found("t1")));
        assert!(is_refusal("t1", &messages::tool_not_available("t1")));
        assert!(is_refusal(
            "use_agent",
            &messages::not_available_to_fork("use_agent")
        ));
        assert!(is_refusal("ask_user", messages::ASK_USER_IN_BATCH));
        // Another tool's refusal, a tool's own failure, or a batch refusal of another tool are not.
        assert!(!is_refusal("t2", &messages::tool_not_found("t1")));
        assert!(!is_refusal("t1", &messages::tool_failed("disk full")));
        assert!(!is_refusal("t1", messages::ASK_USER_IN_BATCH));
    }
}
