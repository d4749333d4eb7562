//! The runtime's persisted form: [`Runtime::state`] writes it, [`Runtime::restore`] rebuilds a
//! runtime from it and the journal (see [`crate::persist`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use smallvec::SmallVec;

use crate::agents::frame::{BatchItem, ForkOf, ForkRecord, NodeMore, Phase, StackFrame};
use crate::agents::tree::Status;
use crate::model::agent::{AgentDef, AgentKind, Catalog};
use crate::model::ids::{call_id, CallId, FrameId, IdSource};
use crate::model::transcript::{BlockAt, Session};
use crate::protocol::{Effect, Event};
use crate::runtime::planted::PlantedBug;

use super::{Runtime, RuntimeConfig};

/// Arena places a restore accepts (far more frames than any runtime holds at once).
const MAX_PLACE: u32 = 1 << 14;

impl Runtime {
    /// The persisted form of every conversation. Meaningful between inputs, when every frame
    /// waits for something (the user, a child, a model call, a tool).
    pub fn state(&self) -> crate::persist::State {
        use crate::persist::{ConversationState, State, STATE_VERSION};
        let conversations = self
            .stacks
            .views()
            .enumerate()
            .map(|(slot, v)| {
                let e = v.entry();
                ConversationState {
                    key: e.key.to_string(),
                    main_session_id: e.main_session_id,
                    usage: e.usage,
                    inbox: e.inbox.iter().map(|t| t.to_string()).collect(),
                    active_stack: v.frames().map(|f| self.frame_meta(f)).collect(),
                    forks: self
                        .stacks
                        .forks(slot)
                        .into_iter()
                        .map(|f| self.frame_meta(f))
                        .collect(),
                    session: e.session.as_ref().map(|s| crate::persist::SessionMeta {
                        id: s.id,
                        agent: s.agent.name.clone(),
                        ended: s.ended,
                        failed: s.failed,
                        expires_at: s.expires_at,
                        // Stored once, in the journal: the main session's first message.
                        payload: String::new(),
                        completed: s.outcome.as_ref().is_some_and(|o| o.0),
                        result: s.outcome.as_ref().map(|o| o.1.to_string()),
                    }),
                }
            })
            .map(|mut c: ConversationState| {
                // A session's payload is stored once, in the journal: its main agent's task
                // (the same text) is read back from there too.
                let payload = c
                    .session
                    .is_some()
                    .then(|| self.stacks.get(&c.key)?.session.as_ref())
                    .flatten()
                    .map(|s| s.payload.clone());
                if let (Some(main), Some(payload)) = (c.active_stack.first_mut(), payload) {
                    if let Some(node) = main.node.as_mut() {
                        if main.agent_type == AgentKind::Main && node.user_content == payload {
                            node.user_content = "".into();
                        }
                    }
                }
                c
            })
            .collect();
        State {
            version: STATE_VERSION,
            ids: self.ids.counter(),
            seq: self.seq,
            conversations,
        }
    }

    /// The sessions of `context.jsonl` a restore from the runtime's state needs: every
    /// conversation's main session and every live frame's. The journal's other lines (agents
    /// and sessions that ended) may go.
    pub(crate) fn journal_sessions(&self) -> std::collections::BTreeSet<uuid::Uuid> {
        let mains = self.stacks.entries().iter().map(|e| e.main_session_id);
        let frames = self.stacks.live_frames().map(|f| f.agent_session_id);
        mains.chain(frames).collect()
    }

    /// One frame as `state.json` keeps it.
    fn frame_meta(&self, f: &StackFrame) -> crate::persist::FrameMeta {
        use crate::persist::{ForkMeta, ForkOfMeta, FrameMeta, NodeMeta};
        FrameMeta {
            frame_id: f.frame_id,
            agent_session_id: f.agent_session_id,
            agent_name: f.agent.name.clone(),
            agent_type: f.agent.kind,
            model: f.agent.model.clone(),
            iteration: f.iteration,
            max_iterations: f.max_iterations,
            parent_tool_use_id: f.parent_tool_use_id.clone(),
            effective_tools: f.agent.tools.clone().unwrap_or_default(),
            is_skill_agent: f.agent.kind == AgentKind::Skill,
            environment: BTreeMap::new(),
            waiting: waiting(f),
            turn_start: f.turn_start,
            usage: f.usage,
            batch_sends: f.batch_sends,
            slot: Some(f.id.index()),
            node: Some(NodeMeta {
                status: f.node.status,
                parent_agent: f.node.parent_agent,
                user_comment: f.node.more().user_comment.clone(),
                user_content: f.node.user_content.clone(),
                subagents: f.node.subagents.clone(),
                metadata: f.node.more().metadata.clone(),
                created_at: f.node.created_at,
                order: f.node.order,
                pending_modify: f.node.more().pending_modify.clone(),
                forks: f
                    .node
                    .more()
                    .forks
                    .iter()
                    .map(|r| ForkMeta {
                        handle: r.handle,
                        agent_id: r.agent_id,
                        result: r.result.clone(),
                        status: r.status.is_terminal().then_some(r.status),
                        task: r.task.clone(),
                    })
                    .collect(),
                fork_of: f.node.more().fork_of.and_then(|of| {
                    Some(ForkOfMeta {
                        caller: self.stacks.frame(of.caller)?.frame_id,
                        handle: of.handle,
                    })
                }),
                workflow: f.node.more().workflow,
            }),
        }
    }

    /// Rebuilds a runtime from `state.json` and `context.jsonl` (see [`crate::persist`]). The
    /// restored runtime continues where the persisted one was when it last wrote its state: a frame
    /// that waited for the user, a child or an answer waits again; a frame that waited for a model
    /// call or a tool issues that call again (its effects are waiting in
    /// [`Runtime::poll_effect`], each with an [`crate::protocol::Event::Reissued`]), with its
    /// timeout starting anew. `now_ms` is the driver's time at the restart: an async question's
    /// timeout runs on to its persisted deadline from there.
    pub fn restore(
        catalog: Arc<Catalog>,
        config: RuntimeConfig,
        state: &str,
        context: &str,
        now_ms: u64,
    ) -> Result<Runtime, crate::persist::RestoreError> {
        use crate::persist::{parse_state, replay_context, RestoreError, Waiting};
        let state = parse_state(state)?;
        // A place far beyond any arena a runtime grows is a corrupt state, not a reason to
        // allocate it.
        let places = state
            .conversations
            .iter()
            .flat_map(|c| c.active_stack.iter().chain(&c.forks));
        for meta in places {
            if meta.slot.is_some_and(|s| s >= MAX_PLACE) {
                return Err(RestoreError::State(format!(
                    "frame {} is at arena place {}, beyond the limit of {MAX_PLACE}",
                    meta.frame_id,
                    meta.slot.unwrap_or_default()
                )));
            }
        }
        let skip = config.has_bug(PlantedBug::RestoreForgetsFirstMessage);
        let mut sessions = replay_context(context, skip)?.sessions;
        let mut rt = Runtime::new(catalog, config);
        rt.now = now_ms;
        rt.ids = IdSource::at(rt.config.seed, state.ids);
        rt.seq = state.seq;
        for conv in state.conversations {
            let main_id = conv.main_session_id;
            let slot = rt.stacks.get_or_create(&conv.key, || main_id);
            // A triggered session's main frame runs its agent (seed 003).
            let session = match &conv.session {
                None => None,
                Some(s) => {
                    let def = rt
                        .catalog
                        .get(&s.agent)
                        .ok_or_else(|| RestoreError::MissingAgent(s.agent.clone()))?;
                    Some(Box::new(crate::agents::session::AsyncSession {
                        id: s.id,
                        agent: crate::agents::session::main_def(def),
                        ended: s.ended,
                        failed: s.failed,
                        expires_at: s.expires_at,
                        payload: match s.payload.as_str() {
                            // The journal holds it: the session's first message (states
                            // written before that kept it here).
                            "" => sessions
                                .get(&main_id)
                                .and_then(|m| m.messages.first())
                                .map_or_else(|| "".into(), |m| m.text().into()),
                            text => text.into(),
                        },
                        outcome: s.result.as_ref().map(|r| (s.completed, r.as_str().into())),
                    }))
                }
            };
            let mut frames = Vec::new();
            for mut meta in conv.active_stack {
                // A session's main agent's task is its payload, stored once (see `state`).
                if let (Some(s), Some(node)) = (&session, meta.node.as_mut()) {
                    if meta.agent_type == AgentKind::Main && node.user_content.is_empty() {
                        node.user_content = s.payload.clone();
                    }
                }
                let agent = match &session {
                    Some(s) if meta.agent_type == AgentKind::Main => s.agent.clone(),
                    _ => rt.declared(&meta)?,
                };
                let slot = meta.slot;
                let (frame, reissue) =
                    rt.frame_from_meta(meta, agent, &mut sessions, Some(main_id))?;
                frames.push((frame, reissue, slot));
            }
            let entry = rt.stacks.entry_mut(slot);
            entry.session = session;
            entry.usage = conv.usage;
            entry.inbox = conv.inbox.into_iter().map(Into::into).collect();
            entry.main_session = sessions
                .remove(&main_id)
                .unwrap_or_else(|| Session::with_id(main_id));
            // Agent ids of the frames placed so far, for the forks to find their callers.
            let mut placed: BTreeMap<uuid::Uuid, FrameId> = BTreeMap::new();
            let mut below: Option<FrameId> = None;
            for (frame, reissue, place) in frames {
                let agent_id = frame.frame_id;
                if let Some(place) = place {
                    rt.stacks.place_next_at(place);
                }
                let id = rt.stacks.push(slot, frame);
                placed.insert(agent_id, id);
                if let Some(waiting) = reissue {
                    rt.reissue(id, waiting)?;
                }
                if let Some(parent) = below.and_then(|b| rt.stacks.frame_mut(b)) {
                    if let Phase::AwaitChildren { children } = &mut parent.phase {
                        children.push(id);
                    }
                }
                below = Some(id);
            }
            // Forks, callers first: each runs under its caller's definition, named as it was.
            for meta in conv.forks {
                let (agent_id, name) = (meta.frame_id, meta.agent_name.clone());
                if matches!(meta.waiting, Waiting::User | Waiting::Child) {
                    return Err(RestoreError::State(format!(
                        "fork {agent_id} ({name}) waits for {}, which a fork never does",
                        if matches!(meta.waiting, Waiting::User) {
                            "the user's next message"
                        } else {
                            "a child"
                        }
                    )));
                }
                let of = meta.node.as_ref().and_then(|n| n.fork_of).ok_or_else(|| {
                    RestoreError::State(format!("fork {agent_id} ({name}) names no caller"))
                })?;
                let caller = *placed.get(&of.caller).ok_or_else(|| {
                    RestoreError::State(format!(
                        "fork {agent_id} ({name}) names caller {}, which is not running",
                        of.caller
                    ))
                })?;
                // The caller's own definition, as the fork was started with.
                let base = rt
                    .stacks
                    .frame(caller)
                    .map(|c| c.agent.clone())
                    .expect("a placed caller lives");
                let agent = super::fork::fork_def(&base, name);
                let place = meta.slot;
                let (mut frame, reissue) = rt.frame_from_meta(meta, agent, &mut sessions, None)?;
                if let Some(place) = place {
                    rt.stacks.place_next_at(place);
                }
                frame.node.more_mut().fork_of = Some(ForkOf {
                    caller,
                    handle: of.handle,
                });
                let id = rt.stacks.insert_detached(slot, frame, caller);
                placed.insert(agent_id, id);
                if let Some(record) = rt.stacks.frame_mut(caller).and_then(|c| {
                    c.node
                        .more_mut()
                        .forks
                        .iter_mut()
                        .find(|r| r.agent_id == agent_id)
                }) {
                    record.frame = Some(id);
                }
                if let Some(waiting) = reissue {
                    rt.reissue(id, waiting)?;
                }
            }
        }
        // Every parked `wait` names a fork of its frame that runs: anything else would wait
        // forever.
        for frame in rt.stacks.live_frames() {
            if let Phase::AwaitFork { handle, .. } = frame.phase {
                let runs = frame
                    .node
                    .more()
                    .forks
                    .iter()
                    .any(|r| r.handle == handle && r.frame.is_some());
                if !runs {
                    return Err(RestoreError::State(format!(
                        "frame {} ({}) waits for its fork {handle}, which is not running",
                        frame.frame_id, frame.agent.name
                    )));
                }
            }
        }
        // A frame that waited for an answer the journal already holds (written just before the
        // state that would have said so) goes on from its answer.
        let answered: Vec<FrameId> = rt
            .stacks
            .live_frames()
            .filter(|f| match &f.phase {
                Phase::AwaitAnswer {
                    tool_use_id: Some(id),
                    ..
                } => f.session.has_tool_use_id(id) && !f.session.is_unresolved(id),
                _ => false,
            })
            .map(|f| f.id())
            .collect();
        for id in answered {
            if rt
                .stacks
                .frame(id)
                .is_some_and(|f| f.status() == Status::AwaitingUser)
            {
                rt.set_status(id, Status::Running);
            }
            rt.drive(id, super::turn_context::TurnInput::Answered);
        }
        if rt.config.interruptions.is_some() {
            rt.sync_watchdogs();
        }
        Ok(rt)
    }

    /// The catalog's definition of the agent a persisted frame runs.
    fn declared(
        &self,
        meta: &crate::persist::FrameMeta,
    ) -> Result<Arc<AgentDef>, crate::persist::RestoreError> {
        self.declared_as(meta.agent_type, &meta.agent_name)
    }

    fn declared_as(
        &self,
        kind: AgentKind,
        name: &str,
    ) -> Result<Arc<AgentDef>, crate::persist::RestoreError> {
        match kind {
            AgentKind::Main => Some(self.catalog.main.clone()),
            AgentKind::Skill => self.catalog.skills.get(name).cloned(),
            AgentKind::Agent => self.catalog.agents.get(name).cloned(),
        }
        .ok_or_else(|| crate::persist::RestoreError::MissingAgent(name.to_owned()))
    }

    /// A persisted frame rebuilt with its session from the journal, and the call it must issue
    /// again, if it waited for one. `main_session` is the conversation's main session, which may
    /// be empty (a frame of a main agent that has said nothing yet); every other frame's session
    /// must be in the journal.
    fn frame_from_meta(
        &mut self,
        meta: crate::persist::FrameMeta,
        agent: Arc<AgentDef>,
        sessions: &mut BTreeMap<uuid::Uuid, Session>,
        main_session: Option<uuid::Uuid>,
    ) -> Result<(StackFrame, Option<crate::persist::Waiting>), crate::persist::RestoreError> {
        use crate::persist::{RestoreError, Waiting};
        let session = match sessions.remove(&meta.agent_session_id) {
            Some(s) => s,
            None if meta.agent_type == AgentKind::Main && main_session.is_some() => {
                Session::with_id(main_session.unwrap_or_default())
            }
            None => return Err(RestoreError::MissingSession(meta.agent_session_id)),
        };
        let (phase, reissue) = match meta.waiting {
            Waiting::User => (Phase::AwaitUser, None),
            Waiting::Answer {
                deadline: Some(_), ..
            } => (Phase::AwaitUser, Some(meta.waiting.clone())),
            Waiting::Answer {
                tool_use_id,
                question,
                deadline: None,
                ..
            } => {
                // A state written before questions had ids: one derived from the tool use.
                let question = match (question, &tool_use_id) {
                    (Some(q), _) => q,
                    (None, Some(id)) => legacy_question_id(id),
                    (None, None) => {
                        return Err(RestoreError::State(format!(
                            "frame {} waits for an answer to a question with neither an id nor a tool use",
                            meta.frame_id
                        )))
                    }
                };
                (
                    Phase::AwaitAnswer {
                        question,
                        tool_use_id,
                        timer: None,
                    },
                    None,
                )
            }
            Waiting::Subagents => (Phase::AwaitSubagents, None),
            // Its child is the next frame; it is named once pushed.
            Waiting::Child => (
                Phase::AwaitChildren {
                    children: SmallVec::new(),
                },
                None,
            ),
            Waiting::Fork {
                tool_use_id,
                handle,
            } => {
                let at = session.tool_use_by_id(&tool_use_id).ok_or_else(|| {
                    RestoreError::State(format!(
                        "frame {} waits for fork {handle} in tool use {tool_use_id}, which its session does not hold",
                        meta.frame_id
                    ))
                })?;
                (Phase::AwaitFork { at, handle }, None)
            }
            other => (Phase::Loop, Some(other)),
        };
        let mut frame = StackFrame::new(
            meta.frame_id,
            agent,
            session,
            meta.agent_session_id,
            meta.parent_tool_use_id,
        );
        frame.iteration = if self.config.has_bug(PlantedBug::RestoreResetsIterations) {
            0
        } else {
            meta.iteration
        };
        frame.max_iterations = meta.max_iterations;
        frame.usage = meta.usage;
        frame.phase = phase;
        frame.turn_start = meta.turn_start;
        frame.batch_sends = meta.batch_sends;
        if let Some(node) = meta.node {
            self.order = self.order.max(node.order);
            frame.node.status = node.status;
            frame.node.parent_agent = node.parent_agent;
            frame.node.user_content = node.user_content;
            frame.node.subagents = node.subagents;
            frame.node.created_at = node.created_at;
            frame.node.order = node.order;
            let forks: Vec<ForkRecord> = node
                .forks
                .into_iter()
                .map(|f| ForkRecord {
                    handle: f.handle,
                    agent_id: f.agent_id,
                    frame: None,
                    status: match (f.status, &f.result) {
                        (Some(s), _) => s,
                        (None, Some((_, true))) => Status::Error,
                        (None, Some((_, false))) => Status::Completed,
                        (None, None) => Status::Running,
                    },
                    result: f.result,
                    task: f.task,
                })
                .collect();
            let more = NodeMore {
                user_comment: node.user_comment,
                metadata: node.metadata,
                pending_modify: node.pending_modify,
                forks,
                fork_of: None,
                workflow: node.workflow,
            };
            if more != NodeMore::default() {
                frame.node.more = Some(Box::new(more));
            }
        }
        Ok((frame, reissue))
    }

    /// Issues again the model call or tool runs a restored frame waited for.
    fn reissue(
        &mut self,
        id: FrameId,
        waiting: crate::persist::Waiting,
    ) -> Result<(), crate::persist::RestoreError> {
        use crate::persist::{RestoreError, Waiting};
        let record = self.config.record_events;
        let mut calls: SmallVec<[(CallId, &'static str); 1]> = SmallVec::new();
        let now = self.now;
        let Runtime {
            stacks,
            config,
            effects,
            seq,
            ..
        } = self;
        let frame = stacks.frame_mut(id).expect("just pushed");
        let mut next_call = || {
            *seq += 1;
            call_id(id.index(), *seq)
        };
        let find = |frame: &StackFrame, tool_use_id: &str| {
            frame.session.tool_use_by_id(tool_use_id).ok_or_else(|| {
                RestoreError::State(format!(
                    "frame {} waits for tool use {tool_use_id}, which is not in its session",
                    frame.frame_id
                ))
            })
        };
        let timeout = |frame: &StackFrame, at: BlockAt, name: Option<&Arc<str>>| {
            let name = name.or(frame.session.tool_use_at(at).map(|u| u.name))?;
            config.tools.get(&**name).and_then(|t| t.timeout_ms)
        };
        frame.phase = match waiting {
            Waiting::Llm => {
                let call = next_call();
                effects.push_back(Effect::CallLlm { call });
                calls.push((call, "model call"));
                Phase::AwaitLlm {
                    call,
                    partial: Default::default(),
                }
            }
            Waiting::Tool { tool_use_id, name } => {
                let at = find(frame, &tool_use_id)?;
                let call = next_call();
                effects.push_back(Effect::RunTool { call });
                calls.push((call, "tool run"));
                let timer = timeout(frame, at, name.as_ref()).map(|after_ms| {
                    let timer = next_call();
                    effects.push_back(Effect::SetTimer { timer, after_ms });
                    timer
                });
                Phase::AwaitTool {
                    call,
                    at,
                    name,
                    timer,
                }
            }
            Waiting::Tools { runs } => {
                let mut batch = Vec::with_capacity(runs.len());
                for run in runs {
                    let at = find(frame, &run.tool_use_id)?;
                    let appended =
                        run.output.is_some() && !frame.session.is_unresolved(&run.tool_use_id);
                    let (call, timer) = if run.output.is_some() {
                        (next_call(), None)
                    } else {
                        let call = next_call();
                        effects.push_back(Effect::RunTool { call });
                        calls.push((call, "tool run"));
                        let timer = timeout(frame, at, None).map(|after_ms| {
                            let timer = next_call();
                            effects.push_back(Effect::SetTimer { timer, after_ms });
                            timer
                        });
                        (call, timer)
                    };
                    batch.push(BatchItem {
                        call,
                        at,
                        output: run.output,
                        appended,
                        timer,
                    });
                }
                Phase::AwaitTools { batch }
            }
            Waiting::Answer {
                tool_use_id,
                question: Some(question),
                deadline: Some(deadline),
                timer,
            } => {
                // An async question waits again, its timeout running to the same deadline under
                // the same timer id (a state written before ids were kept draws a new one).
                let timer = timer.unwrap_or_else(&mut next_call);
                let after_ms = deadline.saturating_sub(now);
                effects.push_back(Effect::SetTimer { timer, after_ms });
                Phase::AwaitAnswer {
                    tool_use_id,
                    question,
                    timer: Some((timer, deadline)),
                }
            }
            Waiting::User
            | Waiting::Answer { .. }
            | Waiting::Child
            | Waiting::Subagents
            | Waiting::Fork { .. } => {
                unreachable!("only calls in flight are issued again")
            }
        };
        if record {
            let (name, frame_id, slot) = (
                frame.agent.frame_name.clone(),
                frame.frame_id,
                frame.conversation as usize,
            );
            let key = stacks.entry(slot).key.clone();
            for (call, what) in calls {
                self.events.push(Event::Reissued {
                    key: key.clone(),
                    frame: name.clone(),
                    frame_id,
                    call,
                    what,
                });
            }
        }
        Ok(())
    }
}

/// The id of a question persisted before questions had ids: derived from its `ask_user`, so that
/// no id is drawn (which would shift every later one).
fn legacy_question_id(tool_use_id: &str) -> uuid::Uuid {
    let fnv = |seed: u64| {
        tool_use_id.bytes().fold(seed, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        })
    };
    let (hi, lo) = (fnv(0xcbf2_9ce4_8422_2325), fnv(0x8422_2325_cbf2_9ce4));
    uuid::Uuid::from_u64_pair(hi, lo)
}

/// What a frame waits for, as `state.json` says it.
fn waiting(frame: &StackFrame) -> crate::persist::Waiting {
    use crate::persist::{BatchRun, Waiting};
    match &frame.phase {
        Phase::AwaitAnswer {
            tool_use_id,
            question,
            timer,
        } => Waiting::Answer {
            tool_use_id: tool_use_id.clone(),
            question: Some(*question),
            deadline: timer.map(|(_, at)| at),
            timer: timer.map(|(t, _)| t),
        },
        Phase::AwaitChildren { .. } => Waiting::Child,
        Phase::AwaitSubagents => Waiting::Subagents,
        Phase::AwaitLlm { .. } => Waiting::Llm,
        Phase::AwaitTool { at, name, .. } => match frame.session.tool_use_at(*at) {
            Some(u) => Waiting::Tool {
                tool_use_id: u.id.clone(),
                name: name.clone(),
            },
            None => Waiting::User,
        },
        Phase::AwaitTools { batch } => Waiting::Tools {
            runs: batch
                .iter()
                .filter_map(|item| {
                    let u = frame.session.tool_use_at(item.at)?;
                    Some(BatchRun {
                        tool_use_id: u.id.clone(),
                        output: item.output.clone(),
                    })
                })
                .collect(),
        },
        // Between inputs a frame is never at the loop head or running its tools.
        Phase::AwaitUser | Phase::Loop | Phase::RunTools => Waiting::User,
        Phase::AwaitFork { at, handle } => match frame.session.tool_use_at(*at) {
            Some(u) => Waiting::Fork {
                tool_use_id: u.id.clone(),
                handle: *handle,
            },
            None => Waiting::User,
        },
    }
}
