//! The agent tree of a run (seed 001) as SVG, built from the `agent-state` events.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;

use crate::protocol::Event;
use crate::report::check::markup;
use crate::sim::{Entry, Record};

use super::clip;

/// One agent of the tree as the records tell it.
struct TreeNode {
    id: uuid::Uuid,
    parent: Option<uuid::Uuid>,
    name: Arc<str>,
    status: crate::agents::tree::Status,
    start_ms: u64,
    end_ms: Option<u64>,
    result: Option<Arc<str>>,
}

/// The agent tree (seed 001) as SVG: every agent the run started, nested under the agent that
/// started it, in the order they started, each with its last status (colored), its lifetime in
/// virtual time and its result. Built from the `agent-state` events.
pub(super) fn agent_tree(records: &[Record]) -> String {
    let mut nodes: Vec<TreeNode> = Vec::new();
    let mut index: BTreeMap<uuid::Uuid, usize> = BTreeMap::new();
    for r in records {
        let Entry::Runtime(Event::AgentState {
            agent_id,
            frame,
            parent_id,
            status,
            result,
            ..
        }) = &r.entry
        else {
            continue;
        };
        let i = match index.get(agent_id) {
            Some(&i) => i,
            None => {
                index.insert(*agent_id, nodes.len());
                nodes.push(TreeNode {
                    id: *agent_id,
                    parent: *parent_id,
                    name: frame.clone(),
                    status: *status,
                    start_ms: r.t_ms,
                    end_ms: None,
                    result: None,
                });
                nodes.len() - 1
            }
        };
        let node = &mut nodes[i];
        node.status = *status;
        if status.is_terminal() {
            node.end_ms = Some(r.t_ms);
            node.result = result.clone();
        }
    }
    if nodes.is_empty() {
        return "<p id=\"tree-empty\">No agent ran.</p>\n".to_owned();
    }
    // Depth-first from the roots, children in the order they started.
    let mut children: BTreeMap<Option<usize>, Vec<usize>> = BTreeMap::new();
    for (i, n) in nodes.iter().enumerate() {
        let parent = n.parent.and_then(|p| index.get(&p).copied());
        children.entry(parent).or_default().push(i);
    }
    let mut rows: Vec<(usize, usize)> = Vec::new(); // (node, depth)
    let mut stack: Vec<(usize, usize)> = children
        .get(&None)
        .map(|r| r.iter().rev().map(|&i| (i, 0)).collect())
        .unwrap_or_default();
    while let Some((i, depth)) = stack.pop() {
        rows.push((i, depth));
        if let Some(kids) = children.get(&Some(i)) {
            stack.extend(kids.iter().rev().map(|&k| (k, depth + 1)));
        }
    }
    const ROW: usize = 24;
    const INDENT: usize = 22;
    let height = rows.len() * ROW + 12;
    let mut svg = format!(
        "<svg id=\"tree\" xmlns=\"http://www.w3.org/2000/svg\" width=\"1000\" height=\"{height}\" role=\"img\"><title>agent tree, {} agents</title>\n",
        rows.len()
    );
    let mut y_of: BTreeMap<usize, usize> = BTreeMap::new();
    for (row, &(i, depth)) in rows.iter().enumerate() {
        let n = &nodes[i];
        let (x, y) = (8 + depth * INDENT, 8 + row * ROW);
        y_of.insert(i, y);
        if let Some(py) = n
            .parent
            .and_then(|p| index.get(&p))
            .and_then(|p| y_of.get(p))
        {
            let px = x - INDENT + 8;
            let _ = write!(
                svg,
                "<path class=\"edge\" d=\"M{px} {} V{} H{x}\"/>",
                py + 18,
                y + 9
            );
        }
        let span = match n.end_ms {
            Some(end) => format!("{}–{} ms", n.start_ms, end),
            None => format!("{} ms –", n.start_ms),
        };
        let result = n
            .result
            .as_deref()
            .map(|r| format!(" · {}", clip(r)))
            .unwrap_or_default();
        let _ = writeln!(
            svg,
            "<g class=\"node {status}\" data-status=\"{status}\" data-agent=\"{id}\"><title>{name} ({id})</title><rect x=\"{x}\" y=\"{y}\" width=\"{w}\" height=\"18\" rx=\"4\"/><text x=\"{tx}\" y=\"{ty}\">{name} · {status} · {span}{result}</text></g>",
            status = n.status,
            id = n.id,
            name = markup(&n.name),
            w = 980usize.saturating_sub(x).max(40),
            tx = x + 6,
            ty = y + 13,
            span = markup(&span),
            result = markup(&result),
        );
    }
    svg.push_str("</svg>\n");
    svg
}

#[cfg(test)]
mod tests {
    use crate::report::html;
    use crate::report::html::tests::{outcome, NESTED};

    #[test]
    fn the_agent_tree_nests_every_agent_under_its_parent_with_its_last_status() {
        let page = html::page(&outcome(NESTED));
        assert!(page.contains("<h2>Agent tree</h2>"));
        assert!(
            page.contains("<title>agent tree, 2 agents</title>"),
            "{page}"
        );
        let main = page.find("data-status=\"completed\" data-agent").unwrap();
        let nodes: Vec<&str> = page.matches("<g class=\"node ").collect();
        assert_eq!(nodes.len(), 2);
        assert!(
            page[main..].contains(">main · completed · 0–2000 ms · Done: found it; #1</text>"),
            "{page}"
        );
        assert!(
            page.contains(">skill:research · completed · 0–2000 ms · found</text>"),
            "{page}"
        );
        // The skill is indented under main, with an edge to it.
        assert!(page.contains("<rect x=\"30\" y=\"32\""), "{page}");
        assert_eq!(page.matches("<path class=\"edge\"").count(), 1);
        // A deletion and a fork: statuses as they ended.
        let forked = outcome(
            r#"
name: fork and delete
agents:
  main: { fork: true }
  helper: { kind: agent }
llm:
  main:
    - tool_use: { name: fork, input: { prompt: p } }
    - use_agent: { agent: helper, message: m }
    - stopped
  main#1:
    - forked
  helper:
    - ask_user: which?
steps:
  - user: go
  - intervene: { agent: "agent:helper", comment: delete }
"#,
        );
        let page = html::page(&forked);
        assert!(page.contains("class=\"node deleted\""), "{page}");
        assert!(page.contains(">fork:main#1 · completed"), "{page}");
        assert!(page.contains(">agent:helper · deleted"), "{page}");
        assert!(
            page.contains("<title>agent tree, 3 agents</title>"),
            "{page}"
        );
    }
}
