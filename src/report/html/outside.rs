//! The page of a run against an outside runtime (`check --html` and `run --html` with
//! `--runtime`): the verdict, the failure and its rerun command, the sequence of the user, the
//! runtime, the mock model and the scripted tools drawn as SVG (and its Mermaid source), the
//! transcript, and the runtime's last stderr lines.
//!
//! Two pictures of agentsim's own runs are not drawn, and the page says why: the stack depth over
//! virtual time (an outside runtime runs in real time, and its stack is what it reports or what
//! its model requests show, not a record of every push and pop) and the agent tree (agentsim's
//! own runtime's).
//!
//! The caller (`crate::outside_run`) turns its outcome into an [`OutsidePage`]; this module knows
//! nothing of the protocol.

use std::fmt::Write as _;

use super::sequence::{mermaid_of, sequence_svg, Sequence, Step};
use super::{clip, STYLE};
use crate::report::escape::markup;

/// One row of the sequence, in the order it happened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Row {
    /// `from` sends `text` to `to` (`user`, `runtime`, `llm`, `tools`); `reply` draws it dashed.
    Arrow {
        /// Who sends.
        from: &'static str,
        /// Who receives.
        to: &'static str,
        /// What, on one line.
        text: String,
        /// An answer (drawn dashed).
        reply: bool,
    },
    /// A note over a participant; `alarm` draws it red.
    Note {
        /// The participant.
        over: &'static str,
        /// What, on one line.
        text: String,
        /// A failure.
        alarm: bool,
    },
}

/// What the page of an outside run shows.
#[derive(Clone, Debug)]
pub struct OutsidePage<'a> {
    /// The scenario's name.
    pub name: &'a str,
    /// Its file.
    pub path: &'a str,
    /// The seed.
    pub seed: u64,
    /// The runtime's command.
    pub command: &'a str,
    /// What its `ready` offered.
    pub capabilities: &'a [String],
    /// `PASSED`, `PASSED: reproduces X, as expected` or `FAILED: <first line>`.
    pub verdict: String,
    /// The whole failure message, when it failed.
    pub failure: Option<&'a str>,
    /// The command that reruns it.
    pub rerun: String,
    /// The sequence's rows.
    pub rows: Vec<Row>,
    /// The transcript, as text.
    pub transcript: String,
    /// The runtime's last stderr lines.
    pub stderr: &'a [String],
}

/// The participants, in this order, each drawn only if a row names it.
const PARTIES: [&str; 4] = ["user", "runtime", "llm", "tools"];

fn sequence(rows: &[Row]) -> Sequence {
    let named = |p: &str| {
        rows.iter().any(|r| match r {
            Row::Arrow { from, to, .. } => *from == p || *to == p,
            Row::Note { over, .. } => *over == p,
        })
    };
    let participants: Vec<String> = PARTIES
        .iter()
        .filter(|p| named(p))
        .map(|p| (*p).to_owned())
        .collect();
    let at = |p: &str| participants.iter().position(|q| q == p).unwrap_or(0);
    let steps = rows
        .iter()
        .map(|r| match r {
            Row::Arrow {
                from,
                to,
                text,
                reply,
            } => Step::Arrow {
                from: at(from),
                to: at(to),
                text: clip(text),
                reply: *reply,
            },
            Row::Note { over, text, alarm } => Step::Note {
                over: at(over),
                text: clip(text),
                alarm: *alarm,
            },
        })
        .collect();
    Sequence {
        participants,
        steps,
    }
}

/// The run as one self-contained HTML page (no script, no network, the same bytes for the same
/// input).
pub fn outside_page(p: &OutsidePage<'_>) -> String {
    let s = sequence(&p.rows);
    let class = if p.failure.is_some() {
        "failed"
    } else {
        "passed"
    };
    let mut html =
        String::from("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
    let _ = writeln!(
        html,
        "<title>{} (seed {}, runtime): agentsim</title>\n<style>{STYLE}</style>\n</head>\n<body>",
        markup(p.name),
        p.seed
    );
    let capabilities = if p.capabilities.is_empty() {
        "none".to_owned()
    } else {
        p.capabilities.join(", ")
    };
    let _ = writeln!(
        html,
        "<h1>{}</h1>\n<p>{} · seed {} · runtime <code>{}</code> · capabilities {} · <span id=\"verdict\" class=\"verdict {class}\">{}</span></p>",
        markup(p.name),
        markup(p.path),
        p.seed,
        markup(p.command),
        markup(&capabilities),
        markup(&p.verdict)
    );
    if let Some(failure) = p.failure {
        let _ = writeln!(
            html,
            "<pre id=\"failure\">{}</pre>\n<p>rerun: <code>{}</code></p>",
            markup(failure),
            markup(&p.rerun)
        );
    }
    let _ = writeln!(
        html,
        "<h2>Sequence</h2>\n{}\n<details><summary>Mermaid source</summary>\n<pre id=\"mermaid\">{}</pre>\n</details>",
        sequence_svg(&s),
        markup(&mermaid_of(&s))
    );
    html.push_str("<p id=\"not-shown\">Not drawn for a run against an outside runtime: the stack depth over time (the runtime runs in real time, and agentsim sees its stack only as the runtime reports it or its model requests show it, not as a record of every push and pop) and the agent tree (agentsim's own runtime's). The transcript below has every line and model exchange.</p>\n");
    let _ = writeln!(
        html,
        "<h2>Transcript</h2>\n<pre id=\"transcript\">{}</pre>",
        markup(&p.transcript)
    );
    if !p.stderr.is_empty() {
        let _ = writeln!(
            html,
            "<h2>The runtime's last stderr lines</h2>\n<pre id=\"stderr\">{}</pre>",
            markup(&p.stderr.join("\n"))
        );
    }
    html.push_str("</body>\n</html>\n");
    html
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(failure: Option<&str>) -> String {
        let caps = vec!["stack".to_owned()];
        let stderr = vec!["Traceback <x>".to_owned()];
        outside_page(&OutsidePage {
            name: "weather <now>",
            path: "w.yaml",
            seed: 3,
            command: "python3 agent.py",
            capabilities: &caps,
            verdict: failure.map_or("PASSED".to_owned(), |f| format!("FAILED: {f}")),
            failure,
            rerun: "agentsim run w.yaml --runtime 'python3 agent.py' --seed 3".to_owned(),
            rows: vec![
                Row::Arrow {
                    from: "user",
                    to: "runtime",
                    text: "default: weather?".to_owned(),
                    reply: false,
                },
                Row::Arrow {
                    from: "runtime",
                    to: "llm",
                    text: "#1 main".to_owned(),
                    reply: false,
                },
                Row::Note {
                    over: "runtime",
                    text: "step 2: sent".to_owned(),
                    alarm: failure.is_some(),
                },
            ],
            transcript: "user → default (seq 1): \"weather?\"\n".to_owned(),
            stderr: &stderr,
        })
    }

    #[test]
    fn the_page_draws_the_parties_that_took_part_and_says_what_it_does_not_draw() {
        let ok = page(None);
        assert!(ok.starts_with("<!DOCTYPE html>") && ok.ends_with("</html>\n"));
        assert!(!ok.contains("<script"));
        assert!(ok.contains("<title>weather &lt;now&gt; (seed 3, runtime): agentsim</title>"));
        assert!(ok.contains("class=\"verdict passed\">PASSED</span>"));
        // user, runtime and llm took part; the tools did not.
        assert_eq!(ok.matches("<g class=\"participant\">").count(), 3, "{ok}");
        assert!(ok.contains(">default: weather?</text>"), "{ok}");
        assert!(ok.contains("participant P2 as llm"), "{ok}");
        assert!(ok.contains("id=\"not-shown\""));
        assert!(ok.contains("Traceback &lt;x&gt;"));
        assert!(!ok.contains("id=\"failure\""));
        let failed = page(Some("step 2 (expect): sent: expected [a], got [b]"));
        assert!(failed.contains("class=\"verdict failed\""), "{failed}");
        assert!(failed.contains("<g class=\"note alarm\">"), "{failed}");
        assert!(failed.contains(
            "rerun: <code>agentsim run w.yaml --runtime &#39;python3 agent.py&#39; --seed 3</code>"
        ) || failed.contains("rerun: <code>agentsim run w.yaml --runtime 'python3 agent.py' --seed 3</code>"), "{failed}");
    }
}
