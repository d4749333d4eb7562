//! Error replies: each provider's error envelope and HTTP status for an error kind, in a body or
//! in the middle of a stream.

use serde_json::{json, Value};

use super::Sse;
use crate::model::llm::LlmErrorKind;
use crate::wire::Provider;

/// An error a provider answers with: a status and the provider's envelope.
#[derive(Clone, Debug, PartialEq)]
pub struct ErrorReply {
    /// The HTTP status.
    pub status: u16,
    /// The body.
    pub body: Value,
}

/// Which error, in the provider's terms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// 429 Too Many Requests.
    RateLimit,
    /// Anthropic 529, OpenAI 503.
    Overloaded,
    /// 500.
    Server,
    /// 400, a request the API would not take.
    InvalidRequest,
    /// 404, an unknown path or model.
    NotFound,
    /// 413, a body over the size limit.
    TooLarge,
    /// 422, a request the mock server has no reply for (agentsim's own status: the SDKs do not
    /// retry it).
    NoReply,
}

impl ErrorKind {
    /// The error kind of a scripted model error.
    pub fn of(kind: LlmErrorKind) -> ErrorKind {
        match kind {
            LlmErrorKind::RateLimit => ErrorKind::RateLimit,
            LlmErrorKind::Overloaded => ErrorKind::Overloaded,
            LlmErrorKind::Network | LlmErrorKind::Other => ErrorKind::Server,
        }
    }

    /// The HTTP status for `provider`.
    pub fn status(self, provider: Provider) -> u16 {
        match self {
            ErrorKind::RateLimit => 429,
            ErrorKind::Overloaded if provider == Provider::Anthropic => 529,
            ErrorKind::Overloaded => 503,
            ErrorKind::Server => 500,
            ErrorKind::InvalidRequest => 400,
            ErrorKind::NotFound => 404,
            ErrorKind::TooLarge => 413,
            ErrorKind::NoReply => 422,
        }
    }

    /// The provider's message when none is given.
    pub(crate) fn default_message(self, provider: Provider) -> &'static str {
        match (self, provider) {
            (ErrorKind::RateLimit, Provider::Anthropic) => {
                "This request would exceed the rate limit for your organization. Please try again later."
            }
            (ErrorKind::RateLimit, _) => "Rate limit reached for requests. Please try again later.",
            (ErrorKind::Overloaded, Provider::Anthropic) => "Overloaded",
            (ErrorKind::Overloaded, _) => "The server is overloaded or not ready yet.",
            (ErrorKind::Server, Provider::Anthropic) => "Internal server error",
            (ErrorKind::Server, _) => {
                "The server had an error while processing your request. Sorry about that!"
            }
            (ErrorKind::InvalidRequest, _) => "invalid request",
            (ErrorKind::NotFound, _) => "not found",
            (ErrorKind::TooLarge, _) => "Request exceeds the maximum allowed size.",
            (ErrorKind::NoReply, _) => "no scripted reply",
        }
    }

    fn anthropic_type(self) -> &'static str {
        match self {
            ErrorKind::RateLimit => "rate_limit_error",
            ErrorKind::Overloaded => "overloaded_error",
            ErrorKind::Server => "api_error",
            ErrorKind::InvalidRequest | ErrorKind::NoReply => "invalid_request_error",
            ErrorKind::NotFound => "not_found_error",
            ErrorKind::TooLarge => "request_too_large",
        }
    }

    fn openai_type_code(self) -> (&'static str, Option<&'static str>) {
        match self {
            ErrorKind::RateLimit => ("requests", Some("rate_limit_exceeded")),
            ErrorKind::Overloaded | ErrorKind::Server => ("server_error", None),
            ErrorKind::InvalidRequest | ErrorKind::NoReply | ErrorKind::TooLarge => {
                ("invalid_request_error", None)
            }
            ErrorKind::NotFound => ("invalid_request_error", Some("unknown_url")),
        }
    }
}

/// The error body of `provider` for `kind`, with `message` (the provider's usual text when
/// `None`); `request_id` goes into Anthropic's envelope.
pub fn error(
    provider: Provider,
    kind: ErrorKind,
    message: Option<&str>,
    request_id: &str,
) -> ErrorReply {
    let message = message.unwrap_or_else(|| kind.default_message(provider));
    let body = match provider {
        Provider::Anthropic => {
            let mut body = anthropic_error(kind, message);
            body["request_id"] = request_id.into();
            body
        }
        Provider::OpenAiChat | Provider::OpenAiResponses => openai_error(kind, message),
    };
    ErrorReply {
        status: kind.status(provider),
        body,
    }
}

/// The event a provider sends for an error in the middle of a stream, as the stream's event number
/// `sequence` (counted from 0): a Responses stream numbers every event, its `error` event too
/// (`sequence_number`, which the SDKs' event types require).
pub fn stream_error(
    provider: Provider,
    kind: ErrorKind,
    message: Option<&str>,
    sequence: usize,
) -> Sse {
    let message = message.unwrap_or_else(|| kind.default_message(provider));
    match provider {
        Provider::Anthropic => Sse::named("error", &anthropic_error(kind, message)),
        Provider::OpenAiChat => Sse::unnamed(openai_error(kind, message).to_string()),
        Provider::OpenAiResponses => {
            let (_, code) = kind.openai_type_code();
            Sse::named(
                "error",
                &json!({"type": "error", "code": code.unwrap_or("server_error"),
                        "message": message, "param": null, "sequence_number": sequence}),
            )
        }
    }
}

/// Anthropic's error object: `{"type":"error","error":{"type","message"}}`.
fn anthropic_error(kind: ErrorKind, message: &str) -> Value {
    json!({"type": "error", "error": {"type": kind.anthropic_type(), "message": message}})
}

/// OpenAI's error object: `{"error":{"message","type","param","code"}}`.
fn openai_error(kind: ErrorKind, message: &str) -> Value {
    let (kind_type, code) = kind.openai_type_code();
    json!({"error": {"message": message, "type": kind_type, "param": null, "code": code}})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_envelopes_are_each_providers_own() {
        let a = error(Provider::Anthropic, ErrorKind::Overloaded, None, "req_x");
        assert_eq!(a.status, 529);
        assert_eq!(a.body["error"]["type"], "overloaded_error");
        assert_eq!(a.body["request_id"], "req_x");
        let o = error(
            Provider::OpenAiChat,
            ErrorKind::RateLimit,
            Some("slow"),
            "req_x",
        );
        assert_eq!(o.status, 429);
        assert_eq!(o.body["error"]["message"], "slow");
        assert_eq!(o.body["error"]["code"], "rate_limit_exceeded");
        assert_eq!(
            error(Provider::OpenAiResponses, ErrorKind::Overloaded, None, "").status,
            503
        );
        let r = stream_error(Provider::OpenAiResponses, ErrorKind::Overloaded, None, 7);
        let data: Value = serde_json::from_str(&r.data).unwrap();
        assert_eq!(data["type"], "error");
        assert_eq!(data["sequence_number"], 7, "{data}");
        let e = stream_error(Provider::Anthropic, ErrorKind::Overloaded, None, 3);
        assert!(!e.data.contains("sequence_number"));
        assert_eq!(e.event.as_deref(), Some("error"));
        let mut wire = String::new();
        e.write(&mut wire);
        assert!(wire.starts_with("event: error\ndata: {"));
        assert!(wire.ends_with("}\n\n"));
    }
}
