//! `agentsim mock-llm`: a scenario's scripts served over the Anthropic Messages, OpenAI Chat
//! Completions and OpenAI Responses wire formats, so that a runtime in any language can be tested
//! with agentsim's scripts and checks (DESIGN section 11).
//!
//! - [`book`]: pure; which agent, conversation and turn a request is, and the script entry that
//!   answers it.
//! - `server` (feature `mock-server`): the HTTP server (axum on tokio): validation with
//!   [`crate::wire`], replies and streams from [`crate::wire::reply`], scripted faults, the JSONL
//!   journal, the transcript and the report.
//! - [`responses`]: pure; the OpenAI Responses items and responses sent, for `item_reference` and
//!   `previous_response_id`.
//! - [`transcript`]: pure; the journal's exchanges in agentsim's rendering.

pub mod book;
#[cfg(feature = "mock-server")]
pub mod load;
pub mod responses;
#[cfg(feature = "mock-server")]
pub mod server;
pub mod transcript;

use crate::scenario::Scenario;
use book::{AgentScript, Book, Route};

impl Book {
    /// A book over a scenario's scripts: one entry per agent that has a script, in name order,
    /// each with its `match:` rule or the default route.
    pub fn from_scenario(scenario: &Scenario) -> Book {
        let agents = scenario
            .scripts
            .iter()
            .map(|(name, entries)| {
                let def = scenario.catalog.get(name);
                let route = match scenario.routes.get(name) {
                    Some(rule) => Route::Rule(rule.clone()),
                    None => Route::Default {
                        model: def
                            .and_then(|d| d.model.clone())
                            .unwrap_or_else(|| name.clone()),
                        system: def.map_or_else(String::new, |d| d.system_prompt.to_string()),
                    },
                };
                AgentScript {
                    name: name.clone(),
                    route,
                    entries: entries.clone(),
                    per_conversation: scenario.per_conversation.contains(name),
                    history: scenario.history.of(name),
                }
            })
            .collect();
        Book::new(agents)
    }
}
