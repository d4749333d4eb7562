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
        let offers = |name: &String| request.tools.iter().any(|t| t == name);
        if !rule.tools_include.iter().all(offers) {
            return false;
        }
        if let Some(name) = &rule.tool {
            if !offers(name) {
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

/// The header that names the runtime protocol's conversation a request is for
/// (docs/runtime-protocol.md, section 7). It does not route: the server journals it, and
/// `run --runtime` reads each conversation's stack from the requests that name it.
pub const CONVERSATION_HEADER: &str = "x-agentsim-conversation";

impl Book {
    /// The agent `request` would be routed to, if one: for a request refused before it is
    /// routed (a broken wire rule), so that the report can say whose it was.
    pub fn agent_of(&self, request: &Request, headers: &[(&str, &str)]) -> Option<String> {
        let first = super::first_user_text(request);
        let i = self.route(request, &first, headers).ok()?;
        Some(self.agents[i].name.clone())
    }

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
        let matching = self.matching(request, first, headers, None);
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
                let mut message = if matching.is_empty() {
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
                message.push_str(&self.suggestions(request, first, headers));
                Err(Miss {
                    violation: None,
                    message,
                    address: None,
                })
            }
        }
    }
}

impl Book {
    /// The agents whose route holds for the request, with `replaced`'s route in place of that
    /// agent's own; among agents matched by default, the one named by the model wins.
    fn matching(
        &self,
        request: &Request,
        first: &str,
        headers: &[(&str, &str)],
        replaced: Option<(usize, &Route)>,
    ) -> Vec<usize> {
        let route = |i: usize| match replaced {
            Some((r, route)) if r == i => route,
            _ => &self.agents[i].route,
        };
        let mut matching: Vec<usize> = (0..self.agents.len())
            .filter(|&i| route(i).holds(request, first, headers))
            .collect();
        if matching.len() > 1 {
            // By default rules, the model name is the more specific key: a fork sends its script
            // name (`main#1`) as its model and keeps its caller's system prompt.
            let by_model: Vec<usize> = matching
                .iter()
                .copied()
                .filter(|&i| match route(i) {
                    Route::Default { model, .. } => request.model.as_deref() == Some(model),
                    Route::Rule(_) => false,
                })
                .collect();
            if by_model.len() == 1 && matching.iter().all(|&i| route(i).is_default()) {
                matching = by_model;
            }
        }
        matching
    }

    /// For each agent (forks aside), the smallest `match:` rule that would have routed this
    /// request to it, as YAML to paste under the agent; or why no rule of its own can.
    fn suggestions(&self, request: &Request, first: &str, headers: &[(&str, &str)]) -> String {
        let mut lines = Vec::new();
        for (i, agent) in self.agents.iter().enumerate() {
            if agent.name.contains('#') {
                continue;
            }
            // A hint of whose request it is: a tool the agent's script calls, offered.
            let called = called(self, i);
            let hint = request
                .tools
                .iter()
                .find(|t| called.contains(&t.as_str()))
                .map(|t| format!("   # its script calls `{t}`, which the request offers"))
                .unwrap_or_default();
            let line = match suggest(self, i, request, first, headers) {
                Ok(rule) => format!("`{}`: match: {}{hint}", agent.name, yaml(&rule)),
                Err(others) => format!(
                    "`{}`: no rule of its own routes it there while {} match{} it too",
                    agent.name,
                    others.join(", "),
                    if others.len() == 1 { "es" } else { "" }
                ),
            };
            lines.push(line);
        }
        if lines.is_empty() {
            return String::new();
        }
        format!(
            "; the smallest `match:` rule that routes this request to each agent (paste it under the agent it is for):\n    {}",
            lines.join("\n    ")
        )
    }
}

/// The names of the tools agent `i`'s script calls, in script order.
fn called(book: &Book, i: usize) -> Vec<&str> {
    book.agents[i]
        .entries
        .iter()
        .flat_map(|e| match &e.kind {
            crate::drive::scripted::ReplyKind::Content(blocks) => blocks.iter().collect(),
            crate::drive::scripted::ReplyKind::Stream(chunks) => {
                chunks.iter().map(|c| &c.block).collect()
            }
            _ => Vec::new(),
        })
        .filter_map(|b| match b {
            crate::drive::scripted::ScriptBlock::ToolUse { name, .. } => Some(&**name),
            _ => None,
        })
        .collect()
}

/// The smallest rule that routes `request` to agent `i`, the other agents' routes unchanged: one
/// condition, since the others' rules do not depend on `i`'s (when no other agent matches the
/// request, any condition that holds routes it to `i`; when one does, no rule of `i` helps). The
/// conditions come from the request, most telling
/// first: a snippet of its system prompt (real runtimes send one model name for every agent), a
/// tool it offers that the agent's script calls, then any tool it offers, a snippet of its first
/// user message, its model name. `Err` names the agents that match it whatever `i`'s rule.
fn suggest(
    book: &Book,
    i: usize,
    request: &Request,
    first: &str,
    headers: &[(&str, &str)],
) -> Result<MatchRule, Vec<String>> {
    let mut conditions: Vec<MatchRule> = Vec::new();
    if let Some(snippet) = request.system.as_deref().and_then(snippet) {
        conditions.push(MatchRule {
            system_contains: Some(snippet),
            ..MatchRule::default()
        });
    }
    let called = called(book, i);
    let mut tools: Vec<&String> = request.tools.iter().collect();
    tools.sort_by_key(|t| !called.contains(&t.as_str()));
    for tool in tools {
        conditions.push(MatchRule {
            tool: Some(tool.clone()),
            ..MatchRule::default()
        });
    }
    if let Some(snippet) = snippet(first) {
        conditions.push(MatchRule {
            first_user_contains: Some(snippet),
            ..MatchRule::default()
        });
    }
    if let Some(model) = &request.model {
        conditions.push(MatchRule {
            model: Some(model.clone()),
            ..MatchRule::default()
        });
    }
    let routes_here = |rule: &MatchRule| {
        let route = Route::Rule(rule.clone());
        book.matching(request, first, headers, Some((i, &route))) == [i]
    };
    if let Some(rule) = conditions.iter().find(|r| routes_here(r)) {
        return Ok(rule.clone());
    }
    let route = Route::Rule(conditions.first().cloned().unwrap_or_default());
    Err(book
        .matching(request, first, headers, Some((i, &route)))
        .into_iter()
        .filter(|&j| j != i)
        .map(|j| format!("`{}`", book.agents[j].name))
        .collect())
}

/// A part of `text` a rule can look for: its first line that says something, trimmed, at most
/// 60 characters (cut at a word when it is longer). Always a substring of `text`.
fn snippet(text: &str) -> Option<String> {
    let line = text.lines().map(str::trim).find(|l| !l.is_empty())?;
    let Some((cut, _)) = line.char_indices().nth(60) else {
        return Some(line.to_owned());
    };
    let head = &line[..cut];
    let head = match head.rfind(' ') {
        Some(space) if space >= 20 => &head[..space],
        _ => head,
    };
    Some(head.trim_end().to_owned())
}

/// A rule as YAML flow mapping, its strings quoted (JSON's quoting is YAML's double-quoted
/// style), in the file's key order.
pub(super) fn yaml(rule: &MatchRule) -> String {
    let q = |s: &str| serde_json::to_string(s).expect("a string is JSON");
    let mut parts = Vec::new();
    if let Some(t) = &rule.system_contains {
        parts.push(format!("system_contains: {}", q(t)));
    }
    if let Some(t) = &rule.model {
        parts.push(format!("model: {}", q(t)));
    }
    if !rule.headers.is_empty() {
        let h: Vec<String> = rule
            .headers
            .iter()
            .map(|(k, v)| format!("{}: {}", q(k), q(v)))
            .collect();
        parts.push(format!("headers: {{ {} }}", h.join(", ")));
    }
    if let Some(t) = &rule.tools {
        let t: Vec<String> = t.iter().map(|n| q(n)).collect();
        parts.push(format!("tools: [{}]", t.join(", ")));
    }
    if !rule.tools_include.is_empty() {
        let t: Vec<String> = rule.tools_include.iter().map(|n| q(n)).collect();
        parts.push(format!("tools_include: [{}]", t.join(", ")));
    }
    if let Some(t) = &rule.tool {
        parts.push(format!("tool: {}", q(t)));
    }
    if let Some(t) = &rule.first_user_contains {
        parts.push(format!("first_user_contains: {}", q(t)));
    }
    format!("{{ {} }}", parts.join(", "))
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

    #[test]
    fn snippets_are_a_first_line_cut_at_a_word_and_always_a_substring() {
        assert_eq!(
            snippet("\n  Short prompt.  \nmore"),
            Some("Short prompt.".into())
        );
        assert_eq!(snippet("  \n \n"), None);
        let long =
            "You are the forecaster of a weather team; you answer in metric units only, always.";
        let s = snippet(long).unwrap();
        assert_eq!(s, "You are the forecaster of a weather team; you answer in");
        assert!(long.contains(&s));
        // No space late enough: cut at 60 characters, inside a word, on a char boundary.
        let word = "é".repeat(70);
        let s = snippet(&word).unwrap();
        assert_eq!(s.chars().count(), 60);
        assert!(word.contains(&s));
    }

    #[test]
    fn suggested_rules_are_yaml_that_loads_back_to_the_same_rule() {
        let rule = MatchRule {
            system_contains: Some("say \"hi\": now".into()),
            tool: Some("get_weather".into()),
            tools_include: vec!["a".into(), "b".into()],
            ..MatchRule::default()
        };
        let text = format!(
            "name: t\nagents:\n  helper:\n    match: {}\nllm:\n  helper: [hi]\n",
            yaml(&rule)
        );
        let s = crate::scenario::parse(&text, std::path::Path::new("t.yaml")).expect("loads");
        assert_eq!(s.routes["helper"], rule);
    }

    #[test]
    fn a_suggestion_is_the_most_telling_condition_or_names_who_keeps_matching() {
        let script = |name: &str, route: MatchRule| super::super::AgentScript {
            name: name.into(),
            route: Route::Rule(route),
            entries: Vec::new(),
            per_conversation: false,
            history: Default::default(),
        };
        let model = |m: &str| MatchRule {
            model: Some(m.into()),
            ..MatchRule::default()
        };
        let req = crate::wire::anthropic::validate(&json!({
            "model": "m", "max_tokens": 1, "system": "\n  S  ",
            "tools": [{"name": "t", "input_schema": {}}],
            "messages": [{"role": "user", "content": "hi"}]
        }))
        .unwrap();
        let book = Book::new(vec![
            script("main", model("a")),
            script("other", model("b")),
        ]);
        let miss = book.route(&req, "hi", &[]).unwrap_err();
        for agent in ["main", "other"] {
            let line = format!("`{agent}`: match: {{ system_contains: \"S\" }}");
            assert!(miss.message.contains(&line), "{}", miss.message);
        }
        // Without a system prompt: a tool, then the first user message, then the model.
        let mut bare = req.clone();
        bare.system = None;
        let miss = book.route(&bare, "hi", &[]).unwrap_err();
        assert!(
            miss.message.contains(r#"`main`: match: { tool: "t" }"#),
            "{}",
            miss.message
        );
        bare.tools.clear();
        let miss = book.route(&bare, "hi", &[]).unwrap_err();
        assert!(
            miss.message
                .contains(r#"`main`: match: { first_user_contains: "hi" }"#),
            "{}",
            miss.message
        );
        let miss = book.route(&bare, "", &[]).unwrap_err();
        assert!(
            miss.message.contains(r#"`main`: match: { model: "m" }"#),
            "{}",
            miss.message
        );
        // Both rules hold: no rule of one agent alone routes the request to it.
        let book = Book::new(vec![
            script("main", model("m")),
            script("other", model("m")),
        ]);
        let miss = book.route(&req, "hi", &[]).unwrap_err();
        assert!(
            miss.message.contains(
                "`main`: no rule of its own routes it there while `other` matches it too"
            ),
            "{}",
            miss.message
        );
    }
}
