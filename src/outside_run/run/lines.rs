//! The runtime's lines as they come (what each one means for the run), and the run's end:
//! `shutdown` and the runtime's exit.

use std::cmp::Reverse;
use std::time::Duration;

use tokio::time::Instant;

use crate::drive::scripted::ToolBehavior;
use crate::outside::codec::{EventBody, FromRuntime};
use crate::outside::{encode_line, ToRuntime};
use crate::report::html::Row;

use super::super::judge::{SeenResponse, SeenResult};
use super::super::outcome::{Failure, FailureKind};
use super::super::process::{self, Out};
use super::{ResultLine, Run};

impl Run<'_> {
    pub(super) fn message(&mut self, message: FromRuntime, quoted: &str) -> Result<(), Failure> {
        match message {
            FromRuntime::Ready(ready) => {
                self.note(format!(
                    "runtime → ready{}, capabilities [{}]",
                    ready.name.map(|n| format!(" ({n})")).unwrap_or_default(),
                    ready.capabilities.join(", ")
                ));
                self.capabilities = ready.capabilities;
            }
            FromRuntime::Send(s) => {
                if let Some(f) = self.after_idle("send") {
                    return Err(f);
                }
                self.drawn(
                    format!("runtime → user {}: {:?}", s.conversation, s.text),
                    Row::Arrow {
                        from: "runtime",
                        to: "user",
                        text: format!("{}: {}", s.conversation, s.text),
                        reply: true,
                    },
                );
                self.sent.push((s.conversation.clone(), s.text.clone()));
                self.sent_seq.push(self.seq);
                self.restart_check.sent(&s.conversation, &s.text);
                if let Some(inference) = self.model_side.inference.as_mut() {
                    inference.sent(&s.conversation, &s.text);
                }
                self.conversations
                    .entry(s.conversation)
                    .or_default()
                    .sent
                    .push(s.text);
            }
            FromRuntime::ToolCall(call) => {
                if let Some(f) = self.after_idle("tool_call") {
                    return Err(f);
                }
                self.drawn(
                    format!(
                        "runtime → tool_call {} {} by {}: {}",
                        call.call, call.name, call.agent, call.input
                    ),
                    Row::Arrow {
                        from: "runtime",
                        to: "tools",
                        text: format!("{} {} {}", call.call, call.name, call.input),
                        reply: false,
                    },
                );
                self.tool_calls.push((
                    call.conversation.clone(),
                    call.name.clone(),
                    call.input.clone(),
                ));
                let step = self.tools.next(&call.name, &call.input).map_err(|e| {
                    self.fail(
                        FailureKind::ToolScriptExhausted,
                        format!(
                            "the script of tool `{}` has no entry for call {} (runtime line {})",
                            e.tool, e.call, self.line_no
                        ),
                    )
                })?;
                let step = self.tool_fault(&call.name, step);
                let result = match step.behavior {
                    ToolBehavior::Result { content, is_error } => Some(ResultLine {
                        content: content.to_string(),
                        is_error,
                        failed: false,
                    }),
                    ToolBehavior::Fail(message) => Some(ResultLine {
                        content: message.to_string(),
                        is_error: true,
                        failed: true,
                    }),
                    ToolBehavior::Hang => None,
                };
                if let Some(result) = result {
                    let after =
                        Duration::from_secs_f64(step.after_ms as f64 / 1000.0 * self.time_scale);
                    self.timer_order += 1;
                    self.timers.push(Reverse((
                        Instant::now() + after,
                        self.timer_order,
                        call.call,
                        result,
                    )));
                }
            }
            FromRuntime::Idle(idle) => {
                self.note(format!("runtime → idle {}", idle.seq));
                self.idle_seq = self.idle_seq.max(idle.seq);
                if self.idle_seq == self.seq && self.seq > 0 {
                    self.idle_exchanges = Some(self.server.exchanges());
                }
            }
            FromRuntime::Stack(stack) => {
                let names: Vec<&str> = stack.frames.iter().map(|f| f.name.as_str()).collect();
                self.note(format!(
                    "runtime → stack {}: [{}]",
                    stack.conversation,
                    names.join(", ")
                ));
                let c = self.conversations.entry(stack.conversation).or_default();
                c.frames = stack.frames;
                c.ended.extend(stack.ended);
            }
            FromRuntime::Event(event) => {
                let frame = event.frame.clone();
                let shown = match &event.body {
                    EventBody::ToolResult {
                        content, is_error, ..
                    } => format!(
                        "tool_result to {}: {content:?}{}",
                        frame.as_deref().unwrap_or("main"),
                        if *is_error { " (error)" } else { "" }
                    ),
                    EventBody::Response {
                        text,
                        iterations,
                        tool_calls,
                    } => format!(
                        "response: {text:?}, {iterations} iterations, tools [{}]",
                        tool_calls.join(", ")
                    ),
                    EventBody::Text { text } => format!("text {text:?}"),
                    EventBody::ToolStart { name } => format!("tool_start {name}"),
                    EventBody::ToolFinish { name } => format!("tool_finish {name}"),
                    EventBody::ToolError { name } => format!("tool_error {name}"),
                    EventBody::Usage {
                        input_tokens,
                        output_tokens,
                    } => format!("usage: {input_tokens} in, {output_tokens} out"),
                    EventBody::Other { .. } => quoted.to_owned(),
                };
                self.note(format!("runtime → event {}: {shown}", event.conversation));
                let c = self.conversations.entry(event.conversation).or_default();
                match event.body {
                    EventBody::ToolResult {
                        content, is_error, ..
                    } => c.results.push(SeenResult {
                        frame: frame.unwrap_or_else(|| "main".to_owned()),
                        content,
                        is_error,
                    }),
                    EventBody::Response {
                        text,
                        iterations,
                        tool_calls,
                    } => c.responses.push(SeenResponse {
                        text,
                        iterations,
                        tool_calls,
                    }),
                    EventBody::Text { text } => c.stream.push(format!("text: {text}")),
                    EventBody::ToolStart { name } => c.stream.push(format!("tool_start: {name}")),
                    EventBody::ToolFinish { name } => c.stream.push(format!("tool_finish: {name}")),
                    EventBody::ToolError { name } => c.stream.push(format!("tool_error: {name}")),
                    EventBody::Usage {
                        input_tokens,
                        output_tokens,
                    } => c.usage = Some((input_tokens, output_tokens)),
                    EventBody::Other { .. } => {}
                }
            }
            FromRuntime::Error(_) => unreachable!("the session makes `error` a protocol error"),
        }
        Ok(())
    }

    /// Stops the runtime: `shutdown`, then its exit within the shutdown timeout (`SIGTERM`, then
    /// `SIGKILL`). With `judge`, a runtime that does not exit cleanly is the failure returned.
    pub(in crate::outside_run) async fn stop(&mut self, judge: bool) -> Option<Failure> {
        let mut proc = self.proc.take()?;
        let line = encode_line(&ToRuntime::Shutdown).expect("shutdown encodes");
        self.session.sent(&ToRuntime::Shutdown);
        let wrote = proc.write(&line).await.is_ok();
        if wrote {
            self.note("→ shutdown".to_owned());
        }
        proc.close_stdin();
        let wait = self.options.timeouts.shutdown;
        let deadline = Instant::now() + wait;
        // Lines that crossed `shutdown` are recorded and judged by nothing but `error`.
        let mut failure = None;
        loop {
            tokio::select! {
                out = proc.out.recv() => match out {
                    Some(Out::Line(raw)) => {
                        self.line_no += 1;
                        let quoted = crate::outside::quote_line(&raw);
                        if let Err(e) = self.session.receive_line(&raw, self.line_no) {
                            if judge && failure.is_none() {
                                failure = Some(self.protocol(e));
                            }
                        }
                        self.note(format!("runtime → {quoted}"));
                    }
                    Some(Out::Eof) | None => break,
                },
                () = tokio::time::sleep_until(deadline) => break,
            }
        }
        let status = proc
            .exit_status(deadline.saturating_duration_since(Instant::now()))
            .await;
        let clean = status.is_some_and(|s| s.success());
        if status.is_none() {
            proc.terminate(Duration::from_secs(1)).await;
        }
        if judge && failure.is_none() && !clean {
            let what = match status {
                None => format!(
                    "it did not exit within {} s of `shutdown` (shutdown timeout, --shutdown-timeout)",
                    wait.as_secs_f64()
                ),
                Some(_) => format!("it exited with {} after `shutdown`", process::describe(status)),
            };
            let kind = if status.is_none() {
                FailureKind::Timeout("shutdown")
            } else {
                FailureKind::UnexpectedExit
            };
            failure = Some(self.fail_process(kind, what));
        }
        failure
    }

    /// `step`, the scripted outcome of the next call of `tool`, with the injected tool fault of
    /// that call, if any (journaled in the transcript and in the outcome); every outcome as
    /// delivered is kept, so that a failing run can be replayed with the faults scripted.
    fn tool_fault(
        &mut self,
        tool: &str,
        mut step: crate::drive::backend::ToolStep,
    ) -> crate::drive::backend::ToolStep {
        let call = self.tool_steps.get(tool).map_or(0, Vec::len) + 1;
        let times_out = self
            .scenario
            .config
            .tools
            .get(tool)
            .is_some_and(|t| t.timeout_ms.is_some());
        if let Some(fault) = self
            .options
            .tool_faults
            .and_then(|f| f.decide(tool, call, times_out))
        {
            match fault {
                super::super::ToolFault::Fail => {
                    step.behavior = ToolBehavior::Fail(std::sync::Arc::from(TOOL_FAILURE_INJECTED));
                    self.note(format!("fault injected: call {call} of tool {tool} fails"));
                }
                super::super::ToolFault::Latency(ms) => {
                    step.after_ms += ms;
                    self.note(format!(
                        "fault injected: call {call} of tool {tool} takes {ms} ms longer"
                    ));
                }
                super::super::ToolFault::Hang => {
                    step.behavior = ToolBehavior::Hang;
                    self.note(format!(
                        "fault injected: call {call} of tool {tool} never answers (its `timeout` must end it)"
                    ));
                }
            }
            self.tool_faults.push((tool.to_owned(), call, fault));
        }
        self.tool_steps
            .entry(tool.to_owned())
            .or_default()
            .push(step.clone());
        step
    }
}

/// The message of a tool failure injected by `explore --runtime`.
pub(crate) const TOOL_FAILURE_INJECTED: &str = "tool failure injected by explore";
