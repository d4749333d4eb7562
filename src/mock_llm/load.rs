//! A load generator for mock LLM servers (`agentsim bench mock-llm`): many keep-alive HTTP/1.1
//! connections over loopback, each sending one request after another for a fixed time, with the
//! latency of every request recorded. The same load goes to agentsim's server and to any other
//! (aimock, VidaiMock) serving the same reply, so their figures can be compared in one run.
//!
//! Each request is a new conversation (its user message carries the connection and request
//! numbers), so that a server which addresses conversations (agentsim) and one that matches text
//! (aimock) do the same work per request. A response counts when its status is 200 and its body
//! is complete (by `content-length` or chunked framing); anything else is an error, counted.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::wire::Provider;

/// The reply every server under test is set up to give.
pub const REPLY: &str = "It is 18 C and cloudy in Paris.";

/// The model name of the benchmark's requests (agentsim routes it to its agent).
pub const MODEL: &str = "bench";

/// The scenario agentsim's server serves for the benchmark: `main` answers every request of the
/// plain load; `chain` plays the continuation workload's three-turn tool loops.
pub const SCENARIO: &str = r#"
name: mock-llm benchmark
agents:
  main: { model: bench, system: "You are a weather assistant.", script: per_conversation }
  chain: { model: bench-chain, system: "You chain weather lookups.", script: per_conversation, history: continuation }
llm:
  main:
    - It is 18 C and cloudy in Paris.
  chain:
    - tool_use: { name: get_weather, input: { location: Paris } }
    - tool_use: { name: get_weather, input: { location: Rome } }
    - It is 18 C in Paris and 24 C in Rome.
"#;

/// The model name of the continuation workload's requests.
pub const CHAIN_MODEL: &str = "bench-chain";

/// The turns of one conversation of the continuation workload.
pub const CHAIN_TURNS: usize = 3;

/// What to send.
#[derive(Clone, Debug)]
pub struct Load {
    /// The server.
    pub addr: SocketAddr,
    /// The API.
    pub provider: Provider,
    /// Ask for server-sent events.
    pub stream: bool,
    /// Concurrent connections.
    pub connections: usize,
    /// How long to measure.
    pub duration: Duration,
}

/// What the load measured.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct Measured {
    /// Requests answered with a complete 200.
    pub requests: u64,
    /// Requests that failed (a status other than 200, a broken connection).
    pub errors: u64,
    /// Seconds measured.
    pub seconds: f64,
    /// Requests per second.
    pub rps: f64,
    /// Median latency, in microseconds.
    pub p50_us: u64,
    /// 99th percentile latency, in microseconds.
    pub p99_us: u64,
}

/// The path of `provider`'s API.
pub fn path(provider: Provider) -> &'static str {
    match provider {
        Provider::Anthropic => "/v1/messages",
        Provider::OpenAiChat => "/v1/chat/completions",
        Provider::OpenAiResponses => "/v1/responses",
    }
}

/// The body of request `n` of connection `c`: a system prompt, one tool, one user message. The
/// numbers have a fixed width, so that a connection builds its request once and then only
/// rewrites the digits of `n` (the load generator should cost as little as it can: it shares
/// the machine with the server it measures).
pub fn body(provider: Provider, stream: bool, c: usize, n: u64) -> String {
    let question = format!("What is the weather in Paris? (connection {c:04}, request {n:012})");
    let schema =
        r#"{"type":"object","properties":{"location":{"type":"string"}},"required":["location"]}"#;
    match provider {
        Provider::Anthropic => format!(
            r#"{{"model":"{MODEL}","max_tokens":256,"stream":{stream},"system":"You are a weather assistant.","tools":[{{"name":"get_weather","description":"Current weather for a place.","input_schema":{schema}}}],"messages":[{{"role":"user","content":"{question}"}}]}}"#
        ),
        Provider::OpenAiChat => format!(
            r#"{{"model":"{MODEL}","stream":{stream},"tools":[{{"type":"function","function":{{"name":"get_weather","description":"Current weather for a place.","parameters":{schema}}}}}],"messages":[{{"role":"system","content":"You are a weather assistant."}},{{"role":"user","content":"{question}"}}]}}"#
        ),
        Provider::OpenAiResponses => format!(
            r#"{{"model":"{MODEL}","stream":{stream},"instructions":"You are a weather assistant.","tools":[{{"type":"function","name":"get_weather","description":"Current weather for a place.","parameters":{schema}}}],"input":"{question}"}}"#
        ),
    }
}

/// The digits of the request number in a request built by [`request`].
const DIGITS: usize = 12;

/// Request `n` of connection `c`, and where the digits of `n` are in it.
fn request(load: &Load, c: usize, n: u64) -> (Vec<u8>, usize) {
    let body = body(load.provider, load.stream, c, n);
    let digits_in_body = body
        .find("request ")
        .map(|i| i + "request ".len())
        .expect("the question names its request");
    let mut out = format!(
        "POST {} HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\nx-api-key: bench\r\nauthorization: Bearer bench\r\nanthropic-version: 2023-06-01\r\ncontent-length: {}\r\n\r\n",
        path(load.provider),
        load.addr,
        body.len()
    )
    .into_bytes();
    let digits = out.len() + digits_in_body;
    out.extend_from_slice(body.as_bytes());
    (out, digits)
}

/// Writes `n` into the digits of a request built by [`request`].
fn renumber(request: &mut [u8], at: usize, mut n: u64) {
    for i in (0..DIGITS).rev() {
        request[at + i] = b'0' + (n % 10) as u8;
        n /= 10;
    }
}

/// One request and its whole response on `stream`: the status, the body (when `keep` asks for
/// it) and whether the server closes the connection. `buf` keeps what was read past the
/// response (nothing, with a well-behaved server).
pub async fn exchange(
    stream: &mut TcpStream,
    request: &[u8],
    buf: &mut Vec<u8>,
    keep: bool,
) -> std::io::Result<(u16, Vec<u8>, bool)> {
    stream.write_all(request).await?;
    let mut searched = 0;
    let header_end = loop {
        if let Some(i) = find(&buf[searched..], b"\r\n\r\n") {
            break searched + i + 4;
        }
        searched = buf.len().saturating_sub(3);
        read_more(stream, buf).await?;
    };
    let (status, length, chunked, mut close) = {
        let head = std::str::from_utf8(&buf[..header_end])
            .map_err(|_| std::io::Error::other("response head is not UTF-8"))?;
        let status: u16 = head
            .get(9..12)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| std::io::Error::other(format!("no status line: {head:?}")))?;
        let mut length = None;
        let mut chunked = false;
        let mut close = false;
        for line in head.lines().skip(1) {
            let Some((name, value)) = line.split_once(':') else {
                continue;
            };
            let value = value.trim();
            if name.eq_ignore_ascii_case("content-length") {
                length = value.parse::<usize>().ok();
            } else if name.eq_ignore_ascii_case("transfer-encoding") {
                chunked = value.eq_ignore_ascii_case("chunked");
            } else if name.eq_ignore_ascii_case("connection") {
                close = value.eq_ignore_ascii_case("close");
            }
        }
        (status, length, chunked, close)
    };
    buf.drain(..header_end);
    let body = if chunked {
        let mut body = Vec::new();
        loop {
            let line_end = loop {
                if let Some(i) = find(buf, b"\r\n") {
                    break i;
                }
                read_more(stream, buf).await?;
            };
            let size_text = std::str::from_utf8(&buf[..line_end]).unwrap_or("");
            let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
                .map_err(|_| std::io::Error::other(format!("bad chunk size {size_text:?}")))?;
            buf.drain(..line_end + 2);
            if size == 0 {
                // Trailers (none expected) end with an empty line.
                loop {
                    if let Some(i) = find(buf, b"\r\n") {
                        let empty = i == 0;
                        buf.drain(..i + 2);
                        if empty {
                            break;
                        }
                    } else {
                        read_more(stream, buf).await?;
                    }
                }
                break body;
            }
            while buf.len() < size + 2 {
                read_more(stream, buf).await?;
            }
            if keep {
                body.extend_from_slice(&buf[..size]);
            }
            buf.drain(..size + 2);
        }
    } else if let Some(n) = length {
        while buf.len() < n {
            read_more(stream, buf).await?;
        }
        if keep {
            buf.drain(..n).collect()
        } else {
            buf.drain(..n);
            Vec::new()
        }
    } else {
        // No framing: the body runs to the end of the connection.
        loop {
            let before = buf.len();
            if read_more(stream, buf).await.is_err() || buf.len() == before {
                break;
            }
        }
        close = true;
        std::mem::take(buf)
    };
    Ok((status, body, close))
}

async fn read_more(stream: &mut TcpStream, buf: &mut Vec<u8>) -> std::io::Result<()> {
    let mut chunk = [0u8; 16 * 1024];
    let n = stream.read(&mut chunk).await?;
    if n == 0 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "the server closed the connection",
        ));
    }
    buf.extend_from_slice(&chunk[..n]);
    Ok(())
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Sends one request and returns the response's status and body as text: to check, before a
/// measurement, that a server gives the benchmark's reply.
pub async fn probe(load: &Load) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect(load.addr).await?;
    stream.set_nodelay(true)?;
    let mut buf = Vec::new();
    let (status, body, _) = exchange(&mut stream, &request(load, 0, 0).0, &mut buf, true).await?;
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

/// The continuation workload over Anthropic Messages, not streamed: each connection plays
/// conversations of [`CHAIN_TURNS`] turns under `history: continuation`, each request replaying
/// the whole history before it (the replies as the server sent them, read from its bodies, and
/// the tool results), so that the server follows a growing history by its index on every
/// request. Every request counts, whatever its turn; a failed one ends its conversation.
pub async fn run_continuation(
    addr: SocketAddr,
    connections: usize,
    duration: Duration,
) -> Measured {
    use serde_json::{json, Value};
    let start = Instant::now();
    let deadline = start + duration;
    let mut tasks = Vec::new();
    for c in 0..connections {
        tasks.push(tokio::spawn(async move {
            let mut latencies: Vec<u32> = Vec::new();
            let mut errors = 0u64;
            let mut n = 0u64;
            'connect: while Instant::now() < deadline {
                let Ok(mut stream) = TcpStream::connect(addr).await else {
                    errors += 1;
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                };
                let _ = stream.set_nodelay(true);
                let mut buf = Vec::new();
                while Instant::now() < deadline {
                    n += 1;
                    let mut messages = vec![json!({"role": "user",
                        "content": format!("Weather in Paris, then Rome? (connection {c}, conversation {n})")})];
                    for _ in 0..CHAIN_TURNS {
                        let body = json!({"model": CHAIN_MODEL, "max_tokens": 256,
                            "system": "You chain weather lookups.",
                            "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}],
                            "messages": messages})
                        .to_string();
                        let request = format!(
                            "POST /v1/messages HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\nx-api-key: bench\r\nanthropic-version: 2023-06-01\r\ncontent-length: {}\r\n\r\n{body}",
                            body.len()
                        );
                        let sent = Instant::now();
                        let (status, reply, close) =
                            match exchange(&mut stream, request.as_bytes(), &mut buf, true).await {
                                Ok(answer) => answer,
                                Err(_) => {
                                    errors += 1;
                                    continue 'connect;
                                }
                            };
                        if status != 200 {
                            errors += 1;
                            if close {
                                continue 'connect;
                            }
                            break;
                        }
                        let us = sent.elapsed().as_micros();
                        latencies.push(u32::try_from(us).unwrap_or(u32::MAX));
                        let content = serde_json::from_slice::<Value>(&reply)
                            .ok()
                            .and_then(|v| v.get("content").cloned())
                            .unwrap_or(Value::Null);
                        let id = content
                            .as_array()
                            .and_then(|blocks| blocks.iter().find(|b| b["type"] == "tool_use"))
                            .and_then(|b| b["id"].as_str())
                            .map(str::to_owned);
                        messages.push(json!({"role": "assistant", "content": content}));
                        match id {
                            Some(id) => messages.push(json!({"role": "user", "content": [
                                {"type": "tool_result", "tool_use_id": id, "content": "18 C"}]})),
                            None => break,
                        }
                        if close {
                            continue 'connect;
                        }
                    }
                }
            }
            (latencies, errors)
        }));
    }
    gather(tasks, start).await
}

/// The figures of the connections' `(latencies, errors)`.
async fn gather(tasks: Vec<tokio::task::JoinHandle<(Vec<u32>, u64)>>, start: Instant) -> Measured {
    let mut all: Vec<u32> = Vec::new();
    let mut errors = 0;
    for t in tasks {
        if let Ok((latencies, e)) = t.await {
            all.extend(latencies);
            errors += e;
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    all.sort_unstable();
    let pct = |p: f64| -> u64 {
        if all.is_empty() {
            return 0;
        }
        let i = ((all.len() as f64 * p).ceil() as usize).clamp(1, all.len()) - 1;
        u64::from(all[i])
    };
    Measured {
        requests: all.len() as u64,
        errors,
        seconds,
        rps: all.len() as f64 / seconds,
        p50_us: pct(0.50),
        p99_us: pct(0.99),
    }
}

/// Runs `load` and measures it.
pub async fn run(load: &Load) -> Measured {
    let start = Instant::now();
    let deadline = start + load.duration;
    let mut tasks = Vec::new();
    for c in 0..load.connections {
        let load = load.clone();
        tasks.push(tokio::spawn(async move {
            let mut latencies: Vec<u32> = Vec::new();
            let mut errors = 0u64;
            let mut n = 1u64;
            let (mut request, digits) = request(&load, c + 1, n);
            'connect: while Instant::now() < deadline {
                let Ok(mut stream) = TcpStream::connect(load.addr).await else {
                    errors += 1;
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                };
                let _ = stream.set_nodelay(true);
                let mut buf = Vec::new();
                while Instant::now() < deadline {
                    renumber(&mut request, digits, n);
                    n += 1;
                    let sent = Instant::now();
                    match exchange(&mut stream, &request, &mut buf, false).await {
                        Ok((200, _, close)) => {
                            let us = sent.elapsed().as_micros();
                            latencies.push(u32::try_from(us).unwrap_or(u32::MAX));
                            if close {
                                continue 'connect;
                            }
                        }
                        Ok((_, _, close)) => {
                            errors += 1;
                            if close {
                                continue 'connect;
                            }
                        }
                        Err(_) => {
                            errors += 1;
                            continue 'connect;
                        }
                    }
                }
            }
            (latencies, errors)
        }));
    }
    gather(tasks, start).await
}

/// A server to measure: a name and where it listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// A name for the table (`agentsim`, `aimock`, ...).
    pub name: String,
    /// Its address.
    pub addr: SocketAddr,
}

/// One measured row: a server, an API, streaming or not.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Row {
    /// The server.
    pub server: String,
    /// The API (`anthropic`, `openai-chat`, `openai-responses`).
    pub api: &'static str,
    /// Whether the requests asked for streams.
    pub stream: bool,
    /// The figures.
    #[serde(flatten)]
    pub measured: Measured,
}

/// The name of `provider`'s API in tables.
pub fn api_name(provider: Provider) -> &'static str {
    match provider {
        Provider::Anthropic => "anthropic",
        Provider::OpenAiChat => "openai-chat",
        Provider::OpenAiResponses => "openai-responses",
    }
}

/// The text of a reply body or stream of `provider`: the reply's text, joined from its deltas
/// when streamed.
pub fn reply_text(provider: Provider, stream: bool, body: &str) -> String {
    use serde_json::Value;
    if !stream {
        let Ok(v) = serde_json::from_str::<Value>(body) else {
            return String::new();
        };
        return crate::wire::reply::decode(provider, &v)
            .map(|(blocks, _)| {
                blocks
                    .iter()
                    .filter_map(|b| match b {
                        crate::model::transcript::Block::Text { text } => Some(text.to_string()),
                        _ => None,
                    })
                    .collect()
            })
            .unwrap_or_default();
    }
    let mut out = String::new();
    for line in body.lines() {
        let Some(data) = line.strip_prefix("data:") else {
            continue;
        };
        let Ok(v) = serde_json::from_str::<Value>(data.trim()) else {
            continue;
        };
        let piece = match provider {
            Provider::Anthropic => v.pointer("/delta/text"),
            Provider::OpenAiChat => v.pointer("/choices/0/delta/content"),
            Provider::OpenAiResponses => {
                (v["type"] == "response.output_text.delta").then(|| &v["delta"])
            }
        };
        if let Some(Value::String(s)) = piece {
            out.push_str(s);
        }
    }
    out
}

/// Measures every target with every (API, stream) mode, in that order, after checking that each
/// gives the benchmark's reply in that mode: a target that does not is an error, never a row.
pub async fn compare(
    targets: &[Target],
    modes: &[(Provider, bool)],
    connections: usize,
    duration: Duration,
    mut progress: impl FnMut(&Row),
) -> Result<Vec<Row>, String> {
    let mut rows = Vec::new();
    for &(provider, stream) in modes {
        for target in targets {
            let load = Load {
                addr: target.addr,
                provider,
                stream,
                connections,
                duration,
            };
            let what = format!(
                "{} ({}{})",
                target.name,
                api_name(provider),
                if stream { ", streamed" } else { "" }
            );
            let (status, body) = probe(&load)
                .await
                .map_err(|e| format!("{what}: no answer at {}: {e}", target.addr))?;
            let text = reply_text(provider, stream, &body);
            // Surrounding whitespace aside (VidaiMock streams word by word with a space after
            // each).
            if status != 200 || text.trim() != REPLY {
                return Err(format!(
                    "{what} does not give the benchmark's reply {REPLY:?}: status {status}, reply text {text:?}, body {:?}",
                    crate::mock_llm::book::clip(&body, 300)
                ));
            }
            // A short warm-up, not measured.
            let warm = Load {
                duration: duration.min(Duration::from_millis(500)),
                ..load.clone()
            };
            run(&warm).await;
            let row = Row {
                server: target.name.clone(),
                api: api_name(provider),
                stream,
                measured: run(&load).await,
            };
            progress(&row);
            rows.push(row);
        }
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    /// A server that answers every request with `response`, as raw bytes.
    async fn canned(response: &'static [u8]) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut buf = vec![0u8; 65536];
            // Two requests on one connection; bounded.
            for _ in 0..2 {
                let mut got = Vec::new();
                while find(&got, b"\r\n\r\n").is_none() {
                    let n = s.read(&mut buf).await.unwrap();
                    if n == 0 {
                        return;
                    }
                    got.extend_from_slice(&buf[..n]);
                }
                s.write_all(response).await.unwrap();
            }
        });
        addr
    }

    #[tokio::test]
    async fn the_reader_takes_whole_bodies_by_length_and_by_chunks() {
        let cases: [(&'static [u8], &str, bool); 3] = [
            (b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello", "hello", false),
            (
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nhel\r\n2;x=y\r\nlo\r\n0\r\n\r\n",
                "hello",
                false,
            ),
            (
                b"HTTP/1.1 429 Too Many\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}",
                "{}",
                true,
            ),
        ];
        for (response, body, closes) in cases {
            let addr = canned(response).await;
            let mut stream = TcpStream::connect(addr).await.unwrap();
            let mut buf = Vec::new();
            for _ in 0..2 {
                let (status, got, close) =
                    exchange(&mut stream, b"GET / HTTP/1.1\r\n\r\n", &mut buf, true)
                        .await
                        .unwrap();
                assert_eq!(String::from_utf8(got).unwrap(), body);
                assert_eq!(status, if closes { 429 } else { 200 });
                assert_eq!(close, closes);
                assert!(buf.is_empty(), "nothing left over");
            }
        }
    }

    /// Conversations of three turns, each replaying the history before it: the server routes
    /// every request, finds every history sound, and serves each conversation its whole script.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_continuation_workload_replays_sound_histories() {
        let scenario = crate::scenario::parse(SCENARIO, std::path::Path::new("bench.yaml"))
            .expect("the benchmark's scenario loads");
        let running = crate::mock_llm::server::start(&scenario, Default::default())
            .await
            .expect("the server starts");
        let m = run_continuation(running.addr, 2, Duration::from_millis(400)).await;
        let report = running.report();
        running.stop();
        assert_eq!(m.errors, 0, "{}", report.text());
        assert!(m.requests >= CHAIN_TURNS as u64, "{m:?}");
        assert!(
            report.violations.is_empty() && report.misses.is_empty(),
            "{}",
            report.text()
        );
        // Whole conversations were played: every entry of `chain` was served.
        assert!(
            report.unused.iter().all(|u| u.agent != "chain"),
            "{}",
            report.text()
        );
        assert!(report.conversations >= 2, "{}", report.text());
    }

    #[test]
    fn requests_are_renumbered_in_place_and_stay_valid_json() {
        let load = Load {
            addr: "127.0.0.1:1".parse().unwrap(),
            provider: Provider::Anthropic,
            stream: true,
            connections: 1,
            duration: Duration::from_millis(1),
        };
        let (mut request, at) = request(&load, 7, 1);
        renumber(&mut request, at, 123_456);
        let text = String::from_utf8(request).unwrap();
        let (_, body) = text.split_once("\r\n\r\n").unwrap();
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(
            v["messages"][0]["content"],
            "What is the weather in Paris? (connection 0007, request 000000123456)"
        );
        let decoded = crate::wire::validate(Provider::Anthropic, &v).expect("a valid request");
        assert!(decoded.stream);
        for provider in [Provider::OpenAiChat, Provider::OpenAiResponses] {
            let v: serde_json::Value = serde_json::from_str(&body_of(provider)).unwrap();
            crate::wire::validate(provider, &v).expect("a valid request");
        }
    }

    fn body_of(provider: Provider) -> String {
        body(provider, false, 1, 1)
    }

    #[test]
    fn reply_text_reads_bodies_and_streams() {
        let r = crate::wire::reply::Reply {
            id: "x".into(),
            model: "m".into(),
            blocks: vec![crate::wire::reply::OutBlock::Text(vec![
                (0, "It is 18 C ".into()),
                (0, "and cloudy in Paris.".into()),
            ])],
            usage: Default::default(),
            stop: crate::wire::reply::Stop::EndTurn,
        };
        for provider in [
            Provider::Anthropic,
            Provider::OpenAiChat,
            Provider::OpenAiResponses,
        ] {
            let body = crate::wire::reply::body(provider, &r).to_string();
            assert_eq!(reply_text(provider, false, &body), REPLY);
            let mut stream = String::new();
            for e in crate::wire::reply::events(provider, &r, true) {
                e.write(&mut stream);
            }
            assert_eq!(reply_text(provider, true, &stream), REPLY, "{provider:?}");
        }
    }
}
