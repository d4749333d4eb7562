//! Addresses for exchanges a log does not address (provider bodies, a journal without them): the
//! agent is the one the request's `x-agentsim-agent` header names, else its system prompt and
//! model (the first one met is `main`); the conversation
//! is the one whose served reply the request replays last (so a history handed to another agent
//! stays one conversation, which `history: continuation` serves); the turn counts the agent's
//! turns in that conversation, and a request sent again (a retry) is the same turn.

use std::collections::HashMap;

use super::{Exchange, Outcome};
use crate::mock_llm::book::Address;
use crate::model::transcript::{Block, Message, Role};

/// Fills in the address of every exchange that has none.
pub(super) fn addresses(exchanges: &mut [Exchange]) {
    if exchanges.iter().all(|e| e.address.is_some()) {
        return;
    }
    let taken: Vec<String> = exchanges
        .iter()
        .filter_map(|e| e.address.as_ref().map(|a| a.agent.clone()))
        .collect();
    let mut names = Names {
        by_identity: HashMap::new(),
        taken,
    };
    // A request's text (and agent) to its conversation and turn: a retry is the same turn.
    let mut requests: HashMap<(String, String), (usize, usize)> = HashMap::new();
    // A request's text with its reply appended, to the conversation the reply was sent in.
    let mut replies: HashMap<String, usize> = HashMap::new();
    // Turns per (conversation, agent).
    let mut turns: HashMap<(usize, String), usize> = HashMap::new();
    let mut conversations = exchanges
        .iter()
        .filter_map(|e| e.address.as_ref().map(|a| a.conversation))
        .max()
        .unwrap_or(0);
    for e in exchanges.iter_mut().filter(|e| e.address.is_none()) {
        let agent = names.of(e);
        let asked = messages_key(&e.request.messages);
        let (conversation, turn) = match requests.get(&(agent.clone(), asked.clone())) {
            Some(&known) => known,
            None => {
                let continued = e
                    .request
                    .messages
                    .iter()
                    .rposition(|m| m.role == Role::Assistant)
                    .and_then(|j| replies.get(&messages_key(&e.request.messages[..=j])))
                    .copied();
                let conversation = continued.unwrap_or_else(|| {
                    conversations += 1;
                    conversations
                });
                let n = turns.entry((conversation, agent.clone())).or_insert(0);
                let turn = *n;
                *n += 1;
                requests.insert((agent.clone(), asked), (conversation, turn));
                (conversation, turn)
            }
        };
        if let Outcome::Reply { blocks, .. } = &e.outcome {
            let mut history = e.request.messages.clone();
            history.push(Message {
                role: Role::Assistant,
                content: blocks.iter().cloned().collect(),
            });
            replies.insert(messages_key(&history), conversation);
        }
        e.address = Some(Address {
            agent,
            conversation,
            turn,
            entry: None,
        });
    }
}

/// A history as text for the lookups: roles, texts (surrounding whitespace aside), tool uses and
/// results.
fn messages_key(messages: &[Message]) -> String {
    let mut key = String::new();
    for m in messages {
        key.push(match m.role {
            Role::User => 'u',
            Role::Assistant => 'a',
        });
        for b in &m.content {
            match b {
                Block::Text { text } => {
                    key.push_str("\u{1}t");
                    key.push_str(text.trim());
                }
                Block::ToolUse { id, name, input } => {
                    key.push_str(&format!("\u{1}c{id}\u{2}{name}\u{2}{input}"));
                }
                Block::ToolResult {
                    tool_use_id,
                    content,
                    is_error,
                } => {
                    key.push_str(&format!("\u{1}r{tool_use_id}\u{2}{is_error}\u{2}{content}"));
                }
            }
        }
        key.push('\u{3}');
    }
    key
}

/// Agent names by system prompt and model.
struct Names {
    by_identity: HashMap<(String, String), String>,
    taken: Vec<String>,
}

impl Names {
    fn of(&mut self, e: &Exchange) -> String {
        // The `x-agentsim-agent` header names the agent (a runtime driven through the runtime
        // protocol sends its agents' names there), when it is a name a scenario can declare.
        if let Some(header) = e
            .agent_header
            .as_deref()
            .map(str::trim)
            .filter(|h| !h.is_empty() && !h.contains([':', '#']))
        {
            if !self.taken.iter().any(|t| t == header) {
                self.taken.push(header.to_owned());
            }
            return header.to_owned();
        }
        let system = e.request.system.clone().unwrap_or_default();
        let model = e.request.model.clone().unwrap_or_default();
        if let Some(name) = self.by_identity.get(&(system.clone(), model.clone())) {
            return name.clone();
        }
        let wanted = if !self.taken.iter().any(|t| t == "main") {
            "main".to_owned()
        } else {
            slug(&system)
                .or_else(|| slug(&model))
                .unwrap_or_else(|| "agent".to_owned())
        };
        let mut name = wanted.clone();
        let mut n = 2;
        while self.taken.contains(&name) {
            name = format!("{wanted}_{n}");
            n += 1;
        }
        self.taken.push(name.clone());
        self.by_identity.insert((system, model), name.clone());
        name
    }
}

/// A short agent name from a system prompt ("You are the forecaster." gives `forecaster`) or a
/// model name: lower-case letters, digits and `_`, at most three words.
fn slug(text: &str) -> Option<String> {
    let lower = text.to_lowercase();
    let mut rest = lower.trim();
    for prefix in ["you are ", "you're "] {
        if let Some(r) = rest.strip_prefix(prefix) {
            rest = r;
        }
    }
    for article in ["the ", "a ", "an "] {
        if let Some(r) = rest.strip_prefix(article) {
            rest = r;
        }
    }
    let words: Vec<String> = rest
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
        .take(3)
        .map(str::to_owned)
        .collect();
    let first_sentence_end = rest.find(['.', '\n', ',']).unwrap_or(rest.len());
    let words: Vec<String> = words
        .into_iter()
        .scan(0usize, |used, w| {
            let at = rest[*used..].find(&w).map(|i| i + *used)?;
            *used = at + w.len();
            (at < first_sentence_end).then_some(w)
        })
        .collect();
    let name = words.join("_");
    (!name.is_empty() && name != "main").then_some(name)
}

#[cfg(test)]
mod tests {
    use super::slug;

    #[test]
    fn names_come_from_the_first_words_of_the_system_prompt() {
        assert_eq!(
            slug("You are the forecaster. You answer.").as_deref(),
            Some("forecaster")
        );
        assert_eq!(
            slug("You are a Weather assistant").as_deref(),
            Some("weather_assistant")
        );
        assert_eq!(slug("claude-3-5").as_deref(), Some("claude_3_5"));
        assert_eq!(slug("...").as_deref(), None);
    }
}
