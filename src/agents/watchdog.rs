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

/// One frame's watchdog and interruption state, with its transitions. The runtime owns the timers
/// and the frames; a `Watch` decides, from the time and what its frame is doing, when to arm,
/// pause, time out, continue or give up.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Watch {
    /// A check timer is scheduled.
    armed: bool,
    /// Virtual time of the last activity.
    last_activity: u64,
    /// The scheduled check.
    timer: Option<CallId>,
    /// Paused while its own tool runs.
    own_tool_pause: bool,
    /// Paused by a running child.
    child_pause: bool,
    /// The seed's `canContinueAfterTimeout`.
    flag: bool,
    /// The pending interruption, if any.
    interrupted: Option<Cause>,
    /// Continuations used in the current send.
    recoveries: u32,
    /// (As a child) it released its parent's pause at the end of a send.
    pause_released: bool,
}

/// What [`Watch::sync`] asks of the runtime.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sync {
    /// Nothing changes.
    Keep,
    /// Schedule a check (and tell the watch its timer with [`Watch::scheduled`]).
    Arm,
    /// The frame stopped running: withdraw this check, if one was scheduled.
    Disarm(Option<CallId>),
}

/// What a check that came due found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Check {
    /// The watch was disarmed meanwhile: nothing to do.
    Idle,
    /// Paused, or not idle long enough: schedule the next check.
    Again,
    /// An activity timeout: the frame is interrupted (and the next check is due as usual).
    TimedOut {
        /// How long the frame was idle.
        idle_ms: u64,
    },
}

/// The decision of an interrupted send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Continue with a continuation prompt.
    Continue {
        /// The interruption it recovers from.
        cause: Cause,
        /// Which recovery this is (1-based).
        recovery: u32,
    },
    /// End the send interrupted.
    End {
        /// The interruption.
        cause: Cause,
    },
}

impl Watch {
    /// Whether the watchdog is paused.
    pub(crate) fn paused(&self) -> bool {
        self.own_tool_pause || self.child_pause
    }

    /// The pending interruption, if any.
    pub fn interrupted(&self) -> Option<Cause> {
        self.interrupted
    }

    /// Whether, as a running child, it still pauses its parent's watchdog.
    pub(crate) fn pauses_parent(&self) -> bool {
        !self.pause_released
    }

    /// Activity at `now` resets the inactivity clock.
    pub fn activity(&mut self, now: u64) {
        self.last_activity = now;
    }

    /// Brings the watch in line with its frame: `running` (a send is in progress), `own_tools`
    /// (its own tools run), `by_child` (a running child pauses it).
    pub fn sync(
        &mut self,
        ic: &InterruptionConfig,
        now: u64,
        running: bool,
        own_tools: bool,
        by_child: bool,
    ) -> Sync {
        let own = ic.pause_for_own_tools && own_tools;
        if own != self.own_tool_pause {
            self.own_tool_pause = own;
            if !own {
                self.last_activity = now;
            }
        }
        if by_child != self.child_pause {
            self.child_pause = by_child;
            if !by_child && ic.parent_resume == ParentResume::Delegation {
                self.last_activity = now;
            }
        }
        if running && !self.armed {
            self.armed = true;
            self.last_activity = now;
            Sync::Arm
        } else if !running && self.armed {
            self.armed = false;
            Sync::Disarm(self.timer.take())
        } else {
            Sync::Keep
        }
    }

    /// Its next check is `timer`.
    pub fn scheduled(&mut self, timer: CallId) {
        self.timer = Some(timer);
    }

    /// Its check came due at `now`.
    pub fn check(&mut self, ic: &InterruptionConfig, now: u64) -> Check {
        self.timer = None;
        if !self.armed {
            return Check::Idle;
        }
        let idle_ms = now.saturating_sub(self.last_activity);
        if self.paused() || idle_ms < ic.timeout_ms {
            return Check::Again;
        }
        // The seed's handleActivityTimeout: set the context with the continue flag, interrupt.
        self.flag = true;
        self.interrupted = Some(Cause::ActivityTimeout);
        self.last_activity = now;
        Check::TimedOut { idle_ms }
    }

    /// Interrupts the frame with `cause` unless an interruption is already pending; whether it did.
    pub fn interrupt(&mut self, cause: Cause) -> bool {
        if self.interrupted.is_some() {
            return false;
        }
        self.interrupted = Some(cause);
        true
    }

    /// Decides an interrupted send at `now`: continue (within the recovery limit, when the
    /// configured continue rule allows it) or end it. Panics if no interruption is pending: the
    /// runtime asks only for an interrupted frame.
    pub fn decide(&mut self, ic: &InterruptionConfig, now: u64) -> Decision {
        let cause = self.interrupted.take().expect("an interrupted frame");
        let can_continue = match ic.continue_flag {
            ContinueFlag::ClearedPerSend => self.flag,
            ContinueFlag::TypedCause => cause == Cause::ActivityTimeout,
        };
        if can_continue && self.recoveries < ic.recovery_limit {
            self.recoveries += 1;
            self.last_activity = now;
            return Decision::Continue {
                cause,
                recovery: self.recoveries,
            };
        }
        Decision::End { cause }
    }

    /// The cleanup at the end of a send (the seed's `cleanupRequestState`); `is_child` for a frame
    /// that has a parent.
    pub(crate) fn end_send(&mut self, ic: &InterruptionConfig, is_child: bool) {
        if ic.continue_flag == ContinueFlag::ClearedPerSend {
            self.flag = false;
        }
        self.interrupted = None;
        self.recoveries = 0;
        if ic.parent_resume == ParentResume::EachSend && is_child {
            self.pause_released = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn running(w: &mut Watch, ic: &InterruptionConfig, now: u64) -> Sync {
        w.sync(ic, now, true, false, false)
    }

    #[test]
    fn a_watch_arms_while_its_frame_runs_and_times_out_after_the_timeout() {
        let ic = InterruptionConfig::fixed();
        let mut w = Watch::default();
        assert_eq!(running(&mut w, &ic, 0), Sync::Arm);
        w.scheduled(7);
        assert_eq!(running(&mut w, &ic, 5), Sync::Keep);
        assert_eq!(w.check(&ic, ic.timeout_ms - 1), Check::Again);
        assert_eq!(
            w.check(&ic, ic.timeout_ms),
            Check::TimedOut {
                idle_ms: ic.timeout_ms
            }
        );
        assert_eq!(w.interrupted(), Some(Cause::ActivityTimeout));
        w.scheduled(8);
        assert_eq!(w.sync(&ic, 1, false, false, false), Sync::Disarm(Some(8)));
        assert_eq!(w.check(&ic, 10 * ic.timeout_ms), Check::Idle);
    }

    #[test]
    fn a_paused_watch_never_times_out_and_resumes_with_fresh_activity() {
        let ic = InterruptionConfig::fixed();
        let mut w = Watch::default();
        w.sync(&ic, 0, true, true, false);
        assert!(w.paused());
        assert_eq!(w.check(&ic, 10 * ic.timeout_ms), Check::Again);
        // The tool finished at t: the inactivity clock starts again there.
        let t = 10 * ic.timeout_ms;
        w.sync(&ic, t, true, false, false);
        assert_eq!(w.check(&ic, t + ic.timeout_ms - 1), Check::Again);
    }

    #[test]
    fn legacy_loses_its_continue_flag_at_the_end_of_a_send_and_fixed_keeps_a_typed_cause() {
        for (ic, continues) in [
            (InterruptionConfig::legacy(), false),
            (InterruptionConfig::fixed(), true),
        ] {
            let mut w = Watch::default();
            running(&mut w, &ic, 0);
            assert!(matches!(
                w.check(&ic, ic.timeout_ms),
                Check::TimedOut { .. }
            ));
            // A send ends in between (the seed's cleanup), then a later timeout interrupts again
            // without the flag being set anew under legacy.
            w.end_send(&ic, true);
            assert!(w.interrupt(Cause::ActivityTimeout));
            let decision = w.decide(&ic, 1);
            assert_eq!(
                matches!(decision, Decision::Continue { .. }),
                continues,
                "{decision:?}"
            );
        }
    }

    #[test]
    fn recoveries_stop_at_the_limit() {
        let ic = InterruptionConfig::fixed();
        let mut w = Watch::default();
        for n in 1..=ic.recovery_limit {
            assert!(w.interrupt(Cause::ActivityTimeout));
            assert_eq!(
                w.decide(&ic, 0),
                Decision::Continue {
                    cause: Cause::ActivityTimeout,
                    recovery: n
                }
            );
        }
        assert!(w.interrupt(Cause::ActivityTimeout));
        assert!(
            !w.interrupt(Cause::UserCancel),
            "one interruption at a time"
        );
        assert_eq!(
            w.decide(&ic, 0),
            Decision::End {
                cause: Cause::ActivityTimeout
            }
        );
    }
}
