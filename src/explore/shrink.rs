//! Shrinking: make a failing scenario smaller while it still breaks the same invariant: fewer
//! steps, fewer script entries, fewer tool outcomes, fewer agents, no latencies, shorter strings.
//! Greedy, in passes, each candidate checked by running it; deterministic, since runs are.

use std::sync::Arc;

use crate::drive::scripted::{ReplyKind, ScriptBlock};
use crate::drive::scripted::{ToolBehavior, ToolScript};
use crate::runtime::DEFAULT_CANCEL_WORDS;
use crate::scenario::{run, RunOptions, Scenario, StepKind};

/// The result of shrinking.
#[derive(Clone, Debug)]
pub struct Shrunk {
    /// The smallest scenario found that still breaks the invariant.
    pub scenario: Scenario,
    /// Candidate runs tried.
    pub attempts: usize,
}

/// Whether `s` still breaks `invariant` (it expects that violation).
pub fn reproduces(s: &Scenario, invariant: &str) -> bool {
    let mut s = s.clone();
    s.expect_violation = Some(invariant.to_owned());
    run(&s, RunOptions::default()).reproduced.as_deref() == Some(invariant)
}

/// Shrinks `scenario`, which must break `invariant`, trying at most `budget` candidates.
///
/// Lists (the steps, each agent's replies, each tool's outcomes) shrink by removing chunks, halves
/// first and then ever smaller pieces down to single entries, so a long scenario whose failure
/// needs few of its entries shrinks in about `log n` rounds of candidates, not `n`. Each candidate
/// is built only when it is tried.
pub fn shrink(scenario: Scenario, invariant: &str, budget: usize) -> Shrunk {
    shrink_by(scenario, budget, None, &mut |s| reproduces(s, invariant))
}

/// Shrinks `scenario`, for which `still_fails` holds, while it holds: at most `budget`
/// candidates, and none started once `out_of_time` says so (the caller's clock: shrinking
/// itself reads none, so that agentsim's own runs shrink the same way every time). The edits
/// are [`shrink`]'s; `still_fails` decides (a run of agentsim's own runtime, or of a runtime
/// under test).
pub fn shrink_by(
    scenario: Scenario,
    budget: usize,
    out_of_time: Option<&dyn Fn() -> bool>,
    still_fails: &mut dyn FnMut(&Scenario) -> bool,
) -> Shrunk {
    let mut shrinker = Shrinker {
        best: scenario,
        still_fails,
        budget,
        out_of_time,
        attempts: 0,
    };
    loop {
        let mut improved = false;
        for list in lists(&shrinker.best) {
            improved |= shrinker.remove_chunks(&list);
        }
        // The other edits, in order; the list is made again after each success (indices move).
        'edits: loop {
            for edit in edits(&shrinker.best) {
                match shrinker.try_edit(&edit) {
                    Tried::Better => {
                        improved = true;
                        continue 'edits;
                    }
                    Tried::Worse => {}
                    Tried::OutOfBudget => return shrinker.done(),
                }
            }
            break;
        }
        if !improved || shrinker.attempts >= shrinker.budget || shrinker.out_of_time() {
            return shrinker.done();
        }
    }
}

struct Shrinker<'a> {
    best: Scenario,
    still_fails: &'a mut dyn FnMut(&Scenario) -> bool,
    budget: usize,
    out_of_time: Option<&'a dyn Fn() -> bool>,
    attempts: usize,
}

enum Tried {
    Better,
    Worse,
    OutOfBudget,
}

impl Shrinker<'_> {
    fn out_of_time(&self) -> bool {
        self.out_of_time.is_some_and(|f| f())
    }

    fn done(self) -> Shrunk {
        Shrunk {
            scenario: self.best,
            attempts: self.attempts,
        }
    }

    fn try_edit(&mut self, edit: &Edit) -> Tried {
        if self.attempts >= self.budget || self.out_of_time() {
            return Tried::OutOfBudget;
        }
        let Some(candidate) = edit.apply(&self.best) else {
            return Tried::Worse;
        };
        self.attempts += 1;
        if (self.still_fails)(&candidate) {
            self.best = candidate;
            Tried::Better
        } else {
            Tried::Worse
        }
    }

    /// Removes what it can of `list`, in chunks of halving size. Whether anything went.
    fn remove_chunks(&mut self, list: &List) -> bool {
        let mut improved = false;
        let mut size = list.len(&self.best).div_ceil(2);
        while size > 0 {
            let mut at = 0;
            while at < list.len(&self.best) {
                let end = (at + size).min(list.len(&self.best));
                match self.try_edit(&Edit::Remove(list.clone(), at..end)) {
                    Tried::Better => improved = true,
                    Tried::Worse => at = end,
                    Tried::OutOfBudget => return improved,
                }
            }
            size /= 2;
        }
        improved
    }
}

/// A list of a scenario whose entries can go.
#[derive(Clone, Debug)]
enum List {
    Steps,
    Replies(String),
    ToolCalls(String),
}

impl List {
    fn len(&self, s: &Scenario) -> usize {
        match self {
            List::Steps => s.steps.len(),
            List::Replies(agent) => s.scripts.get(agent).map_or(0, Vec::len),
            List::ToolCalls(tool) => match s.tools.get(tool) {
                Some(ToolScript::PerCall(steps)) => steps.len(),
                _ => 0,
            },
        }
    }
}

fn lists(s: &Scenario) -> Vec<List> {
    let mut lists = vec![List::Steps];
    lists.extend(s.scripts.keys().map(|a| List::Replies(a.clone())));
    lists.extend(
        s.tools
            .iter()
            .filter(|(_, script)| matches!(script, ToolScript::PerCall(_)))
            .map(|(t, _)| List::ToolCalls(t.clone())),
    );
    lists
}

/// One way to make a scenario smaller.
#[derive(Clone, Debug)]
enum Edit {
    /// Remove a range of a list's entries.
    Remove(List, std::ops::Range<usize>),
    /// Merge the `run` step at this index into the `run` step before it.
    MergeRuns(usize),
    /// Make the `run` step at this index take this many simulator steps.
    ShortenRun(usize, u64),
    /// Remove a skill or agent, and its script (and its forks' scripts).
    RemoveAgent(String),
    /// Stop offering an agent `fork` and `wait`, and drop its forks' scripts.
    NoFork(String),
    /// No latencies, one-character strings.
    Simplify,
}

impl Edit {
    /// The edited scenario, or `None` if the edit changes nothing.
    fn apply(&self, s: &Scenario) -> Option<Scenario> {
        let mut c = s.clone();
        match self {
            Edit::Remove(list, range) => match list {
                List::Steps => {
                    c.steps.drain(range.clone());
                }
                List::Replies(agent) => {
                    c.scripts.get_mut(agent)?.drain(range.clone());
                }
                List::ToolCalls(tool) => match c.tools.get_mut(tool) {
                    Some(ToolScript::PerCall(steps)) => {
                        steps.drain(range.clone());
                    }
                    _ => return None,
                },
            },
            Edit::MergeRuns(i) => {
                let (StepKind::Run(a), StepKind::Run(b)) =
                    (&s.steps[i - 1].kind, &s.steps[*i].kind)
                else {
                    return None;
                };
                c.steps[i - 1].kind = StepKind::Run(a + b);
                c.steps.remove(*i);
            }
            Edit::ShortenRun(i, m) => c.steps[*i].kind = StepKind::Run(*m),
            Edit::RemoveAgent(name) => {
                c.catalog.skills.remove(name);
                c.catalog.agents.remove(name);
                c.scripts.remove(name);
                drop_fork_scripts(&mut c, name);
            }
            Edit::NoFork(name) => {
                let def = c.catalog.get_mut(name)?;
                if !def.fork {
                    return None;
                }
                std::sync::Arc::make_mut(def).fork = false;
                drop_fork_scripts(&mut c, name);
            }
            Edit::Simplify => return simplified(s),
        }
        Some(c)
    }
}

/// Drops the scripts of `agent`'s forks (`agent#1`, `agent#1#2`, ...).
fn drop_fork_scripts(s: &mut Scenario, agent: &str) {
    let prefix = format!("{agent}#");
    s.scripts.retain(|name, _| !name.starts_with(&prefix));
}

/// The edits other than list removals, most promising first.
fn edits(s: &Scenario) -> Vec<Edit> {
    let mut out = Vec::new();
    for i in 1..s.steps.len() {
        if let (StepKind::Run(_), StepKind::Run(_)) = (&s.steps[i - 1].kind, &s.steps[i].kind) {
            out.push(Edit::MergeRuns(i));
        }
    }
    for (i, step) in s.steps.iter().enumerate() {
        if let StepKind::Run(n) = step.kind {
            for m in [n / 2, n.saturating_sub(1)] {
                if m > 0 && m < n {
                    out.push(Edit::ShortenRun(i, m));
                }
            }
        }
    }
    out.extend(
        s.catalog
            .skills
            .keys()
            .chain(s.catalog.agents.keys())
            .map(|n| Edit::RemoveAgent(n.clone())),
    );
    out.extend(
        std::iter::once(&s.catalog.main)
            .chain(s.catalog.skills.values())
            .chain(s.catalog.agents.values())
            .filter(|d| d.fork)
            .map(|d| Edit::NoFork(d.name.clone())),
    );
    out.push(Edit::Simplify);
    out
}

/// `s` with no latencies and one-character strings (cancel words kept), or `None` if it has none
/// to change.
fn simplified(s: &Scenario) -> Option<Scenario> {
    // No latencies, shorter strings.
    let mut c = s.clone();
    let mut changed = false;
    for replies in c.scripts.values_mut() {
        for r in replies {
            if r.after_ms > 0 {
                r.after_ms = 0;
                changed = true;
            }
            if let ReplyKind::Content(blocks) = &mut r.kind {
                for b in blocks {
                    if let ScriptBlock::Text(t) = b {
                        if t.len() > 1 {
                            *t = Arc::from("x");
                            changed = true;
                        }
                    }
                }
            }
        }
    }
    for script in c.tools.values_mut() {
        let steps = match script {
            ToolScript::Fixed(step) => std::slice::from_mut(step),
            ToolScript::PerCall(steps) => steps.as_mut_slice(),
        };
        for step in steps {
            if step.after_ms > 0 {
                step.after_ms = 0;
                changed = true;
            }
            if let ToolBehavior::Result { content, .. } = &mut step.behavior {
                if content.len() > 1 {
                    *content = Arc::from("r");
                    changed = true;
                }
            }
        }
    }
    for step in &mut c.steps {
        if let StepKind::User { text, .. } = &mut step.kind {
            let is_cancel = DEFAULT_CANCEL_WORDS
                .iter()
                .any(|w| w.eq_ignore_ascii_case(text.trim()));
            if !is_cancel && text.len() > 1 {
                *text = "x".into();
                changed = true;
            }
        }
    }
    changed.then_some(c)
}
