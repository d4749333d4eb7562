//! The benchmark workloads of DESIGN §7, shared by the criterion benches (`benches/turns.rs`) and
//! `agentsim bench`, so both measure the same thing: the runtime, simulator and observer that the
//! scenario runner uses, with zero-latency scripted replies. Each workload is a scenario run from
//! a prepared starting point; its size is counted in model turns (LLM calls).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::json;

use crate::drive::scripted::{MockLlm, ReplyKind, ScriptBlock, ScriptedReply};
use crate::drive::scripted::{MockTools, ToolBehavior, ToolScript, ToolStep};
use crate::model::agent::{AgentDef, AgentKind, Catalog};
use crate::model::llm::Usage;
use crate::runtime::{RuntimeConfig, ToolSpec};
use crate::scenario::play::{play, Plain, Stop};
use crate::scenario::{Step, StepKind, DEFAULT_KEY};
use crate::sim::{Limits, RunError, Sim};

/// One workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Workload {
    /// Flat: one agent, 8 × `tool_use(echo)` then a text (9 turns, 8 tool runs).
    W1,
    /// Nested: main → `use_skill` → child makes 3 echo calls → `complete` → main text (6 turns).
    W2,
    /// Deep: a chain of 100 nested `use_agent` frames, each completing (201 turns).
    W3,
    /// Long: a main session of 10,000 messages, then 100 more turns.
    W4,
    /// Wide: 10 tools in one reply, run in parallel (2 turns, 10 tool runs).
    W5,
    /// Fork fan-out (seed 001): main forks ten children, each makes three tool calls and
    /// answers, and main waits for each (43 turns, 30 tool runs).
    W6,
}

impl Workload {
    /// Every workload, in order.
    pub const ALL: [Workload; 6] = [
        Workload::W1,
        Workload::W2,
        Workload::W3,
        Workload::W4,
        Workload::W5,
        Workload::W6,
    ];

    /// `w1` ... `w6`.
    pub fn name(self) -> &'static str {
        match self {
            Workload::W1 => "w1",
            Workload::W2 => "w2",
            Workload::W3 => "w3",
            Workload::W4 => "w4",
            Workload::W5 => "w5",
            Workload::W6 => "w6",
        }
    }

    /// Parses `w1`..`w6` (case-insensitive).
    pub fn parse(s: &str) -> Option<Workload> {
        Workload::ALL
            .into_iter()
            .find(|w| w.name().eq_ignore_ascii_case(s))
    }

    /// One line on what it measures.
    pub fn description(self) -> &'static str {
        match self {
            Workload::W1 => "flat: 8 x tool_use(echo) then text",
            Workload::W2 => "nested: main -> use_skill -> 3 echo calls -> complete -> main text",
            Workload::W3 => "deep: chain of 100 nested use_agent frames, each completing",
            Workload::W4 => "long: 100 turns on a session of 10,000 messages",
            Workload::W5 => "wide: 10 tools in one reply, parallel execution",
            Workload::W6 => "fan-out: 10 forks of 3 echo calls each, main waits for all",
        }
    }

    /// Builds the starting point: a simulation ready for [`Prepared::run`]. For W4 this runs the
    /// 5,000 turns that fill the session, outside any measurement.
    pub fn prepare(self, observer: bool) -> Prepared {
        let text = |t: &str| reply(vec![ScriptBlock::Text(t.into())]);
        let echo = || tool_use("echo", json!({"x": 1}));
        let mut catalog = Catalog::default();
        let mut main = Vec::new();
        let mut others: BTreeMap<String, Vec<ScriptedReply>> = BTreeMap::new();
        let mut parallel = false;
        let mut fork = false;
        let mut messages_per_run = 1;
        let turns: u64;
        match self {
            Workload::W1 => {
                main.extend((0..8).map(|_| reply(vec![echo()])));
                main.push(text("done"));
                turns = 9;
            }
            Workload::W2 => {
                catalog.add(AgentDef::new("child", AgentKind::Skill));
                main.push(reply(vec![tool_use(
                    "use_skill",
                    json!({"skill": "child", "message": "go"}),
                )]));
                main.push(text("done"));
                let child = others.entry("child".into()).or_default();
                child.extend((0..3).map(|_| reply(vec![echo()])));
                child.push(reply(vec![tool_use("complete", json!({"result": "ok"}))]));
                turns = 6;
            }
            Workload::W3 => {
                const DEPTH: usize = 100;
                for i in 1..=DEPTH {
                    catalog.add(AgentDef::new(format!("a{i}"), AgentKind::Agent));
                }
                main.push(reply(vec![tool_use(
                    "use_agent",
                    json!({"agent": "a1", "message": "go"}),
                )]));
                main.push(text("done"));
                for i in 1..=DEPTH {
                    let script = others.entry(format!("a{i}")).or_default();
                    if i < DEPTH {
                        script.push(reply(vec![tool_use(
                            "use_agent",
                            json!({"agent": format!("a{}", i + 1), "message": "go"}),
                        )]));
                    }
                    script.push(reply(vec![tool_use("complete", json!({"result": "ok"}))]));
                }
                turns = 2 * DEPTH as u64 + 1;
            }
            Workload::W4 => {
                // 100 turns alternate a tool call and a text, over one user message each.
                messages_per_run = 50;
                for _ in 0..50 {
                    main.push(reply(vec![echo()]));
                    main.push(text("ok"));
                }
                turns = 100;
            }
            Workload::W5 => {
                parallel = true;
                main.push(reply((0..10).map(|_| echo()).collect()));
                main.push(text("done"));
                turns = 2;
            }
            Workload::W6 => {
                const FORKS: u64 = 10;
                fork = true;
                main.push(reply(
                    (0..FORKS)
                        .map(|i| tool_use("fork", json!({"prompt": format!("part {i}")})))
                        .collect(),
                ));
                main.push(reply(
                    (1..=FORKS)
                        .map(|h| tool_use("wait", json!({"handle": h})))
                        .collect(),
                ));
                main.push(text("done"));
                for h in 1..=FORKS {
                    let script = others.entry(format!("main#{h}")).or_default();
                    script.extend((0..3).map(|_| reply(vec![echo()])));
                    script.push(text("part done"));
                }
                turns = 3 + FORKS * 4;
            }
        }
        let mut main_def = AgentDef::new("main", AgentKind::Main);
        main_def.parallel_tools = parallel;
        main_def.fork = fork;
        main_def.max_iterations = 1000;
        catalog.add(main_def);
        for def in catalog.agents.values_mut() {
            Arc::make_mut(def).max_iterations = 1000;
        }
        let mut config = RuntimeConfig::default();
        config.tools.insert("echo".into(), ToolSpec::default());
        let tools = MockTools::new(BTreeMap::from([(
            "echo".to_owned(),
            ToolScript::Fixed(ToolStep {
                behavior: ToolBehavior::Result {
                    content: "echoed".into(),
                    is_error: false,
                },
                after_ms: 0,
            }),
        )]));
        let mut scripts = others;
        scripts.insert("main".into(), main);
        let limits = Limits {
            max_steps: u64::MAX,
            max_depth: 1024,
            max_llm_calls: u64::MAX,
        };
        let build = |scripts: BTreeMap<String, Vec<ScriptedReply>>| {
            Sim::builder(catalog.clone())
                .config(config.clone())
                .llm(MockLlm::new(scripts))
                .tools(tools.clone())
                .limits(limits)
                .observe(observer)
                .record(false)
                .build()
        };
        let start = if self == Workload::W4 {
            // 5,000 user turns of one text reply each: 10,000 messages in main's session.
            let filler = vec![text("filler"); 5_000];
            let mut sim = build(BTreeMap::from([("main".to_owned(), filler)]));
            for _ in 0..5_000 {
                sim.user(DEFAULT_KEY, "more")
                    .and_then(|()| sim.run_until_idle())
                    .expect("the W4 filler runs");
            }
            // Swap in the measured script, keeping the long session.
            sim.replace_llm(MockLlm::new(scripts));
            sim
        } else {
            build(scripts)
        };
        let go = Step {
            line: 0,
            column: 0,
            kind: StepKind::User {
                key: DEFAULT_KEY.to_owned(),
                text: "go".to_owned(),
                wait: true,
            },
        };
        Prepared {
            start,
            turns,
            steps: vec![go; messages_per_run],
        }
    }
}

fn reply(blocks: Vec<ScriptBlock>) -> ScriptedReply {
    ScriptedReply {
        kind: ReplyKind::Content(blocks),
        after_ms: 0,
        usage: Usage::default(),
    }
}

fn tool_use(name: &str, input: serde_json::Value) -> ScriptBlock {
    ScriptBlock::ToolUse {
        id: None,
        name: name.into(),
        input: Arc::new(input),
    }
}

/// A workload ready to run.
#[derive(Clone)]
pub struct Prepared {
    start: Sim,
    turns: u64,
    /// One run: user messages, each played until the runtime is idle.
    steps: Vec<Step>,
}

impl Prepared {
    /// Model turns one run makes.
    pub fn turns(&self) -> u64 {
        self.turns
    }

    /// A fresh copy of the starting point (for batched measurement: copy outside the timer).
    pub fn fresh(&self) -> Sim {
        self.start.clone()
    }

    /// Runs the workload on `sim` (a [`Prepared::fresh`] copy) and returns the model turns made.
    pub fn run(&self, sim: &mut Sim) -> Result<u64, RunError> {
        let before = sim.llm_calls();
        play(sim, &self.steps, &mut Plain).map_err(|stopped| match stopped.stop {
            Stop::Run(error) => error,
            Stop::Expectation(_) => unreachable!("a workload has no expect steps"),
            Stop::Cancelled => unreachable!("a workload's hooks never cancel"),
        })?;
        Ok(sim.llm_calls() - before)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_workload_makes_its_stated_turns_and_keeps_every_invariant() {
        for workload in Workload::ALL {
            let prepared = workload.prepare(true);
            let mut sim = prepared.fresh();
            let turns = prepared.run(&mut sim).expect("the workload runs cleanly");
            assert_eq!(turns, prepared.turns(), "{}", workload.name());
            assert!(sim.runtime().is_idle());
            assert_eq!(Workload::parse(workload.name()), Some(workload));
        }
    }
}
