//! The `hello` line of a run: the scenario's agents, tools and settings as protocol 1 describes
//! them (section 3 of the runtime protocol).

use serde_json::json;

use crate::model::agent::{AgentKind as Kind, EmptyAnswer};
use crate::outside::codec::{
    AgentKind, BatchPolicy, HelloAgent, HelloSettings, HelloTool, QueryUser,
};
use crate::outside::{Hello, PROTOCOL_VERSION};
use crate::runtime::QueryUser as ConfigQueryUser;
use crate::scenario::Scenario;

use super::needs::agents;

/// What changes between the `hello`s of one run.
pub(super) struct HelloFor<'a> {
    pub seed: u64,
    pub state_dir: &'a str,
    pub restarts: u64,
    pub awaiting_idle: Option<u64>,
    pub time_scale: f64,
}

/// A seed brought into the protocol's integer range (2^53 − 1): seeds above it are folded, so
/// that every 64-bit seed gives a valid and stable `hello.seed`.
pub(super) fn protocol_seed(seed: u64) -> u64 {
    let max = crate::outside::codec::MAX_INTEGER;
    if seed <= max {
        seed
    } else {
        seed % (max + 1)
    }
}

/// The `hello` of a run of `scenario`.
pub(super) fn hello(scenario: &Scenario, run: &HelloFor<'_>) -> Hello {
    let all_tools: Vec<String> = scenario.config.tools.keys().cloned().collect();
    let mut defs: Vec<_> = agents(scenario).collect();
    // `main` first, then by name (skills and agents together).
    defs[1..].sort_by(|a, b| a.name.cmp(&b.name));
    let agents = defs
        .into_iter()
        .map(|def| HelloAgent {
            name: def.name.clone(),
            kind: match def.kind {
                Kind::Main => AgentKind::Main,
                Kind::Skill => AgentKind::Skill,
                Kind::Agent => AgentKind::Agent,
            },
            frame: def.frame_name.to_string(),
            system: def.system_prompt.to_string(),
            model: def.model.clone().unwrap_or_else(|| def.name.clone()),
            max_iterations: u64::from(def.max_iterations),
            tools: def.tools.clone().unwrap_or_else(|| all_tools.clone()),
            parallel_tools: def.parallel_tools,
            stream: def.stream,
            passthrough: def.passthrough,
            batch: def.batch.map(|b| match b {
                EmptyAnswer::AcceptEmpty => BatchPolicy::AcceptEmpty,
                EmptyAnswer::ExtractFromConversation => BatchPolicy::ExtractFromConversation,
                EmptyAnswer::AskForSummary => BatchPolicy::AskForSummary,
            }),
            description: (!def.description.is_empty()).then(|| def.description.clone()),
        })
        .collect();
    let tools = scenario
        .config
        .tools
        .iter()
        .map(|(name, spec)| HelloTool {
            name: name.clone(),
            description: String::new(),
            input_schema: json!({"type": "object"}),
            timeout_ms: spec.timeout_ms,
        })
        .collect();
    let mut name: String = scenario.name.chars().take(60).collect();
    name.push_str(&format!("#{}", run.seed));
    Hello {
        protocol: PROTOCOL_VERSION,
        run: name,
        seed: protocol_seed(run.seed),
        state_dir: run.state_dir.to_owned(),
        restarts: run.restarts,
        awaiting_idle: run.awaiting_idle,
        time_scale: run.time_scale,
        agents,
        tools,
        settings: HelloSettings {
            cancel_words: scenario.config.cancel_words.clone(),
            query_user: match scenario.config.query_user {
                ConfigQueryUser::Interactive => QueryUser::Interactive,
                ConfigQueryUser::None => QueryUser::None,
            },
            max_depth: u64::try_from(scenario.limits.max_depth).unwrap_or(u64::MAX),
        },
    }
}
