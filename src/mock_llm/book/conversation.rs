//! The second step of addressing: which of an agent's conversations a request belongs to, by its
//! first user message and the turns it replays; and what the server sent in each conversation, to
//! which a request's history must hold (`replayed-history`).

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

#[derive(Clone, Debug)]
pub(super) struct Conversation {
    pub(super) agent: usize,
    /// The assistant turns sent, in order (an empty reply is an empty turn).
    pub(super) sent: Vec<Vec<Sent>>,
    /// For each turn sent: how many blocks the request it answered had.
    pub(super) asked: Vec<usize>,
    /// Per turn: the script entries it took, and how many of them were served.
    pub(super) plans: Vec<(Vec<usize>, usize)>,
    /// The next unassigned entry, for an agent whose conversations each have the whole script.
    pub(super) cursor: usize,
}

impl Book {
    /// The conversation `replayed` continues, and its turn. Empty replies the server sent are
    /// never replayed (no provider takes an empty assistant message): a request is past such a
    /// turn when it carries more blocks than the request that got it.
    pub(super) fn conversation(
        &mut self,
        agent: usize,
        first: &str,
        replayed: &[Vec<Sent>],
        asked: usize,
    ) -> Result<(usize, usize), Miss> {
        let mut closest: Option<(usize, usize)> = None;
        let alike = self.by_first.get(first).map_or(&[][..], Vec::as_slice);
        for &i in alike {
            let c = &self.conversations[i];
            if c.agent != agent {
                continue;
            }
            let spoken: Vec<&Vec<Sent>> = c.sent.iter().filter(|t| !t.is_empty()).collect();
            let common = spoken
                .iter()
                .zip(replayed)
                .take_while(|(a, b)| same_turn(a, b))
                .count();
            if common == replayed.len() && spoken.len() == replayed.len() {
                // Past the last turn it replays, and past the empty turns that followed it
                // when the request has grown since.
                let mut turn = c
                    .sent
                    .iter()
                    .rposition(|t| !t.is_empty())
                    .map_or(0, |p| p + 1);
                while turn < c.sent.len() && c.sent[turn].is_empty() && asked > c.asked[turn] {
                    turn += 1;
                }
                if turn == c.sent.len() {
                    return Ok((i, turn));
                }
            }
            if closest.is_none_or(|(_, n)| common > n) {
                closest = Some((i, common));
            }
        }
        let turn = replayed.len();
        if turn == 0 {
            let i = self.conversations.len();
            self.conversations.push(Conversation {
                agent,
                sent: Vec::new(),
                asked: Vec::new(),
                plans: Vec::new(),
                cursor: 0,
            });
            self.by_first.entry(first.to_owned()).or_default().push(i);
            return Ok((i, 0));
        }
        let name = &self.agents[agent].name;
        let Some((i, common)) = closest else {
            return Err(Miss {
                violation: Some(REPLAYED_HISTORY),
                message: format!(
                    "the request replays {turn} assistant {} for agent `{name}` (first user message {:?}), but no conversation of that agent began with that message",
                    turns(turn),
                    clip(first, 60)
                ),
                address: None,
            });
        };
        let c = &self.conversations[i];
        let detail = if common < turn && common < c.sent.len() {
            format!(
                "assistant turn {} differs: the server sent {}, the request replays {}",
                common + 1,
                describe(&c.sent[common]),
                describe(&replayed[common])
            )
        } else if turn < c.sent.len() {
            format!(
                "it replays {turn} of the {} assistant turns the server sent: later turns were dropped",
                c.sent.len()
            )
        } else {
            format!(
                "it replays {turn} assistant {} but the server sent {}",
                turns(turn),
                c.sent.len()
            )
        };
        Err(Miss {
            violation: Some(REPLAYED_HISTORY),
            message: format!(
                "the request does not replay what the server sent in conversation {} of agent `{name}` (first user message {:?}): {detail}",
                i + 1,
                clip(first, 60)
            ),
            address: Some(Address {
                agent: name.clone(),
                conversation: i + 1,
                turn,
                entry: None,
            }),
        })
    }
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

pub(super) fn sent_of_out(block: &OutBlock) -> Sent {
    match block {
        OutBlock::Text(_) => Sent::Text(block.joined().unwrap_or_default()),
        OutBlock::ToolUse {
            id, name, input, ..
        } => Sent::ToolUse {
            id: id.clone(),
            name: name.clone(),
            input: input.clone(),
        },
    }
}

/// Whether a replayed turn is the one sent: the same text (surrounding whitespace aside; clients
/// split or join text blocks) and the same tool uses in order.
pub(super) fn same_turn(sent: &[Sent], replayed: &[Sent]) -> bool {
    let text = |t: &[Sent]| {
        t.iter()
            .filter_map(|b| match b {
                Sent::Text(s) => Some(s.as_str()),
                Sent::ToolUse { .. } => None,
            })
            .collect::<String>()
    };
    let tools = |t: &[Sent]| {
        t.iter()
            .filter(|b| matches!(b, Sent::ToolUse { .. }))
            .cloned()
            .collect::<Vec<_>>()
    };
    text(sent).trim() == text(replayed).trim() && tools(sent) == tools(replayed)
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
