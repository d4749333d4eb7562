//! The service benchmark (`agentsim bench serve`): clients over loopback run seed 003's whole
//! flow against `agentsim serve` on an SQLite store, each in a loop: trigger a session, wait for
//! its question, answer it, wait for the session to complete. It measures sessions triggered,
//! questions answered and sessions completed per second, and the p50 and p99 latency of the
//! webhook, of the answer, and of a whole session.

use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::{json, Value};

/// The scenario the benchmark serves: an agent that asks once and answers at once after.
pub const SCENARIO: &str = r#"
name: service benchmark
agents:
  main: {}
  poet: { kind: agent, async_questions: true, script: per_conversation }
llm:
  poet:
    - ask_user: What style would you prefer?
    - Wrote the poem.
steps: []
"#;

/// p50 and p99 of some durations, in microseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Latency {
    /// The median.
    pub p50_us: u64,
    /// The 99th percentile.
    pub p99_us: u64,
}

impl Latency {
    fn of(mut samples: Vec<Duration>) -> Latency {
        if samples.is_empty() {
            return Latency::default();
        }
        samples.sort();
        let at = |q: f64| {
            let i = ((samples.len() as f64 - 1.0) * q).round() as usize;
            samples[i].as_micros() as u64
        };
        Latency {
            p50_us: at(0.5),
            p99_us: at(0.99),
        }
    }
}

/// What a run of the benchmark measured.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Measured {
    /// How long the clients ran.
    pub seconds: f64,
    /// Concurrent clients.
    pub clients: u32,
    /// Sessions triggered.
    pub triggered: u64,
    /// Questions answered (`resumed`).
    pub answered: u64,
    /// Sessions completed.
    pub completed: u64,
    /// `POST /webhook/{agent}`.
    pub webhook: Latency,
    /// `POST /agent/answer/{session}`.
    pub answer: Latency,
    /// From the webhook to the session seen completed.
    pub session: Latency,
}

impl Measured {
    /// Per second: triggered, answered, completed.
    pub fn rates(&self) -> (f64, f64, f64) {
        let s = self.seconds.max(f64::MIN_POSITIVE);
        (
            self.triggered as f64 / s,
            self.answered as f64 / s,
            self.completed as f64 / s,
        )
    }
}

#[derive(Default)]
struct ClientRun {
    triggered: u64,
    answered: u64,
    completed: u64,
    webhook: Vec<Duration>,
    answer: Vec<Duration>,
    session: Vec<Duration>,
}

/// Runs `clients` clients against the service at `base` (`http://ADDR`) for `seconds`; a client
/// finishes the session it is in when the time is up. An error if the service answers wrong.
pub async fn run(base: &str, clients: u32, seconds: f64) -> Result<Measured, String> {
    let client = reqwest::Client::new();
    let started = Instant::now();
    let until = started + Duration::from_secs_f64(seconds);
    let mut tasks = Vec::new();
    for i in 0..clients {
        let (client, base) = (client.clone(), base.to_owned());
        tasks.push(tokio::spawn(async move {
            one_client(&client, &base, i, until).await
        }));
    }
    let mut all = ClientRun::default();
    for t in tasks {
        let run = t.await.map_err(|e| e.to_string())??;
        all.triggered += run.triggered;
        all.answered += run.answered;
        all.completed += run.completed;
        all.webhook.extend(run.webhook);
        all.answer.extend(run.answer);
        all.session.extend(run.session);
    }
    Ok(Measured {
        seconds: started.elapsed().as_secs_f64(),
        clients,
        triggered: all.triggered,
        answered: all.answered,
        completed: all.completed,
        webhook: Latency::of(all.webhook),
        answer: Latency::of(all.answer),
        session: Latency::of(all.session),
    })
}

async fn get(client: &reqwest::Client, url: &str) -> Result<Value, String> {
    let r = client.get(url).send().await.map_err(|e| e.to_string())?;
    r.json().await.map_err(|e| e.to_string())
}

async fn post(client: &reqwest::Client, url: &str, body: Value) -> Result<Value, String> {
    let r = client
        .post(url)
        .json(&body)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    r.json().await.map_err(|e| e.to_string())
}

/// What one session of the flow took: its webhook, its answer, and the whole session.
struct OneSession {
    webhook: Duration,
    answer: Duration,
    session: Duration,
}

async fn one_client(
    client: &reqwest::Client,
    base: &str,
    id: u32,
    until: Instant,
) -> Result<ClientRun, String> {
    let mut run = ClientRun::default();
    let mut n = 0u64;
    while Instant::now() < until {
        n += 1;
        let one = one_session(client, base, id, n).await?;
        run.triggered += 1;
        run.answered += 1;
        run.completed += 1;
        run.webhook.push(one.webhook);
        run.answer.push(one.answer);
        run.session.push(one.session);
    }
    Ok(run)
}

/// The sessions completed, and the sizes of `state.json` and `context.jsonl` then.
type Sizes = (u64, Option<u64>, Option<u64>);

/// One window of a growth run ([`run_growth`]): the sessions that completed in it.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Window {
    /// Sessions completed since the start, at the window's end.
    pub sessions: u64,
    /// How long the window took.
    pub seconds: f64,
    /// Sessions completed per second in the window.
    pub sessions_per_sec: f64,
    /// The webhooks of the window's sessions.
    pub webhook: Latency,
    /// The answers of the window's sessions.
    pub answer: Latency,
    /// `state.json`'s size at the window's end, in bytes (with `--state`).
    pub state_bytes: Option<u64>,
    /// `context.jsonl`'s size at the window's end, in bytes (with `--state`).
    pub journal_bytes: Option<u64>,
}

/// Runs `clients` clients through `total` sessions, and measures each window of `window`
/// sessions completed: how fast they went, their webhooks' and answers' latency, and the size
/// of the runtime's files in `state_dir` at its end. A flat table is a cost per session that
/// does not grow with the sessions served. An error if the service answers wrong.
pub async fn run_growth(
    base: &str,
    clients: u32,
    total: u64,
    window: u64,
    state_dir: Option<&std::path::Path>,
) -> Result<Vec<Window>, String> {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Arc, Mutex};
    let window = window.max(1);
    let client = reqwest::Client::new();
    let next = Arc::new(AtomicU64::new(0));
    // Each session as it completed: when, its webhook's and its answer's latency.
    let done: Arc<Mutex<Vec<(Instant, Duration, Duration)>>> = Arc::default();
    // The files' sizes as each window ended.
    let sizes: Arc<Mutex<Vec<Sizes>>> = Arc::default();
    let size = |dir: Option<&std::path::Path>, file: &str| {
        dir.map(|d| std::fs::metadata(d.join(file)).map_or(0, |m| m.len()))
    };
    let started = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..clients {
        let (client, base) = (client.clone(), base.to_owned());
        let (next, done, sizes) = (next.clone(), done.clone(), sizes.clone());
        let dir = state_dir.map(std::path::Path::to_path_buf);
        tasks.push(tokio::spawn(async move {
            loop {
                let k = next.fetch_add(1, Ordering::SeqCst);
                if k >= total {
                    break;
                }
                let one = one_session(&client, &base, i, k).await?;
                let count = {
                    let mut done = done.lock().unwrap_or_else(|e| e.into_inner());
                    done.push((Instant::now(), one.webhook, one.answer));
                    done.len() as u64
                };
                if count % window == 0 {
                    let d = dir.as_deref();
                    let at = (count, size(d, "state.json"), size(d, "context.jsonl"));
                    sizes.lock().unwrap_or_else(|e| e.into_inner()).push(at);
                }
            }
            Ok::<(), String>(())
        }));
    }
    for t in tasks {
        t.await.map_err(|e| e.to_string())??;
    }
    let done = std::mem::take(&mut *done.lock().unwrap_or_else(|e| e.into_inner()));
    let sizes = std::mem::take(&mut *sizes.lock().unwrap_or_else(|e| e.into_inner()));
    let mut windows = Vec::new();
    let mut from = started;
    for (n, chunk) in done.chunks(window as usize).enumerate() {
        let end = chunk.last().map_or(from, |c| c.0);
        let seconds = end.duration_since(from).as_secs_f64();
        let sessions = n as u64 * window + chunk.len() as u64;
        let at = sizes.iter().find(|s| s.0 == sessions);
        windows.push(Window {
            sessions,
            seconds,
            sessions_per_sec: chunk.len() as f64 / seconds.max(f64::MIN_POSITIVE),
            webhook: Latency::of(chunk.iter().map(|c| c.1).collect()),
            answer: Latency::of(chunk.iter().map(|c| c.2).collect()),
            state_bytes: at.and_then(|s| s.1),
            journal_bytes: at.and_then(|s| s.2),
        });
        from = end;
    }
    Ok(windows)
}

/// One session of the flow, checked: triggered, its question found and answered, seen
/// completed with the script's result.
async fn one_session(
    client: &reqwest::Client,
    base: &str,
    id: u32,
    n: u64,
) -> Result<OneSession, String> {
    {
        let t0 = Instant::now();
        // A payload of its own: each session is a conversation of its own for the model.
        let webhook = format!("{base}/webhook/poet");
        let accepted = post(client, &webhook, json!({ "client": id, "n": n })).await?;
        let webhook = t0.elapsed();
        let sid = accepted["session_id"]
            .as_str()
            .ok_or_else(|| format!("the webhook answered {accepted}"))?
            .to_owned();
        let session_url = format!("{base}/agent/session/{sid}");
        // Wait for the question (bounded: a service that never asks fails the benchmark).
        let mut question = None;
        for _ in 0..10_000 {
            let s = get(client, &session_url).await?;
            if s["status"] == "pending_input" {
                let pending =
                    get(client, &format!("{base}/agent/questions?status=pending")).await?;
                question = pending["questions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|q| q["session_id"] == sid.as_str())
                    .and_then(|q| q["id"].as_str().map(str::to_owned));
                if question.is_some() {
                    break;
                }
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let question = question.ok_or_else(|| format!("session {sid} never asked"))?;
        let t1 = Instant::now();
        let answer = format!("{base}/agent/answer/{sid}");
        let body = json!({ "question_id": question, "answer": "haiku" });
        let answered = post(client, &answer, body).await?;
        let answer = t1.elapsed();
        if answered["status"] != "resumed" {
            return Err(format!("the answer got {answered}"));
        }
        let mut done = false;
        for _ in 0..10_000 {
            let s = get(client, &session_url).await?;
            if s["status"] == "completed" {
                // Each session finishes as its own: the script's result, its one question.
                if s["result"] != json!({ "raw_result": "Wrote the poem." })
                    || s["questions_asked"] != 1
                {
                    return Err(format!("session {sid} completed as {s}"));
                }
                done = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        if !done {
            return Err(format!("session {sid} never completed"));
        }
        Ok(OneSession {
            webhook,
            answer,
            session: t0.elapsed(),
        })
    }
}
