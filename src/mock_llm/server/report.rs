//! What the server saw: each finding (a broken rule, or a request the scenario had no reply for),
//! and the [`Report`] of a run, at shutdown or on `GET /_agentsim/report`.

use std::sync::atomic::Ordering;

use axum::response::Response;
use serde::Serialize;
use serde_json::Value;

use super::{error_response, lock, Shared};
use crate::mock_llm::book::Address;
use crate::wire::reply::ErrorReply;

/// A broken rule or a request the script could not answer, as the report lists it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// The exchange's number, from 1.
    pub exchange: u64,
    /// The invariant broken (`tool-pairing`, `replayed-history`, `request-format`), or `None`
    /// for a request the scenario has no reply for.
    pub invariant: Option<&'static str>,
    /// What was seen.
    pub message: String,
    /// Where it was routed, as far as it got.
    pub address: Option<Address>,
    /// The agent a request refused before it was routed would have gone to (a broken wire
    /// rule), when the server could tell.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
}

/// What the server saw, at shutdown or on `GET /_agentsim/report`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Report {
    /// The scenario's name.
    pub scenario: String,
    /// Exchanges served.
    pub exchanges: u64,
    /// Conversations seen.
    pub conversations: usize,
    /// Broken rules (the runtime under test misbehaved).
    pub violations: Vec<Finding>,
    /// Requests the scenario had no reply for.
    pub misses: Vec<Finding>,
    /// Script entries never served, per agent (1-based).
    pub unused: Vec<UnusedReplies>,
    /// The invariant the scenario expects to break, if it reproduces a bug.
    pub expect_violation: Option<String>,
    /// The random faults' settings, if any, and how many were injected.
    pub faults: Option<FaultSummary>,
    /// Whether the run passed: nothing broken, missed or left unused; or, with
    /// `expect_violation`, that invariant broken.
    pub passed: bool,
}

/// The random faults of a run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FaultSummary {
    /// The share of replies replaced.
    pub rate: f64,
    /// The seed: the same seed and runtime give the same faults.
    pub seed: u64,
    /// How many were injected.
    pub injected: u64,
}

/// One agent's script entries that were never served.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct UnusedReplies {
    /// The agent.
    pub agent: String,
    /// The entries, 1-based.
    pub entries: Vec<usize>,
}

impl Report {
    /// The report as text, one finding a line.
    pub fn text(&self) -> String {
        let mut out = format!(
            "mock-llm: {}: {} exchanges, {} conversations\n",
            self.scenario, self.exchanges, self.conversations
        );
        for f in &self.violations {
            out.push_str(&format!(
                "  violation [{}] at exchange {}{}: {}\n",
                f.invariant.unwrap_or("?"),
                f.exchange,
                at(&f.address),
                f.message
            ));
        }
        for f in &self.misses {
            out.push_str(&format!(
                "  no reply at exchange {}{}: {}\n",
                f.exchange,
                at(&f.address),
                f.message
            ));
        }
        for u in &self.unused {
            let list = u
                .entries
                .iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join(", ");
            out.push_str(&format!(
                "  never served: agent `{}`, {} {list}\n",
                u.agent,
                if u.entries.len() == 1 {
                    "entry"
                } else {
                    "entries"
                }
            ));
        }
        if let Some(f) = &self.faults {
            out.push_str(&format!(
                "  faults: {} injected at rate {} with seed {} (replay: --faults {} --seed {})\n",
                f.injected, f.rate, f.seed, f.rate, f.seed
            ));
        }
        match (&self.expect_violation, self.passed) {
            (Some(inv), true) => out.push_str(&format!("PASS: {inv} broken, as expected\n")),
            (Some(inv), false) => {
                out.push_str(&format!("FAIL: expected {inv} to break, and it did not\n"))
            }
            (None, true) => out.push_str("PASS\n"),
            (None, false) => out.push_str("FAIL\n"),
        }
        out
    }
}

fn at(address: &Option<Address>) -> String {
    match address {
        Some(a) => format!(
            " (agent `{}`, conversation {}, turn {})",
            a.agent, a.conversation, a.turn
        ),
        None => String::new(),
    }
}

/// What a refused request broke, for the report: the invariant (none for a request the scenario
/// has no reply for), the message, and where it was routed.
pub(super) type Broken = (Option<&'static str>, String, Option<Address>);

impl Shared {
    pub(super) fn report(&self) -> Report {
        let book = lock(&self.book);
        let (violations, misses) = lock(&self.findings).clone();
        let unused: Vec<UnusedReplies> = book
            .unused()
            .into_iter()
            .map(|(agent, entries)| UnusedReplies { agent, entries })
            .collect();
        let passed = match &self.expect_violation {
            Some(inv) => violations.iter().any(|v| v.invariant == Some(inv.as_str())),
            None => violations.is_empty() && misses.is_empty() && unused.is_empty(),
        };
        Report {
            scenario: self.name.clone(),
            exchanges: self.exchanges.load(Ordering::SeqCst),
            conversations: book.conversations(),
            violations,
            misses,
            unused,
            expect_violation: self.expect_violation.clone(),
            faults: self.faults.map(|f| FaultSummary {
                rate: f.rate,
                seed: f.seed,
                injected: self.injected.load(Ordering::SeqCst),
            }),
            passed,
        }
    }

    /// Answers with `error`, journals the exchange as `outcome`, and reports what it broke.
    pub(super) fn refuse(
        &self,
        mut line: Value,
        n: u64,
        error: ErrorReply,
        outcome: &str,
        broken: Option<Broken>,
        request_id: &str,
    ) -> Response {
        line["status"] = error.status.into();
        line["outcome"] = outcome.into();
        line["response"] = error.body.clone();
        let finding = broken.map(|(invariant, message, address)| {
            if let Some(inv) = invariant {
                line["violation"] = inv.into();
            }
            if address.is_some() {
                line["address"] = serde_json::to_value(&address).expect("serialises");
            }
            // A request refused before routing names the agent it was for, when the server
            // could tell (see `exchange`).
            let agent = address
                .is_none()
                .then(|| line.get("agent").and_then(Value::as_str).map(str::to_owned))
                .flatten();
            Finding {
                exchange: n,
                invariant,
                message,
                address,
                agent,
            }
        });
        self.record(&line, finding);
        error_response(&error, request_id, None)
    }
}
