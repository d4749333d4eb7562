//! The `settings` of a scenario file: the runtime's and the simulator's settings, async
//! questions' callbacks, and seed 004's interruptions.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;
use serde_saphyr::Spanned;

use super::duration::Millis;

/// Settings of the run.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SettingsSpec {
    /// Words that unwind an active stack (default: cancel, stop, abort, nevermind, never mind, quit).
    #[serde(default)]
    pub cancel_words: Option<Vec<String>>,
    /// Maximum steps before the run fails (default 100000).
    #[serde(default)]
    pub max_steps: Option<u64>,
    /// Maximum stack depth (default 256).
    #[serde(default)]
    pub max_depth: Option<usize>,
    /// Maximum model calls (default 10000).
    #[serde(default)]
    pub max_llm_calls: Option<u64>,
    /// Run the runtime with this planted bug (see `agentsim explore --help`): for regression files
    /// that show the harness catching it.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub planted_bug: Option<Spanned<String>>,
    /// Emit persistence (`state.json`, `context.jsonl`); on by itself when a step restarts.
    #[serde(default)]
    pub persist: bool,
    /// Model seed 004's activity watchdog and interruptions: a preset and any knob overridden.
    #[serde(default)]
    #[schemars(with = "Option<InterruptionsSpec>")]
    pub interruptions: Option<Spanned<InterruptionsSpec>>,
    /// Who answers `ask_user`: `interactive` (default: the frame waits for the user's next
    /// message) or `none` (answered at once with `No answer from the user.`).
    #[serde(default)]
    pub query_user: Option<QueryUserSpec>,
    /// How long an async question waits for its answer when its agent sets no
    /// `question_timeout` (seed 003's `agent_question_timeout_seconds`; default 1h).
    #[serde(default)]
    pub question_timeout: Option<Millis>,
    /// Where async questions' callbacks are posted when their agent names no
    /// `question_callback` (seed 003's `agent_question_callback_url`; default: none, no
    /// callback).
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub question_callback_url: Option<Spanned<String>>,
    /// How callbacks are retried, and (in the simulator) what the callback endpoint replies.
    #[serde(default)]
    pub callbacks: Option<CallbacksSpec>,
    /// How long after its start a session may still wait for an answer (B26; default: no
    /// expiry). A question open when its session expires fails the session.
    #[serde(default)]
    pub session_expiry: Option<Millis>,
}

/// How question callbacks are retried, and what the simulated endpoint replies.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CallbacksSpec {
    /// Retries after a failed first attempt (default 3).
    #[serde(default)]
    pub retries: Option<u32>,
    /// The wait before the first retry, doubled for each next one (default 1s).
    #[serde(default)]
    pub backoff: Option<Millis>,
    /// How long one attempt may take (default 10s).
    #[serde(default)]
    pub timeout: Option<Millis>,
    /// The simulator's endpoint: what each attempt gets, in order across all callbacks: an HTTP
    /// status (2xx delivers), `refused` or `hang`; past the end, 200.
    #[serde(default)]
    #[schemars(with = "Vec<Value>")]
    pub replies: Vec<Spanned<Value>>,
}

/// Who answers `ask_user`.
#[derive(Clone, Copy, Debug, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum QueryUserSpec {
    /// The user of the conversation.
    Interactive,
    /// Nobody.
    None,
}

/// The watchdog and interruption model: `preset: legacy` (seed 004's runtime) or `preset: fixed`,
/// then any knob to override.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct InterruptionsSpec {
    /// `legacy` or `fixed` (default `fixed`).
    #[serde(default)]
    pub preset: Option<PresetSpec>,
    /// Inactivity that fires a timeout (preset: 120s).
    #[serde(default)]
    pub timeout: Option<Millis>,
    /// How often the watchdog checks (preset: 10s).
    #[serde(default)]
    pub check_every: Option<Millis>,
    /// What counts as activity.
    #[serde(default)]
    pub activity: Option<ActivitySpec>,
    /// An agent's watchdog pauses while its own tools run.
    #[serde(default)]
    pub pause_for_own_tools: Option<bool>,
    /// A running child pauses a watchdog.
    #[serde(default)]
    pub pause_for_child: Option<bool>,
    /// Whose: `parent` or `main`.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub child_pauses: Option<crate::agents::watchdog::PauseTarget>,
    /// `each_send` (released after the child's first send, activity not refreshed) or `delegation`.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub parent_resume: Option<crate::agents::watchdog::ParentResume>,
    /// `cleared_per_send` (the seed's flag) or `typed_cause`.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub continue_flag: Option<crate::agents::watchdog::ContinueFlag>,
    /// Continuations allowed per send.
    #[serde(default)]
    pub recovery_limit: Option<u32>,
    /// `sentinel` or `typed_error`.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub interrupted_returns: Option<crate::agents::watchdog::InterruptedReturn>,
    /// `substring` or `typed`.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub tool_recognises: Option<crate::agents::watchdog::Recognition>,
    /// Agents share one model client.
    #[serde(default)]
    pub shared_client: Option<bool>,
    /// `top_frame` or `unwind`.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub cancel: Option<crate::agents::watchdog::CancelScope>,
}

/// A preset of the interruption model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PresetSpec {
    /// Seed 004's runtime.
    Legacy,
    /// Its fix.
    Fixed,
}

/// What counts as activity; each omitted key keeps the preset's value.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ActivitySpec {
    /// A tool starts.
    #[serde(default)]
    pub tool_start: Option<bool>,
    /// A tool succeeds.
    #[serde(default)]
    pub tool_success: Option<bool>,
    /// A streamed token arrives.
    #[serde(default)]
    pub stream_token: Option<bool>,
    /// The model's reply arrives.
    #[serde(default)]
    pub first_output: Option<bool>,
}

impl InterruptionsSpec {
    /// The configuration: the preset with the overrides applied.
    pub fn config(&self) -> crate::agents::watchdog::InterruptionConfig {
        use crate::agents::watchdog::InterruptionConfig;
        let mut c = match self.preset {
            Some(PresetSpec::Legacy) => InterruptionConfig::legacy(),
            Some(PresetSpec::Fixed) | None => InterruptionConfig::fixed(),
        };
        if let Some(t) = self.timeout {
            c.timeout_ms = t.0;
        }
        if let Some(t) = self.check_every {
            c.check_every_ms = t.0;
        }
        if let Some(a) = &self.activity {
            c.activity.tool_start = a.tool_start.unwrap_or(c.activity.tool_start);
            c.activity.tool_success = a.tool_success.unwrap_or(c.activity.tool_success);
            c.activity.stream_token = a.stream_token.unwrap_or(c.activity.stream_token);
            c.activity.first_output = a.first_output.unwrap_or(c.activity.first_output);
        }
        c.pause_for_own_tools = self.pause_for_own_tools.unwrap_or(c.pause_for_own_tools);
        c.pause_for_child = self.pause_for_child.unwrap_or(c.pause_for_child);
        c.child_pauses = self.child_pauses.unwrap_or(c.child_pauses);
        c.parent_resume = self.parent_resume.unwrap_or(c.parent_resume);
        c.continue_flag = self.continue_flag.unwrap_or(c.continue_flag);
        c.recovery_limit = self.recovery_limit.unwrap_or(c.recovery_limit);
        c.interrupted_returns = self.interrupted_returns.unwrap_or(c.interrupted_returns);
        c.tool_recognises = self.tool_recognises.unwrap_or(c.tool_recognises);
        c.shared_client = self.shared_client.unwrap_or(c.shared_client);
        c.cancel = self.cancel.unwrap_or(c.cancel);
        c
    }
}
