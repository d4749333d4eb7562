//! The runtime under tokio, in real time (feature `http-model`): the same runtime and the same
//! effect core as the simulator ([`Core`]), with the model over HTTP ([`HttpModel`]: a provider,
//! or `agentsim mock-llm`) and the scenario's scripted tools answering after their latency in
//! real milliseconds. Model calls and tool runs go on concurrently as tasks; their outcomes come
//! back as the runtime's inputs, in the order they finish; the runtime is told the time
//! (`Runtime::set_now`, ms since the driver started) before each.
//!
//! This is the one place besides the mock server where real time enters (DESIGN §10).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::sync::mpsc;

use super::backend::{BackendError, Delivery, Model, ModelAnswer, ToolBehavior, ToolStep};
use super::core::{Core, Limits, Memory, Persist, RunError, Work};
use super::http::HttpModel;
use super::scripted::{MockLlm, MockTools, ToolScript};
use crate::agents::tools::{builtin, ToolError, ToolOutput};
use crate::model::agent::AgentKind;
use crate::model::agent::Catalog;
use crate::model::ids::CallId;
use crate::model::llm::{Chunk, LlmError, LlmReply};
use crate::model::transcript::Block;
use crate::protocol::{Effect, Input};
use crate::runtime::{Runtime, RuntimeConfig};
use crate::wire::encode::{Outgoing, ToolSpec};

/// What a driven runtime is made of: its agents, its settings, its limits and its scripted tools
/// (a scenario's, through `Scenario::driver_setup`).
#[derive(Clone, Debug)]
pub struct Setup {
    /// The agents.
    pub catalog: Catalog,
    /// The runtime's settings.
    pub config: RuntimeConfig,
    /// The limits.
    pub limits: Limits,
    /// The tools' scripts.
    pub tools: BTreeMap<String, ToolScript>,
}

/// What a conversation driven by [`run_conversation`] did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Driven {
    /// What the user was sent, in order.
    pub sent: Vec<String>,
    /// Model calls made.
    pub model_calls: u64,
    /// Tool runs made.
    pub tool_runs: u64,
}

/// Why a driven conversation stopped.
#[derive(Debug, thiserror::Error)]
pub enum DriveError {
    /// The run broke a limit, or a model's or tool's script ran out.
    #[error("{0}")]
    Run(#[from] RunError),
    /// Nothing answered for this long while the runtime was waiting.
    #[error("nothing happened for {0:?} while the runtime waited (a tool that hangs, a model that stalls)")]
    Stuck(Duration),
}

/// The tools an agent's model calls are offered: the external tools it may use and the built-ins
/// of its kind, each with an open object schema (the runtime reads inputs itself).
fn tools_for(rt: &Runtime, agent: &crate::model::agent::AgentDef, call: CallId) -> Vec<String> {
    let mut names: Vec<String> = rt
        .config()
        .tools
        .keys()
        .filter(|n| agent.allows(n))
        .cloned()
        .collect();
    if !rt.catalog().skills.is_empty() {
        names.push(builtin::USE_SKILL.into());
    }
    if !rt.catalog().agents.is_empty() {
        names.push(builtin::USE_AGENT.into());
    }
    if agent.kind != AgentKind::Main {
        names.push(builtin::COMPLETE.into());
    }
    if agent.fork {
        names.push(builtin::FORK.into());
        names.push(builtin::WAIT.into());
    }
    if rt.offers_ask_user(call) {
        names.push(builtin::ASK_USER.into());
    }
    names
}

/// Who answers the model calls.
#[derive(Debug)]
pub enum Backend {
    /// A model API over HTTP (a provider, or `agentsim mock-llm`).
    Http(HttpModel),
    /// The scenario's scripts, each reply after its latency in real milliseconds.
    Scripted(MockLlm),
}

/// A model call's outcome as the runtime's inputs: a whole reply; or, streamed, its text pieces
/// as they arrive, then its tool uses, then its end; or an error.
fn reply_inputs(call: CallId, reply: super::http::ModelReply, streamed: bool) -> Vec<Input> {
    if !streamed {
        return vec![Input::LlmReply {
            call,
            reply: LlmReply {
                content: reply.blocks.into_iter().collect(),
                usage: reply.usage,
            },
        }];
    }
    // The text went out piece by piece already: only the tool uses and the end are left.
    let mut inputs: Vec<Input> = reply
        .blocks
        .into_iter()
        .filter(|b| matches!(b, Block::ToolUse { .. }))
        .map(|b| Input::LlmChunk {
            call,
            chunk: Chunk::ToolUse(b),
        })
        .collect();
    inputs.push(Input::LlmEnd {
        call,
        usage: reply.usage,
    });
    inputs
}

/// Whether an input ends what a task was started for (a model call or a tool run).
fn ends_a_task(input: &Input) -> bool {
    matches!(
        input,
        Input::LlmReply { .. }
            | Input::LlmEnd { .. }
            | Input::LlmError { .. }
            | Input::ToolDone { .. }
    )
}

/// The effect-applying half of the tokio driver, for any number of conversations: it owns the
/// runtime, feeds it inputs (telling it the time first), and turns its effects into tasks (model
/// calls, tool runs, timers) whose outcomes come back as inputs through [`Engine::next_input`].
/// [`run_conversation`] drives one conversation with it; `agentsim serve` drives a service.
pub struct Engine {
    rt: Runtime,
    core: Core<Persist>,
    /// Added to the ms since the engine started to give the runtime's time (a service uses the
    /// wall clock, so that deadlines persisted before a restart keep their meaning).
    base_ms: u64,
    tools: MockTools,
    tx: mpsc::UnboundedSender<Input>,
    rx: mpsc::UnboundedReceiver<Input>,
    started: Instant,
    timers: BTreeMap<CallId, tokio::task::JoinHandle<()>>,
    /// Model calls and tool runs started whose outcome has not come back.
    tasks: usize,
    step: u64,
    schema: serde_json::Value,
    /// A script that runs out answers its call with a model error (or a tool failure) instead of
    /// stopping the driver: a service keeps serving.
    lenient: bool,
    model_calls: u64,
    tool_runs: u64,
    /// Whether a scripted model or tool moved on during this pump (its position is then
    /// persisted before the pump returns, when the engine persists to files).
    scripts_moved: bool,
    /// The scripted model's calls answered whose replies have not come back to the runtime yet:
    /// persisted with the scripts' position, so that a call issued again after a restart gets
    /// the reply the lost one had.
    in_flight: BTreeMap<CallId, InFlight>,
    /// After a restart, the calls that were in flight: the restored runtime's first calls that
    /// match one (same conversation, agent and number of messages) get its reply again.
    replays: Vec<InFlight>,
    /// The journal's size after its last compaction (see [`Engine::compact_journal`]).
    journal_compacted: u64,
}

/// A scripted model call in flight: what identifies it across a restart, and the script's call
/// number that answered it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct InFlight {
    key: String,
    agent: String,
    messages: usize,
    call: usize,
}

impl Drop for Engine {
    fn drop(&mut self) {
        for (_, h) in std::mem::take(&mut self.timers) {
            h.abort();
        }
    }
}

impl Engine {
    /// An engine over a fresh runtime of `setup`. With `lenient`, a model script or a tool
    /// script that runs out fails that one call instead of the whole drive.
    pub fn new(setup: &Setup, lenient: bool) -> Engine {
        let rt = Runtime::new(Arc::new(setup.catalog.clone()), setup.config.clone());
        Engine::over(rt, setup, lenient, Persist::Memory(Memory::default()), 0)
    }

    /// An engine that persists to `files` and tells its runtime the wall clock's time: restored
    /// from what the files hold, or fresh when they hold no state. A state that cannot be
    /// restored is an error naming the file.
    pub(crate) fn with_files(
        setup: &Setup,
        lenient: bool,
        files: crate::store::FileStore,
        wall_ms: u64,
    ) -> Result<Engine, String> {
        let mut config = setup.config.clone();
        config.persist = true;
        let catalog = Arc::new(setup.catalog.clone());
        let (state, context) = files
            .load()
            .map_err(|e| format!("{}: {e}", files.state_path().display()))?;
        let mut rt = match state {
            Some(state) => Runtime::restore(catalog, config, &state, &context, wall_ms)
                .map_err(|e| format!("{}: {e}", files.state_path().display()))?,
            None => Runtime::new(catalog, config),
        };
        rt.set_now(wall_ms);
        Ok(Engine::over(
            rt,
            setup,
            lenient,
            Persist::Files(files),
            wall_ms,
        ))
    }

    /// An engine over a fresh runtime of `setup` in memory whose time is the wall clock's
    /// (`wall_ms` now): times the runtime gives (an agent's `created_at`) are absolute, as with
    /// [`Engine::with_files`].
    pub(crate) fn at_wall_clock(setup: &Setup, lenient: bool, wall_ms: u64) -> Engine {
        let mut rt = Runtime::new(Arc::new(setup.catalog.clone()), setup.config.clone());
        rt.set_now(wall_ms);
        Engine::over(
            rt,
            setup,
            lenient,
            Persist::Memory(Memory::default()),
            wall_ms,
        )
    }

    fn over(rt: Runtime, setup: &Setup, lenient: bool, persist: Persist, base_ms: u64) -> Engine {
        let (tx, rx) = mpsc::unbounded_channel::<Input>();
        Engine {
            rt,
            core: Core::new(setup.limits, persist),
            base_ms,
            tools: MockTools::new(setup.tools.clone()),
            tx,
            rx,
            started: Instant::now(),
            timers: BTreeMap::new(),
            tasks: 0,
            step: 0,
            schema: json!({"type": "object"}),
            lenient,
            model_calls: 0,
            tool_runs: 0,
            scripts_moved: false,
            in_flight: BTreeMap::new(),
            replays: Vec::new(),
            journal_compacted: 0,
        }
    }

    /// Goes on with the scripts where they were when the engine's files were last written
    /// (`scripted.json` beside the state): each agent's and tool's next call is the one after
    /// those made before the restart, instead of the script's first. Nothing to do for an engine
    /// in memory or files without that record; a record that cannot be read is an error naming
    /// the file.
    pub(crate) fn resume_scripts(&mut self, backend: &mut Backend) -> Result<(), String> {
        let Persist::Files(files) = self.core.persistence() else {
            return Ok(());
        };
        let path = files.scripts_path();
        let bad = |e: String| format!("{}: {e}", path.display());
        let Some(text) = files.load_scripts().map_err(|e| bad(e.to_string()))? else {
            return Ok(());
        };
        let record: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
        if let (Backend::Scripted(mock), Some(model)) = (backend, record.get("model")) {
            if !model.is_null() {
                mock.resume(model).map_err(|e| bad(format!("model: {e}")))?;
            }
        }
        if let Some(tools) = record.get("tools") {
            self.tools
                .resume(tools)
                .map_err(|e| bad(format!("tools: {e}")))?;
        }
        let calls = record.get("in_flight").and_then(|v| v.as_array());
        for c in calls.into_iter().flatten() {
            let field = |name: &str| {
                c.get(name)
                    .ok_or_else(|| bad(format!("in_flight: no {name}")))
            };
            let text = |name: &str| -> Result<String, String> {
                Ok(field(name)?
                    .as_str()
                    .ok_or_else(|| bad(format!("in_flight: {name} is not text")))?
                    .to_owned())
            };
            let count = |name: &str| -> Result<usize, String> {
                Ok(field(name)?
                    .as_u64()
                    .ok_or_else(|| bad(format!("in_flight: {name} is not a count")))?
                    as usize)
            };
            self.replays.push(InFlight {
                key: text("key")?,
                agent: text("agent")?,
                messages: count("messages")?,
                call: count("call")?,
            });
        }
        Ok(())
    }

    /// Persists how far the scripts went, if they moved and the engine persists to files.
    fn persist_scripts(&mut self, backend: &Backend) -> Result<(), DriveError> {
        if !std::mem::take(&mut self.scripts_moved) {
            return Ok(());
        }
        let Persist::Files(files) = self.core.persistence() else {
            return Ok(());
        };
        let model = match backend {
            Backend::Scripted(mock) => mock.position(),
            Backend::Http(_) => serde_json::Value::Null,
        };
        let in_flight: Vec<serde_json::Value> = self
            .in_flight
            .values()
            .map(|c| json!({ "key": c.key, "agent": c.agent, "messages": c.messages, "call": c.call }))
            .collect();
        let record = json!({
            "model": model,
            "tools": self.tools.position(),
            "in_flight": in_flight,
        });
        files.write_scripts(&record.to_string()).map_err(|e| {
            RunError::Persist(format!("{}: {e}", files.scripts_path().display())).into()
        })
    }

    /// Rewrites the journal (`context.jsonl`) with only what a restore from the runtime's state
    /// needs, when it grew past twice what it held after the last compaction (and past
    /// `min_bytes`): sessions that ended leave it, at a cost spread over the lines appended
    /// since. Call it between inputs, once the state is written (after [`Engine::pump`]). The
    /// journal's size before and after, when it was rewritten; nothing for an engine in memory.
    pub(crate) fn compact_journal(&mut self, min_bytes: u64) -> Result<Option<(u64, u64)>, String> {
        let Persist::Files(files) = self.core.persistence() else {
            return Ok(None);
        };
        let path = files.context_path();
        let size = std::fs::metadata(&path).map_or(0, |m| m.len());
        if size < min_bytes.max(self.journal_compacted.saturating_mul(2)) {
            return Ok(None);
        }
        let keep = self.rt.journal_sessions();
        let (before, after) = files
            .compact_context(|id| keep.contains(id))
            .map_err(|e| format!("{}: {e}", path.display()))?;
        self.journal_compacted = after;
        Ok(Some((before, after)))
    }

    /// The runtime, to read.
    pub fn runtime(&self) -> &Runtime {
        &self.rt
    }

    /// The runtime, for inputs given through its own methods (`intervene`, `answer`); call
    /// [`Engine::pump`] after.
    pub(crate) fn runtime_mut(&mut self) -> &mut Runtime {
        self.rt.set_now(self.now());
        &mut self.rt
    }

    fn now(&self) -> u64 {
        self.base_ms + self.started.elapsed().as_millis() as u64
    }

    /// Feeds one input, the time told first.
    pub fn handle(&mut self, input: Input) {
        self.rt.set_now(self.now());
        self.rt.handle(input);
        self.rt.clear_events();
        self.step += 1;
    }

    /// Whether the runtime waits for nothing the engine started and has nothing to do.
    pub fn is_idle(&self) -> bool {
        self.rt.is_idle() && self.tasks == 0
    }

    /// Model calls and tool runs started so far.
    pub fn counts(&self) -> (u64, u64) {
        (self.model_calls, self.tool_runs)
    }

    /// The next outcome of a task the engine started (`None` never happens while the engine
    /// lives: it holds a sender).
    pub async fn next_input(&mut self) -> Option<Input> {
        let input = self.rx.recv().await?;
        if let Input::Timer { timer } = &input {
            self.timers.remove(timer);
        } else if ends_a_task(&input) {
            self.tasks = self.tasks.saturating_sub(1);
            if let Input::LlmReply { call, .. }
            | Input::LlmEnd { call, .. }
            | Input::LlmError { call, .. } = &input
            {
                if self.in_flight.remove(call).is_some() {
                    self.scripts_moved = true;
                }
            }
        }
        Some(input)
    }

    /// Applies every effect the runtime has for the driver: `output` sees each `Send`, `Stream`
    /// and `Session` (what a store of async sessions must record) first; model calls, tool runs
    /// and timers become tasks.
    pub(crate) fn pump(
        &mut self,
        backend: &mut Backend,
        mut output: impl FnMut(&Effect),
    ) -> Result<(), DriveError> {
        // What the store of async sessions must record is handed out after the persistence
        // effects of the same batch: the store never knows of a question the runtime's
        // persisted state does not wait for.
        let mut sessions = Vec::new();
        while let Some(effect) = self.rt.poll_effect() {
            if let Effect::Session(_) = effect {
                sessions.push(effect);
                continue;
            }
            if matches!(effect, Effect::Send { .. } | Effect::Stream { .. }) {
                output(&effect);
            }
            let step = self.step;
            let at = || (step, String::new());
            match self.core.take(&self.rt, effect, at)? {
                Work::CallModel { call, request } => {
                    self.model_calls += 1;
                    let tx = self.tx.clone();
                    let model = match backend {
                        Backend::Http(model) => model,
                        Backend::Scripted(mock) => {
                            self.scripts_moved = true;
                            let agent = &request.agent.name;
                            let (key, messages) = (&**request.key, request.messages.len());
                            // A call the restored runtime issues again gets the lost one's reply.
                            let replayed = self.replays.iter().position(|r| {
                                r.key == key && r.agent == **agent && r.messages == messages
                            });
                            let answered = match replayed {
                                Some(at) => {
                                    let number = self.replays.remove(at).call;
                                    mock.replay(agent, number)
                                        .map(|a| ModelAnswer {
                                            delivery: a.delivery,
                                            after_ms: a.after_ms,
                                            usage: a.usage,
                                        })
                                        .map_err(|e| BackendError::ScriptExhausted {
                                            agent: e.agent,
                                            call: e.call,
                                        })
                                        .map(|a| (a, number))
                                }
                                None => mock
                                    .answer(&request, &mut Vec::new())
                                    .map(|a| (a, mock.calls(agent))),
                            };
                            let answer = match answered {
                                Ok((answer, number)) => {
                                    let call_in_flight = InFlight {
                                        key: key.to_owned(),
                                        agent: agent.to_string(),
                                        messages,
                                        call: number,
                                    };
                                    self.in_flight.insert(call, call_in_flight);
                                    answer
                                }
                                Err(e) if self.lenient => {
                                    let message = e.into_run_error(String::new).to_string();
                                    tracing::warn!(%message, "a model script ran out");
                                    let error = LlmError {
                                        kind: crate::model::llm::LlmErrorKind::Other,
                                        message,
                                    };
                                    self.tasks += 1;
                                    let _ = tx.send(Input::LlmError { call, error });
                                    continue;
                                }
                                Err(e) => return Err(e.into_run_error(String::new).into()),
                            };
                            self.tasks += 1;
                            if answer.delivery == Delivery::Stall {
                                // Never answers: the runtime waits, and so does the driver.
                                continue;
                            }
                            tokio::spawn(scripted_reply(call, answer, tx));
                            continue;
                        }
                    };
                    let names = tools_for(&self.rt, request.agent, call);
                    let specs: Vec<ToolSpec<'_>> = names
                        .iter()
                        .map(|n| ToolSpec {
                            name: n,
                            description: "",
                            schema: &self.schema,
                        })
                        .collect();
                    let model_name = request
                        .model
                        .map_or_else(|| request.agent.name.to_string(), str::to_owned);
                    let out = Outgoing {
                        model: &model_name,
                        system: request.system,
                        messages: request.messages,
                        tools: &specs,
                        max_tokens: 4096,
                        stream: request.agent.stream,
                    };
                    // The body is built here, from the borrowed request; the call goes on in
                    // its own task.
                    let body = crate::wire::encode::request(model.provider(), &out);
                    let streamed = out.stream;
                    let model = model.clone();
                    self.tasks += 1;
                    tokio::spawn(async move {
                        let pieces = tx.clone();
                        let on_text = move |t: &str| {
                            let chunk = Chunk::Text(t.into());
                            let _ = pieces.send(Input::LlmChunk { call, chunk });
                        };
                        match model.send(body, on_text).await {
                            Ok(reply) => {
                                for input in reply_inputs(call, reply, streamed) {
                                    let _ = tx.send(input);
                                }
                            }
                            Err(e) => {
                                let error = LlmError {
                                    kind: e.kind,
                                    message: e.message,
                                };
                                let _ = tx.send(Input::LlmError { call, error });
                            }
                        }
                    });
                }
                Work::RunTool { call, run } => {
                    self.tool_runs += 1;
                    self.scripts_moved = true;
                    let step: ToolStep = match self.tools.next(run.name, run.input) {
                        Ok(step) => step,
                        Err(e) if self.lenient => {
                            let message = format!(
                                "the script of tool '{}' has no entry for call {}",
                                e.tool, e.call
                            );
                            tracing::warn!(%message, "a tool script ran out");
                            self.tasks += 1;
                            let result = Err(ToolError(message));
                            let _ = self.tx.send(Input::ToolDone { call, result });
                            continue;
                        }
                        Err(e) => {
                            return Err(RunError::ToolScriptExhausted {
                                tool: e.tool,
                                call: e.call,
                            }
                            .into())
                        }
                    };
                    let result = match step.behavior {
                        ToolBehavior::Result { content, is_error } => {
                            Ok(ToolOutput { content, is_error })
                        }
                        ToolBehavior::Fail(m) => Err(ToolError(m.to_string())),
                        ToolBehavior::Hang => continue,
                    };
                    let tx = self.tx.clone();
                    self.tasks += 1;
                    tokio::spawn(async move {
                        tokio::time::sleep(Duration::from_millis(step.after_ms)).await;
                        let _ = tx.send(Input::ToolDone { call, result });
                    });
                }
                Work::SetTimer { timer, after_ms } => {
                    let tx = self.tx.clone();
                    let handle = tokio::spawn(async move {
                        tokio::time::sleep(Duration::from_millis(after_ms)).await;
                        let _ = tx.send(Input::Timer { timer });
                    });
                    self.timers.insert(timer, handle);
                }
                Work::CancelTimer { timer } => {
                    if let Some(h) = self.timers.remove(&timer) {
                        h.abort();
                    }
                }
                Work::Output | Work::Done | Work::Session(_) => {}
            }
        }
        // Only the calls a restored runtime issues at once, in its first pump, replay.
        self.replays.clear();
        // Before any reply of this pump reaches the runtime (they come back as inputs, after
        // it returns), the scripts' position is durable: a restart never replays a reply but
        // the one a call issued again lost.
        self.persist_scripts(backend)?;
        for effect in &sessions {
            output(effect);
        }
        Ok(())
    }
}

/// A scripted reply delivered after its latency, in real milliseconds.
async fn scripted_reply(
    call: CallId,
    answer: super::backend::ModelAnswer,
    tx: mpsc::UnboundedSender<Input>,
) {
    tokio::time::sleep(Duration::from_millis(answer.after_ms)).await;
    match answer.delivery {
        Delivery::Content(content) => {
            let reply = LlmReply {
                content,
                usage: answer.usage,
            };
            let _ = tx.send(Input::LlmReply { call, reply });
        }
        Delivery::Stream(pieces) => {
            for (delay, block) in pieces {
                tokio::time::sleep(Duration::from_millis(delay)).await;
                let chunk = match block {
                    Block::Text { text } => Chunk::Text(text),
                    other => Chunk::ToolUse(other),
                };
                let _ = tx.send(Input::LlmChunk { call, chunk });
            }
            let _ = tx.send(Input::LlmEnd {
                call,
                usage: answer.usage,
            });
        }
        Delivery::Error { kind, message } => {
            let error = LlmError {
                kind,
                message: message.to_string(),
            };
            let _ = tx.send(Input::LlmError { call, error });
        }
        Delivery::Stall => {}
    }
}

/// Runs one conversation (`key`) of `setup` under tokio: each of `users` in turn, each until the
/// runtime is idle again, with `backend` answering the model calls. `quiet` bounds how long the
/// driver waits for any outcome while the runtime is busy.
pub async fn run_conversation(
    setup: &Setup,
    backend: &mut Backend,
    key: &str,
    users: &[String],
    quiet: Duration,
) -> Result<Driven, DriveError> {
    let mut engine = Engine::new(setup, false);
    let mut driven = Driven::default();
    let key: Arc<str> = key.into();
    for text in users {
        let mut next = Some(Input::User {
            key: key.clone(),
            text: text.as_str().into(),
        });
        loop {
            if let Some(input) = next.take() {
                engine.handle(input);
            }
            engine.pump(backend, |effect| {
                if let Effect::Send { text, .. } = effect {
                    driven.sent.push(text.to_string());
                }
            })?;
            if engine.is_idle() {
                break;
            }
            match tokio::time::timeout(quiet, engine.next_input()).await {
                Ok(Some(input)) => next = Some(input),
                Ok(None) => unreachable!("the engine holds a sender"),
                Err(_) => return Err(DriveError::Stuck(quiet)),
            }
        }
    }
    (driven.model_calls, driven.tool_runs) = engine.counts();
    Ok(driven)
}
