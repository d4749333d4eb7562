//! What the written file holds, gathered from addressed exchanges: the agents (each with its
//! requests, its `history:` policy, its route), each agent's script entries in the order its
//! turns were first asked for (the errors before a reply, the reply), and the tools (their
//! schemas and the results the requests carried back).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde_json::Value;

use super::routes::{self, RouteChoice};
use super::{Exchange, Fault, ImportError, Outcome, Skip, Thought};
use crate::agents::tools::builtin::is_builtin;
use crate::mock_llm::book::{letters, HistoryPolicy};
use crate::model::llm::Usage;
use crate::model::transcript::Block;
use crate::wire::Provider;

/// How many attempts an error entry fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Times {
    /// This many (one by default).
    N(u32),
    /// Every attempt of its turn (a turn the log never saw answered).
    Always,
}

/// One script entry.
#[derive(Clone, Debug)]
pub(super) enum Entry {
    /// A reply: its blocks, for each tool use whether its id is written, and its reasoning
    /// (what has no text is not written).
    Reply {
        blocks: Vec<Block>,
        explicit_ids: Vec<bool>,
        thinking: Vec<Thought>,
    },
    /// An error.
    Error(Fault, Times),
    /// No answer.
    Stall,
}

/// A script entry and where it came from.
#[derive(Clone, Debug)]
pub(super) struct EntryPlan {
    pub(super) entry: Entry,
    /// The usage to write (when the log's differs from what the server would estimate).
    pub(super) usage: Option<Usage>,
    /// The exchanges it answers (indices).
    pub(super) exchanges: Vec<usize>,
}

/// One agent of the written file.
#[derive(Clone, Debug)]
pub(super) struct AgentPlan {
    pub(super) name: String,
    pub(super) history: HistoryPolicy,
    /// The system prompt of its first request.
    pub(super) system: Option<String>,
    /// Other system prompts its requests sent (with the line of the first that sent each).
    pub(super) other_systems: Vec<(usize, String)>,
    pub(super) route: RouteChoice,
    pub(super) entries: Vec<EntryPlan>,
    /// Its exchanges (indices), in order.
    pub(super) requests: Vec<usize>,
    /// Scripts `name#N` exist: the agent forks.
    pub(super) forks: bool,
    /// A skill (the log says so: seed 000's `agent_type`), written `kind: skill`.
    pub(super) skill: bool,
}

/// A tool of the written file.
#[derive(Clone, Debug, Default)]
pub(super) struct ToolPlan {
    /// The description and schema first offered, and where.
    pub(super) schema: Option<(usize, Value)>,
    /// Lines that offered another schema.
    pub(super) other_schemas: Vec<usize>,
    /// The results the requests carried back, in order of first appearance: (content, is_error).
    pub(super) results: Vec<(String, bool)>,
}

/// The whole file to write.
#[derive(Clone, Debug)]
pub(super) struct Plan {
    pub(super) agents: Vec<AgentPlan>,
    pub(super) tools: BTreeMap<String, ToolPlan>,
    /// Built-in tools (use_skill, complete, ...) the requests offered: not declared.
    pub(super) builtins: BTreeSet<String>,
}

impl Plan {
    /// The plan of addressed `exchanges` (what cannot be mapped goes to `skipped`).
    pub(super) fn new(
        exchanges: &[Exchange],
        path: &Path,
        skipped: &mut Vec<Skip>,
    ) -> Result<Plan, ImportError> {
        let mut agents: Vec<AgentPlan> = Vec::new();
        // (agent, conversation, turn) to (agent index, its entries, answered).
        let mut groups: BTreeMap<(String, usize, usize), (usize, Vec<usize>)> = BTreeMap::new();
        let mut group_order: Vec<(String, usize, usize)> = Vec::new();
        // Which agents each conversation's exchanges went to.
        let mut shared: BTreeMap<usize, BTreeSet<String>> = BTreeMap::new();
        // Replies sent per conversation so far (a reply's place there numbers its ids).
        let mut places: BTreeMap<usize, usize> = BTreeMap::new();
        let mut ids: Vec<Vec<bool>> = vec![Vec::new(); exchanges.len()];
        for (i, e) in exchanges.iter().enumerate() {
            let address = e.address.as_ref().expect("addressed before planning");
            let agent = match agents.iter().position(|a| a.name == address.agent) {
                Some(a) => a,
                None => {
                    agents.push(AgentPlan {
                        name: address.agent.clone(),
                        history: HistoryPolicy::Exact,
                        system: e.request.system.clone(),
                        other_systems: Vec::new(),
                        route: RouteChoice::Header,
                        entries: Vec::new(),
                        requests: Vec::new(),
                        forks: false,
                        skill: false,
                    });
                    agents.len() - 1
                }
            };
            let a = &mut agents[agent];
            a.requests.push(i);
            if e.request.system != a.system {
                let other = e.request.system.clone().unwrap_or_default();
                if !a.other_systems.iter().any(|(_, s)| *s == other) {
                    a.other_systems.push((e.line, other));
                }
            }
            if matches!(e.outcome, Outcome::Unanswered) {
                continue;
            }
            shared
                .entry(address.conversation)
                .or_default()
                .insert(address.agent.clone());
            if let Outcome::Reply { blocks, .. } = &e.outcome {
                let place = places.entry(address.conversation).or_insert(0);
                let prefix = match e.provider {
                    Provider::Anthropic => "toolu",
                    _ => "call",
                };
                let tag = format!("{}_{}", letters(address.conversation - 1), letters(*place));
                let mut k = 0;
                for b in blocks {
                    if let Block::ToolUse { id, .. } = b {
                        let generated = format!("{prefix}_as_{tag}_{}", letters(k));
                        ids[i].push(**id != *generated);
                        k += 1;
                    }
                }
                *place += 1;
            }
            let key = (address.agent.clone(), address.conversation, address.turn);
            let group = groups.entry(key.clone()).or_insert_with(|| {
                group_order.push(key.clone());
                (agent, Vec::new())
            });
            group.1.push(i);
        }
        for names in shared.values().filter(|n| n.len() > 1) {
            for a in agents.iter_mut().filter(|a| names.contains(&a.name)) {
                a.history = HistoryPolicy::Continuation;
            }
        }
        for key in &group_order {
            let (agent, members) = &groups[key];
            let entries = group_entries(exchanges, members, &ids, path)?;
            agents[*agent].entries.extend(entries);
        }
        let names: Vec<String> = agents.iter().map(|a| a.name.clone()).collect();
        for a in &agents {
            if let Some((base, _)) = a.name.split_once('#') {
                if !names.iter().any(|n| n == base) {
                    let first = &exchanges[a.requests[0]];
                    return Err(ImportError::at(
                        path,
                        first.line,
                        format!(
                            "exchange {}: agent `{}` is a fork of `{base}` (its name says so), but no request of the log went to `{base}`",
                            first.number, a.name
                        ),
                    ));
                }
            }
        }
        for a in &mut agents {
            a.forks = names
                .iter()
                .any(|n| n.strip_prefix(&a.name).is_some_and(|r| r.starts_with('#')));
        }
        let (tools, builtins) = tools(exchanges, skipped);
        let mut plan = Plan {
            agents,
            tools,
            builtins,
        };
        for a in 0..plan.agents.len() {
            // Requests routed by the header are routed whatever the rules say.
            let of = |b: &AgentPlan| -> Vec<&Exchange> {
                b.requests
                    .iter()
                    .map(|&i| &exchanges[i])
                    .filter(|e| e.agent_header.is_none())
                    .collect()
            };
            let own = of(&plan.agents[a]);
            let others: Vec<&Exchange> = plan
                .agents
                .iter()
                .enumerate()
                .filter(|(b, _)| *b != a)
                .flat_map(|(_, b)| of(b))
                .collect();
            let agent = &plan.agents[a];
            let route = routes::choose(&agent.name, agent.system.as_deref(), &own, &others);
            plan.agents[a].route = route;
        }
        Ok(plan)
    }

    /// Writes every tool use id, generated-looking or not.
    pub(super) fn explicit_ids(&mut self) {
        for a in &mut self.agents {
            for e in &mut a.entries {
                if let Entry::Reply { explicit_ids, .. } = &mut e.entry {
                    explicit_ids.iter_mut().for_each(|x| *x = true);
                }
            }
        }
    }
}

/// The entries of one turn: its errors (identical ones in a row merged into `times`), then its
/// reply; a turn never answered ends with an error for every attempt.
fn group_entries(
    exchanges: &[Exchange],
    members: &[usize],
    ids: &[Vec<bool>],
    path: &Path,
) -> Result<Vec<EntryPlan>, ImportError> {
    let mut entries: Vec<EntryPlan> = Vec::new();
    let mut answered = false;
    for &i in members {
        let e = &exchanges[i];
        if answered {
            let address = e.address.as_ref().expect("addressed");
            return Err(ImportError::at(
                path,
                e.line,
                format!(
                    "exchange {}: agent `{}`, conversation {}, turn {} was already answered (at line {}), yet the log answers it again: the log contradicts itself",
                    e.number,
                    address.agent,
                    address.conversation,
                    address.turn,
                    exchanges[members[0]].line
                ),
            ));
        }
        let entry = match &e.outcome {
            Outcome::Reply {
                blocks, thinking, ..
            } => {
                answered = true;
                Entry::Reply {
                    blocks: blocks.clone(),
                    explicit_ids: ids[i].clone(),
                    thinking: thinking.clone(),
                }
            }
            Outcome::Fault(f) => {
                if let Some(EntryPlan {
                    entry: Entry::Error(last, Times::N(n)),
                    exchanges: merged,
                    ..
                }) = entries.last_mut()
                {
                    if last == f {
                        *n += 1;
                        merged.push(i);
                        continue;
                    }
                }
                Entry::Error(f.clone(), Times::N(1))
            }
            Outcome::Stall => {
                answered = true;
                Entry::Stall
            }
            Outcome::Unanswered => continue,
        };
        entries.push(EntryPlan {
            entry,
            usage: None,
            exchanges: vec![i],
        });
    }
    if !answered {
        if let Some(EntryPlan {
            entry: Entry::Error(_, times),
            ..
        }) = entries.last_mut()
        {
            *times = Times::Always;
        }
    }
    Ok(entries)
}

/// The tools the requests offered and the replies used, with their schemas and results.
fn tools(
    exchanges: &[Exchange],
    skipped: &mut Vec<Skip>,
) -> (BTreeMap<String, ToolPlan>, BTreeSet<String>) {
    let mut tools: BTreeMap<String, ToolPlan> = BTreeMap::new();
    let mut builtins = BTreeSet::new();
    let mut names_by_id: BTreeMap<String, String> = BTreeMap::new();
    let mut results_seen: BTreeSet<String> = BTreeSet::new();
    let mut unpaired: BTreeSet<String> = BTreeSet::new();
    for e in exchanges {
        for offered in e
            .body
            .get("tools")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let function = offered.get("function").unwrap_or(offered);
            let Some(name) = function.get("name").and_then(Value::as_str) else {
                continue;
            };
            if is_builtin(name) {
                builtins.insert(name.to_owned());
                continue;
            }
            let mut schema = serde_json::Map::new();
            if let Some(d) = function.get("description") {
                schema.insert("description".into(), d.clone());
            }
            if let Some(p) = function
                .get("input_schema")
                .or_else(|| function.get("parameters"))
            {
                schema.insert("schema".into(), p.clone());
            }
            let schema = Value::Object(schema);
            let tool = tools.entry(name.to_owned()).or_default();
            match &tool.schema {
                None => tool.schema = Some((e.line, schema)),
                Some((_, known)) if *known != schema => {
                    if tool.other_schemas.len() < 8 {
                        tool.other_schemas.push(e.line);
                    }
                }
                Some(_) => {}
            }
        }
        for m in &e.request.messages {
            for b in &m.content {
                match b {
                    Block::ToolUse { id, name, .. } => {
                        names_by_id.insert(id.to_string(), name.to_string());
                    }
                    Block::ToolResult {
                        tool_use_id,
                        content,
                        is_error,
                    } => {
                        if !results_seen.insert(tool_use_id.to_string()) {
                            continue;
                        }
                        match names_by_id.get(&**tool_use_id) {
                            Some(name) if is_builtin(name) => {}
                            Some(name) => tools
                                .entry(name.clone())
                                .or_default()
                                .results
                                .push((content.to_string(), *is_error)),
                            None => {
                                if unpaired.insert(tool_use_id.to_string()) {
                                    skipped.push(Skip {
                                        line: e.line,
                                        reason: format!(
                                            "exchange {}: a tool result for id {:?}, which no tool use of the log has: its result is not declared",
                                            e.number, tool_use_id
                                        ),
                                    });
                                }
                            }
                        }
                    }
                    Block::Text { .. } => {}
                }
            }
        }
        if let Outcome::Reply { blocks, .. } = &e.outcome {
            for b in blocks {
                if let Block::ToolUse { id, name, .. } = b {
                    names_by_id.insert(id.to_string(), name.to_string());
                    if is_builtin(name) {
                        builtins.insert(name.to_string());
                    } else {
                        tools.entry(name.to_string()).or_default();
                    }
                }
            }
        }
    }
    (tools, builtins)
}
