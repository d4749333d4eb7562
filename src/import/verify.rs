//! The written file checked against the log before it is given out: loaded as a scenario, its
//! book is asked every request of the log in order, and each must be routed to the agent the log
//! names and answered as the log has it (the same blocks and tool use ids, the same usage where
//! the log gives one, the same kind of fault, a stall). Where it is not, the plan is settled and
//! written again: an agent whose history another agent continues or its runtime rewrites gets
//! `history: continuation`, then `lenient`; every tool use id is written out; a usage the server
//! would not estimate is written. What still differs is an error at the exchange's line.

use std::path::Path;

use super::plan::Plan;
use super::{yaml, Exchange, ImportError, Outcome, Skip, Thought};
use crate::mock_llm::book::{Answer, Book, HistoryPolicy, AGENT_HEADER, REPLAYED_HISTORY};
use crate::model::llm::Usage;
use crate::model::transcript::Block;
use crate::wire::reply::OutBlock;

/// An exchange the written file does not reproduce.
struct Divergence {
    exchange: usize,
    /// The agent whose history the book refused, if it did.
    history_of: Option<String>,
    message: String,
}

/// Writes the plan until the file reproduces every exchange; the file's text and the settled
/// plan.
pub(super) fn settle(
    mut plan: Plan,
    exchanges: &[Exchange],
    skipped: &[Skip],
    name: &str,
    source: &str,
    path: &Path,
) -> Result<(String, Plan), ImportError> {
    let mut ids_written = false;
    // Each round settles one thing for good: a policy raised (twice at most per agent), the ids,
    // the usage.
    let rounds = 2 * plan.agents.len() + 3;
    for _ in 0..rounds {
        let text = yaml::write(&plan, exchanges, skipped, name, source);
        let scenario = crate::scenario::parse(&text, Path::new("imported.yaml")).map_err(|e| {
            ImportError::at(
                path,
                0,
                format!("the scenario written from the log does not load (the log holds what a scenario cannot express, such as a value nested too deep, or agentsim has a bug): {e}"),
            )
        })?;
        match replay(&scenario, exchanges) {
            Ok(usages) if usages.is_empty() => return Ok((text, plan)),
            Ok(usages) => {
                for (i, usage) in usages {
                    let entry = plan
                        .agents
                        .iter_mut()
                        .flat_map(|a| a.entries.iter_mut())
                        .find(|e| e.exchanges.contains(&i));
                    if let Some(entry) = entry {
                        entry.usage = Some(usage);
                    }
                }
            }
            Err(d) => {
                let raised = d.history_of.as_ref().and_then(|agent| {
                    let a = plan.agents.iter_mut().find(|a| a.name == *agent)?;
                    a.history = match a.history {
                        HistoryPolicy::Exact => HistoryPolicy::Continuation,
                        HistoryPolicy::Continuation => HistoryPolicy::Lenient,
                        HistoryPolicy::Lenient => return None,
                    };
                    Some(())
                });
                if raised.is_some() {
                    continue;
                }
                if !ids_written {
                    ids_written = true;
                    plan.explicit_ids();
                    continue;
                }
                let e = &exchanges[d.exchange];
                return Err(ImportError::at(
                    path,
                    e.line,
                    format!(
                        "exchange {}: served back, the written scenario does not answer it as the log does: {} (the log contradicts itself, or holds what a scenario cannot express)",
                        e.number, d.message
                    ),
                ));
            }
        }
    }
    Err(ImportError::at(
        path,
        0,
        "the written scenario did not settle on one that reproduces the log (a bug of agentsim; please report it with the input)",
    ))
}

/// Every exchange asked of the scenario's book, in order: the usages to write (by exchange), or
/// the first exchange answered otherwise than the log says.
fn replay(
    scenario: &crate::scenario::Scenario,
    exchanges: &[Exchange],
) -> Result<Vec<(usize, Usage)>, Divergence> {
    let mut book = Book::from_scenario(scenario);
    let mut usages = Vec::new();
    let mut reasoning = Reasoning::default();
    for (i, e) in exchanges.iter().enumerate() {
        // A body's last request that no reply answers was never asked of a server.
        if e.item && e.outcome == Outcome::Unanswered {
            continue;
        }
        let headers: Vec<(&str, &str)> = e
            .agent_header
            .as_deref()
            .map(|h| (AGENT_HEADER, h))
            .into_iter()
            .collect();
        let mapped;
        let request = if e.request.reasoning.is_empty() {
            &e.request
        } else {
            mapped = reasoning.map(&e.request);
            &mapped
        };
        let got = book.answer(e.provider, request, &headers);
        let agent = e.address.as_ref().map_or("", |a| a.agent.as_str());
        let diverge = |message: String| Divergence {
            exchange: i,
            history_of: None,
            message,
        };
        let (address, answer) = match (&e.outcome, got) {
            (Outcome::Unanswered, _) => continue,
            (_, Err(miss)) => {
                return Err(Divergence {
                    exchange: i,
                    history_of: (miss.violation == Some(REPLAYED_HISTORY)).then(|| {
                        miss.address
                            .as_ref()
                            .map_or(agent.to_owned(), |a| a.agent.clone())
                    }),
                    message: miss.message,
                })
            }
            (_, Ok(found)) => found,
        };
        if address.agent != agent {
            return Err(diverge(format!(
                "it is routed to agent `{}`, not `{agent}`",
                address.agent
            )));
        }
        match (&e.outcome, answer) {
            (
                Outcome::Reply {
                    blocks,
                    usage,
                    thinking,
                },
                Answer::Reply { reply, .. },
            ) => {
                let sent = blocks_of(&reply.blocks);
                if sent != *blocks {
                    return Err(diverge(format!(
                        "the reply differs: {sent:?} instead of {blocks:?}"
                    )));
                }
                reasoning
                    .sent(thinking, &reply.blocks, e.provider)
                    .map_err(diverge)?;
                if let Some(u) = usage.filter(|u| *u != reply.usage) {
                    usages.push((i, u));
                }
            }
            (Outcome::Fault(f), Answer::Error { kind, .. }) if f.kind == kind => {}
            (Outcome::Stall, Answer::Stall) => {}
            (expected, got) => {
                return Err(diverge(format!(
                    "it is answered with {got:?} instead of {expected:?}"
                )))
            }
        }
    }
    Ok(usages)
}

/// A reply's blocks as a request replays them (reasoning is not among a request's blocks).
fn blocks_of(out: &[OutBlock]) -> Vec<Block> {
    out.iter()
        .filter_map(|b| match b {
            OutBlock::Text(_) => Some(Block::text(b.joined().unwrap_or_default())),
            OutBlock::ToolUse {
                id, name, input, ..
            } => Some(Block::ToolUse {
                id: id.as_str().into(),
                name: name.as_str().into(),
                input: std::sync::Arc::new(input.clone()),
            }),
            OutBlock::Thinking { .. } => None,
        })
        .collect()
}

/// The reasoning the log's replies sent, and what the written file's server sends in its place:
/// a request of the log that replays a thinking block or reasoning item is asked with the
/// server's own signature or id instead (a runtime served the file replays what it was sent),
/// and without the reasoning a script cannot send (it never reaches a runtime served the file).
#[derive(Default)]
struct Reasoning {
    /// The log's signature or item id to the server's.
    ids: std::collections::BTreeMap<String, String>,
    /// Ids of reasoning the file does not send (no text).
    dropped: std::collections::BTreeSet<String>,
    /// A reply of the log held a redacted thinking block.
    redacted: bool,
}

impl Reasoning {
    /// Compares a reply's reasoning in the log with what the server sent, and keeps the ids.
    fn sent(
        &mut self,
        log: &[Thought],
        served: &[OutBlock],
        provider: crate::wire::Provider,
    ) -> Result<(), String> {
        let mut at = 0;
        let mut served_thoughts = Vec::new();
        for b in served {
            match b {
                OutBlock::Thinking { id, .. } => {
                    served_thoughts.push((at, id.as_str(), b.reasoning().unwrap_or_default()))
                }
                _ => at += 1,
            }
        }
        // OpenAI Chat has no place for reasoning: a Chat reply's log has none either.
        let wanted: Vec<&Thought> = log
            .iter()
            .filter(|t| !t.text.is_empty() && provider != crate::wire::Provider::OpenAiChat)
            .collect();
        let same = wanted.len() == served_thoughts.len()
            && wanted
                .iter()
                .zip(&served_thoughts)
                .all(|(t, (at, _, text))| t.at == *at && t.text == *text);
        if !same {
            let log: Vec<(usize, &str)> = wanted.iter().map(|t| (t.at, t.text.as_str())).collect();
            let sent: Vec<(usize, &str)> = served_thoughts
                .iter()
                .map(|(a, _, t)| (*a, t.as_str()))
                .collect();
            return Err(format!(
                "the reply's reasoning differs (place among its blocks, text): {sent:?} instead of {log:?}"
            ));
        }
        for (t, (_, id, _)) in wanted.iter().zip(&served_thoughts) {
            self.ids.insert(t.id.clone(), (*id).to_owned());
        }
        for t in log.iter().filter(|t| t.text.is_empty()) {
            if t.id.is_empty() {
                self.redacted = true;
            } else {
                self.dropped.insert(t.id.clone());
            }
        }
        Ok(())
    }

    /// `request` as a runtime served the file would send it.
    fn map(&self, request: &crate::wire::Request) -> crate::wire::Request {
        let mut mapped = request.clone();
        mapped.reasoning.retain_mut(|r| match (&mut r.id, &r.text) {
            (_, None) => !self.redacted,
            (Some(id), Some(_)) => {
                if self.dropped.contains(id.as_str()) {
                    return false;
                }
                if let Some(served) = self.ids.get(id.as_str()) {
                    *id = served.clone();
                }
                true
            }
            (None, Some(_)) => true,
        });
        mapped
    }
}
