//! The conversation model: roles, content blocks, messages and the [`Session`] that seed 002 calls
//! `SessionState`.
//!
//! Text and ids are `Arc<str>` so that a message can be shared between a session, the events the
//! runtime records and the transcript without copying its bytes (architecture invariant 3: a turn's
//! cost does not grow with the session's length).
//!
//! Two rules keep every session valid under the Anthropic Messages API and OpenAI Chat Completions
//! (architecture invariant 4):
//! - roles alternate: a user text or a `tool_result` that follows a user message is merged into that
//!   message instead of starting a new one;
//! - inside a user message, `tool_result` blocks come before text blocks.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use smallvec::SmallVec;

use crate::model::hash::IdHashes;
use crate::model::ids::same_id;

/// Who wrote a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// The user, or the runtime speaking for tools (`tool_result` blocks).
    User,
    /// The model.
    Assistant,
}

/// One content block of a message.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Block {
    /// Plain text.
    Text {
        /// The text.
        text: Arc<str>,
    },
    /// The model asks for a tool to run.
    ToolUse {
        /// Id that the matching `tool_result` names.
        id: Arc<str>,
        /// Tool name.
        name: Arc<str>,
        /// JSON input.
        input: Arc<Value>,
    },
    /// The answer to a `tool_use`.
    ToolResult {
        /// Id of the `tool_use` this answers.
        tool_use_id: Arc<str>,
        /// Result text.
        content: Arc<str>,
        /// Whether the tool failed.
        is_error: bool,
    },
}

impl Block {
    /// A text block.
    pub fn text(text: impl Into<Arc<str>>) -> Block {
        Block::Text { text: text.into() }
    }

    /// A `tool_use` block.
    pub fn tool_use(id: impl Into<Arc<str>>, name: impl Into<Arc<str>>, input: Value) -> Block {
        Block::ToolUse {
            id: id.into(),
            name: name.into(),
            input: Arc::new(input),
        }
    }

    /// A `tool_result` block.
    pub fn tool_result(
        tool_use_id: impl Into<Arc<str>>,
        content: impl Into<Arc<str>>,
        is_error: bool,
    ) -> Block {
        Block::ToolResult {
            tool_use_id: tool_use_id.into(),
            content: content.into(),
            is_error,
        }
    }

    /// The `tool_use` fields, if this is one.
    pub(crate) fn as_tool_use(&self) -> Option<ToolUse<'_>> {
        match self {
            Block::ToolUse { id, name, input } => Some(ToolUse { id, name, input }),
            _ => None,
        }
    }
}

/// A borrowed view of a `tool_use` block.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ToolUse<'a> {
    /// The id.
    pub id: &'a Arc<str>,
    /// The tool name.
    pub name: &'a Arc<str>,
    /// The JSON input.
    pub input: &'a Arc<Value>,
}

/// Where a block sits in a session: the index of its message and its index in that message. A
/// frame that waits for a tool names the `tool_use` this way instead of holding copies of its id
/// and name: the session does not change while the frame waits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockAt {
    /// Index of the message.
    pub message: u32,
    /// Index of the block in it.
    pub block: u32,
}

/// The blocks of one message. Most messages hold one block (a reply with one tool use, its
/// result, a user's text), and one block is stored inline, without an allocation of its own.
pub type Content = SmallVec<[Block; 1]>;

/// One message of a conversation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// Author.
    pub role: Role,
    /// Content blocks, in order.
    pub content: Content,
}

impl Message {
    /// The concatenated text blocks.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for block in &self.content {
            if let Block::Text { text } = block {
                out.push_str(text);
            }
        }
        out
    }

    /// The `tool_use` blocks, in order.
    pub(crate) fn tool_uses(&self) -> impl Iterator<Item = ToolUse<'_>> {
        self.content.iter().filter_map(Block::as_tool_use)
    }

    /// Whether this message answers `tool_use_id`.
    pub fn answers(&self, tool_use_id: &str) -> bool {
        self.content.iter().any(
            |b| matches!(b, Block::ToolResult { tool_use_id: id, .. } if same_id(id, tool_use_id)),
        )
    }
}

/// The state of one conversation (seed 002's `SessionState`).
#[derive(Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Session {
    /// Session id.
    pub session_id: String,
    /// Provider that owns the conversation (e.g. `telegram`).
    pub provider: String,
    /// Chat id within the provider.
    pub chat_id: String,
    /// User id within the provider.
    pub user_id: String,
    /// The messages, oldest first.
    pub messages: Vec<Message>,
    /// Free-form metadata, ordered so that its serialisation is stable.
    pub metadata: BTreeMap<String, Value>,
    /// The hash of every `tool_use` id of the session, for the duplicate check; derived from
    /// `messages`, never iterated into output. A hit is confirmed on the messages, so a hash
    /// collision is never taken for a duplicate (and no id is shared just to be indexed).
    #[serde(skip)]
    tool_use_ids: IdHashes,
}

/// A clone keeps the original's spare room for messages, so that a copied long session (a
/// restarted run, a benchmark's starting point) appends without first moving every message it
/// holds, as the original would.
impl Clone for Session {
    fn clone(&self) -> Session {
        let mut messages = Vec::with_capacity(self.messages.capacity());
        messages.extend(self.messages.iter().cloned());
        Session {
            session_id: self.session_id.clone(),
            provider: self.provider.clone(),
            chat_id: self.chat_id.clone(),
            user_id: self.user_id.clone(),
            messages,
            metadata: self.metadata.clone(),
            tool_use_ids: self.tool_use_ids.clone(),
        }
    }
}

/// A `Session` could not be read back from JSON.
#[derive(Debug, thiserror::Error)]
#[error("invalid session JSON: {0}")]
pub struct SessionJsonError(#[from] serde_json::Error);

impl Session {
    /// An empty session with this id.
    pub fn new(session_id: impl Into<String>) -> Session {
        Session {
            session_id: session_id.into(),
            ..Session::default()
        }
    }

    /// An empty session named by a runtime-issued id (its hyphenated lower-case form).
    pub(crate) fn with_id(id: uuid::Uuid) -> Session {
        Session::new(crate::model::ids::uuid_string(id))
    }

    /// A fork's session (seed 001): `source`'s first `cut` messages, then `prompt` as user text.
    /// The runtime builds a fork's session this way, and a restore rebuilds it the same way from
    /// the journal.
    pub fn forked(id: uuid::Uuid, source: &Session, cut: usize, prompt: &str) -> Session {
        let mut session = Session::with_id(id);
        for message in &source.messages[..cut.min(source.messages.len())] {
            match message.role {
                Role::Assistant => {
                    session.add_assistant_message(message.content.clone());
                }
                Role::User => {
                    for block in &message.content {
                        session.push_user_block(block.clone());
                    }
                }
            }
        }
        session.add_user_message(prompt);
        session
    }

    /// Appends user text. If the last message is already a user message (a tool result, or a user
    /// message the model never answered), the text joins it so that roles keep alternating.
    pub(crate) fn add_user_message(&mut self, content: impl Into<Arc<str>>) -> &Message {
        let block = Block::text(content);
        match self.messages.last_mut() {
            Some(last) if last.role == Role::User => last.content.push(block),
            _ => self.push(Message {
                role: Role::User,
                content: smallvec::smallvec![block],
            }),
        }
        self.messages.last().expect("a message was just added")
    }

    /// Appends one block to the user side: it joins the last message if that is a user message.
    pub(crate) fn push_user_block(&mut self, block: Block) {
        match self.messages.last_mut() {
            Some(last) if last.role == Role::User => last.content.push(block),
            _ => self.push(Message {
                role: Role::User,
                content: smallvec::smallvec![block],
            }),
        }
    }

    /// Appends an assistant message.
    pub(crate) fn add_assistant_message(&mut self, content: impl Into<Content>) -> &Message {
        let content = content.into();
        for block in &content {
            if let Block::ToolUse { id, .. } = block {
                self.tool_use_ids.insert(id_hash(id));
            }
        }
        self.push(Message {
            role: Role::Assistant,
            content,
        });
        self.messages.last().expect("a message was just added")
    }

    /// Appends a `tool_result`. Results of one reply share one user message, placed before any text
    /// of that message.
    pub(crate) fn add_tool_result(
        &mut self,
        tool_use_id: impl Into<Arc<str>>,
        content: impl Into<Arc<str>>,
        is_error: bool,
    ) -> &Message {
        let block = Block::tool_result(tool_use_id, content, is_error);
        match self.messages.last_mut() {
            Some(last) if last.role == Role::User => {
                if last.content.len() == last.content.capacity() {
                    self.room_for_results();
                }
                let last = self.messages.last_mut().expect("a message is last");
                let at = last
                    .content
                    .iter()
                    .position(|b| matches!(b, Block::Text { .. }))
                    .unwrap_or(last.content.len());
                last.content.insert(at, block);
            }
            _ => self.push(Message {
                role: Role::User,
                content: smallvec::smallvec![block],
            }),
        }
        self.messages.last().expect("a message was just added")
    }

    /// The last message, a user message of tool results, is full: it gets room for a result
    /// for every tool use of the reply before it at once, rather than growing (and copying its
    /// results) through 2, 4 and 8.
    #[cold]
    fn room_for_results(&mut self) {
        let n = self.messages.len();
        let uses = match n.checked_sub(2).map(|i| &self.messages[i]) {
            Some(reply) if reply.role == Role::Assistant => reply
                .content
                .iter()
                .filter(|b| matches!(b, Block::ToolUse { .. }))
                .count(),
            _ => 0,
        };
        let last = &mut self.messages[n - 1].content;
        last.reserve(uses.saturating_sub(last.len()).max(1));
    }

    /// Appends a message; a new session starts with room for a few exchanges.
    #[inline]
    fn push(&mut self, message: Message) {
        if self.messages.capacity() == 0 {
            self.messages.reserve(8);
        }
        self.messages.push(message);
    }

    /// The messages to send to the model. A borrow: nothing is copied.
    pub(crate) fn get_messages_for_llm(&self) -> &[Message] {
        &self.messages
    }

    /// Index of the last assistant message.
    fn last_assistant(&self) -> Option<usize> {
        self.messages
            .iter()
            .rposition(|m| m.role == Role::Assistant)
    }

    /// The `tool_use` blocks of the last assistant message that have no `tool_result` yet, in the
    /// reply's order (seed 000's `_get_unresolved_tool_uses`).
    ///
    /// After a child completes, the parent's last message is a user message holding some results;
    /// this walks back to the last assistant message and keeps the uses that nothing answered.
    pub(crate) fn unresolved_tool_uses(&self) -> Vec<ToolUse<'_>> {
        self.unresolved().map(|(_, u)| u).collect()
    }

    /// The first unresolved `tool_use`, without allocating.
    pub(crate) fn next_unresolved_tool_use(&self) -> Option<ToolUse<'_>> {
        self.next_unresolved().map(|(_, u)| u)
    }

    /// The first unresolved `tool_use` and where it sits.
    pub(crate) fn next_unresolved(&self) -> Option<(BlockAt, ToolUse<'_>)> {
        self.unresolved().next()
    }

    /// The unresolved `tool_use` blocks of the last assistant message, in order, with where each
    /// sits.
    pub fn unresolved(&self) -> impl Iterator<Item = (BlockAt, ToolUse<'_>)> {
        let at = self.last_assistant();
        let (content, later): (&[Block], &[Message]) = match at {
            Some(at) => (&self.messages[at].content, &self.messages[at + 1..]),
            None => (&[], &[]),
        };
        let message = at.unwrap_or(0) as u32;
        content.iter().enumerate().filter_map(move |(i, b)| {
            let u = b.as_tool_use()?;
            let at = BlockAt {
                message,
                block: i as u32,
            };
            (!later.iter().any(|m| m.answers(u.id))).then_some((at, u))
        })
    }

    /// Where the `tool_use` with this id sits (the latest, if ids repeat).
    pub(crate) fn tool_use_by_id(&self, id: &str) -> Option<BlockAt> {
        self.messages
            .iter()
            .enumerate()
            .rev()
            .find_map(|(m, message)| {
                let b = message
                    .content
                    .iter()
                    .position(|b| matches!(b, Block::ToolUse { id: i, .. } if &**i == id))?;
                Some(BlockAt {
                    message: m as u32,
                    block: b as u32,
                })
            })
    }

    /// The `tool_use` block at `at`, if there is one.
    pub(crate) fn tool_use_at(&self, at: BlockAt) -> Option<ToolUse<'_>> {
        self.messages
            .get(at.message as usize)?
            .content
            .get(at.block as usize)?
            .as_tool_use()
    }

    /// Whether `tool_use_id` is a `tool_use` of the last assistant message that has no result yet.
    pub(crate) fn is_unresolved(&self, tool_use_id: &str) -> bool {
        self.unresolved().any(|(_, u)| &**u.id == tool_use_id)
    }

    /// Serialises the session.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a session always serialises: its keys are strings")
    }

    /// Reads a session back from [`Session::to_json`]'s text.
    pub fn from_json(json: &str) -> Result<Session, SessionJsonError> {
        let mut session: Session = serde_json::from_str(json)?;
        session.reindex();
        Ok(session)
    }

    /// Rebuilds the derived `tool_use` id index after `messages` was replaced wholesale.
    fn reindex(&mut self) {
        self.tool_use_ids = self
            .messages
            .iter()
            .flat_map(|m| m.tool_uses().map(|u| id_hash(u.id)))
            .collect();
    }

    /// Whether some assistant message of this session already used `id`.
    pub(crate) fn has_tool_use_id(&self, id: &str) -> bool {
        self.tool_use_ids.contains(id_hash(id))
            && self
                .messages
                .iter()
                .any(|m| m.tool_uses().any(|u| same_id(u.id, id)))
    }
}

/// The hash of a `tool_use` id, for the duplicate indexes.
pub(crate) fn id_hash(id: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = crate::model::hash::FxHasher::default();
    id.hash(&mut h);
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn reply_with_three_tools(s: &mut Session) {
        s.add_user_message("do three things");
        s.add_assistant_message(vec![
            Block::text("on it"),
            Block::tool_use("t1", "echo", json!({"x": 1})),
            Block::tool_use("t2", "use_skill", json!({"skill": "r"})),
            Block::tool_use("t3", "echo", json!({"x": 3})),
        ]);
    }

    #[test]
    fn unresolved_after_a_child_result_keeps_the_rest_in_reply_order() {
        let mut s = Session::new("s");
        reply_with_three_tools(&mut s);
        let ids = |s: &Session| -> Vec<String> {
            s.unresolved_tool_uses()
                .iter()
                .map(|u| u.id.to_string())
                .collect()
        };
        assert_eq!(ids(&s), ["t1", "t2", "t3"]);
        s.add_tool_result("t1", "1", false);
        // t2 spawned a child; the child's result is injected later.
        s.add_tool_result("t2", "child says hi", false);
        assert_eq!(ids(&s), ["t3"]);
        assert_eq!(&**s.next_unresolved_tool_use().unwrap().id, "t3");
        assert!(s.is_unresolved("t3"));
        assert!(!s.is_unresolved("t2"));
        s.add_tool_result("t3", "3", false);
        assert!(s.unresolved_tool_uses().is_empty());
        assert!(s.next_unresolved_tool_use().is_none());
        // All three results share the one user message that follows the reply.
        assert_eq!(s.messages.len(), 3);
        assert_eq!(s.messages[2].content.len(), 3);
    }

    #[test]
    fn unresolved_is_empty_without_an_assistant_message_or_tool_uses() {
        let mut s = Session::new("s");
        assert!(s.unresolved_tool_uses().is_empty());
        s.add_user_message("hi");
        assert!(s.unresolved_tool_uses().is_empty());
        s.add_assistant_message(vec![Block::text("hello")]);
        assert!(s.unresolved_tool_uses().is_empty());
    }

    #[test]
    fn user_text_after_a_user_message_merges_and_results_go_first() {
        let mut s = Session::new("s");
        s.add_user_message("one");
        s.add_user_message("two");
        assert_eq!(s.messages.len(), 1);
        assert_eq!(s.messages[0].text(), "onetwo");
        s.add_assistant_message(vec![Block::tool_use("a", "ask_user", json!({}))]);
        s.add_user_message("typed while waiting");
        s.add_tool_result("a", "answer", false);
        let m = &s.messages[2];
        assert!(matches!(m.content[0], Block::ToolResult { .. }));
        assert!(matches!(m.content[1], Block::Text { .. }));
    }

    #[test]
    fn json_round_trip_preserves_everything() {
        let mut s = Session::new("sess-1");
        s.provider = "telegram".into();
        s.chat_id = "42".into();
        s.user_id = "7".into();
        s.metadata.insert("k".into(), json!({"nested": [1, 2]}));
        reply_with_three_tools(&mut s);
        s.add_tool_result("t1", "ok", false);
        s.add_tool_result("t2", "boom", true);
        let back = Session::from_json(&s.to_json()).unwrap();
        assert_eq!(back, s);
        assert_eq!(back.get_messages_for_llm().len(), 3);
    }

    #[test]
    fn a_clone_is_equal_and_keeps_room_to_grow() {
        let mut s = Session::new("s");
        for i in 0..20 {
            s.add_user_message(format!("q{i}"));
            s.add_assistant_message(vec![Block::tool_use(format!("t{i}"), "echo", json!({}))]);
            s.add_tool_result(format!("t{i}"), "r", false);
        }
        assert!(s.messages.capacity() > s.messages.len());
        let c = s.clone();
        assert_eq!(c, s);
        assert_eq!(c.messages.capacity(), s.messages.capacity());
        assert!(c.has_tool_use_id("t7") && !c.has_tool_use_id("t99"));
    }

    #[test]
    fn corrupt_json_is_an_error_not_a_panic() {
        let err = Session::from_json("{\"session_id\": 3").unwrap_err();
        assert!(err.to_string().starts_with("invalid session JSON"));
    }
}
