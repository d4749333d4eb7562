//! Each agent's route, the smallest that works: none at all (the default route: the model name
//! or the system prompt), else a `match:` rule of one condition (the model, a short phrase of the
//! system prompt, the tool set, a phrase of the first user message), else of two. A route works
//! when it holds for every request the log routed to the agent and for none routed elsewhere
//! (requests that carried the `x-agentsim-agent` header are routed by it, whatever the rules).

use std::collections::BTreeSet;

use super::Exchange;
use crate::mock_llm::book::{MatchRule, Route};
use crate::model::agent::{AgentDef, AgentKind};
use crate::model::transcript::{Message, Role};

/// How an agent's requests find it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum RouteChoice {
    /// Every request carried the `x-agentsim-agent` header: no rule is needed.
    Header,
    /// The default route; `model` is written when it is not the agent's name.
    Default { model: Option<String> },
    /// A `match:` rule.
    Rule(MatchRule),
    /// Nothing tells its requests from the others': the closest rule, and why it is not enough.
    Unrouted(Option<MatchRule>, String),
}

/// The first user message of a request, as the book reads it.
pub(super) fn first_user(messages: &[Message]) -> String {
    messages
        .iter()
        .find(|m| m.role == Role::User)
        .map(Message::text)
        .unwrap_or_default()
}

fn holds(route: &Route, e: &Exchange) -> bool {
    route.holds(&e.request, &first_user(&e.request.messages), &[])
}

/// The default route an agent gets with `model` and its system prompt written.
pub(super) fn default_route(name: &str, model: Option<&str>, system: Option<&str>) -> Route {
    let kind = if name == "main" {
        AgentKind::Main
    } else {
        AgentKind::Agent
    };
    let def = AgentDef::new(name, kind);
    Route::Default {
        model: model.unwrap_or(name).to_owned(),
        system: system.map_or_else(|| def.system_prompt.to_string(), str::to_owned),
    }
}

/// The smallest route of the agent `name` whose system prompt is written as `system`: `own` are
/// the requests routed to it, `others` those routed to other agents (requests routed by the
/// `x-agentsim-agent` header left out of both).
pub(super) fn choose(
    name: &str,
    system: Option<&str>,
    own: &[&Exchange],
    others: &[&Exchange],
) -> RouteChoice {
    let others = others.to_vec();
    if own.is_empty() {
        return RouteChoice::Header;
    }
    let works = |route: &Route, others: &[&Exchange]| {
        own.iter().all(|e| holds(route, e)) && !others.iter().any(|e| holds(route, e))
    };
    if works(&default_route(name, None, system), &others) {
        return RouteChoice::Default { model: None };
    }
    let model = common(own.iter().map(|e| e.request.model.clone()));
    if let Some(m) = &model {
        if works(&default_route(name, Some(m), system), &others) {
            return RouteChoice::Default {
                model: Some(m.clone()),
            };
        }
    }
    let rule = |r: MatchRule| Route::Rule(r);
    let by_model = model.as_ref().map(|m| MatchRule {
        model: Some(m.clone()),
        ..MatchRule::default()
    });
    let systems: Vec<String> = own
        .iter()
        .map(|e| e.request.system.clone().unwrap_or_default())
        .collect();
    let firsts: Vec<String> = own
        .iter()
        .map(|e| first_user(&e.request.messages))
        .collect();
    let tools = common(own.iter().map(|e| {
        let mut t = e.request.tools.clone();
        t.sort();
        Some(t)
    }))
    .filter(|t| !t.is_empty());
    // One condition.
    if let Some(r) = by_model
        .clone()
        .filter(|r| works(&rule(r.clone()), &others))
    {
        return RouteChoice::Rule(r);
    }
    let system_phrase = |others: &[&Exchange]| {
        let theirs: Vec<String> = others
            .iter()
            .map(|e| e.request.system.clone().unwrap_or_default())
            .collect();
        phrase(&systems, &theirs).map(|p| MatchRule {
            system_contains: Some(p),
            ..MatchRule::default()
        })
    };
    let first_phrase = |others: &[&Exchange]| {
        let theirs: Vec<String> = others
            .iter()
            .map(|e| first_user(&e.request.messages))
            .collect();
        phrase(&firsts, &theirs).map(|p| MatchRule {
            first_user_contains: Some(p),
            ..MatchRule::default()
        })
    };
    if let Some(r) = system_phrase(&others) {
        return RouteChoice::Rule(r);
    }
    let by_tools = tools.map(|t| MatchRule {
        tools: Some(t),
        ..MatchRule::default()
    });
    if let Some(r) = by_tools
        .clone()
        .filter(|r| works(&rule(r.clone()), &others))
    {
        return RouteChoice::Rule(r);
    }
    if let Some(r) = first_phrase(&others) {
        return RouteChoice::Rule(r);
    }
    // Two conditions: the first narrows the others, the second tells the rest apart.
    for first in [by_model.clone(), system_phrase(&[]), by_tools.clone()]
        .into_iter()
        .flatten()
    {
        let narrowed: Vec<&Exchange> = others
            .iter()
            .copied()
            .filter(|e| holds(&rule(first.clone()), e))
            .collect();
        let seconds = [
            system_phrase(&narrowed),
            first_phrase(&narrowed),
            by_tools.clone(),
        ];
        for second in seconds.into_iter().flatten() {
            let both = merge(&first, &second);
            if both != first && works(&rule(both.clone()), &others) {
                return RouteChoice::Rule(both);
            }
        }
    }
    RouteChoice::Unrouted(
        by_model.or(by_tools),
        format!(
            "agent `{}`: no rule of its model, system prompt, tools or first user message tells its requests from the other agents' (a runtime that sends the header `x-agentsim-agent: {}` is routed by it)",
            name, name
        ),
    )
}

/// The conditions of both rules.
fn merge(a: &MatchRule, b: &MatchRule) -> MatchRule {
    MatchRule {
        system_contains: a.system_contains.clone().or(b.system_contains.clone()),
        model: a.model.clone().or(b.model.clone()),
        headers: a.headers.clone(),
        tools: a.tools.clone().or(b.tools.clone()),
        tools_include: if a.tools_include.is_empty() {
            b.tools_include.clone()
        } else {
            a.tools_include.clone()
        },
        tool: a.tool.clone().or(b.tool.clone()),
        first_user_contains: a
            .first_user_contains
            .clone()
            .or(b.first_user_contains.clone()),
    }
}

/// The value every item has, if they all have one and the same.
fn common<T: PartialEq>(mut items: impl Iterator<Item = Option<T>>) -> Option<T> {
    let first = items.next()??;
    items.all(|i| i.as_ref() == Some(&first)).then_some(first)
}

/// The most words a phrase takes, and the words of a text it looks at.
const MAX_PHRASE_WORDS: usize = 12;
const MAX_WORDS_LOOKED_AT: usize = 400;

/// The shortest run of whole words of the first of `own` that every text of `own` contains and
/// no text of `theirs` does (at least four characters, so that it reads as a phrase).
pub(super) fn phrase(own: &[String], theirs: &[String]) -> Option<String> {
    let own: BTreeSet<&str> = own.iter().map(String::as_str).collect();
    let theirs: BTreeSet<&str> = theirs.iter().map(String::as_str).collect();
    let base = *own.iter().next()?;
    let words: Vec<(usize, usize)> = word_spans(base).take(MAX_WORDS_LOOKED_AT).collect();
    for len in 1..=MAX_PHRASE_WORDS.min(words.len()) {
        for start in 0..=(words.len() - len) {
            // Punctuation at either end (`please,`) reads as part of the sentence, not the phrase.
            let text = base[words[start].0..words[start + len - 1].1]
                .trim_matches(|c: char| c.is_ascii_punctuation());
            if text.chars().count() < 4 {
                continue;
            }
            if own.iter().all(|t| t.contains(text)) && !theirs.iter().any(|t| t.contains(text)) {
                return Some(text.to_owned());
            }
        }
    }
    None
}

/// The byte spans of the whitespace-separated words of `text`.
fn word_spans(text: &str) -> impl Iterator<Item = (usize, usize)> + '_ {
    let mut at = 0;
    std::iter::from_fn(move || {
        let rest = &text[at..];
        let start = at + rest.find(|c: char| !c.is_whitespace())?;
        let len = text[start..]
            .find(char::is_whitespace)
            .unwrap_or(text.len() - start);
        at = start + len;
        Some((start, start + len))
    })
}

#[cfg(test)]
mod tests {
    use super::phrase;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_shortest_phrase_that_tells_texts_apart() {
        let own = s(&["You forecast the weather. Be brief."]);
        let theirs = s(&[
            "You are the triage agent. Be brief.",
            "You plan the weather.",
        ]);
        assert_eq!(phrase(&own, &theirs).as_deref(), Some("forecast"));
        // A phrase every own text holds.
        let own = s(&["Researcher for Paris", "Researcher for Rome"]);
        assert_eq!(phrase(&own, &s(&["Writer"])).as_deref(), Some("Researcher"));
        // Nothing tells them apart.
        assert_eq!(phrase(&s(&["same"]), &s(&["same"])), None);
        assert_eq!(phrase(&s(&[""]), &s(&["x"])), None);
    }
}
