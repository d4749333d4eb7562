//! A run as pictures: a Mermaid sequence diagram of the user, the frames, the model and the
//! tools (`run --mermaid`), and a self-contained HTML page (`run --html`, `check --html`) with an
//! SVG timeline of every conversation's stack depth over virtual time and its events, the agent
//! tree with each agent's last status, the same sequence drawn as SVG, the Mermaid source, and the
//! transcript. No network, no script, no
//! external asset: the page is one file that opens anywhere. A failing run's page marks the
//! violation (a red cross on the timeline, a red note in the sequence, the verdict in red).
//!
//! Built only from the records, like the transcript: the same run gives the same bytes.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;

use super::check::markup;
use crate::drive::Note;
use crate::protocol::Event;
use crate::scenario::{Failure, Outcome};
use crate::sim::{Entry, Record};

/// One arrow or note of the sequence.
#[derive(Clone, Debug, PartialEq)]
enum Step {
    /// `from` sends `text` to `to`; `reply` draws it dashed.
    Arrow {
        from: usize,
        to: usize,
        text: String,
        reply: bool,
    },
    /// A note over a participant; `alarm` draws it red.
    Note {
        over: usize,
        text: String,
        alarm: bool,
    },
}

/// The sequence of a run: its participants (user, frames in order of appearance, llm, tools)
/// and its steps.
#[derive(Debug, Default)]
struct Sequence {
    participants: Vec<String>,
    steps: Vec<Step>,
}

const USER: usize = 0;

impl Sequence {
    fn participant(&mut self, name: &str) -> usize {
        match self.participants.iter().position(|p| p == name) {
            Some(i) => i,
            None => {
                self.participants.push(name.to_owned());
                self.participants.len() - 1
            }
        }
    }

    fn of(outcome: &Outcome) -> Sequence {
        let mut s = Sequence::default();
        s.participant("user");
        // The frames come first (after the user) in order of appearance; llm and tools last.
        let mut frames: Vec<Arc<str>> = Vec::new();
        for r in &outcome.records {
            if let Entry::Runtime(Event::Push { frame, .. }) = &r.entry {
                if !frames.contains(&frame.name) {
                    frames.push(frame.name.clone());
                }
            }
        }
        for f in &frames {
            s.participant(f);
        }
        let llm = s.participant("llm");
        let tools = s.participant("tools");
        // Per conversation: the frames on its stack (to draw a push from its parent).
        let mut stacks: BTreeMap<Arc<str>, Vec<Arc<str>>> = BTreeMap::new();
        // Tool uses that start a child (their result comes back as the child's pop).
        let mut delegations: Vec<Arc<str>> = Vec::new();
        for r in &outcome.records {
            match &r.entry {
                Entry::Runtime(e) => match e {
                    Event::UserMessage { frame, text, .. } => {
                        let to = s.participant(frame);
                        s.steps.push(Step::Arrow {
                            from: USER,
                            to,
                            text: clip(text),
                            reply: false,
                        });
                    }
                    Event::Queued { text, .. } => s.steps.push(Step::Note {
                        over: USER,
                        text: format!("queued: {}", clip(text)),
                        alarm: false,
                    }),
                    Event::Push { key, frame, .. } => {
                        let stack = stacks.entry(key.clone()).or_default();
                        let to = s.participant(&frame.name);
                        let from = stack.last().cloned();
                        stack.push(frame.name.clone());
                        if let Some(from) = from {
                            let from = s.participant(&from);
                            s.steps.push(Step::Arrow {
                                from,
                                to,
                                text: "push".into(),
                                reply: false,
                            });
                        }
                    }
                    Event::Pop {
                        key, frame, reason, ..
                    } => {
                        let stack = stacks.entry(key.clone()).or_default();
                        stack.pop();
                        let from = s.participant(&frame.name);
                        let reason = format!("pop ({})", super::transcript::reason(*reason));
                        match stack.last().cloned() {
                            Some(parent) => {
                                let to = s.participant(&parent);
                                s.steps.push(Step::Arrow {
                                    from,
                                    to,
                                    text: reason,
                                    reply: true,
                                });
                            }
                            None => s.steps.push(Step::Note {
                                over: from,
                                text: reason,
                                alarm: false,
                            }),
                        }
                    }
                    Event::LlmRequest {
                        frame, iteration, ..
                    } => {
                        let from = s.participant(frame);
                        s.steps.push(Step::Arrow {
                            from,
                            to: llm,
                            text: format!("call {iteration}"),
                            reply: false,
                        });
                    }
                    Event::LlmReply { frame, content, .. } => {
                        let to = s.participant(frame);
                        let text = if content.is_empty() {
                            "empty".to_owned()
                        } else {
                            content
                                .iter()
                                .map(|b| match b {
                                    crate::model::transcript::Block::Text { text } => {
                                        format!("text {}", clip(text))
                                    }
                                    crate::model::transcript::Block::ToolUse { name, .. } => {
                                        format!("tool_use {name}")
                                    }
                                    crate::model::transcript::Block::ToolResult { .. } => {
                                        "tool_result".to_owned()
                                    }
                                })
                                .collect::<Vec<_>>()
                                .join(" + ")
                        };
                        s.steps.push(Step::Arrow {
                            from: llm,
                            to,
                            text: clip(&text),
                            reply: true,
                        });
                    }
                    Event::LlmError { frame, message, .. } => {
                        let to = s.participant(frame);
                        s.steps.push(Step::Arrow {
                            from: llm,
                            to,
                            text: format!("error: {}", clip(message)),
                            reply: true,
                        });
                    }
                    Event::ToolCall {
                        frame,
                        name,
                        tool_use_id,
                        ..
                    } => {
                        if matches!(&**name, "use_skill" | "use_agent" | "complete") {
                            delegations.push(tool_use_id.clone());
                            continue;
                        }
                        let from = s.participant(frame);
                        s.steps.push(Step::Arrow {
                            from,
                            to: tools,
                            text: format!("{name} {tool_use_id}"),
                            reply: false,
                        });
                    }
                    Event::ToolResult {
                        frame,
                        tool_use_id,
                        is_error,
                        ..
                    } => {
                        if delegations.contains(tool_use_id) {
                            continue;
                        }
                        let to = s.participant(frame);
                        s.steps.push(Step::Arrow {
                            from: tools,
                            to,
                            text: format!(
                                "{} {tool_use_id}",
                                if *is_error { "error" } else { "ok" }
                            ),
                            reply: true,
                        });
                    }
                    Event::Sent { frame, text, .. } => {
                        let from = s.participant(frame);
                        s.steps.push(Step::Arrow {
                            from,
                            to: USER,
                            text: clip(text),
                            reply: true,
                        });
                    }
                    Event::Cancelled { text, frames, .. } => s.steps.push(Step::Note {
                        over: USER,
                        text: format!("cancel {:?}: {frames} frames removed", clip(text)),
                        alarm: false,
                    }),
                    _ => {}
                },
                Entry::Sim(Note::Fault { what }) => s.steps.push(Step::Note {
                    over: USER,
                    text: format!("fault: {}", clip(what)),
                    alarm: false,
                }),
                Entry::Sim(_) => {}
            }
        }
        if let Some(message) = violation(outcome) {
            let over = s.participants.len().saturating_sub(3).max(1);
            s.steps.push(Step::Note {
                over: over.min(s.participants.len() - 1),
                text: clip(&message),
                alarm: true,
            });
        }
        s
    }
}

/// What broke, for a failing run: `invariant X: message`, or the failure's first line.
fn violation(outcome: &Outcome) -> Option<String> {
    match &outcome.failure {
        Some(Failure::Run { error, .. }) => Some(match error.violation() {
            Some(v) => format!("violation [{}]: {}", v.invariant, v.message),
            None => error.to_string(),
        }),
        Some(Failure::Expectation {
            step, mismatches, ..
        }) => {
            let keys: Vec<&str> = mismatches.iter().map(|m| m.what.as_str()).collect();
            Some(format!(
                "step {step}: expectation failed: {}",
                keys.join(", ")
            ))
        }
        Some(f) => Some(f.to_string().lines().next().unwrap_or("").to_owned()),
        None => outcome
            .reproduced
            .as_ref()
            .map(|inv| format!("reproduced [{inv}]")),
    }
}

/// At most 60 characters of `text` on one line.
fn clip(text: &str) -> String {
    let one: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if one.chars().count() > 60 {
        let cut: String = one.chars().take(59).collect();
        format!("{cut}…")
    } else {
        one
    }
}

/// Text fit for a Mermaid message: the characters Mermaid reads as syntax replaced.
fn mermaid_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '#' | ';' | ':' | '<' | '>' => {
                let _ = write!(out, "#{};", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

/// The run as a Mermaid sequence diagram.
pub fn mermaid(outcome: &Outcome) -> String {
    let s = Sequence::of(outcome);
    let mut out = String::from("sequenceDiagram\n");
    for (i, p) in s.participants.iter().enumerate() {
        // An alias runs to the end of its line: only `;` and `#` (syntax there) are replaced.
        let alias = p.replace([';', '#'], "_");
        let _ = writeln!(out, "    participant P{i} as {alias}");
    }
    for step in &s.steps {
        match step {
            Step::Arrow {
                from,
                to,
                text,
                reply,
            } => {
                let arrow = if *reply { "-->>" } else { "->>" };
                let _ = writeln!(out, "    P{from}{arrow}P{to}: {}", mermaid_text(text));
            }
            Step::Note { over, text, alarm } => {
                let text = mermaid_text(text);
                if *alarm {
                    let _ = writeln!(out, "    rect rgb(255, 220, 220)");
                    let _ = writeln!(out, "    Note over P{over}: {text}");
                    let _ = writeln!(out, "    end");
                } else {
                    let _ = writeln!(out, "    Note over P{over}: {text}");
                }
            }
        }
    }
    out
}

/// The SVG timeline: a lane per conversation with its stack depth as a step line, and under it a
/// row of markers per kind of event (user, model calls, tool calls, pushes and pops, faults). The
/// x axis is the order of events, so that what happens within one millisecond stays readable;
/// the virtual time is marked along it wherever it moves on. The violation, if any, is a red
/// cross where the run stopped.
fn timeline(records: &[Record], broken: Option<&str>) -> String {
    const ROWS: [&str; 5] = ["user", "llm", "tool", "stack", "fault"];
    let mut keys: Vec<Arc<str>> = Vec::new();
    // (order, time, key, depth after it if it pushed or popped, marker row, title)
    type Point = (usize, u64, Arc<str>, Option<usize>, usize, String);
    let mut points: Vec<Point> = Vec::new();
    let mut last_key: Option<Arc<str>> = None;
    for r in records {
        let (key, depth, row, title) = match &r.entry {
            Entry::Runtime(e) => {
                let (key, depth, row) = match e {
                    Event::Push { key, depth, .. } | Event::Pop { key, depth, .. } => {
                        (key, Some(*depth), 3)
                    }
                    Event::LlmRequest { key, .. } => (key, None, 1),
                    Event::LlmError { key, .. } => (key, None, 4),
                    Event::ToolCall { key, .. } => (key, None, 2),
                    Event::Sent { key, .. } | Event::UserMessage { key, .. } => (key, None, 0),
                    _ => continue,
                };
                (key.clone(), depth, row, super::transcript::line(&r.entry))
            }
            Entry::Sim(Note::Fault { what }) => match &last_key {
                Some(key) => (key.clone(), None, 4, format!("fault injected: {what}")),
                None => continue,
            },
            Entry::Sim(_) => continue,
        };
        if !keys.contains(&key) {
            keys.push(key.clone());
        }
        last_key = Some(key.clone());
        points.push((points.len(), r.t_ms, key, depth, row, title));
    }
    if keys.is_empty() {
        keys.push("default".into());
    }
    let n = points.len().max(2) - 1;
    let max_depth = points.iter().filter_map(|p| p.3).max().unwrap_or(1).max(1);
    let (left, width) = (120.0, 760.0);
    let depth_h = 16.0 * max_depth as f64;
    let lane = 20.0 + depth_h + 10.0 * ROWS.len() as f64 + 16.0;
    let height = 44.0 + lane * keys.len() as f64;
    let x = |j: usize| left + width * j as f64 / n as f64;
    let total = left + width + 20.0;
    let mut svg = format!(
        "<svg id=\"timeline\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{total}\" height=\"{height}\" viewBox=\"0 0 {total} {height}\" role=\"img\" aria-label=\"stack depth over virtual time\">\n"
    );
    let end_ms = records.iter().map(|r| r.t_ms).max().unwrap_or(0);
    let _ = writeln!(
        svg,
        "<text x=\"{left}\" y=\"12\" class=\"axis\">virtual time, 0 to {end_ms} ms (marked where it moves on), events in order</text>"
    );
    // Time ticks where the time moves on, labels at least 44 px apart.
    let mut last_label = f64::NEG_INFINITY;
    let mut last_t = None;
    for p in &points {
        if last_t == Some(p.1) {
            continue;
        }
        last_t = Some(p.1);
        let px = x(p.0);
        let _ = writeln!(
            svg,
            "<line class=\"tick\" x1=\"{px:.1}\" y1=\"26\" x2=\"{px:.1}\" y2=\"{:.1}\"/>",
            height - 8.0
        );
        if px - last_label >= 44.0 {
            last_label = px;
            let _ = writeln!(
                svg,
                "<text class=\"time\" x=\"{px:.1}\" y=\"24\" text-anchor=\"middle\">{}ms</text>",
                p.1
            );
        }
    }
    for (k, key) in keys.iter().enumerate() {
        let top = 36.0 + lane * k as f64;
        let base = top + 10.0 + depth_h;
        let y = |d: usize| base - 16.0 * d as f64;
        let _ = writeln!(
            svg,
            "<g class=\"lane\" data-key=\"{}\"><text x=\"4\" y=\"{:.1}\" class=\"key\">{}</text><line x1=\"{left}\" y1=\"{base:.1}\" x2=\"{:.1}\" y2=\"{base:.1}\" class=\"base\"/>",
            markup(key),
            base,
            markup(&clip(key)),
            left + width
        );
        let mut line = format!("{left},{base:.1}");
        let mut current = 0usize;
        for p in points.iter().filter(|p| &p.2 == key) {
            if let Some(d) = p.3 {
                let px = x(p.0);
                let _ = write!(line, " {px:.1},{:.1} {px:.1},{:.1}", y(current), y(d));
                current = d;
            }
        }
        let _ = write!(line, " {:.1},{:.1}", left + width, y(current));
        let _ = writeln!(svg, "<polyline class=\"depth\" points=\"{line}\"/>");
        for (r, name) in ROWS.iter().enumerate() {
            let _ = writeln!(
                svg,
                "<text x=\"{:.1}\" y=\"{:.1}\" class=\"row\" text-anchor=\"end\">{name}</text>",
                left - 6.0,
                base + 14.0 + 10.0 * r as f64
            );
        }
        for p in points.iter().filter(|p| &p.2 == key) {
            let kind = if p.4 == 3 {
                if p.3.is_some_and(|d| d > 0) && p.5.starts_with("push") {
                    "push"
                } else {
                    "pop"
                }
            } else {
                ROWS[p.4]
            };
            let _ = writeln!(
                svg,
                "<circle class=\"mark {kind}\" cx=\"{:.1}\" cy=\"{:.1}\" r=\"3.5\"><title>[{}ms] {}</title></circle>",
                x(p.0),
                base + 11.0 + 10.0 * p.4 as f64,
                p.1,
                markup(&p.5)
            );
        }
        let _ = svg.write_str("</g>\n");
    }
    if let Some(message) = broken {
        let px = x(n);
        let py = 36.0 + 10.0;
        let _ = writeln!(
            svg,
            "<g class=\"violation\"><line x1=\"{:.1}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\"/><line x1=\"{:.1}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\"/><title>{}</title></g>",
            px - 8.0,
            py - 8.0,
            px + 8.0,
            py + 8.0,
            px - 8.0,
            py + 8.0,
            px + 8.0,
            py - 8.0,
            markup(message)
        );
    }
    svg.push_str("</svg>\n");
    svg
}

/// The sequence drawn as SVG: a lifeline per participant, a row per arrow or note.
fn sequence_svg(s: &Sequence) -> String {
    let col = 150.0;
    let row = 26.0;
    let width = 40.0 + col * s.participants.len() as f64;
    let height = 60.0 + row * (s.steps.len() as f64 + 1.0);
    let cx = |i: usize| 20.0 + col * i as f64 + col / 2.0;
    let mut svg = format!(
        "<svg id=\"sequence\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" viewBox=\"0 0 {width} {height}\" role=\"img\" aria-label=\"sequence diagram\">\n<defs><marker id=\"arrow\" viewBox=\"0 0 10 10\" refX=\"9\" refY=\"5\" markerWidth=\"7\" markerHeight=\"7\" orient=\"auto-start-reverse\"><path d=\"M 0 0 L 10 5 L 0 10 z\"/></marker></defs>\n"
    );
    for (i, p) in s.participants.iter().enumerate() {
        let x = cx(i);
        let _ = writeln!(
            svg,
            "<g class=\"participant\"><rect x=\"{:.1}\" y=\"8\" width=\"{:.1}\" height=\"26\" rx=\"4\"/><text x=\"{x:.1}\" y=\"26\" text-anchor=\"middle\">{}</text><line class=\"lifeline\" x1=\"{x:.1}\" y1=\"34\" x2=\"{x:.1}\" y2=\"{:.1}\"/></g>",
            x - col / 2.0 + 8.0,
            col - 16.0,
            markup(&clip(p)),
            height - 10.0
        );
    }
    for (n, step) in s.steps.iter().enumerate() {
        let y = 60.0 + row * n as f64;
        match step {
            Step::Arrow {
                from,
                to,
                text,
                reply,
            } => {
                let (x1, x2) = (cx(*from), cx(*to));
                let _ = writeln!(
                    svg,
                    "<g class=\"message{}\"><line x1=\"{x1:.1}\" y1=\"{y:.1}\" x2=\"{x2:.1}\" y2=\"{y:.1}\" marker-end=\"url(#arrow)\"/><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text></g>",
                    if *reply { " reply" } else { "" },
                    (x1 + x2) / 2.0,
                    y - 4.0,
                    markup(text)
                );
            }
            Step::Note { over, text, alarm } => {
                let x = cx(*over);
                let _ = writeln!(
                    svg,
                    "<g class=\"note{}\"><rect x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"20\"/><text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text></g>",
                    if *alarm { " alarm" } else { "" },
                    x - col * 0.9,
                    y - 15.0,
                    col * 1.8,
                    y,
                    markup(text)
                );
            }
        }
    }
    svg.push_str("</svg>\n");
    svg
}

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
fn agent_tree(records: &[Record]) -> String {
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

const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:24px;color:#222}
h1{font-size:20px}h2{font-size:16px;margin-top:28px}
.verdict{padding:6px 10px;border-radius:4px;display:inline-block}
.verdict.passed{background:#e3f5e1}.verdict.failed{background:#fde2e2;color:#900}
pre{background:#f6f6f6;padding:10px;overflow-x:auto;font-size:12px}
svg text{font-size:11px;font-family:ui-monospace,monospace}
.axis{fill:#666}.key{fill:#333}.base{stroke:#ccc}
.depth{fill:none;stroke:#2563eb;stroke-width:2}.tick{stroke:#eee}.time,.row{fill:#888;font-size:9px}
.mark.llm{fill:#2563eb}.mark.tool{fill:#ea580c}.mark.fault{fill:#7c3aed}
.mark.push,.mark.pop{fill:#16a34a}.mark.user{fill:#555}
.violation line{stroke:#dc2626;stroke-width:3}
.participant rect{fill:#eef2ff;stroke:#6366f1}.lifeline{stroke:#bbb;stroke-dasharray:4 3}
.message line{stroke:#333}.message.reply line{stroke-dasharray:5 3}
.note rect{fill:#fff8c5;stroke:#d4a72c}.note.alarm rect{fill:#fde2e2;stroke:#dc2626}
.note.alarm text{fill:#900}
.edge{fill:none;stroke:#999}.node rect{stroke:#888;fill:#f3f4f6}
.node.running rect{fill:#dbeafe;stroke:#2563eb}.node.awaiting_user rect{fill:#fef3c7;stroke:#d97706}
.node.modified rect{fill:#ede9fe;stroke:#7c3aed}.node.completed rect{fill:#dcfce7;stroke:#16a34a}
.node.error rect{fill:#fee2e2;stroke:#dc2626}.node.deleted rect{fill:#e5e7eb;stroke:#6b7280}
.node.deleted text{text-decoration:line-through}";

/// The run as one self-contained HTML page.
pub fn page(outcome: &Outcome) -> String {
    let sequence = Sequence::of(outcome);
    let broken = violation(outcome).filter(|_| outcome.failure.is_some());
    // A failure's first line goes in the header; the whole of it, expected above actual as on a
    // terminal, in a block of its own below.
    let verdict = match &outcome.failure {
        Some(f) => format!("FAILED: {}", f.to_string().lines().next().unwrap_or("")),
        None => super::transcript::verdict(outcome),
    };
    let class = if outcome.failure.is_some() {
        "failed"
    } else {
        "passed"
    };
    let mut html =
        String::from("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
    let _ = writeln!(
        html,
        "<title>{} (seed {}): agentsim</title>\n<style>{STYLE}</style>\n</head>\n<body>",
        markup(&outcome.name),
        outcome.seed
    );
    let _ = writeln!(
        html,
        "<h1>{}</h1>\n<p>{} · seed {} · {} records · <span id=\"verdict\" class=\"verdict {class}\">{}</span></p>",
        markup(&outcome.name),
        markup(&outcome.path),
        outcome.seed,
        outcome.records.len(),
        markup(&verdict)
    );
    if let Some(failure) = &outcome.failure {
        let _ = writeln!(
            html,
            "<pre id=\"failure\">{}</pre>\n<p>rerun: <code>{}</code></p>",
            markup(&super::diff::failure_text(failure, false)),
            markup(&outcome.rerun_command())
        );
    }
    let _ = writeln!(
        html,
        "<h2>Stack depth over time</h2>\n{}",
        timeline(&outcome.records, broken.as_deref())
    );
    let _ = writeln!(
        html,
        "<h2>Agent tree</h2>\n{}",
        agent_tree(&outcome.records)
    );
    let _ = writeln!(
        html,
        "<h2>Sequence</h2>\n{}\n<details><summary>Mermaid source</summary>\n<pre id=\"mermaid\">{}</pre>\n</details>",
        sequence_svg(&sequence),
        markup(&mermaid(outcome))
    );
    let _ = writeln!(
        html,
        "<h2>Transcript</h2>\n<pre id=\"transcript\">{}</pre>\n</body>\n</html>",
        markup(&super::transcript::text(outcome))
    );
    html
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::{self, RunOptions};

    fn outcome(yaml: &str) -> Outcome {
        let s = scenario::parse(yaml, std::path::Path::new("t.yaml")).expect("loads");
        scenario::run(
            &s,
            RunOptions {
                seed: None,
                observe: true,
            },
        )
    }

    const NESTED: &str = r#"
name: nested <run> & more
agents:
  research: { kind: skill }
llm:
  main:
    - use_skill: { skill: research, message: look it up }
    - "Done: found it; #1"
  research:
    - tool_use: { name: search, input: { q: x } }
    - complete: found
tools:
  search: { result: ok, after: 2s }
steps:
  - user: find it
"#;

    #[test]
    fn mermaid_names_every_participant_and_arrow_in_order() {
        let m = mermaid(&outcome(NESTED));
        let lines: Vec<&str> = m.lines().collect();
        assert_eq!(lines[0], "sequenceDiagram");
        assert_eq!(
            lines[1..6],
            [
                "    participant P0 as user",
                "    participant P1 as main",
                "    participant P2 as skill:research",
                "    participant P3 as llm",
                "    participant P4 as tools",
            ]
        );
        let arrows: Vec<&str> = lines[6..].iter().map(|l| l.trim()).collect();
        assert_eq!(arrows[0], "P0->>P1: find it");
        assert!(arrows.contains(&"P1->>P2: push"), "{m}");
        assert!(arrows.contains(&"P2->>P4: search toolu_02"), "{m}");
        assert!(arrows.contains(&"P4-->>P2: ok toolu_02"), "{m}");
        assert!(arrows.contains(&"P2-->>P1: pop (completed)"), "{m}");
        // Message text never carries Mermaid syntax.
        assert!(
            arrows.contains(&"P1-->>P0: Done#58; found it#59; #35;1"),
            "{m}"
        );
    }

    #[test]
    fn the_page_is_self_contained_well_formed_and_marks_a_violation() {
        let page = page(&outcome(NESTED));
        assert!(page.starts_with("<!DOCTYPE html>"));
        assert!(!page.contains("http://") || !page.contains("src=\"http"));
        assert!(!page.contains("<script"), "no script, no network");
        assert!(page.contains("<title>nested &lt;run&gt; &amp; more (seed 0): agentsim</title>"));
        assert!(page.contains("virtual time, 0 to 2000 ms"));
        assert!(page.contains(">2000ms</text>"));
        assert!(page.contains("class=\"verdict passed\""));
        assert!(page.contains("<polyline class=\"depth\""));
        assert!(!page.contains("class=\"violation\""));
        // A failing run: a red cross on the timeline and a red note in the sequence.
        let broken = NESTED.replace(
            "steps:\n  - user: find it\n",
            "settings: { planted_bug: double-delivery }\nsteps:\n  - user: find it\n",
        );
        let o = outcome(&broken);
        assert!(o.failure.is_some());
        let page = super::page(&o);
        assert!(page.contains("class=\"verdict failed\""), "{page}");
        assert!(page.contains("<g class=\"violation\">"), "{page}");
        assert!(page.contains("<g class=\"note alarm\">"), "{page}");
        assert!(page.contains("violation [tool-pairing]"), "{page}");
        assert!(page.contains("rerun: <code>agentsim run t.yaml --seed 0</code>"));
    }

    #[test]
    fn a_failed_expectation_shows_expected_above_actual_and_names_its_keys() {
        let wrong = format!("{NESTED}  - expect: {{ sent: [\"Done: lost it\"], depth: 0 }}\n");
        let o = outcome(&wrong);
        let page = page(&o);
        // The terminal's text, line for line, in a block that keeps its lines.
        let block = page
            .split("<pre id=\"failure\">")
            .nth(1)
            .and_then(|rest| rest.split("</pre>").next())
            .expect("a failure block");
        assert_eq!(
            block,
            "step 2 (line 16, column 5): expectation failed\n    sent:\n      expected: [&quot;Done: lost it&quot;]\n      actual:   [&quot;Done: found it; #1&quot;]"
        );
        assert!(
            page.contains("FAILED: step 2 (line 16, column 5): expectation failed</span>"),
            "{page}"
        );
        // The sequence's note names the key that failed.
        assert!(page.contains("step 2: expectation failed: sent"), "{page}");
    }

    #[test]
    fn the_agent_tree_nests_every_agent_under_its_parent_with_its_last_status() {
        let page = page(&outcome(NESTED));
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
        let page = super::page(&forked);
        assert!(page.contains("class=\"node deleted\""), "{page}");
        assert!(page.contains(">fork:main#1 · completed"), "{page}");
        assert!(page.contains(">agent:helper · deleted"), "{page}");
        assert!(
            page.contains("<title>agent tree, 3 agents</title>"),
            "{page}"
        );
    }

    #[test]
    fn every_event_has_its_marker_in_its_row() {
        let o = outcome(NESTED);
        let page = page(&o);
        let marks = page.matches("<circle class=\"mark ").count();
        let expected = o
            .records
            .iter()
            .filter(|r| {
                matches!(
                    r.entry,
                    Entry::Runtime(
                        Event::Push { .. }
                            | Event::Pop { .. }
                            | Event::LlmRequest { .. }
                            | Event::LlmError { .. }
                            | Event::ToolCall { .. }
                            | Event::Sent { .. }
                            | Event::UserMessage { .. }
                    )
                )
            })
            .count();
        assert_eq!(marks, expected);
        assert_eq!(page.matches("<circle class=\"mark push\"").count(), 2);
        assert_eq!(page.matches("<circle class=\"mark pop\"").count(), 2);
    }
}
