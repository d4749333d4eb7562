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

use super::backend::{Delivery, Model, ToolBehavior, ToolStep};
use super::core::{Core, Limits, Memory, RunError, Work};
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
                        let model = match backend {
                            Backend::Http(model) => model,
                            Backend::Scripted(mock) => {
                                let answer = mock
                                    .answer(&request, &mut Vec::new())
                                    .map_err(|e| e.into_run_error(String::new))?;
                                if answer.delivery == Delivery::Stall {
                                    // Never answers: the runtime waits, and so does the driver.
                                    in_flight += 1;
                                    continue;
                                }
                                let tx = tx.clone();
                                in_flight += 1;
                                tokio::spawn(async move {
                                    tokio::time::sleep(Duration::from_millis(answer.after_ms))
                                        .await;
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
                                                tokio::time::sleep(Duration::from_millis(delay))
                                                    .await;
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
                                });
                                continue;
                            }
                        };
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
                        let streamed = out.stream;
                        let model = model.clone();
                        let tx = tx.clone();
                        in_flight += 1;
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
                        driven.tool_runs += 1;
                        let step: ToolStep = tools.next(run.name, run.input).map_err(|e| {
                            RunError::ToolScriptExhausted {
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
                    } else if ends_a_task(&input) {
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
