//! The conversation faults of `explore --runtime` as the command line turns them off: user
//! interjections (`--no-fault user-message`), cancel words (`--no-fault cancel`) and kills in the
//! middle of a turn (`--no-fault restart-mid-turn`).

use agentsim::explore::outside_turns::TurnSettings;

/// The conversation faults turned off.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct NoTurnFaults {
    pub user_messages: bool,
    pub cancels: bool,
    pub kills_mid_turn: bool,
}

impl NoTurnFaults {
    /// What may be injected: faults on, the kind not turned off, and the runtime offers what it
    /// needs (`cancel-words` for cancel words, `restart` for kills).
    pub(crate) fn settings(
        &self,
        faults: bool,
        restarts: bool,
        capabilities: &[String],
    ) -> TurnSettings {
        let has = |c: &str| capabilities.iter().any(|o| o == c);
        TurnSettings {
            user_messages: faults && !self.user_messages,
            cancels: faults && !self.cancels && has("cancel-words"),
            kills_mid_turn: faults && restarts && !self.kills_mid_turn && has("restart"),
        }
    }

    /// The flags that repeat these settings in a rerun command.
    pub(crate) fn flags(&self) -> String {
        let mut flags = String::new();
        for (off, kind) in [
            (self.user_messages, "user-message"),
            (self.cancels, "cancel"),
            (self.kills_mid_turn, "restart-mid-turn"),
        ] {
            if off {
                flags.push_str(" --no-fault ");
                flags.push_str(kind);
            }
        }
        flags
    }
}
