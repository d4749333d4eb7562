//! The `restart` check of a runtime killed (SIGKILL) and started again on its state directory:
//! what it had before the kill, it still has after.
//!
//! - **No assistant turn lost.** The first model request of each of the mock server's
//!   conversations after a restart must replay every assistant turn the server had served to that
//!   conversation before the kill (the server's turn number of the request is at least the turns
//!   served). When the kill came in the middle of a turn, the last reply of each conversation may
//!   have been served and not stored yet; asking for that turn again is how a runtime resumes
//!   (docs/runtime-protocol.md, restarts), so one turn less is allowed there.
//! - **No turn duplicated or rewritten**: the mock server's `replayed-history` rule already fails
//!   a request that replays an assistant turn the server never sent in its conversation (a turn
//!   twice, an edited turn), and `tool-pairing` one that leaves a tool use unanswered; this check
//!   relies on them and does not judge those again.
//! - **The user is not sent a text twice**: after a restart, and until the user's next message to
//!   that conversation, the runtime does not send a conversation a text that a killed process had
//!   already sent it since the user's last message.

use std::collections::BTreeMap;

use serde_json::Value;

/// The state of the check over one run.
#[derive(Debug, Default)]
pub(super) struct RestartCheck {
    /// Kills so far.
    generation: u64,
    /// Per conversation: the texts sent since the user's last message, with the generation of the
    /// process that sent each.
    since_user: BTreeMap<String, Vec<(String, u64)>>,
    /// Per (agent, mock conversation) served before a kill and not asked again since: the
    /// lowest turn its next request may have, and the last exchange before the kill.
    watch: BTreeMap<(String, u64), (u64, u64)>,
    /// Violations found, in order, not yet reported.
    pub violations: Vec<String>,
}

fn address(line: &Value) -> Option<(String, u64, u64)> {
    Some((
        line.pointer("/address/agent")?.as_str()?.to_owned(),
        line.pointer("/address/conversation")?.as_u64()?,
        line.pointer("/address/turn")?.as_u64()?,
    ))
}

fn exchange(line: &Value) -> u64 {
    line.get("exchange").and_then(Value::as_u64).unwrap_or(0)
}

impl RestartCheck {
    /// A `user` line to `conversation`.
    pub(super) fn user(&mut self, conversation: &str) {
        self.since_user.remove(conversation);
    }

    /// A `send` of the runtime.
    pub(super) fn sent(&mut self, conversation: &str, text: &str) {
        let sent = self.since_user.entry(conversation.to_owned()).or_default();
        if sent
            .iter()
            .any(|(t, generation)| t == text && *generation < self.generation)
        {
            self.violations.push(format!(
                "restart: after the restart the runtime sent conversation {conversation} {text:?} again, which the killed process had already sent it since the user's last message"
            ));
        }
        sent.push((text.to_owned(), self.generation));
    }

    /// The runtime is killed; `journal` holds every exchange journaled so far, `exchanges` is
    /// the mock server's count, and `mid_turn` says the runtime had not said idle for its last
    /// input.
    pub(super) fn killed(&mut self, journal: &[Value], exchanges: u64, mid_turn: bool) {
        self.generation += 1;
        let mut served: BTreeMap<(String, u64), u64> = BTreeMap::new();
        for line in journal {
            if line.get("outcome").and_then(Value::as_str) != Some("reply") {
                continue;
            }
            if let Some((agent, conversation, turn)) = address(line) {
                let n = served.entry((agent, conversation)).or_insert(0);
                *n = (*n).max(turn + 1);
            }
        }
        for (key, turns) in served {
            let lowest = if mid_turn {
                turns.saturating_sub(1)
            } else {
                turns
            };
            self.watch.insert(key, (lowest, exchanges));
        }
    }

    /// Judges the requests journaled after a kill (every journal line, in any order).
    pub(super) fn requests(&mut self, journal: &[Value]) {
        if self.watch.is_empty() {
            return;
        }
        let mut after: Vec<&Value> = journal.iter().collect();
        after.sort_by_key(|l| exchange(l));
        for line in after {
            let Some((agent, conversation, turn)) = address(line) else {
                continue;
            };
            let key = (agent, conversation);
            let Some(&(lowest, killed_at)) = self.watch.get(&key) else {
                continue;
            };
            if exchange(line) <= killed_at {
                continue;
            }
            self.watch.remove(&key);
            if turn < lowest {
                self.violations.push(format!(
                    "restart: model request #{} of agent {} (mock conversation {}) replays {turn} assistant turn(s), but {lowest} had been served to that conversation before the kill: the runtime lost what it had been sent",
                    exchange(line),
                    key.0,
                    key.1
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn reply(n: u64, agent: &str, turn: u64) -> Value {
        json!({"exchange": n, "outcome": "reply",
               "address": {"agent": agent, "conversation": 1, "turn": turn, "entry": n}})
    }

    #[test]
    fn a_text_sent_again_after_a_kill_is_a_violation_and_a_new_turn_is_not() {
        let mut c = RestartCheck::default();
        c.user("default");
        c.sent("default", "Which version?");
        c.killed(&[], 0, false);
        c.sent("default", "Something new");
        assert!(c.violations.is_empty());
        c.sent("default", "Which version?");
        assert_eq!(c.violations.len(), 1, "{:?}", c.violations);
        c.violations.clear();
        c.user("default");
        c.sent("default", "Which version?");
        assert!(c.violations.is_empty());
    }

    #[test]
    fn a_request_that_forgets_a_served_turn_is_a_violation() {
        let before = [reply(1, "main", 0), reply(2, "main", 1)];
        let mut c = RestartCheck::default();
        c.killed(&before, 2, false);
        let mut journal = before.to_vec();
        journal.push(reply(3, "main", 1));
        c.requests(&journal);
        assert_eq!(c.violations.len(), 1, "{:?}", c.violations);
        assert!(c.violations[0].contains("replays 1 assistant turn(s), but 2"));

        // The same request after a kill in the middle of a turn: the last reply may not have
        // been stored, and asking again is how the runtime resumes.
        let mut c = RestartCheck::default();
        c.killed(&before, 2, true);
        c.requests(&journal);
        assert!(c.violations.is_empty());

        // A request that replays every turn passes, and only the first request after the
        // kill is judged.
        let mut c = RestartCheck::default();
        c.killed(&before, 2, false);
        let mut journal = before.to_vec();
        journal.push(reply(3, "main", 2));
        journal.push(reply(4, "main", 0));
        c.requests(&journal);
        assert!(c.violations.is_empty(), "{:?}", c.violations);
    }
}
