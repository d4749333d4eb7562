//! The runtime's settings: external tools, cancel words, what to record, persistence, planted
//! bugs and seed 004's interruption model.

use std::collections::BTreeMap;

use crate::agents::watchdog::InterruptionConfig;
use crate::runtime::planted::PlantedBug;

/// The words that cancel an active stack (DESIGN §3 item 7).
pub const DEFAULT_CANCEL_WORDS: [&str; 6] =
    ["cancel", "stop", "abort", "nevermind", "never mind", "quit"];

/// Settings of one external tool.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ToolSpec {
    /// Virtual-time timeout (DESIGN §3 item 10).
    pub timeout_ms: Option<u64>,
}

/// Runtime settings.
#[derive(Clone, Debug)]
pub struct RuntimeConfig {
    /// External tools by name; a `tool_use` of any other non-built-in name is "not found".
    pub tools: BTreeMap<String, ToolSpec>,
    /// Messages that unwind an active stack, compared trimmed and case-insensitively.
    pub cancel_words: Vec<String>,
    /// Record [`crate::protocol::Event`]s for observers and transcripts.
    pub record_events: bool,
    /// Also record the events only a transcript reads (reply contents, tool calls, stream events,
    /// the response's tool-call history). Observers need only the lean ones.
    pub detailed_events: bool,
    /// Seed of the id source.
    pub seed: u64,
    /// A planted bug to exhibit (none in normal use; see [`crate::runtime::planted`]).
    pub planted: Option<PlantedBug>,
    /// Emit persistence effects: a `context.jsonl` line per session operation, and `state.json`
    /// whenever every conversation is quiet.
    pub persist: bool,
    /// Model seed 004's activity watchdog and interruptions (off: `None`).
    pub interruptions: Option<InterruptionConfig>,
    /// Whether a user is there to answer `ask_user` (DESIGN §8: with none, the origin's "no
    /// handler", a question is answered at once with `No answer from the user.`).
    pub query_user: QueryUser,
    /// How many ended agents the tree keeps readable (`Runtime::agent`, expectations); the
    /// oldest are forgotten first. 0 keeps none.
    pub ended_nodes: usize,
    /// Publish every status change as an `agent-state` stream effect (for a driver that serves
    /// the tree's stream). The simulator, which reads the recorded events instead, turns it off.
    pub stream_agent_states: bool,
    /// How long an async question waits for its answer when its agent sets no
    /// `question_timeout` (seed 003's `agent_question_timeout_seconds`, default an hour).
    pub question_timeout_ms: u64,
    /// Where async questions' callbacks go and how they are retried (B20, B21). The runtime
    /// names the URL in each question's `SessionOp::Asked`; the driver sends them.
    pub callbacks: crate::agents::session::Callbacks,
    /// How long after its start a session may still wait for an answer (B26; `None`: forever).
    /// A question still open when its session expires fails the session, as a `fail` timeout
    /// does; an expired session is answered 404 like any failed one.
    pub session_expiry_ms: Option<u64>,
}

/// Who answers `ask_user`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum QueryUser {
    /// The user of the conversation: the frame waits for their next message.
    #[default]
    Interactive,
    /// Nobody: the question is answered at once with `No answer from the user.`
    None,
}

impl RuntimeConfig {
    /// Whether the runtime was told to exhibit `bug`.
    #[inline]
    pub fn has_bug(&self, bug: PlantedBug) -> bool {
        self.planted == Some(bug)
    }

    /// Whether `text` is a cancel word (trimmed, case ignored).
    pub(crate) fn is_cancel_word(&self, text: &str) -> bool {
        let t = text.trim();
        self.cancel_words.iter().any(|w| w.eq_ignore_ascii_case(t))
    }
}

impl Default for RuntimeConfig {
    fn default() -> RuntimeConfig {
        RuntimeConfig {
            tools: BTreeMap::new(),
            cancel_words: DEFAULT_CANCEL_WORDS.iter().map(|w| w.to_string()).collect(),
            record_events: true,
            detailed_events: true,
            seed: 0,
            planted: None,
            persist: false,
            interruptions: None,
            query_user: QueryUser::Interactive,
            ended_nodes: 4096,
            stream_agent_states: true,
            question_timeout_ms: 3_600_000,
            callbacks: Default::default(),
            session_expiry_ms: None,
        }
    }
}
