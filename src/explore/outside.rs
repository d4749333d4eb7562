//! Exploration against a runtime under test (`agentsim explore FILE --runtime CMD`): one scenario
//! under many seeds, each run a fresh process of the runtime with faults decided by the seed, and
//! a failing run made into a plain scenario and shrunk by running the runtime again.
//!
//! The faults of a seed ([`Plan`]):
//! - **model faults**: the mock server replaces replies with errors (rate limits, overloads,
//!   server errors, dropped connections; cut streams for streamed requests), stalls (no answer
//!   for seconds, then a dropped connection) or serves them late, at rates the seed draws, each
//!   decision a function of the seed and of where the request was routed (agent, conversation,
//!   turn, attempt), never of timing ([`RandomFaults`]);
//! - **kills**: `restart` steps inserted between steps at places the seed draws (only for a
//!   runtime that offers the `restart` capability): agentsim kills the runtime with SIGKILL and
//!   starts it again on the same state directory;
//! - **tool faults**: a scripted tool fails in place of its outcome, answers later, or (a tool
//!   with a `timeout`, against a runtime that offers `tool-timeouts`) never answers, each
//!   decision a function of the seed, the tool and the call's number ([`ToolFaults`]);
//! - **conversation faults** ([`outside_turns`]): user interjections and cancel words between and
//!   during turns, and kills that land in the middle of a turn.
//!
//! Every fault is journaled: restarts are steps of the played scenario and lines of the
//! transcript, injected model faults are lines of the mock server's journal
//! ([`injected`]). [`materialize`] turns a run into a plain scenario that replays it with no fault
//! plan (each injected fault a scripted error before the reply it replaced), and [`shrink`]
//! makes it smaller while the runtime still fails it the same way.

use std::sync::Arc;

use serde_json::Value;

use crate::drive::scripted::ToolScript;
use crate::drive::scripted::{Attempts, ReplyKind, ScriptedReply};
use crate::explore::outside_turns::{self, TurnPlan, TurnSettings};
use crate::explore::shrink::{shrink_by, Shrunk};
use crate::mock_llm::server::RandomFaults;
use crate::model::llm::{LlmErrorKind, Usage};
use crate::model::rng::SimRng;
use crate::outside_run::{self, FailureKind, NotRun, Options, Outcome, ToolFault, ToolFaults};
use crate::scenario::{Scenario, Step, StepKind};

/// At most this many kills per run: each restart is a process start.
pub const MAX_RESTARTS: usize = 3;

/// What may be injected against this runtime.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OutsideSettings {
    /// Model faults.
    pub model_faults: bool,
    /// Model stalls (no answer for seconds, then a dropped connection).
    pub model_stalls: bool,
    /// Model replies later than scripted.
    pub model_latency: bool,
    /// Kills and restarts (the runtime offers `restart`).
    pub restarts: bool,
    /// Tool failures in place of scripted outcomes.
    pub tool_errors: bool,
    /// Tool outcomes later than scripted.
    pub tool_latency: bool,
    /// Tool calls that never answer, for tools with a `timeout` (the runtime offers
    /// `tool-timeouts`).
    pub tool_hangs: bool,
    /// User interjections, cancel words and kills in the middle of a turn.
    pub turns: TurnSettings,
}

/// The faults of one seed.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// The share of model replies replaced by a fault (0: none).
    pub model_rate: f64,
    /// Kill and restart the runtime after these steps (0-based indices of the scenario's steps,
    /// expectations removed), ascending.
    pub restarts_after: Vec<usize>,
    /// The share of tool calls that fail (0: none).
    pub tool_error_rate: f64,
    /// The share of tool calls whose outcome comes later (0: none).
    pub tool_latency_rate: f64,
    /// The share of model replies that stall (0: none).
    pub model_stall_rate: f64,
    /// The share of model replies that come later (0: none).
    pub model_latency_rate: f64,
    /// The share of the calls of tools with a `timeout` that never answer (0: none).
    pub tool_hang_rate: f64,
}

/// The faults of `seed` for a scenario of `steps` steps (expectations removed). Swarm-style, as
/// in-process exploration: each kind is on for half the seeds, at a rate the seed draws.
pub fn plan(seed: u64, steps: usize, settings: OutsideSettings) -> Plan {
    let mut rng = SimRng::new(seed).fork(seed, 0x0007_51DE);
    let model_on = rng.chance(0.5);
    let model_rate = [0.05, 0.1, 0.2, 0.35][rng.below(4) as usize];
    let restarts_on = rng.chance(0.5);
    let restart_rate = [0.15, 0.3, 0.5][rng.below(3) as usize];
    let mut restarts_after = Vec::new();
    for i in 0..steps {
        let kill = rng.chance(restart_rate);
        if settings.restarts && restarts_on && kill && restarts_after.len() < MAX_RESTARTS {
            restarts_after.push(i);
        }
    }
    let tool_errors_on = rng.chance(0.5);
    let tool_error_rate = [0.1, 0.25, 0.5][rng.below(3) as usize];
    let tool_latency_on = rng.chance(0.5);
    let tool_latency_rate = [0.2, 0.5][rng.below(2) as usize];
    // Drawn after the older kinds, so that a seed's other faults stay what they were.
    let stalls_on = rng.chance(0.5);
    let stall_rate = [0.05, 0.15][rng.below(2) as usize];
    let model_latency_on = rng.chance(0.5);
    let model_latency_rate = [0.1, 0.3][rng.below(2) as usize];
    let hangs_on = rng.chance(0.5);
    let hang_rate = [0.2, 0.5][rng.below(2) as usize];
    let on = |allowed: bool, drawn: bool, rate: f64| if allowed && drawn { rate } else { 0.0 };
    Plan {
        model_rate: on(settings.model_faults, model_on, model_rate),
        restarts_after,
        tool_error_rate: on(settings.tool_errors, tool_errors_on, tool_error_rate),
        tool_latency_rate: on(settings.tool_latency, tool_latency_on, tool_latency_rate),
        model_stall_rate: on(settings.model_stalls, stalls_on, stall_rate),
        model_latency_rate: on(settings.model_latency, model_latency_on, model_latency_rate),
        tool_hang_rate: on(settings.tool_hangs, hangs_on, hang_rate),
    }
}

/// `base` as exploration plays it: its `expect` steps and `expect_violation` removed (faults
/// change what happens; the checks are what must still hold).
pub fn explored(base: &Scenario) -> Scenario {
    let mut s = base.clone();
    s.steps
        .retain(|step| !matches!(step.kind, StepKind::Expect(_)));
    s.expect_violation = None;
    s
}

/// `explored` with the plan's `restart` steps inserted.
pub fn with_restarts(explored: &Scenario, plan: &Plan) -> Scenario {
    let mut s = explored.clone();
    let mut steps = Vec::with_capacity(s.steps.len() + plan.restarts_after.len());
    for (i, step) in s.steps.drain(..).enumerate() {
        let (line, column) = (step.line, step.column);
        steps.push(step);
        if plan.restarts_after.contains(&i) {
            steps.push(Step {
                line,
                column,
                kind: StepKind::Restart,
            });
        }
    }
    s.steps = steps;
    s
}

/// How one run ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Every check held.
    Passed,
    /// The run stopped at a clean limit that faults make likely and that is no bug of the
    /// runtime: a model request the script has no reply for, replies or tool outcomes left
    /// unused, a tool script run out.
    Limit(String),
    /// A finding: a check broke, the runtime broke the protocol, timed out or exited; named as
    /// the report names the failure (`error-cascade`, `timeout`, ...).
    Found(String),
}

/// The verdict of an outcome.
pub fn verdict(outcome: &Outcome) -> Verdict {
    let Some(f) = &outcome.failure else {
        return Verdict::Passed;
    };
    match &f.kind {
        FailureKind::ModelMiss
        | FailureKind::ToolScriptExhausted
        | FailureKind::UnusedReplies
        | FailureKind::UnusedToolOutcomes => Verdict::Limit(f.kind.name()),
        _ => Verdict::Found(f.kind.name()),
    }
}

/// One run of an exploration seed.
#[derive(Debug)]
pub struct SeedRun {
    /// The seed.
    pub seed: u64,
    /// Its faults.
    pub plan: Plan,
    /// Its conversation faults.
    pub turns: TurnPlan,
    /// The scenario played (expectations removed, restarts inserted).
    pub played: Scenario,
    /// What the run gave.
    pub outcome: Outcome,
}

impl SeedRun {
    /// How it ended.
    pub fn verdict(&self) -> Verdict {
        verdict(&self.outcome)
    }

    /// The faults of the run, one line each, in order: the kills planned and the model faults
    /// the mock server injected.
    pub fn fault_lines(&self) -> Vec<String> {
        let mut lines: Vec<String> = self
            .plan
            .restarts_after
            .iter()
            .map(|i| format!("kill -9 and restart after step {}", i + 1))
            .collect();
        lines.extend(self.turns.lines());
        let p = &self.plan;
        if p.model_rate + p.model_stall_rate + p.model_latency_rate > 0.0 {
            lines.push(format!(
                "model faults: errors at rate {}, stalls at rate {}, latency at rate {} (seed {})",
                p.model_rate, p.model_stall_rate, p.model_latency_rate, self.seed
            ));
        }
        if p.tool_error_rate + p.tool_latency_rate + p.tool_hang_rate > 0.0 {
            lines.push(format!(
                "tool faults: failures at rate {}, latency at rate {}, hangs at rate {} (seed {})",
                p.tool_error_rate, p.tool_latency_rate, p.tool_hang_rate, self.seed
            ));
        }
        lines.extend(
            self.outcome
                .tool_faults
                .iter()
                .map(|(tool, call, fault)| match fault {
                    ToolFault::Fail => format!("tool fault injected: call {call} of {tool} fails"),
                    ToolFault::Latency(ms) => {
                        format!("tool fault injected: call {call} of {tool} takes {ms} ms longer")
                    }
                    ToolFault::Hang => {
                        format!("tool fault injected: call {call} of {tool} never answers")
                    }
                }),
        );
        lines.extend(injected(&self.outcome).iter().map(|f| match f.fault.as_str() {
            "stall" => format!(
                "model fault injected: a stall of {} ms, then a dropped connection, for agent {} (exchange #{}, before its script entry {})",
                f.ms, f.agent, f.exchange, f.entry
            ),
            LATENCY => format!(
                "model fault injected: {} ms of latency for agent {} (exchange #{}, its script entry {})",
                f.ms, f.agent, f.exchange, f.entry
            ),
            _ => format!(
                "model fault injected: {} for agent {} (exchange #{}, in place of its script entry {})",
                f.fault, f.agent, f.exchange, f.entry
            ),
        }));
        lines
    }
}

/// Runs the seed `seed` of `explored` (see [`explored`]) against the runtime of `options`.
pub async fn run_seed(
    explored: &Scenario,
    seed: u64,
    options: &Options,
    settings: OutsideSettings,
) -> Result<SeedRun, NotRun> {
    let plan = plan(seed, explored.steps.len(), settings);
    let turns = outside_turns::plan(seed, explored, &plan.restarts_after, settings.turns);
    let played = outside_turns::played(explored, &plan.restarts_after, &turns);
    let mut options = options.clone();
    options.seed = Some(seed);
    options.model_faults = (plan.model_rate + plan.model_stall_rate + plan.model_latency_rate
        > 0.0)
        .then_some(RandomFaults {
            rate: plan.model_rate,
            seed,
            stall_rate: plan.model_stall_rate,
            latency_rate: plan.model_latency_rate,
        });
    options.tool_faults = (plan.tool_error_rate + plan.tool_latency_rate + plan.tool_hang_rate
        > 0.0)
        .then_some(ToolFaults {
            error_rate: plan.tool_error_rate,
            latency_rate: plan.tool_latency_rate,
            hang_rate: plan.tool_hang_rate,
            seed,
        });
    let outcome = outside_run::run(&played, &options).await?;
    Ok(SeedRun {
        seed,
        plan,
        turns,
        played,
        outcome,
    })
}

/// The name [`injected`] gives a latency injected before a reply.
pub const LATENCY: &str = "latency";

/// A model fault the mock server injected, read from its journal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Injected {
    /// The exchange.
    pub exchange: u64,
    /// The agent the request was routed to.
    pub agent: String,
    /// The script entry (1-based) whose reply the fault replaced.
    pub entry: usize,
    /// The fault's name (`rate_limit`, `overloaded`, `server_error`, `connection_dropped`,
    /// `stream_error`, `stream_cut`, `stall`; [`LATENCY`] for a reply served late).
    pub fault: String,
    /// A stall's or a latency's length in scripted milliseconds (0 for the others).
    pub ms: u64,
}

/// The faults injected in a run, in order of exchange: those in place of a reply, and the
/// latencies before one.
pub fn injected(outcome: &Outcome) -> Vec<Injected> {
    let mut out: Vec<Injected> = outcome
        .exchanges
        .iter()
        .filter_map(|line| {
            let latency = line.pointer("/faults/latency_ms").and_then(Value::as_u64);
            let fault = match line.pointer("/faults/injected").and_then(Value::as_str) {
                Some(fault) => fault,
                None if latency.is_some() => LATENCY,
                None => return None,
            };
            let ms = line.pointer("/faults/ms").and_then(Value::as_u64);
            Some(Injected {
                exchange: line.get("exchange").and_then(Value::as_u64).unwrap_or(0),
                agent: line.pointer("/address/agent")?.as_str()?.to_owned(),
                entry: line.pointer("/address/entry")?.as_u64()? as usize,
                fault: fault.to_owned(),
                ms: ms.or(latency).unwrap_or(0),
            })
        })
        .collect();
    out.sort_by_key(|f| f.exchange);
    out
}

/// The scripted error that does what an injected fault did (a stall: a dropped connection after
/// its length).
fn scripted(fault: &Injected) -> ScriptedReply {
    let (kind, mid_stream) = match fault.fault.as_str() {
        "rate_limit" => (LlmErrorKind::RateLimit, false),
        "overloaded" => (LlmErrorKind::Overloaded, false),
        "connection_dropped" | "stall" => (LlmErrorKind::Network, false),
        "stream_error" => (LlmErrorKind::Overloaded, true),
        "stream_cut" => (LlmErrorKind::Network, true),
        _ => (LlmErrorKind::Other, false),
    };
    let after_ms = if fault.fault == "stall" { fault.ms } else { 0 };
    let fault = &fault.fault;
    ScriptedReply {
        kind: ReplyKind::Error {
            kind,
            message: Arc::from(format!("{fault} (a model fault injected by explore)")),
            mid_stream,
            times: Attempts::Times(1),
            retry_after_ms: None,
        },
        after_ms,
        usage: Usage::default(),
    }
}

/// `played` with every model fault `outcome` journaled made a scripted error, placed in the
/// agent's script before the reply it replaced, and every latency added to its reply's `after`:
/// a plain scenario that replays the run with no fault plan (a retry of the turn meets the reply
/// after the error, as it met the reply the fault had held back).
pub fn materialize(played: &Scenario, outcome: &Outcome) -> Scenario {
    let mut s = played.clone();
    s.seed = outcome.seed;
    let faults = injected(outcome);
    for (agent, entries) in s.scripts.iter_mut() {
        let mine: Vec<&Injected> = faults.iter().filter(|f| &f.agent == agent).collect();
        if mine.is_empty() {
            continue;
        }
        let mut out = Vec::with_capacity(entries.len() + mine.len());
        for (i, mut entry) in entries.drain(..).enumerate() {
            for f in mine.iter().filter(|f| f.entry == i + 1) {
                if f.fault == LATENCY {
                    entry.after_ms += f.ms;
                } else {
                    out.push(scripted(f));
                }
            }
            out.push(entry);
        }
        *entries = out;
    }
    // A tool that had a fault gets the outcomes it delivered, call by call.
    for (tool, _, _) in &outcome.tool_faults {
        if let (Some(script), Some(steps)) = (s.tools.get_mut(tool), outcome.tool_steps.get(tool)) {
            *script = ToolScript::PerCall(steps.clone());
        }
    }
    s
}

/// Whether `s`, run against the runtime of `options` with no injected fault, fails with
/// `finding` and every model request it made had a reply, but those that are the bug's doing
/// (`miss_is_the_bugs`): so that the file, once the bug is fixed, has the replies a fixed
/// runtime asks for.
pub async fn still_fails(s: &Scenario, options: &Options, finding: &str) -> bool {
    fails_as(s, options, finding).await.is_some()
}

/// [`still_fails`], with the replies the run left unused: their 1-based entries per agent.
async fn fails_as(
    s: &Scenario,
    options: &Options,
    finding: &str,
) -> Option<std::collections::BTreeMap<String, Vec<usize>>> {
    let mut options = options.clone();
    options.model_faults = None;
    options.tool_faults = None;
    options.seed = Some(s.seed);
    let o = outside_run::run(s, &options).await.ok()?;
    let fails = verdict(&o) == Verdict::Found(finding.to_owned())
        && o.model
            .misses
            .iter()
            .all(|m| miss_is_the_bugs(finding, o.broke_at, m.exchange))
        && refused_have_replies(&o.model);
    fails.then(|| {
        o.model
            .unused
            .iter()
            .map(|u| (u.agent.clone(), u.entries.clone()))
            .collect()
    })
}

/// Whether a finding stops the runtime where it happened (it hangs, exits or reports an error
/// of its own): a fixed runtime goes on from there, and asks for the replies the failing run
/// left unused.
fn stops_the_runtime(finding: &str) -> bool {
    matches!(finding, "timeout" | "unexpected-exit" | "runtime-error")
}

/// The replies a shrunk file of a finding that stops the runtime keeps: per agent, the replies
/// the failing run left unused when they end its script (a fixed runtime asks for them once it
/// goes on where the buggy one stopped).
fn pinned_replies(
    failing: &Scenario,
    unused: &std::collections::BTreeMap<String, Vec<usize>>,
) -> Vec<(String, Vec<ScriptedReply>)> {
    let mut pinned = Vec::new();
    for (agent, entries) in unused {
        let Some(script) = failing.scripts.get(agent) else {
            continue;
        };
        let from = script.len().saturating_sub(entries.len());
        let suffix = entries.iter().copied().eq(from + 1..=script.len());
        if suffix && !entries.is_empty() {
            pinned.push((agent.clone(), script[from..].to_vec()));
        }
    }
    pinned
}

/// Whether a model request with no reply (exchange `miss`) is the bug's doing, so that a file
/// may leave it without one: after a request a wire check refused (the refusal's error took the
/// runtime where a fixed one does not go), or the request a check broke on when a fixed runtime
/// does not make that request at all (a call past the iteration limit, a request carrying a
/// display-only text). Any other request must have its reply.
fn miss_is_the_bugs(finding: &str, broke_at: Option<u64>, miss: u64) -> bool {
    use crate::observe::names;
    let Some(at) = broke_at else {
        return false;
    };
    match finding {
        names::ITERATION_LIMIT | names::NO_DISPLAY_LEAK => miss == at,
        f if f == names::TOOL_PAIRING || names::WIRE.contains(&f) => miss > at,
        _ => false,
    }
}

/// Whether every request the mock server refused (a wire check broke) has a reply left in the
/// script of its agent (any agent when it was not routed): a runtime with the bug fixed makes
/// that request valid, and it must find a reply.
fn refused_have_replies(model: &crate::mock_llm::server::Report) -> bool {
    let mut left: std::collections::BTreeMap<&str, usize> = model
        .unused
        .iter()
        .map(|u| (u.agent.as_str(), u.entries.len()))
        .collect();
    let mut unrouted = 0;
    for v in &model.violations {
        let agent = v.address.as_ref().map(|a| a.agent.as_str());
        match agent.or(v.agent.as_deref()) {
            Some(agent) => match left.get_mut(agent) {
                Some(n) if *n > 0 => *n -= 1,
                _ => return false,
            },
            None => unrouted += 1,
        }
    }
    left.values().sum::<usize>() >= unrouted
}

/// The budget of a shrink: candidate runs, and the caller's clock, which says when no more
/// candidate starts (an outside runtime runs in real time; exploration itself reads no clock).
#[derive(Clone, Copy)]
pub struct Budget<'a> {
    /// Candidate runs.
    pub runs: usize,
    /// Whether the time for shrinking is up.
    pub out_of_time: Option<&'a dyn Fn() -> bool>,
}

/// Shrinks `failing` (a materialized run that fails with `finding`) by running the runtime
/// again, within `budget`. `failing` itself is checked first: `None` if it does not fail that way
/// (the runtime is not deterministic under scripted inputs, or the finding depends on timing).
pub fn shrink(
    failing: Scenario,
    options: &Options,
    finding: &str,
    budget: Budget<'_>,
    rt: &tokio::runtime::Runtime,
) -> Option<Shrunk> {
    let unused = rt.block_on(fails_as(&failing, options, finding))?;
    // A runtime that stopped (a hang, a crash) left replies unused that a fixed one asks for:
    // they stay the end of their scripts, and every candidate's run leaves just them unused.
    let pinned = if stops_the_runtime(finding) {
        pinned_replies(&failing, &unused)
    } else {
        Vec::new()
    };
    let mut test = |s: &Scenario| {
        let kept = pinned
            .iter()
            .all(|(agent, tail)| s.scripts.get(agent).is_some_and(|e| e.ends_with(tail)));
        kept && rt
            .block_on(fails_as(s, options, finding))
            .is_some_and(|unused| {
                pinned
                    .iter()
                    .all(|(agent, tail)| unused.get(agent).map_or(0, Vec::len) == tail.len())
            })
    };
    let mut shrunk = shrink_by(
        failing,
        budget.runs.saturating_sub(1),
        budget.out_of_time,
        &mut test,
    );
    shrunk.attempts += 1;
    Some(shrunk)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_requests_that_are_the_bugs_doing_may_go_without_a_reply() {
        // The call past the limit, and the request carrying a display text: a fixed runtime
        // makes neither; what comes after, it may make.
        for check in ["iteration-limit", "no-display-leak"] {
            assert!(miss_is_the_bugs(check, Some(5), 5));
            assert!(!miss_is_the_bugs(check, Some(5), 6));
            assert!(!miss_is_the_bugs(check, Some(5), 4));
        }
        // A refused request got an error: what followed it is the error's doing.
        assert!(miss_is_the_bugs("tool-pairing", Some(3), 4));
        assert!(!miss_is_the_bugs("tool-pairing", Some(3), 3));
        assert!(miss_is_the_bugs("replayed-history", Some(3), 4));
        // A parent's request with a wrong result is one a fixed runtime makes too.
        assert!(!miss_is_the_bugs("error-cascade", Some(3), 3));
        assert!(!miss_is_the_bugs("iteration-limit", None, 3));
    }

    #[test]
    fn a_plan_is_a_function_of_the_seed_and_respects_what_the_runtime_offers() {
        let all = OutsideSettings {
            model_faults: true,
            model_stalls: true,
            model_latency: true,
            restarts: true,
            tool_errors: true,
            tool_latency: true,
            tool_hangs: true,
            turns: TurnSettings::default(),
        };
        for seed in 0..200 {
            assert_eq!(plan(seed, 6, all), plan(seed, 6, all));
            let p = plan(seed, 6, all);
            assert!(p.restarts_after.len() <= MAX_RESTARTS);
            assert!(p.restarts_after.windows(2).all(|w| w[0] < w[1]));
            let none = plan(seed, 6, OutsideSettings::default());
            assert_eq!(
                none.model_rate + none.model_stall_rate + none.model_latency_rate,
                0.0
            );
            assert_eq!(
                none.tool_error_rate + none.tool_latency_rate + none.tool_hang_rate,
                0.0
            );
            // The kinds added later leave the older kinds' draws as they were.
            let older = OutsideSettings {
                model_stalls: false,
                model_latency: false,
                tool_hangs: false,
                ..all
            };
            let (a, b) = (plan(seed, 6, all), plan(seed, 6, older));
            assert_eq!(
                (
                    a.model_rate,
                    &a.restarts_after,
                    a.tool_error_rate,
                    a.tool_latency_rate
                ),
                (
                    b.model_rate,
                    &b.restarts_after,
                    b.tool_error_rate,
                    b.tool_latency_rate
                )
            );
            assert!(none.restarts_after.is_empty());
        }
        let with_faults = (0..200)
            .filter(|&s| plan(s, 6, all).model_rate > 0.0)
            .count();
        let with_kills = (0..200)
            .filter(|&s| !plan(s, 6, all).restarts_after.is_empty())
            .count();
        assert!((60..140).contains(&with_faults), "{with_faults}");
        let with_stalls = (0..200)
            .filter(|&s| plan(s, 6, all).model_stall_rate > 0.0)
            .count();
        let with_hangs = (0..200)
            .filter(|&s| plan(s, 6, all).tool_hang_rate > 0.0)
            .count();
        assert!((60..140).contains(&with_stalls), "{with_stalls}");
        assert!((60..140).contains(&with_hangs), "{with_hangs}");
        assert!((50..140).contains(&with_kills), "{with_kills}");
    }
}
