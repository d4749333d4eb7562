//! The one step interpreter: it plays a scenario's steps against a [`Sim`]. A scenario run, an
//! exploration run and the benchmark workloads all play their steps through [`play`]; what differs
//! between them is a [`Hooks`] value: a scenario run checks expectations, exploration interjects
//! user messages and restarts between simulator steps and records what it did as steps that replay
//! exactly, a workload does nothing else.
//!
//! A `user` step that waits is played one simulator step at a time until the runtime is idle, so
//! hooks can act between any two steps; with hooks that never interject this is exactly
//! [`Sim::run_until_idle`].

use crate::agents::tree::Intervention;
use crate::sim::{RunError, Sim};

use super::expect::Mismatch;
use super::format::ExpectSpec;
use super::{Step, StepKind};

/// What a player does around the steps. Every method has a default that does nothing, so a
/// player that only plays needs none of them.
pub trait Hooks {
    /// Before each simulator step: a user message to type now, for conversation `key`.
    fn interject(&mut self, _sim: &mut Sim, _key: &str) -> Option<String> {
        None
    }

    /// Before each simulator step: whether to restart the runtime first (in the middle of a turn).
    fn restart_before_step(&mut self, _sim: &mut Sim) -> bool {
        false
    }

    /// Before each simulator step: an intervention to make now, on the agent named (as an
    /// `intervene` step names one).
    fn intervention(&mut self, _sim: &mut Sim) -> Option<(String, Intervention)> {
        None
    }

    /// After a `user` step that waited until the runtime was idle: whether to restart here.
    fn restart_when_idle(&mut self, _sim: &mut Sim) -> bool {
        false
    }

    /// An `expect` step: `Err` with what differed stops the run.
    fn expect(&mut self, _spec: &ExpectSpec, _sim: &Sim) -> Result<(), Vec<Mismatch>> {
        Ok(())
    }

    /// The player delivered a user message (from a step or an interjection).
    fn on_user(&mut self, _key: &str, _text: &str) {}

    /// The player fed an intervention (from a step or the hooks).
    fn on_intervene(&mut self, _agent: &str, _intervention: &Intervention) {}

    /// The player answered a question: by its id, asked by the agent at `asking` (a path, when
    /// a question had the id).
    fn on_answer(&mut self, _asking: Option<&str>, _question: uuid::Uuid, _text: &str) {}

    /// The player took one simulator step (also one that failed).
    fn on_step(&mut self) {}

    /// The player moved the clock.
    fn on_advance(&mut self, _ms: u64) {}

    /// The player restarted the runtime.
    fn on_restart(&mut self) {}

    /// The player triggered a session of `agent` (seed 003).
    fn on_trigger(&mut self, _agent: &str, _payload: &serde_json::Value) {}

    /// The player answered an async session's question through the store (sessions and
    /// questions by their order, as the step names them).
    fn on_async_answer(&mut self, _session: usize, _question: Option<usize>, _text: &str) {}

    /// Before each scenario step (`index` into the steps played): `false` stops playing here with
    /// [`Stop::Cancelled`] (exploration stops its runs this way when it is interrupted).
    fn proceed(&mut self, _index: usize) -> bool {
        true
    }
}

/// Hooks that do nothing: play the steps as written.
#[derive(Clone, Copy, Debug, Default)]
pub struct Plain;

impl Hooks for Plain {}

/// Why playing stopped early.
#[derive(Clone, Debug, PartialEq)]
pub enum Stop {
    /// The run stopped: a broken invariant, a limit, an exhausted script.
    Run(RunError),
    /// An `expect` step did not hold.
    Expectation(Vec<Mismatch>),
    /// The hooks asked to stop ([`Hooks::proceed`]).
    Cancelled,
}

/// Where playing stopped: the index of the step, and why.
#[derive(Clone, Debug, PartialEq)]
pub struct Stopped {
    /// 0-based index of the step in the slice played.
    pub index: usize,
    /// Why.
    pub stop: Stop,
}

/// Plays `steps` against `sim` with `hooks`.
pub fn play(sim: &mut Sim, steps: &[Step], hooks: &mut impl Hooks) -> Result<(), Stopped> {
    for (index, step) in steps.iter().enumerate() {
        let stopped = |stop| Stopped { index, stop };
        if !hooks.proceed(index) {
            return Err(stopped(Stop::Cancelled));
        }
        let result = match &step.kind {
            StepKind::User { key, text, wait } => user(sim, hooks, key, text, *wait),
            StepKind::Run(n) => {
                let mut result = Ok(());
                for _ in 0..*n {
                    match one_step(sim, hooks, super::DEFAULT_KEY) {
                        Ok(true) => {}
                        Ok(false) => break,
                        Err(e) => {
                            result = Err(e);
                            break;
                        }
                    }
                }
                result
            }
            StepKind::Advance(ms) => {
                hooks.on_advance(*ms);
                sim.advance(*ms)
            }
            StepKind::Restart => {
                hooks.on_restart();
                sim.restart()
            }
            StepKind::Intervene {
                agent,
                intervention,
                wait,
            } => intervene(sim, hooks, agent, intervention, *wait),
            StepKind::Answer {
                agent,
                question,
                text,
                wait,
            } => answer(sim, hooks, agent.as_deref(), *question, text, *wait),
            StepKind::Trigger {
                agent,
                payload,
                wait,
            } => {
                hooks.on_trigger(agent, payload);
                sim.trigger(agent, payload.clone())
                    .and_then(|()| settle(sim, hooks, *wait))
            }
            StepKind::AsyncAnswer {
                session,
                question,
                text,
                wait,
            } => {
                // Sessions and their questions by their order; one that does not exist is
                // answered under the nil id, which the store does not know.
                let (s, q) = sim
                    .sessions()
                    .get(session - 1)
                    .map(|(s, asked)| {
                        let q = match question {
                            Some(n) => asked.get(n - 1),
                            None => asked.last(),
                        };
                        (*s, q.copied().unwrap_or_default())
                    })
                    .unwrap_or_default();
                hooks.on_async_answer(*session, *question, text);
                sim.answer_async(s, q, text)
                    .and_then(|()| settle(sim, hooks, *wait))
            }
            StepKind::Expect(spec) => {
                if let Err(mismatches) = hooks.expect(spec, sim) {
                    return Err(stopped(Stop::Expectation(mismatches)));
                }
                Ok(())
            }
        };
        result.map_err(|e| stopped(Stop::Run(e)))?;
    }
    // Where the steps end, nothing may wait in vain.
    sim.check_progress().map_err(|e| Stopped {
        index: steps.len().saturating_sub(1),
        stop: Stop::Run(e),
    })
}

/// After a step that may start work: with `wait`, step until idle.
fn settle(sim: &mut Sim, hooks: &mut impl Hooks, wait: bool) -> Result<(), RunError> {
    if wait {
        until_idle(sim, hooks, super::DEFAULT_KEY)
    } else {
        Ok(())
    }
}

/// A `user` step: deliver the message, then (if it waits) step until idle.
fn user(
    sim: &mut Sim,
    hooks: &mut impl Hooks,
    key: &str,
    text: &str,
    wait: bool,
) -> Result<(), RunError> {
    hooks.on_user(key, text);
    sim.user(key, text)?;
    if !wait {
        return Ok(());
    }
    until_idle(sim, hooks, key)?;
    if hooks.restart_when_idle(sim) {
        hooks.on_restart();
        sim.restart()?;
    }
    Ok(())
}

/// An `intervene` step: find the agent the step names (an id no live agent has when none), feed
/// the intervention, then (if it waits) step until idle.
fn intervene(
    sim: &mut Sim,
    hooks: &mut impl Hooks,
    agent: &str,
    intervention: &crate::agents::tree::Intervention,
    wait: bool,
) -> Result<(), RunError> {
    hooks.on_intervene(agent, intervention);
    let id = super::tree::resolve(sim.runtime(), agent).unwrap_or_default();
    sim.intervene(id, intervention.clone())?;
    if !wait {
        return Ok(());
    }
    until_idle(sim, hooks, super::DEFAULT_KEY)
}

/// An `answer` step: the open question of the agent the step names (or the id it gives; an id no
/// question has when none), then (if it waits) step until idle. The hooks see it as the question
/// id it resolved to, so that a replay answers the same question.
fn answer(
    sim: &mut Sim,
    hooks: &mut impl Hooks,
    agent: Option<&str>,
    question: Option<uuid::Uuid>,
    text: &str,
    wait: bool,
) -> Result<(), RunError> {
    let id = question
        .or_else(|| {
            let agent = super::tree::resolve(sim.runtime(), agent?)?;
            sim.runtime()
                .questions()
                .into_iter()
                .find(|q| q.agent_id == agent)
                .map(|q| q.id)
        })
        .unwrap_or_default();
    // The hooks get the asking agent's path too: a replay whose ids moved (a shrunk one)
    // still answers the same agent.
    let asking = sim
        .runtime()
        .questions()
        .into_iter()
        .find(|q| q.id == id)
        .and_then(|q| super::tree::path_of(sim.runtime(), q.agent_id));
    hooks.on_answer(asking.as_deref(), id, text);
    sim.answer(id, text)?;
    if !wait {
        return Ok(());
    }
    until_idle(sim, hooks, super::DEFAULT_KEY)
}

/// Steps until the runtime is idle; stuck when nothing is scheduled before.
fn until_idle(sim: &mut Sim, hooks: &mut impl Hooks, key: &str) -> Result<(), RunError> {
    while !sim.runtime().is_idle() {
        if !one_step(sim, hooks, key)? {
            return Err(sim.stuck());
        }
    }
    Ok(())
}

/// One simulator step, after an interjection if the hooks have one. `Ok(false)` when nothing is
/// scheduled.
fn one_step(sim: &mut Sim, hooks: &mut impl Hooks, key: &str) -> Result<bool, RunError> {
    if hooks.restart_before_step(sim) {
        hooks.on_restart();
        sim.restart()?;
    }
    if let Some(text) = hooks.interject(sim, key) {
        hooks.on_user(key, &text);
        sim.user(key, &text)?;
    }
    if let Some((agent, intervention)) = hooks.intervention(sim) {
        hooks.on_intervene(&agent, &intervention);
        let id = super::tree::resolve(sim.runtime(), &agent).unwrap_or_default();
        sim.intervene(id, intervention)?;
        if sim.runtime().is_idle() {
            // The intervention ended what was running (a deletion): progress, not a stall.
            return Ok(true);
        }
    }
    let result = sim.step();
    // A step that failed was taken too: a replay must take it to fail the same way.
    if !matches!(result, Ok(false)) {
        hooks.on_step();
    }
    result
}
