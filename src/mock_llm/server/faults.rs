//! Faults in place of replies: injected at random ([`RandomFaults`], each decision a function of
//! the seed and of where the request was routed) or scripted, and how each is answered (an error
//! envelope, a stream that breaks half-way, a dropped connection), journaled as a fault.

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderValue};
use axum::response::Response;
use serde_json::{json, Value};

use super::{error_response, sse_response, Shared};
use crate::mock_llm::book::Address;
use crate::model::ids::splitmix64;
use crate::wire::reply::{self, ErrorKind, ErrorReply};
use crate::wire::Provider;

/// Faults injected at a rate, each decision a function of the seed and of where the request was
/// routed (agent, conversation, turn, and how many times that turn was asked for), never of the
/// order in which concurrent requests arrive: the same seed and the same runtime give the same
/// faults. An injected fault takes the place of a reply, which the retry then gets.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RandomFaults {
    /// The share of replies replaced by a fault, from 0 to 1.
    pub rate: f64,
    /// The seed.
    pub seed: u64,
    /// The share of the replies not replaced that stall: no answer for a while, then the
    /// connection drops (the retry gets the reply), from 0 to 1.
    pub stall_rate: f64,
    /// The share of the replies not replaced that come later than scripted, from 0 to 1.
    pub latency_rate: f64,
}

/// A delay injected before a reply (see [`RandomFaults::delay`]), in scripted milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delay {
    /// No answer for this long, then the connection drops; the retry gets the reply.
    Stall(u64),
    /// The reply comes this much later.
    Latency(u64),
}

/// How long an injected stall lasts before its connection drops, in scripted milliseconds.
pub const STALL_MS: [u64; 3] = [1_000, 2_000, 4_000];
/// How much later an injected latency serves its reply, in scripted milliseconds.
pub const LATENCY_MS: [u64; 3] = [100, 400, 1_500];

/// A fault injected in place of a reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InjectedFault {
    /// 429 with `retry-after`.
    RateLimit,
    /// Anthropic 529, OpenAI 503.
    Overloaded,
    /// 500.
    Server,
    /// The connection drops before a complete answer.
    Dropped,
    /// A stream that sends part of the reply, then the provider's error event.
    StreamError,
    /// A stream that stops part-way, without its closing events.
    StreamCut,
}

impl InjectedFault {
    /// The fault's name in the journal.
    pub fn name(self) -> &'static str {
        match self {
            InjectedFault::RateLimit => "rate_limit",
            InjectedFault::Overloaded => "overloaded",
            InjectedFault::Server => "server_error",
            InjectedFault::Dropped => "connection_dropped",
            InjectedFault::StreamError => "stream_error",
            InjectedFault::StreamCut => "stream_cut",
        }
    }
}

impl RandomFaults {
    /// Errors only (no stalls, no latency) at `rate`.
    pub fn errors(rate: f64, seed: u64) -> RandomFaults {
        RandomFaults {
            rate,
            seed,
            stall_rate: 0.0,
            latency_rate: 0.0,
        }
    }

    /// The hash of attempt `attempt` of the turn at `address`, every decision's source.
    fn hash(&self, address: &Address, attempt: u32) -> u64 {
        let mut h = self.seed ^ 0x9e37_79b9_7f4a_7c15;
        for b in address.agent.bytes() {
            h = splitmix64(h ^ u64::from(b));
        }
        h = splitmix64(h ^ address.conversation as u64);
        h = splitmix64(h ^ address.turn as u64);
        splitmix64(h ^ u64::from(attempt))
    }

    /// The delay of attempt `attempt` (from 1) of the turn at `address`, if one is injected
    /// (asked only when no fault replaces the reply): a draw of its own, so that turning delays
    /// on changes no fault decision.
    pub fn delay(&self, address: &Address, attempt: u32) -> Option<Delay> {
        if self.stall_rate <= 0.0 && self.latency_rate <= 0.0 {
            return None;
        }
        let h = splitmix64(self.hash(address, attempt) ^ 0x0de1_a7ed_5a11_0000);
        let roll = (h >> 11) as f64 / (1u64 << 53) as f64;
        let pick = (splitmix64(h) % 3) as usize;
        if roll < self.stall_rate {
            Some(Delay::Stall(STALL_MS[pick]))
        } else if roll < self.stall_rate + self.latency_rate {
            Some(Delay::Latency(LATENCY_MS[pick]))
        } else {
            None
        }
    }

    /// The fault for attempt `attempt` (from 1) of the turn at `address`, if one is injected.
    pub fn decide(&self, address: &Address, attempt: u32, stream: bool) -> Option<InjectedFault> {
        let h = self.hash(address, attempt);
        let roll = (h >> 11) as f64 / (1u64 << 53) as f64;
        if roll >= self.rate {
            return None;
        }
        const PLAIN: [InjectedFault; 4] = [
            InjectedFault::RateLimit,
            InjectedFault::Overloaded,
            InjectedFault::Server,
            InjectedFault::Dropped,
        ];
        const STREAMED: [InjectedFault; 6] = [
            InjectedFault::RateLimit,
            InjectedFault::Overloaded,
            InjectedFault::Server,
            InjectedFault::Dropped,
            InjectedFault::StreamError,
            InjectedFault::StreamCut,
        ];
        let pick = splitmix64(h) as usize;
        Some(if stream {
            STREAMED[pick % STREAMED.len()]
        } else {
            PLAIN[pick % PLAIN.len()]
        })
    }
}

impl Shared {
    /// Answers with a scripted or injected `error`, journaled as a fault.
    pub(super) fn fault(
        &self,
        mut line: Value,
        error: &ErrorReply,
        request_id: &str,
        retry_after_ms: Option<u64>,
    ) -> Response {
        line["outcome"] = "fault".into();
        line["status"] = error.status.into();
        line["response"] = error.body.clone();
        self.record(&line, None);
        error_response(error, request_id, retry_after_ms)
    }

    /// A stream that breaks half-way: the first half of `reply`'s events, then `error` as an
    /// error event, or nothing (the stream ends there).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn broken_stream(
        &self,
        provider: Provider,
        reply: &reply::Reply,
        include_usage: bool,
        error: Option<(ErrorKind, Option<&str>)>,
        name: &str,
        request_id: &str,
        mut line: Value,
    ) -> Response {
        let mut events = reply::events(provider, reply, include_usage);
        events.truncate(events.len() / 2);
        let mut response = json!({"fault": name});
        if let Some((kind, message)) = error {
            let sequence = events.len();
            events.push(reply::stream_error(provider, kind, message, sequence));
            // The error's kind as a scenario names it (and its message when not the usual one),
            // so that `agentsim import` scripts the same error.
            response["error_kind"] = match kind {
                ErrorKind::RateLimit => "rate_limit",
                ErrorKind::Overloaded => "overloaded",
                _ => "other",
            }
            .into();
            if let Some(m) = message {
                response["error_message"] = m.into();
            }
        }
        response["events"] = events.len().into();
        line["outcome"] = "fault".into();
        line["status"] = 200.into();
        line["response"] = response;
        self.record(&line, None);
        sse_response(self.scaled(events), request_id)
    }

    /// An injected stall: journaled at once as a fault (`stall`, with its scripted length),
    /// then no answer for `ms` scripted milliseconds (or until the server stops), then the
    /// connection drops. The caller has put the reply back for the retry.
    pub(super) async fn stall(&self, mut line: Value, ms: u64) -> Response {
        line["outcome"] = "fault".into();
        line["status"] = Value::Null;
        line["response"] = json!({"fault": "stall", "ms": ms});
        self.record(&line, None);
        let mut stopped = self.stop.subscribe();
        tokio::select! {
            () = tokio::time::sleep(std::time::Duration::from_millis(self.latency(ms))) => {}
            _ = stopped.wait_for(|s| *s) => {}
        }
        dropped_connection()
    }

    /// Drops the connection before a complete answer, journaling it as a fault.
    pub(super) fn drop_connection(&self, mut line: Value) -> Response {
        line["outcome"] = "fault".into();
        line["status"] = 200.into();
        line["response"] = json!({"fault": "connection dropped"});
        self.record(&line, None);
        dropped_connection()
    }
}

/// Answers with an injected fault in place of `reply`.
pub(super) fn inject(
    s: &Shared,
    provider: Provider,
    fault: InjectedFault,
    reply: &reply::Reply,
    include_usage: bool,
    request_id: &str,
    line: Value,
) -> Response {
    let kind = match fault {
        InjectedFault::RateLimit => ErrorKind::RateLimit,
        InjectedFault::Overloaded => ErrorKind::Overloaded,
        InjectedFault::Server => ErrorKind::Server,
        InjectedFault::Dropped => return s.drop_connection(line),
        InjectedFault::StreamError | InjectedFault::StreamCut => {
            let error =
                (fault == InjectedFault::StreamError).then_some((ErrorKind::Overloaded, None));
            return s.broken_stream(
                provider,
                reply,
                include_usage,
                error,
                fault.name(),
                request_id,
                line,
            );
        }
    };
    s.fault(
        line,
        &reply::error(provider, kind, None, request_id),
        request_id,
        None,
    )
}

/// A response whose body fails at once: the client sees the connection end before a complete
/// answer.
pub(super) fn dropped_connection() -> Response {
    let stream = futures_util::stream::once(async {
        Err::<Bytes, std::io::Error>(std::io::Error::other(
            "agentsim mock-llm: connection dropped",
        ))
    });
    let mut response = Response::new(Body::from_stream(stream));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}
