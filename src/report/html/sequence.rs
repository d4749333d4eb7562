//! The sequence of a run: its participants (the user, the frames in order of appearance, the
//! model, the tools) and its arrows and notes, drawn as a Mermaid diagram ([`mermaid`]) and as
//! SVG for the page.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;

use crate::drive::Note;
use crate::protocol::Event;
use crate::report::check::markup;
use crate::scenario::Outcome;
use crate::sim::Entry;

use super::{clip, violation};

/// One arrow or note of the sequence.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Step {
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
pub(super) struct Sequence {
    pub(super) participants: Vec<String>,
    pub(super) steps: Vec<Step>,
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

    pub(super) fn of(outcome: &Outcome) -> Sequence {
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
                        let reason =
                            format!("pop ({})", crate::report::transcript::reason(*reason));
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

/// Text fit for a Mermaid message: the characters Mermaid reads as syntax replaced.
pub(super) fn mermaid_text(text: &str) -> String {
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
    mermaid_of(&Sequence::of(outcome))
}

/// A sequence as a Mermaid sequence diagram.
pub(super) fn mermaid_of(s: &Sequence) -> String {
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

/// The sequence drawn as SVG: a lifeline per participant, a row per arrow or note.
pub(super) fn sequence_svg(s: &Sequence) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::html::tests::{outcome, NESTED};

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
}
