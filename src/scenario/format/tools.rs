//! The `tools` of a scenario file: each external tool's timeout and its scripted results, per
//! call.

use std::borrow::Cow;
use std::fmt;

use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;

use super::duration::Millis;

/// An external tool: a string is a fixed result, a list gives one outcome per call, a map gives a
/// fixed outcome (or `calls:`) plus settings such as `timeout`.
#[derive(Debug)]
pub enum ToolDef {
    /// Every call returns this text.
    Fixed(String),
    /// One outcome per call.
    PerCall(Vec<ToolCallSpec>),
    /// The full form.
    Table(Box<ToolTable>),
}

/// The full form of a tool.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolTable {
    /// Fixed result text (without it: a tool with no outcome at all echoes its input; one with only
    /// `after` returns an empty result after that latency).
    #[serde(default)]
    pub result: Option<String>,
    /// The result is an error result.
    #[serde(default)]
    pub is_error: bool,
    /// The tool fails with this message.
    #[serde(default)]
    pub error: Option<String>,
    /// The tool never finishes.
    #[serde(default)]
    pub hang: bool,
    /// Latency.
    #[serde(default)]
    pub after: Option<Millis>,
    /// One outcome per call (instead of a fixed one).
    #[serde(default)]
    pub calls: Option<Vec<ToolCallSpec>>,
    /// Virtual-time timeout (DESIGN §3 item 10).
    #[serde(default)]
    pub timeout: Option<Millis>,
}

/// One call's outcome: a string is a result.
#[derive(Debug)]
pub enum ToolCallSpec {
    /// This result, at once.
    Text(String),
    /// The full form.
    Full(ToolCallFull),
}

/// The full form of one call's outcome.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolCallFull {
    /// Result text.
    #[serde(default)]
    pub result: Option<String>,
    /// The result is an error result.
    #[serde(default)]
    pub is_error: bool,
    /// The tool fails with this message.
    #[serde(default)]
    pub error: Option<String>,
    /// The tool never finishes.
    #[serde(default)]
    pub hang: bool,
    /// Latency.
    #[serde(default)]
    pub after: Option<Millis>,
}

impl<'de> Deserialize<'de> for ToolCallSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ToolCallSpec, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ToolCallSpec;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(
                    "a tool outcome: a result string, or {result, is_error, error, hang, after}",
                )
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ToolCallSpec, E> {
                Ok(ToolCallSpec::Text(v.to_owned()))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<ToolCallSpec, A::Error> {
                ToolCallFull::deserialize(de::value::MapAccessDeserializer::new(map))
                    .map(ToolCallSpec::Full)
            }
        }
        d.deserialize_any(V)
    }
}

impl JsonSchema for ToolCallSpec {
    fn schema_name() -> Cow<'static, str> {
        "ToolCallSpec".into()
    }
    fn json_schema(g: &mut SchemaGenerator) -> Schema {
        let full = g.subschema_for::<ToolCallFull>();
        json_schema!({"oneOf": [{"type": "string"}, full]})
    }
}

impl<'de> Deserialize<'de> for ToolDef {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ToolDef, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ToolDef;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a tool: a result string, a list of per-call outcomes, or a map with result, is_error, error, hang, after, calls, timeout")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ToolDef, E> {
                Ok(ToolDef::Fixed(v.to_owned()))
            }
            fn visit_unit<E: de::Error>(self) -> Result<ToolDef, E> {
                Ok(ToolDef::Table(Box::default()))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<ToolDef, A::Error> {
                Vec::<ToolCallSpec>::deserialize(de::value::SeqAccessDeserializer::new(seq))
                    .map(ToolDef::PerCall)
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<ToolDef, A::Error> {
                ToolTable::deserialize(de::value::MapAccessDeserializer::new(map))
                    .map(|t| ToolDef::Table(Box::new(t)))
            }
        }
        d.deserialize_any(V)
    }
}

impl JsonSchema for ToolDef {
    fn schema_name() -> Cow<'static, str> {
        "ToolDef".into()
    }
    fn json_schema(g: &mut SchemaGenerator) -> Schema {
        let calls = g.subschema_for::<Vec<ToolCallSpec>>();
        let table = g.subschema_for::<ToolTable>();
        json_schema!({
            "description": "A tool: a fixed result string, a list of per-call outcomes, or a map",
            "oneOf": [{"type": "string"}, {"type": "null"}, calls, table]
        })
    }
}
