//! Writing a [`Scenario`] back as a scenario file: how a shrunk failure becomes a regression file.
//!
//! Strings are written as JSON-quoted scalars and structured values as JSON flow collections, both
//! valid YAML, so no text can break the file; the result loads back into an equivalent scenario
//! (checked over the whole corpus by `written_scenarios_load_back_and_replay_identically`).

use std::fmt::Write as _;

use serde_json::{json, Map, Value};

use crate::drive::scripted::{Attempts, ReplyKind, ScriptBlock, ScriptedReply};
use crate::drive::scripted::{ToolBehavior, ToolScript, ToolStep};
use crate::model::agent::{AgentDef, AgentKind};
use crate::model::llm::{LlmErrorKind, Usage};
use crate::runtime::DEFAULT_CANCEL_WORDS;
use crate::sim::Limits;

use super::{Scenario, StepKind};

fn q(s: &str) -> String {
    serde_json::to_string(s).expect("a string serialises")
}

fn flow(v: &Value) -> String {
    serde_json::to_string(v).expect("JSON serialises")
}

fn kind_name(kind: LlmErrorKind) -> &'static str {
    match kind {
        LlmErrorKind::RateLimit => "rate_limit",
        LlmErrorKind::Overloaded => "overloaded",
        LlmErrorKind::Network => "network",
        LlmErrorKind::Other => "other",
    }
}

fn tool_use(id: &Option<std::sync::Arc<str>>, name: &str, input: &Value) -> Value {
    let mut m = Map::new();
    m.insert("name".into(), json!(name));
    m.insert("input".into(), input.clone());
    if let Some(id) = id {
        m.insert("id".into(), json!(&**id));
    }
    Value::Object(m)
}

fn usage(m: &mut Map<String, Value>, u: Usage) {
    if !u.is_zero() {
        m.insert(
            "usage".into(),
            json!({"input_tokens": u.input_tokens, "output_tokens": u.output_tokens}),
        );
    }
}

/// One scripted reply as a JSON value in the file format.
pub(crate) fn reply_value(r: &ScriptedReply) -> Value {
    let mut m = Map::new();
    match &r.kind {
        ReplyKind::Content(blocks) if blocks.is_empty() => {
            m.insert("empty".into(), json!(true));
        }
        ReplyKind::Content(blocks) => {
            let text: String = blocks
                .iter()
                .filter_map(|b| match b {
                    ScriptBlock::Text(t) => Some(&**t),
                    ScriptBlock::ToolUse { .. } | ScriptBlock::Thinking(_) => None,
                })
                .collect();
            let thinking: String = blocks
                .iter()
                .filter_map(|b| match b {
                    ScriptBlock::Thinking(t) => Some(&**t),
                    _ => None,
                })
                .collect();
            if !thinking.is_empty() {
                m.insert("thinking".into(), json!(thinking));
            }
            let uses: Vec<Value> = blocks
                .iter()
                .filter_map(|b| match b {
                    ScriptBlock::ToolUse { id, name, input } => Some(tool_use(id, name, input)),
                    ScriptBlock::Text(_) | ScriptBlock::Thinking(_) => None,
                })
                .collect();
            if !text.is_empty() || uses.is_empty() {
                m.insert("text".into(), json!(text));
            }
            if !uses.is_empty() {
                m.insert("tool_use".into(), Value::Array(uses));
            }
        }
        ReplyKind::Stream(chunks) => {
            let list: Vec<Value> = chunks
                .iter()
                .map(|c| match &c.block {
                    ScriptBlock::Text(t) => json!({"text": &**t, "after": c.after_ms}),
                    ScriptBlock::Thinking(t) => json!({"thinking": &**t, "after": c.after_ms}),
                    ScriptBlock::ToolUse { id, name, input } => {
                        json!({"tool_use": tool_use(id, name, input), "after": c.after_ms})
                    }
                })
                .collect();
            m.insert("chunks".into(), Value::Array(list));
        }
        ReplyKind::Error {
            kind,
            message,
            mid_stream,
            times,
            retry_after_ms,
        } => {
            let mut e = json!({"kind": kind_name(*kind), "message": &**message});
            if *mid_stream {
                e["mid_stream"] = true.into();
            }
            match times {
                Attempts::Times(1) => {}
                Attempts::Times(n) => e["times"] = (*n).into(),
                Attempts::Always => e["times"] = "always".into(),
            }
            if let Some(ms) = retry_after_ms {
                e["retry_after"] = (*ms).into();
            }
            m.insert("error".into(), e);
        }
        ReplyKind::Stall => {
            m.insert("stall".into(), json!(true));
        }
    }
    if r.after_ms > 0 {
        m.insert("after".into(), json!(r.after_ms));
    }
    usage(&mut m, r.usage);
    Value::Object(m)
}

fn step_value(s: &ToolStep) -> Value {
    let mut m = Map::new();
    match &s.behavior {
        ToolBehavior::Result { content, is_error } => {
            m.insert("result".into(), json!(&**content));
            if *is_error {
                m.insert("is_error".into(), json!(true));
            }
        }
        ToolBehavior::Fail(message) => {
            m.insert("error".into(), json!(&**message));
        }
        ToolBehavior::Hang => {
            m.insert("hang".into(), json!(true));
        }
    }
    if s.after_ms > 0 {
        m.insert("after".into(), json!(s.after_ms));
    }
    Value::Object(m)
}

/// A tool's script (and timeout) as a JSON value in the file format.
pub(crate) fn tool_value(script: Option<&ToolScript>, timeout_ms: Option<u64>) -> Value {
    let mut m = match script {
        None => Map::new(),
        Some(ToolScript::Fixed(step)) => match step_value(step) {
            Value::Object(m) => m,
            _ => unreachable!("step_value returns an object"),
        },
        Some(ToolScript::PerCall(steps)) => {
            let mut m = Map::new();
            m.insert(
                "calls".into(),
                Value::Array(steps.iter().map(step_value).collect()),
            );
            m
        }
    };
    if let Some(t) = timeout_ms {
        m.insert("timeout".into(), json!(t));
    }
    Value::Object(m)
}

fn agent_value(
    def: &AgentDef,
    passthrough: Option<Value>,
    route: Option<&crate::scenario::MatchRule>,
    per_conversation: bool,
    history: Option<crate::scenario::format::HistoryPolicy>,
) -> Value {
    let default = AgentDef::new(def.name.clone(), def.kind);
    let mut m = Map::new();
    match def.kind {
        AgentKind::Main => {}
        AgentKind::Skill => {
            m.insert("kind".into(), json!("skill"));
        }
        AgentKind::Agent => {
            m.insert("kind".into(), json!("agent"));
        }
    }
    if !def.description.is_empty() {
        m.insert("description".into(), json!(def.description));
    }
    if def.system_prompt != default.system_prompt {
        m.insert("system".into(), json!(&*def.system_prompt));
    }
    if let Some(model) = &def.model {
        m.insert("model".into(), json!(model));
    }
    if def.max_iterations != default.max_iterations {
        m.insert("max_iterations".into(), json!(def.max_iterations));
    }
    if let Some(tools) = &def.tools {
        m.insert("tools".into(), json!(tools));
    }
    if def.stream {
        m.insert("stream".into(), json!(true));
    }
    if let Some(a) = &def.async_questions {
        m.insert("async_questions".into(), json!(true));
        if let Some(t) = a.timeout_ms {
            m.insert("question_timeout".into(), json!(t));
        }
        if let crate::model::agent::OnTimeout::DefaultAnswer(text) = &a.on_timeout {
            m.insert("on_timeout".into(), json!({ "default_answer": &**text }));
        }
        if let Some(url) = &a.callback {
            m.insert("question_callback".into(), json!(&**url));
        }
    }
    if let Some(w) = def.workflow {
        m.insert("workflow".into(), json!("six_step"));
        if w.max_depth != crate::model::agent::DEFAULT_MAX_DEPTH {
            m.insert("max_depth".into(), json!(w.max_depth));
        }
    }
    if def.fork {
        m.insert("fork".into(), json!(true));
    }
    if def.parallel_tools {
        m.insert("parallel_tools".into(), json!(true));
    }
    if let Some(policy) = def.batch {
        m.insert(
            "batch".into(),
            serde_json::to_value(policy).expect("a policy serialises"),
        );
    }
    if let Some(p) = passthrough {
        m.insert("passthrough".into(), p);
    }
    if let Some(r) = route {
        let mut rule = Map::new();
        if let Some(t) = &r.system_contains {
            rule.insert("system_contains".into(), json!(t));
        }
        if let Some(t) = &r.model {
            rule.insert("model".into(), json!(t));
        }
        if !r.headers.is_empty() {
            rule.insert("headers".into(), json!(r.headers));
        }
        if let Some(t) = &r.tools {
            rule.insert("tools".into(), json!(t));
        }
        if !r.tools_include.is_empty() {
            rule.insert("tools_include".into(), json!(r.tools_include));
        }
        if let Some(t) = &r.tool {
            rule.insert("tool".into(), json!(t));
        }
        if let Some(t) = &r.first_user_contains {
            rule.insert("first_user_contains".into(), json!(t));
        }
        m.insert("match".into(), Value::Object(rule));
    }
    if per_conversation {
        m.insert("script".into(), json!("per_conversation"));
    }
    if let Some(policy) = history {
        m.insert("history".into(), json!(policy.name()));
    }
    Value::Object(m)
}

/// The scenario as a scenario file.
pub fn to_yaml(s: &Scenario) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "name: {}", q(&s.name));
    if let Some(d) = &s.description {
        let _ = writeln!(out, "description: {}", q(d));
    }
    let _ = writeln!(out, "seed: {}", s.seed);
    if let Some(v) = &s.expect_violation {
        let _ = writeln!(out, "expect_violation: {v}");
    }
    let mut settings = Map::new();
    let defaults: Vec<String> = DEFAULT_CANCEL_WORDS.iter().map(|w| w.to_string()).collect();
    if s.config.cancel_words != defaults {
        settings.insert("cancel_words".into(), json!(s.config.cancel_words));
    }
    let limits = Limits::default();
    if s.limits.max_steps != limits.max_steps {
        settings.insert("max_steps".into(), json!(s.limits.max_steps));
    }
    if s.limits.max_depth != limits.max_depth {
        settings.insert("max_depth".into(), json!(s.limits.max_depth));
    }
    if s.limits.max_llm_calls != limits.max_llm_calls {
        settings.insert("max_llm_calls".into(), json!(s.limits.max_llm_calls));
    }
    if let Some(ic) = s.config.interruptions {
        let mut v = serde_json::to_value(ic).expect("the configuration serialises");
        if let Value::Object(m) = &mut v {
            let timeout = m.remove("timeout_ms").expect("a field");
            let check = m.remove("check_every_ms").expect("a field");
            m.insert("timeout".into(), timeout);
            m.insert("check_every".into(), check);
        }
        settings.insert("interruptions".into(), v);
    }
    if s.config.persist {
        settings.insert("persist".into(), json!(true));
    }
    if s.config.question_timeout_ms != crate::runtime::RuntimeConfig::default().question_timeout_ms
    {
        settings.insert(
            "question_timeout".into(),
            json!(s.config.question_timeout_ms),
        );
    }
    if let Some(ms) = s.config.session_expiry_ms {
        settings.insert("session_expiry".into(), json!(ms));
    }
    if let Some(url) = &s.config.callbacks.url {
        settings.insert("question_callback_url".into(), json!(&**url));
    }
    let policy = s.config.callbacks.policy;
    if policy != Default::default() || !s.callback_replies.is_empty() {
        use crate::agents::session::CallbackReply;
        let replies: Vec<serde_json::Value> = s
            .callback_replies
            .iter()
            .map(|r| match r {
                CallbackReply::Status(code) => json!(code),
                CallbackReply::Refused => json!("refused"),
                CallbackReply::Hang => json!("hang"),
            })
            .collect();
        settings.insert(
            "callbacks".into(),
            json!({
                "retries": policy.retries,
                "backoff": policy.backoff_ms,
                "timeout": policy.timeout_ms,
                "replies": replies,
            }),
        );
    }
    if s.config.query_user == crate::runtime::QueryUser::None {
        settings.insert("query_user".into(), json!("none"));
    }
    if let Some(bug) = s.config.planted {
        settings.insert("planted_bug".into(), json!(bug.name()));
    }
    if !settings.is_empty() {
        let _ = writeln!(out, "settings: {}", flow(&Value::Object(settings)));
    }
    if s.history.file != crate::scenario::format::HistoryPolicy::default() {
        let _ = writeln!(out, "history: {}", s.history.file.name());
    }

    out.push_str("agents:\n");
    let _ = writeln!(
        out,
        "  main: {}",
        flow(&agent_value(
            &s.catalog.main,
            None,
            s.routes.get("main"),
            s.per_conversation.contains("main"),
            s.history.agents.get("main").copied(),
        ))
    );
    for def in s.catalog.skills.values().chain(s.catalog.agents.values()) {
        let passthrough = def
            .passthrough
            .then(|| tool_value(s.tools.get(&*def.frame_name), None));
        let _ = writeln!(
            out,
            "  {}: {}",
            q(&def.name),
            flow(&agent_value(
                def,
                passthrough,
                s.routes.get(&def.name),
                s.per_conversation.contains(&def.name),
                s.history.agents.get(&def.name).copied(),
            ))
        );
    }

    if !s.scripts.is_empty() {
        out.push_str("llm:\n");
        for (agent, replies) in &s.scripts {
            if replies.is_empty() {
                let _ = writeln!(out, "  {}: []", q(agent));
                continue;
            }
            let _ = writeln!(out, "  {}:", q(agent));
            for r in replies {
                let _ = writeln!(out, "    - {}", flow(&reply_value(r)));
            }
        }
    }

    if !s.config.tools.is_empty() {
        out.push_str("tools:\n");
        for (name, spec) in &s.config.tools {
            let v = tool_value(s.tools.get(name), spec.timeout_ms);
            let _ = writeln!(out, "  {}: {}", q(name), flow(&v));
        }
    }

    out.push_str("steps:\n");
    if s.steps.is_empty() {
        // An empty list keeps the file loadable.
        out.truncate(out.len() - 1);
        out.push_str(" []\n");
    }
    for step in &s.steps {
        let v = match &step.kind {
            StepKind::User { key, text, wait } => {
                let mut m = Map::new();
                m.insert("user".into(), json!(text));
                if key != super::DEFAULT_KEY {
                    m.insert("key".into(), json!(key));
                }
                if !wait {
                    m.insert("wait".into(), json!(false));
                }
                Value::Object(m)
            }
            StepKind::Advance(ms) => json!({ "advance": ms }),
            StepKind::Run(n) => json!({ "run": n }),
            StepKind::Restart => json!({ "restart": true }),
            StepKind::Trigger {
                agent,
                payload,
                wait,
            } => {
                let mut m = Map::new();
                m.insert(
                    "trigger".into(),
                    json!({ "agent": agent, "payload": payload }),
                );
                if !wait {
                    m.insert("wait".into(), json!(false));
                }
                Value::Object(m)
            }
            StepKind::AsyncAnswer {
                session,
                question,
                text,
                wait,
            } => {
                let mut a = Map::new();
                a.insert("session".into(), json!(session));
                if let Some(q) = question {
                    a.insert("question".into(), json!(q));
                }
                a.insert("text".into(), json!(text));
                let mut m = Map::new();
                m.insert("async_answer".into(), Value::Object(a));
                if !wait {
                    m.insert("wait".into(), json!(false));
                }
                Value::Object(m)
            }
            StepKind::Intervene {
                agent,
                intervention,
                wait,
            } => {
                let mut iv = Map::new();
                iv.insert("agent".into(), json!(agent));
                if let Some(c) = &intervention.user_comment {
                    iv.insert("comment".into(), json!(c));
                }
                if let Some(c) = &intervention.user_content {
                    iv.insert("content".into(), json!(c));
                }
                if let Some(st) = intervention.status {
                    iv.insert("status".into(), json!(st.as_str()));
                }
                let mut m = Map::new();
                m.insert("intervene".into(), Value::Object(iv));
                if !wait {
                    m.insert("wait".into(), json!(false));
                }
                Value::Object(m)
            }
            StepKind::Answer {
                agent,
                question,
                text,
                wait,
            } => {
                let mut a = Map::new();
                if let Some(agent) = agent {
                    a.insert("agent".into(), json!(agent));
                }
                if let Some(q) = question {
                    a.insert("question".into(), json!(q.to_string()));
                }
                a.insert("text".into(), json!(text));
                let mut m = Map::new();
                m.insert("answer".into(), Value::Object(a));
                if !wait {
                    m.insert("wait".into(), json!(false));
                }
                Value::Object(m)
            }
            StepKind::Expect(e) => {
                json!({ "expect": serde_json::to_value(e).expect("expectations serialise") })
            }
        };
        let _ = writeln!(out, "  - {}", flow(&v));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report;
    use crate::scenario::{load, parse, run, RunOptions};
    use std::path::Path;

    fn corpus(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        for p in entries {
            if p.is_dir() {
                corpus(&p, out);
            } else if p.extension().is_some_and(|e| e == "yaml") {
                out.push(p);
            }
        }
    }

    #[test]
    fn written_scenarios_load_back_and_replay_identically() {
        let mut files = Vec::new();
        corpus(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios"),
            &mut files,
        );
        assert!(files.len() > 30);
        for file in files {
            let original = load(&file).unwrap();
            let yaml = to_yaml(&original);
            let back = parse(&yaml, &file).unwrap_or_else(|e| {
                panic!(
                    "{}: the written file does not load: {e}\n{yaml}",
                    file.display()
                )
            });
            let a = run(&original, RunOptions::default());
            let b = run(&back, RunOptions::default());
            assert_eq!(
                report::records_text(&a.records),
                report::records_text(&b.records),
                "{}: the written scenario replays differently\n{yaml}",
                file.display()
            );
            assert_eq!(a.passed(), b.passed(), "{}", file.display());
        }
    }
}
