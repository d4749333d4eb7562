//! The strict decoding of the runtime's lines ([`decode_line`]).
//!
//! A runtime's lines are untrusted input, so [`decode_line`] is written by hand over
//! `serde_json::Value` rather than derived: every fault names the field it is about
//! (`frames[1].iterations`), and no input makes it panic. The choices it makes where the
//! specification leaves room are listed in [`super::codec`].

use serde_json::{Map, Value};

use super::error::{strip_line_ending, ProtocolError, ProtocolErrorKind};
use super::from_runtime::{
    EndReason, EndedFrame, Event, EventBody, FromRuntime, Idle, Ready, RuntimeError, SendText,
    Stack, StackFrame, ToolCall,
};
use super::limits::{MAX_INTEGER, MAX_LINE, PROTOCOL_VERSION};

/// Decodes one line of the runtime's stdout, number `line_no` (from 1).
///
/// `bytes` is the line with or without its ending: one trailing `\n`, and a `\r` before it, are
/// dropped. A line of only white space gives `Ok(None)`. Otherwise the checks run in this order,
/// the first that fails giving the error: `oversize-line` (over [`MAX_LINE`] bytes; a prefix of
/// [`MAX_LINE`] + 1 bytes is enough), `invalid-utf8` (with the byte offset), `malformed-json`,
/// `unknown-type`, `bad-field` (naming the field), `protocol-mismatch`. Unknown fields are
/// ignored. Integers must be JSON numbers without fraction or exponent, from 0 to
/// [`MAX_INTEGER`].
///
/// The checks that need what came before (`not-ready`, `unknown-conversation`, ...) are
/// [`super::Session`]'s.
pub fn decode_line(bytes: &[u8], line_no: u64) -> Result<Option<FromRuntime>, ProtocolError> {
    let raw = strip_line_ending(bytes);
    let err = |kind, message: String| ProtocolError::new(kind, line_no, message, raw);
    if raw.len() > MAX_LINE {
        return Err(err(
            ProtocolErrorKind::OversizeLine,
            format!(
                "the line holds more than {MAX_LINE} bytes ({} read)",
                raw.len()
            ),
        ));
    }
    let text = match std::str::from_utf8(raw) {
        Ok(text) => text,
        Err(e) => {
            return Err(err(
                ProtocolErrorKind::InvalidUtf8,
                format!("the line is not UTF-8 at byte offset {}", e.valid_up_to()),
            ))
        }
    };
    if text.trim().is_empty() {
        return Ok(None);
    }
    let value: Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) => {
            return Err(err(
                ProtocolErrorKind::MalformedJson,
                format!("not JSON: {e}"),
            ))
        }
    };
    let Value::Object(object) = value else {
        return Err(err(
            ProtocolErrorKind::MalformedJson,
            format!("a JSON {}, not an object", json_type(&value)),
        ));
    };
    decode_object(&object).map(Some).map_err(|e| match e {
        Fault::Type(message) => err(ProtocolErrorKind::UnknownType, message),
        Fault::Field(message) => err(ProtocolErrorKind::BadField, message),
        Fault::Protocol(message) => err(ProtocolErrorKind::ProtocolMismatch, message),
    })
}

/// What is wrong with a JSON object, before it is located.
enum Fault {
    Type(String),
    Field(String),
    Protocol(String),
}

fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_u64() || n.is_i64() => "integer",
        Value::Number(_) => "number with a fraction or exponent",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

const TYPES: &str = "ready, send, tool_call, idle, stack, event, error";

fn decode_object(o: &Map<String, Value>) -> Result<FromRuntime, Fault> {
    let kind = match o.get("type") {
        None => return Err(Fault::Type(format!("no `type` field (one of {TYPES})"))),
        Some(Value::String(s)) => s.as_str(),
        Some(other) => {
            return Err(Fault::Type(format!(
                "`type` is a {}, not a string (one of {TYPES})",
                json_type(other)
            )))
        }
    };
    let f = Fields {
        o,
        path: String::new(),
    };
    Ok(match kind {
        "ready" => {
            // The protocol first: another protocol's `ready` may shape its other fields
            // differently, and the mismatch is the error that explains it.
            let protocol = f.integer("protocol")?;
            if protocol != PROTOCOL_VERSION {
                return Err(Fault::Protocol(format!(
                    "the runtime speaks protocol {protocol}; agentsim speaks protocol {PROTOCOL_VERSION}"
                )));
            }
            FromRuntime::Ready(Ready {
                protocol,
                capabilities: f.strings("capabilities")?,
                name: f.opt_string("name")?,
            })
        }
        "send" => FromRuntime::Send(SendText {
            conversation: f.string("conversation")?,
            text: f.string("text")?,
        }),
        "tool_call" => FromRuntime::ToolCall(ToolCall {
            call: f.string("call")?,
            conversation: f.string("conversation")?,
            agent: f.string("agent")?,
            name: f.string("name")?,
            input: f.any("input")?,
        }),
        "idle" => FromRuntime::Idle(Idle {
            seq: f.integer("seq")?,
        }),
        "stack" => {
            let conversation = f.string("conversation")?;
            let frames = f
                .objects("frames")?
                .into_iter()
                .map(|frame| {
                    Ok(StackFrame {
                        name: frame.string("name")?,
                        iterations: frame.opt_integer("iterations")?,
                    })
                })
                .collect::<Result<_, Fault>>()?;
            let ended = match f.opt_objects("ended")? {
                None => Vec::new(),
                Some(ended) => ended
                    .into_iter()
                    .map(|frame| {
                        let reason = frame.string("reason")?;
                        Ok(EndedFrame {
                            name: frame.string("name")?,
                            iterations: frame.opt_integer("iterations")?,
                            reason: EndReason::from_name(&reason).ok_or_else(|| {
                                Fault::Field(format!(
                                    "`{}` is \"{}\", not one of completed, answered, max_iterations, error, cancelled",
                                    frame.name("reason"),
                                    reason.escape_debug()
                                ))
                            })?,
                        })
                    })
                    .collect::<Result<_, Fault>>()?,
            };
            FromRuntime::Stack(Stack {
                conversation,
                frames,
                ended,
            })
        }
        "event" => {
            let conversation = f.string("conversation")?;
            let kind = f.string("kind")?;
            let frame = f.opt_string("frame")?;
            let body = match kind.as_str() {
                "text" => EventBody::Text {
                    text: f.string("text")?,
                },
                "tool_start" => EventBody::ToolStart {
                    name: f.string("name")?,
                },
                "tool_finish" => EventBody::ToolFinish {
                    name: f.string("name")?,
                },
                "tool_error" => EventBody::ToolError {
                    name: f.string("name")?,
                },
                "tool_result" => EventBody::ToolResult {
                    tool_use_id: f.string("tool_use_id")?,
                    content: f.string("content")?,
                    is_error: f.boolean("is_error")?,
                },
                "response" => EventBody::Response {
                    text: f.string("text")?,
                    iterations: f.integer("iterations")?,
                    tool_calls: f.strings("tool_calls")?,
                },
                "usage" => EventBody::Usage {
                    input_tokens: f.integer("input_tokens")?,
                    output_tokens: f.integer("output_tokens")?,
                },
                _ => {
                    let mut fields = o.clone();
                    for key in ["type", "conversation", "kind", "frame"] {
                        fields.remove(key);
                    }
                    EventBody::Other { kind, fields }
                }
            };
            FromRuntime::Event(Event {
                conversation,
                frame,
                body,
            })
        }
        "error" => FromRuntime::Error(RuntimeError {
            message: f.string("message")?,
            line: f.opt_integer("line")?,
        }),
        other => {
            return Err(Fault::Type(format!(
                "unknown type \"{}\" (one of {TYPES})",
                other.escape_debug()
            )))
        }
    })
}

/// The fields of one JSON object, at a path (`""` for the message, `frames[1].` inside it).
struct Fields<'a> {
    o: &'a Map<String, Value>,
    path: String,
}

impl<'a> Fields<'a> {
    fn name(&self, key: &str) -> String {
        format!("{}{key}", self.path)
    }

    fn missing(&self, key: &str, expected: &str) -> Fault {
        Fault::Field(format!("`{}` is missing ({expected})", self.name(key)))
    }

    fn wrong(&self, key: &str, expected: &str, found: &Value) -> Fault {
        Fault::Field(format!(
            "`{}` is a {}, not {expected}",
            self.name(key),
            json_type(found)
        ))
    }

    /// The field's value if present; `null` counts as present (and as the wrong type wherever a
    /// type is expected).
    fn get(&self, key: &str) -> Option<&'a Value> {
        self.o.get(key)
    }

    fn any(&self, key: &str) -> Result<Value, Fault> {
        self.get(key)
            .cloned()
            .ok_or_else(|| self.missing(key, "any JSON value"))
    }

    fn string(&self, key: &str) -> Result<String, Fault> {
        match self.get(key) {
            None => Err(self.missing(key, "a string")),
            Some(v) => self.as_string(key, v),
        }
    }

    fn opt_string(&self, key: &str) -> Result<Option<String>, Fault> {
        self.get(key).map(|v| self.as_string(key, v)).transpose()
    }

    fn as_string(&self, key: &str, v: &Value) -> Result<String, Fault> {
        match v {
            Value::String(s) => Ok(s.clone()),
            other => Err(self.wrong(key, "a string", other)),
        }
    }

    fn boolean(&self, key: &str) -> Result<bool, Fault> {
        match self.get(key) {
            None => Err(self.missing(key, "a boolean")),
            Some(Value::Bool(b)) => Ok(*b),
            Some(other) => Err(self.wrong(key, "a boolean", other)),
        }
    }

    fn integer(&self, key: &str) -> Result<u64, Fault> {
        match self.get(key) {
            None => Err(self.missing(key, "an integer")),
            Some(v) => self.as_integer(key, v),
        }
    }

    fn opt_integer(&self, key: &str) -> Result<Option<u64>, Fault> {
        self.get(key).map(|v| self.as_integer(key, v)).transpose()
    }

    fn as_integer(&self, key: &str, v: &Value) -> Result<u64, Fault> {
        const EXPECTED: &str = "an integer from 0 to 2^53-1";
        match v {
            Value::Number(n) => match n.as_u64() {
                Some(i) if i <= MAX_INTEGER => Ok(i),
                _ => Err(Fault::Field(format!(
                    "`{}` is {n}, not {EXPECTED}",
                    self.name(key)
                ))),
            },
            other => Err(self.wrong(key, EXPECTED, other)),
        }
    }

    fn strings(&self, key: &str) -> Result<Vec<String>, Fault> {
        match self.get(key) {
            None => Err(self.missing(key, "an array of strings")),
            Some(Value::Array(items)) => items
                .iter()
                .enumerate()
                .map(|(i, item)| match item {
                    Value::String(s) => Ok(s.clone()),
                    other => Err(self.wrong(&format!("{key}[{i}]"), "a string", other)),
                })
                .collect(),
            Some(other) => Err(self.wrong(key, "an array of strings", other)),
        }
    }

    /// The objects of an array field, each as `Fields` at its path (`frames[1].`).
    fn objects(&self, key: &str) -> Result<Vec<Fields<'a>>, Fault> {
        match self.get(key) {
            None => Err(self.missing(key, "an array of objects")),
            Some(v) => self.as_objects(key, v),
        }
    }

    fn opt_objects(&self, key: &str) -> Result<Option<Vec<Fields<'a>>>, Fault> {
        self.get(key).map(|v| self.as_objects(key, v)).transpose()
    }

    fn as_objects(&self, key: &str, v: &'a Value) -> Result<Vec<Fields<'a>>, Fault> {
        let Value::Array(items) = v else {
            return Err(self.wrong(key, "an array of objects", v));
        };
        items
            .iter()
            .enumerate()
            .map(|(i, item)| match item {
                Value::Object(o) => Ok(Fields {
                    o,
                    path: format!("{}{key}[{i}].", self.path),
                }),
                other => Err(self.wrong(&format!("{key}[{i}]"), "an object", other)),
            })
            .collect()
    }
}
