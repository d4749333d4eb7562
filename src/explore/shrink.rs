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
pub fn shrink(scenario: Scenario, invariant: &str, budget: usize) -> Shrunk {
    let mut best = scenario;
    let mut attempts = 0;
    loop {
        let mut improved = false;
        for candidate in candidates(&best) {
            if attempts >= budget {
                return Shrunk {
                    scenario: best,
                    attempts,
                };
            }
            attempts += 1;
            if reproduces(&candidate, invariant) {
                best = candidate;
                improved = true;
                break;
            }
        }
        if !improved {
            return Shrunk {
                scenario: best,
                attempts,
            };
        }
    }
}

/// Smaller variants of `s`, most promising first.
fn candidates(s: &Scenario) -> Vec<Scenario> {
    let mut out = Vec::new();
    // Fewer steps.
    for i in (0..s.steps.len()).rev() {
        let mut c = s.clone();
        c.steps.remove(i);
        out.push(c);
    }
    // Adjacent runs merged.
    for i in 1..s.steps.len() {
        if let (StepKind::Run(a), StepKind::Run(b)) = (&s.steps[i - 1].kind, &s.steps[i].kind) {
            let mut c = s.clone();
            c.steps[i - 1].kind = StepKind::Run(a + b);
            c.steps.remove(i);
            out.push(c);
        }
    }
    // Shorter runs.
    for (i, step) in s.steps.iter().enumerate() {
        if let StepKind::Run(n) = step.kind {
            for m in [n / 2, n.saturating_sub(1)] {
                if m > 0 && m < n {
                    let mut c = s.clone();
                    c.steps[i].kind = StepKind::Run(m);
                    out.push(c);
                }
            }
        }
    }
    // Fewer agents.
    let names: Vec<(String, bool)> = s
        .catalog
        .skills
        .keys()
        .map(|n| (n.clone(), true))
        .chain(s.catalog.agents.keys().map(|n| (n.clone(), false)))
        .collect();
    for (name, skill) in names {
        let mut c = s.clone();
        if skill {
            c.catalog.skills.remove(&name);
        } else {
            c.catalog.agents.remove(&name);
        }
        c.scripts.remove(&name);
        out.push(c);
    }
    // Fewer script entries.
    for (agent, replies) in &s.scripts {
        for i in (0..replies.len()).rev() {
            let mut c = s.clone();
            c.scripts.get_mut(agent).expect("present").remove(i);
            out.push(c);
        }
    }
    // Fewer tool outcomes.
    for (tool, script) in &s.tools {
        if let ToolScript::PerCall(steps) = script {
            for i in (0..steps.len()).rev() {
                let mut c = s.clone();
                if let Some(ToolScript::PerCall(steps)) = c.tools.get_mut(tool) {
                    steps.remove(i);
                }
                out.push(c);
            }
        }
    }
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
    if changed {
        out.push(c);
    }
    out
}
