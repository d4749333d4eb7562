//! The scripts of a scenario: each agent's model replies and each tool's behaviour, built from
//! the file with located errors.

use std::sync::Arc;

use serde_json::{json, Value};
use serde_saphyr::{Location, Spanned};

use crate::drive::scripted::{Attempts, ReplyKind, ScriptBlock, ScriptChunk, ScriptedReply};
use crate::drive::scripted::{ToolBehavior, ToolScript, ToolStep};
use crate::model::llm::{LlmErrorKind, Usage};

use super::build::Builder;
use super::error::ScenarioError;
use super::format::*;
use super::free::Mode;

impl Builder<'_> {
    pub(super) fn tool(
        &self,
        def: &ToolDef,
        at: Location,
    ) -> Result<(Option<ToolScript>, Option<u64>), ScenarioError> {
        Ok(match def {
            ToolDef::Fixed(text) => (Some(ToolScript::Fixed(result_step(text, false, 0))), None),
            ToolDef::PerCall(calls) => (Some(ToolScript::PerCall(self.calls(calls, at)?)), None),
            ToolDef::Table(t) => {
                let timeout = t.timeout.map(|m| m.0);
                let fixed = t.result.is_some() || t.error.is_some() || t.hang || t.is_error;
                let script = match (&t.calls, fixed) {
                    (Some(_), _) if t.after.is_some() => {
                        return Err(self.error(
                            at,
                            "a tool with `calls:` takes `after` on each call, not on the tool",
                        ))
                    }
                    (Some(_), true) => {
                        return Err(self.error(
                            at,
                            "a tool has either `calls:` or a fixed outcome (result/error/hang), not both",
                        ))
                    }
                    (Some(calls), false) => Some(ToolScript::PerCall(self.calls(calls, at)?)),
                    (None, true) => Some(ToolScript::Fixed(self.call(
                        &ToolCallFull {
                            result: t.result.clone(),
                            is_error: t.is_error,
                            error: t.error.clone(),
                            hang: t.hang,
                            after: t.after,
                        },
                        at,
                    )?)),
                    // Only settings: without `after` the tool echoes its input (no script); with
                    // `after` it returns an empty result after that latency.
                    (None, false) => t.after.map(|after| {
                        ToolScript::Fixed(ToolStep {
                            behavior: ToolBehavior::Result {
                                content: "".into(),
                                is_error: false,
                            },
                            after_ms: after.0,
                        })
                    }),
                };
                (script, timeout)
            }
        })
    }

    pub(super) fn calls(
        &self,
        calls: &[ToolCallSpec],
        at: Location,
    ) -> Result<Vec<ToolStep>, ScenarioError> {
        calls
            .iter()
            .map(|c| match c {
                ToolCallSpec::Text(t) => Ok(result_step(t, false, 0)),
                ToolCallSpec::Full(full) => self.call(full, at),
            })
            .collect()
    }

    pub(super) fn call(&self, c: &ToolCallFull, at: Location) -> Result<ToolStep, ScenarioError> {
        let after_ms = c.after.map_or(0, |m| m.0);
        if c.is_error && (c.error.is_some() || c.hang) {
            return Err(self.error(
                at,
                "`is_error` marks a `result` as an error; `error` and `hang` take none",
            ));
        }
        let behavior = match (&c.result, &c.error, c.hang) {
            (_, Some(_), true) | (Some(_), Some(_), _) | (Some(_), _, true) => {
                return Err(self.error(at, "a tool outcome has one of `result`, `error` or `hang`"))
            }
            (_, Some(message), false) => ToolBehavior::Fail(message.as_str().into()),
            (None, None, true) => ToolBehavior::Hang,
            (result, None, false) => ToolBehavior::Result {
                content: result.as_deref().unwrap_or("").into(),
                is_error: c.is_error,
            },
        };
        Ok(ToolStep { behavior, after_ms })
    }

    /// A free-form value as its author wrote it.
    pub(super) fn free(&self, v: &Spanned<Value>, mode: Mode) -> Value {
        let at = (v.referenced.line(), v.referenced.column());
        match self.free.get(&at) {
            Some(node) => node.value(mode),
            // Every place was collected from this same text; keep the parser's reading if not.
            None => {
                debug_assert!(false, "no free-form node at {at:?}");
                v.value.clone()
            }
        }
    }

    pub(super) fn script_tool_use(&self, u: &ToolUseSpec) -> ScriptBlock {
        ScriptBlock::ToolUse {
            id: u.id.as_deref().map(Into::into),
            name: u.name.as_str().into(),
            input: Arc::new(
                u.input
                    .as_ref()
                    .map_or_else(|| json!({}), |v| self.free(v, Mode::Json)),
            ),
        }
    }

    pub(super) fn reply(
        &self,
        entry: &ReplyEntry,
        at: Location,
    ) -> Result<ScriptedReply, ScenarioError> {
        let r = match entry {
            ReplyEntry::Text(text) => {
                return Ok(ScriptedReply {
                    kind: ReplyKind::Content(vec![ScriptBlock::Text(text.as_str().into())]),
                    after_ms: 0,
                    usage: Usage::default(),
                })
            }
            ReplyEntry::Full(r) => r,
        };
        let content_keys = [
            ("text", r.text.is_some()),
            ("tool_use", r.tool_use.is_some()),
            ("use_skill", r.use_skill.is_some()),
            ("use_agent", r.use_agent.is_some()),
            ("ask_user", r.ask_user.is_some()),
            ("complete", r.complete.is_some()),
        ];
        let has_content = content_keys.iter().any(|(_, on)| *on);
        if r.thinking.is_some() && !has_content {
            return Err(self.error(
                at,
                "`thinking` is the reasoning before a reply's content: it goes with `text`, `tool_use` or their shorthands (in a stream, a `{ thinking: ... }` piece)",
            ));
        }
        let mut kinds: Vec<&str> = Vec::new();
        if has_content {
            kinds.push("content");
        }
        for (key, flag) in [("empty", r.empty), ("stall", r.stall)] {
            if flag == Some(false) {
                return Err(self.error(at, format!("write `{key}: true` (or leave it out)")));
            }
        }
        if matches!(&r.tool_use, Some(OneOrMany::Many(many)) if many.is_empty()) {
            return Err(self.error(
                at,
                "`tool_use: []` names no tool use (write `empty: true` for an empty reply)",
            ));
        }
        for (key, on) in [
            ("empty", r.empty.is_some()),
            ("error", r.error.is_some()),
            ("stall", r.stall.is_some()),
            ("chunks", r.chunks.is_some()),
        ] {
            if on {
                kinds.push(key);
            }
        }
        if kinds.len() != 1 {
            let found = if kinds.is_empty() {
                "nothing".to_owned()
            } else {
                kinds.join(" and ")
            };
            return Err(self.error(
                at,
                format!("a reply needs exactly one of: content (text, tool_use, use_skill, use_agent, ask_user, complete), empty, error, stall, chunks; found {found}"),
            ));
        }
        let kind = if has_content {
            let mut blocks = Vec::new();
            if let Some(thinking) = &r.thinking {
                if thinking.is_empty() {
                    return Err(self.error(at, "`thinking: \"\"` says nothing: leave it out"));
                }
                blocks.push(ScriptBlock::Thinking(thinking.as_str().into()));
            }
            if let Some(text) = &r.text {
                blocks.push(ScriptBlock::Text(text.as_str().into()));
            }
            if let Some(uses) = &r.tool_use {
                for u in uses_of(uses) {
                    blocks.push(self.script_tool_use(u));
                }
            }
            let shorthand = |name: &str, input: Value| ScriptBlock::ToolUse {
                id: None,
                name: name.into(),
                input: Arc::new(input),
            };
            if let Some(input) = &r.use_skill {
                blocks.push(shorthand("use_skill", self.free(input, Mode::Json)));
            }
            if let Some(input) = &r.use_agent {
                blocks.push(shorthand("use_agent", self.free(input, Mode::Json)));
            }
            if let Some(q) = &r.ask_user {
                // A question and its options are text shown to the user.
                let input = match self.free(q, Mode::Text) {
                    Value::String(s) => json!({ "question": s }),
                    other => other.clone(),
                };
                blocks.push(shorthand("ask_user", input));
            }
            if let Some(result) = &r.complete {
                blocks.push(shorthand("complete", json!({ "result": result })));
            }
            ReplyKind::Content(blocks)
        } else if r.empty.is_some() {
            ReplyKind::Content(Vec::new())
        } else if let Some(e) = &r.error {
            let (kind, message, mid_stream, times, retry_after) = match e {
                ErrorSpec::Kind(k) => (error_kind(*k), None, false, None, None),
                ErrorSpec::Full(full) => (
                    error_kind(full.kind),
                    full.message.clone(),
                    full.mid_stream.unwrap_or(false),
                    full.times,
                    full.retry_after,
                ),
            };
            if let Some(Millis(ms)) = retry_after {
                if kind == LlmErrorKind::Network {
                    return Err(self.error(
                        at,
                        "a `network` error drops the connection: no header carries its `retry_after` (the client waits its own backoff)",
                    ));
                }
                if ms == 0 {
                    return Err(self.error(
                        at,
                        "`retry_after: 0` is ignored by the SDKs, which then wait their own backoff (0.5 s and up): write 1ms or more",
                    ));
                }
            }
            let message = message.unwrap_or_else(|| kind.default_message().to_owned());
            ReplyKind::Error {
                kind,
                message: message.into(),
                mid_stream,
                times: match times {
                    None => Attempts::default(),
                    Some(TimesSpec::Times(n)) => Attempts::Times(n),
                    Some(TimesSpec::Always) => Attempts::Always,
                },
                retry_after_ms: retry_after.map(|m| m.0),
            }
        } else if r.stall.is_some() {
            ReplyKind::Stall
        } else {
            let chunks = r.chunks.as_deref().unwrap_or_default();
            let mut out = Vec::new();
            for c in chunks {
                out.push(match c {
                    ChunkSpec::Text(t) => ScriptChunk {
                        block: ScriptBlock::Text(t.as_str().into()),
                        after_ms: 0,
                    },
                    ChunkSpec::Full(full) => {
                        let block = match (&full.thinking, &full.text, &full.tool_use) {
                            (Some(t), None, None) if !t.is_empty() => {
                                ScriptBlock::Thinking(t.as_str().into())
                            }
                            (None, Some(t), None) => ScriptBlock::Text(t.as_str().into()),
                            (None, None, Some(u)) => self.script_tool_use(u),
                            _ => {
                                return Err(self.error(
                                    at,
                                    "a stream piece has exactly one of `thinking` (not empty), `text` or `tool_use`",
                                ))
                            }
                        };
                        ScriptChunk {
                            block,
                            after_ms: full.after.map_or(0, |m| m.0),
                        }
                    }
                });
            }
            ReplyKind::Stream(out)
        };
        match &kind {
            ReplyKind::Stall if r.after.is_some() || r.usage.is_some() => {
                return Err(self.error(
                    at,
                    "a `stall` never answers: `after` and `usage` would mean nothing",
                ))
            }
            ReplyKind::Error { .. } if r.usage.is_some() => {
                return Err(self.error(at, "a failed call reports no `usage`"))
            }
            _ => {}
        }
        let usage = r.usage.map_or(Usage::default(), |u| Usage {
            input_tokens: u.input_tokens,
            output_tokens: u.output_tokens,
        });
        Ok(ScriptedReply {
            kind,
            after_ms: r.after.map_or(0, |m| m.0),
            usage,
        })
    }
}

fn uses_of(u: &OneOrMany<ToolUseSpec>) -> Vec<&ToolUseSpec> {
    match u {
        OneOrMany::One(one) => vec![one],
        OneOrMany::Many(many) => many.iter().collect(),
    }
}

fn result_step(text: &str, is_error: bool, after_ms: u64) -> ToolStep {
    ToolStep {
        behavior: ToolBehavior::Result {
            content: text.into(),
            is_error,
        },
        after_ms,
    }
}

fn error_kind(k: ErrorKindSpec) -> LlmErrorKind {
    match k {
        ErrorKindSpec::RateLimit => LlmErrorKind::RateLimit,
        ErrorKindSpec::Overloaded => LlmErrorKind::Overloaded,
        ErrorKindSpec::Network => LlmErrorKind::Network,
        ErrorKindSpec::Other => LlmErrorKind::Other,
    }
}
