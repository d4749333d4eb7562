//! The activity watchdog and the interruption model of seed 004's runtime, in virtual time.
//!
//! Off by default ([`crate::runtime::RuntimeConfig::interruptions`] is `None`). When on, every
//! frame that is running a *send* (anything but waiting for the user) has a watchdog: a check every
//! `check_every_ms`; the first check that finds `timeout_ms` or more since the frame's last activity
//! fires an activity timeout. A timeout interrupts the frame; with a shared model client the abort
//! also hits the in-flight model call of every frame above it (cause "abort from another agent").
//! An interrupted frame either continues (a continuation prompt and a new model call, up to a
//! recovery limit) or ends its send interrupted, returning seed 004's display sentinel or a typed
//! error; a batch delegation then recognises the interruption by substring or by type.
//!
//! Every knob is a field of [`InterruptionConfig`]; [`InterruptionConfig::legacy`] is the seed's
//! runtime, [`InterruptionConfig::fixed`] its fix.

use serde::{Deserialize, Serialize};

use crate::model::ids::CallId;

/// What resets an agent's inactivity clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Activity {
    /// A tool starts.
    pub tool_start: bool,
    /// A tool succeeds.
    pub tool_success: bool,
    /// A streamed token arrives.
    pub stream_token: bool,
    /// The model's reply arrives (its first output).
    pub first_output: bool,
}

/// Whose watchdog a running child pauses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PauseTarget {
    /// Its own parent's.
    Parent,
    /// The main agent's (the seed's bug: middle agents keep counting while they wait).
    Main,
}

/// How long a child's pause of its parent's watchdog lasts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ParentResume {
    /// Released in the cleanup at the end of the child's first send, without refreshing the
    /// parent's activity (the seed: `finally { cleanupRequestState(); resume parent monitoring }`).
    EachSend,
    /// Held until the child is popped; the parent's activity is refreshed when it resumes.
    Delegation,
}

/// How the continue-after-timeout decision is made.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ContinueFlag {
    /// A `canContinueAfterTimeout` flag, set by the timeout handler and erased by the cleanup at
    /// the end of each send (the seed's bug: a later interruption finds it gone).
    ClearedPerSend,
    /// The interruption carries a typed cause; only an activity timeout continues.
    TypedCause,
}

/// What an interrupted send returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InterruptedReturn {
    /// The display-only "Interrupted. Tell Ally what to do instead." as if it were the answer.
    Sentinel,
    /// A typed error.
    TypedError,
}

/// How a batch delegation recognises an interrupted child.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Recognition {
    /// Only by the substring "[Request interrupted" (the seed's `AgentTool` check).
    Substring,
    /// By the typed result.
    Typed,
}

/// What a cancel word does while a turn is running.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CancelScope {
    /// Interrupts only the frame on top; its parents carry on (the seed's bug).
    TopFrame,
    /// Unwinds the whole stack (DESIGN §3 item 7).
    Unwind,
}

/// Every knob of the watchdog and interruption model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InterruptionConfig {
    /// Inactivity that fires a timeout.
    pub timeout_ms: u64,
    /// How often the watchdog checks.
    pub check_every_ms: u64,
    /// What counts as activity.
    pub activity: Activity,
    /// An agent's watchdog pauses while its own tools run.
    pub pause_for_own_tools: bool,
    /// A running child pauses a watchdog (see `child_pauses`).
    pub pause_for_child: bool,
    /// Whose watchdog a child pauses.
    pub child_pauses: PauseTarget,
    /// How long that pause lasts.
    pub parent_resume: ParentResume,
    /// How the continue decision is made.
    pub continue_flag: ContinueFlag,
    /// Continuations allowed per send.
    pub recovery_limit: u32,
    /// What an interrupted send returns.
    pub interrupted_returns: InterruptedReturn,
    /// How a batch delegation recognises an interruption.
    pub tool_recognises: Recognition,
    /// Agents share one model client: an abort hits every in-flight call above the aborting frame.
    pub shared_client: bool,
    /// What a cancel word does while a turn runs.
    pub cancel: CancelScope,
}

impl InterruptionConfig {
    /// The seed's runtime: 120 s without a tool call, checked every 10 s; children pause the main
    /// agent's watchdog and release it after their first send; a per-send continue flag; the
    /// display sentinel; recognition by substring; a cancel that stops only the top frame.
    pub fn legacy() -> InterruptionConfig {
        InterruptionConfig {
            timeout_ms: 120_000,
            check_every_ms: 10_000,
            activity: Activity {
                tool_start: true,
                tool_success: true,
                stream_token: false,
                first_output: false,
            },
            pause_for_own_tools: false,
            pause_for_child: true,
            child_pauses: PauseTarget::Main,
            parent_resume: ParentResume::EachSend,
            continue_flag: ContinueFlag::ClearedPerSend,
            recovery_limit: 3,
            interrupted_returns: InterruptedReturn::Sentinel,
            tool_recognises: Recognition::Substring,
            shared_client: true,
            cancel: CancelScope::TopFrame,
        }
    }

    /// The fix: every output counts as activity, an agent's own tools and its child pause its
    /// watchdog for the whole delegation, causes are typed, an interrupted send is a typed error
    /// (a failed tool result for a batch delegation), and a cancel unwinds the stack.
    pub fn fixed() -> InterruptionConfig {
        InterruptionConfig {
            activity: Activity {
                tool_start: true,
                tool_success: true,
                stream_token: true,
                first_output: true,
            },
            pause_for_own_tools: true,
            child_pauses: PauseTarget::Parent,
            parent_resume: ParentResume::Delegation,
            continue_flag: ContinueFlag::TypedCause,
            interrupted_returns: InterruptedReturn::TypedError,
            tool_recognises: Recognition::Typed,
            cancel: CancelScope::Unwind,
            ..InterruptionConfig::legacy()
        }
    }
}

/// Why a frame was interrupted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Cause {
    /// Its own watchdog fired.
    ActivityTimeout,
    /// The user typed a cancel word.
    UserCancel,
    /// Another agent sharing the model client aborted it.
    OtherAgentAbort,
}

impl Cause {
    /// Human-readable.
    pub fn describe(self) -> &'static str {
        match self {
            Cause::ActivityTimeout => "activity timeout",
            Cause::UserCancel => "user cancel",
            Cause::OtherAgentAbort => "abort from another agent sharing the model client",
        }
    }
}

/// One frame's watchdog and interruption state.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Watch {
    /// A check timer is scheduled.
    pub armed: bool,
    /// Virtual time of the last activity.
    pub last_activity: u64,
    /// The scheduled check.
    pub timer: Option<CallId>,
    /// Paused while its own tool runs.
    pub own_tool_pause: bool,
    /// Paused by a running child.
    pub child_pause: bool,
    /// The seed's `canContinueAfterTimeout`.
    pub flag: bool,
    /// The pending interruption, if any.
    pub interrupted: Option<Cause>,
    /// Continuations used in the current send.
    pub recoveries: u32,
    /// (As a child) it released its parent's pause at the end of a send.
    pub pause_released: bool,
}

impl Watch {
    /// Whether the watchdog is paused.
    pub fn paused(&self) -> bool {
        self.own_tool_pause || self.child_pause
    }
}
