//! The HTML page of a run against an outside runtime (`run --html` and `check --html` with
//! `--runtime`): the outcome's lines and the mock server's exchanges, in the order they happened,
//! as the rows of [`crate::report::html::outside_page`].

use serde_json::Value;

use crate::report::html::{outside_page, OutsidePage, Row};

use super::Outcome;

/// The request and the answer of one exchange of the mock server's journal.
fn exchange_rows(line: &Value, rows: &mut Vec<Row>) {
    let n = line.get("exchange").and_then(Value::as_u64).unwrap_or(0);
    let agent = line
        .pointer("/address/agent")
        .and_then(Value::as_str)
        .unwrap_or("no agent");
    let conversation = line
        .get("conversation_header")
        .and_then(Value::as_str)
        .map(|c| format!(" ({c})"))
        .unwrap_or_default();
    rows.push(Row::Arrow {
        from: "runtime",
        to: "llm",
        text: format!("#{n} {agent}{conversation}"),
        reply: false,
    });
    let rendered = crate::mock_llm::transcript::render(line);
    let answer = rendered
        .lines()
        .rev()
        .find_map(|l| l.split_once("← llm").map(|(_, rest)| rest))
        .map(|rest| rest.trim_start_matches(':').trim().to_owned())
        .unwrap_or_else(|| {
            line.get("outcome")
                .and_then(Value::as_str)
                .unwrap_or("no answer")
                .to_owned()
        });
    let failed = line.get("outcome").and_then(Value::as_str) != Some("reply");
    rows.push(Row::Arrow {
        from: "llm",
        to: "runtime",
        text: answer,
        reply: true,
    });
    if failed {
        if let Some(name) = line.get("violation").and_then(Value::as_str) {
            rows.push(Row::Note {
                over: "llm",
                text: format!("#{n}: {name}"),
                alarm: true,
            });
        }
    }
}

impl Outcome {
    /// The run as one self-contained HTML page.
    pub fn html(&self) -> String {
        let mut rows = Vec::new();
        let mut next = 0usize;
        let number = |l: &Value| l.get("exchange").and_then(Value::as_u64).unwrap_or(0);
        for e in &self.entries {
            while next < self.exchanges.len() && number(&self.exchanges[next]) <= e.exchanges {
                exchange_rows(&self.exchanges[next], &mut rows);
                next += 1;
            }
            if let Some(row) = &e.row {
                rows.push(row.clone());
            }
        }
        for line in &self.exchanges[next..] {
            exchange_rows(line, &mut rows);
        }
        let verdict = match (&self.failure, &self.reproduced) {
            (Some(f), _) => format!("FAILED: {}", f.message.lines().next().unwrap_or("")),
            (None, Some(check)) => format!("PASSED: reproduces {check}, as expected"),
            (None, None) => "PASSED".to_owned(),
        };
        if let Some(f) = &self.failure {
            rows.push(Row::Note {
                over: "runtime",
                text: format!("{}: {}", f.kind.name(), f.message),
                alarm: true,
            });
        }
        outside_page(&OutsidePage {
            name: &self.name,
            path: &self.path,
            seed: self.seed,
            command: &self.command,
            capabilities: &self.capabilities,
            verdict,
            failure: self.failure.as_ref().map(|f| f.message.as_str()),
            rerun: self.rerun_command(),
            rows,
            transcript: self.transcript(),
            stderr: &self.stderr,
        })
    }
}
