//! Scripted tools: a fixed outcome, or one outcome per call, each with a latency.

use std::collections::BTreeMap;

use crate::drive::backend::{BackendError, ToolBehavior, ToolStep, Tools};
use crate::drive::Note;
use crate::protocol::ToolRun;

/// A tool's script.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToolScript {
    /// Every call behaves the same.
    Fixed(ToolStep),
    /// Call n behaves like entry n.
    PerCall(Vec<ToolStep>),
}

/// A tool's per-call script ran out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolExhausted {
    /// The tool.
    pub tool: String,
    /// 1-based call number.
    pub call: usize,
}

/// Every scripted tool.
#[derive(Clone, Debug, Default)]
pub struct MockTools {
    /// Each tool's script (`None`: not scripted, it echoes its input) and its calls so far.
    tools: BTreeMap<String, (Option<ToolScript>, usize)>,
}

impl MockTools {
    /// Scripts by tool name (`skill:<name>` for a passthrough skill).
    pub fn new(scripts: BTreeMap<String, ToolScript>) -> MockTools {
        MockTools {
            tools: scripts
                .into_iter()
                .map(|(name, script)| (name, (Some(script), 0)))
                .collect(),
        }
    }

    /// The next step of `tool` (one map lookup). A tool without a script echoes its input, so
    /// that a scenario only scripts the tools whose results matter.
    pub fn next(
        &mut self,
        tool: &str,
        input: &serde_json::Value,
    ) -> Result<ToolStep, ToolExhausted> {
        let (script, calls) = match self.tools.get_mut(tool) {
            Some(entry) => entry,
            None => self.tools.entry(tool.to_owned()).or_default(),
        };
        *calls += 1;
        let call = *calls;
        match script {
            None => Ok(ToolStep {
                behavior: ToolBehavior::Result {
                    content: input.to_string().into(),
                    is_error: false,
                },
                after_ms: 0,
            }),
            Some(ToolScript::Fixed(step)) => Ok(step.clone()),
            Some(ToolScript::PerCall(steps)) => steps.get(call - 1).cloned().ok_or(ToolExhausted {
                tool: tool.to_owned(),
                call,
            }),
        }
    }

    /// Per-call outcomes left unused, by tool (a fixed outcome serves any number of calls).
    pub fn unused(&self) -> BTreeMap<&str, usize> {
        self.tools
            .iter()
            .filter_map(|(name, (script, calls))| match script {
                Some(ToolScript::PerCall(steps)) if steps.len() > *calls => {
                    Some((name.as_str(), steps.len() - calls))
                }
                _ => None,
            })
            .collect()
    }

    /// Calls made so far to each tool that was called, as JSON (`{tool: n}`): what a service
    /// persists so that a restart goes on where the scripts were ([`MockTools::resume`]).
    pub fn position(&self) -> serde_json::Value {
        let calls: BTreeMap<&str, usize> = self
            .tools
            .iter()
            .filter(|(_, (_, calls))| *calls > 0)
            .map(|(name, (_, calls))| (name.as_str(), *calls))
            .collect();
        serde_json::json!(calls)
    }

    /// Goes on from a [`MockTools::position`]; an error saying what is wrong otherwise.
    pub fn resume(&mut self, position: &serde_json::Value) -> Result<(), String> {
        let calls = position.as_object().ok_or("not an object of counts")?;
        for (tool, n) in calls {
            let n = n
                .as_u64()
                .ok_or_else(|| format!("calls of {tool:?} is not a count"))?;
            self.tools.entry(tool.clone()).or_default().1 = n as usize;
        }
        Ok(())
    }

    /// Calls made so far to `tool`.
    pub fn calls(&self, tool: &str) -> usize {
        self.tools.get(tool).map_or(0, |(_, calls)| *calls)
    }
}

impl Tools for MockTools {
    fn run(&mut self, run: &ToolRun<'_>, _notes: &mut Vec<Note>) -> Result<ToolStep, BackendError> {
        self.next(run.name, run.input)
            .map_err(|e| BackendError::ToolScriptExhausted {
                tool: e.tool,
                call: e.call,
            })
    }
}
