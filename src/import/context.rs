//! Seed 000's persisted format read into exchanges: `context.jsonl` (every session operation, a
//! line each, tagged with its `agent_session_id`; what [`crate::persist`] writes for agentsim's
//! own runtime) and, beside it, `state.json` (the active stacks). Each session is a
//! conversation: a main session (one that starts with the user's text), or a child's (an
//! `agent_session` line names its agent and the parent's tool use it answers), or a fork's. Each
//! `assistant` line is a model call: its request is the session's messages before it, as an
//! Anthropic Messages body, and the line's content is its reply.
//!
//! The journal keeps no system prompts, tool schemas or models: each request is built with its
//! agent's name as the model (or the model `state.json` gives the frame), which routes it. Lines are untrusted:
//! one that is not JSON, not UTF-8 or not an entry of the format is an error at its line; a tool
//! result or a child session whose tool use no session holds unanswered, a reply in a session no
//! line started, a session started twice, are errors at their line; a line of a type the format
//! does not have is a listed skip, and so is a torn last line (a crash mid-write, which the
//! runtime's own restore ignores too). `state.json` must agree with the journal: each session it
//! names has lines there, under the agent it names.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;
use uuid::Uuid;

use super::{Exchange, ImportError, Outcome, Skip};
use crate::mock_llm::book::Address;
use crate::model::transcript::{Block, Session};
use crate::persist::{self, ContextEntry};
use crate::wire::encode::{self, Outgoing};
use crate::wire::{self, Provider};

/// The entry types of `context.jsonl`.
const TYPES: [&str; 6] = [
    "agent_session",
    "user",
    "assistant",
    "tool_result",
    "fork_session",
    "agent_session_complete",
];

/// Whether `bytes` look like `context.jsonl`: a first line that is an object with a `type` and
/// an `agent_session_id`.
pub(super) fn sniff(first: &[u8]) -> bool {
    serde_json::from_slice::<Value>(first).is_ok_and(|v| {
        v.get("type").is_some_and(Value::is_string) && v.get("agent_session_id").is_some()
    })
}

/// A message of the user the journal holds: a `user` line, or the answer to an `ask_user`.
pub(super) struct UserMessage {
    /// Its line.
    pub(super) line: usize,
    /// The conversation's key (`state.json`'s, else `default` for the first main session and
    /// `conversation_N` for the others).
    pub(super) key: String,
    /// The text.
    pub(super) text: String,
}

/// One session of the journal.
struct Conversation {
    agent: String,
    session: Session,
    /// Replies so far.
    replies: usize,
    /// Its number as mock-llm numbers conversations (by first request), once it made one.
    number: Option<usize>,
    /// The line that started it.
    line: usize,
    /// Forks it started.
    forks: usize,
    /// Its main session (itself for a main session).
    root: Uuid,
}

/// What `state.json` says of the sessions: the agent and model of each active frame's session.
#[derive(Default)]
struct StateFacts {
    frames: BTreeMap<Uuid, (String, Option<String>)>,
    mains: Vec<(String, Uuid)>,
}

fn state_facts(state: &[u8], path: &Path) -> Result<StateFacts, ImportError> {
    let text = std::str::from_utf8(state).map_err(|e| {
        ImportError::at(
            path,
            0,
            format!("the file is not UTF-8 (at byte {})", e.valid_up_to()),
        )
    })?;
    let state = persist::parse_state(text).map_err(|e| {
        ImportError::at(
            path,
            0,
            format!("{} (not a state.json of seed 000's format)", e)
                .trim_start_matches("state.json: ")
                .to_owned(),
        )
    })?;
    let mut facts = StateFacts::default();
    for c in &state.conversations {
        facts.mains.push((c.key.clone(), c.main_session_id));
        for f in c.active_stack.iter().chain(&c.forks) {
            facts
                .frames
                .insert(f.agent_session_id, (f.agent_name.clone(), f.model.clone()));
        }
    }
    Ok(facts)
}

/// The exchanges of `context.jsonl` (with `state.json` when given), addressed, and what is
/// skipped; the agents its child sessions name as skills go to `skills`.
pub(super) fn read(
    bytes: &[u8],
    path: &Path,
    state: Option<(&[u8], &Path)>,
    skills: &mut std::collections::BTreeSet<String>,
    users: &mut Vec<UserMessage>,
) -> Result<(Vec<Exchange>, Vec<Skip>), ImportError> {
    let facts = match state {
        Some((s, p)) => state_facts(s, p)?,
        None => StateFacts::default(),
    };
    let mut skipped = Vec::new();
    let mut exchanges = Vec::new();
    let mut sessions: BTreeMap<Uuid, Conversation> = BTreeMap::new();
    // Tool uses a reply holds and no tool result has answered yet: id to (session, line).
    let mut open: BTreeMap<String, (Uuid, usize)> = BTreeMap::new();
    // The `ask_user` tool uses among them: their results are the user's answers.
    let mut questions: std::collections::BTreeSet<String> = std::collections::BTreeSet::new();
    // Main sessions in the order they started, and the user's messages: (line, main session,
    // text).
    let mut mains: Vec<Uuid> = Vec::new();
    let mut heard: Vec<(usize, Uuid, String)> = Vec::new();
    // Tool uses a child session answers: id to the line that started it.
    let mut spawned: BTreeMap<String, usize> = BTreeMap::new();
    let mut numbered = 0usize;
    let raws: Vec<&[u8]> = bytes.split(|&b| b == b'\n').collect();
    let ends_cleanly = bytes.ends_with(b"\n");
    for (i, raw) in raws.iter().enumerate() {
        let line = i + 1;
        let err = |message: String| ImportError::at(path, line, message);
        let Some(text) = super::line_text(path, line, raw, "context.jsonl")? else {
            continue;
        };
        let last = i + 1 == raws.len();
        let value: Value = match serde_json::from_str(text) {
            Ok(v) => v,
            Err(e) if e.is_eof() && last && !ends_cleanly => {
                skipped.push(Skip {
                    line,
                    reason: format!(
                        "the last line is torn ({} bytes without their end: a crash mid-write); the runtime's restore ignores it too",
                        raw.len()
                    ),
                });
                continue;
            }
            Err(e) if e.is_eof() => {
                return Err(err(format!(
                    "the line ends before its JSON does (a truncated journal?): {e}"
                )))
            }
            Err(e) => return Err(err(format!("the line is not JSON: {e}"))),
        };
        let Some(kind) = value.get("type").and_then(Value::as_str).map(str::to_owned) else {
            return Err(err(
                "the line has no `type`: it is not an entry of seed 000's context.jsonl".into(),
            ));
        };
        if !TYPES.contains(&kind.as_str()) {
            skipped.push(Skip {
                line,
                reason: format!("an entry of an unknown type `{kind}`"),
            });
            continue;
        }
        let entry: ContextEntry = serde_json::from_value(value)
            .map_err(|e| err(format!("a `{kind}` entry that does not read: {e}")))?;
        match entry {
            ContextEntry::AgentSession {
                agent_session_id: id,
                agent_name,
                agent_type,
                parent_tool_use_id,
                message,
            } => {
                if agent_type == crate::model::agent::AgentKind::Skill {
                    skills.insert(agent_name.clone());
                }
                if let Some(c) = sessions.get(&id) {
                    return Err(err(format!(
                        "session {id} is started again (it started at line {})",
                        c.line
                    )));
                }
                if agent_name.trim().is_empty() || agent_name.contains([':', '#']) {
                    return Err(err(format!(
                        "the agent name {agent_name:?} is not one a scenario can declare"
                    )));
                }
                if !open.contains_key(&*parent_tool_use_id) {
                    return Err(err(format!(
                        "session {id} answers tool use {parent_tool_use_id:?}, which no earlier reply holds unanswered: the ids do not pair"
                    )));
                }
                if let Some(at) = spawned.insert(parent_tool_use_id.to_string(), line) {
                    return Err(err(format!(
                        "session {id} answers tool use {parent_tool_use_id:?}, which the session of line {at} answers already: the ids do not pair"
                    )));
                }
                let parent = open[&*parent_tool_use_id].0;
                let root = sessions.get(&parent).map_or(parent, |p| p.root);
                let mut session = Session::with_id(id);
                session.add_user_message(message);
                sessions.insert(
                    id,
                    Conversation {
                        agent: agent_name,
                        session,
                        replies: 0,
                        number: None,
                        line,
                        forks: 0,
                        root,
                    },
                );
            }
            ContextEntry::User {
                agent_session_id: id,
                text,
            } => {
                let c = sessions.entry(id).or_insert_with(|| {
                    mains.push(id);
                    Conversation {
                        agent: "main".into(),
                        session: Session::with_id(id),
                        replies: 0,
                        number: None,
                        line,
                        forks: 0,
                        root: id,
                    }
                });
                heard.push((line, c.root, text.to_string()));
                c.session.add_user_message(text);
            }
            ContextEntry::ForkSession {
                agent_session_id: id,
                caller_session_id,
                messages,
                prompt,
            } => {
                if let Some(c) = sessions.get(&id) {
                    return Err(err(format!(
                        "session {id} is started again (it started at line {})",
                        c.line
                    )));
                }
                let Some(caller) = sessions.get_mut(&caller_session_id) else {
                    return Err(err(format!(
                        "fork session {id} copies session {caller_session_id}, which no earlier line started"
                    )));
                };
                if caller.session.messages.len() < messages {
                    return Err(err(format!(
                        "fork session {id} starts with {messages} messages of session {caller_session_id}, which has {}",
                        caller.session.messages.len()
                    )));
                }
                caller.forks += 1;
                let base = caller.agent.split('#').next().unwrap_or("main").to_owned();
                let agent = format!("{base}#{}", caller.forks);
                let root = caller.root;
                let session = Session::forked(id, &caller.session, messages, &prompt);
                sessions.insert(
                    id,
                    Conversation {
                        agent,
                        session,
                        replies: 0,
                        number: None,
                        line,
                        forks: 0,
                        root,
                    },
                );
            }
            ContextEntry::Assistant {
                agent_session_id: id,
                content,
            } => {
                let Some(c) = sessions.get_mut(&id) else {
                    return Err(err(format!(
                        "a reply in session {id}, which no earlier line started (a main session starts with the user's text)"
                    )));
                };
                if c.session.messages.is_empty() {
                    return Err(err(format!(
                        "a reply in session {id} before any message of it"
                    )));
                }
                let mut blocks = Vec::new();
                for b in content.iter() {
                    match b {
                        Block::ToolResult { .. } => {
                            return Err(err(format!(
                                "a reply in session {id} holds a tool result: a model never replies with one"
                            )))
                        }
                        Block::ToolUse {
                            id: tool, name, ..
                        } => {
                            if &**name == "ask_user" {
                                questions.insert(tool.to_string());
                            }
                            if let Some((_, at)) = open.insert(tool.to_string(), (id, line)) {
                                return Err(err(format!(
                                    "tool use id {tool:?} is used again while the one of line {at} is unanswered"
                                )));
                            }
                            blocks.push(b.clone());
                        }
                        Block::Text { .. } => blocks.push(b.clone()),
                    }
                }
                let number = *c.number.get_or_insert_with(|| {
                    numbered += 1;
                    numbered
                });
                // The journal keeps no model, system prompt or tools: the request names the
                // agent as its model (the model `state.json` gives its frame, if any), which
                // routes it with no rule.
                let model = facts
                    .frames
                    .get(&id)
                    .and_then(|(_, m)| m.clone())
                    .unwrap_or_else(|| c.agent.clone());
                let body = encode::request(
                    Provider::Anthropic,
                    &Outgoing {
                        model: &model,
                        system: "",
                        messages: &c.session.messages,
                        tools: &[],
                        max_tokens: 1024,
                        stream: false,
                    },
                );
                let request = wire::validate(Provider::Anthropic, &body).map_err(|r| {
                    err(format!(
                        "the history of session {id} before this reply is not one a provider takes: {}",
                        r.message()
                    ))
                })?;
                exchanges.push(Exchange {
                    line,
                    item: false,
                    number: exchanges.len() as u64 + 1,
                    provider: Provider::Anthropic,
                    body,
                    request,
                    agent_header: None,
                    address: Some(Address {
                        agent: c.agent.clone(),
                        conversation: number,
                        turn: c.replies,
                        entry: None,
                    }),
                    outcome: Outcome::Reply {
                        blocks,
                        usage: None,
                        thinking: Vec::new(),
                    },
                });
                c.replies += 1;
                c.session.add_assistant_message(content);
            }
            ContextEntry::ToolResult {
                agent_session_id: id,
                tool_use_id,
                content,
                is_error,
            } => {
                match open.get(&*tool_use_id) {
                    Some((owner, _)) if *owner == id => {}
                    Some((owner, at)) => {
                        return Err(err(format!(
                            "a tool result in session {id} for tool use {tool_use_id:?}, which session {owner} made (line {at}): the ids do not pair"
                        )))
                    }
                    None => {
                        return Err(err(format!(
                            "a tool result for tool use {tool_use_id:?}, which no earlier reply of session {id} holds unanswered: the ids do not pair"
                        )))
                    }
                }
                let Some(c) = sessions.get_mut(&id) else {
                    return Err(err(format!(
                        "a tool result in session {id}, which no earlier line started"
                    )));
                };
                open.remove(&*tool_use_id);
                if questions.remove(&*tool_use_id) && !is_error {
                    heard.push((line, c.root, content.to_string()));
                }
                c.session.add_tool_result(tool_use_id, content, is_error);
            }
            ContextEntry::AgentSessionComplete {
                agent_session_id: id,
                ..
            } => {
                if !sessions.contains_key(&id) {
                    return Err(err(format!(
                        "session {id} completes, but no earlier line started it"
                    )));
                }
            }
        }
    }
    if let Some((_, state_path)) = state {
        check_state(&facts, &sessions, state_path)?;
    }
    offer_tools(&mut exchanges, path)?;
    // Each main session's conversation key: state.json's, else by order.
    let keys: BTreeMap<Uuid, String> = mains
        .iter()
        .enumerate()
        .map(|(i, id)| {
            let key = facts
                .mains
                .iter()
                .find(|(_, m)| m == id)
                .map(|(k, _)| k.clone())
                .unwrap_or_else(|| match i {
                    0 => "default".to_owned(),
                    n => format!("conversation_{}", n + 1),
                });
            (*id, key)
        })
        .collect();
    users.extend(heard.into_iter().map(|(line, root, text)| UserMessage {
        line,
        key: keys.get(&root).cloned().unwrap_or_else(|| "default".into()),
        text,
    }));
    Ok((exchanges, skipped))
}

/// `state.json` agrees with the journal: every session it names has lines, under its agent.
fn check_state(
    facts: &StateFacts,
    sessions: &BTreeMap<Uuid, Conversation>,
    path: &Path,
) -> Result<(), ImportError> {
    for (key, main) in &facts.mains {
        if !sessions.contains_key(main) {
            return Err(ImportError::at(
                path,
                0,
                format!("conversation {key:?}'s main session {main} has no line in context.jsonl: the two files do not belong together"),
            ));
        }
    }
    for (id, (agent, _)) in &facts.frames {
        let Some(c) = sessions.get(id) else {
            return Err(ImportError::at(
                path,
                0,
                format!("the active frame of agent `{agent}` (session {id}) has no line in context.jsonl: the two files do not belong together"),
            ));
        };
        let theirs = c.agent.split('#').next().unwrap_or("");
        if theirs != agent && !(agent == "main" && c.agent == "main") {
            return Err(ImportError::at(
                path,
                0,
                format!("session {id} is agent `{agent}`'s here, but `{}`'s in context.jsonl (line {}): the two files contradict each other", c.agent, c.line),
            ));
        }
    }
    Ok(())
}

/// Each request offers the tools its agent's replies call anywhere in the journal (the journal
/// keeps no tool list; a runtime offers at least those), by name, with no schema.
fn offer_tools(exchanges: &mut [Exchange], path: &Path) -> Result<(), ImportError> {
    let mut by_agent: BTreeMap<String, std::collections::BTreeSet<String>> = BTreeMap::new();
    for e in exchanges.iter() {
        let agent = e.address.as_ref().map_or("", |a| a.agent.as_str());
        if let Outcome::Reply { blocks, .. } = &e.outcome {
            for b in blocks {
                if let Block::ToolUse { name, .. } = b {
                    by_agent
                        .entry(agent.to_owned())
                        .or_default()
                        .insert(name.to_string());
                }
            }
        }
    }
    for e in exchanges.iter_mut() {
        let agent = e.address.as_ref().map_or("", |a| a.agent.as_str());
        let Some(names) = by_agent.get(agent) else {
            continue;
        };
        let tools: Vec<Value> = names
            .iter()
            .map(|n| serde_json::json!({"name": n, "description": "(context.jsonl keeps no tool schemas: any object)", "input_schema": {"type": "object"}}))
            .collect();
        e.body["tools"] = Value::Array(tools);
        e.request = wire::validate(Provider::Anthropic, &e.body).map_err(|r| {
            ImportError::at(
                path,
                e.line,
                format!(
                    "the request before this reply, with its agent's tools, is not one a provider takes: {}",
                    r.message()
                ),
            )
        })?;
    }
    Ok(())
}
