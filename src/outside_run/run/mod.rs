//! One run of a scenario against a runtime under test: the mock server started in process, the
//! runtime's process started and spoken to, the steps played, every line checked in order, the
//! checks and expectations judged, and the process stopped.

mod lines;
mod reset;

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use crate::drive::scripted::MockTools;
use crate::mock_llm::server::Running;
use crate::observe::names;
use crate::outside::codec::{ToolResult, User, MAX_LINES_PER_RUN};
use crate::outside::{encode_line, ProtocolError, ProtocolErrorKind, Session, ToRuntime};
use crate::report::html::Row;
use crate::scenario::{Scenario, StepKind, DEFAULT_KEY};

use super::hello::{hello, HelloFor};
use super::judge::{judge, Conversation, Mark, View};
use super::model_side::ModelSide;
use super::outcome::{Entry, Failure, FailureKind};
use super::process::{self, Out, Process, StderrTail};
use super::restart_check::RestartCheck;
use super::Options;

/// A tool result agentsim holds until its latency has passed: (due, order, call, result).
type Timer = Reverse<(Instant, u64, String, ResultLine)>;

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct ResultLine {
    content: String,
    is_error: bool,
    failed: bool,
}

/// What ends a wait besides its condition.
#[derive(Clone, Copy)]
enum Bound {
    /// Returns at this instant (an `advance` step).
    Advance(Instant),
    /// Fails at this instant (the ready timeout).
    Ready(Instant),
    /// Fails after the idle timeout of silence.
    Silence,
    /// Returns once the runtime has been quiet (no line, no model request) this long; tool
    /// results due after the given instant are held back meanwhile.
    Settle(Instant, Duration),
}

/// How long a runtime must be quiet before an expectation judged while its turn runs: the
/// runtime's own work after the moment the scenario names (zero in the simulator's virtual time)
/// is let finish.
const QUIET: Duration = Duration::from_millis(200);

/// Why the steps stopped early: a failure, or the expected check broke.
pub(super) enum Stop {
    Failed(Failure),
    /// The runtime lacks a capability the scenario needs.
    Unrunnable(crate::scenario::ScenarioError),
    Reproduced {
        check: String,
        step: usize,
    },
}

/// The state of one run.
pub(super) struct Run<'a> {
    pub scenario: &'a Scenario,
    pub options: &'a Options,
    pub command: String,
    pub server: Running,
    pub state_dir: PathBuf,
    pub env: Vec<(String, String)>,
    pub seed: u64,
    pub time_scale: f64,
    session: Session,
    proc: Option<Process>,
    pub stderr: Arc<Mutex<StderrTail>>,
    lines_in_run: u64,
    line_no: u64,
    last_line: Option<String>,
    pub seq: u64,
    idle_seq: u64,
    restarts: u64,
    tools: MockTools,
    timers: BinaryHeap<Timer>,
    timer_order: u64,
    pub capabilities: Vec<String>,
    pub conversations: BTreeMap<String, Conversation>,
    marks: BTreeMap<String, Mark>,
    pub entries: Vec<Entry>,
    /// Every `send`, as (conversation, text).
    pub sent: Vec<(String, String)>,
    /// For each send, the `seq` of the last `user` line written before it.
    pub sent_seq: Vec<u64>,
    /// Every `tool_call`, as (conversation, tool, input).
    pub tool_calls: Vec<(String, String, serde_json::Value)>,
    /// Exchanges begun when the runtime said idle for the last `seq` (the `idle` check).
    idle_exchanges: Option<u64>,
    pub timed_steps: Vec<usize>,
    /// The step being played (1-based; 0 before the first).
    step: usize,
    deadline: Instant,
    /// Violations of the mock server already turned into failures.
    seen_violations: usize,
    /// Violations of the inferred checks already turned into failures.
    seen_inferred: usize,
    /// The mock server's journal, decoded, and what it tells of the stack.
    pub model_side: ModelSide,
    /// The wall time of each `user` step that waits: from its line to the runtime's `idle`.
    pub user_steps: Vec<Duration>,
    /// The `restart` check.
    restart_check: RestartCheck,
    /// Each tool's outcomes as delivered, in call order.
    pub tool_steps: BTreeMap<String, Vec<crate::drive::backend::ToolStep>>,
    /// The tool faults injected: (tool, call from 1, fault).
    pub tool_faults: Vec<(String, usize, super::ToolFault)>,
    /// The model request at which a check broke, when one did on a request.
    pub broke_at: Option<u64>,
}

impl<'a> Run<'a> {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        scenario: &'a Scenario,
        options: &'a Options,
        server: Running,
        state_dir: PathBuf,
        env: Vec<(String, String)>,
        seed: u64,
        time_scale: f64,
    ) -> Run<'a> {
        Run {
            scenario,
            options,
            command: options.display(),
            server,
            state_dir,
            env,
            seed,
            time_scale,
            session: Session::new(),
            proc: None,
            stderr: Arc::default(),
            lines_in_run: 0,
            line_no: 0,
            last_line: None,
            seq: 0,
            idle_seq: 0,
            restarts: 0,
            tools: MockTools::new(scenario.tools.clone()),
            timers: BinaryHeap::new(),
            timer_order: 0,
            capabilities: Vec::new(),
            conversations: BTreeMap::new(),
            marks: BTreeMap::new(),
            entries: Vec::new(),
            sent: Vec::new(),
            sent_seq: Vec::new(),
            tool_calls: Vec::new(),
            idle_exchanges: None,
            timed_steps: Vec::new(),
            step: 0,
            deadline: Instant::now() + options.timeouts.run,
            seen_violations: 0,
            seen_inferred: 0,
            model_side: ModelSide::new(scenario),
            user_steps: Vec::new(),
            restart_check: RestartCheck::default(),
            tool_steps: BTreeMap::new(),
            tool_faults: Vec::new(),
            broke_at: None,
        }
    }

    fn note(&mut self, text: String) {
        self.entries.push(Entry {
            exchanges: self.server.exchanges(),
            text,
            row: None,
        });
    }

    /// A transcript line that the page's sequence draws as `row`.
    fn drawn(&mut self, text: String, row: Row) {
        self.entries.push(Entry {
            exchanges: self.server.exchanges(),
            text,
            row: Some(row),
        });
    }

    fn location(&self) -> (u32, u32) {
        self.step
            .checked_sub(1)
            .and_then(|i| self.scenario.steps.get(i))
            .map_or((0, 0), |s| (s.line, s.column))
    }

    fn fail(&self, kind: FailureKind, message: String) -> Failure {
        Failure {
            kind,
            step: (self.step > 0).then_some(self.step),
            location: self.location(),
            message,
        }
    }

    /// A failure about the process, with the last line it wrote and its last stderr lines.
    fn fail_process(&self, kind: FailureKind, what: String) -> Failure {
        let last = match &self.last_line {
            Some(l) => format!("; last line from the runtime (line {}): {l}", self.line_no),
            None => "; the runtime wrote no line".to_owned(),
        };
        self.fail(kind, format!("runtime `{}`: {what}{last}", self.command))
    }

    pub(super) fn stderr_lines(&self) -> Vec<String> {
        self.stderr
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .lines()
    }

    // -- the process ------------------------------------------------------------------------

    /// Starts the runtime, writes `hello` and waits for `ready`; after a restart, also for the
    /// `idle` the killed process owed.
    pub(super) async fn start(&mut self) -> Result<(), Failure> {
        let awaiting = (self.idle_seq < self.seq).then_some(self.seq);
        let state_dir = self.state_dir.display().to_string();
        let hello = hello(
            self.scenario,
            &HelloFor {
                seed: self.seed,
                state_dir: &state_dir,
                restarts: self.restarts,
                awaiting_idle: awaiting,
                time_scale: self.time_scale,
            },
        );
        if self.proc.is_some() && self.reset_kept(&hello).await {
            // A process kept from the job's previous run answered `ready` after `reset`.
            return Ok(());
        }
        let proc = process::spawn(
            &self.options.command,
            self.options.cwd.as_deref(),
            &self.env,
            self.stderr.clone(),
        )
        .map_err(|e| {
            self.fail(
                FailureKind::UnexpectedExit,
                format!("cannot start the runtime `{}`: {e}", self.command),
            )
        })?;
        self.proc = Some(proc);
        self.line_no = 0;
        self.note(format!(
            "agentsim starts `{}`{}",
            self.command,
            if self.restarts > 0 {
                format!(" again (restart {})", self.restarts)
            } else {
                String::new()
            }
        ));
        self.write(ToRuntime::Hello(hello)).await?;
        let ready_by = Instant::now() + self.options.timeouts.ready;
        self.pump(|r| r.session.is_ready(), Bound::Ready(ready_by), "ready")
            .await?;
        if let Some(seq) = awaiting {
            self.await_idle(seq).await?;
        }
        Ok(())
    }

    async fn write(&mut self, message: ToRuntime) -> Result<(), Failure> {
        let line = encode_line(&message).map_err(|e| {
            self.fail(
                FailureKind::UnexpectedExit,
                format!("agentsim cannot write its line: {e}"),
            )
        })?;
        self.session.sent(&message);
        let arrow = |from, to, text: String, reply| Row::Arrow {
            from,
            to,
            text,
            reply,
        };
        let (shown, row) = match &message {
            ToRuntime::Hello(_) => ("→ hello".to_owned(), None),
            ToRuntime::User(u) => (
                format!("user → {} (seq {}): {:?}", u.conversation, u.seq, u.text),
                Some(arrow(
                    "user",
                    "runtime",
                    format!("{}: {}", u.conversation, u.text),
                    false,
                )),
            ),
            ToRuntime::ToolResult(r) => (
                format!(
                    "→ tool_result {}: {:?}{}",
                    r.call,
                    r.content,
                    if r.is_error { " (error)" } else { "" }
                ),
                Some(arrow(
                    "tools",
                    "runtime",
                    format!(
                        "{}: {}{}",
                        r.call,
                        r.content,
                        if r.is_error { " (error)" } else { "" }
                    ),
                    true,
                )),
            ),
            ToRuntime::Reset => ("→ reset".to_owned(), None),
            ToRuntime::Shutdown => ("→ shutdown".to_owned(), None),
        };
        match row {
            Some(row) => self.drawn(shown, row),
            None => self.note(shown),
        }
        let proc = self.proc.as_mut().expect("a process runs");
        if proc.write(&line).await.is_err() {
            // It stopped reading: it exited, or is about to. Its exit is the failure.
            return Err(self.exited("writing to it").await);
        }
        Ok(())
    }

    async fn exited(&mut self, awaited: &str) -> Failure {
        let status = match self.proc.as_mut() {
            Some(p) => p.exit_status(Duration::from_secs(2)).await,
            None => None,
        };
        self.fail_process(
            FailureKind::UnexpectedExit,
            format!(
                "the runtime exited ({}) while agentsim was {awaited}",
                process::describe(status)
            ),
        )
    }

    /// Handles the runtime's lines and answers tool calls as they come due until `done` holds,
    /// the bound says to stop, or a failure. Every wait is also bounded by the run timeout.
    async fn pump(
        &mut self,
        mut done: impl FnMut(&Run<'_>) -> bool,
        bound: Bound,
        awaited: &str,
    ) -> Result<(), Failure> {
        let idle_timeout = self.options.timeouts.idle;
        let mut active = Instant::now();
        let mut exchanges = self.server.exchanges();
        loop {
            if done(self) {
                return Ok(());
            }
            let now = Instant::now();
            if now >= self.deadline {
                return Err(self.fail_process(
                    FailureKind::Timeout("run"),
                    format!(
                        "the run took longer than {} s (run timeout, --run-timeout) while agentsim was awaiting {awaited}",
                        self.options.timeouts.run.as_secs_f64()
                    ),
                ));
            }
            let fire_until = match bound {
                Bound::Settle(started, _) => started.min(now),
                _ => now,
            };
            if let Some(Reverse((due, ..))) = self.timers.peek() {
                if *due <= fire_until {
                    let Reverse((_, _, call, r)) = self.timers.pop().expect("peeked");
                    self.write(ToRuntime::ToolResult(ToolResult {
                        call,
                        content: r.content,
                        is_error: r.is_error,
                        failed: r.failed,
                    }))
                    .await?;
                    active = Instant::now();
                    continue;
                }
            }
            if !self.timers.is_empty() && !matches!(bound, Bound::Settle(..)) {
                // agentsim holds a result back: that time is not the runtime's silence.
                active = now;
            }
            let mut wake = self.deadline;
            match bound {
                Bound::Advance(until) => {
                    if now >= until {
                        return Ok(());
                    }
                    wake = wake.min(until);
                }
                Bound::Ready(by) => {
                    if now >= by {
                        return Err(self.fail_process(
                            FailureKind::Timeout("ready"),
                            format!(
                                "no `ready` within {} s (ready timeout, --ready-timeout)",
                                self.options.timeouts.ready.as_secs_f64()
                            ),
                        ));
                    }
                    wake = wake.min(by);
                }
                Bound::Silence => {
                    let silence_ends = active + idle_timeout;
                    if now >= silence_ends {
                        // A model request is activity too.
                        let now_exchanges = self.server.exchanges();
                        if now_exchanges != exchanges {
                            exchanges = now_exchanges;
                            active = now;
                            continue;
                        }
                        return Err(self.fail_process(
                            FailureKind::Timeout("idle"),
                            format!(
                                "no {awaited} within {} s of silence (idle timeout, --idle-timeout)",
                                idle_timeout.as_secs_f64()
                            ),
                        ));
                    }
                    wake = wake.min(silence_ends);
                }
                Bound::Settle(_, quiet) => {
                    let now_exchanges = self.server.exchanges();
                    if now_exchanges != exchanges {
                        exchanges = now_exchanges;
                        active = now;
                    }
                    let quiet_ends = active + quiet;
                    if now >= quiet_ends {
                        return Ok(());
                    }
                    // Wake often enough to see model requests, which come on no channel.
                    wake = wake.min(quiet_ends).min(now + quiet / 4);
                }
            }
            // While settling, the results due later are held back: no wake for them.
            if !matches!(bound, Bound::Settle(..)) {
                if let Some(Reverse((due, ..))) = self.timers.peek() {
                    wake = wake.min(*due);
                }
            }
            let proc = self.proc.as_mut().expect("a process runs");
            tokio::select! {
                out = proc.out.recv() => match out {
                    Some(Out::Line(raw)) => {
                        self.line(&raw)?;
                        active = Instant::now();
                    }
                    Some(Out::Eof) | None => {
                        return Err(self.exited(&format!("awaiting {awaited}")).await);
                    }
                },
                () = tokio::time::sleep_until(wake) => {}
            }
        }
    }

    /// One line of the runtime.
    fn line(&mut self, raw: &[u8]) -> Result<(), Failure> {
        self.line_no += 1;
        self.lines_in_run += 1;
        let quoted = crate::outside::quote_line(raw);
        self.last_line = Some(quoted.clone());
        if self.lines_in_run > MAX_LINES_PER_RUN {
            let e = ProtocolError::new(
                ProtocolErrorKind::Flood,
                self.line_no,
                format!("more than {MAX_LINES_PER_RUN} lines in one run"),
                raw,
            );
            return Err(self.protocol(e));
        }
        let message = match self.session.receive_line(raw, self.line_no) {
            Ok(Some(m)) => m,
            Ok(None) => return Ok(()),
            Err(e) => {
                self.note(format!("runtime → {quoted}"));
                return Err(self.protocol(e));
            }
        };
        self.message(message, &quoted)
    }

    fn protocol(&self, e: ProtocolError) -> Failure {
        let message = format!("runtime `{}`: protocol error: {e}", self.command);
        self.fail(FailureKind::Protocol(e), message)
    }

    fn after_idle(&self, what: &str) -> Option<Failure> {
        self.idle_exchanges.map(|_| {
            self.fail(
                FailureKind::Check("idle".to_owned()),
                format!(
                    "idle: the runtime wrote `{what}` after its `idle` for seq {}, before agentsim's next line (runtime line {})",
                    self.idle_seq, self.line_no
                ),
            )
        })
    }

    async fn await_idle(&mut self, seq: u64) -> Result<(), Failure> {
        let what = format!("`idle` for user seq {seq}");
        self.pump(move |r| r.idle_seq >= seq, Bound::Silence, &what)
            .await
    }

    // -- steps --------------------------------------------------------------------------------

    /// Plays every step; stops at the first failure or when the expected check breaks.
    pub(super) async fn play(&mut self) -> Result<(), Stop> {
        self.start().await.map_err(Stop::Failed)?;
        let needs = super::needs::needs(self.scenario);
        let header = self.capabilities.iter().any(|c| c == "conversation-header");
        self.model_side.address(header);
        if let Some(e) = super::needs::unmet(
            self.scenario,
            &needs,
            &self.capabilities,
            &self.command,
            self.model_side.inference.is_some(),
        ) {
            return Err(Stop::Unrunnable(e));
        }
        let steps = self.scenario.steps.clone();
        for (i, step) in steps.iter().enumerate() {
            self.step = i + 1;
            self.one(&step.kind).await.map_err(Stop::Failed)?;
            self.after_step()?;
        }
        if self.seq > self.idle_seq {
            self.step = 0;
            self.await_idle(self.seq).await.map_err(Stop::Failed)?;
            self.after_step()?;
        }
        self.step = 0;
        if let Some(f) = self.requests_after_idle() {
            return Err(self.stop_for(f));
        }
        Ok(())
    }

    async fn one(&mut self, step: &StepKind) -> Result<(), Failure> {
        match step {
            StepKind::User { key, text, wait } => {
                if let Some(f) = self.requests_after_idle() {
                    return Err(f);
                }
                self.idle_exchanges = None;
                self.catch_up();
                let cancel = self.scenario.config.is_cancel_word(text);
                if let Some(inference) = self.model_side.inference.as_mut() {
                    inference.user(key, cancel);
                }
                self.seq += 1;
                let seq = self.seq;
                self.restart_check.user(key);
                self.conversations.entry(key.clone()).or_default();
                let written = Instant::now();
                self.write(ToRuntime::User(User {
                    seq,
                    conversation: key.clone(),
                    text: text.clone(),
                }))
                .await?;
                if *wait {
                    self.await_idle(seq).await?;
                    self.user_steps.push(written.elapsed());
                }
            }
            StepKind::Advance(ms) => {
                let until =
                    Instant::now() + Duration::from_secs_f64(*ms as f64 / 1000.0 * self.time_scale);
                self.note(format!("advance {ms} ms (× {})", self.time_scale));
                self.pump(|_| false, Bound::Advance(until), "the end of an `advance`")
                    .await?;
            }
            StepKind::Restart => {
                self.drawn(
                    "agentsim kills the runtime (SIGKILL)".to_owned(),
                    Row::Note {
                        over: "runtime",
                        text: "killed (SIGKILL), then started again".to_owned(),
                        alarm: false,
                    },
                );
                if let Some(mut p) = self.proc.take() {
                    p.kill().await;
                }
                self.read_journal();
                self.restart_check.killed(
                    &self.model_side.lines,
                    self.server.exchanges(),
                    self.idle_seq < self.seq,
                );
                self.timers.clear();
                self.idle_exchanges = None;
                self.restarts += 1;
                self.start().await?;
                // What the restarted runtime says on its own (restored stacks, a text sent
                // again) is seen before the next step, for the `restart` check.
                let now = Instant::now();
                self.pump(|_| false, Bound::Settle(now, QUIET), "quiet")
                    .await?;
            }
            StepKind::Expect(e) => {
                if self.idle_seq < self.seq {
                    // Judged while a turn runs: let the runtime finish what is due by now.
                    self.timed_steps.push(self.step);
                    let now = Instant::now();
                    self.pump(|_| false, Bound::Settle(now, QUIET), "quiet")
                        .await?;
                }
                self.catch_up();
                let key = e.key.clone().unwrap_or_else(|| DEFAULT_KEY.to_owned());
                let empty = Conversation::default();
                let conversation = self.conversations.get(&key).unwrap_or(&empty);
                let has = |c: &str| self.capabilities.iter().any(|o| o == c);
                // What the runtime does not report is read from its model requests.
                let (inferred, unknown) = self.model_side.overlay(
                    &key,
                    conversation,
                    !has("stack"),
                    !has("tool-results"),
                    !has("response"),
                );
                let conversation = inferred.as_ref().unwrap_or(conversation);
                let mark = self.marks.get(&key).copied().unwrap_or_default();
                let llm_calls = self.llm_calls();
                let mismatches = judge(
                    e,
                    &View {
                        conversation,
                        mark,
                        idle: self.idle_seq >= self.seq,
                        llm_calls: &llm_calls,
                        stack_unknown: unknown.as_deref(),
                        results_inferred: !has("tool-results") && inferred.is_some(),
                        unseen: self
                            .model_side
                            .inference
                            .as_ref()
                            .filter(|_| !has("tool-results"))
                            .map(|i| &i.of(&key).unseen),
                    },
                );
                let next = Mark::now(conversation);
                self.marks.insert(key.clone(), next);
                if !mismatches.is_empty() {
                    let text = mismatches.join("; ");
                    self.drawn(
                        format!("expect (step {}): {text}", self.step),
                        Row::Note {
                            over: "user",
                            text: format!("step {}: {text}", self.step),
                            alarm: true,
                        },
                    );
                    return Err(self.fail(
                        FailureKind::Expectation,
                        format!("step {} (expect, conversation {key}): {text}", self.step),
                    ));
                }
                self.drawn(
                    format!("expect (step {}): holds", self.step),
                    Row::Note {
                        over: "user",
                        text: format!("step {}: expect holds", self.step),
                        alarm: false,
                    },
                );
            }
            StepKind::Run(_)
            | StepKind::Answer { .. }
            | StepKind::Trigger { .. }
            | StepKind::AsyncAnswer { .. }
            | StepKind::Intervene { .. } => {
                unreachable!("needs::refusal refuses these steps before a run starts")
            }
        }
        Ok(())
    }

    /// A model request the runtime made after its `idle` for the last `seq`.
    fn requests_after_idle(&self) -> Option<Failure> {
        let at = self.idle_exchanges?;
        let now = self.server.exchanges();
        (now > at).then(|| {
            self.fail(
                FailureKind::Check("idle".to_owned()),
                format!(
                    "idle: the runtime made {} model request(s) after its `idle` for seq {}, before agentsim's next line",
                    now - at,
                    self.idle_seq
                ),
            )
        })
    }

    /// The checks after each step: the mock server's wire checks and `no-display-leak`.
    fn after_step(&mut self) -> Result<(), Stop> {
        let report = self.server.report();
        if let Some(v) = report.violations.get(self.seen_violations) {
            self.seen_violations = report.violations.len();
            self.broke_at = Some(v.exchange);
            let check = v.invariant.unwrap_or("request-format").to_owned();
            let f = self.fail(
                FailureKind::Check(check.clone()),
                format!(
                    "{check}: model request #{} was refused as the provider would refuse it: {}",
                    v.exchange, v.message
                ),
            );
            return Err(self.stop_for(f));
        }
        self.catch_up();
        if let Some(f) = self.display_leak() {
            self.broke_at = self.model_side.leak.as_ref().map(|(n, _)| *n);
            return Err(self.stop_for(f));
        }
        self.restart_check.requests(&self.model_side.lines);
        if !self.restart_check.violations.is_empty() {
            let message = self.restart_check.violations.remove(0);
            let f = self.fail(FailureKind::Check(names::RESTART.to_owned()), message);
            return Err(self.stop_for(f));
        }
        if let Some(v) = self.model_side.violations.get(self.seen_inferred) {
            self.seen_inferred += 1;
            self.broke_at = Some(v.exchange);
            let f = self.fail(
                FailureKind::Check(v.check.to_owned()),
                format!("{}: {}", v.check, v.message),
            );
            return Err(self.stop_for(f));
        }
        if let Some(u) = self.model_side.unaddressed() {
            let message = format!("conversation-header: {}", u.message);
            return Err(Stop::Failed(
                self.fail(FailureKind::ConversationHeader, message),
            ));
        }
        Ok(())
    }

    /// Reads the journal; once the runtime is idle (nothing in flight), feeds every exchange to
    /// the inference and ends the frames that do not wait for the user.
    fn catch_up(&mut self) {
        self.read_journal();
        if self.idle_seq >= self.seq {
            self.model_side.feed(true);
            if let Some(inference) = self.model_side.inference.as_mut() {
                inference.settle();
            }
        }
    }

    /// A failure, or the reproduction the scenario expects when it is that check.
    fn stop_for(&self, f: Failure) -> Stop {
        if let (FailureKind::Check(name), Some(expected)) =
            (&f.kind, &self.scenario.expect_violation)
        {
            if name == expected {
                return Stop::Reproduced {
                    check: name.clone(),
                    step: self.step,
                };
            }
        }
        Stop::Failed(f)
    }

    /// Per-call tool outcomes never used, as `tool: n`.
    pub(super) fn unused_tool_outcomes(&self) -> Vec<String> {
        self.tools
            .unused()
            .into_iter()
            .map(|(tool, n)| format!("{tool}: {n}"))
            .collect()
    }

    // -- the model side ------------------------------------------------------------------------

    /// Reads the journal lines written since the last read.
    pub(super) fn read_journal(&mut self) {
        let arrivals = self.server.arrivals_since(self.model_side.arrivals_read());
        let journal = self.server.journal_since(self.model_side.lines.len());
        self.model_side.absorb(arrivals, journal);
    }

    /// Model calls answered from each agent's script so far, counted as the mock server routes
    /// them (a call still waiting out its scripted latency counts, as it does in the simulator).
    fn llm_calls(&self) -> BTreeMap<String, usize> {
        self.server.calls_by_agent()
    }

    /// `no-display-leak`, on the requests journaled so far.
    fn display_leak(&self) -> Option<Failure> {
        let (n, leak) = self.model_side.leak?;
        Some(self.fail(
            FailureKind::Check(names::NO_DISPLAY_LEAK.to_owned()),
            format!(
                "{}: model request #{n} carries {leak:?}, a text meant only for the user's display, as a tool result",
                names::NO_DISPLAY_LEAK
            ),
        ))
    }
}
