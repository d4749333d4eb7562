//! The plan written as a scenario file that reads like a hand-written one: block style, plain
//! scalars where YAML reads them back unchanged (JSON-quoted otherwise), tool inputs as JSON flow
//! maps, and comments saying where each part came from. A system prompt shared by several agents
//! is written once (an anchor, then aliases); each tool's schema once, as a comment beside it.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::Value;

use super::plan::{AgentPlan, Entry, EntryPlan, Plan, Times};
use super::routes::RouteChoice;
use super::{Exchange, Skip, Thought};
use crate::mock_llm::book::{HistoryPolicy, MatchRule};
use crate::model::llm::LlmErrorKind;
use crate::model::transcript::Block;

/// A string as a YAML scalar: plain when that reads back as the same string, else JSON-quoted.
pub(super) fn scalar(s: &str) -> String {
    let plain = s.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && !s.ends_with(' ')
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || " _.,()'!?/-".contains(c))
        && !matches!(
            s.to_ascii_lowercase().as_str(),
            "y" | "n" | "yes" | "no" | "on" | "off" | "true" | "false" | "null"
        );
    if plain {
        s.to_owned()
    } else {
        json(&Value::String(s.to_owned()))
    }
}

/// A string as a scalar inside a flow collection (`{ ... }`, `[ ... ]`), where a comma ends a
/// plain scalar: JSON-quoted when it has one.
fn flow_scalar(s: &str) -> String {
    if s.contains(',') {
        json(&Value::String(s.to_owned()))
    } else {
        scalar(s)
    }
}

/// A JSON value as a YAML flow value, as a person writes one (`{ city: Paris, days: 3 }`):
/// strings as [`flow_scalar`], numbers, booleans and `null` as JSON has them.
pub(super) fn flow(v: &Value) -> String {
    match v {
        Value::String(s) => flow_scalar(s),
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(flow).collect();
            format!("[{}]", items.join(", "))
        }
        Value::Object(fields) if fields.is_empty() => "{}".to_owned(),
        Value::Object(fields) => {
            let fields: Vec<String> = fields
                .iter()
                .map(|(k, v)| format!("{}: {}", flow_scalar(k), flow(v)))
                .collect();
            format!("{{ {} }}", fields.join(", "))
        }
        other => json(other),
    }
}

fn json(v: &Value) -> String {
    serde_json::to_string(v).expect("JSON serialises")
}

/// Text for a one-line comment.
fn comment(s: &str) -> String {
    s.replace(['\n', '\r'], " ")
}

fn kind_name(kind: LlmErrorKind) -> &'static str {
    match kind {
        LlmErrorKind::RateLimit => "rate_limit",
        LlmErrorKind::Overloaded => "overloaded",
        LlmErrorKind::Network => "network",
        LlmErrorKind::Other => "other",
    }
}

fn rule_flow(r: &MatchRule) -> String {
    let mut parts = Vec::new();
    if let Some(m) = &r.model {
        parts.push(format!("model: {}", flow_scalar(m)));
    }
    if let Some(t) = &r.system_contains {
        parts.push(format!("system_contains: {}", flow_scalar(t)));
    }
    if let Some(t) = &r.tools {
        let names: Vec<String> = t.iter().map(|n| flow_scalar(n)).collect();
        parts.push(format!("tools: [{}]", names.join(", ")));
    }
    if let Some(t) = &r.first_user_contains {
        parts.push(format!("first_user_contains: {}", flow_scalar(t)));
    }
    for (k, v) in &r.headers {
        parts.push(format!(
            "headers: {{ {}: {} }}",
            flow_scalar(k),
            flow_scalar(v)
        ));
    }
    format!("{{ {} }}", parts.join(", "))
}

fn tool_use_flow(id: &str, name: &str, input: &Value, explicit: bool) -> String {
    let mut s = format!("{{ name: {}, input: {}", flow_scalar(name), flow(input));
    if explicit {
        let _ = write!(s, ", id: {}", flow_scalar(id));
    }
    s.push_str(" }");
    s
}

/// Where an entry came from, as a comment.
fn origin(entry: &EntryPlan, exchanges: &[Exchange]) -> String {
    let first = &exchanges[entry.exchanges[0]];
    let a = first.address.as_ref().expect("addressed");
    let lines: Vec<String> = entry
        .exchanges
        .iter()
        .map(|&i| exchanges[i].line.to_string())
        .collect();
    let what = match (first.item, entry.exchanges.len() > 1) {
        (false, false) => "line",
        (false, true) => "lines",
        (true, false) => "body",
        (true, true) => "bodies",
    };
    let place = lines.join(", ");
    format!(
        "{what} {place}: conversation {}, turn {}",
        a.conversation, a.turn
    )
}

/// One script entry, as list items under an agent (six spaces of indent for its keys).
fn entry(out: &mut String, e: &EntryPlan, exchanges: &[Exchange]) {
    let _ = writeln!(out, "    # {}", origin(e, exchanges));
    let mut keys: Vec<String> = Vec::new();
    match &e.entry {
        Entry::Stall => keys.push("stall: true".into()),
        Entry::Error(f, times) => {
            let mut parts = vec![format!("kind: {}", kind_name(f.kind))];
            if let Some(m) = &f.message {
                parts.push(format!("message: {}", flow_scalar(m)));
            }
            if f.mid_stream {
                parts.push("mid_stream: true".into());
            }
            match times {
                Times::N(1) => {}
                Times::N(n) => parts.push(format!("times: {n}")),
                Times::Always => parts.push("times: always".into()),
            }
            if let Some(ms) = f.retry_after_ms {
                parts.push(format!("retry_after: {ms}"));
            }
            if parts.len() == 1 {
                keys.push(format!("error: {}", kind_name(f.kind)));
            } else {
                keys.push(format!("error: {{ {} }}", parts.join(", ")));
            }
        }
        Entry::Reply {
            blocks,
            explicit_ids,
            thinking,
        } => reply_keys(&mut keys, blocks, explicit_ids, thinking),
    }
    if let Some(u) = e.usage {
        keys.push(format!(
            "usage: {{ input_tokens: {}, output_tokens: {} }}",
            u.input_tokens, u.output_tokens
        ));
    }
    // A text alone is the shorthand `- text`.
    if keys.len() == 1 {
        if let Some(text) = keys[0].strip_prefix("text: ") {
            let _ = writeln!(out, "    - {text}");
            return;
        }
    }
    for (i, k) in keys.iter().enumerate() {
        let lead = if i == 0 { "    - " } else { "      " };
        let _ = writeln!(out, "{lead}{k}");
    }
}

/// The keys of a reply: `text` then `tool_use` when its blocks come in that order, else `chunks`
/// (which keep any order).
fn reply_keys(
    keys: &mut Vec<String>,
    blocks: &[Block],
    explicit_ids: &[bool],
    thinking: &[Thought],
) {
    // Reasoning a script cannot send (redacted, without text) is listed as a skip.
    let thinking: Vec<&Thought> = thinking.iter().filter(|t| !t.text.is_empty()).collect();
    if blocks.is_empty() && thinking.is_empty() {
        keys.push("empty: true".into());
        return;
    }
    let texts = blocks
        .iter()
        .take_while(|b| matches!(b, Block::Text { .. }))
        .count();
    // `thinking:` is one block of reasoning before the reply's content.
    let thought_first = match thinking.as_slice() {
        [] => true,
        [t] => t.at == 0 && !blocks.is_empty(),
        _ => false,
    };
    let in_order = texts <= 1
        && thought_first
        && blocks[texts..]
            .iter()
            .all(|b| matches!(b, Block::ToolUse { .. }));
    let mut ids = explicit_ids.iter().copied();
    if in_order {
        if let Some(t) = thinking.first() {
            keys.push(format!("thinking: {}", scalar(&t.text)));
        }
        if let Some(Block::Text { text }) = blocks.first() {
            keys.push(format!("text: {}", scalar(text)));
        }
        let uses: Vec<String> = blocks[texts..]
            .iter()
            .filter_map(|b| match b {
                Block::ToolUse { id, name, input } => {
                    Some(tool_use_flow(id, name, input, ids.next().unwrap_or(true)))
                }
                _ => None,
            })
            .collect();
        // A lone delegation with an id mock-llm generates again reads as the file format's
        // shorthand (`use_agent: { agent: task, message: ... }`).
        if let ([Block::ToolUse { name, input, .. }], [false]) = (&blocks[texts..], explicit_ids) {
            if matches!(&**name, "use_agent" | "use_skill") && input.is_object() {
                keys.push(format!("{name}: {}", flow(input)));
                return;
            }
        }
        match uses.len() {
            0 => {}
            1 => keys.push(format!("tool_use: {}", uses[0])),
            _ => {
                let list: Vec<String> = uses.iter().map(|u| format!("  - {u}")).collect();
                keys.push(format!("tool_use:\n      {}", list.join("\n      ")));
            }
        }
        return;
    }
    let mut list = Vec::new();
    let mut thoughts = thinking.iter().peekable();
    for (at, b) in blocks.iter().enumerate() {
        while let Some(t) = thoughts.next_if(|t| t.at <= at) {
            list.push(format!("  - thinking: {}", scalar(&t.text)));
        }
        match b {
            Block::Text { text } => list.push(format!("  - text: {}", scalar(text))),
            Block::ToolUse { id, name, input } => list.push(format!(
                "  - tool_use: {}",
                tool_use_flow(id, name, input, ids.next().unwrap_or(true))
            )),
            Block::ToolResult { .. } => {}
        }
    }
    for t in thoughts {
        list.push(format!("  - thinking: {}", scalar(&t.text)));
    }
    keys.push(format!("chunks:\n      {}", list.join("\n      ")));
}

/// Whether a script name is a fork's (`main#1`) of an agent of the plan.
fn is_fork(plan: &Plan, name: &str) -> bool {
    name.split_once('#')
        .is_some_and(|(base, _)| plan.agents.iter().any(|a| a.name == base))
}

fn agent(
    out: &mut String,
    a: &AgentPlan,
    anchors: &BTreeMap<String, (String, bool)>,
    all_same: bool,
) {
    let _ = writeln!(out, "  {}:", scalar(&a.name));
    if a.name != "main" {
        let kind = if a.skill { "skill" } else { "agent" };
        let _ = writeln!(out, "    kind: {kind}");
    }
    if let Some(system) = &a.system {
        match anchors.get(system) {
            Some((anchor, true)) => {
                let _ = writeln!(out, "    system: &{anchor} {}", scalar(system));
            }
            Some((anchor, false)) => {
                let _ = writeln!(out, "    system: *{anchor}");
            }
            None => {
                let _ = writeln!(out, "    system: {}", scalar(system));
            }
        }
    }
    for (line, other) in &a.other_systems {
        let _ = writeln!(
            out,
            "    # its requests also sent another system prompt (first at line {line}): {}",
            comment(&json(&Value::String(other.clone())))
        );
    }
    match &a.route {
        RouteChoice::Header => {
            out.push_str("    # routed by the header `x-agentsim-agent` its requests carried\n")
        }
        RouteChoice::Default { model: None } => {}
        RouteChoice::Default { model: Some(m) } => {
            let _ = writeln!(out, "    model: {}", scalar(m));
        }
        RouteChoice::Rule(r) => {
            let _ = writeln!(out, "    match: {}", rule_flow(r));
        }
        RouteChoice::Unrouted(rule, why) => {
            let _ = writeln!(out, "    # {}", comment(why));
            if let Some(r) = rule {
                let _ = writeln!(out, "    match: {}", rule_flow(r));
            }
        }
    }
    if a.forks {
        out.push_str("    fork: true\n");
    }
    if a.history == HistoryPolicy::Lenient {
        out.push_str("    # its requests rewrite the history the server sent (a runtime that compacts or trims): only their tool pairing is checked\n");
    }
    if !all_same && a.history != HistoryPolicy::Exact {
        let _ = writeln!(out, "    history: {}", a.history.name());
    }
}

/// The scenario file.
pub(super) fn write(
    plan: &Plan,
    exchanges: &[Exchange],
    skipped: &[Skip],
    name: &str,
    source: &str,
) -> String {
    let mut out = String::new();
    // Where things are in the input: its lines, or its bodies.
    let unit = if exchanges.iter().any(|e| e.item) {
        "body"
    } else {
        "line"
    };
    let replies = exchanges
        .iter()
        .filter(|e| e.outcome != super::Outcome::Unanswered)
        .count();
    let _ = writeln!(
        out,
        "# Imported by `agentsim import` from {}: {} exchanges, {} agents.",
        comment(source),
        replies,
        plan.agents.len()
    );
    out.push_str(
        "# Served by `agentsim mock-llm`, it answers the same requests with the same replies.\n",
    );
    let _ = writeln!(out, "name: {}", scalar(name));
    let policies: Vec<HistoryPolicy> = plan.agents.iter().map(|a| a.history).collect();
    let all_same = policies.windows(2).all(|w| w[0] == w[1]);
    if all_same && policies[0] != HistoryPolicy::Exact {
        let _ = writeln!(out, "history: {}", policies[0].name());
    }
    // System prompts written more than once get an anchor at their first agent.
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for a in plan.agents.iter().filter(|a| !is_fork(plan, &a.name)) {
        if let Some(s) = &a.system {
            *counts.entry(s).or_default() += 1;
        }
    }
    let mut anchors: BTreeMap<String, (String, bool)> = BTreeMap::new();
    out.push_str("agents:\n");
    for a in plan.agents.iter().filter(|a| !is_fork(plan, &a.name)) {
        let mut own = anchors.clone();
        if let Some(s) = a.system.as_ref().filter(|s| counts[s.as_str()] > 1) {
            match anchors.get_mut(s) {
                Some(known) => {
                    known.1 = false;
                    own.insert(s.clone(), known.clone());
                }
                None => {
                    let anchor = format!("system_{}", anchors.len() + 1);
                    anchors.insert(s.clone(), (anchor.clone(), false));
                    own.insert(s.clone(), (anchor, true));
                }
            }
        }
        agent(&mut out, a, &own, all_same);
    }
    out.push_str("llm:\n");
    for a in &plan.agents {
        if is_fork(plan, &a.name) {
            if let RouteChoice::Unrouted(_, why) = &a.route {
                let _ = writeln!(out, "  # {}", comment(why));
            }
        }
        if a.entries.is_empty() {
            let _ = writeln!(out, "  {}: []", scalar(&a.name));
            continue;
        }
        let _ = writeln!(out, "  {}:", scalar(&a.name));
        for e in &a.entries {
            entry(&mut out, e, exchanges);
        }
    }
    if !plan.tools.is_empty() {
        out.push_str("tools:\n");
        for (name, t) in &plan.tools {
            if let Some((line, schema)) = &t.schema {
                let _ = writeln!(
                    out,
                    "  # {} as offered ({unit} {line}): {}",
                    comment(name),
                    comment(&json(schema))
                );
            }
            if !t.other_schemas.is_empty() {
                let lines: Vec<String> = t.other_schemas.iter().map(|l| l.to_string()).collect();
                let _ = writeln!(
                    out,
                    "  # other schemas of it were offered at {unit}s {}",
                    lines.join(", ")
                );
            }
            let call = |(content, is_error): &(String, bool)| {
                if *is_error {
                    format!("{{ result: {}, is_error: true }}", flow_scalar(content))
                } else {
                    scalar(content)
                }
            };
            match &t.results[..] {
                [] => {
                    let _ = writeln!(
                        out,
                        "  {}: {{}}   # no result of it in the log",
                        scalar(name)
                    );
                }
                [first, rest @ ..] if rest.iter().all(|r| r == first) => {
                    let mut s = format!("  {}: {{ result: {}", scalar(name), flow_scalar(&first.0));
                    if first.1 {
                        s.push_str(", is_error: true");
                    }
                    let _ = writeln!(out, "{s} }}");
                }
                all => {
                    let _ = writeln!(out, "  {}:", scalar(name));
                    out.push_str("    calls:\n");
                    for r in all {
                        let _ = writeln!(out, "      - {}", call(r));
                    }
                }
            }
        }
    }
    if !plan.builtins.is_empty() {
        let names: Vec<&str> = plan.builtins.iter().map(String::as_str).collect();
        let _ = writeln!(
            out,
            "# built-in tools the requests offered (agentsim's own, not declared): {}",
            names.join(", ")
        );
    }
    if !skipped.is_empty() {
        out.push_str("# Not in the scripts (also listed on stderr):\n");
        for s in skipped {
            let _ = writeln!(out, "#   {unit} {}: {}", s.line, comment(&s.reason));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::{flow, scalar};

    /// What YAML reads back from `key: <text>`.
    fn read(text: &str) -> Value {
        let doc: serde_json::Map<String, Value> = serde_saphyr::from_str(&format!("k: {text}\n"))
            .unwrap_or_else(|e| panic!("{text}: {e}"));
        doc["k"].clone()
    }

    #[test]
    fn scalars_and_flow_values_read_back_as_written() {
        for s in [
            "Paris",
            "Paris, France",
            "yes",
            "No",
            "null",
            "1.5",
            "18 C",
            "a: b",
            "a #b",
            "- x",
            "",
            " padded ",
            "it's",
            "why?",
            "x\ny",
            "{a}",
            "[1]",
            "~",
            "@at",
            "`t`",
            "true",
        ] {
            assert_eq!(read(&scalar(s)), json!(s), "{s:?} as {}", scalar(s));
        }
        let v = json!({"city": "Paris, France", "days": 3, "ok": true, "none": null,
            "list": ["a", "b, c", 1.5, {"deep": ["NO", "y"]}], "empty": {}, "": "blank key",
            "key: colon": "v", "n": "12"});
        assert_eq!(read(&flow(&v)), v, "{}", flow(&v));
    }
}
