//! Building a [`Scenario`] from a parsed file, and checking what the parser cannot (an agent's
//! kind, a reply with two behaviours, a step with no action), every error located at a line and
//! column: the scenario as a whole, its settings, agents and routes here; the scripts of the model
//! and the tools in [`super::scripts`], the steps in [`super::steps`].

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use serde_saphyr::{Location, Spanned};

use crate::model::agent::{AgentDef, AgentKind, Catalog};
use crate::model::llm::Usage;
use crate::observe::names;
use crate::runtime::{RuntimeConfig, ToolSpec};
use crate::sim::Limits;

use super::error::{clamp, ScenarioError};
use super::format::*;
use super::free::{Node, Place};
use super::{Scenario, StepKind};

/// Invariant names a scenario may expect to see broken.
pub fn known_invariants() -> impl Iterator<Item = &'static str> {
    names::ALL
        .into_iter()
        .chain(names::WIRE)
        .chain(names::OUTSIDE)
}

/// Builds a scenario from a file read at `path`, with its free-form values as written.
pub(super) struct Builder<'a> {
    pub(super) path: &'a Path,
    /// Free-form values as written, by where they start.
    pub(super) free: &'a BTreeMap<Place, Node>,
}

impl Builder<'_> {
    /// A callback URL: `http://` or `https://` and a host.
    pub(super) fn callback_url(
        &self,
        url: &Spanned<String>,
        what: &str,
    ) -> Result<Arc<str>, ScenarioError> {
        let rest = url
            .value
            .strip_prefix("http://")
            .or_else(|| url.value.strip_prefix("https://"));
        match rest {
            Some(rest)
                if !rest.is_empty()
                    && !rest.starts_with('/')
                    && !rest.contains(char::is_whitespace) =>
            {
                Ok(url.value.as_str().into())
            }
            _ => Err(self.error(
                url.referenced,
                format!(
                    "{what} must be an http:// or https:// URL with a host, not `{}`",
                    url.value
                ),
            )),
        }
    }

    /// A reply of the simulated callback endpoint: an HTTP status, `refused` or `hang`.
    pub(super) fn callback_reply(
        &self,
        reply: &Spanned<serde_json::Value>,
    ) -> Result<crate::agents::session::CallbackReply, ScenarioError> {
        use crate::agents::session::CallbackReply;
        match &reply.value {
            serde_json::Value::Number(n) => {
                if let Some(status) = n.as_u64().filter(|s| (100..=599).contains(s)) {
                    return Ok(CallbackReply::Status(status as u16));
                }
            }
            serde_json::Value::String(s) if s == "refused" => return Ok(CallbackReply::Refused),
            serde_json::Value::String(s) if s == "hang" => return Ok(CallbackReply::Hang),
            _ => {}
        }
        Err(self.error(
            reply.referenced,
            format!(
                "callbacks: a reply is an HTTP status (100 to 599; 2xx delivers), `refused` or `hang`, not `{}`",
                reply.value
            ),
        ))
    }

    pub(super) fn error(&self, at: Location, message: impl Into<String>) -> ScenarioError {
        ScenarioError {
            path: self.path.to_owned(),
            line: clamp(at.line()),
            column: clamp(at.column()),
            message: message.into(),
        }
    }

    pub(super) fn scenario(&self, file: ScenarioFile) -> Result<Scenario, ScenarioError> {
        let ScenarioFile {
            schema: _,
            name,
            description,
            seed,
            expect_violation,
            settings,
            history,
            agents,
            llm,
            tools,
            steps: step_specs,
        } = file;
        let mut catalog = Catalog::default();
        // A file without steps is served only by `agentsim mock-llm`, where an agent's kind means
        // nothing: it may leave `kind` out.
        let served_only = step_specs.is_empty();
        for (name, spec) in &agents {
            catalog.add(self.agent(name, spec, &tools, served_only)?);
        }

        let mut config = RuntimeConfig::default();
        if let Some(t) = settings.question_timeout {
            config.question_timeout_ms = t.0;
        }
        config.session_expiry_ms = settings.session_expiry.map(|t| t.0);
        if let Some(url) = &settings.question_callback_url {
            config.callbacks.url =
                Some(self.callback_url(url, "settings: `question_callback_url`")?);
        }
        let mut callback_replies = Vec::new();
        if let Some(spec) = &settings.callbacks {
            let policy = &mut config.callbacks.policy;
            policy.retries = spec.retries.unwrap_or(policy.retries);
            policy.backoff_ms = spec.backoff.map_or(policy.backoff_ms, |t| t.0);
            policy.timeout_ms = spec.timeout.map_or(policy.timeout_ms, |t| t.0);
            for reply in &spec.replies {
                callback_replies.push(self.callback_reply(reply)?);
            }
        }
        if settings.query_user == Some(crate::scenario::format::QueryUserSpec::None) {
            config.query_user = crate::runtime::QueryUser::None;
        }
        if let Some(words) = &settings.cancel_words {
            config.cancel_words = words.clone();
        }
        if let Some(spec) = &settings.interruptions {
            let c = spec.value.config();
            if c.check_every_ms == 0 || c.timeout_ms == 0 {
                return Err(self.error(
                    spec.referenced,
                    "interruptions: `timeout` and `check_every` must be positive",
                ));
            }
            config.interruptions = Some(c);
        }
        if let Some(bug) = &settings.planted_bug {
            config.planted = Some(
                bug.value
                    .parse()
                    .map_err(|e: String| self.error(bug.referenced, e))?,
            );
        }
        let mut tool_scripts = BTreeMap::new();
        for (name, def) in &tools {
            if crate::agents::tools::builtin::is_builtin(name) {
                return Err(self.error(
                    def.referenced,
                    format!("`{name}` is a built-in tool: the runtime answers it itself, so a script for it would never run"),
                ));
            }
            let (script, timeout) = self.tool(&def.value, def.referenced)?;
            config.tools.insert(
                name.clone(),
                ToolSpec {
                    timeout_ms: timeout,
                },
            );
            if let Some(script) = script {
                tool_scripts.insert(name.clone(), script);
            }
        }
        for (name, spec) in &agents {
            if let Some(pass) = &spec.value.passthrough {
                let (script, timeout) = self.tool(pass, spec.referenced)?;
                if timeout.is_some() {
                    return Err(self.error(
                        spec.referenced,
                        format!("agent '{name}': a passthrough skill's run has no `timeout` (give its outcome: result, error, hang, after)"),
                    ));
                }
                let def = &catalog.skills[name];
                if let Some(script) = script {
                    tool_scripts.insert(def.frame_name.to_string(), script);
                }
            }
        }

        let step_specs_empty = step_specs.is_empty();
        let mut routes = BTreeMap::new();
        let mut per_conversation = std::collections::BTreeSet::new();
        let mut policies = crate::scenario::HistoryPolicies {
            file: history.unwrap_or_default(),
            agents: BTreeMap::new(),
        };
        for (name, spec) in &agents {
            if let Some(policy) = spec.value.history {
                policies.agents.insert(name.clone(), policy);
            }
            if let Some(rule) = &spec.value.route {
                routes.insert(name.clone(), self.route(name, rule)?);
            }
            if let Some(mode) = &spec.value.script {
                if mode.value == crate::scenario::format::ScriptMode::PerConversation {
                    if !step_specs_empty {
                        return Err(self.error(
                            mode.referenced,
                            format!("agent '{name}': `script: per_conversation` is for `agentsim mock-llm`, which serves files without `steps`; the simulator shares an agent's script among its frames"),
                        ));
                    }
                    per_conversation.insert(name.clone());
                }
            }
        }

        let mut scripts = BTreeMap::new();
        // Every reply is served at most once a run, so the sum of all scripted usage bounds any
        // conversation's total: if that sum fits, no total can overflow.
        let mut usage_total = Usage::default();
        for (agent, entries) in &llm {
            let known = |agent: &str| {
                agent == "main"
                    || catalog.skills.contains_key(agent)
                    || catalog.agents.contains_key(agent)
            };
            // A fork's script: `<agent>#<handle>`, handles counted from 1, nested forks too.
            let fork_of = |agent: &str| -> Option<String> {
                let (base, handles) = agent.split_once('#')?;
                let numbered = handles.split('#').all(|h| {
                    !h.is_empty() && h.bytes().all(|b| b.is_ascii_digit()) && !h.starts_with('0')
                });
                numbered.then(|| base.to_owned())
            };
            if let Some(base) = fork_of(agent) {
                let forks = catalog
                    .get(&base)
                    .is_some_and(|d| d.fork || d.workflow.is_some());
                if !known(&base) || !forks {
                    return Err(self.error(
                        entries.referenced,
                        format!(
                            "llm script for '{agent}', a fork of '{base}', but '{base}' is not a declared agent with `fork: true` or a `workflow`"
                        ),
                    ));
                }
            }
            let known = known(agent) || fork_of(agent).is_some();
            if !known {
                let mut declared: Vec<&str> = vec!["main"];
                declared.extend(catalog.skills.keys().map(String::as_str));
                declared.extend(catalog.agents.keys().map(String::as_str));
                return Err(self.error(
                    entries.referenced,
                    format!(
                        "llm script for '{agent}', which is not a declared agent (declared: {})",
                        declared.join(", ")
                    ),
                ));
            }
            let mut replies = Vec::new();
            for entry in &entries.value {
                let reply = self.reply(&entry.value, entry.referenced)?;
                usage_total = (usage_total.checked_add(reply.usage))
                    .filter(|u| u.input_tokens.checked_add(u.output_tokens).is_some())
                    .ok_or_else(|| {
                    self.error(
                        entry.referenced,
                        format!(
                            "the token usage of the scripts (input and output tokens together) adds up past {} (the largest count a run can total) at this reply: use smaller `usage` counts",
                            u64::MAX
                        ),
                    )
                })?;
                replies.push(reply);
            }
            scripts.insert(agent.clone(), replies);
        }

        let mut steps = Vec::new();
        for step in step_specs {
            steps.push(self.step(step.value, step.referenced, &catalog)?);
        }
        config.persist =
            settings.persist || steps.iter().any(|s| matches!(s.kind, StepKind::Restart));

        let expect_violation = match &expect_violation {
            None => None,
            Some(name) if known_invariants().any(|k| k == name.value) => Some(name.value.clone()),
            Some(name) => {
                return Err(self.error(
                    name.referenced,
                    format!(
                        "expect_violation: unknown invariant '{}' (known: {})",
                        name.value,
                        known_invariants().collect::<Vec<_>>().join(", ")
                    ),
                ))
            }
        };

        let defaults = Limits::default();
        let limits = Limits {
            max_steps: settings.max_steps.unwrap_or(defaults.max_steps),
            max_depth: settings.max_depth.unwrap_or(defaults.max_depth),
            max_llm_calls: settings.max_llm_calls.unwrap_or(defaults.max_llm_calls),
        };

        Ok(Scenario {
            path: self.path.to_owned(),
            name,
            description,
            seed: seed.unwrap_or(0),
            catalog,
            config,
            scripts,
            more_replies: None,
            callback_replies,
            tools: tool_scripts,
            steps,
            limits,
            expect_violation,
            routes,
            per_conversation,
            history: policies,
        })
    }

    pub(super) fn route(
        &self,
        name: &str,
        spec: &Spanned<crate::scenario::format::MatchSpec>,
    ) -> Result<crate::scenario::MatchRule, ScenarioError> {
        let m = &spec.value;
        let rule = crate::scenario::MatchRule {
            system_contains: m.system_contains.clone(),
            model: m.model.clone(),
            headers: m
                .headers
                .iter()
                .flatten()
                .map(|(k, v)| (k.to_ascii_lowercase(), v.clone()))
                .collect(),
            tools: m.tools.clone(),
            tools_include: Vec::new(),
            tool: None,
            first_user_contains: m.first_user_contains.clone(),
        };
        let mut rule = rule;
        let blank = |names: &[String]| names.iter().any(|n| n.trim().is_empty());
        if m.tools.as_deref().is_some_and(blank) {
            return Err(self.error(
                spec.referenced,
                format!("agent '{name}': `match: tools` lists an empty tool name"),
            ));
        }
        if let Some(list) = &m.tools_include {
            if list.value.is_empty() || blank(&list.value) {
                return Err(self.error(
                    list.referenced,
                    format!("agent '{name}': `match: tools_include` lists the tools a request must offer (at least one, each a name), not {:?}", list.value),
                ));
            }
            let mut names = list.value.clone();
            names.sort();
            names.dedup();
            rule.tools_include = names;
        }
        if let Some(tool) = &m.tool {
            if tool.value.trim().is_empty() {
                return Err(self.error(
                    tool.referenced,
                    format!("agent '{name}': `match: tool` names a tool the request must offer, not an empty name"),
                ));
            }
            rule.tool = Some(tool.value.clone());
        }
        if let Some(exact) = &rule.tools {
            let wanted = rule.tools_include.iter().chain(rule.tool.as_ref());
            if let Some(missing) = wanted.into_iter().find(|n| !exact.contains(n)) {
                let at = m
                    .tool
                    .as_ref()
                    .filter(|t| &t.value == missing)
                    .map(|t| t.referenced)
                    .or(m.tools_include.as_ref().map(|l| l.referenced))
                    .unwrap_or(spec.referenced);
                return Err(self.error(
                    at,
                    format!("agent '{name}': the rule asks for tool `{missing}`, which its `tools: [{}]` (exactly these) leaves out, so it could never hold", exact.join(", ")),
                ));
            }
        }
        if rule == crate::scenario::MatchRule::default() {
            return Err(self.error(
                spec.referenced,
                format!("agent '{name}': `match` needs at least one of system_contains, model, headers, tools, tools_include, tool, first_user_contains"),
            ));
        }
        Ok(rule)
    }

    pub(super) fn agent(
        &self,
        name: &str,
        spec: &Spanned<AgentSpec>,
        tools: &BTreeMap<String, Spanned<ToolDef>>,
        served_only: bool,
    ) -> Result<AgentDef, ScenarioError> {
        let at = spec.referenced;
        let s = &spec.value;
        if name.trim().is_empty() {
            return Err(self.error(at, "an agent needs a name: `\"\"` is not one"));
        }
        if name.contains(':') {
            return Err(self.error(
                at,
                format!(
                    "agent name '{name}' contains ':', which frame names use (`skill:{name}`): pick a name without it"
                ),
            ));
        }
        let kind = match (name, s.kind) {
            ("main", None | Some(KindSpec::Main)) => AgentKind::Main,
            ("main", Some(_)) => return Err(self.error(
                at,
                "the agent named 'main' is the main agent: leave out `kind` or write `kind: main`",
            )),
            (_, Some(KindSpec::Skill)) => AgentKind::Skill,
            (_, Some(KindSpec::Agent)) => AgentKind::Agent,
            (_, Some(KindSpec::Main)) => {
                return Err(self.error(
                    at,
                    format!("'{name}' cannot be `kind: main`: only the agent named 'main' is"),
                ))
            }
            // Served by mock-llm only: an agent the runtime under test runs, whatever it calls it.
            (_, None) if served_only => AgentKind::Agent,
            (_, None) => {
                return Err(self.error(
                    at,
                    format!("agent '{name}' needs `kind: skill` or `kind: agent` (only a file without `steps`, served by `agentsim mock-llm` alone, may leave it out)"),
                ))
            }
        };
        if s.batch.is_some() && kind == AgentKind::Main {
            return Err(self.error(
                at,
                "the main agent cannot be `batch`: only skills and agents are delegated",
            ));
        }
        if s.passthrough.is_some() && kind != AgentKind::Skill {
            return Err(self.error(at, format!("'{name}': only a skill can be `passthrough`")));
        }
        let mut def = AgentDef::new(name, kind);
        if let Some(d) = &s.description {
            def.description = d.clone();
        }
        if let Some(p) = &s.system {
            def.system_prompt = p.as_str().into();
        }
        def.model = s.model.clone();
        if let Some(n) = s.max_iterations {
            if n == 0 {
                return Err(self.error(
                    at,
                    format!("agent '{name}': `max_iterations: 0` lets it make no model call at all; the least is 1"),
                ));
            }
            def.max_iterations = n;
        }
        if let Some(list) = &s.tools {
            for tool in list {
                if !tools.contains_key(tool) && !crate::agents::tools::builtin::is_builtin(tool) {
                    return Err(self.error(
                        at,
                        format!("agent '{name}' lists tool '{tool}', which is not declared under `tools`"),
                    ));
                }
            }
            def.tools = Some(list.clone());
        }
        def.stream = s.stream;
        def.parallel_tools = s.parallel_tools;
        def.passthrough = s.passthrough.is_some();
        def.batch = s.batch;
        def.fork = s.fork;
        match (&s.workflow, &s.max_depth) {
            (Some(_), _) if def.passthrough => {
                return Err(self.error(
                    at,
                    format!("'{name}': a passthrough skill runs no model call, so it cannot run a `workflow`"),
                ));
            }
            (Some(_), depth) => {
                def.workflow = Some(crate::agents::workflow::WorkflowDef {
                    max_depth: depth
                        .as_ref()
                        .map_or(crate::agents::workflow::DEFAULT_MAX_DEPTH, |d| d.value),
                });
            }
            (None, Some(depth)) => {
                return Err(self.error(
                    depth.referenced,
                    format!("agent '{name}': `max_depth` bounds a workflow's children, but the agent has no `workflow: six_step`"),
                ));
            }
            (None, None) => {}
        }
        if !s.async_questions
            && (s.question_timeout.is_some()
                || s.on_timeout.is_some()
                || s.question_callback.is_some())
        {
            return Err(self.error(
                at,
                format!("agent '{name}': `question_timeout`, `on_timeout` and `question_callback` go with `async_questions: true`"),
            ));
        }
        if s.async_questions {
            use crate::model::agent::{AsyncQuestions, OnTimeout};
            let on_timeout = match &s.on_timeout {
                None => OnTimeout::Fail,
                Some(v) => match &v.value {
                    serde_json::Value::String(p) if p == "fail" => OnTimeout::Fail,
                    serde_json::Value::Object(m) if m.len() == 1 && m.get("default_answer").is_some_and(|a| a.is_string()) => {
                        OnTimeout::DefaultAnswer(m["default_answer"].as_str().unwrap_or_default().into())
                    }
                    _ => {
                        return Err(self.error(
                            v.referenced,
                            format!("agent '{name}': `on_timeout` is `fail` or `{{default_answer: <text>}}`"),
                        ))
                    }
                },
            };
            def.async_questions = Some(AsyncQuestions {
                timeout_ms: s.question_timeout.map(|t| t.0),
                on_timeout,
                callback: match &s.question_callback {
                    Some(url) => Some(
                        self.callback_url(url, &format!("agent '{name}': `question_callback`"))?,
                    ),
                    None => None,
                },
            });
        }
        Ok(def)
    }
}
