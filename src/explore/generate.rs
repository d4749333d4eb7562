//! Random scenarios from a seed: agent sets (skills and agents, nesting up to depth 6), scripts
//! (text, one or several tool uses, text plus tool uses, `complete`, spawns, empty replies, unknown
//! tools, bad tool input, model errors, `ask_user`), tools with latencies, errors and timeouts, and
//! user messages including cancel words. Used by the property tests and `agentsim explore
//! --generated`. The same seed always gives the same scenario.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{json, Value};

use crate::drive::scripted::{MoreReplies, ReplyKind, ScriptBlock, ScriptChunk, ScriptedReply};
use crate::drive::scripted::{ToolBehavior, ToolScript, ToolStep};
use crate::model::agent::{AgentDef, AgentKind, Catalog, EmptyAnswer};
use crate::model::llm::{LlmErrorKind, Usage};
use crate::model::rng::SimRng;
use crate::runtime::{RuntimeConfig, ToolSpec, DEFAULT_CANCEL_WORDS};
use crate::scenario::{Scenario, Step, StepKind, DEFAULT_KEY};
use crate::sim::Limits;

/// Bounds of generated scenarios.
#[derive(Clone, Copy, Debug)]
pub struct GenConfig {
    /// Skills and agents besides main.
    pub max_agents: usize,
    /// Replies per agent script.
    pub max_script: usize,
    /// User messages.
    pub max_user_steps: usize,
    /// External tools.
    pub max_tools: usize,
    /// What the scenarios lean toward (the default leans nowhere).
    pub knobs: Knobs,
}

impl Default for GenConfig {
    fn default() -> GenConfig {
        GenConfig {
            max_agents: 5,
            max_script: 8,
            max_user_steps: 5,
            max_tools: 3,
            knobs: Knobs::default(),
        }
    }
}

/// What generated scenarios lean toward: one swarm configuration of the explorer's steering
/// ([`crate::explore::steer`]). Changing a knob changes what is drawn, never how many draws are
/// made, except for the knobs that are off by default, which draw only when on: the default
/// knobs give the scenarios they always gave.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Knobs {
    /// Cumulative shares, out of 100, of the reply kinds: text, tool uses, text and a tool use,
    /// a spawn, `complete`, an empty reply, a model error; the rest ask the user.
    pub replies: [u64; 7],
    /// Iteration limits of 2 or 3 for every agent, main included.
    pub low_limits: bool,
    /// Chance that an agent is a batch agent.
    pub batch: f64,
    /// Chance that a user message is a cancel word.
    pub cancel: f64,
    /// Chance that a tool hangs (off by default).
    pub hang: f64,
    /// Chance that a reply of several tool uses reuses an id, which the runtime rejects (off by
    /// default).
    pub duplicate_ids: f64,
    /// Chance that a scenario uses seed 001's agent tree: agents declared `fork: true` whose
    /// scripts fork and wait (drawn from a stream of its own, so that the rest of the scenario is
    /// the one the seed gives without it).
    pub tree: f64,
    /// Chance that a scenario declares an agent `workflow: six_step` whose replies are often
    /// decisions (`NO`, `NO_QUESTION`, `NONE`, subquestion lines, a summary that needs more
    /// information); drawn from a stream of its own too.
    pub workflow: f64,
    /// Chance that a scenario triggers seed 003's async sessions: an agent (often declared
    /// `async_questions`, with timeouts, expiry and callbacks) started by `trigger` steps, its
    /// questions answered by `async_answer` steps, some twice, some never; drawn from a stream
    /// of its own too.
    pub sessions: f64,
}

impl Default for Knobs {
    fn default() -> Knobs {
        Knobs {
            replies: [25, 42, 50, 65, 80, 86, 92],
            low_limits: false,
            batch: 0.25,
            cancel: 0.15,
            hang: 0.0,
            duplicate_ids: 0.0,
            tree: 0.25,
            workflow: 0.15,
            sessions: 0.12,
        }
    }
}

/// Stream of the seed used for generation (so that the run's own draws stay independent).
const GEN_STREAM: u64 = 0x6E6E;
/// Stream of the replies drawn past a script's end.
const MORE_STREAM: u64 = 0x4D4F;
/// Stream of the draw that keeps a scenario's scripts as written.
const OPEN_STREAM: u64 = 0x4F50;
/// Stream of the agent tree's draws (forks and waits).
const TREE_STREAM: u64 = 0x7EEE;
/// Stream of the fork and wait replies drawn past a script's end.
const MORE_TREE_STREAM: u64 = 0x7EEF;
/// Stream of the workflow's draws.
const WORKFLOW_STREAM: u64 = 0x5157;
/// Stream of the decision replies drawn past a script's end.
const MORE_WORKFLOW_STREAM: u64 = 0x5158;
/// Stream of the async sessions' draws.
const SESSION_STREAM: u64 = 0x5E55;
/// Stream of the questions drawn past a triggered agent's script's end.
const MORE_SESSION_STREAM: u64 = 0x5E56;
/// Stream of the definitions' rarer settings: whitelists, passthrough skills, `fork` and
/// `wait` called by agents not declared `fork: true`, `query_user: none`.
const DEFS_STREAM: u64 = 0xDEF5;
/// Share of generated scenarios whose scripts end where they end (to exercise running out).
pub const FIXED_SCRIPTS: f64 = 0.05;
/// Stream of the draw that delivers a reply in pieces.
const CHUNK_STREAM: u64 = 0xC4C4;
/// Share of generated replies with content that arrive streamed, in pieces.
pub const STREAMED: f64 = 0.1;

/// The stream of an agent's draws past its script: FNV-1a of its name (a seed per call then).
fn agent_stream(agent: &str) -> u64 {
    agent.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Reply `call` (0-based) of `agent`, delivered in pieces about one time in ten: its texts cut
/// in two or three, each tool use whole, most pieces at once and some a little later (so that
/// other inputs, a cancel or a deletion, can come between them). Drawn from a stream of its own,
/// keyed by the agent and the call, so that the scenario is otherwise the same either way.
fn streamed(seed: u64, agent: &str, call: usize, reply: ScriptedReply) -> ScriptedReply {
    let ReplyKind::Content(blocks) = &reply.kind else {
        return reply;
    };
    let mut rng = SimRng::new(seed).fork(call as u64, agent_stream(agent) ^ CHUNK_STREAM);
    if !rng.chance(STREAMED) {
        return reply;
    }
    let mut chunks = Vec::new();
    let gap = |rng: &mut SimRng| match rng.chance(0.7) {
        true => 0,
        false => *pick(rng, &[1, 10, 200]),
    };
    for block in blocks {
        match block {
            ScriptBlock::Text(t) => {
                let pieces = if t.is_empty() {
                    1
                } else {
                    1 + rng.below(3) as usize
                };
                let cuts: Vec<usize> = t.char_indices().map(|(i, _)| i).collect();
                let mut from = 0;
                for p in 1..=pieces {
                    let to = match p == pieces {
                        true => t.len(),
                        false => cuts
                            .get(cuts.len() * p / pieces)
                            .copied()
                            .unwrap_or(t.len()),
                    };
                    if to > from || pieces == 1 {
                        let after_ms = gap(&mut rng);
                        chunks.push(ScriptChunk {
                            block: ScriptBlock::Text(t[from..to].into()),
                            after_ms,
                        });
                    }
                    from = to;
                }
            }
            other => {
                let after_ms = gap(&mut rng);
                chunks.push(ScriptChunk {
                    block: other.clone(),
                    after_ms,
                });
            }
        }
    }
    ScriptedReply {
        kind: ReplyKind::Stream(chunks),
        ..reply
    }
}

/// Replies past the end of a generated agent's script, drawn like the scripted ones, from the
/// seed, the agent and the call number alone.
#[derive(Debug)]
struct GeneratedReplies {
    seed: u64,
    tools: Vec<String>,
    agents: Vec<(String, AgentKind)>,
    knobs: Knobs,
    /// Agents declared `fork: true`.
    forking: Vec<String>,
    /// Agents declared `workflow: six_step`.
    workflows: Vec<String>,
    /// Agents triggered as async sessions, whose replies ask more often.
    asking: Vec<String>,
}

impl MoreReplies for GeneratedReplies {
    fn reply(&self, agent: &str, call: usize) -> Option<ScriptedReply> {
        let stream = agent_stream(agent);
        let mut rng = SimRng::new(self.seed).fork(call as u64, stream ^ MORE_STREAM);
        let drawn = reply(
            &mut rng,
            agent,
            call - 1,
            &self.tools,
            &self.agents,
            &self.knobs,
        );
        let base = agent.split('#').next().unwrap_or(agent);
        if self.workflows.iter().any(|f| f == base) {
            let mut rng = SimRng::new(self.seed).fork(call as u64, stream ^ MORE_WORKFLOW_STREAM);
            if let Some(r) = workflow_reply(&mut rng, agent, call - 1) {
                return Some(streamed(self.seed, agent, call - 1, r));
            }
        }
        if self.asking.iter().any(|f| f == base) {
            let mut rng = SimRng::new(self.seed).fork(call as u64, stream ^ MORE_SESSION_STREAM);
            if let Some(r) = session_reply(&mut rng, agent, call - 1) {
                return Some(streamed(self.seed, agent, call - 1, r));
            }
        }
        if self.forking.iter().any(|f| f == base) {
            let mut rng = SimRng::new(self.seed).fork(call as u64, stream ^ MORE_TREE_STREAM);
            if let Some(r) = tree_reply(&mut rng, agent, call - 1) {
                return Some(streamed(self.seed, agent, call - 1, r));
            }
        }
        Some(streamed(self.seed, agent, call - 1, drawn))
    }
}

fn pick<'a, T>(rng: &mut SimRng, items: &'a [T]) -> &'a T {
    &items[rng.below(items.len() as u64) as usize]
}

fn text(t: String) -> ScriptBlock {
    ScriptBlock::Text(t.into())
}

fn tool_use(name: &str, input: Value) -> ScriptBlock {
    ScriptBlock::ToolUse {
        id: None,
        name: name.into(),
        input: Arc::new(input),
    }
}

/// The scenario for `seed`.
pub fn generate(seed: u64, cfg: &GenConfig) -> Scenario {
    let mut rng = SimRng::new(seed).fork(seed, GEN_STREAM);
    let mut config = RuntimeConfig::default();
    let mut tools = BTreeMap::new();
    let n_tools = 1 + rng.below(cfg.max_tools as u64) as usize;
    let tool_names: Vec<String> = (1..=n_tools).map(|i| format!("t{i}")).collect();
    for name in &tool_names {
        let after_ms = *pick(&mut rng, &[0, 0, 10, 50, 500, 2000]);
        let hangs = cfg.knobs.hang > 0.0 && rng.chance(cfg.knobs.hang);
        let behavior = match rng.below(10) {
            _ if hangs => ToolBehavior::Hang,
            0 => ToolBehavior::Fail("disk full".into()),
            1 => ToolBehavior::Result {
                content: format!("{name} failed").into(),
                is_error: true,
            },
            _ => ToolBehavior::Result {
                content: format!("{name} ok").into(),
                is_error: false,
            },
        };
        let timeout_ms = rng.chance(0.15).then_some(1000);
        config.tools.insert(name.clone(), ToolSpec { timeout_ms });
        tools.insert(
            name.clone(),
            ToolScript::Fixed(ToolStep { behavior, after_ms }),
        );
    }

    let mut catalog = Catalog::default();
    let n_agents = rng.below(cfg.max_agents as u64 + 1) as usize;
    let mut names = Vec::new();
    for i in 1..=n_agents {
        let kind = if rng.chance(0.5) {
            AgentKind::Skill
        } else {
            AgentKind::Agent
        };
        let name = match kind {
            AgentKind::Skill => format!("s{i}"),
            _ => format!("a{i}"),
        };
        let mut def = AgentDef::new(name.clone(), kind);
        def.max_iterations = if cfg.knobs.low_limits {
            *pick(&mut rng, &[2, 3, 2, 3, 2])
        } else {
            *pick(&mut rng, &[2, 3, 4, 6, 25])
        };
        def.parallel_tools = rng.chance(0.3);
        def.stream = rng.chance(0.1);
        if rng.chance(cfg.knobs.batch) {
            def.batch = Some(*pick(
                &mut rng,
                &[
                    EmptyAnswer::AcceptEmpty,
                    EmptyAnswer::ExtractFromConversation,
                    EmptyAnswer::AskForSummary,
                ],
            ));
        }
        names.push((name, kind));
        catalog.add(def);
    }
    let mut main = AgentDef::new("main", AgentKind::Main);
    main.max_iterations = if cfg.knobs.low_limits {
        *pick(&mut rng, &[2, 3, 2])
    } else {
        *pick(&mut rng, &[3, 5, 10])
    };
    main.parallel_tools = rng.chance(0.3);
    catalog.add(main);

    let mut scripts: BTreeMap<String, Vec<ScriptedReply>> = BTreeMap::new();
    let mut agents: Vec<String> = vec!["main".into()];
    agents.extend(names.iter().map(|(n, _)| n.clone()));
    for agent in &agents {
        let len = 1 + rng.below(cfg.max_script as u64) as usize;
        let replies = (0..len)
            .map(|i| reply(&mut rng, agent, i, &tool_names, &names, &cfg.knobs))
            .collect();
        scripts.insert(agent.clone(), replies);
    }

    // Seed 001's tree, from a stream of its own: some agents fork, and some of their replies
    // fork or wait; each fork's own script is drawn like any agent's.
    let mut tree_rng = SimRng::new(seed).fork(seed, TREE_STREAM);
    let mut forking = Vec::new();
    if cfg.knobs.tree > 0.0 && tree_rng.chance(cfg.knobs.tree) {
        for agent in &agents {
            if !tree_rng.chance(0.6) {
                continue;
            }
            if let Some(def) = catalog.get_mut(agent) {
                Arc::make_mut(def).fork = true;
                forking.push(agent.clone());
            }
        }
        for agent in &forking {
            if let Some(script) = scripts.get_mut(agent) {
                for (i, r) in script.iter_mut().enumerate() {
                    if let Some(t) = tree_reply(&mut tree_rng, agent, i) {
                        *r = t;
                    }
                }
            }
            for handle in 1..=2 {
                let name = format!("{agent}#{handle}");
                let len = 1 + tree_rng.below(3) as usize;
                let replies = (0..len)
                    .map(|i| {
                        let r = reply(&mut tree_rng, &name, i, &tool_names, &names, &cfg.knobs);
                        tree_reply(&mut tree_rng, &name, i).unwrap_or(r)
                    })
                    .collect();
                scripts.insert(name, replies);
            }
        }
    }

    // Seed 001's six-step workflow, from a stream of its own: one agent runs it, and many of its
    // replies (and its children's) are decisions.
    let mut wf_rng = SimRng::new(seed).fork(seed, WORKFLOW_STREAM);
    let mut workflows = Vec::new();
    if cfg.knobs.workflow > 0.0 && wf_rng.chance(cfg.knobs.workflow) {
        let agent = pick(&mut wf_rng, &agents).clone();
        if let Some(def) = catalog.get_mut(&agent) {
            let max_depth = wf_rng.below(2) as u32;
            Arc::make_mut(def).workflow = Some(crate::agents::workflow::WorkflowDef { max_depth });
            workflows.push(agent.clone());
        }
        for agent in &workflows {
            if let Some(script) = scripts.get_mut(agent) {
                for (i, r) in script.iter_mut().enumerate() {
                    if let Some(d) = workflow_reply(&mut wf_rng, agent, i) {
                        *r = d;
                    }
                }
            }
            for handle in 1..=2 {
                let name = format!("{agent}#{handle}");
                let len = 1 + wf_rng.below(5) as usize;
                let replies = (0..len)
                    .map(|i| {
                        let r = reply(&mut wf_rng, &name, i, &tool_names, &names, &cfg.knobs);
                        workflow_reply(&mut wf_rng, &name, i).unwrap_or(r)
                    })
                    .collect();
                scripts.entry(name).or_insert(replies);
            }
        }
    }

    let mut steps = Vec::new();
    let n_steps = 1 + rng.below(cfg.max_user_steps as u64) as usize;
    for i in 0..n_steps {
        let text = if rng.chance(cfg.knobs.cancel) {
            pick(&mut rng, &DEFAULT_CANCEL_WORDS).to_string()
        } else {
            format!("message {}", i + 1)
        };
        steps.push(Step {
            line: 0,
            column: 0,
            kind: StepKind::User {
                key: DEFAULT_KEY.to_owned(),
                text,
                wait: true,
            },
        });
    }

    // Seed 003's async sessions, from a stream of their own: one agent is triggered once or
    // twice (often asking through the store), and its questions are answered, some twice, some
    // never, some after their timeout or their session's expiry.
    let mut ss_rng = SimRng::new(seed).fork(seed, SESSION_STREAM);
    let mut asking = Vec::new();
    let mut callback_replies = Vec::new();
    if cfg.knobs.sessions > 0.0 && ss_rng.chance(cfg.knobs.sessions) {
        sessions(
            &mut ss_rng,
            &agents,
            &mut catalog,
            &mut config,
            &mut scripts,
            &mut steps,
            &mut callback_replies,
        );
        let agent = steps.iter().find_map(|s| match &s.kind {
            StepKind::Trigger { agent, .. } => Some(agent.clone()),
            _ => None,
        });
        asking.extend(agent);
    }

    // The definitions' rarer settings, from a stream of their own (a scenario that draws none
    // is the same as without them), on agents that fork, run the workflow or answer a trigger
    // never.
    let mut defs_rng = SimRng::new(seed).fork(seed, DEFS_STREAM);
    for (agent, kind) in &names {
        let busy = forking.contains(agent) || workflows.contains(agent) || asking.contains(agent);
        let Some(def) = catalog.get_mut(agent) else {
            continue;
        };
        // A whitelist of some tools: the others are refused as not available.
        if defs_rng.chance(0.12) {
            let allowed = tool_names
                .iter()
                .filter(|_| defs_rng.chance(0.5))
                .cloned()
                .collect();
            Arc::make_mut(def).tools = Some(allowed);
        }
        // A passthrough skill: one external run, no frame.
        if *kind == AgentKind::Skill && !busy && def.batch.is_none() && defs_rng.chance(0.1) {
            Arc::make_mut(def).passthrough = true;
        }
    }
    for agent in &agents {
        if forking.contains(agent) || workflows.contains(agent) || !defs_rng.chance(0.06) {
            continue;
        }
        // `fork` or `wait` from an agent not declared `fork: true`: not found.
        if let Some(script) = scripts.get_mut(agent) {
            let i = defs_rng.below(script.len() as u64) as usize;
            let block = match defs_rng.chance(0.5) {
                true => tool_use("fork", json!({ "prompt": format!("{agent} part {i}") })),
                false => tool_use("wait", json!({ "handle": 1 })),
            };
            script[i] = ScriptedReply {
                kind: ReplyKind::Content(vec![block]),
                after_ms: 0,
                usage: Usage::default(),
            };
        }
    }

    // Nobody to ask: every `ask_user` is answered at once.
    if defs_rng.chance(0.08) {
        config.query_user = crate::runtime::QueryUser::None;
    }

    // Most scenarios give every agent as many replies as its conversations need; some keep their
    // scripts as written, so that scripts running out stay exercised. Drawn from a stream of its
    // own, so that the scenario itself is the same either way.
    for (agent, script) in scripts.iter_mut() {
        for (i, r) in std::mem::take(script).into_iter().enumerate() {
            script.push(streamed(seed, agent, i, r));
        }
    }
    let open = !SimRng::new(seed)
        .fork(seed, OPEN_STREAM)
        .chance(FIXED_SCRIPTS);
    let more_replies = open.then(|| {
        Arc::new(GeneratedReplies {
            seed,
            tools: tool_names.clone(),
            agents: names.clone(),
            knobs: cfg.knobs,
            forking: forking.clone(),
            workflows: workflows.clone(),
            asking: asking.clone(),
        }) as Arc<dyn MoreReplies>
    });

    Scenario {
        path: format!("generated-{seed}").into(),
        name: format!("generated scenario {seed}"),
        description: None,
        seed,
        catalog,
        config,
        scripts,
        more_replies,
        callback_replies,
        tools,
        steps,
        limits: Limits {
            max_steps: 5_000,
            max_depth: 8,
            max_llm_calls: 500,
        },
        expect_violation: None,
        routes: BTreeMap::new(),
        per_conversation: Default::default(),
        history: Default::default(),
    }
}

/// Draws seed 003's part of a scenario: the triggered agent and its settings, its questions in
/// its script, and the `trigger`, `async_answer` and `advance` steps among the user's.
fn sessions(
    rng: &mut SimRng,
    agents: &[String],
    catalog: &mut Catalog,
    config: &mut RuntimeConfig,
    scripts: &mut BTreeMap<String, Vec<ScriptedReply>>,
    steps: &mut Vec<Step>,
    callback_replies: &mut Vec<crate::agents::session::CallbackReply>,
) {
    use crate::agents::session::CallbackReply;
    use crate::model::agent::{AsyncQuestions, OnTimeout};
    let agent = pick(rng, agents).clone();
    if let Some(def) = catalog.get_mut(&agent) {
        if rng.chance(0.8) {
            Arc::make_mut(def).async_questions = Some(AsyncQuestions {
                timeout_ms: rng.chance(0.5).then(|| *pick(rng, &[500, 5_000, 60_000])),
                on_timeout: if rng.chance(0.5) {
                    OnTimeout::Fail
                } else {
                    OnTimeout::DefaultAnswer("the default answer".into())
                },
                callback: rng.chance(0.3).then(|| "http://hooks.test/agent".into()),
            });
        }
    }
    if rng.chance(0.3) {
        config.session_expiry_ms = Some(*pick(rng, &[1_000, 20_000, 120_000]));
    }
    if rng.chance(0.4) {
        config.callbacks.url = Some("http://hooks.test/questions".into());
    }
    for _ in 0..rng.below(6) {
        callback_replies.push(*pick(
            rng,
            &[
                CallbackReply::Status(200),
                CallbackReply::Status(500),
                CallbackReply::Refused,
                CallbackReply::Hang,
            ],
        ));
    }
    if let Some(script) = scripts.get_mut(&agent) {
        for (i, r) in script.iter_mut().enumerate() {
            if let Some(q) = session_reply(rng, &agent, i) {
                *r = q;
            }
        }
    }
    let triggers = 1 + rng.below(2) as usize;
    let place = |rng: &mut SimRng, steps: &mut Vec<Step>, kind: StepKind| {
        let at = rng.below(steps.len() as u64 + 1) as usize;
        steps.insert(
            at,
            Step {
                line: 0,
                column: 0,
                kind,
            },
        );
    };
    for n in 0..triggers {
        let kind = StepKind::Trigger {
            agent: agent.clone(),
            payload: json!({ "event": n + 1 }),
            wait: rng.chance(0.5),
        };
        place(rng, steps, kind);
    }
    for n in 0..rng.below(4) {
        let kind = StepKind::AsyncAnswer {
            session: 1 + rng.below(triggers as u64) as usize,
            question: rng.chance(0.2).then(|| 1 + rng.below(2) as usize),
            text: format!("answer {}", n + 1),
            wait: rng.chance(0.5),
        };
        place(rng, steps, kind);
    }
    if rng.chance(0.5) {
        let kind = StepKind::Advance(*pick(rng, &[600, 6_000, 70_000]));
        place(rng, steps, kind);
    }
}

/// A question for an agent triggered as an async session, drawn about one time in three.
fn session_reply(rng: &mut SimRng, agent: &str, i: usize) -> Option<ScriptedReply> {
    rng.chance(0.35).then(|| ScriptedReply {
        kind: ReplyKind::Content(vec![tool_use(
            "ask_user",
            json!({ "question": format!("{agent} asks the store {i}?") }),
        )]),
        after_ms: 0,
        usage: Usage::default(),
    })
}

fn reply(
    rng: &mut SimRng,
    agent: &str,
    i: usize,
    tools: &[String],
    agents: &[(String, AgentKind)],
    knobs: &Knobs,
) -> ScriptedReply {
    let any_tool = |rng: &mut SimRng| -> ScriptBlock {
        if rng.chance(0.05) {
            return tool_use("nope", json!({}));
        }
        let name = pick(rng, tools).clone();
        tool_use(&name, json!({ "n": i }))
    };
    let spawn = |rng: &mut SimRng| -> ScriptBlock {
        if agents.is_empty() || rng.chance(0.1) {
            // Bad input or an unknown target.
            return match rng.below(3) {
                0 => tool_use("use_skill", json!({ "message": "go" })),
                1 => tool_use("use_agent", json!({ "agent": "ghost", "message": "go" })),
                _ => tool_use("use_agent", json!("not an object")),
            };
        }
        let (name, kind) = pick(rng, agents);
        let tool = if *kind == AgentKind::Skill {
            "use_skill"
        } else {
            "use_agent"
        };
        let field = if *kind == AgentKind::Skill {
            "skill"
        } else {
            "agent"
        };
        tool_use(
            tool,
            json!({ field: name, "message": format!("task from {agent}") }),
        )
    };
    let roll = rng.below(100);
    let r = knobs.replies;
    let kind = match roll {
        _ if roll < r[0] => ReplyKind::Content(vec![text(format!("{agent} says {i}"))]),
        _ if roll < r[1] => {
            let n = 1 + rng.below(3) as usize;
            let mut blocks: Vec<ScriptBlock> = (0..n).map(|_| any_tool(rng)).collect();
            if n > 1 && knobs.duplicate_ids > 0.0 && rng.chance(knobs.duplicate_ids) {
                for block in &mut blocks {
                    if let ScriptBlock::ToolUse { id, .. } = block {
                        *id = Some("dup".into());
                    }
                }
            }
            ReplyKind::Content(blocks)
        }
        _ if roll < r[2] => {
            ReplyKind::Content(vec![text(format!("{agent} works {i}")), any_tool(rng)])
        }
        _ if roll < r[3] => {
            let mut blocks = Vec::new();
            if rng.chance(0.3) {
                blocks.push(any_tool(rng));
            }
            blocks.push(spawn(rng));
            if rng.chance(0.3) {
                blocks.push(any_tool(rng));
            }
            ReplyKind::Content(blocks)
        }
        _ if roll < r[4] => {
            let mut blocks = Vec::new();
            if rng.chance(0.2) {
                blocks.push(any_tool(rng));
            }
            blocks.push(tool_use(
                "complete",
                json!({ "result": format!("{agent} done {i}") }),
            ));
            if rng.chance(0.1) {
                blocks.push(any_tool(rng));
            }
            ReplyKind::Content(blocks)
        }
        _ if roll < r[5] => ReplyKind::Content(Vec::new()),
        _ if roll < r[6] => ReplyKind::Error {
            kind: *pick(
                rng,
                &[
                    LlmErrorKind::RateLimit,
                    LlmErrorKind::Overloaded,
                    LlmErrorKind::Network,
                ],
            ),
            message: "upstream failure".into(),
            mid_stream: false,
            times: crate::drive::scripted::Attempts::default(),
            retry_after_ms: None,
        },
        _ => ReplyKind::Content(vec![tool_use(
            "ask_user",
            json!({ "question": format!("{agent} asks {i}?") }),
        )]),
    };
    ScriptedReply {
        kind,
        after_ms: *pick(rng, &[0, 0, 0, 20, 300, 1500]),
        usage: Usage::default(),
    }
}

/// A reply of seed 001's tree for a fork-enabled agent (or one of its forks), drawn about one
/// time in three: forks, a fork and a wait on it, or a wait on a handle (some never given). A
/// fork's fork forks no further (it only waits).
fn tree_reply(rng: &mut SimRng, agent: &str, i: usize) -> Option<ScriptedReply> {
    if !rng.chance(0.35) {
        return None;
    }
    let nested = agent.matches('#').count();
    let fork = |n: usize| tool_use("fork", json!({ "prompt": format!("{agent} part {i}.{n}") }));
    // A handle is a number, or now and then a string holding one (which `wait` reads too).
    let wait = |h: u64, rng: &mut SimRng| match rng.below(8) {
        0 => tool_use("wait", json!({ "handle": h.to_string() })),
        _ => tool_use("wait", json!({ "handle": h })),
    };
    let blocks = match rng.below(10) {
        _ if nested >= 2 => {
            let h = 1 + rng.below(2);
            vec![wait(h, rng)]
        }
        0..=2 => (0..1 + rng.below(2) as usize).map(fork).collect(),
        3..=5 => {
            let h = 1 + rng.below(2);
            vec![fork(0), wait(h, rng)]
        }
        6 => vec![fork(0), fork(1), wait(1, rng), wait(2, rng)],
        _ => {
            let h = 1 + rng.below(3);
            vec![wait(h, rng)]
        }
    };
    Some(ScriptedReply {
        kind: ReplyKind::Content(blocks),
        after_ms: *pick(rng, &[0, 0, 20, 300]),
        usage: Usage::default(),
    })
}

/// A decision of seed 001's workflow for a workflow agent (or one of its children), drawn about
/// two times in three: `NO`, `NO_QUESTION`, `NONE`, subquestion lines, or a summary that needs
/// more information. The other replies stay as drawn: their text is read as a question, a main
/// execution's end or a summary, whichever step the agent is at.
fn workflow_reply(rng: &mut SimRng, agent: &str, i: usize) -> Option<ScriptedReply> {
    let text = match rng.below(12) {
        0..=2 => crate::agents::workflow::NO.to_owned(),
        3..=5 => crate::agents::workflow::NO_QUESTION.to_owned(),
        6 => crate::agents::workflow::NONE.to_owned(),
        7 => format!("{agent} sub {i}.1\n{agent} sub {i}.2"),
        8 => format!("{agent} summary {i}\nneeds_more_info: yes"),
        _ => return None,
    };
    Some(ScriptedReply {
        kind: ReplyKind::Content(vec![ScriptBlock::Text(text.into())]),
        after_ms: *pick(rng, &[0, 0, 20, 300]),
        usage: Usage::default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::write::to_yaml;

    #[test]
    fn the_same_seed_gives_the_same_scenario() {
        let cfg = GenConfig::default();
        for seed in 0..20 {
            assert_eq!(
                to_yaml(&generate(seed, &cfg)),
                to_yaml(&generate(seed, &cfg))
            );
        }
        assert_ne!(to_yaml(&generate(1, &cfg)), to_yaml(&generate(2, &cfg)));
    }

    #[test]
    fn generated_scenarios_are_valid_scenario_files() {
        let cfg = GenConfig::default();
        for seed in 0..50 {
            let yaml = to_yaml(&generate(seed, &cfg));
            crate::scenario::parse(&yaml, std::path::Path::new("g.yaml"))
                .unwrap_or_else(|e| panic!("seed {seed}: {e}\n{yaml}"));
        }
    }
}
