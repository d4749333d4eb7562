//! The agent tree in scenario files (seed 001): naming an agent in a step (`intervene`) or an
//! expectation (`tree`, `agents`), and checking what the tree must be.
//!
//! An agent is named by its frame name (the latest agent of that name: a live one first, else the
//! latest that ended), by a path of frame names from a main frame (`main/skill:plan/agent:x`,
//! following the latest child of each name), or by its agent id.

use uuid::Uuid;

use crate::agents::tree::{InterventionOutcome, Node};
use crate::protocol::Event;
use crate::runtime::Runtime;

use super::format::NodeExpect;
use super::mismatch::Mismatch;

/// The agent `name` names, live or ended.
pub fn find(rt: &Runtime, name: &str) -> Option<Node> {
    let name = name.trim();
    if let Ok(id) = Uuid::parse_str(name) {
        return rt.agent(id);
    }
    let live = rt.tree();
    let by_name = |n: &str, parent: Option<Uuid>| -> Option<Node> {
        let fits = |node: &Node| &*node.name == n && (parent.is_none() || node.parent_id == parent);
        live.iter()
            .rev()
            .find(|node| fits(node))
            .cloned()
            .or_else(|| rt.ended_agents().rev().find(|node| fits(node)).cloned())
    };
    let mut parts = name.split('/');
    let mut node = by_name(parts.next()?, None)?;
    for part in parts {
        node = by_name(part, Some(node.agent_id))?;
    }
    Some(node)
}

/// A path that names live agent `id` in a step (`main/agent:a/fork:a#1`): its frame name after
/// those of its ancestors. `None` when no live agent has the id.
pub fn path_of(rt: &Runtime, id: Uuid) -> Option<String> {
    let mut node = rt.agent(id)?;
    let mut parts = vec![node.name.to_string()];
    while let Some(parent) = node.parent_id.and_then(|p| rt.agent(p)) {
        parts.push(parent.name.to_string());
        node = parent;
    }
    parts.reverse();
    Some(parts.join("/"))
}

/// The id of the agent `name` names (see [`find`]).
pub fn resolve(rt: &Runtime, name: &str) -> Option<Uuid> {
    find(rt, name).map(|n| n.agent_id)
}

fn name_of(rt: &Runtime, id: Option<Uuid>) -> String {
    match id {
        None => "none".to_owned(),
        Some(id) => rt
            .agent(id)
            .map_or_else(|| id.to_string(), |n| n.name.to_string()),
    }
}

/// Checks one node against what a scenario expects of it; `what` prefixes each mismatch.
fn check_node(rt: &Runtime, what: &str, want: &NodeExpect, got: &Node, out: &mut Vec<Mismatch>) {
    let mut expect = |field: &str, expected: String, actual: String| {
        if expected != actual {
            out.push(Mismatch {
                what: format!("{what}.{field}"),
                expected,
                actual,
            });
        }
    };
    if let Some(name) = &want.name {
        expect("name", name.clone(), got.name.to_string());
    }
    if let Some(status) = &want.status {
        expect("status", status.clone(), got.status.to_string());
    }
    if let Some(parent) = &want.parent {
        expect("parent", parent.clone(), name_of(rt, got.parent_id));
    }
    if let Some(result) = &want.result {
        let actual = got
            .result
            .as_deref()
            .map_or_else(|| "none".to_owned(), |r| format!("{r:?}"));
        let expected = if result == "none" {
            result.clone()
        } else {
            format!("{result:?}")
        };
        expect("result", expected, actual);
    }
    if let Some(comment) = &want.user_comment {
        expect(
            "user_comment",
            comment.clone(),
            got.user_comment.to_string(),
        );
    }
    if let Some(content) = &want.user_content {
        expect(
            "user_content",
            format!("{content:?}"),
            format!("{:?}", got.user_content),
        );
    }
    if let Some(subagents) = &want.subagents {
        let actual: Vec<String> = got
            .subagents
            .iter()
            .map(|id| name_of(rt, Some(*id)))
            .collect();
        expect("subagents", format!("{subagents:?}"), format!("{actual:?}"));
    }
    if let Some(want) = &want.metadata_subagents {
        let actual: Option<Vec<String>> = got
            .metadata
            .get("subagents")
            .and_then(|v| v.as_array())
            .map(|children| {
                children
                    .iter()
                    .map(|c| {
                        let field = |k: &str| c.get(k).and_then(|v| v.as_str()).unwrap_or("none");
                        format!("{}: {}", field("status"), field("result"))
                    })
                    .collect()
            });
        let actual = actual.map_or_else(|| "none".to_owned(), |a| format!("{a:?}"));
        expect("metadata_subagents", format!("{want:?}"), actual);
    }
}

/// The `tree` expectation: the live tree, entry by entry.
pub(crate) fn check_tree(rt: &Runtime, want: &[NodeExpect], out: &mut Vec<Mismatch>) {
    let live = rt.tree();
    if live.len() != want.len() {
        let names: Vec<String> = live
            .iter()
            .map(|n| format!("{}:{}", n.name, n.status))
            .collect();
        out.push(Mismatch {
            what: "tree".to_owned(),
            expected: format!("{} live agents", want.len()),
            actual: format!("{} live agents [{}]", live.len(), names.join(", ")),
        });
        return;
    }
    for (i, (w, g)) in want.iter().zip(&live).enumerate() {
        check_node(rt, &format!("tree[{i}]"), w, g, out);
    }
}

/// The `agents` expectation: each named agent, live or ended.
pub(crate) fn check_agents(
    rt: &Runtime,
    want: &std::collections::BTreeMap<String, NodeExpect>,
    out: &mut Vec<Mismatch>,
) {
    for (name, w) in want {
        match find(rt, name) {
            Some(node) => check_node(rt, &format!("agents.{name}"), w, &node, out),
            None => out.push(Mismatch {
                what: format!("agents.{name}"),
                expected: "an agent of that name".to_owned(),
                actual: "none, live or ended".to_owned(),
            }),
        }
    }
}

/// `agent-state` events of conversation `key` in `events`, as `<frame>: <status>`.
pub fn agent_states<'a>(events: impl Iterator<Item = &'a Event>, key: &str) -> Vec<String> {
    events
        .filter_map(|e| match e {
            Event::AgentState {
                key: k,
                frame,
                status,
                ..
            } if &**k == key => Some(format!("{frame}: {status}")),
            _ => None,
        })
        .collect()
}

/// The answers to interventions in `events`, as `accepted`, `not_found`, `refused: <reason>`.
pub fn interventions<'a>(events: impl Iterator<Item = &'a Event>) -> Vec<String> {
    events
        .filter_map(|e| match e {
            Event::Intervention { outcome, .. } => Some(match outcome {
                InterventionOutcome::Accepted => "accepted".to_owned(),
                InterventionOutcome::NotFound => "not_found".to_owned(),
                InterventionOutcome::Refused { reason } => format!("refused: {reason}"),
            }),
            _ => None,
        })
        .collect()
}
