//! Judging an `expect` step against what an outside runtime showed: its `send`, `stack`, `event`
//! and `idle` lines and the mock server's journal. Each key means what it means for agentsim's own
//! runtime (docs/scenarios.md); what cannot be judged from outside never reaches here (see
//! [`super::needs`]).

use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::outside::codec::{EndedFrame, StackFrame};
use crate::scenario::format::{ExpectSpec, ToolResultExpect};

/// A `tool_result` the runtime reported appending to a frame's session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct SeenResult {
    pub frame: String,
    pub content: String,
    pub is_error: bool,
}

/// What one conversation showed so far.
#[derive(Clone, Debug, Default)]
pub(super) struct Conversation {
    /// Texts sent to the user.
    pub sent: Vec<String>,
    /// The frames of its last `stack` line.
    pub frames: Vec<StackFrame>,
    /// Frames that ended, in order.
    pub ended: Vec<EndedFrame>,
    /// `tool_result` events.
    pub results: Vec<SeenResult>,
    /// Stream events as `text: <delta>`, `tool_start: <name>`, ...
    pub stream: Vec<String>,
    /// `response` events: the main frame's turns that ended.
    pub responses: Vec<SeenResponse>,
    /// The last `usage` event: (input tokens, output tokens) so far.
    pub usage: Option<(u64, u64)>,
}

/// A `response` event: the main frame left the stack.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct SeenResponse {
    pub text: String,
    pub iterations: u64,
    pub tool_calls: Vec<String>,
}

/// Where the previous `expect` of a conversation left off.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Mark {
    sent: usize,
    results: usize,
    stream: usize,
    responses: usize,
}

impl Mark {
    /// The mark after judging `c`.
    pub(super) fn now(c: &Conversation) -> Mark {
        Mark {
            sent: c.sent.len(),
            results: c.results.len(),
            stream: c.stream.len(),
            responses: c.responses.len(),
        }
    }
}

/// Everything a judgement reads.
pub(super) struct View<'a> {
    pub conversation: &'a Conversation,
    pub mark: Mark,
    /// Every `user` sent has its `idle`.
    pub idle: bool,
    /// Model calls served from each agent's script so far.
    pub llm_calls: &'a BTreeMap<String, usize>,
    /// Why the stack is unknown: it is inferred from the model requests, which lost it.
    pub stack_unknown: Option<&'a str>,
    /// Whether the tool results were read from the model requests.
    pub results_inferred: bool,
    /// With `results_inferred`: frames whose last tools' results no request carried.
    pub unseen: Option<&'a BTreeMap<String, Vec<String>>>,
}

fn show<T: serde::Serialize + ?Sized>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_else(|_| "?".to_owned())
}

fn result_json(r: &SeenResult) -> Value {
    json!({"agent": r.frame, "content": r.content, "is_error": r.is_error})
}

fn matches(want: &ToolResultExpect, got: &SeenResult, check_agent: bool) -> bool {
    (!check_agent || want.agent.as_deref().is_none_or(|a| a == got.frame))
        && want.content.as_deref().is_none_or(|c| c == got.content)
        && want
            .contains
            .as_deref()
            .is_none_or(|c| got.content.contains(c))
        && want.is_error.is_none_or(|e| e == got.is_error)
}

/// The mismatches of `e` against `view`, one line each (empty: it holds).
pub(super) fn judge(e: &ExpectSpec, view: &View<'_>) -> Vec<String> {
    let mut out = Vec::new();
    let c = view.conversation;
    fn differ(out: &mut Vec<String>, key: &str, want: String, got: String) {
        if want != got {
            out.push(format!("{key}: expected {want}, got {got}"));
        }
    }
    if let Some(want) = &e.sent {
        differ(
            &mut out,
            "sent",
            show(want),
            show(&c.sent[view.mark.sent.min(c.sent.len())..]),
        );
    }
    if let Some(why) = view.stack_unknown {
        let keys = [
            ("depth", e.depth.is_some()),
            ("top", e.top.is_some()),
            ("stack", e.stack.is_some()),
            ("iterations", e.iterations.is_some()),
        ];
        for (key, _) in keys.iter().filter(|(_, given)| *given) {
            out.push(format!(
                "{key}: the stack cannot be inferred from the model requests: {why}"
            ));
        }
    }
    let names: Vec<&str> = c.frames.iter().map(|f| f.name.as_str()).collect();
    if let Some(want) = e.depth {
        differ(&mut out, "depth", want.to_string(), names.len().to_string());
    }
    if let Some(want) = &e.top {
        differ(
            &mut out,
            "top",
            show(want),
            show(&names.last().copied().unwrap_or("none")),
        );
    }
    if let Some(want) = &e.stack {
        differ(&mut out, "stack", show(want), show(&names));
    }
    if let Some(want) = e.idle {
        differ(&mut out, "idle", want.to_string(), view.idle.to_string());
    }
    if let Some(want) = &e.iterations {
        for (name, n) in want {
            let live = c.frames.iter().rev().find(|f| &f.name == name);
            let got = match live {
                Some(f) => f.iterations,
                None => c
                    .ended
                    .iter()
                    .rev()
                    .find(|f| &f.name == name)
                    .and_then(|f| f.iterations),
            };
            let got = got.map_or("no such frame".to_owned(), |g| g.to_string());
            differ(&mut out, &format!("iterations[{name}]"), n.to_string(), got);
        }
    }
    if let Some(want) = &e.llm_calls {
        for (agent, n) in want {
            let got = view.llm_calls.get(agent).copied().unwrap_or(0);
            differ(
                &mut out,
                &format!("llm_calls[{agent}]"),
                n.to_string(),
                got.to_string(),
            );
        }
    }
    let results = &c.results[view.mark.results.min(c.results.len())..];
    if let Some(want) = &e.tool_results {
        let ok = want.len() == results.len()
            && want.iter().zip(results).all(|(w, g)| matches(w, g, true));
        if !ok {
            let got: Vec<Value> = results.iter().map(result_json).collect();
            out.push(format!(
                "tool_results: expected {}, got {}",
                show(want),
                show(&got)
            ));
        }
    }
    if let Some(want) = &e.tool_result {
        let agent = want.agent.as_deref().unwrap_or("main");
        let got = results.iter().rev().find(|r| r.frame == agent);
        if !got.is_some_and(|g| matches(want, g, false)) {
            let hidden = view.unseen.and_then(|u| u.get(agent));
            let note = match hidden {
                Some(tools) => format!(
                    " (cannot be judged from the model requests: {agent} ended after a reply using {}, and no later request of it carried their results; offer the `tool-results` capability)",
                    tools.join(", ")
                ),
                None if view.results_inferred && got.is_none() => " (the runtime does not report tool results, so they are read from its model requests: a result is seen once a later request of its frame carries it)".to_owned(),
                None => String::new(),
            };
            out.push(format!(
                "tool_result: expected {}, got {}{note}",
                show(want),
                got.map_or("none".to_owned(), |g| result_json(g).to_string())
            ));
        }
    }
    if let Some(want) = &e.response {
        match c.responses[view.mark.responses.min(c.responses.len())..].last() {
            None => out.push(
                "response: expected a response from the main agent, got none since the previous expect"
                    .to_owned(),
            ),
            Some(r) => {
                if let Some(text) = &want.text {
                    differ(&mut out, "response.text", show(text), show(&r.text));
                }
                if let Some(n) = want.iterations {
                    differ(&mut out, "response.iterations", n.to_string(), r.iterations.to_string());
                }
                if let Some(names) = &want.tool_calls {
                    differ(&mut out, "response.tool_calls", show(names), show(&r.tool_calls));
                }
            }
        }
    }
    if let Some(want) = &e.stream {
        differ(
            &mut out,
            "stream",
            show(want),
            show(&c.stream[view.mark.stream.min(c.stream.len())..]),
        );
    }
    if let Some(want) = &e.usage {
        // The runtime's own sum, from its last `usage` event (none yet: nothing was used).
        let (input, output) = c.usage.unwrap_or((0, 0));
        if let Some(n) = want.input_tokens {
            differ(
                &mut out,
                "usage.input_tokens",
                n.to_string(),
                input.to_string(),
            );
        }
        if let Some(n) = want.output_tokens {
            differ(
                &mut out,
                "usage.output_tokens",
                n.to_string(),
                output.to_string(),
            );
        }
    }
    out
}
