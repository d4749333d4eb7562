//! The second step of addressing: which conversation a request belongs to, and what the server
//! sent in each, to which a request's history must hold (`replayed-history`).
//!
//! Every turn the server sends is indexed by its *chain*: a hash of the served turns it follows
//! (the chain of the turn it answered) and of its own content. A request's history is looked up
//! turn by turn, by hash, never by a scan over the conversations: `exact` (an agent's own
//! conversation, found by its first user message, as before) in this file's first half,
//! `continuation` and `lenient` (histories that agents share) in its second.

use std::collections::{BTreeMap, HashMap};
use std::hash::{DefaultHasher, Hash, Hasher};

use serde_json::Value;

use super::{clip, Address, Book, Miss, REPLAYED_HISTORY};
use crate::model::transcript::{Block, Message};
use crate::wire::reply::OutBlock;

/// A block the server sent, as a later request must replay it.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Sent {
    Text(String),
    ToolUse {
        id: String,
        name: String,
        input: Value,
    },
}

/// A turn the server sent.
#[derive(Clone, Debug)]
pub(super) struct Turn {
    /// The agent it was sent to.
    pub(super) agent: usize,
    /// Its blocks (none: an empty reply, never replayed).
    pub(super) sent: Vec<Sent>,
    /// How many blocks the request it answered had.
    pub(super) asked: usize,
    /// The chain of the history it answered.
    pub(super) parent: u64,
    /// The chain after it (its parent's for an empty turn).
    pub(super) chain: u64,
}

#[derive(Clone, Debug, Default)]
pub(super) struct Conversation {
    /// The agent that began it.
    pub(super) agent: usize,
    /// Whether every turn is that agent's, each answering the one before: what `exact` continues.
    pub(super) single: bool,
    /// The turns sent, in order.
    pub(super) turns: Vec<Turn>,
    /// Per agent: how many turns it was sent (its next turn's number).
    pub(super) counts: Vec<(usize, usize)>,
    /// Per (agent, turn): the script entries the turn took, and how many of them were served.
    pub(super) plans: BTreeMap<(usize, usize), (Vec<usize>, usize)>,
    /// Per agent whose conversations each have the whole script: the next unassigned entry.
    pub(super) cursors: Vec<(usize, usize)>,
}

impl Conversation {
    pub(super) fn new(agent: usize) -> Conversation {
        Conversation {
            agent,
            single: true,
            ..Conversation::default()
        }
    }

    /// The turns sent to `agent`.
    pub(super) fn count(&self, agent: usize) -> usize {
        self.counts
            .iter()
            .find(|(a, _)| *a == agent)
            .map_or(0, |(_, n)| *n)
    }

    /// The chain after its last turn.
    fn leaf(&self) -> u64 {
        self.turns.last().map_or(SEED, |t| t.chain)
    }
}

/// The chain of an empty history.
pub(super) const SEED: u64 = 0x6167_656e_7473_696d;

/// The chain after `turn`, answering the history whose chain is `parent`: its text (surrounding
/// whitespace aside) and its tool uses' ids and names; [`same_turn`] compares the rest.
fn link(parent: u64, turn: &[Sent]) -> u64 {
    let mut h = DefaultHasher::new();
    parent.hash(&mut h);
    text_of(turn).trim().hash(&mut h);
    for b in turn {
        if let Sent::ToolUse { id, name, .. } = b {
            id.hash(&mut h);
            name.hash(&mut h);
        }
    }
    h.finish()
}

/// Where a request goes: its conversation, the agent's turn, and the chain its reply answers.
pub(super) struct Found {
    pub(super) conversation: usize,
    pub(super) turn: usize,
    pub(super) parent: u64,
}

/// The lookups of the conversations (hash maps never iterated).
#[derive(Clone, Debug, Default)]
pub(super) struct Index {
    /// The conversations by first user message (`exact`).
    pub(super) by_first: HashMap<String, Vec<usize>>,
    /// The conversations no turn was sent in yet, by agent and first user message
    /// (`continuation` and `lenient`: a retry of a first turn).
    open: HashMap<(usize, String), Vec<usize>>,
    /// The turns by their chain: (conversation, index of the turn).
    chains: HashMap<u64, Vec<(usize, usize)>>,
    /// The last turn each agent was sent in answer to a chain, per conversation: (chain, agent,
    /// conversation) to the turn's index.
    answered: HashMap<(u64, usize, usize), usize>,
    /// The turns by the ids of the tool uses they hold.
    tool_ids: HashMap<String, (usize, usize)>,
    /// The last turn sent with this content, whatever it answered (`lenient`: a compacted
    /// history that keeps a served turn).
    content: HashMap<u64, (usize, usize)>,
}

impl Book {
    /// A new conversation begun by `agent` with the first user message `first`.
    fn begin(&mut self, agent: usize, first: &str) -> usize {
        let i = self.conversations.len();
        self.conversations.push(Conversation::new(agent));
        self.index
            .by_first
            .entry(first.to_owned())
            .or_default()
            .push(i);
        self.index
            .open
            .entry((agent, first.to_owned()))
            .or_default()
            .push(i);
        i
    }

    /// Records the turn sent to `agent` in `conversation`, in answer to the history `parent`.
    pub(super) fn record(
        &mut self,
        conversation: usize,
        agent: usize,
        sent: Vec<Sent>,
        asked: usize,
        parent: u64,
        first: &str,
    ) {
        let c = &mut self.conversations[conversation];
        let at = c.turns.len();
        let chain = if sent.is_empty() {
            parent
        } else {
            link(parent, &sent)
        };
        if agent != c.agent || parent != c.leaf() {
            c.single = false;
        }
        if c.turns.is_empty() {
            if let Some(open) = self.index.open.get_mut(&(c.agent, first.to_owned())) {
                open.retain(|&o| o != conversation);
            }
        }
        match c.counts.iter_mut().find(|(a, _)| *a == agent) {
            Some((_, n)) => *n += 1,
            None => c.counts.push((agent, 1)),
        }
        if !sent.is_empty() {
            self.index
                .chains
                .entry(chain)
                .or_default()
                .push((conversation, at));
            self.index
                .content
                .insert(link(SEED, &sent), (conversation, at));
        }
        for b in &sent {
            if let Sent::ToolUse { id, .. } = b {
                self.index.tool_ids.insert(id.clone(), (conversation, at));
            }
        }
        self.index
            .answered
            .insert((parent, agent, conversation), at);
        c.turns.push(Turn {
            agent,
            sent,
            asked,
            parent,
            chain,
        });
    }

    /// Takes back the last turn of `conversation` if it is `agent`'s turn `turn`.
    pub(super) fn unrecord(&mut self, conversation: usize, agent: usize, turn: usize) {
        let Some(c) = self.conversations.get_mut(conversation) else {
            return;
        };
        if c.turns.last().is_none_or(|t| t.agent != agent) || c.count(agent) != turn + 1 {
            return;
        }
        let at = c.turns.len() - 1;
        let t = c.turns.pop().expect("a last turn");
        if let Some((_, n)) = c.counts.iter_mut().find(|(a, _)| *a == agent) {
            *n -= 1;
        }
        if let Some(list) = self.index.chains.get_mut(&t.chain) {
            list.retain(|&e| e != (conversation, at));
        }
        let content = link(SEED, &t.sent);
        if self.index.content.get(&content) == Some(&(conversation, at)) {
            self.index.content.remove(&content);
        }
        for b in &t.sent {
            if let Sent::ToolUse { id, .. } = b {
                if self.index.tool_ids.get(id) == Some(&(conversation, at)) {
                    self.index.tool_ids.remove(id);
                }
            }
        }
        if self.index.answered.get(&(t.parent, agent, conversation)) == Some(&at) {
            self.index.answered.remove(&(t.parent, agent, conversation));
        }
    }

    /// `exact`: the conversation of `agent` that `replayed` continues, and its turn. Empty
    /// replies the server sent are never replayed (no provider takes an empty assistant message):
    /// a request is past such a turn when it carries more blocks than the request that got it.
    pub(super) fn conversation(
        &mut self,
        agent: usize,
        first: &str,
        replayed: &[Vec<Sent>],
        asked: usize,
    ) -> Result<Found, Miss> {
        let mut closest: Option<(usize, usize)> = None;
        let alike = self
            .index
            .by_first
            .get(first)
            .map_or(&[][..], Vec::as_slice);
        for &i in alike {
            let c = &self.conversations[i];
            if c.agent != agent || !c.single {
                continue;
            }
            let spoken: Vec<&Vec<Sent>> = c
                .turns
                .iter()
                .map(|t| &t.sent)
                .filter(|t| !t.is_empty())
                .collect();
            let common = spoken
                .iter()
                .zip(replayed)
                .take_while(|(a, b)| same_turn(a, b))
                .count();
            if common == replayed.len() && spoken.len() == replayed.len() {
                // Past the last turn it replays, and past the empty turns that followed it
                // when the request has grown since.
                let mut turn = c
                    .turns
                    .iter()
                    .rposition(|t| !t.sent.is_empty())
                    .map_or(0, |p| p + 1);
                while turn < c.turns.len()
                    && c.turns[turn].sent.is_empty()
                    && asked > c.turns[turn].asked
                {
                    turn += 1;
                }
                if turn == c.turns.len() {
                    return Ok(Found {
                        conversation: i,
                        turn,
                        parent: c.leaf(),
                    });
                }
            }
            if closest.is_none_or(|(_, n)| common > n) {
                closest = Some((i, common));
            }
        }
        let turn = replayed.len();
        if turn == 0 {
            let i = self.begin(agent, first);
            return Ok(Found {
                conversation: i,
                turn: 0,
                parent: SEED,
            });
        }
        let name = &self.agents[agent].name;
        let Some((i, common)) = closest else {
            return Err(Miss {
                violation: Some(REPLAYED_HISTORY),
                message: format!(
                    "the request replays {turn} assistant {} for agent `{name}` (first user message {:?}), but no conversation of that agent began with that message{}",
                    turns(turn),
                    clip(first, 60),
                    self.shared_hint(agent, replayed)
                ),
                address: None,
            });
        };
        let c = &self.conversations[i];
        let detail = if common < turn && common < c.turns.len() {
            format!(
                "assistant turn {} differs: the server sent {}, the request replays {}",
                common + 1,
                describe(&c.turns[common].sent),
                describe(&replayed[common])
            )
        } else if turn < c.turns.len() {
            format!(
                "it replays {turn} of the {} assistant turns the server sent: later turns were dropped",
                c.turns.len()
            )
        } else {
            format!(
                "it replays {turn} assistant {} but the server sent {}",
                turns(turn),
                c.turns.len()
            )
        };
        Err(Miss {
            violation: Some(REPLAYED_HISTORY),
            message: format!(
                "the request does not replay what the server sent in conversation {} of agent `{name}` (first user message {:?}): {detail}{}",
                i + 1,
                clip(first, 60),
                self.shared_hint(agent, replayed)
            ),
            address: Some(Address {
                agent: name.clone(),
                conversation: i + 1,
                turn,
                entry: None,
            }),
        })
    }

    /// For an `exact` agent's miss: when the request's history is one the server sent to other
    /// agents (a handoff, a supervisor), the policy that takes it.
    fn shared_hint(&self, agent: usize, replayed: &[Vec<Sent>]) -> String {
        let walk = self.walk(replayed);
        let Some((c, i)) = walk.at else {
            return String::new();
        };
        let by = self.conversations[c].turns[i].agent;
        let others = self.conversations[c].turns[..=i]
            .iter()
            .any(|t| t.agent != agent);
        if !others {
            return String::new();
        }
        format!(
            "; it continues conversation {} (last sent to agent `{}`): to let agents share a history, give `{}` `history: continuation`",
            c + 1,
            self.agents[by].name,
            self.agents[agent].name
        )
    }

    /// Follows a request's assistant turns along the served chains: each that continues the
    /// history so far is the server's; the others are the client's own, or claim to be the
    /// server's (they hold a tool use the server sent) while not continuing what it sent.
    fn walk(&self, replayed: &[Vec<Sent>]) -> Walk {
        let mut walk = Walk {
            chain: SEED,
            at: None,
            last: None,
            claimed: None,
            on_chain: Vec::new(),
        };
        for (k, m) in replayed.iter().enumerate() {
            // The message as a served turn, or, when it holds tool uses, the same without some of
            // the text in front of them: the client's own text merged into the served turn's
            // message (the OpenAI Agents SDK's nested-handoff summary, which its Chat Completions
            // converter makes the content of the message that carries the server's tool calls,
            // and which Responses sends as an item of its own right before them).
            let leading = m.iter().take_while(|b| matches!(b, Sent::Text(_))).count();
            let own = if leading < m.len() { leading } else { 0 };
            let found = (0..=own).find_map(|j| {
                let part = &m[j..];
                let next = link(walk.chain, part);
                self.index.chains.get(&next).and_then(|list| {
                    list.iter()
                        .copied()
                        .find(|&(c, i)| {
                            let t = &self.conversations[c].turns[i];
                            t.parent == walk.chain && same_turn(&t.sent, part)
                        })
                        .map(|hit| (next, hit))
                })
            });
            if let Some((next, hit)) = found {
                walk.chain = next;
                walk.at = Some(hit);
                walk.last = Some(hit);
                walk.on_chain.push(hit);
                continue;
            }
            let server = m.iter().find_map(|b| match b {
                Sent::ToolUse { id, .. } => self.index.tool_ids.get(id).copied(),
                Sent::Text(_) => None,
            });
            if let Some(hit) = server {
                walk.last = Some(hit);
                if walk.claimed.is_none() {
                    walk.claimed = Some((k, hit));
                }
            } else if let Some(&(c, i)) = self.index.content.get(&link(SEED, m)) {
                if same_turn(&self.conversations[c].turns[i].sent, m) {
                    walk.last = Some((c, i));
                }
            }
        }
        walk
    }

    /// `continuation` and `lenient`: the conversation the request's history continues, whichever
    /// agents its turns were sent to, and `agent`'s turn in it.
    pub(super) fn continuation(
        &mut self,
        agent: usize,
        first: &str,
        replayed: &[Vec<Sent>],
        asked: usize,
        lenient: bool,
    ) -> Result<Found, Miss> {
        let walk = self.walk(replayed);
        let name = self.agents[agent].name.clone();
        if !lenient {
            if let Some((k, (c, i))) = walk.claimed {
                return Err(self.out_of_place(agent, replayed, k, c, i, &walk.on_chain));
            }
        }
        let anchor = if lenient { walk.last } else { walk.at };
        let Some((c, _)) = anchor else {
            // No turn of the server's: a first turn (or its retry).
            let open = self.index.open.get(&(agent, first.to_owned()));
            let i = match open.and_then(|o| o.first().copied()) {
                Some(i) => i,
                None => self.begin(agent, first),
            };
            return Ok(Found {
                conversation: i,
                turn: 0,
                parent: walk.chain,
            });
        };
        if lenient {
            return Ok(Found {
                conversation: c,
                turn: self.conversations[c].count(agent),
                parent: walk.chain,
            });
        }
        // The conversations whose served history is the request's (several when alike
        // conversations were sent the same turns: told apart by order of first appearance, as
        // under `exact`): the first one this agent was not yet answered on, or is past an empty
        // answer in.
        let mut refused: Option<(usize, usize)> = None;
        let alike = self
            .index
            .chains
            .get(&walk.chain)
            .map_or(&[][..], Vec::as_slice);
        for &(c, _) in alike {
            match self.index.answered.get(&(walk.chain, agent, c)) {
                None => {
                    return Ok(Found {
                        conversation: c,
                        turn: self.conversations[c].count(agent),
                        parent: walk.chain,
                    })
                }
                Some(&j) => {
                    let t = &self.conversations[c].turns[j];
                    if t.sent.is_empty() && asked > t.asked {
                        return Ok(Found {
                            conversation: c,
                            turn: self.conversations[c].count(agent),
                            parent: walk.chain,
                        });
                    }
                    refused.get_or_insert((c, j));
                }
            }
        }
        let (c, j) = refused.unwrap_or((c, 0));
        let t = &self.conversations[c].turns[j];
        let turn = self.conversations[c].turns[..=j]
            .iter()
            .filter(|u| u.agent == agent)
            .count()
            .saturating_sub(1);
        Err(Miss {
            violation: Some(REPLAYED_HISTORY),
            message: format!(
                "the request replays a history agent `{name}` was already answered on, in conversation {} (its turn {turn}: {}), without that answer: later turns were dropped",
                c + 1,
                describe(&t.sent)
            ),
            address: Some(Address {
                agent: name,
                conversation: c + 1,
                turn,
                entry: None,
            }),
        })
    }

    /// The miss for a request whose assistant message `k` holds a tool use the server sent as
    /// turn `i` of conversation `c`, but does not continue the history the server sent.
    fn out_of_place(
        &self,
        agent: usize,
        replayed: &[Vec<Sent>],
        k: usize,
        c: usize,
        i: usize,
        on_chain: &[(usize, usize)],
    ) -> Miss {
        let name = &self.agents[agent].name;
        let conv = &self.conversations[c];
        let t = &conv.turns[i];
        let detail = if !same_turn(&t.sent, &replayed[k]) {
            format!(
                "it changes that turn: the server sent {}, the request replays {}",
                describe(&t.sent),
                describe(&replayed[k])
            )
        } else {
            // The served turns before it, back along its chain; the first the request lacks.
            let mut path = Vec::new();
            let mut parent = t.parent;
            while parent != SEED {
                let Some(&(pc, pi)) = self
                    .index
                    .chains
                    .get(&parent)
                    .and_then(|l| l.iter().find(|&&(pc, _)| pc == c))
                else {
                    break;
                };
                path.push((pc, pi));
                parent = self.conversations[pc].turns[pi].parent;
            }
            path.reverse();
            match path.iter().find(|p| !on_chain.contains(p)) {
                Some(&(pc, pi)) => {
                    let missing = &self.conversations[pc].turns[pi];
                    format!(
                        "the server sent it after {} (sent to agent `{}`), which the request does not replay: it was dropped or rewritten",
                        describe(&missing.sent),
                        self.agents[missing.agent].name
                    )
                }
                None => "the turns the request replays before it are not the ones the server sent before it".to_owned(),
            }
        };
        Miss {
            violation: Some(REPLAYED_HISTORY),
            message: format!(
                "assistant message {} of the request for agent `{name}` replays a tool use the server sent in conversation {} (to agent `{}`), out of its history: {detail}",
                k + 1,
                c + 1,
                self.agents[t.agent].name
            ),
            address: Some(Address {
                agent: name.clone(),
                conversation: c + 1,
                turn: conv.count(agent),
                entry: None,
            }),
        }
    }
}

/// A request's history followed along the served chains.
struct Walk {
    /// The chain of the served turns it replays.
    chain: u64,
    /// The last served turn on that chain.
    at: Option<(usize, usize)>,
    /// The last served turn it replays, on the chain or not (by a tool use's id or by content).
    last: Option<(usize, usize)>,
    /// The first message off the chain that holds a tool use the server sent, and that turn.
    claimed: Option<(usize, (usize, usize))>,
    /// The served turns on the chain.
    on_chain: Vec<(usize, usize)>,
}

pub(super) fn sent_of(message: &Message) -> Vec<Sent> {
    message
        .content
        .iter()
        .filter_map(|b| match b {
            Block::Text { text } => Some(Sent::Text(text.to_string())),
            Block::ToolUse { id, name, input } => Some(Sent::ToolUse {
                id: id.to_string(),
                name: name.to_string(),
                input: (**input).clone(),
            }),
            Block::ToolResult { .. } => None,
        })
        .collect()
}

/// What a reply's block is in a turn the server sent; reasoning is no part of it (clients may drop
/// it from the history they replay; what they replay of it is checked on its own, by its id).
pub(super) fn sent_of_out(block: &OutBlock) -> Option<Sent> {
    Some(match block {
        OutBlock::Text(_) => Sent::Text(block.joined().unwrap_or_default()),
        OutBlock::ToolUse {
            id, name, input, ..
        } => Sent::ToolUse {
            id: id.clone(),
            name: name.clone(),
            input: input.clone(),
        },
        OutBlock::Thinking { .. } => return None,
    })
}

fn text_of(turn: &[Sent]) -> String {
    turn.iter()
        .filter_map(|b| match b {
            Sent::Text(s) => Some(s.as_str()),
            Sent::ToolUse { .. } => None,
        })
        .collect()
}

/// Whether a replayed turn is the one sent: the same text (surrounding whitespace aside; clients
/// split or join text blocks) and the same tool uses in order.
pub(super) fn same_turn(sent: &[Sent], replayed: &[Sent]) -> bool {
    let tools = |t: &[Sent]| {
        t.iter()
            .filter(|b| matches!(b, Sent::ToolUse { .. }))
            .cloned()
            .collect::<Vec<_>>()
    };
    text_of(sent).trim() == text_of(replayed).trim() && tools(sent) == tools(replayed)
}

pub(super) fn describe(turn: &[Sent]) -> String {
    if turn.is_empty() {
        return "an empty turn".into();
    }
    turn.iter()
        .map(|b| match b {
            Sent::Text(t) => format!("text {:?}", clip(t, 40)),
            Sent::ToolUse { id, name, .. } => format!("tool use {name} ({id})"),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

pub(super) fn turns(n: usize) -> &'static str {
    if n == 1 {
        "turn"
    } else {
        "turns"
    }
}
