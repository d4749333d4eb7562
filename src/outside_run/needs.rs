//! What a scenario asks of a runtime under test: the parts that no runtime can express through
//! protocol 1 ([`refusal`]), and the capabilities its keys need ([`needs`]), each located in the
//! file, so that a key that cannot be judged is a load error and never a silent pass.

use crate::drive::scripted::{ReplyKind, ScriptBlock};
use crate::model::agent::AgentDef;
use crate::scenario::format::ExpectSpec;
use crate::scenario::{Scenario, ScenarioError, StepKind};

/// A capability the scenario needs, and where and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Need {
    /// The capability, as `ready` names it (`stack`, `ask-user`, ...).
    pub capability: &'static str,
    /// What needs it (`` `ask_user` in the script of research ``).
    pub what: String,
    /// 1-based line in the file.
    pub line: u32,
    /// 1-based column.
    pub column: u32,
    /// Whether agentsim can read it from the model requests instead (a scenario of one
    /// conversation, or a runtime that names each request's conversation).
    pub inferable: bool,
}

/// The line and column of the first occurrence of `needle` in the file's text (1, 1 if the file
/// cannot be read or does not hold it).
fn locate(text: &str, needle: &str) -> (u32, u32) {
    for (i, line) in text.lines().enumerate() {
        if let Some(col) = line.find(needle) {
            let column = line[..col].chars().count() + 1;
            return (
                u32::try_from(i + 1).unwrap_or(u32::MAX),
                u32::try_from(column).unwrap_or(u32::MAX),
            );
        }
    }
    (1, 1)
}

/// Every agent of the scenario: main, then the skills and agents by name.
pub(super) fn agents(scenario: &Scenario) -> impl Iterator<Item = &AgentDef> {
    let c = &scenario.catalog;
    std::iter::once(&c.main)
        .chain(c.skills.values())
        .chain(c.agents.values())
        .map(|d| &**d)
}

fn file_text(scenario: &Scenario) -> String {
    std::fs::read_to_string(&scenario.path).unwrap_or_default()
}

/// The expectation keys that no runtime can be judged by from outside in protocol 1, with why.
const NOT_FROM_OUTSIDE: [(&str, &str); 10] = [
    ("time", "time is real for an outside runtime, not virtual"),
    ("tree", "the agent tree is agentsim's own runtime's"),
    ("agents", "the agent tree is agentsim's own runtime's"),
    ("agent_states", "the agent tree is agentsim's own runtime's"),
    (
        "interventions",
        "interventions are agentsim's own runtime's",
    ),
    ("questions", "async questions are agentsim's own runtime's"),
    ("answers", "async questions are agentsim's own runtime's"),
    ("sessions", "async sessions are agentsim's own runtime's"),
    ("pending", "async sessions are agentsim's own runtime's"),
    ("callbacks", "async sessions are agentsim's own runtime's"),
];

/// The keys an `expect` step gives.
fn keys(e: &ExpectSpec) -> Vec<&'static str> {
    let given = [
        ("sent", e.sent.is_some()),
        ("depth", e.depth.is_some()),
        ("top", e.top.is_some()),
        ("stack", e.stack.is_some()),
        ("tool_result", e.tool_result.is_some()),
        ("tool_results", e.tool_results.is_some()),
        ("iterations", e.iterations.is_some()),
        ("llm_calls", e.llm_calls.is_some()),
        ("response", e.response.is_some()),
        ("stream", e.stream.is_some()),
        ("idle", e.idle.is_some()),
        ("time", e.time.is_some()),
        ("usage", e.usage.is_some()),
        ("tree", e.tree.is_some()),
        ("agents", e.agents.is_some()),
        ("agent_states", e.agent_states.is_some()),
        ("interventions", e.interventions.is_some()),
        ("questions", e.questions.is_some()),
        ("answers", e.answers.is_some()),
        ("sessions", e.sessions.is_some()),
        ("pending", e.pending.is_some()),
        ("callbacks", e.callbacks.is_some()),
    ];
    given
        .into_iter()
        .filter_map(|(k, on)| on.then_some(k))
        .collect()
}

/// Why no runtime can run this scenario through protocol 1, located, or `None` if one can.
pub fn refusal(scenario: &Scenario) -> Option<ScenarioError> {
    let text = file_text(scenario);
    let at = |line: u32, column: u32, message: String| {
        Some(ScenarioError {
            path: scenario.path.clone(),
            line,
            column,
            message: format!("{message}; it cannot run against an outside runtime (--runtime)"),
        })
    };
    if scenario.config.planted.is_some() || scenario.config.interruptions.is_some() {
        let key = if scenario.config.planted.is_some() {
            "planted_bug"
        } else {
            "interruptions"
        };
        let (l, c) = locate(&text, key);
        return at(
            l,
            c,
            format!("`settings.{key}` configures agentsim's own runtime"),
        );
    }
    for def in agents(scenario) {
        let what = if def.fork {
            "fork"
        } else if def.workflow.is_some() {
            "workflow"
        } else if def.async_questions.is_some() {
            "async_questions"
        } else {
            continue;
        };
        let (l, c) = locate(&text, what);
        return at(
            l,
            c,
            format!(
                "agent `{}` uses `{what}`, which protocol 1 has no messages for",
                def.name
            ),
        );
    }
    for (agent, replies) in &scenario.scripts {
        for reply in replies {
            if let ReplyKind::Error { kind, message, .. } = &reply.kind {
                if **message == *kind.default_message() {
                    let (l, c) = locate(&text, "error");
                    return at(l, c, format!("a scripted `error` without a `message` in the script of `{agent}`: agentsim's own runtime reports the simulator's text ({:?}), a provider's API its own words, so what reaches the user differs; give the error a `message`", kind.default_message()));
                }
            }
            if matches!(reply.kind, ReplyKind::Stall) {
                let (l, c) = locate(&text, "stall");
                return at(l, c, format!("a stalled reply in the script of `{agent}` needs the runtime to time out its model call, which protocol 1 cannot ask of it"));
            }
        }
    }
    // Scripted time passed since a `wait: false` message, while its turn may still run.
    let mut since_no_wait: Option<u64> = None;
    for (i, step) in scenario.steps.iter().enumerate() {
        match &step.kind {
            StepKind::User { wait: false, .. } => since_no_wait = Some(0),
            StepKind::User { wait: true, .. } | StepKind::Restart => since_no_wait = None,
            StepKind::Advance(ms) => {
                since_no_wait = since_no_wait.map(|t| t.saturating_add(*ms));
            }
            StepKind::Expect(_) if since_no_wait == Some(0) => {
                return at(
                    step.line,
                    step.column,
                    format!("step {}: this `expect` is judged at the very instant a `wait: false` message is delivered (no scripted time passes in between), which real time cannot place: the runtime's own work takes time", i + 1),
                );
            }
            _ => {}
        }
        let name = match &step.kind {
            StepKind::Run(_) => "run",
            StepKind::Answer { .. } => "answer",
            StepKind::Trigger { .. } => "trigger",
            StepKind::AsyncAnswer { .. } => "async_answer",
            StepKind::Intervene { .. } => "intervene",
            StepKind::Expect(e) => {
                if let Some((key, why)) = keys(e)
                    .into_iter()
                    .find_map(|k| NOT_FROM_OUTSIDE.iter().find(|(n, _)| *n == k))
                {
                    return at(
                        step.line,
                        step.column,
                        format!(
                            "step {}: `expect.{key}` cannot be judged from outside ({why})",
                            i + 1
                        ),
                    );
                }
                continue;
            }
            _ => continue,
        };
        return at(
            step.line,
            step.column,
            format!(
                "step {}: the `{name}` step is agentsim's own runtime's",
                i + 1
            ),
        );
    }
    None
}

/// The capabilities the scenario needs, each with the first place that needs it, in the order
/// they appear (one entry per capability).
pub fn needs(scenario: &Scenario) -> Vec<Need> {
    let text = file_text(scenario);
    let mut out: Vec<Need> = Vec::new();
    let mut need_as =
        |capability: &'static str, inferable: bool, what: String, (line, column): (u32, u32)| {
            // One entry per capability: the first place that cannot do without it, else the first.
            match out.iter_mut().find(|n| n.capability == capability) {
                Some(n) if n.inferable && !inferable => {
                    *n = Need {
                        capability,
                        what,
                        line,
                        column,
                        inferable,
                    };
                }
                Some(_) => {}
                None => out.push(Need {
                    capability,
                    what,
                    line,
                    column,
                    inferable,
                }),
            }
        };
    for def in agents(scenario) {
        if def.parallel_tools {
            need_as(
                "parallel-tools",
                false,
                format!("agent `{}` with `parallel_tools: true`", def.name),
                locate(&text, "parallel_tools"),
            );
        }
        if def.stream {
            need_as(
                "stream",
                false,
                format!("agent `{}` with `stream: true`", def.name),
                locate(&text, "stream"),
            );
        }
        if def.passthrough {
            need_as(
                "passthrough",
                false,
                format!("the passthrough skill `{}`", def.name),
                locate(&text, "passthrough"),
            );
        }
        if def.batch.is_some() {
            need_as(
                "batch",
                false,
                format!("agent `{}` with a `batch` policy", def.name),
                locate(&text, "batch"),
            );
        }
    }
    for (agent, replies) in &scenario.scripts {
        let asks = replies.iter().any(|r| match &r.kind {
            ReplyKind::Content(blocks) => blocks
                .iter()
                .any(|b| matches!(b, ScriptBlock::ToolUse { name, .. } if &**name == "ask_user")),
            ReplyKind::Stream(chunks) => chunks.iter().any(
                |c| matches!(&c.block, ScriptBlock::ToolUse { name, .. } if &**name == "ask_user"),
            ),
            _ => false,
        });
        if asks {
            need_as(
                "ask-user",
                false,
                format!("`ask_user` in the script of `{agent}`"),
                locate(&text, "ask_user"),
            );
        }
    }
    for (tool, spec) in &scenario.config.tools {
        if spec.timeout_ms.is_some() {
            need_as(
                "tool-timeouts",
                false,
                format!("the `timeout` of tool `{tool}`"),
                locate(&text, "timeout"),
            );
        }
    }
    for (i, step) in scenario.steps.iter().enumerate() {
        let at = (step.line, step.column);
        match &step.kind {
            StepKind::Restart => {
                need_as("restart", false, format!("step {}: `restart`", i + 1), at)
            }
            StepKind::User { text, .. } if scenario.config.is_cancel_word(text) => need_as(
                "cancel-words",
                false,
                format!("step {}: the cancel word {text:?}", i + 1),
                at,
            ),
            StepKind::Expect(e) => {
                for key in keys(e) {
                    // `tool_results` lists every result, also those appended to a frame that
                    // then ends: no model request carries them, so only the runtime can tell.
                    let (capability, inferable) = match key {
                        "depth" | "top" | "stack" | "iterations" => ("stack", true),
                        "tool_result" => ("tool-results", true),
                        "tool_results" => ("tool-results", false),
                        "stream" => ("stream", false),
                        "response" => ("response", true),
                        // The runtime's own sum: the model requests do not show which replies
                        // it counted.
                        "usage" => ("usage", false),
                        _ => continue,
                    };
                    need_as(
                        capability,
                        inferable,
                        format!("step {}: `expect.{key}`", i + 1),
                        at,
                    );
                }
            }
            _ => {}
        }
    }
    out
}

/// The first need that `capabilities` (what `ready` offered) does not meet, as a located error
/// naming the capability and the command. With `inferable` (one conversation, or the capability
/// `conversation-header`), the stack, the tool results and the main turns are read from the model
/// requests and need no capability.
pub fn unmet(
    scenario: &Scenario,
    needs: &[Need],
    capabilities: &[String],
    command: &str,
    inferable: bool,
) -> Option<ScenarioError> {
    let n = needs
        .iter()
        .find(|n| !(capabilities.iter().any(|c| c == n.capability) || inferable && n.inferable))?;
    let inferred = if n.inferable {
        " (agentsim reads it from the model requests of a scenario of several conversations only when the runtime names each request's conversation with the header `x-agentsim-conversation` and offers the capability `conversation-header`)"
    } else if n.capability == "tool-results" {
        " (`tool_results` lists results appended to frames that then end, which no model request carries)"
    } else {
        ""
    };
    Some(ScenarioError {
        path: scenario.path.clone(),
        line: n.line,
        column: n.column,
        message: format!(
            "{} needs the runtime capability `{}`, which `{command}` did not offer in `ready`{inferred}",
            n.what, n.capability
        ),
    })
}
