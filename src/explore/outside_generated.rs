//! Generated scenarios for a runtime under test (`agentsim explore --runtime CMD --generated`):
//! the in-process generator's scenarios ([`super::generate`]), kept to what protocol 1 can carry
//! and what the runtime's capabilities say it does ([`Expressible`]).
//!
//! What a generated scenario for an outside runtime is made of:
//! - the main agent and interactive skills and agents (none with `fork`, `workflow` or
//!   `async_questions`, which protocol 1 has no messages for); `parallel_tools`, `stream`,
//!   `passthrough` and `batch` only with their capabilities;
//! - replies that name only what the scenario defines: its tools, its agents (a spawn of an
//!   agent nobody defined, a tool nobody defined and a spawn with bad input become text replies),
//!   `complete`, and `ask_user` with the `ask-user` capability; streamed replies are whole;
//! - scripts written out in full: each agent gets [`SCRIPT_LEN`] replies, drawn as the generator
//!   draws them past a script's end, so that the scenario is a plain file that replays, shrinks
//!   and is written as it ran;
//! - tools with their outcomes (results, error results, failures), without `timeout` unless the
//!   runtime offers `tool-timeouts`; user messages in one conversation, cancel words only with
//!   `cancel-words`;
//! - no scripted latency (the model's replies and the tools answer at once; explore's faults add
//!   latency where a seed draws it), so that a run takes what the runtime takes.

use std::sync::Arc;

use crate::drive::scripted::{ReplyKind, ScriptBlock, ScriptedReply, ToolScript};
use crate::explore::generate::{self, GenConfig, Knobs};
use crate::model::agent::AgentKind;
use crate::runtime::QueryUser;
use crate::scenario::{Scenario, StepKind};

/// The text in place of a tool use of what the scenario does not define.
const LEFT_OUT: &str = "(a tool use left out: it names nothing this scenario defines)";

/// Replies written out per agent.
pub const SCRIPT_LEN: usize = 12;

/// What the runtime's capabilities let a generated scenario use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Expressible {
    /// `ask_user` replies and `query_user: none` (`ask-user`).
    pub ask_user: bool,
    /// Cancel words among the user's messages (`cancel-words`).
    pub cancel_words: bool,
    /// Agents with `parallel_tools` (`parallel-tools`).
    pub parallel_tools: bool,
    /// Agents with `stream` (`stream`).
    pub stream: bool,
    /// Passthrough skills (`passthrough`).
    pub passthrough: bool,
    /// Batch agents (`batch`).
    pub batch: bool,
    /// Tools with a `timeout` (`tool-timeouts`).
    pub tool_timeouts: bool,
}

impl Expressible {
    /// What `capabilities` (as `ready` offered them) let a scenario use.
    pub fn from_capabilities(capabilities: &[String]) -> Expressible {
        let has = |c: &str| capabilities.iter().any(|o| o == c);
        Expressible {
            ask_user: has("ask-user"),
            cancel_words: has("cancel-words"),
            parallel_tools: has("parallel-tools"),
            stream: has("stream"),
            passthrough: has("passthrough"),
            batch: has("batch"),
            tool_timeouts: has("tool-timeouts"),
        }
    }
}

/// The generator's configuration for outside runtimes: no agent tree, workflow or async
/// sessions; cancel words only when the runtime takes them.
fn config(can: Expressible) -> GenConfig {
    GenConfig {
        knobs: Knobs {
            tree: 0.0,
            workflow: 0.0,
            sessions: 0.0,
            cancel: if can.cancel_words { 0.15 } else { 0.0 },
            batch: if can.batch { 0.25 } else { 0.0 },
            ..Knobs::default()
        },
        ..GenConfig::default()
    }
}

/// The scenario of `seed` for a runtime that can express `can`. The same seed and capabilities
/// always give the same scenario.
pub fn generate(seed: u64, can: Expressible) -> Scenario {
    let mut s = generate::generate(seed, &config(can));
    s.name = format!("generated scenario {seed} for a runtime under test");
    // Every script written out: the replies past its end drawn as the generator draws them.
    let defs: Vec<(String, AgentKind)> = std::iter::once(&s.catalog.main)
        .chain(s.catalog.skills.values())
        .chain(s.catalog.agents.values())
        .map(|d| (d.name.clone(), d.kind))
        .collect();
    let agents: Vec<String> = defs.iter().map(|(n, _)| n.clone()).collect();
    if let Some(more) = s.more_replies.take() {
        for agent in &agents {
            let script = s.scripts.entry(agent.clone()).or_default();
            while script.len() < SCRIPT_LEN {
                match more.reply(agent, script.len() + 1) {
                    Some(r) => script.push(r),
                    None => break,
                }
            }
        }
    }
    // The scripts of forks and other names no agent has are dropped.
    s.scripts.retain(|agent, _| agents.contains(agent));
    let spawnable: Vec<(String, AgentKind)> = defs
        .into_iter()
        .filter(|(_, kind)| *kind != AgentKind::Main)
        .collect();
    let tools: Vec<String> = s.tools.keys().cloned().collect();
    for script in s.scripts.values_mut() {
        for reply in script.iter_mut() {
            expressible_reply(reply, can, &spawnable, &tools);
        }
    }
    for name in &agents {
        if let Some(def) = s.catalog.get_mut(name) {
            let def = Arc::make_mut(def);
            def.parallel_tools &= can.parallel_tools;
            def.stream &= can.stream;
            def.passthrough &= can.passthrough;
            if !can.batch {
                def.batch = None;
            }
            def.fork = false;
            def.workflow = None;
            def.async_questions = None;
        }
    }
    if !can.tool_timeouts {
        for spec in s.config.tools.values_mut() {
            spec.timeout_ms = None;
        }
    }
    for script in s.tools.values_mut() {
        if let ToolScript::Fixed(step) = script {
            step.after_ms = 0;
        }
    }
    if !can.ask_user {
        s.config.query_user = QueryUser::Interactive;
    }
    s.callback_replies.clear();
    s.steps
        .retain(|step| matches!(step.kind, StepKind::User { .. }));
    s
}

/// `reply` kept to what the scenario defines and the runtime can express, whole and at once.
fn expressible_reply(
    reply: &mut ScriptedReply,
    can: Expressible,
    spawnable: &[(String, AgentKind)],
    tools: &[String],
) {
    reply.after_ms = 0;
    let blocks = match &reply.kind {
        ReplyKind::Content(blocks) => blocks.clone(),
        ReplyKind::Stream(chunks) => {
            // Whole: the pieces joined, neighbouring texts into one.
            let mut blocks: Vec<ScriptBlock> = Vec::new();
            for chunk in chunks {
                match (&chunk.block, blocks.last_mut()) {
                    (ScriptBlock::Text(t), Some(ScriptBlock::Text(prev))) => {
                        *prev = Arc::from(format!("{prev}{t}"));
                    }
                    (block, _) => blocks.push(block.clone()),
                }
            }
            blocks
        }
        _ => return,
    };
    let kept: Vec<ScriptBlock> = blocks
        .into_iter()
        .map(|block| match &block {
            ScriptBlock::ToolUse { name, input, .. }
                if !defined(name, input, can, spawnable, tools) =>
            {
                ScriptBlock::Text(Arc::from(LEFT_OUT))
            }
            _ => block,
        })
        .collect();
    reply.kind = ReplyKind::Content(kept);
}

/// Whether a tool use names only what the scenario defines, with the input its built-in takes.
fn defined(
    name: &str,
    input: &serde_json::Value,
    can: Expressible,
    spawnable: &[(String, AgentKind)],
    tools: &[String],
) -> bool {
    let target = |field: &str, kind: AgentKind| {
        let named = input.get(field).and_then(serde_json::Value::as_str);
        let message = input.get("message").and_then(serde_json::Value::as_str);
        message.is_some()
            && named.is_some_and(|n| spawnable.iter().any(|(a, k)| a == n && *k == kind))
    };
    match name {
        "use_skill" => target("skill", AgentKind::Skill),
        "use_agent" => target("agent", AgentKind::Agent),
        "complete" => true,
        "ask_user" => can.ask_user,
        _ => tools.iter().any(|t| t == name),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::write::to_yaml;

    fn all() -> Expressible {
        Expressible {
            ask_user: true,
            cancel_words: true,
            parallel_tools: true,
            stream: false,
            passthrough: false,
            batch: false,
            tool_timeouts: false,
        }
    }

    #[test]
    fn the_same_seed_gives_the_same_plain_scenario_with_only_what_the_runtime_expresses() {
        for seed in 0..60 {
            let s = generate(seed, all());
            assert_eq!(to_yaml(&s), to_yaml(&generate(seed, all())));
            assert!(s.more_replies.is_none());
            assert!(
                crate::outside_run::needs::refusal(&s).is_none(),
                "seed {seed}"
            );
            let needs: Vec<&str> = crate::outside_run::needs::needs(&s)
                .iter()
                .map(|n| n.capability)
                .collect();
            for n in &needs {
                assert!(
                    ["ask-user", "cancel-words", "parallel-tools"].contains(n),
                    "seed {seed}: {n}"
                );
            }
            let yaml = to_yaml(&s);
            assert!(!yaml.contains("nope") && !yaml.contains("ghost"), "{yaml}");
            crate::scenario::parse(&yaml, std::path::Path::new("g.yaml"))
                .unwrap_or_else(|e| panic!("seed {seed}: {e}\n{yaml}"));
        }
        let none = Expressible::default();
        for seed in 0..60 {
            let s = generate(seed, none);
            assert!(
                crate::outside_run::needs::needs(&s).is_empty(),
                "seed {seed}"
            );
        }
    }
}
