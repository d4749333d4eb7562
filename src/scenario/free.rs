//! Free-form values (a tool use's `input`, the `use_skill`, `use_agent` and `ask_user` shorthands)
//! read as the author wrote them.
//!
//! A generic YAML deserializer guesses a type for every unquoted scalar with YAML 1.1's rules:
//! `yes` becomes `true`, `012` becomes `12.0`, `0x1F` becomes `31`. In a value the schema leaves
//! free, that guess silently changes what the scripted model sends. So these values are rebuilt
//! from the parser's events, where the scalar's text and style are still known:
//!
//! - [`Mode::Json`] follows YAML 1.2's JSON schema: an unquoted `true`/`false` is a boolean,
//!   `null`/`~` (or nothing) is null, a number written as JSON writes numbers is a number; every
//!   other scalar, and every quoted or block scalar, is the text as written.
//! - [`Mode::Text`] keeps every scalar as its text (an `ask_user` question and its options are
//!   text shown to the user).
//!
//! Anchors, aliases and merge keys (`<<`) resolve as the deserializer resolves them; the
//! deserializer has already enforced the alias budget on the same text.

use std::collections::BTreeMap;

use granit::{Event, ScalarStyle};
use serde_json::{Map, Number, Value};
use serde_saphyr::granit_parser as granit;

/// How the scalars of a free-form value are read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// YAML 1.2's JSON schema: `true`, `false`, `null` and JSON numbers convert; the rest is text.
    Json,
    /// Every scalar is its text.
    Text,
}

/// A node as written: the shape and each scalar's text, before any conversion.
#[derive(Clone, Debug)]
pub(crate) enum Node {
    Scalar {
        text: String,
        /// Unquoted, untagged or tagged with a core type other than `!!str`: may convert.
        convertible: bool,
    },
    Seq(Vec<Node>),
    /// Entries in order; `true` marks a merge key (`<<`).
    Map(Vec<(String, bool, Node)>),
}

/// Where a node starts: 1-based line and column, as [`serde_saphyr::Location`] reports them.
pub(crate) type Place = (u64, u64);

enum Open {
    /// A container outside every wanted node and with no anchor: its events are skipped.
    Skipped,
    Seq {
        items: Vec<Node>,
        anchor: usize,
        wanted: Option<Place>,
    },
    Map {
        entries: Vec<(String, bool, Node)>,
        key: Option<(String, bool)>,
        anchor: usize,
        wanted: Option<Place>,
    },
}

/// Collects the node starting at each wanted place (an alias there yields the anchored node)
/// while the parser's events stream by. Feed it every event after the deserializer has accepted
/// the text.
pub(crate) struct Collector<'w> {
    wanted: &'w std::collections::BTreeSet<Place>,
    open: Vec<Open>,
    anchors: BTreeMap<usize, Node>,
    pub nodes: BTreeMap<Place, Node>,
}

impl<'w> Collector<'w> {
    pub(crate) fn new(wanted: &'w std::collections::BTreeSet<Place>) -> Self {
        Collector {
            wanted,
            open: Vec::new(),
            anchors: BTreeMap::new(),
            nodes: BTreeMap::new(),
        }
    }

    /// Whether nothing is wanted (the walk can skip the work).
    pub(crate) fn idle(&self) -> bool {
        self.wanted.is_empty()
    }

    fn building(&self) -> bool {
        !matches!(self.open.last(), None | Some(Open::Skipped))
    }

    fn want(&self, at: Place) -> Option<Place> {
        (self.wanted.contains(&at) && !self.nodes.contains_key(&at)).then_some(at)
    }

    pub(crate) fn event(&mut self, event: &Event<'_>, at: Place) {
        match event {
            Event::Scalar(text, style, anchor, tag) => {
                let wanted = self.want(at);
                if !(self.building() || wanted.is_some() || *anchor != 0) {
                    return;
                }
                let convertible = match tag {
                    None => *style == ScalarStyle::Plain,
                    Some(tag) => tag.is_yaml_core_schema() && !tag.is_yaml_core_schema_tag("str"),
                };
                let node = Node::Scalar {
                    text: text.to_string(),
                    convertible,
                };
                self.finish(node, *anchor, wanted);
            }
            Event::Alias(id) => {
                let wanted = self.want(at);
                if !(self.building() || wanted.is_some()) {
                    return;
                }
                // The deserializer accepted the text, so the anchor exists.
                let node = self.anchors.get(id).cloned().unwrap_or(Node::Scalar {
                    text: String::new(),
                    convertible: true,
                });
                self.finish(node, 0, wanted);
            }
            Event::SequenceStart(_, anchor, _) => {
                let wanted = self.want(at);
                let open = if self.building() || wanted.is_some() || *anchor != 0 {
                    Open::Seq {
                        items: Vec::new(),
                        anchor: *anchor,
                        wanted,
                    }
                } else {
                    Open::Skipped
                };
                self.open.push(open);
            }
            Event::MappingStart(_, anchor, _) => {
                let wanted = self.want(at);
                let open = if self.building() || wanted.is_some() || *anchor != 0 {
                    Open::Map {
                        entries: Vec::new(),
                        key: None,
                        anchor: *anchor,
                        wanted,
                    }
                } else {
                    Open::Skipped
                };
                self.open.push(open);
            }
            Event::SequenceEnd | Event::MappingEnd => match self.open.pop() {
                Some(Open::Seq {
                    items,
                    anchor,
                    wanted,
                }) => self.finish(Node::Seq(items), anchor, wanted),
                Some(Open::Map {
                    entries,
                    anchor,
                    wanted,
                    ..
                }) => self.finish(Node::Map(entries), anchor, wanted),
                Some(Open::Skipped) | None => {}
            },
            _ => {}
        }
    }

    fn finish(&mut self, node: Node, anchor: usize, wanted: Option<Place>) {
        if anchor != 0 {
            self.anchors.insert(anchor, node.clone());
        }
        if let Some(at) = wanted {
            self.nodes.insert(at, node.clone());
        }
        match self.open.last_mut() {
            Some(Open::Seq { items, .. }) => items.push(node),
            Some(Open::Map { entries, key, .. }) => match key.take() {
                None => {
                    let (text, merge) = match node {
                        Node::Scalar { text, convertible } => {
                            let merge = convertible && text == "<<";
                            (text, merge)
                        }
                        // The deserializer rejects non-scalar keys for a JSON value.
                        other => (format!("{other:?}"), false),
                    };
                    *key = Some((text, merge));
                }
                Some((k, merge)) => entries.push((k, merge, node)),
            },
            Some(Open::Skipped) | None => {}
        }
    }
}

impl Node {
    /// The value this node stands for, read in `mode`.
    pub(crate) fn value(&self, mode: Mode) -> Value {
        match self {
            Node::Scalar { text, convertible } => {
                if *convertible && mode == Mode::Json {
                    json_scalar(text)
                } else {
                    Value::String(text.clone())
                }
            }
            Node::Seq(items) => Value::Array(items.iter().map(|n| n.value(mode)).collect()),
            Node::Map(entries) => {
                let mut map = Map::new();
                // Explicit keys win over merged ones, whatever their order.
                for (key, merge, node) in entries {
                    if !merge {
                        map.insert(key.clone(), node.value(mode));
                    }
                }
                for (_, merge, node) in entries {
                    if !merge {
                        continue;
                    }
                    let sources: Vec<&Node> = match node {
                        Node::Seq(items) => items.iter().collect(),
                        other => vec![other],
                    };
                    for source in sources {
                        if let Value::Object(merged) = source.value(mode) {
                            for (k, v) in merged {
                                map.entry(k).or_insert(v);
                            }
                        }
                    }
                }
                Value::Object(map)
            }
        }
    }
}

/// An unquoted scalar under YAML 1.2's JSON schema (with the core schema's spellings of booleans
/// and null). Anything else, including a number JSON cannot carry exactly, stays text.
fn json_scalar(text: &str) -> Value {
    match text {
        "true" | "True" | "TRUE" => return Value::Bool(true),
        "false" | "False" | "FALSE" => return Value::Bool(false),
        "" | "~" | "null" | "Null" | "NULL" => return Value::Null,
        _ => {}
    }
    if let Some(number) = json_number(text) {
        return Value::Number(number);
    }
    Value::String(text.to_owned())
}

/// `text` as a JSON number if it is spelled like one (`-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`)
/// and fits: an integer beyond 64 bits or a float beyond f64's range is not converted.
fn json_number(text: &str) -> Option<Number> {
    let b = text.as_bytes();
    let mut i = 0;
    if b.first() == Some(&b'-') {
        i += 1;
    }
    let digits = |i: &mut usize| {
        let start = *i;
        while *i < b.len() && b[*i].is_ascii_digit() {
            *i += 1;
        }
        *i - start
    };
    let int_start = i;
    let n = digits(&mut i);
    if n == 0 || (n > 1 && b[int_start] == b'0') {
        return None;
    }
    let mut integer = true;
    if i < b.len() && b[i] == b'.' {
        i += 1;
        if digits(&mut i) == 0 {
            return None;
        }
        integer = false;
    }
    if i < b.len() && (b[i] == b'e' || b[i] == b'E') {
        i += 1;
        if i < b.len() && (b[i] == b'+' || b[i] == b'-') {
            i += 1;
        }
        if digits(&mut i) == 0 {
            return None;
        }
        integer = false;
    }
    if i != b.len() {
        return None;
    }
    if integer {
        if b[0] == b'-' {
            text.parse::<i64>().ok().map(Number::from)
        } else {
            text.parse::<u64>().ok().map(Number::from)
        }
    } else {
        text.parse::<f64>()
            .ok()
            .filter(|f| f.is_finite())
            .and_then(Number::from_f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_json_spellings_convert() {
        for (text, want) in [
            ("true", Value::Bool(true)),
            ("False", Value::Bool(false)),
            ("~", Value::Null),
            ("0", Value::from(0u64)),
            ("-7", Value::from(-7i64)),
            ("1.5", Value::from(1.5)),
            ("1.50", Value::from(1.5)),
            ("2e3", Value::from(2000.0)),
            ("18446744073709551615", Value::from(u64::MAX)),
        ] {
            assert_eq!(json_scalar(text), want, "{text}");
        }
        for text in [
            "yes",
            "no",
            "on",
            "off",
            "y",
            "012",
            "-012",
            "0x1F",
            "0o17",
            "+1",
            ".5",
            "1.",
            "1e",
            ".inf",
            "-.inf",
            ".nan",
            "1_000",
            "1e400",
            "18446744073709551616",
            "1:30",
            "",
        ] {
            if text.is_empty() {
                continue;
            }
            assert_eq!(json_scalar(text), Value::String(text.into()), "{text}");
        }
    }
}
