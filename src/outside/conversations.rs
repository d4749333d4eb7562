//! The inferred stacks of every conversation of a run ([`Inferences`]): one [`Inference`] per
//! conversation of the runtime protocol, each fed the model requests made for it.
//!
//! A request tells its conversation in one of two ways ([`Addressing`]):
//! - the scenario's user talks in one conversation: every request is that conversation's;
//! - the runtime offered the capability `conversation-header`: every request names its
//!   conversation with the header `x-agentsim-conversation` (docs/runtime-protocol.md, section
//!   7). A request that names none, or one agentsim sent no `user` to, is an [`Unaddressed`]
//!   request: the runtime broke its promise, and the stacks are no longer followed.
//!
//! Like [`crate::outside::inferred`], this module is pure: the caller reads the header from the
//! request and feeds the requests in the order the runtime made them.

use std::collections::BTreeMap;

use crate::model::agent::Catalog;
use crate::model::transcript::Block;

use super::inferred::{Exchange, Inference, Violation};

/// How a request's conversation is told.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Addressing {
    /// The scenario has this one conversation: every request is for it, whatever its headers.
    One(String),
    /// Every request names its conversation with the header `x-agentsim-conversation`.
    Header,
}

/// A request whose conversation cannot be told, though the runtime promised to name it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unaddressed {
    /// The mock server's exchange number.
    pub exchange: u64,
    /// What was wrong, for a person.
    pub message: String,
}

/// The stacks of every conversation, inferred from the model requests.
#[derive(Clone, Debug)]
pub struct Inferences {
    addressing: Addressing,
    /// A fresh stack over the scenario's agents, cloned for each new conversation.
    blank: Inference,
    by_conversation: BTreeMap<String, Inference>,
    /// The conversation of each request whose answer has not come yet.
    owners: BTreeMap<u64, String>,
    /// The first request that broke the addressing; nothing is followed after it.
    unaddressed: Option<Unaddressed>,
    /// Whether a broken check names its conversation (the scenario may talk in several).
    names_conversations: bool,
}

impl Inferences {
    /// No conversation yet, over the agents of `catalog`.
    pub fn new(catalog: &Catalog, addressing: Addressing) -> Inferences {
        Inferences {
            addressing,
            blank: Inference::new(catalog),
            by_conversation: BTreeMap::new(),
            owners: BTreeMap::new(),
            unaddressed: None,
            names_conversations: true,
        }
    }

    /// The scenario talks in one conversation: a broken check need not say which (the
    /// addressing may still be [`Addressing::Header`], whose promise is checked all the same).
    pub fn in_one_conversation(&mut self) {
        self.names_conversations = false;
    }

    /// Every conversation's `ask_user` is answered at once (the scenario's `query_user: none`), so
    /// an ask does not leave its frame waiting for the user.
    pub fn asks_answered_at_once(&mut self) {
        self.blank.asks_answered_at_once();
    }

    /// How requests tell their conversation.
    pub fn addressing(&self) -> &Addressing {
        &self.addressing
    }

    /// The inference of `conversation` (an empty stack if agentsim never wrote to it; with
    /// [`Addressing::One`], the one conversation's).
    pub fn of(&self, conversation: &str) -> &Inference {
        let key = match &self.addressing {
            Addressing::One(only) => only.as_str(),
            Addressing::Header => conversation,
        };
        self.by_conversation.get(key).unwrap_or(&self.blank)
    }

    /// The first request whose conversation could not be told, if any.
    pub fn unaddressed(&self) -> Option<&Unaddressed> {
        self.unaddressed.as_ref()
    }

    /// The inference of `conversation`, made on first use; with [`Addressing::One`], the one
    /// conversation's, whatever the name.
    fn entry(&mut self, conversation: &str) -> &mut Inference {
        let key = match &self.addressing {
            Addressing::One(only) => only.clone(),
            Addressing::Header => conversation.to_owned(),
        };
        let blank = &self.blank;
        self.by_conversation
            .entry(key)
            .or_insert_with(|| blank.clone())
    }

    /// The user sent a message to `conversation`; `cancel` when it is a cancel word.
    pub fn user(&mut self, conversation: &str, cancel: bool) {
        self.entry(conversation).user(cancel);
    }

    /// The runtime sent `text` to the user of `conversation`.
    pub fn sent(&mut self, conversation: &str, text: &str) {
        self.entry(conversation).sent(text);
    }

    /// The runtime said it is idle: in every conversation, the frames that do not wait for the
    /// user have ended.
    pub fn settle(&mut self) {
        for inference in self.by_conversation.values_mut() {
            inference.settle();
        }
    }

    /// Reads one request, with the value of its `x-agentsim-conversation` header if it had one;
    /// gives the checks it broke. A request whose conversation cannot be told stops the
    /// inference of every conversation (see [`Inferences::unaddressed`]).
    pub fn request(&mut self, x: &Exchange<'_>, header: Option<&str>) -> Vec<Violation> {
        if self.unaddressed.is_some() {
            return Vec::new();
        }
        let conversation = match (&self.addressing, header) {
            (Addressing::One(only), _) => only.clone(),
            (Addressing::Header, Some(named)) if self.by_conversation.contains_key(named) => {
                named.to_owned()
            }
            (Addressing::Header, named) => {
                let known: Vec<String> = self
                    .by_conversation
                    .keys()
                    .map(|k| format!("`{k}`"))
                    .collect();
                let why = match named {
                    None => "carries no header `x-agentsim-conversation`".to_owned(),
                    Some(n) => format!(
                        "names the conversation `{n}` in its header `x-agentsim-conversation`, to which agentsim sent no `user` message (it sent to {})",
                        if known.is_empty() { "none yet".to_owned() } else { known.join(", ") }
                    ),
                };
                self.unaddressed = Some(Unaddressed {
                    exchange: x.number,
                    message: format!(
                        "model request #{} (to agent `{}`) {why}, though the runtime offered the capability `conversation-header`, which promises the conversation on every model request",
                        x.number, x.agent
                    ),
                });
                return Vec::new();
            }
        };
        self.owners.insert(x.number, conversation.clone());
        let mut broken = self.entry(&conversation).request(x);
        if self.addressing == Addressing::Header && self.names_conversations {
            // Several conversations may be judged: say whose stack broke the check.
            for v in &mut broken {
                v.message = format!("in conversation `{conversation}`, {}", v.message);
            }
        }
        broken
    }

    /// Reads the answer to request `number`: the reply's blocks, or `None` when it failed.
    pub fn reply(&mut self, number: u64, reply: Option<&[Block]>) {
        if let Some(conversation) = self.owners.remove(&number) {
            self.entry(&conversation).reply(number, reply);
        }
    }
}
