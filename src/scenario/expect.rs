//! Checking an `expect` step against the run: what happened since the previous `expect` (texts
//! sent, results received, the main agent's response, stream events) and the state now (stack,
//! iterations, time, usage).

use crate::agents::frame::StackFrame;
use crate::protocol::Event;
use crate::protocol::StreamEvent;
use crate::sim::{Entry, Record, Sim};

use super::format::ExpectSpec;
pub use super::mismatch::Mismatch;
use super::DEFAULT_KEY;

fn events<'a>(records: &'a [Record]) -> impl DoubleEndedIterator<Item = &'a Event> + 'a {
    records.iter().filter_map(|r| match &r.entry {
        Entry::Runtime(e) => Some(e),
        Entry::Sim(_) => None,
    })
}

fn show_list(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| format!("{s:?}")).collect();
    format!("[{}]", quoted.join(", "))
}

/// The conversation an `expect` is about: its `key` (default `default`), where `session:N` names
/// the N-th triggered session (whose key is its id, unknown to the file).
pub(super) fn resolve_key(e: &ExpectSpec, sim: &Sim) -> String {
    let key = e.key.as_deref().unwrap_or(DEFAULT_KEY);
    key.strip_prefix("session:")
        .and_then(|n| n.trim().parse::<usize>().ok())
        .and_then(|n| sim.sessions().get(n.checked_sub(1)?))
        .map_or_else(|| key.to_owned(), |(id, _)| id.to_string())
}

/// Whether `e` checks anything of its own conversation (rather than the whole run).
fn scoped(e: &ExpectSpec) -> bool {
    e.sent.is_some()
        || e.depth.is_some()
        || e.top.is_some()
        || e.stack.is_some()
        || e.tool_result.is_some()
        || e.tool_results.is_some()
        || e.iterations.is_some()
        || e.response.is_some()
        || e.stream.is_some()
        || e.usage.is_some()
        || e.agent_states.is_some()
}

/// Checks `e` against the simulation now and the records since the previous `expect` (`window`).
pub fn check(e: &ExpectSpec, sim: &Sim, window: &[Record]) -> Vec<Mismatch> {
    let mut out = Vec::new();
    // The tree's checks name their own fields.
    let mut extra = Vec::new();
    let mut expect = |what: &str, expected: String, actual: String| {
        if expected != actual {
            out.push(Mismatch {
                what: what.to_owned(),
                expected,
                actual,
            });
        }
    };
    let key = resolve_key(e, sim);
    let key = key.as_str();
    if key.starts_with("session:") && sim.runtime().stack(key).is_none() {
        // `session:N` names the N-th triggered session; one that names none would check an
        // empty conversation, and every scoped expectation would hold.
        expect(
            "key",
            format!("{key} naming a triggered session"),
            format!("{} sessions triggered so far", sim.sessions().len()),
        );
    } else if sim.runtime().stack(key).is_none()
        && (e.key.is_some() || (scoped(e) && !sim.runtime().stacks().entries().is_empty()))
    {
        // A key no conversation of the run has (a typo, an empty key) would check an empty
        // conversation, and every scoped expectation would hold. Only the implied `default`,
        // before any conversation started, names the empty state before the first message.
        let seen: Vec<String> = sim
            .runtime()
            .stacks()
            .entries()
            .iter()
            .map(|entry| format!("{:?}", &*entry.key))
            .collect();
        expect(
            "key",
            format!("{key:?} naming a conversation of the run"),
            if seen.is_empty() {
                "no conversation has started yet".to_owned()
            } else {
                format!("no such conversation (conversations: {})", seen.join(", "))
            },
        );
    }
    let in_key = |k: &str| k == key;
    let rt = sim.runtime();
    let frames: Vec<&StackFrame> = rt
        .stack(key)
        .map(|v| v.frames().collect())
        .unwrap_or_default();

    if let Some(sent) = &e.sent {
        let actual: Vec<String> = events(window)
            .filter_map(|ev| match ev {
                Event::Sent { key: k, text, .. } if in_key(k) => Some(text.to_string()),
                _ => None,
            })
            .collect();
        expect("sent", show_list(sent), show_list(&actual));
    }
    if let Some(depth) = e.depth {
        expect("depth", depth.to_string(), frames.len().to_string());
    }
    if let Some(top) = &e.top {
        let actual = frames
            .last()
            .map_or("none".to_owned(), |f| f.agent.frame_name.to_string());
        expect("top", top.clone(), actual);
    }
    if let Some(stack) = &e.stack {
        let actual: Vec<String> = frames
            .iter()
            .map(|f| f.agent.frame_name.to_string())
            .collect();
        expect("stack", show_list(stack), show_list(&actual));
    }
    if let Some(tr) = &e.tool_result {
        let agent = tr.agent.as_deref().unwrap_or("main");
        let found = events(window).rev().find_map(|ev| match ev {
            Event::ToolResult {
                key: k,
                frame,
                content,
                is_error,
                ..
            } if in_key(k) && &**frame == agent => Some((content.clone(), *is_error)),
            _ => None,
        });
        match found {
            None => expect(
                "tool_result",
                format!("a tool_result in {agent}'s session"),
                "none since the previous expect".to_owned(),
            ),
            Some((content, is_error)) => {
                if let Some(c) = &tr.content {
                    expect(
                        "tool_result.content",
                        format!("{c:?}"),
                        format!("{content:?}"),
                    );
                }
                if let Some(sub) = &tr.contains {
                    if !content.contains(sub.as_str()) {
                        expect(
                            "tool_result.contains",
                            format!("content containing {sub:?}"),
                            format!("{content:?}"),
                        );
                    }
                }
                if let Some(err) = tr.is_error {
                    expect(
                        "tool_result.is_error",
                        err.to_string(),
                        is_error.to_string(),
                    );
                }
            }
        }
    }
    if let Some(list) = &e.tool_results {
        let actual: Vec<(String, String, bool)> = events(window)
            .filter_map(|ev| match ev {
                Event::ToolResult {
                    key: k,
                    frame,
                    content,
                    is_error,
                    ..
                } if in_key(k) => Some((frame.to_string(), content.to_string(), *is_error)),
                _ => None,
            })
            .collect();
        let show = |(agent, content, is_error): &(String, String, bool)| {
            format!("{agent}: {content:?} error={is_error}")
        };
        let matches = list.len() == actual.len()
            && list
                .iter()
                .zip(&actual)
                .all(|(want, (agent, content, is_error))| {
                    want.agent.as_ref().is_none_or(|a| a == agent)
                        && want.content.as_ref().is_none_or(|c| c == content)
                        && want
                            .contains
                            .as_ref()
                            .is_none_or(|c| content.contains(c.as_str()))
                        && want.is_error.is_none_or(|e| e == *is_error)
                });
        if !matches {
            let wanted: Vec<String> = list
                .iter()
                .map(|w| {
                    format!(
                        "{}: {} error={}",
                        w.agent.as_deref().unwrap_or("*"),
                        match (&w.content, &w.contains) {
                            (Some(c), _) => format!("{c:?}"),
                            (None, Some(c)) => format!("containing {c:?}"),
                            (None, None) => "*".to_owned(),
                        },
                        w.is_error.map_or("*".to_owned(), |e| e.to_string())
                    )
                })
                .collect();
            let got: Vec<String> = actual.iter().map(show).collect();
            expect("tool_results", wanted.join("; "), got.join("; "));
        }
    }
    if let Some(iterations) = &e.iterations {
        for (name, n) in iterations {
            let live = frames
                .iter()
                .rev()
                .find(|f| &*f.agent.frame_name == name)
                .copied()
                .or_else(|| {
                    // A fork runs off the stack.
                    let rt = sim.runtime();
                    rt.stacks().live_frames().find(|f| {
                        f.is_fork()
                            && &*f.agent.frame_name == name
                            && in_key(&rt.stacks().entry(f.conversation as usize).key)
                    })
                })
                .map(|f| f.iteration);
            let ended = || {
                events(sim.records()).rev().find_map(|ev| match ev {
                    Event::Pop {
                        key: k,
                        frame,
                        iterations,
                        ..
                    }
                    | Event::ForkEnded {
                        key: k,
                        frame,
                        iterations,
                        ..
                    } if in_key(k) && &*frame.name == name => Some(*iterations),
                    _ => None,
                })
            };
            let actual = live
                .or_else(ended)
                .map_or("no such frame".to_owned(), |i| i.to_string());
            expect(&format!("iterations.{name}"), n.to_string(), actual);
        }
    }
    if let Some(calls) = &e.llm_calls {
        for (agent, n) in calls {
            // An agent no script and no definition names is a misspelling, not zero calls.
            let known = rt.catalog().get(agent).is_some()
                || sim.llm().is_some_and(|llm| llm.has_script(agent));
            let actual = if known {
                sim.llm().map_or(0, |llm| llm.calls(agent)).to_string()
            } else {
                "no such agent or script".to_owned()
            };
            expect(&format!("llm_calls.{agent}"), n.to_string(), actual);
        }
    }
    if let Some(resp) = &e.response {
        let found = events(window).rev().find_map(|ev| match ev {
            Event::Response { key: k, response } if in_key(k) => Some(response),
            _ => None,
        });
        match found {
            None => expect(
                "response",
                "a response from the main agent".to_owned(),
                "none since the previous expect".to_owned(),
            ),
            Some(r) => {
                if let Some(text) = &resp.text {
                    expect(
                        "response.text",
                        format!("{text:?}"),
                        format!("{:?}", r.text),
                    );
                }
                if let Some(n) = resp.iterations {
                    expect(
                        "response.iterations",
                        n.to_string(),
                        r.iterations.to_string(),
                    );
                }
                if let Some(names) = &resp.tool_calls {
                    let actual: Vec<String> =
                        r.tool_calls.iter().map(|c| c.name.to_string()).collect();
                    expect("response.tool_calls", show_list(names), show_list(&actual));
                }
            }
        }
    }
    if let Some(stream) = &e.stream {
        let actual: Vec<String> = events(window)
            .filter_map(|ev| match ev {
                Event::Stream { key: k, event, .. } if in_key(k) => Some(match event {
                    StreamEvent::TextDelta { text } => format!("text: {text}"),
                    StreamEvent::ToolStart { name, .. } => format!("tool_start: {name}"),
                    StreamEvent::ToolFinish {
                        name,
                        is_error: false,
                        ..
                    } => format!("tool_finish: {name}"),
                    StreamEvent::ToolFinish { name, .. } => format!("tool_error: {name}"),
                    StreamEvent::AgentState { name, status, .. } => {
                        format!("agent_state: {name} {status}")
                    }
                }),
                _ => None,
            })
            .collect();
        expect("stream", show_list(stream), show_list(&actual));
    }
    if let Some(want) = &e.tree {
        super::tree::check_tree(rt, want, &mut extra);
    }
    if let Some(want) = &e.agents {
        super::tree::check_agents(rt, want, &mut extra);
    }
    if let Some(want) = &e.agent_states {
        let actual = super::tree::agent_states(events(window), key);
        expect("agent_states", show_list(want), show_list(&actual));
    }
    if let Some(want) = &e.interventions {
        let actual = super::tree::interventions(events(window));
        expect("interventions", show_list(want), show_list(&actual));
    }
    if let Some(want) = &e.questions {
        let actual: Vec<String> = rt
            .questions()
            .iter()
            .map(|q| format!("{}: {}", q.frame, q.text))
            .collect();
        expect("questions", show_list(want), show_list(&actual));
    }
    if let Some(want) = &e.answers {
        let actual: Vec<String> = window
            .iter()
            .filter_map(|r| match &r.entry {
                Entry::Runtime(Event::Answer { accepted, .. }) => {
                    Some(if *accepted { "accepted" } else { "not_found" }.to_owned())
                }
                Entry::Sim(crate::drive::Note::AsyncAnswer { outcome, .. }) => {
                    Some((*outcome).to_owned())
                }
                _ => None,
            })
            .collect();
        expect("answers", show_list(want), show_list(&actual));
    }
    if let Some(want) = &e.sessions {
        use crate::store::QuestionStore;
        let actual: Vec<String> = sim
            .sessions()
            .iter()
            .filter_map(|(id, _)| sim.store().session(&id.to_string()).ok().flatten())
            .map(|row| match row.result() {
                Some(r) => format!("{}: {}: {r}", row.agent_name, row.status.as_str()),
                None => format!("{}: {}", row.agent_name, row.status.as_str()),
            })
            .collect();
        expect("sessions", show_list(want), show_list(&actual));
    }
    if let Some(want) = &e.pending {
        use crate::store::QuestionStore;
        let actual: Vec<String> = sim
            .store()
            .pending()
            .unwrap_or_default()
            .into_iter()
            .map(|p| format!("{}: {}", p.agent_name, p.question.question))
            .collect();
        expect("pending", show_list(want), show_list(&actual));
    }
    if let Some(want) = &e.callbacks {
        let actual: Vec<String> = sim.callbacks().iter().map(|c| c.to_string()).collect();
        expect("callbacks", show_list(want), show_list(&actual));
    }
    if let Some(idle) = e.idle {
        expect("idle", idle.to_string(), rt.is_idle().to_string());
    }
    if let Some(time) = e.time {
        expect("time", format!("{}ms", time.0), format!("{}ms", sim.now()));
    }
    if let Some(u) = e.usage {
        let actual = rt.stacks().get(key).map(|e| e.usage).unwrap_or_default();
        if let Some(n) = u.input_tokens {
            expect(
                "usage.input_tokens",
                n.to_string(),
                actual.input_tokens.to_string(),
            );
        }
        if let Some(n) = u.output_tokens {
            expect(
                "usage.output_tokens",
                n.to_string(),
                actual.output_tokens.to_string(),
            );
        }
    }
    out.extend(extra);
    out
}
