//! What the mock server's journal shows of the model side: every exchange decoded once, the
//! `no-display-leak` check on the requests' tool results, and the stack, tool results and named
//! checks inferred from the routed requests ([`crate::outside::inferred`]).

use std::collections::BTreeMap;

use serde_json::Value;

use crate::model::agent::Catalog;
use crate::model::messages;
use crate::model::transcript::{Block, Message};
use crate::outside::conversations::{Addressing, Inferences, Unaddressed};
use crate::outside::inferred::{Exchange, Violation};

use super::judge::{Conversation, SeenResponse, SeenResult};
use crate::scenario::Scenario;
use crate::wire::{self, Provider};

/// The texts meant only for the user's display: seed 004's interruption sentinel and the
/// banners of a cancel, a step limit and a deletion.
const DISPLAY_ONLY: [&str; 4] = [
    messages::INTERRUPTED_SENTINEL,
    messages::USER_MAX_STEPS,
    messages::USER_CANCELLED,
    messages::USER_AGENT_DELETED,
];

/// A request as it arrived, decoded.
struct Arrival {
    /// The agent it was routed to (none for a request refused before routing).
    agent: Option<String>,
    /// Its `x-agentsim-conversation` header, if it had one.
    conversation: Option<String>,
    messages: Vec<Message>,
}

/// The model side of a run, read from the mock server as it goes: the requests as they arrive
/// and the journal of answered exchanges.
pub(super) struct ModelSide {
    /// Every journal line, in the order written.
    pub lines: Vec<Value>,
    catalog: Catalog,
    /// Arrivals read so far.
    arrivals_read: usize,
    /// The scenario's conversations, in order of their first `user` step.
    conversations: Vec<String>,
    /// Whether [`ModelSide::address`] was called (requests wait until it is).
    addressed: bool,
    /// The scenario answers `ask_user` at once (`query_user: none`): an ask is not a wait.
    asks_at_once: bool,
    /// The inference: for a scenario of one conversation, or a runtime that names each
    /// request's conversation.
    pub inference: Option<Inferences>,
    /// Decoded requests not yet fed to the inference, by number.
    pending: BTreeMap<u64, Arrival>,
    /// Answers not yet fed to the inference, by number: the reply's blocks, `None` if it failed.
    replies: BTreeMap<u64, Option<Vec<Block>>>,
    /// The next exchange number the inference expects.
    next: u64,
    /// Checks broken, in order.
    pub violations: Vec<Violation>,
    /// The first display-only text carried as a tool result: (exchange, text).
    pub leak: Option<(u64, &'static str)>,
}

impl ModelSide {
    pub(super) fn new(scenario: &Scenario) -> ModelSide {
        ModelSide {
            catalog: scenario.catalog.clone(),
            lines: Vec::new(),
            arrivals_read: 0,
            conversations: conversations(scenario),
            asks_at_once: scenario.config.query_user == crate::runtime::QueryUser::None,
            addressed: false,
            inference: None,
            pending: BTreeMap::new(),
            replies: BTreeMap::new(),
            next: 1,
            violations: Vec::new(),
            leak: None,
        }
    }

    /// Sets how requests tell their conversation, once the runtime said what it offers
    /// (`header`: the capability `conversation-header`): with the header, or, for a scenario of
    /// one conversation, without; otherwise nothing is inferred.
    pub(super) fn address(&mut self, header: bool) {
        if self.addressed {
            return;
        }
        self.addressed = true;
        let addressing = if header {
            Some(Addressing::Header)
        } else if self.conversations.len() <= 1 {
            Some(Addressing::One(
                self.conversations
                    .first()
                    .cloned()
                    .unwrap_or_else(|| crate::scenario::DEFAULT_KEY.to_owned()),
            ))
        } else {
            None
        };
        self.inference = addressing.map(|a| {
            let mut inferences = Inferences::new(&self.catalog, a);
            if self.asks_at_once {
                inferences.asks_answered_at_once();
            }
            if self.conversations.len() <= 1 {
                inferences.in_one_conversation();
            }
            inferences
        });
        self.feed(false);
    }

    /// The first request whose conversation could not be told, though the runtime offered
    /// `conversation-header`.
    pub(super) fn unaddressed(&self) -> Option<&Unaddressed> {
        self.inference.as_ref().and_then(Inferences::unaddressed)
    }

    /// Reads the requests that arrived and the journal lines written since the last call.
    pub(super) fn absorb(&mut self, arrivals: Vec<Value>, journal: Vec<Value>) {
        self.arrivals_read += arrivals.len();
        for line in arrivals {
            let n = number(&line);
            let arrival = decode_request(&line);
            if self.leak.is_none() {
                if let Some(a) = &arrival {
                    self.leak = display_leak(&a.messages).map(|text| (n, text));
                }
            }
            // Every exchange holds its place in the order, also one that cannot be decoded
            // (refused as malformed: the wire checks report it).
            if n >= self.next {
                self.pending.insert(
                    n,
                    arrival.unwrap_or(Arrival {
                        agent: None,
                        conversation: None,
                        messages: Vec::new(),
                    }),
                );
            }
        }
        for line in journal {
            // A routed request the script had no reply for is refused, journaled with its
            // address, and never listed as an arrival: it is a model call all the same (a
            // frame past its limit makes one), so it takes its place in the order here.
            let n = number(&line);
            let missed = line.get("outcome").and_then(Value::as_str) == Some("miss");
            if missed && line.get("address").is_some() && n >= self.next {
                if let Some(a) = decode_request(&line) {
                    // A request with no reply carries what it carries: a display-only text in
                    // it is a leak all the same.
                    if self.leak.is_none() {
                        self.leak = display_leak(&a.messages).map(|text| (n, text));
                    }
                    self.pending.entry(n).or_insert(a);
                }
            }
            if line.get("address").is_some() {
                self.replies.insert(number(&line), decode_reply(&line));
            }
            self.lines.push(line);
        }
        self.feed(false);
    }

    /// How many arrivals were read.
    pub(super) fn arrivals_read(&self) -> usize {
        self.arrivals_read
    }

    /// Feeds the inference the requests in order of number, each answer before the next
    /// request; with `all` (the runtime is idle, so no request is in flight), also past a number
    /// that never arrived whole (a request cut by a kill).
    pub(super) fn feed(&mut self, all: bool) {
        if !self.addressed {
            return;
        }
        let Some(inference) = self.inference.as_mut() else {
            self.pending.clear();
            self.replies.clear();
            return;
        };
        loop {
            // Answers to requests already fed come first.
            while let Some(entry) = self.replies.first_entry() {
                if *entry.key() >= self.next {
                    break;
                }
                let (n, reply) = entry.remove_entry();
                inference.reply(n, reply.as_deref());
            }
            let Some(entry) = self.pending.first_entry() else {
                break;
            };
            let n = *entry.key();
            if n != self.next && !all {
                break;
            }
            let a = entry.remove();
            self.next = n + 1;
            if let Some(agent) = a.agent.as_deref() {
                let x = Exchange {
                    number: n,
                    agent,
                    messages: &a.messages,
                };
                self.violations
                    .extend(inference.request(&x, a.conversation.as_deref()));
            }
        }
    }

    /// `c` with what the runtime does not report read from its model requests: the frames with
    /// `stack`, the tool results with `results`, the main frame's turns with `responses`; and why the stack is unknown, if it is. `None`
    /// when nothing is inferred.
    pub(super) fn overlay(
        &self,
        key: &str,
        c: &Conversation,
        stack: bool,
        results: bool,
        responses: bool,
    ) -> (Option<Conversation>, Option<String>) {
        let Some(inferences) = self
            .inference
            .as_ref()
            .filter(|_| stack || results || responses)
        else {
            return (None, None);
        };
        let inference = inferences.of(key);
        let mut view = c.clone();
        let mut unknown = None;
        if stack {
            match inference.frames() {
                Ok(frames) => view.frames = frames,
                Err(why) => unknown = Some(why),
            }
            view.ended.clone_from(&inference.ended);
        }
        if results {
            view.results = inference
                .results
                .iter()
                .map(|r| SeenResult {
                    frame: r.frame.clone(),
                    content: r.content.clone(),
                    is_error: r.is_error,
                })
                .collect();
        }
        if responses {
            view.responses = inference
                .responses
                .iter()
                .map(|r| SeenResponse {
                    text: r.text.clone(),
                    iterations: r.iterations,
                    tool_calls: r.tool_calls.clone(),
                })
                .collect();
        }
        (Some(view), unknown)
    }

    /// The journal lines sorted by exchange number, for the transcript.
    pub(super) fn take_sorted(&mut self) -> Vec<Value> {
        let mut lines = std::mem::take(&mut self.lines);
        lines.sort_by_key(|l| l.get("exchange").and_then(Value::as_u64).unwrap_or(0));
        lines
    }
}

/// The conversations the scenario's steps talk in, in order of their first `user` step.
fn conversations(scenario: &Scenario) -> Vec<String> {
    let mut keys: Vec<String> = Vec::new();
    for s in &scenario.steps {
        if let crate::scenario::StepKind::User { key, .. } = &s.kind {
            if !keys.contains(key) {
                keys.push(key.clone());
            }
        }
    }
    keys
}

/// The provider whose route a journal line's path is.
fn provider(path: &str) -> Option<Provider> {
    Provider::from_path(path)
}

fn number(line: &Value) -> u64 {
    line.get("exchange").and_then(Value::as_u64).unwrap_or(0)
}

/// A request's messages in agentsim's terms, and the agent it was routed to, if it decodes.
fn decode_request(line: &Value) -> Option<Arrival> {
    let provider = provider(line.get("path")?.as_str()?)?;
    let mut request = line.get("request")?.clone();
    // A Responses request's item references, as the server resolved them.
    if let Some(resolved) = line.get("resolved_input") {
        request["input"] = resolved.clone();
    }
    let decoded = wire::decode(provider, &request).ok()?;
    let agent = line
        .pointer("/address/agent")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let conversation = line
        .get("conversation_header")
        .and_then(Value::as_str)
        .map(str::to_owned);
    Some(Arrival {
        agent,
        conversation,
        messages: decoded.messages,
    })
}

/// A routed exchange's answer: the reply's blocks, or `None` when the call failed (an error, a
/// cut stream, a dropped connection, a stall, a reply that does not decode).
fn decode_reply(line: &Value) -> Option<Vec<Block>> {
    if line.get("outcome").and_then(Value::as_str) != Some("reply") {
        return None;
    }
    let provider = provider(line.get("path")?.as_str()?)?;
    let body = line.get("response")?;
    // A streamed reply is journaled as its event count and the body it streamed.
    let body = if line.get("stream").and_then(Value::as_bool) == Some(true) {
        body.get("body")?
    } else {
        body
    };
    Some(wire::reply::decode(provider, body).ok()?.0)
}

/// The first display-only text a request carries as a tool result (the sentinel anywhere in
/// one, a banner as the whole of one).
fn display_leak(messages: &[Message]) -> Option<&'static str> {
    messages
        .iter()
        .flat_map(|m| m.content.iter())
        .find_map(|b| match b {
            Block::ToolResult { content, .. } => DISPLAY_ONLY.iter().copied().find(|d| {
                **content == **d || (*d == messages::INTERRUPTED_SENTINEL && content.contains(*d))
            }),
            _ => None,
        })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn leak_of(line: Value) -> Option<&'static str> {
        display_leak(&decode_request(&line)?.messages)
    }

    #[test]
    fn a_display_only_text_in_a_tool_result_of_any_format_is_a_leak() {
        let anthropic = json!({"exchange": 3, "path": "/v1/messages", "request": {"model": "m", "max_tokens": 5, "messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "x", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t",
             "content": [{"type": "text", "text": "x Interrupted. Tell Ally what to do instead."}]}]}]}});
        let chat = json!({"exchange": 4, "path": "/v1/chat/completions", "request": {"model": "m", "messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "t", "type": "function", "function": {"name": "x", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "t", "content": "Cancelled."}]}});
        let responses = json!({"exchange": 5, "path": "/v1/responses", "request": {"model": "m", "input": [
            {"role": "user", "content": "go"},
            {"type": "function_call", "call_id": "t", "name": "x", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "t", "output": "Agent reached maximum steps."}]}});
        let clean = json!({"exchange": 1, "path": "/v1/chat/completions", "request": {"model": "m", "messages": [
            {"role": "user", "content": "Cancelled."},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "t", "type": "function", "function": {"name": "x", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "t", "content": "Cancelled by user."}]}});
        assert_eq!(leak_of(clean), None);
        assert_eq!(leak_of(anthropic), Some(messages::INTERRUPTED_SENTINEL));
        assert_eq!(leak_of(chat), Some("Cancelled."));
        assert_eq!(leak_of(responses), Some("Agent reached maximum steps."));
    }

    #[test]
    fn a_request_the_script_has_no_reply_for_is_judged_for_a_leak_too() {
        // A miss is journaled with its address and never listed as an arrival: a display text
        // in it is a leak all the same, so that a file with that reply removed still shows it.
        let scenario = crate::scenario::parse(
            "name: t\nllm: { main: [Hi.] }\n",
            std::path::Path::new("t.yaml"),
        )
        .unwrap();
        let mut side = ModelSide::new(&scenario);
        let missed = json!({"exchange": 2, "path": "/v1/messages", "outcome": "miss",
            "address": {"agent": "main", "conversation": 1, "turn": 1},
            "request": {"model": "m", "max_tokens": 5, "messages": [
                {"role": "user", "content": "go"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "x", "input": {}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t",
                 "content": "Interrupted. Tell Ally what to do instead."}]}]}});
        side.absorb(Vec::new(), vec![missed]);
        assert_eq!(side.leak, Some((2, messages::INTERRUPTED_SENTINEL)));
    }
}
