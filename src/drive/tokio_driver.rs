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

use super::backend::{ToolBehavior, ToolStep};
use super::core::{Core, Limits, Memory, RunError, Work};
use super::http::HttpModel;
use super::scripted::{MockTools, ToolScript};
use crate::agents::tools::{builtin, ToolError, ToolOutput};
use crate::model::agent::AgentKind;
use crate::model::agent::Catalog;
use crate::model::ids::CallId;
use crate::model::llm::{LlmError, LlmReply};
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
    /// The run broke a limit, or a script ran out.
    #[error("{0}")]
    Run(#[from] RunError),
    /// A scripted tool's script ran out.
    #[error("the script of tool '{tool}' has no entry for call {call}")]
    ToolScript {
        /// The tool.
        tool: String,
        /// Its call number.
        call: usize,
    },
    /// Nothing answered for this long while the runtime was waiting.
    #[error("nothing happened for {0:?} while the runtime waited (a tool that hangs, a model that stalls)")]
    Stuck(Duration),
}

/// The tools an agent's model calls are offered: the external tools it may use and the built-ins
/// of its kind, each with an open object schema (the runtime reads inputs itself).
fn tools_for(rt: &Runtime, kind: AgentKind, allows: impl Fn(&str) -> bool) -> Vec<String> {
    let mut names: Vec<String> = rt
        .config()
        .tools
        .keys()
        .filter(|n| allows(n))
        .cloned()
        .collect();
    if !rt.catalog().skills.is_empty() {
        names.push(builtin::USE_SKILL.into());
    }
    if !rt.catalog().agents.is_empty() {
        names.push(builtin::USE_AGENT.into());
    }
    if kind != AgentKind::Main {
        names.push(builtin::COMPLETE.into());
    }
    names.push(builtin::ASK_USER.into());
    names
}

/// Runs one conversation (`key`) of `setup` under tokio: each of `users` in turn, each until the
/// runtime is idle again, with `model` answering the model calls. `quiet` bounds how long the
/// driver waits for any outcome while the runtime is busy.
pub async fn run_conversation(
    setup: &Setup,
    model: &HttpModel,
    key: &str,
    users: &[String],
    quiet: Duration,
) -> Result<Driven, DriveError> {
    let mut rt = Runtime::new(Arc::new(setup.catalog.clone()), setup.config.clone());
    let mut core = Core::new(setup.limits, Memory::default());
    let mut tools = MockTools::new(setup.tools.clone());
    let (tx, mut rx) = mpsc::unbounded_channel::<Input>();
    let started = Instant::now();
    let schema = json!({"type": "object"});
    let mut timers: BTreeMap<CallId, tokio::task::JoinHandle<()>> = BTreeMap::new();
    let mut in_flight = 0usize;
    let mut driven = Driven::default();
    let key: Arc<str> = key.into();
    let mut step = 0u64;
    for text in users {
        let mut next = Some(Input::User {
            key: key.clone(),
            text: text.as_str().into(),
        });
        loop {
            if let Some(input) = next.take() {
                rt.set_now(started.elapsed().as_millis() as u64);
                rt.handle(input);
                rt.clear_events();
                step += 1;
            }
            while let Some(effect) = rt.poll_effect() {
                if let Effect::Send { text, .. } = &effect {
                    driven.sent.push(text.to_string());
                }
                let at = || (step, String::new());
                match core.take(&rt, effect, at)? {
                    Work::CallModel { call, request } => {
                        driven.model_calls += 1;
                        let names = tools_for(&rt, request.agent.kind, |n| request.agent.allows(n));
                        let specs: Vec<ToolSpec<'_>> = names
                            .iter()
                            .map(|n| ToolSpec {
                                name: n,
                                description: "",
                                schema: &schema,
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
                        // The body is built here, from the borrowed request; the call goes on
                        // in its own task.
                        let body = crate::wire::encode::request(model.provider(), &out);
                        let model = model.clone();
                        let tx = tx.clone();
                        in_flight += 1;
                        tokio::spawn(async move {
                            let input = match model.send(body, |_| {}).await {
                                Ok(reply) => Input::LlmReply {
                                    call,
                                    reply: LlmReply {
                                        content: reply.blocks.into_iter().collect(),
                                        usage: reply.usage,
                                    },
                                },
                                Err(e) => Input::LlmError {
                                    call,
                                    error: LlmError {
                                        kind: e.kind,
                                        message: e.message,
                                    },
                                },
                            };
                            let _ = tx.send(input);
                        });
                    }
                    Work::RunTool { call, run } => {
                        driven.tool_runs += 1;
                        let step: ToolStep = tools.next(run.name, run.input).map_err(|e| {
                            DriveError::ToolScript {
                                tool: e.tool,
                                call: e.call,
                            }
                        })?;
                        let result = match step.behavior {
                            ToolBehavior::Result { content, is_error } => {
                                Ok(ToolOutput { content, is_error })
                            }
                            ToolBehavior::Fail(m) => Err(ToolError(m.to_string())),
                            ToolBehavior::Hang => continue,
                        };
                        let tx = tx.clone();
                        in_flight += 1;
                        tokio::spawn(async move {
                            tokio::time::sleep(Duration::from_millis(step.after_ms)).await;
                            let _ = tx.send(Input::ToolDone { call, result });
                        });
                    }
                    Work::SetTimer { timer, after_ms } => {
                        let tx = tx.clone();
                        let handle = tokio::spawn(async move {
                            tokio::time::sleep(Duration::from_millis(after_ms)).await;
                            let _ = tx.send(Input::Timer { timer });
                        });
                        timers.insert(timer, handle);
                    }
                    Work::CancelTimer { timer } => {
                        if let Some(h) = timers.remove(&timer) {
                            h.abort();
                        }
                    }
                    Work::Output | Work::Done => {}
                }
            }
            if rt.is_idle() && in_flight == 0 {
                break;
            }
            match tokio::time::timeout(quiet, rx.recv()).await {
                Ok(Some(input)) => {
                    if let Input::Timer { timer } = &input {
                        timers.remove(timer);
                    } else {
                        in_flight -= 1;
                    }
                    next = Some(input);
                }
                Ok(None) => unreachable!("the driver holds a sender"),
                Err(_) => return Err(DriveError::Stuck(quiet)),
            }
        }
    }
    for (_, h) in timers {
        h.abort();
    }
    Ok(driven)
}
