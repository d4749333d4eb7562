//! Exploration: run a scenario (or freshly generated ones) under many seeds with faults and
//! timings varied, and turn the first failure of each invariant into a minimal scenario file.
//!
//! A run under faults is *materialized*: the replies and tool outcomes actually delivered, and the
//! user messages placed between exact simulator steps (`run: N`), become a plain scenario that
//! replays the failure with no fault plan. [`crate::explore::shrink`] then minimises that scenario.

use crate::agents::tree::Intervention;
use crate::agents::watchdog::InterruptionConfig;
use crate::drive::faults::{FaultPlan, FaultRates};
use crate::drive::scripted::ToolScript;
use crate::explore::generate::{generate, GenConfig};
use crate::model::rng::SimRng;
use crate::observe::Violation;
use crate::runtime::planted::PlantedBug;
use crate::scenario::play::{play, Hooks, Stop, Stopped};
use crate::scenario::{Scenario, Step, StepKind};
use crate::sim::{RunError, Sim};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Where the scenarios come from.
#[derive(Clone, Debug)]
pub enum Source {
    /// One scenario, with faults and timings varied per seed.
    Scenario(Box<Scenario>),
    /// A fresh generated scenario per seed.
    Generated(GenConfig),
}

impl Source {
    /// The scenario for `seed`.
    pub fn scenario(&self, seed: u64) -> Scenario {
        match self {
            Source::Scenario(s) => (**s).clone(),
            Source::Generated(cfg) => generate(seed, cfg),
        }
    }
}

/// How to explore.
#[derive(Clone, Copy, Debug, Default)]
pub struct Settings {
    /// Inject faults (swarm rates drawn per seed).
    pub faults: bool,
    /// Fault kinds left out (their rates are zero; the others stay those the seed drew).
    pub without: crate::drive::faults::FaultKinds,
    /// Run the runtime with this planted bug.
    pub planted: Option<PlantedBug>,
    /// Keep the transcript (slower; for replaying one seed).
    pub record: bool,
    /// Model seed 004's interruptions around this preset, with timings (and some knobs) drawn per
    /// seed; see [`randomized_interruptions`].
    pub interruptions: Option<InterruptionConfig>,
}

/// The interruption model for one exploration seed: the preset's knobs that decide the bug stay,
/// while timings scale to generated latencies (timeouts of 0.3 to 2 s, checks every 50 to 250 ms)
/// and what counts as activity and the recovery limit are drawn from the seed.
pub fn randomized_interruptions(base: InterruptionConfig, seed: u64) -> InterruptionConfig {
    let mut rng = SimRng::new(seed).fork(seed, 0x1A7E);
    let mut c = base;
    c.timeout_ms = [300, 600, 1000, 2000][rng.below(4) as usize];
    c.check_every_ms = [50, 100, 250][rng.below(3) as usize];
    c.activity.stream_token = rng.chance(0.5);
    c.activity.first_output = rng.chance(0.5);
    c.recovery_limit = rng.below(4) as u32;
    c
}

/// The result of one run.
#[derive(Clone, Debug)]
pub struct RunReport {
    /// The seed.
    pub seed: u64,
    /// How the run stopped early, if it did (a violation, or a clean limit such as an exhausted
    /// script or a stalled model).
    pub error: Option<RunError>,
    /// Simulator steps taken.
    pub sim_steps: u64,
    /// Faults injected.
    pub faults: u64,
    /// The behaviours it reached, one bit per feature of [`crate::observe::coverage`].
    pub coverage: u128,
    /// The transcript, if [`Settings::record`] asked for it.
    pub records: Vec<crate::sim::Record>,
}

impl RunReport {
    /// The broken invariant, if any.
    pub fn violation(&self) -> Option<&Violation> {
        self.error.as_ref().and_then(RunError::violation)
    }
}

/// Shared by the runs of one exploration and whoever watches it: a request to stop, and how many
/// scenario steps the runs have played (for progress within long runs).
#[derive(Debug, Default)]
pub struct Watch {
    stop: AtomicBool,
    steps: AtomicU64,
}

impl Watch {
    /// Asks every run watched to stop before its next scenario step.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    /// Whether a stop was asked for.
    pub fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// Scenario steps played so far by the runs watched.
    pub fn steps(&self) -> u64 {
        self.steps.load(Ordering::Relaxed)
    }
}

/// Runs `scenario` once under `seed`. With a violation, also returns the materialized scenario that
/// replays it without faults.
pub fn run_one(base: &Scenario, seed: u64, settings: Settings) -> (RunReport, Option<Scenario>) {
    run_watched(base, seed, settings, &Watch::default()).expect("an unshared watch never stops")
}

/// [`run_one`], counting its steps into `watch` and stopping early (`None`) when it is asked to.
pub fn run_watched(
    base: &Scenario,
    seed: u64,
    settings: Settings,
    watch: &Watch,
) -> Option<(RunReport, Option<Scenario>)> {
    let mut scenario = base.clone();
    if settings.planted.is_some() {
        scenario.config.planted = settings.planted;
    }
    if let Some(base) = settings.interruptions {
        scenario.config.interruptions = Some(randomized_interruptions(base, seed));
    }
    let rates = if settings.faults {
        FaultRates::swarm(seed).without(settings.without)
    } else {
        FaultRates::none()
    };
    if rates.restart > 0.0 || rates.restart_mid_turn > 0.0 {
        scenario.config.persist = true;
    }
    let mut sim = scenario
        .sim_builder(seed)
        .observe(true)
        .record(settings.record)
        .faults(FaultPlan::new(seed, rates))
        .materialize(true)
        .coverage(true)
        .build();
    let mut recorder = Recorder {
        actions: Vec::new(),
        pending_run: 0,
        watch,
    };
    let error = match play(&mut sim, &scenario.steps, &mut recorder) {
        Ok(()) => None,
        Err(Stopped {
            stop: Stop::Run(error),
            ..
        }) => Some(error),
        // An exploration run ignores the scenario's expectations (its hooks check none).
        Err(Stopped {
            stop: Stop::Expectation(_),
            ..
        }) => None,
        Err(Stopped {
            stop: Stop::Cancelled,
            ..
        }) => return None,
    };
    recorder.flush();
    let faults = sim.fault_plan().map_or(0, |p| p.injected);
    let report = RunReport {
        seed,
        error,
        sim_steps: sim.steps(),
        faults,
        coverage: sim.coverage().map_or(0, |c| c.bits()),
        records: sim.records().to_vec(),
    };
    let replay = report.violation().map(|v| {
        let mut replay = scenario.clone();
        // A replay is a plain scenario: the replies delivered, and none drawn past them (a file
        // cannot hold a generator).
        replay.more_replies = None;
        let m = sim.materialized().expect("materialize was on");
        for (agent, replies) in &m.replies {
            replay.scripts.insert(agent.clone(), replies.clone());
        }
        for (tool, steps) in &m.tools {
            replay
                .tools
                .insert(tool.clone(), ToolScript::PerCall(steps.clone()));
        }
        replay.steps = recorder
            .actions
            .drain(..)
            .map(|kind| Step {
                line: 0,
                column: 0,
                kind,
            })
            .collect();
        replay.seed = seed;
        replay.expect_violation = Some(v.invariant.to_owned());
        replay.name = format!(
            "{} broken, found by exploration from seed {seed}",
            v.invariant
        );
        replay.description = Some(format!(
            "Found by agentsim explore (seed {seed}{}); materialized and shrunk. Violation: {}",
            settings
                .planted
                .map_or(String::new(), |b| format!(", planted bug {b}")),
            v.message
        ));
        replay
    });
    Some((report, replay))
}

/// Exploration's hooks: the fault plan's user messages between simulator steps and its restarts
/// at quiet points, and every action recorded as a step that replays exactly.
struct Recorder<'w> {
    actions: Vec<StepKind>,
    pending_run: u64,
    watch: &'w Watch,
}

impl Recorder<'_> {
    /// Writes the simulator steps taken since the last other action as one `run` step.
    fn flush(&mut self) {
        if self.pending_run > 0 {
            self.actions.push(StepKind::Run(self.pending_run));
            self.pending_run = 0;
        }
    }

    fn push(&mut self, kind: StepKind) {
        self.flush();
        self.actions.push(kind);
    }
}

impl Hooks for Recorder<'_> {
    fn proceed(&mut self, _index: usize) -> bool {
        self.watch.steps.fetch_add(1, Ordering::Relaxed);
        !self.watch.stopping()
    }

    fn interject(&mut self, sim: &mut Sim, _key: &str) -> Option<String> {
        sim.fault_plan().and_then(|p| p.user())
    }

    fn restart_before_step(&mut self, sim: &mut Sim) -> bool {
        sim.fault_plan().is_some_and(|p| p.restart_mid_turn())
    }

    fn intervention(&mut self, sim: &mut Sim) -> Option<(String, Intervention)> {
        if !sim.fault_plan()?.intervene_now() {
            return None;
        }
        let tree = sim.runtime().tree();
        let ended = sim.runtime().ended_agents().next_back().map(|n| n.agent_id);
        let (index, intervention) = sim
            .fault_plan()?
            .intervention(tree.len(), ended.is_some())?;
        let agent = match index {
            Some(i) => crate::scenario::tree::path_of(sim.runtime(), tree[i].agent_id)?,
            // By its id: a path could name a live agent of the same name.
            None => ended?.to_string(),
        };
        Some((agent, intervention))
    }

    fn on_answer(&mut self, asking: Option<&str>, question: uuid::Uuid, text: &str) {
        // By the asking agent's path when there is one: ids move when a shrunk replay drops steps.
        self.push(StepKind::Answer {
            agent: asking.map(str::to_owned),
            question: asking.is_none().then_some(question),
            text: text.to_owned(),
            wait: false,
        });
    }

    fn on_intervene(&mut self, agent: &str, intervention: &Intervention) {
        self.push(StepKind::Intervene {
            agent: agent.to_owned(),
            intervention: intervention.clone(),
            wait: false,
        });
    }

    fn restart_when_idle(&mut self, sim: &mut Sim) -> bool {
        sim.fault_plan().is_some_and(|p| p.restart())
    }

    fn on_user(&mut self, key: &str, text: &str) {
        self.push(StepKind::User {
            key: key.to_owned(),
            text: text.to_owned(),
            wait: false,
        });
    }

    fn on_step(&mut self) {
        self.pending_run += 1;
    }

    fn on_advance(&mut self, ms: u64) {
        self.push(StepKind::Advance(ms));
    }

    fn on_restart(&mut self) {
        self.push(StepKind::Restart);
    }

    fn on_trigger(&mut self, agent: &str, payload: &serde_json::Value) {
        self.push(StepKind::Trigger {
            agent: agent.to_owned(),
            payload: payload.clone(),
            wait: false,
        });
    }

    fn on_async_answer(&mut self, session: usize, question: Option<usize>, text: &str) {
        self.push(StepKind::AsyncAnswer {
            session,
            question,
            text: text.to_owned(),
            wait: false,
        });
    }
}
