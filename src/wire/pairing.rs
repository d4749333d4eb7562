//! The `tool-pairing` rules: what makes a model request valid under the Anthropic Messages API and
//! the OpenAI APIs, as one checker shared by the observer (which applies it to every request the
//! runtime makes, incrementally) and the public validator of raw provider requests
//! ([`crate::wire::validate`]).
//!
//! A request is a list of [`Message`]s in agentsim's neutral form (a provider's `tool` messages and
//! `function_call_output` items become `tool_result` blocks of a user message). The rules:
//! each `tool_use` of an assistant message is answered by exactly one `tool_result` in the next
//! message, no `tool_result` without its `tool_use`, no duplicate ids, no empty id or name, and, as
//! [`Rules`] asks, roles that alternate, a first and a last message from the user, no empty
//! content, results before text, results in the reply's order. A broken rule is a [`Fault`] that
//! says where and what.

use std::fmt;
use std::sync::Arc;

use crate::model::hash::IdHashes;
use crate::model::transcript::{id_hash, Block, Message, Role};

/// Which of the optional rules apply. The tool-pairing rules proper always do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rules {
    /// The first message is from the user.
    pub first_user: bool,
    /// The request ends with a user message.
    pub last_user: bool,
    /// Roles alternate.
    pub alternate: bool,
    /// No message without content, no empty text block.
    pub non_empty: bool,
    /// In a user message, `tool_result` blocks come before text.
    pub results_first: bool,
    /// Results come in the order of the reply's `tool_use` blocks.
    pub result_order: bool,
}

impl Rules {
    /// Every rule: what agentsim requires of the reference runtime's requests (the union of what
    /// the providers reject, plus results in the reply's order).
    pub(crate) const STRICT: Rules = Rules {
        first_user: true,
        last_user: true,
        alternate: true,
        non_empty: true,
        results_first: true,
        result_order: true,
    };
}

impl Default for Rules {
    fn default() -> Rules {
        Rules::STRICT
    }
}

/// A broken rule. Indices are 0-based positions in the checked message list (`message N` in the
/// text is 1-based, as the observer has always printed it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The request has no messages.
    NoMessages,
    /// The request does not end with a user message.
    LastNotUser,
    /// A session shrank between two requests (the incremental checker only).
    Shrank {
        /// Messages checked before.
        from: usize,
        /// Messages now.
        to: usize,
    },
    /// The first message is not from the user.
    FirstNotUser,
    /// Two messages of one role in a row.
    NotAlternating {
        /// The second of the two.
        message: usize,
        /// Their role.
        role: Role,
    },
    /// A message without content.
    EmptyContent {
        /// The message.
        message: usize,
    },
    /// An empty text block.
    EmptyText {
        /// The message.
        message: usize,
        /// The block.
        block: usize,
    },
    /// An assistant message holds a `tool_result`.
    ResultInAssistant {
        /// The message.
        message: usize,
        /// The block.
        block: usize,
        /// Its `tool_use_id`.
        id: Arc<str>,
    },
    /// A `tool_use` id used before, in this reply or an earlier one.
    DuplicateId {
        /// The message.
        message: usize,
        /// The block.
        block: usize,
        /// The id.
        id: Arc<str>,
    },
    /// A `tool_use` with an empty id.
    EmptyId {
        /// The message.
        message: usize,
        /// The block.
        block: usize,
    },
    /// A `tool_use` with an empty name.
    EmptyName {
        /// The message.
        message: usize,
        /// The block.
        block: usize,
        /// Its id.
        id: Arc<str>,
    },
    /// A `tool_result` after text in a user message.
    ResultAfterText {
        /// The message.
        message: usize,
        /// The block.
        block: usize,
        /// Its `tool_use_id`.
        id: Arc<str>,
    },
    /// A `tool_result` whose `tool_use` is not in the previous assistant message.
    OrphanResult {
        /// The message.
        message: usize,
        /// The block.
        block: usize,
        /// Its `tool_use_id`.
        id: Arc<str>,
    },
    /// Two results for one `tool_use`.
    AnsweredTwice {
        /// The message.
        message: usize,
        /// The second result's block.
        block: usize,
        /// The id.
        id: Arc<str>,
    },
    /// A user message holds a `tool_use`.
    UseInUser {
        /// The message.
        message: usize,
        /// The block.
        block: usize,
        /// The id.
        id: Arc<str>,
    },
    /// `tool_use` blocks of an assistant message left without results in the next message.
    Unanswered {
        /// The assistant message.
        assistant: usize,
        /// The message that should have answered them (`assistant + 1`; equal to the number of
        /// messages when the request ends with the assistant message).
        message: usize,
        /// Every id left without a result, in the reply's order.
        ids: Vec<Arc<str>>,
    },
    /// A result where another tool use's result belongs.
    OutOfOrder {
        /// The message.
        message: usize,
        /// The result's block.
        block: usize,
        /// Its `tool_use_id`.
        id: Arc<str>,
        /// The `tool_use` whose result belongs there.
        expected: Arc<str>,
    },
}

/// `message N` (1-based).
struct At(usize);

impl fmt::Display for At {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "message {}", self.0 + 1)
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::NoMessages => write!(f, "the request has no messages"),
            Fault::LastNotUser => write!(f, "the request does not end with a user message"),
            Fault::Shrank { from, to } => {
                write!(f, "the session shrank from {from} to {to} messages")
            }
            Fault::FirstNotUser => write!(f, "{}: the first message must be from the user", At(0)),
            Fault::NotAlternating { message, role } => write!(
                f,
                "{}: two {role:?} messages in a row (roles must alternate)",
                At(*message)
            ),
            Fault::EmptyContent { message } => write!(f, "{}: empty content", At(*message)),
            Fault::EmptyText { message, .. } => write!(f, "{}: an empty text block", At(*message)),
            Fault::ResultInAssistant { message, id, .. } => write!(
                f,
                "{}: an assistant message holds tool_result {id}",
                At(*message)
            ),
            Fault::DuplicateId { message, id, .. } => {
                write!(f, "{}: duplicate tool_use id {id}", At(*message))
            }
            Fault::EmptyId { message, .. } => {
                write!(f, "{}: a tool_use with an empty id", At(*message))
            }
            Fault::EmptyName { message, id, .. } => {
                write!(f, "{}: tool_use {id} has an empty name", At(*message))
            }
            Fault::ResultAfterText { message, id, .. } => write!(
                f,
                "{}: tool_result {id} after text (results come first)",
                At(*message)
            ),
            Fault::OrphanResult { message, id, .. } => write!(
                f,
                "{}: tool_result {id} has no tool_use in the previous assistant message",
                At(*message)
            ),
            Fault::AnsweredTwice { message, id, .. } => {
                write!(f, "{}: tool_use {id} answered twice", At(*message))
            }
            Fault::UseInUser { message, id, .. } => {
                write!(f, "{}: a user message holds tool_use {id}", At(*message))
            }
            Fault::Unanswered { message, ids, .. } => write!(
                f,
                "{}: tool_use {} has no tool_result in the next user message",
                At(*message),
                ids.first().map_or("", |id| &**id)
            ),
            Fault::OutOfOrder {
                message,
                id,
                expected,
                ..
            } => write!(
                f,
                "{}: tool_result {id} comes where the result of {expected} belongs (results must follow the reply's order)",
                At(*message)
            ),
        }
    }
}

/// Checks a whole request once.
pub fn check(messages: &[Message], rules: Rules) -> Result<(), Fault> {
    Pairing::new(rules).check_request(messages)
}

/// Incremental validation state of one session's requests: each call checks only the messages
/// added since the last one, so a turn costs the same however long the session is.
#[derive(Clone, Debug, Default)]
pub(crate) struct Pairing {
    rules: Rules,
    /// Messages validated for good (every message but a trailing user message, which may still
    /// grow).
    checked: usize,
    /// Role of message `checked - 1`.
    last_role: Option<Role>,
    /// Index of the last committed message if it is an assistant message: its `tool_use` blocks
    /// are the ones the next user message must answer.
    open: Option<usize>,
    /// The hash of every `tool_use` id of the committed messages. A hit is confirmed against the
    /// messages themselves, so a hash collision is never reported as a duplicate.
    seen: IdHashes,
}

/// Two ids are equal: the same allocation (the common case, an id cloned from the `tool_use`), or
/// the same text.
#[inline]
fn same(a: &Arc<str>, b: &Arc<str>) -> bool {
    crate::model::ids::same_id(a, b)
}

impl Pairing {
    /// A checker with these rules.
    pub fn new(rules: Rules) -> Pairing {
        Pairing {
            rules,
            ..Pairing::default()
        }
    }

    /// Checks a request: the messages added since the last call, and the trailing user message.
    #[inline]
    pub(crate) fn check_request(&mut self, messages: &[Message]) -> Result<(), Fault> {
        let Some(last) = messages.last() else {
            return Err(Fault::NoMessages);
        };
        if last.role != Role::User && self.rules.last_user {
            return Err(Fault::LastNotUser);
        }
        if messages.len() < self.checked {
            return Err(Fault::Shrank {
                from: self.checked,
                to: messages.len(),
            });
        }
        if last.role != Role::User {
            // A final assistant message (a prefill) is committed; its tool uses, if any, have no
            // next message to be answered in.
            self.commit(messages, messages.len()).map_err(|f| *f)?;
            let ids: Vec<Arc<str>> = last.tool_uses().map(|u| u.id.clone()).collect();
            if !ids.is_empty() {
                return Err(Fault::Unanswered {
                    assistant: messages.len() - 1,
                    message: messages.len(),
                    ids,
                });
            }
            return Ok(());
        }
        let end = messages.len() - 1;
        self.commit(messages, end).map_err(|f| *f)?;
        // The trailing user message is checked but not committed: it may still receive text.
        self.check_message(messages, end, last).map_err(|f| *f)
    }

    /// Checks and commits messages `checked..end`.
    #[inline]
    fn commit(&mut self, messages: &[Message], end: usize) -> Result<(), Box<Fault>> {
        for (i, message) in messages.iter().enumerate().take(end).skip(self.checked) {
            self.check_message(messages, i, message)?;
            match message.role {
                Role::Assistant => {
                    for u in message.tool_uses() {
                        self.seen.insert(id_hash(u.id));
                    }
                    self.open = Some(i);
                }
                Role::User => self.open = None,
            }
            self.last_role = Some(message.role);
            self.checked = i + 1;
        }
        Ok(())
    }

    /// Whether `id` is a `tool_use` id of a committed message (the hash set answers; a hit is
    /// confirmed on the messages).
    fn seen_before(&self, messages: &[Message], id: &Arc<str>) -> bool {
        self.seen.contains(id_hash(id))
            && messages[..self.checked]
                .iter()
                .any(|m| m.tool_uses().any(|u| same(u.id, id)))
    }

    /// Checks one message. Nothing here allocates unless something is wrong: it runs for every
    /// message of every session.
    #[inline]
    fn check_message(
        &self,
        messages: &[Message],
        index: usize,
        message: &Message,
    ) -> Result<(), Box<Fault>> {
        let rules = self.rules;
        let open = self.open.map_or(&[][..], |i| &messages[i].content[..]);
        let is_open = |id: &Arc<str>| {
            open.iter()
                .any(|b| matches!(b, Block::ToolUse { id: o, .. } if same(o, id)))
        };
        if index == 0 && message.role != Role::User && rules.first_user {
            return Err(Box::new(Fault::FirstNotUser));
        }
        if self.last_role == Some(message.role) {
            if rules.alternate {
                return Err(Box::new(Fault::NotAlternating {
                    message: index,
                    role: message.role,
                }));
            }
            // Without the alternation rule, an assistant message after one with tool uses still
            // leaves them unanswered.
            if message.role == Role::Assistant && open.iter().any(|b| b.as_tool_use().is_some()) {
                return Err(Box::new(self.unanswered(messages, index, &message.content)));
            }
        }
        if rules.non_empty {
            if message.content.is_empty() {
                return Err(Box::new(Fault::EmptyContent { message: index }));
            }
            if let Some(block) = message
                .content
                .iter()
                .position(|b| matches!(b, Block::Text { text } if text.is_empty()))
            {
                return Err(Box::new(Fault::EmptyText {
                    message: index,
                    block,
                }));
            }
        }
        match message.role {
            Role::Assistant => {
                for (i, block) in message.content.iter().enumerate() {
                    match block {
                        Block::ToolResult { tool_use_id, .. } => {
                            return Err(Box::new(Fault::ResultInAssistant {
                                message: index,
                                block: i,
                                id: tool_use_id.clone(),
                            }));
                        }
                        Block::ToolUse { id, name, .. } => {
                            if id.is_empty() {
                                return Err(Box::new(Fault::EmptyId {
                                    message: index,
                                    block: i,
                                }));
                            }
                            if name.is_empty() {
                                return Err(Box::new(Fault::EmptyName {
                                    message: index,
                                    block: i,
                                    id: id.clone(),
                                }));
                            }
                            let earlier = message.content[..i]
                                .iter()
                                .any(|b| matches!(b, Block::ToolUse { id: o, .. } if same(o, id)));
                            if earlier || self.seen_before(messages, id) {
                                return Err(Box::new(Fault::DuplicateId {
                                    message: index,
                                    block: i,
                                    id: id.clone(),
                                }));
                            }
                        }
                        Block::Text { .. } => {}
                    }
                }
            }
            Role::User if results_follow_uses(open, &message.content) => {}
            Role::User => {
                let answers = |id: &Arc<str>, blocks: &[Block]| {
                    blocks.iter().any(
                        |b| matches!(b, Block::ToolResult { tool_use_id, .. } if same(tool_use_id, id)),
                    )
                };
                let mut text_seen = false;
                for (i, block) in message.content.iter().enumerate() {
                    match block {
                        Block::ToolResult { tool_use_id, .. } => {
                            if text_seen && rules.results_first {
                                return Err(Box::new(Fault::ResultAfterText {
                                    message: index,
                                    block: i,
                                    id: tool_use_id.clone(),
                                }));
                            }
                            if !is_open(tool_use_id) {
                                return Err(Box::new(Fault::OrphanResult {
                                    message: index,
                                    block: i,
                                    id: tool_use_id.clone(),
                                }));
                            }
                            if answers(tool_use_id, &message.content[..i]) {
                                return Err(Box::new(Fault::AnsweredTwice {
                                    message: index,
                                    block: i,
                                    id: tool_use_id.clone(),
                                }));
                            }
                        }
                        Block::ToolUse { id, .. } => {
                            return Err(Box::new(Fault::UseInUser {
                                message: index,
                                block: i,
                                id: id.clone(),
                            }));
                        }
                        Block::Text { .. } => text_seen = true,
                    }
                }
                if open.iter().any(
                    |b| matches!(b, Block::ToolUse { id, .. } if !answers(id, &message.content)),
                ) {
                    return Err(Box::new(self.unanswered(messages, index, &message.content)));
                }
                if rules.result_order {
                    // Results come in the order of the reply's tool uses (architecture invariant
                    // 4).
                    let mut expected = open.iter().filter_map(|b| match b {
                        Block::ToolUse { id, .. } => Some(id),
                        _ => None,
                    });
                    for (i, block) in message.content.iter().enumerate() {
                        if let Block::ToolResult { tool_use_id, .. } = block {
                            if let Some(want) = expected.next() {
                                if !same(want, tool_use_id) {
                                    return Err(Box::new(Fault::OutOfOrder {
                                        message: index,
                                        block: i,
                                        id: tool_use_id.clone(),
                                        expected: want.clone(),
                                    }));
                                }
                            }
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// The fault for the open message's tool uses that `content` (message `index`) leaves without
    /// results.
    fn unanswered(&self, messages: &[Message], index: usize, content: &[Block]) -> Fault {
        let assistant = self.open.unwrap_or(index.saturating_sub(1));
        let ids = messages[assistant]
            .tool_uses()
            .filter(|u| {
                !content.iter().any(
                    |b| matches!(b, Block::ToolResult { tool_use_id, .. } if same(tool_use_id, u.id)),
                )
            })
            .map(|u| u.id.clone())
            .collect();
        Fault::Unanswered {
            assistant,
            message: index,
            ids,
        }
    }
}

/// The common shape of a user message, checked in one pass: a result for every open tool use,
/// in their order, then nothing but text. Such a message passes every check of a user message
/// (the open message's ids were found distinct when it was checked); any other shape gets the
/// full check, which names what is wrong.
fn results_follow_uses(open: &[Block], content: &[Block]) -> bool {
    let mut blocks = content.iter();
    for u in open.iter().filter_map(Block::as_tool_use) {
        match blocks.next() {
            Some(Block::ToolResult { tool_use_id, .. }) if same(u.id, tool_use_id) => {}
            _ => return false,
        }
    }
    blocks.all(|b| matches!(b, Block::Text { .. }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::transcript::{Content, Session};
    use serde_json::json;

    fn strict(messages: &[Message]) -> Result<(), String> {
        Pairing::default()
            .check_request(messages)
            .map_err(|f| f.to_string())
    }

    fn session() -> Session {
        let mut s = Session::new("s");
        s.add_user_message("go");
        s.add_assistant_message(vec![
            Block::tool_use("a", "echo", json!({})),
            Block::tool_use("b", "echo", json!({})),
        ]);
        s
    }

    #[test]
    fn pairing_accepts_a_well_formed_session_incrementally() {
        let mut s = session();
        s.add_tool_result("a", "1", false);
        s.add_tool_result("b", "2", false);
        let mut p = Pairing::default();
        assert_eq!(p.check_request(&s.messages), Ok(()));
        s.add_assistant_message(vec![Block::text("done")]);
        s.add_user_message("next");
        assert_eq!(p.check_request(&s.messages), Ok(()));
        // Everything but the trailing user message is committed.
        assert_eq!(p.checked, 4);
    }

    #[test]
    fn pairing_rejects_what_the_apis_reject() {
        // A missing result.
        let mut s = session();
        s.add_tool_result("a", "1", false);
        assert!(strict(&s.messages)
            .unwrap_err()
            .contains("tool_use b has no tool_result"));
        // A result for an unknown id.
        let mut s = session();
        s.add_tool_result("a", "1", false);
        s.add_tool_result("b", "2", false);
        s.add_tool_result("zzz", "3", false);
        assert!(strict(&s.messages)
            .unwrap_err()
            .contains("tool_result zzz has no tool_use"));
        // A result twice.
        let mut s = session();
        s.add_tool_result("a", "1", false);
        s.add_tool_result("a", "1", false);
        s.add_tool_result("b", "2", false);
        assert!(strict(&s.messages).unwrap_err().contains("answered twice"));
        // Ending with the assistant.
        let s = session();
        assert!(strict(&s.messages)
            .unwrap_err()
            .contains("does not end with a user message"));
        // Two user messages in a row, built by hand.
        let user = Message {
            role: Role::User,
            content: smallvec::smallvec![Block::text("x")],
        };
        assert!(strict(&[user.clone(), user.clone()])
            .unwrap_err()
            .contains("roles must alternate"));
        // A reused id in a later reply.
        let mut s = session();
        s.add_tool_result("a", "1", false);
        s.add_tool_result("b", "2", false);
        s.messages.push(Message {
            role: Role::Assistant,
            content: smallvec::smallvec![Block::tool_use("a", "echo", json!({}))],
        });
        s.add_tool_result("a", "again", false);
        assert!(strict(&s.messages)
            .unwrap_err()
            .contains("duplicate tool_use id a"));
        // Results out of the reply's order.
        let mut s = session();
        s.add_tool_result("b", "2", false);
        s.add_tool_result("a", "1", false);
        assert!(strict(&s.messages)
            .unwrap_err()
            .contains("must follow the reply's order"));
        // An empty assistant message.
        let empty = Message {
            role: Role::Assistant,
            content: Content::new(),
        };
        assert!(strict(&[user.clone(), empty, user])
            .unwrap_err()
            .contains("empty content"));
        // Text before the results, and a tool use in a user message, built by hand.
        let mut s = session();
        s.messages.push(Message {
            role: Role::User,
            content: smallvec::smallvec![
                Block::text("hi"),
                Block::tool_result("a", "1", false),
                Block::tool_result("b", "2", false),
            ],
        });
        assert!(strict(&s.messages).unwrap_err().contains("after text"));
        let mut s = session();
        s.add_tool_result("a", "1", false);
        s.add_tool_result("b", "2", false);
        s.messages
            .last_mut()
            .unwrap()
            .content
            .push(Block::tool_use("c", "echo", json!({})));
        assert!(strict(&s.messages)
            .unwrap_err()
            .contains("a user message holds tool_use c"));
    }

    #[test]
    fn the_one_pass_user_check_takes_only_well_formed_messages() {
        let uses = [
            Block::text("thinking"),
            Block::tool_use("a", "echo", json!({})),
            Block::tool_use("b", "echo", json!({})),
        ];
        let (ra, rb) = (
            Block::tool_result("a", "1", false),
            Block::tool_result("b", "2", false),
        );
        let text = Block::text("and");
        assert!(results_follow_uses(&uses, &[ra.clone(), rb.clone()]));
        assert!(results_follow_uses(
            &uses,
            &[ra.clone(), rb.clone(), text.clone()]
        ));
        assert!(results_follow_uses(&[], std::slice::from_ref(&text)));
        // Everything else goes to the full check.
        assert!(!results_follow_uses(&uses, &[rb.clone(), ra.clone()]));
        assert!(!results_follow_uses(&uses, std::slice::from_ref(&ra)));
        assert!(!results_follow_uses(
            &uses,
            &[ra.clone(), rb.clone(), rb.clone()]
        ));
        assert!(!results_follow_uses(
            &uses,
            &[text.clone(), ra.clone(), rb.clone()]
        ));
        assert!(!results_follow_uses(&uses, &[ra.clone(), text, rb.clone()]));
        assert!(!results_follow_uses(&[], &[ra]));
        let stray = Block::tool_use("c", "echo", json!({}));
        assert!(!results_follow_uses(
            &uses,
            &[Block::tool_result("a", "1", false), rb, stray]
        ));
    }

    #[test]
    fn a_tool_use_with_an_empty_id_or_name_is_rejected() {
        let mut s = Session::new("s");
        s.add_user_message("go");
        s.add_assistant_message(vec![Block::tool_use("", "echo", json!({}))]);
        s.add_tool_result("", "1", false);
        assert_eq!(
            Pairing::default().check_request(&s.messages),
            Err(Fault::EmptyId {
                message: 1,
                block: 0
            })
        );
        let mut s = Session::new("s");
        s.add_user_message("go");
        s.add_assistant_message(vec![Block::tool_use("a", "", json!({}))]);
        s.add_tool_result("a", "1", false);
        let fault = Pairing::default().check_request(&s.messages).unwrap_err();
        assert_eq!(fault.to_string(), "message 2: tool_use a has an empty name");
    }

    #[test]
    fn lenient_rules_accept_what_the_providers_accept_and_still_pair_tools() {
        let lenient = Rules {
            first_user: false,
            last_user: false,
            alternate: false,
            non_empty: false,
            results_first: false,
            result_order: false,
        };
        // Results out of order, a final assistant prefill: fine for a provider.
        let mut s = session();
        s.add_tool_result("b", "2", false);
        s.add_tool_result("a", "1", false);
        s.add_assistant_message(vec![Block::text("prefill")]);
        assert_eq!(check(&s.messages, lenient), Ok(()));
        // A final assistant message with tool uses leaves them unanswered.
        let s = session();
        assert_eq!(
            check(&s.messages, lenient),
            Err(Fault::Unanswered {
                assistant: 1,
                message: 2,
                ids: vec!["a".into(), "b".into()]
            })
        );
        // Two assistant messages in a row: the first one's tool uses are unanswered.
        let mut s = session();
        s.messages.push(Message {
            role: Role::Assistant,
            content: smallvec::smallvec![Block::text("more")],
        });
        s.add_user_message("x");
        assert!(matches!(
            check(&s.messages, lenient),
            Err(Fault::Unanswered {
                assistant: 1,
                message: 2,
                ..
            })
        ));
    }
}
