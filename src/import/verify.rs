//! The written file checked against the log before it is given out: loaded as a scenario, its
//! book is asked every request of the log in order, and each must be routed to the agent the log
//! names and answered as the log has it (the same blocks and tool use ids, the same usage where
//! the log gives one, the same kind of fault, a stall). Where it is not, the plan is settled and
//! written again: an agent whose history another agent continues or its runtime rewrites gets
//! `history: continuation`, then `lenient`; every tool use id is written out; a usage the server
//! would not estimate is written. What still differs is an error at the exchange's line.

use std::path::Path;

use super::plan::Plan;
use super::{yaml, Exchange, ImportError, Outcome, Skip};
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
        let got = book.answer(e.provider, &e.request, &headers);
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
            (Outcome::Reply { blocks, usage }, Answer::Reply { reply, .. }) => {
                let sent = blocks_of(&reply.blocks);
                if sent != *blocks {
                    return Err(diverge(format!(
                        "the reply differs: {sent:?} instead of {blocks:?}"
                    )));
                }
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
