//! Fault injection, swarm style: each seed draws its own fault rates (most kinds off, the rest at
//! a random rate), then every decision to inject draws from a generator of its own, so the run's
//! other random choices do not shift when faults change.
//!
//! Faults: model errors (rate limit, overloaded, network), model stalls, model latency, tool
//! failures, tool latency, user messages or cancel words typed between any two steps, restarts, and
//! user interventions on live agents (seed 001) between any two steps. Every
//! injected fault is noted in the transcript, and the simulator can record what was actually
//! delivered so a failing run can be written back as a plain scenario file.

use crate::drive::backend::{
    BackendError, Delivery, Model, ModelAnswer, ToolBehavior, ToolStep, Tools,
};
use std::sync::Arc;

use crate::agents::tree::{Intervention, Status, DELETE, MODIFY};
use crate::drive::Note;
use crate::model::llm::{LlmErrorKind, LlmRequest, Usage};
use crate::model::rng::SimRng;
use crate::protocol::ToolRun;
use crate::runtime::DEFAULT_CANCEL_WORDS;

const RATES_STREAM: u64 = 0xFA_17;
const DECISIONS_STREAM: u64 = 0xFA_18;
/// Mid-turn restarts draw from a stream of their own, so that adding them moved no other decision.
const MID_TURN_STREAM: u64 = 0xFA_19;
/// Interventions draw from a stream of their own too.
const INTERVENE_STREAM: u64 = 0xFA_1A;

/// Restarts injected into one run, at most. A restart restores from the whole journal, which grows
/// with the run: uncapped, a long scenario's exploration cost grows with the square of its length.
/// A few restarts per run find what many would; the decisions are still drawn, so the other
/// faults of a run do not move.
pub const MAX_RESTARTS: u32 = 8;

/// Probability of each fault per opportunity.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct FaultRates {
    /// A model call fails.
    pub llm_error: f64,
    /// A model call never answers.
    pub llm_stall: f64,
    /// A model call takes up to 5 s longer.
    pub llm_latency: f64,
    /// A tool fails.
    pub tool_error: f64,
    /// A tool takes up to 5 s longer.
    pub tool_latency: f64,
    /// The user types a message between two steps.
    pub user_message: f64,
    /// The user types a cancel word between two steps.
    pub cancel: f64,
    /// The runtime restarts from its persisted state at a quiescent point.
    pub restart: f64,
    /// The runtime restarts from its persisted state between any two steps, in the middle of a
    /// turn (calls in flight are issued again).
    pub restart_mid_turn: f64,
    /// The user intervenes on a live agent between two steps (seed 001: deletes it, modifies
    /// its task, comments, or asks for a status).
    pub intervene: f64,
}

impl FaultRates {
    /// No faults.
    pub fn none() -> FaultRates {
        FaultRates::default()
    }

    /// Rates drawn from the seed: each kind is on with probability 1/2, at a random rate up to
    /// its maximum (swarm testing).
    pub fn swarm(seed: u64) -> FaultRates {
        let mut rng = SimRng::new(seed).fork(seed, RATES_STREAM);
        let mut rate = |max: f64| {
            if rng.chance(0.5) {
                max * rng.below(1001) as f64 / 1000.0
            } else {
                0.0
            }
        };
        FaultRates {
            llm_error: rate(0.2),
            llm_stall: rate(0.03),
            llm_latency: rate(0.3),
            tool_error: rate(0.25),
            tool_latency: rate(0.3),
            user_message: rate(0.05),
            cancel: rate(0.03),
            restart: rate(0.5),
            // Drawn last, so the rates above stay those of earlier versions for each seed.
            restart_mid_turn: rate(0.05),
            intervene: rate(0.03),
        }
    }
}

/// A kind of fault, as `explore --no-fault` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultKind {
    /// A model call fails.
    LlmError,
    /// A model call never answers.
    LlmStall,
    /// A model call is slower.
    LlmLatency,
    /// A tool fails.
    ToolError,
    /// A tool is slower.
    ToolLatency,
    /// The user types a message between two steps.
    UserMessage,
    /// The user types a cancel word.
    Cancel,
    /// A restart at a quiescent point.
    Restart,
    /// A restart in the middle of a turn.
    RestartMidTurn,
    /// A user intervention on a live agent.
    Intervene,
}

impl FaultKind {
    /// Every kind, in the order of [`FaultRates`]' fields.
    pub const ALL: [FaultKind; 10] = [
        FaultKind::LlmError,
        FaultKind::LlmStall,
        FaultKind::LlmLatency,
        FaultKind::ToolError,
        FaultKind::ToolLatency,
        FaultKind::UserMessage,
        FaultKind::Cancel,
        FaultKind::Restart,
        FaultKind::RestartMidTurn,
        FaultKind::Intervene,
    ];

    /// The name on the command line (`llm-error`, ...).
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::LlmError => "llm-error",
            FaultKind::LlmStall => "llm-stall",
            FaultKind::LlmLatency => "llm-latency",
            FaultKind::ToolError => "tool-error",
            FaultKind::ToolLatency => "tool-latency",
            FaultKind::UserMessage => "user-message",
            FaultKind::Cancel => "cancel",
            FaultKind::Restart => "restart",
            FaultKind::RestartMidTurn => "restart-mid-turn",
            FaultKind::Intervene => "intervene",
        }
    }

    /// The kind named `name`.
    pub fn parse(name: &str) -> Option<FaultKind> {
        FaultKind::ALL.into_iter().find(|k| k.name() == name)
    }

    fn bit(self) -> u16 {
        1 << (self as u16)
    }
}

/// A set of fault kinds (the ones an exploration leaves out).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultKinds(u16);

impl FaultKinds {
    /// The set with `kind` added.
    pub fn with(self, kind: FaultKind) -> FaultKinds {
        FaultKinds(self.0 | kind.bit())
    }

    /// Whether `kind` is in the set.
    pub fn contains(self, kind: FaultKind) -> bool {
        self.0 & kind.bit() != 0
    }

    /// The kinds in the set, in [`FaultKind::ALL`]'s order.
    pub fn iter(self) -> impl Iterator<Item = FaultKind> {
        FaultKind::ALL
            .into_iter()
            .filter(move |k| self.contains(*k))
    }
}

impl FaultRates {
    /// These rates with the kinds in `off` at zero (the other rates stay those the seed drew).
    pub fn without(mut self, off: FaultKinds) -> FaultRates {
        for kind in off.iter() {
            *match kind {
                FaultKind::LlmError => &mut self.llm_error,
                FaultKind::LlmStall => &mut self.llm_stall,
                FaultKind::LlmLatency => &mut self.llm_latency,
                FaultKind::ToolError => &mut self.tool_error,
                FaultKind::ToolLatency => &mut self.tool_latency,
                FaultKind::UserMessage => &mut self.user_message,
                FaultKind::Cancel => &mut self.cancel,
                FaultKind::Restart => &mut self.restart,
                FaultKind::RestartMidTurn => &mut self.restart_mid_turn,
                FaultKind::Intervene => &mut self.intervene,
            } = 0.0;
        }
        self
    }
}

/// The faults of one run.
#[derive(Clone, Debug)]
pub struct FaultPlan {
    /// The rates.
    pub rates: FaultRates,
    rng: SimRng,
    mid_turn: SimRng,
    intervene: SimRng,
    /// How many faults were injected.
    pub injected: u64,
    /// Restarts injected so far (at most [`MAX_RESTARTS`]).
    restarts: u32,
}

impl FaultPlan {
    /// The plan for `seed` with these rates.
    pub fn new(seed: u64, rates: FaultRates) -> FaultPlan {
        FaultPlan {
            rates,
            rng: SimRng::new(seed).fork(seed, DECISIONS_STREAM),
            mid_turn: SimRng::new(seed).fork(seed, MID_TURN_STREAM),
            intervene: SimRng::new(seed).fork(seed, INTERVENE_STREAM),
            injected: 0,
            restarts: 0,
        }
    }

    fn roll(&mut self, p: f64) -> bool {
        p > 0.0 && self.rng.chance(p)
    }

    /// Whether to restart the runtime before the next step, in the middle of a turn.
    pub(crate) fn restart_mid_turn(&mut self) -> bool {
        let p = self.rates.restart_mid_turn;
        let on = p > 0.0 && self.mid_turn.chance(p) && self.restarts < MAX_RESTARTS;
        if on {
            self.injected += 1;
            self.restarts += 1;
        }
        on
    }

    /// Whether to intervene now, between two steps (then [`FaultPlan::intervention`] says how).
    pub(crate) fn intervene_now(&mut self) -> bool {
        let p = self.rates.intervene;
        p > 0.0 && self.intervene.chance(p)
    }

    /// The intervention to make on one of `live` agents (`Some(index)`), or, one time in
    /// twenty when `ended` says one has, on an agent that ended (`None`): mostly deletions and
    /// modifications, some comments, statuses (one the machine refuses among them). `None`
    /// when no agent lives.
    pub fn intervention(
        &mut self,
        live: usize,
        ended: bool,
    ) -> Option<(Option<usize>, Intervention)> {
        if live == 0 {
            return None;
        }
        self.injected += 1;
        let n = self.injected;
        let target = if ended && self.intervene.chance(0.05) {
            None
        } else {
            Some(self.intervene.below(live as u64) as usize)
        };
        let comment = |c: &str| Some(Arc::<str>::from(c));
        let content = Some(Arc::<str>::from(format!("changed task {n}")));
        let none = Intervention::default();
        let intervention = match self.intervene.below(20) {
            0..=7 => Intervention {
                user_comment: comment(DELETE),
                ..none
            },
            8..=12 => Intervention {
                user_comment: comment(MODIFY),
                user_content: content,
                ..none
            },
            13 | 14 => Intervention {
                status: Some(Status::Modified),
                user_content: content,
                ..none
            },
            15 | 16 => Intervention {
                status: Some(Status::Deleted),
                ..none
            },
            17 | 18 => Intervention {
                user_comment: comment(&format!("looks fine {n}")),
                ..none
            },
            _ => Intervention {
                status: Some(Status::Completed),
                ..none
            },
        };
        Some((target, intervention))
    }

    /// A reply to inject instead of the scripted one, if any.
    pub fn llm(&mut self) -> Option<ModelAnswer> {
        let delivery = if self.roll(self.rates.llm_stall) {
            Delivery::Stall
        } else if self.roll(self.rates.llm_error) {
            let kind = match self.rng.below(3) {
                0 => LlmErrorKind::RateLimit,
                1 => LlmErrorKind::Overloaded,
                _ => LlmErrorKind::Network,
            };
            Delivery::Error {
                kind,
                message: kind.default_message().into(),
            }
        } else {
            return None;
        };
        self.injected += 1;
        Some(ModelAnswer {
            delivery,
            after_ms: 0,
            usage: Usage::default(),
        })
    }

    /// Extra latency for a model call.
    pub(crate) fn llm_latency(&mut self) -> u64 {
        if self.roll(self.rates.llm_latency) {
            self.injected += 1;
            self.rng.below(5_000)
        } else {
            0
        }
    }

    /// A tool outcome to inject instead of the scripted one, if any.
    pub fn tool(&mut self) -> Option<ToolStep> {
        if self.roll(self.rates.tool_error) {
            self.injected += 1;
            Some(ToolStep {
                behavior: ToolBehavior::Fail("injected fault".into()),
                after_ms: 0,
            })
        } else {
            None
        }
    }

    /// Extra latency for a tool run.
    pub fn tool_latency(&mut self) -> u64 {
        if self.roll(self.rates.tool_latency) {
            self.injected += 1;
            self.rng.below(5_000)
        } else {
            0
        }
    }

    /// Whether to restart the runtime now (at a quiescent point).
    pub fn restart(&mut self) -> bool {
        let on = self.roll(self.rates.restart) && self.restarts < MAX_RESTARTS;
        if on {
            self.injected += 1;
            self.restarts += 1;
        }
        on
    }

    /// A message the user types now, between two steps, if any.
    pub fn user(&mut self) -> Option<String> {
        if self.roll(self.rates.cancel) {
            self.injected += 1;
            let i = self.rng.below(DEFAULT_CANCEL_WORDS.len() as u64) as usize;
            Some(DEFAULT_CANCEL_WORDS[i].to_owned())
        } else if self.roll(self.rates.user_message) {
            self.injected += 1;
            Some(format!("interjection {}", self.injected))
        } else {
            None
        }
    }
}

/// A backend with faults injected from a [`FaultPlan`]: a wrapper around any [`Model`] or
/// [`Tools`]. An injected model fault (an error, a stall) answers instead of the backend, which is
/// then not asked; injected latency is added to the backend's own. Every injected fault leaves a
/// [`Note`].
pub struct WithFaults<'p, B> {
    /// The backend.
    pub inner: B,
    /// Where the decisions come from.
    pub plan: &'p mut FaultPlan,
}

impl<B: Model> Model for WithFaults<'_, B> {
    fn answer(
        &mut self,
        request: &LlmRequest<'_>,
        notes: &mut Vec<Note>,
    ) -> Result<ModelAnswer, BackendError> {
        let agent = &request.agent.name;
        if let Some(injected) = self.plan.llm() {
            let what = match injected.delivery {
                Delivery::Stall => format!("the model stalls for {agent}"),
                _ => format!("model error for {agent}"),
            };
            notes.push(Note::Fault { what });
            return Ok(injected);
        }
        let extra = self.plan.llm_latency();
        if extra > 0 {
            let what = format!("model latency +{extra}ms for {agent}");
            notes.push(Note::Fault { what });
        }
        let mut answer = self.inner.answer(request, notes)?;
        answer.after_ms = answer.after_ms.saturating_add(extra);
        Ok(answer)
    }
}

impl<B: Tools> Tools for WithFaults<'_, B> {
    fn run(&mut self, run: &ToolRun<'_>, notes: &mut Vec<Note>) -> Result<ToolStep, BackendError> {
        let name = run.name;
        let mut step = match self.plan.tool() {
            Some(step) => {
                notes.push(Note::Fault {
                    what: format!("tool {name} fails"),
                });
                step
            }
            None => self.inner.run(run, notes)?,
        };
        let extra = self.plan.tool_latency();
        if extra > 0 {
            notes.push(Note::Fault {
                what: format!("tool {name} latency +{extra}ms"),
            });
            step.after_ms = step.after_ms.saturating_add(extra);
        }
        Ok(step)
    }
}
