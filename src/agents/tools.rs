//! Tools: the outcome type, the in-process [`Tool`] trait and the built-in delegation tools.
//!
//! **Spawning a child is a value, not an exception.** Seed 000 raises `ChildActivated`, a
//! `BaseException`, so that no `except Exception` in a tool wrapper can swallow it. Here a tool
//! returns `Ok(ToolOutcome::Spawn(..))`: a wrapper that maps every *error* only ever sees the `Err`
//! side, so a spawn passes through it untouched (see the `catch_all_wrapper_cannot_swallow_a_spawn`
//! test).
//!
//! External tools (the scenario's mock tools, or real ones under another driver) are not called
//! here: the runtime emits [`crate::protocol::Effect::RunTool`] and is fed the [`ToolOutput`].

use std::sync::Arc;

use serde_json::Value;

use crate::model::agent::{AgentDef, AgentKind, Catalog};
use crate::model::messages;

/// Names of the built-in tools.
pub(crate) mod builtin {
    /// Pops the calling subagent and returns its result to the parent.
    pub(crate) const COMPLETE: &str = "complete";
    /// Pushes a skill frame.
    pub(crate) const USE_SKILL: &str = "use_skill";
    /// Pushes an agent frame.
    pub(crate) const USE_AGENT: &str = "use_agent";
    /// Parks the frame and asks the user a question (DESIGN §3 item 8).
    pub(crate) const ASK_USER: &str = "ask_user";
    /// Starts a fork of the calling agent (seed 001; agents declared `fork: true`).
    pub(crate) const FORK: &str = "fork";
    /// Waits for a fork to end (seed 001; agents declared `fork: true`).
    pub(crate) const WAIT: &str = "wait";

    /// Whether `name` is a built-in.
    pub(crate) fn is_builtin(name: &str) -> bool {
        matches!(
            name,
            COMPLETE | USE_SKILL | USE_AGENT | ASK_USER | FORK | WAIT
        )
    }
}

/// The result text of a tool call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolOutput {
    /// Result text.
    pub content: Arc<str>,
    /// Whether the tool failed.
    pub is_error: bool,
}

impl ToolOutput {
    /// A successful result.
    pub fn ok(content: impl Into<Arc<str>>) -> ToolOutput {
        ToolOutput {
            content: content.into(),
            is_error: false,
        }
    }

    /// An error result.
    pub fn error(content: impl Into<Arc<str>>) -> ToolOutput {
        ToolOutput {
            content: content.into(),
            is_error: true,
        }
    }
}

/// A request to push a child frame; the runtime builds the frame (ids, session, prompt).
#[derive(Clone, Debug, PartialEq)]
pub struct SpawnRequest {
    /// The child's definition.
    pub agent: Arc<AgentDef>,
    /// The child's initial user message.
    pub message: Arc<str>,
}

/// What a tool call produced: a result, or a child to push.
#[derive(Clone, Debug, PartialEq)]
pub enum ToolOutcome {
    /// A `tool_result` for the caller's session.
    Output(ToolOutput),
    /// An interactive child takes over the conversation (seed 000's `ChildActivated`).
    Spawn(SpawnRequest),
}

/// A tool failed; the runtime turns it into `Tool execution failed: <message>`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ToolError(pub String);

/// What an in-process tool may look at.
#[derive(Clone, Copy, Debug)]
pub struct ToolContext<'a> {
    /// Declared skills and agents.
    pub catalog: &'a Catalog,
    /// The agent whose reply holds the `tool_use`.
    pub caller: &'a AgentDef,
    /// The `tool_use` id.
    pub tool_use_id: &'a str,
}

/// An in-process tool.
pub trait Tool {
    /// The name the model calls it by.
    fn name(&self) -> &str;
    /// Runs the tool.
    fn call(&self, input: &Value, ctx: &ToolContext<'_>) -> Result<ToolOutcome, ToolError>;
}

/// Reads a required string field; DESIGN §3 item 13's message when it is missing or not a string.
fn required<'v>(input: &'v Value, field: &str) -> Result<&'v str, ToolOutput> {
    match input.get(field).and_then(Value::as_str) {
        Some(s) => Ok(s),
        None => Err(ToolOutput::error(messages::missing_field(field))),
    }
}

/// `use_skill(skill, message)`: pushes a skill frame.
#[derive(Clone, Copy, Debug, Default)]
pub struct UseSkill;

impl Tool for UseSkill {
    fn name(&self) -> &str {
        builtin::USE_SKILL
    }

    fn call(&self, input: &Value, ctx: &ToolContext<'_>) -> Result<ToolOutcome, ToolError> {
        if ctx.caller.kind == AgentKind::Skill {
            return Ok(ToolOutcome::Output(ToolOutput::error(
                messages::SKILL_CANNOT_USE_SKILL,
            )));
        }
        spawn(input, "skill", "Skill", &ctx.catalog.skills, ctx)
    }
}

/// `use_agent(agent, message)`: pushes an agent frame.
#[derive(Clone, Copy, Debug, Default)]
pub struct UseAgent;

impl Tool for UseAgent {
    fn name(&self) -> &str {
        builtin::USE_AGENT
    }

    fn call(&self, input: &Value, ctx: &ToolContext<'_>) -> Result<ToolOutcome, ToolError> {
        spawn(input, "agent", "Agent", &ctx.catalog.agents, ctx)
    }
}

fn spawn(
    input: &Value,
    field: &str,
    label: &str,
    defs: &std::collections::BTreeMap<String, Arc<AgentDef>>,
    ctx: &ToolContext<'_>,
) -> Result<ToolOutcome, ToolError> {
    let checked = required(input, field).and_then(|name| {
        let message = required(input, "message")?;
        Ok((name, message))
    });
    let (name, message) = match checked {
        Ok(pair) => pair,
        Err(out) => return Ok(ToolOutcome::Output(out)),
    };
    let Some(def) = defs.get(name) else {
        let text = messages::not_found_available(label, name, defs.keys().map(String::as_str));
        return Ok(ToolOutcome::Output(ToolOutput::error(text)));
    };
    if def.kind == ctx.caller.kind && def.name == ctx.caller.name {
        return Ok(ToolOutcome::Output(ToolOutput::error(
            messages::cannot_invoke_itself(name),
        )));
    }
    Ok(ToolOutcome::Spawn(SpawnRequest {
        agent: def.clone(),
        message: message.into(),
    }))
}

/// A wrapper that turns every error of the inner tool into an error result, the Rust counterpart
/// of the seed's `ToolExecutor` with its generic `except Exception` handler.
/// Only the test below uses it: it shows that such a wrapper cannot swallow a spawn.
#[cfg(test)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct CatchAll<T>(pub T);

#[cfg(test)]
impl<T: Tool> Tool for CatchAll<T> {
    fn name(&self) -> &str {
        self.0.name()
    }

    fn call(&self, input: &Value, ctx: &ToolContext<'_>) -> Result<ToolOutcome, ToolError> {
        match self.0.call(input, ctx) {
            Ok(outcome) => Ok(outcome),
            Err(e) => Ok(ToolOutcome::Output(ToolOutput::error(
                messages::tool_failed(&e.0),
            ))),
        }
    }
}

/// The text of `complete`'s `result` input: a string as is, other JSON as JSON, absent as "".
pub(crate) fn complete_result(input: &Value) -> Arc<str> {
    match input.get("result") {
        None | Some(Value::Null) => "".into(),
        Some(Value::String(s)) => s.as_str().into(),
        Some(other) => other.to_string().into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn catalog() -> Catalog {
        let mut c = Catalog::default();
        c.add(AgentDef::new("research", AgentKind::Skill));
        c.add(AgentDef::new("writer", AgentKind::Skill));
        c.add(AgentDef::new("explore", AgentKind::Agent));
        c
    }

    /// A tool that always fails, to show what `CatchAll` does with errors.
    struct Broken;
    impl Tool for Broken {
        fn name(&self) -> &str {
            "broken"
        }
        fn call(&self, _: &Value, _: &ToolContext<'_>) -> Result<ToolOutcome, ToolError> {
            Err(ToolError("disk full".into()))
        }
    }

    #[test]
    fn catch_all_wrapper_cannot_swallow_a_spawn() {
        let c = catalog();
        let ctx = ToolContext {
            catalog: &c,
            caller: &c.main,
            tool_use_id: "toolu_01",
        };
        // The wrapper maps every error...
        let out = CatchAll(Broken).call(&json!({}), &ctx).unwrap();
        assert_eq!(
            out,
            ToolOutcome::Output(ToolOutput::error("Tool execution failed: disk full"))
        );
        // ...and still a spawn passes through it, because a spawn is not an error.
        let input = json!({"skill": "research", "message": "find APIs"});
        match CatchAll(UseSkill).call(&input, &ctx).unwrap() {
            ToolOutcome::Spawn(req) => {
                assert_eq!(&*req.agent.frame_name, "skill:research");
                assert_eq!(&*req.message, "find APIs");
            }
            other => panic!("the spawn was swallowed: {other:?}"),
        }
        // Nested wrappers do not change that.
        let twice = CatchAll(CatchAll(UseAgent));
        let input = json!({"agent": "explore", "message": "go"});
        assert!(matches!(
            twice.call(&input, &ctx).unwrap(),
            ToolOutcome::Spawn(_)
        ));
    }

    fn output(tool: &dyn Tool, caller: &AgentDef, input: Value) -> ToolOutput {
        let c = catalog();
        let ctx = ToolContext {
            catalog: &c,
            caller,
            tool_use_id: "t",
        };
        match tool.call(&input, &ctx).unwrap() {
            ToolOutcome::Output(o) => o,
            ToolOutcome::Spawn(s) => panic!("unexpected spawn of {}", s.agent.frame_name),
        }
    }

    #[test]
    fn spawn_validation_errors_have_the_exact_strings() {
        let main = AgentDef::new("main", AgentKind::Main);
        let o = output(&UseSkill, &main, json!({"message": "m"}));
        assert_eq!(&*o.content, "Missing required field: skill");
        let o = output(&UseSkill, &main, json!({"skill": "research"}));
        assert_eq!(&*o.content, "Missing required field: message");
        let o = output(&UseAgent, &main, json!({"message": "m"}));
        assert_eq!(&*o.content, "Missing required field: agent");
        let o = output(&UseSkill, &main, json!({"skill": "nope", "message": "m"}));
        assert_eq!(
            &*o.content,
            "Skill 'nope' not found. Available: research, writer"
        );
        let o = output(&UseAgent, &main, json!({"agent": "nope", "message": "m"}));
        assert_eq!(&*o.content, "Agent 'nope' not found. Available: explore");
        assert!(o.is_error);
    }

    #[test]
    fn skills_cannot_use_skill_and_agents_cannot_invoke_themselves() {
        let skill = AgentDef::new("research", AgentKind::Skill);
        let o = output(
            &UseSkill,
            &skill,
            json!({"skill": "writer", "message": "m"}),
        );
        assert_eq!(&*o.content, "Skills cannot call use_skill");
        let agent = AgentDef::new("explore", AgentKind::Agent);
        let o = output(
            &UseAgent,
            &agent,
            json!({"agent": "explore", "message": "m"}),
        );
        assert_eq!(&*o.content, "Agent 'explore' cannot invoke itself");
    }

    #[test]
    fn complete_result_accepts_strings_json_and_nothing() {
        assert_eq!(&*complete_result(&json!({"result": "done"})), "done");
        assert_eq!(&*complete_result(&json!({"result": {"n": 1}})), "{\"n\":1}");
        assert_eq!(&*complete_result(&json!({})), "");
    }
}
