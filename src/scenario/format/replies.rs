//! The `llm` scripts of a scenario file: each scripted model reply (text, tool uses, errors,
//! streamed chunks) and its usage.

use std::borrow::Cow;
use std::fmt;

use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_saphyr::Spanned;

use super::duration::Millis;

/// One scripted model reply: a string is a text reply; a map states the reply in full.
#[derive(Debug)]
pub enum ReplyEntry {
    /// `- Hello` : a text reply.
    Text(String),
    /// The full form.
    Full(Box<ReplySpec>),
}

impl<'de> Deserialize<'de> for ReplyEntry {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ReplyEntry, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ReplyEntry;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a reply: a text string, or a map with text, tool_use, use_skill, use_agent, complete, ask_user, empty, error, stall or chunks")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ReplyEntry, E> {
                Ok(ReplyEntry::Text(v.to_owned()))
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<ReplyEntry, E> {
                // YAML reads an unquoted NO, yes, off, ... as a boolean: a workflow's `NO` is
                // the likeliest way to meet it.
                Err(E::custom(format!(
                    "a reply is text, but YAML read this one as the boolean `{v}` (an unquoted NO, no, yes, off, on, ... is a boolean): quote it, as in `- \"NO\"`"
                )))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<ReplyEntry, A::Error> {
                ReplySpec::deserialize(de::value::MapAccessDeserializer::new(map))
                    .map(|r| ReplyEntry::Full(Box::new(r)))
            }
        }
        d.deserialize_any(V)
    }
}

impl JsonSchema for ReplyEntry {
    fn schema_name() -> Cow<'static, str> {
        "ReplyEntry".into()
    }
    fn json_schema(g: &mut SchemaGenerator) -> Schema {
        let full = g.subschema_for::<ReplySpec>();
        json_schema!({
            "description": "A scripted model reply: a string is a text reply",
            "oneOf": [{"type": "string"}, full]
        })
    }
}

/// The full form of a scripted reply. Content keys (`text`, `tool_use`, `use_skill`, `use_agent`,
/// `ask_user`, `complete`) combine into one reply, text first, then tool uses in that key order;
/// `empty`, `error`, `stall` and `chunks` stand alone.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReplySpec {
    /// The model's reasoning before the reply's text or tool uses: served as an Anthropic
    /// `thinking` block (with a signature) and an OpenAI Responses `reasoning` item; OpenAI Chat
    /// has no place for it.
    #[serde(default)]
    pub thinking: Option<String>,
    /// Text.
    #[serde(default)]
    pub text: Option<String>,
    /// One tool use or a list of them.
    #[serde(default)]
    pub tool_use: Option<OneOrMany<ToolUseSpec>>,
    /// Shorthand for `tool_use: {name: use_skill, input: ...}`.
    #[serde(default)]
    #[schemars(with = "Option<Value>")]
    pub use_skill: Option<Spanned<Value>>,
    /// Shorthand for `tool_use: {name: use_agent, input: ...}`.
    #[serde(default)]
    #[schemars(with = "Option<Value>")]
    pub use_agent: Option<Spanned<Value>>,
    /// Shorthand for `ask_user`: a question string or `{question, options}`.
    #[serde(default)]
    #[schemars(with = "Option<Value>")]
    pub ask_user: Option<Spanned<Value>>,
    /// Shorthand for `tool_use: {name: complete, input: {result: ...}}`.
    #[serde(default)]
    pub complete: Option<String>,
    /// An empty reply (`empty: true`).
    #[serde(default)]
    pub empty: Option<bool>,
    /// A failed call: `rate_limit`, `overloaded`, `network`, `other`, or `{kind, message}`.
    #[serde(default)]
    pub error: Option<ErrorSpec>,
    /// The call never answers (`stall: true`).
    #[serde(default)]
    pub stall: Option<bool>,
    /// A streamed reply: text strings, or `{text, after}` / `{tool_use, after}` pieces.
    #[serde(default)]
    pub chunks: Option<Vec<ChunkSpec>>,
    /// Latency before the reply (or its first chunk).
    #[serde(default)]
    pub after: Option<Millis>,
    /// Token usage reported with the reply.
    #[serde(default)]
    pub usage: Option<UsageSpec>,
}

/// Token usage of a scripted reply.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UsageSpec {
    /// Prompt tokens.
    #[serde(default)]
    pub input_tokens: u64,
    /// Completion tokens.
    #[serde(default)]
    pub output_tokens: u64,
}

/// One value (a map) or a list of them.
#[derive(Debug)]
pub enum OneOrMany<T> {
    /// A list.
    Many(Vec<T>),
    /// One value.
    One(T),
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for OneOrMany<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<OneOrMany<T>, D::Error> {
        struct V<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = OneOrMany<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("one map or a list of maps")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<OneOrMany<T>, A::Error> {
                Vec::<T>::deserialize(de::value::SeqAccessDeserializer::new(seq))
                    .map(OneOrMany::Many)
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<OneOrMany<T>, A::Error> {
                T::deserialize(de::value::MapAccessDeserializer::new(map)).map(OneOrMany::One)
            }
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

impl<T: JsonSchema> JsonSchema for OneOrMany<T> {
    fn schema_name() -> Cow<'static, str> {
        format!("OneOrMany_{}", T::schema_name()).into()
    }
    fn json_schema(g: &mut SchemaGenerator) -> Schema {
        let one = g.subschema_for::<T>();
        let many = g.subschema_for::<Vec<T>>();
        json_schema!({"oneOf": [one, many]})
    }
}

/// A scripted `tool_use`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolUseSpec {
    /// Tool name.
    pub name: String,
    /// JSON input (default `{}`).
    #[serde(default)]
    #[schemars(with = "Option<Value>")]
    pub input: Option<Spanned<Value>>,
    /// Explicit id (default: generated `toolu_NN`).
    #[serde(default)]
    pub id: Option<String>,
}

/// A scripted model error.
#[derive(Debug)]
pub enum ErrorSpec {
    /// Just the kind, with its usual message.
    Kind(ErrorKindSpec),
    /// The full form.
    Full(ErrorFull),
}

impl<'de> Deserialize<'de> for ErrorSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ErrorSpec, D::Error> {
        // A visitor rather than an untagged enum, so that a bad value inside the full form (a
        // `times: 0`) is reported with its own message and place.
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ErrorSpec;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an error kind (rate_limit, overloaded, network, other) or {kind, message, mid_stream, times, retry_after}")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ErrorSpec, E> {
                ErrorKindSpec::deserialize(de::value::StrDeserializer::<E>::new(v))
                    .map(ErrorSpec::Kind)
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<ErrorSpec, A::Error> {
                ErrorFull::deserialize(de::value::MapAccessDeserializer::new(map))
                    .map(ErrorSpec::Full)
            }
        }
        d.deserialize_any(V)
    }
}

impl JsonSchema for ErrorSpec {
    fn schema_name() -> Cow<'static, str> {
        "ErrorSpec".into()
    }
    fn json_schema(g: &mut SchemaGenerator) -> Schema {
        let kind = g.subschema_for::<ErrorKindSpec>();
        let full = g.subschema_for::<ErrorFull>();
        json_schema!({
            "description": "A failed call: an error kind, or {kind, message, mid_stream, times, retry_after}",
            "oneOf": [kind, full]
        })
    }
}

/// The full form of a scripted model error.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ErrorFull {
    /// The kind.
    pub kind: ErrorKindSpec,
    /// The message (default: the kind's usual message).
    #[serde(default)]
    pub message: Option<String>,
    /// The error comes in the middle of a stream (`agentsim mock-llm`: a streamed request gets the
    /// first half of the next reply's events, then an error event, or for `network` the stream
    /// ends there); a request that does not stream gets the error as a status. The simulator
    /// treats it as the call failing.
    #[serde(default)]
    pub mid_stream: Option<bool>,
    /// How many attempts of the turn fail: a whole number from 1 (the default), or `always`
    /// (`agentsim mock-llm`, where a client retries the same turn; the simulator's runtime does
    /// not retry, so there the error fails one call).
    #[serde(default)]
    pub times: Option<TimesSpec>,
    /// The delay `agentsim mock-llm` asks the client to wait before its retry (the
    /// `retry-after-ms` and `retry-after` headers), such as `10ms`; at least 1 ms. The simulator
    /// ignores it.
    #[serde(default)]
    pub retry_after: Option<Millis>,
}

/// How many attempts of a turn a scripted error fails: a whole number from 1, or `always`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimesSpec {
    /// This many.
    Times(u32),
    /// Every attempt.
    Always,
}

impl<'de> Deserialize<'de> for TimesSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<TimesSpec, D::Error> {
        struct V;
        const HOW: &str =
            "`times` counts the attempts of the turn that fail: a whole number from 1, or `always`";
        impl Visitor<'_> for V {
            type Value = TimesSpec;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a whole number of attempts from 1, or `always`")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<TimesSpec, E> {
                match u32::try_from(v) {
                    Ok(0) => Err(E::custom(format!(
                        "`times: 0` would fail no attempt (leave the error out); {HOW}"
                    ))),
                    Ok(n) => Ok(TimesSpec::Times(n)),
                    Err(_) => Err(E::custom(format!(
                        "`times: {v}` is more attempts than any client makes: write `always`"
                    ))),
                }
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<TimesSpec, E> {
                match u64::try_from(v) {
                    Ok(v) => self.visit_u64(v),
                    Err(_) => Err(E::custom(format!("`times: {v}` is negative; {HOW}"))),
                }
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<TimesSpec, E> {
                Err(E::custom(format!(
                    "`times: {v}` is not a whole number; {HOW}"
                )))
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<TimesSpec, E> {
                Err(E::custom(format!("`times: {v}` is a boolean; {HOW}")))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<TimesSpec, E> {
                if v == "always" {
                    return Ok(TimesSpec::Always);
                }
                match v.trim().parse::<i64>() {
                    Ok(n) => self.visit_i64(n),
                    Err(_) => Err(E::custom(format!("`times: {v:?}` is not a number; {HOW}"))),
                }
            }
        }
        d.deserialize_any(V)
    }
}

impl JsonSchema for TimesSpec {
    fn schema_name() -> Cow<'static, str> {
        "Times".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "How many attempts of the turn fail: a whole number from 1, or `always`",
            "oneOf": [
                {"type": "integer", "minimum": 1, "maximum": u32::MAX},
                {"const": "always"}
            ]
        })
    }
}

/// Kinds of model errors.
#[derive(Clone, Copy, Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKindSpec {
    /// HTTP 429.
    RateLimit,
    /// HTTP 529.
    Overloaded,
    /// Network failure.
    Network,
    /// Anything else.
    Other,
}

/// One piece of a streamed reply.
#[derive(Debug)]
pub enum ChunkSpec {
    /// A text delta with no delay.
    Text(String),
    /// The full form.
    Full(ChunkFull),
}

/// The full form of a stream piece.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ChunkFull {
    /// The model's reasoning, streamed before the reply's text and tool uses.
    #[serde(default)]
    pub thinking: Option<String>,
    /// A text delta.
    #[serde(default)]
    pub text: Option<String>,
    /// A whole tool use.
    #[serde(default)]
    pub tool_use: Option<ToolUseSpec>,
    /// Delay after the previous piece.
    #[serde(default)]
    pub after: Option<Millis>,
}

impl<'de> Deserialize<'de> for ChunkSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ChunkSpec, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ChunkSpec;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a stream piece: a text string, or {text, after} or {tool_use, after}")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ChunkSpec, E> {
                Ok(ChunkSpec::Text(v.to_owned()))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<ChunkSpec, A::Error> {
                ChunkFull::deserialize(de::value::MapAccessDeserializer::new(map))
                    .map(ChunkSpec::Full)
            }
        }
        d.deserialize_any(V)
    }
}

impl JsonSchema for ChunkSpec {
    fn schema_name() -> Cow<'static, str> {
        "ChunkSpec".into()
    }
    fn json_schema(g: &mut SchemaGenerator) -> Schema {
        let full = g.subschema_for::<ChunkFull>();
        json_schema!({"oneOf": [{"type": "string"}, full]})
    }
}
