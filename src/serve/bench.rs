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
        let t0 = Instant::now();
        // A payload of its own: each session is a conversation of its own for the model.
        let webhook = format!("{base}/webhook/poet");
        let accepted = post(client, &webhook, json!({ "client": id, "n": n })).await?;
        run.webhook.push(t0.elapsed());
        run.triggered += 1;
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
        run.answer.push(t1.elapsed());
        if answered["status"] != "resumed" {
            return Err(format!("the answer got {answered}"));
        }
        run.answered += 1;
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
        run.session.push(t0.elapsed());
        run.completed += 1;
    }
    Ok(run)
}
