//! A run as pictures: a Mermaid sequence diagram of the user, the frames, the model and the
//! tools (`run --mermaid`), and a self-contained HTML page (`run --html`, `check --html`) with an
//! SVG timeline of every conversation's stack depth over virtual time and its events, the agent
//! tree with each agent's last status, the same sequence drawn as SVG, the Mermaid source, and the
//! transcript. No network, no script, no
//! external asset: the page is one file that opens anywhere. A failing run's page marks the
//! violation (a red cross on the timeline, a red note in the sequence, the verdict in red).
//!
//! Built only from the records, like the transcript: the same run gives the same bytes.
//!
//! This file holds the page; its pictures are `sequence.rs` (also the Mermaid diagram),
//! `timeline.rs` and `tree.rs`. `outside.rs` is the page of a run against an outside runtime:
//! the same sequence and transcript, without the pictures only agentsim's own runs have.

mod outside;
mod sequence;
mod timeline;
mod tree;

use std::fmt::Write as _;

use super::check::markup;
use crate::scenario::{Failure, Outcome};

pub use outside::{outside_page, OutsidePage, Row};
pub use sequence::mermaid;
use sequence::{sequence_svg, Sequence};
use timeline::timeline;
use tree::agent_tree;

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

    pub(super) fn outcome(yaml: &str) -> Outcome {
        let s = scenario::parse(yaml, std::path::Path::new("t.yaml")).expect("loads");
        scenario::run(
            &s,
            RunOptions {
                seed: None,
                observe: true,
            },
        )
    }

    pub(super) const NESTED: &str = r#"
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
}
