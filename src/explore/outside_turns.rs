//! The faults of an exploration seed that land in the scripted conversation itself, against a
//! runtime under test: user interjections and cancel words between and during turns, and where a
//! kill lands in a turn.
//!
//! A scripted conversation waits for the runtime's `idle` after each `user` step, so nothing
//! happens in the middle of a turn unless a step says `wait: false`. These faults make such
//! moments, each as plain steps of the played scenario (so they are journaled in the transcript,
//! kept by [`super::outside::materialize`] and shrunk like any other step):
//! - **between turns**: after a `user` step whose turn ended, another `user` step: a cancel word
//!   (for a runtime with the `cancel-words` capability) or a plain message;
//! - **during a turn**: the `user` step made `wait: false`, then `advance` by a drawn delay, then
//!   the interjection;
//! - **a kill in the middle of a turn**: a kill the seed placed after a `user` step lands in that
//!   step's turn: the step made `wait: false`, then `advance` by a drawn delay, then `restart`. A
//!   kill after a step that is already `wait: false` also waits the drawn delay first, so that it
//!   lands inside the turn rather than at the instant the user's line is written (when the runtime
//!   may not have read it yet).
//!
//! Every decision is a function of the seed and of the step's place, drawn from a stream of its
//! own, so that adding these faults changed none of the other faults of a seed.

use crate::model::rng::SimRng;
use crate::scenario::{Scenario, Step, StepKind};

/// The plain message an interjection sends when it is not a cancel word.
pub const INTERJECTION: &str = "one more thing";

/// The delays (scripted milliseconds, scaled like every `advance`) after which a fault lands in
/// a turn.
const DELAYS_MS: [u64; 3] = [100, 400, 1000];

/// What may be injected into the conversation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TurnSettings {
    /// Plain user messages between and during turns.
    pub user_messages: bool,
    /// Cancel words between and during turns (the runtime offers `cancel-words`).
    pub cancels: bool,
    /// Kills in the middle of a turn (the runtime offers `restart`).
    pub kills_mid_turn: bool,
}

/// A user message the seed adds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Interjection {
    /// After this step of the explored scenario (0-based), a `user` step.
    pub after: usize,
    /// `Some(ms)`: during that step's turn, this long after its line; `None`: after its turn.
    pub during: Option<u64>,
    /// The text: a cancel word, or [`INTERJECTION`].
    pub text: String,
}

/// The conversation faults of one seed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TurnPlan {
    /// The user messages added, by ascending step.
    pub interjections: Vec<Interjection>,
    /// The kills placed after these steps that land in the step's turn: (step, delay in ms).
    pub kills_mid_turn: Vec<(usize, u64)>,
    /// The kills placed after a `wait: false` step that are left out because kills in the middle
    /// of a turn are off (such a kill could only land in the turn).
    pub kills_left_out: Vec<usize>,
}

impl TurnPlan {
    /// The plan's faults, one line each, for the summary of a run.
    pub fn lines(&self) -> Vec<String> {
        let mut lines: Vec<String> = self
            .kills_mid_turn
            .iter()
            .map(|(i, ms)| format!("the kill after step {} lands {ms} ms into its turn", i + 1))
            .collect();
        lines.extend(self.kills_left_out.iter().map(|i| {
            format!(
                "the kill after step {} is left out (its turn runs, and kills mid-turn are off)",
                i + 1
            )
        }));
        lines.extend(self.interjections.iter().map(|j| match j.during {
            Some(ms) => format!(
                "user interjection {:?} {ms} ms into the turn of step {}",
                j.text,
                j.after + 1
            ),
            None => format!(
                "user interjection {:?} after the turn of step {}",
                j.text,
                j.after + 1
            ),
        }));
        lines
    }
}

/// The conversation faults of `seed` for `explored` (expectations removed), given the steps
/// after which the seed's other faults kill the runtime. Each kind is on for half the seeds, at
/// a rate the seed draws.
pub fn plan(
    seed: u64,
    explored: &Scenario,
    restarts_after: &[usize],
    settings: TurnSettings,
) -> TurnPlan {
    let mut rng = SimRng::new(seed).fork(seed, 0x0007_7A1C);
    let interject_on = rng.chance(0.5);
    let interject_rate = [0.5, 1.0][rng.below(2) as usize];
    let cancel_share = [0.5, 1.0][rng.below(2) as usize];
    let mid_turn_on = rng.chance(0.5);
    let cancel_word = explored.config.cancel_words.first().cloned();
    let mut out = TurnPlan::default();
    for (i, step) in explored.steps.iter().enumerate() {
        let is_user = matches!(step.kind, StepKind::User { .. });
        let waits = matches!(step.kind, StepKind::User { wait: true, .. });
        // Drawn for every step, so that a step's decisions do not depend on the others'.
        let interject = rng.chance(interject_rate);
        let cancel = rng.chance(cancel_share);
        let during = rng.chance(0.75);
        let mid_turn = rng.chance(0.5);
        let delay = DELAYS_MS[rng.below(DELAYS_MS.len() as u64) as usize];
        if restarts_after.contains(&i) {
            if is_user && !waits {
                // Its turn is running: the kill lands in it, or not at all.
                if settings.kills_mid_turn {
                    out.kills_mid_turn.push((i, delay));
                } else {
                    out.kills_left_out.push(i);
                }
            } else if is_user && settings.kills_mid_turn && mid_turn_on && mid_turn {
                out.kills_mid_turn.push((i, delay));
            }
            // A step followed by a kill takes no interjection.
            continue;
        }
        if !(is_user && interject_on && interject) {
            continue;
        }
        let text = match (settings.cancels, settings.user_messages, &cancel_word) {
            (true, true, Some(w)) if cancel => w.clone(),
            (true, false, Some(w)) => w.clone(),
            (_, true, _) => INTERJECTION.to_owned(),
            _ => continue,
        };
        out.interjections.push(Interjection {
            after: i,
            during: (during || !waits).then_some(delay),
            text,
        });
    }
    out
}

/// `explored` with the kills of `restarts_after` and the faults of `turns` made steps.
pub fn played(explored: &Scenario, restarts_after: &[usize], turns: &TurnPlan) -> Scenario {
    let mut s = explored.clone();
    let mut steps = Vec::with_capacity(s.steps.len() * 2);
    for (i, mut step) in s.steps.drain(..).enumerate() {
        let (line, column) = (step.line, step.column);
        let at = |kind| Step { line, column, kind };
        let mid_kill = turns.kills_mid_turn.iter().find(|(k, _)| *k == i);
        let interjection = turns.interjections.iter().find(|j| j.after == i);
        let in_turn = mid_kill
            .map(|(_, ms)| *ms)
            .or(interjection.and_then(|j| j.during));
        if let (Some(_), StepKind::User { wait, .. }) = (in_turn, &mut step.kind) {
            *wait = false;
        }
        let key = match &step.kind {
            StepKind::User { key, .. } => Some(key.clone()),
            _ => None,
        };
        steps.push(step);
        if let Some(ms) = in_turn {
            steps.push(at(StepKind::Advance(ms)));
        }
        if let (Some(j), Some(key)) = (interjection, key) {
            steps.push(at(StepKind::User {
                key,
                text: j.text.clone(),
                wait: true,
            }));
        }
        if restarts_after.contains(&i) && !turns.kills_left_out.contains(&i) {
            steps.push(at(StepKind::Restart));
        }
    }
    s.steps = steps;
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scenario() -> Scenario {
        let src = "name: x\nllm:\n  main: [a, b, c]\nsteps:\n  - user: one\n  - user: two\n  - user: three\n    wait: false\n  - advance: 1s\n";
        crate::scenario::parse(src, std::path::Path::new("x.yaml")).expect("loads")
    }

    const ALL: TurnSettings = TurnSettings {
        user_messages: true,
        cancels: true,
        kills_mid_turn: true,
    };

    #[test]
    fn a_plan_is_a_function_of_the_seed_and_of_what_the_runtime_offers() {
        let s = scenario();
        let mut interjected = 0;
        let mut cancels = 0;
        let mut mid_turn = 0;
        for seed in 0..200 {
            let p = plan(seed, &s, &[1], ALL);
            assert_eq!(p, plan(seed, &s, &[1], ALL));
            assert!(plan(seed, &s, &[1], TurnSettings::default()) == TurnPlan::default());
            for j in &p.interjections {
                assert!(matches!(s.steps[j.after].kind, StepKind::User { .. }));
                assert_ne!(
                    j.after, 1,
                    "a step followed by a kill takes no interjection"
                );
                if j.after == 2 {
                    assert!(j.during.is_some(), "a `wait: false` step's turn is running");
                }
            }
            interjected += usize::from(!p.interjections.is_empty());
            cancels += p
                .interjections
                .iter()
                .filter(|j| j.text == "cancel")
                .count();
            mid_turn += p.kills_mid_turn.len();
            let only_messages = TurnSettings {
                user_messages: true,
                ..TurnSettings::default()
            };
            let q = plan(seed, &s, &[1, 2], only_messages);
            assert!(q.interjections.iter().all(|j| j.text == INTERJECTION));
            assert!(q.kills_mid_turn.is_empty());
            assert_eq!(
                q.kills_left_out,
                [2],
                "a kill in a running turn needs kills mid-turn"
            );
            let r = plan(seed, &s, &[2], ALL);
            assert!(r.kills_mid_turn.iter().any(|(i, _)| *i == 2), "{r:?}");
        }
        assert!((50..150).contains(&interjected), "{interjected}");
        assert!(cancels > 20, "{cancels}");
        assert!((20..100).contains(&mid_turn), "{mid_turn}");
    }

    #[test]
    fn the_faults_become_plain_steps_in_the_turn_they_land_in() {
        let s = scenario();
        let turns = TurnPlan {
            interjections: vec![
                Interjection {
                    after: 0,
                    during: Some(400),
                    text: "cancel".into(),
                },
                Interjection {
                    after: 2,
                    during: None,
                    text: INTERJECTION.into(),
                },
            ],
            kills_mid_turn: vec![(1, 100)],
            kills_left_out: vec![],
        };
        let p = played(&s, &[1], &turns);
        let kinds: Vec<String> = p
            .steps
            .iter()
            .map(|step| match &step.kind {
                StepKind::User { text, wait, .. } => format!("user {text} {wait}"),
                StepKind::Advance(ms) => format!("advance {ms}"),
                StepKind::Restart => "restart".into(),
                _ => "other".into(),
            })
            .collect();
        assert_eq!(
            kinds,
            [
                "user one false",
                "advance 400",
                "user cancel true",
                "user two false",
                "advance 100",
                "restart",
                "user three false",
                "user one more thing true",
                "advance 1000",
            ]
        );
        // With no fault, the steps are the explored ones, kills between steps as before.
        let none = played(&s, &[0], &TurnPlan::default());
        assert_eq!(none.steps.len(), s.steps.len() + 1);
        assert!(matches!(none.steps[1].kind, StepKind::Restart));
        let left_out = TurnPlan {
            kills_left_out: vec![2],
            ..TurnPlan::default()
        };
        assert_eq!(played(&s, &[2], &left_out).steps.len(), s.steps.len());
    }
}
