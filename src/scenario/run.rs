//! Running a scenario: play its steps against a [`crate::sim::Sim`], check its expectations, and report the
//! outcome with the exact command that reruns it.

use std::collections::BTreeMap;
use std::fmt;

use crate::observe::names;
use crate::sim::{Record, RunError, Sim};

use super::expect::{check, Mismatch};
use super::format::ExpectSpec;
use super::play::{play, Hooks, Stop, Stopped};
use super::Scenario;

/// How to run a scenario.
#[derive(Clone, Copy, Debug)]
pub struct RunOptions {
    /// Seed override (`--seed`, `AGENTSIM_SEED`); `None` uses the scenario's.
    pub seed: Option<u64>,
    /// Check invariants after every step.
    pub observe: bool,
}

impl Default for RunOptions {
    fn default() -> RunOptions {
        RunOptions {
            seed: None,
            observe: true,
        }
    }
}

/// Why a scenario failed.
#[derive(Clone, Debug, PartialEq)]
pub enum Failure {
    /// An `expect` step did not hold.
    Expectation {
        /// 1-based step number.
        step: usize,
        /// Line of the step.
        line: u32,
        /// Column of the step.
        column: u32,
        /// What differed.
        mismatches: Vec<Mismatch>,
    },
    /// The run stopped: a broken invariant, a limit, an exhausted script.
    Run {
        /// 1-based step number.
        step: usize,
        /// Line of the step.
        line: u32,
        /// The error.
        error: RunError,
    },
    /// The run passed but left scripted replies unused: the script and the steps disagree.
    UnusedReplies {
        /// Unused replies by agent.
        unused: Vec<(String, usize)>,
    },
    /// Per-call tool outcomes were never used.
    UnusedToolOutcomes {
        /// Unused outcomes by tool.
        unused: Vec<(String, usize)>,
    },
    /// The scenario expects an invariant to break and it did not.
    ExpectedViolation {
        /// The invariant that should have broken.
        invariant: String,
    },
    /// The scenario expects an invariant to break, but the run checked none: it cannot tell.
    InvariantsOff {
        /// The invariant the scenario expects to break.
        invariant: String,
    },
    /// The expected invariant broke, which ends the run, but `expect` steps come after the step
    /// where it broke: they were never checked, so the file says more than the run showed.
    UncheckedExpectations {
        /// The invariant that broke, as expected.
        invariant: String,
        /// 1-based number of the step where it broke.
        step: usize,
        /// Line of that step.
        line: u32,
        /// The `expect` steps never checked, as (1-based step, line, column).
        unchecked: Vec<(usize, u32, u32)>,
    },
}

/// The result of running one scenario.
#[derive(Debug)]
pub struct Outcome {
    /// The scenario's name.
    pub name: String,
    /// Its file, as given.
    pub path: String,
    /// The seed used.
    pub seed: u64,
    /// The recorded run.
    pub records: Vec<Record>,
    /// Why it failed, if it did.
    pub failure: Option<Failure>,
    /// The invariant the scenario expected to break, and did (a reproduced bug).
    pub reproduced: Option<String>,
    /// What the observer saw when it broke.
    pub violation_message: Option<String>,
    /// Steps the simulator took.
    pub sim_steps: u64,
    /// Virtual time at the end, in ms.
    pub end_ms: u64,
    /// Whether invariants were checked (`--no-invariants` turns them off).
    pub observed: bool,
}

impl Outcome {
    /// Whether the scenario passed.
    pub fn passed(&self) -> bool {
        self.failure.is_none()
    }

    /// The command that reruns exactly this run.
    pub fn rerun_command(&self) -> String {
        let flag = if self.observed {
            ""
        } else {
            " --no-invariants"
        };
        format!("agentsim run {} --seed {}{flag}", self.path, self.seed)
    }
}

/// Unused script entries by name, owned (none without a scripted backend).
fn owned(unused: Option<std::collections::BTreeMap<&str, usize>>) -> Vec<(String, usize)> {
    unused
        .unwrap_or_default()
        .into_iter()
        .map(|(name, n)| (name.to_owned(), n))
        .collect()
}

/// Unused script entries by name, as `name: count, ...`.
fn counts(unused: &[(String, usize)]) -> String {
    let list: Vec<String> = unused
        .iter()
        .map(|(name, n)| format!("{name}: {n}"))
        .collect();
    list.join(", ")
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Expectation {
                step,
                line,
                column,
                mismatches,
            } => {
                write!(
                    f,
                    "step {step} (line {line}, column {column}): expectation failed"
                )?;
                for m in mismatches {
                    write!(f, "\n    {m}")?;
                }
                Ok(())
            }
            Failure::Run { step, line, error } => {
                write!(f, "step {step} (line {line}): {error}")
            }
            Failure::UnusedReplies { unused } => write!(
                f,
                "the run ended with scripted replies never used ({}); remove them or add the steps that use them",
                counts(unused)
            ),
            Failure::UnusedToolOutcomes { unused } => write!(
                f,
                "the run ended with scripted tool outcomes never used ({}); remove them or add the steps that use them",
                counts(unused)
            ),
            Failure::ExpectedViolation { invariant } => write!(
                f,
                "expected invariant {invariant} to break, but the run kept it"
            ),
            Failure::InvariantsOff { invariant } => write!(
                f,
                "the scenario expects invariant {invariant} to break, but invariants were not checked (--no-invariants), so the run cannot tell"
            ),
            Failure::UncheckedExpectations {
                invariant,
                step,
                line,
                unchecked,
            } => {
                let places: Vec<String> = unchecked
                    .iter()
                    .map(|(s, l, c)| format!("step {s} (line {l}, column {c})"))
                    .collect();
                write!(
                    f,
                    "invariant {invariant} broke as expected at step {step} (line {line}), which ends the run, so the `expect` steps after it were never checked: {}; move them before step {step} or remove them",
                    places.join(", ")
                )
            }
        }
    }
}

impl Failure {
    /// The failure as structured JSON (`run --format json`, `check --format json`): its `kind`,
    /// where (`step`, `line`, `column` when it has them), what differed or stopped the run, and
    /// the same `message` the text report prints.
    pub fn to_json(&self) -> serde_json::Value {
        use serde_json::json;
        let mut v = match self {
            Failure::Expectation {
                step,
                line,
                column,
                mismatches,
            } => json!({
                "kind": "expectation", "step": step, "line": line, "column": column,
                "mismatches": mismatches.iter().map(|m| json!({
                    "what": m.what, "expected": m.expected, "actual": m.actual,
                })).collect::<Vec<_>>(),
            }),
            Failure::Run { step, line, error } => {
                let mut e = json!({"kind": error.kind(), "message": error.to_string()});
                if let Some(v) = error.violation() {
                    e["invariant"] = v.invariant.into();
                    e["violation"] = v.message.clone().into();
                }
                json!({"kind": "run", "step": step, "line": line, "error": e})
            }
            Failure::UnusedReplies { unused } => json!({
                "kind": "unused-replies",
                "unused": unused.iter().map(|(agent, n)| json!({"agent": agent, "count": n}))
                    .collect::<Vec<_>>(),
            }),
            Failure::UnusedToolOutcomes { unused } => json!({
                "kind": "unused-tool-outcomes",
                "unused": unused.iter().map(|(tool, n)| json!({"tool": tool, "count": n}))
                    .collect::<Vec<_>>(),
            }),
            Failure::ExpectedViolation { invariant } => {
                json!({"kind": "expected-violation", "invariant": invariant})
            }
            Failure::InvariantsOff { invariant } => {
                json!({"kind": "invariants-off", "invariant": invariant})
            }
            Failure::UncheckedExpectations {
                invariant,
                step,
                line,
                unchecked,
            } => json!({
                "kind": "unchecked-expectations", "invariant": invariant, "step": step,
                "line": line,
                "unchecked": unchecked.iter().map(|(s, l, c)| json!({
                    "step": s, "line": l, "column": c,
                })).collect::<Vec<_>>(),
            }),
        };
        v["message"] = self.to_string().into();
        v
    }

    /// Where in the scenario file it happened, as `(line, column)`, when it is tied to a step.
    pub fn location(&self) -> Option<(u32, u32)> {
        match self {
            Failure::Expectation { line, column, .. } => Some((*line, *column)),
            Failure::Run { line, .. } => Some((*line, 1)),
            Failure::UncheckedExpectations { unchecked, .. } => {
                unchecked.first().map(|(_, l, c)| (*l, *c))
            }
            _ => None,
        }
    }
}

/// Runs a scenario.
pub fn run(scenario: &Scenario, options: RunOptions) -> Outcome {
    run_keeping_sim(scenario, options).0
}

/// Runs a scenario and keeps the simulation as it was at the end (to look at its runtime).
pub fn run_keeping_sim(scenario: &Scenario, options: RunOptions) -> (Outcome, Sim) {
    let seed = options.seed.unwrap_or(scenario.seed);
    let mut sim = scenario.sim(seed, options.observe, true);
    let mut hooks = Expectations {
        windows: BTreeMap::new(),
    };
    let failure =
        play(&mut sim, &scenario.steps, &mut hooks)
            .err()
            .map(|Stopped { index, stop }| {
                let step = &scenario.steps[index];
                match stop {
                    Stop::Expectation(mismatches) => Failure::Expectation {
                        step: index + 1,
                        line: step.line,
                        column: step.column,
                        mismatches,
                    },
                    Stop::Run(error) => Failure::Run {
                        step: index + 1,
                        line: step.line,
                        error,
                    },
                    Stop::Cancelled => unreachable!("a scenario run's hooks never cancel"),
                }
            });
    let mut failure = failure;
    if failure.is_none() && scenario.expect_violation.is_none() {
        let unused = owned(sim.llm().map(|llm| llm.unused()));
        let unused_tools = owned(sim.mock_tools().map(|tools| tools.unused()));
        if !unused.is_empty() {
            failure = Some(Failure::UnusedReplies { unused });
        } else if !unused_tools.is_empty() {
            failure = Some(Failure::UnusedToolOutcomes {
                unused: unused_tools,
            });
        }
    }
    let mut reproduced = None;
    let violation_message = match &failure {
        Some(Failure::Run { error, .. }) => error.violation().map(|v| v.message.clone()),
        _ => None,
    };
    if let (Some(expected), false) = (&scenario.expect_violation, options.observe) {
        failure = Some(Failure::InvariantsOff {
            invariant: expected.clone(),
        });
    } else if let Some(expected) = &scenario.expect_violation {
        let broke = matches!(
            &failure,
            Some(Failure::Run { error, .. }) if error.violation().is_some_and(|v| names::same_check(v.invariant, expected))
        );
        if broke {
            reproduced = Some(expected.clone());
            failure = unchecked_after(scenario, expected, failure.as_ref());
        } else if failure.is_none() {
            failure = Some(Failure::ExpectedViolation {
                invariant: expected.clone(),
            });
        }
    }
    let outcome = Outcome {
        name: scenario.name.clone(),
        path: scenario.path.display().to_string(),
        seed,
        sim_steps: sim.steps(),
        end_ms: sim.now(),
        observed: options.observe,
        records: sim.records().to_vec(),
        failure,
        reproduced,
        violation_message,
    };
    (outcome, sim)
}

/// The `expect` steps after the step where the expected violation ended the run, as a failure
/// (none when no `expect` step follows it).
fn unchecked_after(
    scenario: &Scenario,
    invariant: &str,
    failure: Option<&Failure>,
) -> Option<Failure> {
    let Some(&Failure::Run { step, line, .. }) = failure else {
        return None;
    };
    let unchecked: Vec<(usize, u32, u32)> = scenario
        .steps
        .iter()
        .enumerate()
        .skip(step)
        .filter(|(_, s)| matches!(s.kind, super::StepKind::Expect(_)))
        .map(|(i, s)| (i + 1, s.line, s.column))
        .collect();
    (!unchecked.is_empty()).then(|| Failure::UncheckedExpectations {
        invariant: invariant.to_owned(),
        step,
        line,
        unchecked,
    })
}

/// A scenario run's hooks: each `expect` step checks what happened in its conversation since the
/// previous `expect` of the same conversation, so two conversations' output in one interval can
/// both be checked.
struct Expectations {
    /// Per conversation key: records before this index were seen by an earlier `expect` of it.
    windows: BTreeMap<String, usize>,
}

impl Hooks for Expectations {
    fn expect(&mut self, spec: &ExpectSpec, sim: &Sim) -> Result<(), Vec<Mismatch>> {
        let key = super::expect::resolve_key(spec, sim);
        let start = self.windows.get(&key).copied().unwrap_or(0);
        let mismatches = check(spec, sim, &sim.records()[start..]);
        self.windows.insert(key, sim.records().len());
        if mismatches.is_empty() {
            Ok(())
        } else {
            Err(mismatches)
        }
    }
}
