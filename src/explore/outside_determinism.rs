//! The `determinism` check of `explore --runtime --determinism`: a seed run twice, with the same
//! faults, must give the same exchanges. What is compared, per conversation and in order: the
//! model requests as the mock server journaled their bodies, the texts sent to the user, and the
//! tool calls (tool and input). A runtime that does otherwise under scripted inputs is itself a
//! finding: its failures cannot be replayed, nor shrunk.
//!
//! Known nondeterminism is declared by patterns (regular expressions): every match of a pattern
//! in any string compared (a string value of a request body, a sent text, a string of a tool
//! call's input) is replaced by `<nondeterministic>` in both runs before they are compared.

use std::collections::BTreeMap;

use regex::Regex;
use serde_json::Value;

use crate::outside_run::Outcome;

/// The name of the finding.
pub const DETERMINISM: &str = "determinism";

/// What replaces a match of a declared pattern.
const MASK: &str = "<nondeterministic>";

/// The patterns of `--nondeterministic`, compiled; a bad one is an error naming it.
pub fn patterns(given: &[String]) -> Result<Vec<Regex>, String> {
    given
        .iter()
        .map(|p| {
            if p.is_empty() {
                return Err("--nondeterministic ``: an empty pattern matches everywhere; name what varies (e.g. `[0-9]{2}:[0-9]{2}:[0-9]{2}`)".to_owned());
            }
            Regex::new(p).map_err(|e| format!("--nondeterministic `{p}`: not a regular expression: {e}"))
        })
        .collect()
}

/// `v` with every match of `patterns` in its strings masked.
fn masked(v: &Value, patterns: &[Regex]) -> Value {
    match v {
        Value::String(s) => Value::String(mask_str(s, patterns)),
        Value::Array(a) => Value::Array(a.iter().map(|x| masked(x, patterns)).collect()),
        Value::Object(o) => Value::Object(
            o.iter()
                .map(|(k, x)| (k.clone(), masked(x, patterns)))
                .collect(),
        ),
        other => other.clone(),
    }
}

fn mask_str(s: &str, patterns: &[Regex]) -> String {
    let mut out = s.to_owned();
    for p in patterns {
        out = p.replace_all(&out, MASK).into_owned();
    }
    out
}

/// What one run did, per conversation, masked.
#[derive(Default)]
struct Seen {
    /// Per conversation: (exchange number, request body) in exchange order.
    requests: BTreeMap<String, Vec<(u64, Value)>>,
    /// Per conversation: the texts sent.
    sent: BTreeMap<String, Vec<Value>>,
    /// Per conversation: the tool calls, as `{"tool": .., "input": ..}`.
    tool_calls: BTreeMap<String, Vec<Value>>,
}

fn seen(o: &Outcome, patterns: &[Regex]) -> Seen {
    let mut s = Seen::default();
    let mut lines: Vec<&Value> = o.exchanges.iter().collect();
    lines.sort_by_key(|l| l.get("exchange").and_then(Value::as_u64).unwrap_or(0));
    for line in lines {
        let conversation = match line.pointer("/address/conversation") {
            Some(Value::String(c)) => c.clone(),
            Some(Value::Null) | None => "(not routed)".to_owned(),
            Some(other) => other.to_string(),
        };
        let n = line.get("exchange").and_then(Value::as_u64).unwrap_or(0);
        let body = masked(line.get("request").unwrap_or(&Value::Null), patterns);
        s.requests.entry(conversation).or_default().push((n, body));
    }
    for (c, text) in &o.sent {
        let text = Value::String(mask_str(text, patterns));
        s.sent.entry(c.clone()).or_default().push(text);
    }
    for (c, tool, input) in &o.tool_calls {
        let call = serde_json::json!({"tool": tool, "input": masked(input, patterns)});
        s.tool_calls.entry(c.clone()).or_default().push(call);
    }
    s
}

/// A value shortened for a one-line report.
fn short(v: Option<&Value>) -> String {
    let Some(v) = v else {
        return "(absent)".to_owned();
    };
    let text = v.to_string();
    if text.chars().count() <= 80 {
        text
    } else {
        let head: String = text.chars().take(77).collect();
        format!("{head}...")
    }
}

/// The first place where `a` and `b` differ: its path (`system`, `messages[1].content`; empty for
/// the values themselves) and both values there.
fn first_difference(a: &Value, b: &Value, path: &str) -> Option<(String, String, String)> {
    if a == b {
        return None;
    }
    let join = |key: &str| {
        if path.is_empty() {
            key.to_owned()
        } else {
            format!("{path}.{key}")
        }
    };
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for k in keys {
                let p = join(k);
                match (x.get(k), y.get(k)) {
                    (Some(u), Some(v)) => {
                        if let Some(d) = first_difference(u, v, &p) {
                            return Some(d);
                        }
                    }
                    (u, v) => return Some((p, short(u), short(v))),
                }
            }
            None
        }
        (Value::Array(x), Value::Array(y)) => {
            for i in 0..x.len().max(y.len()) {
                let p = format!("{path}[{i}]");
                match (x.get(i), y.get(i)) {
                    (Some(u), Some(v)) => {
                        if let Some(d) = first_difference(u, v, &p) {
                            return Some(d);
                        }
                    }
                    (u, v) => return Some((p, short(u), short(v))),
                }
            }
            None
        }
        _ => Some((path.to_owned(), short(Some(a)), short(Some(b)))),
    }
}

fn at(path: &str) -> String {
    if path.is_empty() {
        String::new()
    } else {
        format!(" at `{path}`")
    }
}

/// Compares one kind of item per conversation; the first difference, described.
fn compare_lists(
    what: &str,
    first: &BTreeMap<String, Vec<Value>>,
    second: &BTreeMap<String, Vec<Value>>,
    numbers: Option<&BTreeMap<String, Vec<u64>>>,
) -> Option<String> {
    let empty = Vec::new();
    let conversations: std::collections::BTreeSet<&String> =
        first.keys().chain(second.keys()).collect();
    for c in conversations {
        let (a, b) = (
            first.get(c).unwrap_or(&empty),
            second.get(c).unwrap_or(&empty),
        );
        for i in 0..a.len().min(b.len()) {
            if let Some((path, x, y)) = first_difference(&a[i], &b[i], "") {
                let exchange = numbers
                    .and_then(|n| n.get(c))
                    .and_then(|n| n.get(i))
                    .map(|n| format!(" (exchange #{n} of the first run)"))
                    .unwrap_or_default();
                return Some(format!(
                    "{what} {} of conversation {c}{exchange} differs{}: first run {x}, second run {y}",
                    i + 1,
                    at(&path)
                ));
            }
        }
        if a.len() != b.len() {
            let i = a.len().min(b.len());
            let longer = if a.len() > b.len() { a } else { b };
            return Some(format!(
                "conversation {c} has {} {what}s in the first run and {} in the second; {what} {} is {}",
                a.len(),
                b.len(),
                i + 1,
                short(longer.get(i))
            ));
        }
    }
    None
}

/// The first difference between two runs of one seed, described for a person (`None`: they did
/// the same, once `patterns` are masked).
pub fn difference(first: &Outcome, second: &Outcome, patterns: &[Regex]) -> Option<String> {
    let (a, b) = (seen(first, patterns), seen(second, patterns));
    let bodies = |s: &Seen| -> BTreeMap<String, Vec<Value>> {
        s.requests
            .iter()
            .map(|(c, r)| (c.clone(), r.iter().map(|(_, v)| v.clone()).collect()))
            .collect()
    };
    let numbers: BTreeMap<String, Vec<u64>> = a
        .requests
        .iter()
        .map(|(c, r)| (c.clone(), r.iter().map(|(n, _)| *n).collect()))
        .collect();
    compare_lists("model request", &bodies(&a), &bodies(&b), Some(&numbers))
        .or_else(|| compare_lists("sent text", &a.sent, &b.sent, None))
        .or_else(|| compare_lists("tool call", &a.tool_calls, &b.tool_calls, None))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_first_difference_is_named_by_its_path() {
        let a = json!({"system": "at 10:00", "messages": [{"content": "hi"}]});
        let b = json!({"system": "at 10:00", "messages": [{"content": "ho"}]});
        let d = first_difference(&a, &b, "").unwrap();
        assert_eq!(
            d,
            (
                "messages[0].content".into(),
                "\"hi\"".into(),
                "\"ho\"".into()
            )
        );
    }

    #[test]
    fn a_declared_pattern_masks_what_it_matches_and_a_bad_one_is_refused() {
        let p = patterns(&["[0-9]{2}:[0-9]{2}".to_owned()]).unwrap();
        let a = masked(&json!({"system": "at 10:00"}), &p);
        let b = masked(&json!({"system": "at 11:07"}), &p);
        assert_eq!(a, b);
        assert_eq!(a["system"], "at <nondeterministic>");
        let e = patterns(&["(".to_owned()]).unwrap_err();
        assert!(e.contains("--nondeterministic `(`"), "{e}");
        assert!(patterns(&[String::new()]).is_err());
    }
}
