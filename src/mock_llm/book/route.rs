//! The first step of addressing: which agent a request is for, by the `x-agentsim-agent` header
//! when the request carries it (before any rule), otherwise by the agent's `match:` rule or, by
//! default, its model name or system prompt; exactly one must match.

use std::fmt;

use super::{clip, Book, MatchRule, Miss};
use crate::wire::Request;

/// Whether `rule` holds for `request` with these HTTP headers.
fn holds(rule: &MatchRule, request: &Request, first: &str, headers: &[(&str, &str)]) -> bool {
    {
        if let Some(text) = &rule.first_user_contains {
            if !first.contains(text.as_str()) {
                return false;
            }
        }
        if let Some(text) = &rule.system_contains {
            if !request
                .system
                .as_deref()
                .unwrap_or("")
                .contains(text.as_str())
            {
                return false;
            }
        }
        if let Some(model) = &rule.model {
            if request.model.as_deref() != Some(model.as_str()) {
                return false;
            }
        }
        for (name, value) in &rule.headers {
            if !headers
                .iter()
                .any(|(n, v)| n.eq_ignore_ascii_case(name) && v == value)
            {
                return false;
            }
        }
        if let Some(tools) = &rule.tools {
            let mut want: Vec<&str> = tools.iter().map(String::as_str).collect();
            let mut got: Vec<&str> = request.tools.iter().map(String::as_str).collect();
            want.sort_unstable();
            got.sort_unstable();
            if want != got {
                return false;
            }
        }
        true
    }
}

/// How an agent is recognised.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Route {
    /// The scenario's `match:` conditions.
    Rule(MatchRule),
    /// The default: the model name, or the system prompt.
    Default {
        /// The model name that selects the agent (its `model`, or its name).
        model: String,
        /// The system prompt that selects it.
        system: String,
    },
}

impl Route {
    fn is_default(&self) -> bool {
        matches!(self, Route::Default { .. })
    }

    /// Whether this route holds for `request`, whose first user message is `first`, sent with
    /// these HTTP `headers` (the `x-agentsim-agent` header aside, which routes before any route).
    pub fn holds(&self, request: &Request, first: &str, headers: &[(&str, &str)]) -> bool {
        match self {
            Route::Rule(rule) => holds(rule, request, first, headers),
            Route::Default { model, system } => {
                request.model.as_deref() == Some(model.as_str())
                    || request.system.as_deref() == Some(system.as_str())
            }
        }
    }
}

impl fmt::Display for Route {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Route::Rule(rule) => rule.fmt(f),
            Route::Default { model, system } => {
                write!(f, "model {model:?} or system prompt {:?}", clip(system, 60))
            }
        }
    }
}

/// The header that names the agent a request is for; it routes before `match:` rules and the
/// default routing.
pub const AGENT_HEADER: &str = "x-agentsim-agent";

impl Book {
    pub(super) fn route(
        &self,
        request: &Request,
        first: &str,
        headers: &[(&str, &str)],
    ) -> Result<usize, Miss> {
        if let Some((_, name)) = headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(AGENT_HEADER))
        {
            return match self.agents.iter().position(|a| a.name == *name) {
                Some(i) => Ok(i),
                None => {
                    let names = self
                        .agents
                        .iter()
                        .map(|a| format!("`{}`", a.name))
                        .collect::<Vec<_>>()
                        .join(", ");
                    Err(Miss {
                        violation: None,
                        message: format!(
                            "the request's header `{AGENT_HEADER}: {}` names no agent with a script in the scenario; agents: {}",
                            clip(name, 60),
                            if names.is_empty() { "none" } else { &names }
                        ),
                        address: None,
                    })
                }
            };
        }
        let mut matching: Vec<usize> = (0..self.agents.len())
            .filter(|&i| self.agents[i].route.holds(request, first, headers))
            .collect();
        if matching.len() > 1 {
            // By default rules, the model name is the more specific key: a fork sends its script
            // name (`main#1`) as its model and keeps its caller's system prompt.
            let by_model: Vec<usize> = matching
                .iter()
                .copied()
                .filter(|&i| match &self.agents[i].route {
                    Route::Default { model, .. } => request.model.as_deref() == Some(model),
                    Route::Rule(_) => false,
                })
                .collect();
            if by_model.len() == 1 && matching.iter().all(|&i| self.agents[i].route.is_default()) {
                matching = by_model;
            }
        }
        match matching[..] {
            [one] => Ok(one),
            _ => {
                let rules = self
                    .agents
                    .iter()
                    .map(|a| format!("`{}` ({})", a.name, a.route))
                    .collect::<Vec<_>>()
                    .join("; ");
                let what = format!(
                    "model {:?}, system prompt {:?}, tools [{}]",
                    request.model.as_deref().unwrap_or(""),
                    clip(request.system.as_deref().unwrap_or(""), 60),
                    request.tools.join(", ")
                );
                let message = if matching.is_empty() {
                    format!(
                        "no agent of the scenario matches the request ({what}); agents: {rules}"
                    )
                } else {
                    let names = matching
                        .iter()
                        .map(|&i| format!("`{}`", self.agents[i].name))
                        .collect::<Vec<_>>()
                        .join(", ");
                    format!("the request ({what}) matches several agents: {names}; give them `match:` rules that tell them apart; agents: {rules}")
                };
                Err(Miss {
                    violation: None,
                    message,
                    address: None,
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn match_rules_read_headers_tools_and_model() {
        let rule = MatchRule {
            model: Some("m".into()),
            headers: [("x-agent".to_owned(), "planner".to_owned())].into(),
            tools: Some(vec!["b".into(), "a".into()]),
            ..MatchRule::default()
        };
        let req = crate::wire::anthropic::validate(&json!({
            "model": "m", "max_tokens": 1,
            "tools": [{"name": "a", "input_schema": {}}, {"name": "b", "input_schema": {}}],
            "messages": [{"role": "user", "content": "hi"}]
        }))
        .unwrap();
        let h = vec![("X-Agent", "planner")];
        assert!(holds(&rule, &req, "hi", &h));
        assert!(!holds(&rule, &req, "hi", &[]));
        let other = vec![("x-agent", "coder")];
        assert!(!holds(&rule, &req, "hi", &other));
        let rule = MatchRule {
            first_user_contains: Some("Rome".into()),
            ..rule
        };
        assert!(holds(&rule, &req, "Look up Rome", &h));
        assert!(!holds(&rule, &req, "Look up Paris", &h));
    }
}
