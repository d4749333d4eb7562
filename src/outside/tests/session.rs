//! The session: the sequence errors a runtime's line commits given what agentsim wrote before it.

use super::{example_hello, hello_with_passthrough, ok, seq_err, started};
use crate::outside::codec::{ProtocolErrorKind, ToRuntime};
use crate::outside::session::Session;

use ProtocolErrorKind as K;

#[test]
fn not_ready_is_a_line_before_ready_or_a_second_ready() {
    let mut s = Session::new();
    s.sent_hello(&example_hello());
    s.sent_user(1, "default");
    let e = seq_err(
        &mut s,
        r#"{"type":"send","conversation":"default","text":"hi"}"#,
        1,
    );
    assert_eq!(e.kind, K::NotReady);
    assert!(e.message.contains("`send`"), "{e}");
    assert_eq!(
        seq_err(&mut s, r#"{"type":"idle","seq":1}"#, 2).kind,
        K::NotReady
    );
    assert!(!s.is_ready());
    ok(
        &mut s,
        r#"{"type":"ready","protocol":1,"capabilities":[]}"#,
        3,
    );
    assert!(s.is_ready());
    let e = seq_err(
        &mut s,
        r#"{"type":"ready","protocol":1,"capabilities":[]}"#,
        4,
    );
    assert_eq!(e.kind, K::NotReady);
    assert!(e.message.contains("second"), "{e}");
}

#[test]
fn an_error_line_is_a_runtime_error_before_ready_and_after() {
    let mut s = Session::new();
    s.sent_hello(&example_hello());
    let e = seq_err(
        &mut s,
        r#"{"type":"error","message":"protocol 1 unsupported","line":1}"#,
        1,
    );
    assert_eq!(e.kind, K::RuntimeError);
    assert!(e.message.contains("protocol 1 unsupported"), "{e}");
    assert!(e.message.contains("agentsim's line 1"), "{e}");
    let mut s = started();
    assert_eq!(
        seq_err(&mut s, r#"{"type":"error","message":"boom"}"#, 2).kind,
        K::RuntimeError
    );
}

#[test]
fn unknown_conversation_for_send_tool_call_stack_and_event() {
    for line in [
        r#"{"type":"send","conversation":"telegram_1","text":"hi"}"#,
        r#"{"type":"tool_call","call":"c1","conversation":"telegram_1","agent":"main","name":"web_search","input":{}}"#,
        r#"{"type":"stack","conversation":"telegram_1","frames":[]}"#,
        r#"{"type":"event","conversation":"telegram_1","kind":"note"}"#,
    ] {
        let mut s = started();
        let e = seq_err(&mut s, line, 2);
        assert_eq!(e.kind, K::UnknownConversation, "{line}");
        assert!(e.message.contains("\"telegram_1\""), "{e}");
        assert_eq!(e.text, line);
        s.sent_user(2, "telegram_1");
        ok(&mut s, line, 3);
    }
}

#[test]
fn unknown_agent_and_unknown_tool_in_a_tool_call() {
    let mut s = started();
    let e = seq_err(
        &mut s,
        r#"{"type":"tool_call","call":"c1","conversation":"default","agent":"ghost","name":"web_search","input":{}}"#,
        2,
    );
    assert_eq!(e.kind, K::UnknownAgent);
    assert!(e.message.contains("\"ghost\""), "{e}");
    let e = seq_err(
        &mut s,
        r#"{"type":"tool_call","call":"c1","conversation":"default","agent":"main","name":"rm_rf","input":{}}"#,
        3,
    );
    assert_eq!(e.kind, K::UnknownTool);
    // A built-in is never a tool_call, and a plain skill's frame is no tool.
    for name in ["use_skill", "skill:research"] {
        let line = format!(
            r#"{{"type":"tool_call","call":"c1","conversation":"default","agent":"main","name":"{name}","input":{{}}}}"#
        );
        assert_eq!(seq_err(&mut s, &line, 4).kind, K::UnknownTool, "{name}");
    }
    // A passthrough skill's frame name is a tool.
    ok(
        &mut s,
        r#"{"type":"tool_call","call":"c1","conversation":"default","agent":"main","name":"skill:lookup","input":{"skill":"lookup","message":"x"}}"#,
        5,
    );
}

#[test]
fn a_tool_call_before_any_hello_names_an_unknown_agent() {
    let mut s = Session::new();
    ok(
        &mut s,
        r#"{"type":"ready","protocol":1,"capabilities":[]}"#,
        1,
    );
    s.sent_user(1, "default");
    let e = seq_err(
        &mut s,
        r#"{"type":"tool_call","call":"c1","conversation":"default","agent":"main","name":"web_search","input":{}}"#,
        2,
    );
    assert_eq!(e.kind, K::UnknownAgent);
}

const CALL_C1: &str = r#"{"type":"tool_call","call":"c1","conversation":"default","agent":"research","name":"web_search","input":{}}"#;

#[test]
fn duplicate_call_within_a_run_of_a_process_but_not_after_a_reset_or_a_restart() {
    let mut s = started();
    ok(&mut s, CALL_C1, 2);
    let e = seq_err(&mut s, CALL_C1, 3);
    assert_eq!(e.kind, K::DuplicateCall);
    assert!(e.message.contains("\"c1\""), "{e}");

    // A reset starts a new run, whose ids start afresh.
    let mut s = started();
    ok(&mut s, CALL_C1, 2);
    s.sent(&ToRuntime::Reset);
    s.sent_hello(&example_hello());
    ok(
        &mut s,
        r#"{"type":"ready","protocol":1,"capabilities":[]}"#,
        3,
    );
    s.sent_user(1, "default");
    ok(&mut s, CALL_C1, 4);
    assert_eq!(seq_err(&mut s, CALL_C1, 5).kind, K::DuplicateCall);

    // A restart is a new process, whose ids start afresh.
    let mut s = started();
    ok(&mut s, CALL_C1, 2);
    s.sent_hello(&hello_with_passthrough());
    ok(
        &mut s,
        r#"{"type":"ready","protocol":1,"capabilities":[]}"#,
        1,
    );
    ok(&mut s, CALL_C1, 2);
}

#[test]
fn unknown_seq_is_an_idle_never_sent_or_decreasing() {
    let mut s = started();
    let e = seq_err(&mut s, r#"{"type":"idle","seq":2}"#, 2);
    assert_eq!(e.kind, K::UnknownSeq);
    assert!(e.message.contains("the last `seq` sent is 1"), "{e}");
    assert_eq!(
        seq_err(&mut s, r#"{"type":"idle","seq":0}"#, 3).kind,
        K::UnknownSeq
    );
    s.sent_user(2, "default");
    s.sent_user(3, "default");
    // An idle for an earlier seq is accepted (a message arrived while finishing the one before).
    ok(&mut s, r#"{"type":"idle","seq":2}"#, 4);
    ok(&mut s, r#"{"type":"idle","seq":2}"#, 5);
    let e = seq_err(&mut s, r#"{"type":"idle","seq":1}"#, 6);
    assert_eq!(e.kind, K::UnknownSeq);
    assert!(e.message.contains("never decreases"), "{e}");
    ok(&mut s, r#"{"type":"idle","seq":3}"#, 7);
    assert_eq!(s.last_idle(), Some(3));
}

#[test]
fn a_restart_keeps_the_runs_conversations_and_seqs_and_a_reset_forgets_them() {
    let mut s = started();
    s.sent_user(2, "telegram_1");
    // The process is killed before its idle; the new one restores and resumes.
    let mut hello = hello_with_passthrough();
    hello.restarts = 1;
    hello.awaiting_idle = Some(2);
    s.sent(&ToRuntime::Hello(hello));
    assert_eq!(
        seq_err(&mut s, r#"{"type":"idle","seq":2}"#, 1).kind,
        K::NotReady
    );
    ok(
        &mut s,
        r#"{"type":"ready","protocol":1,"capabilities":["restart"]}"#,
        2,
    );
    ok(
        &mut s,
        r#"{"type":"stack","conversation":"telegram_1","frames":[{"name":"main"}]}"#,
        3,
    );
    ok(&mut s, r#"{"type":"idle","seq":2}"#, 4);

    s.sent(&ToRuntime::Reset);
    s.sent_hello(&example_hello());
    ok(
        &mut s,
        r#"{"type":"ready","protocol":1,"capabilities":["reset"]}"#,
        5,
    );
    let e = seq_err(
        &mut s,
        r#"{"type":"stack","conversation":"telegram_1","frames":[]}"#,
        6,
    );
    assert_eq!(e.kind, K::UnknownConversation);
    assert_eq!(
        seq_err(&mut s, r#"{"type":"idle","seq":1}"#, 7).kind,
        K::UnknownSeq
    );
    s.sent_user(1, "default");
    ok(&mut s, r#"{"type":"idle","seq":1}"#, 8);
}

#[test]
fn after_shutdown_only_an_error_is_judged() {
    let mut s = started();
    s.sent(&ToRuntime::Shutdown);
    ok(
        &mut s,
        r#"{"type":"send","conversation":"nowhere","text":"bye"}"#,
        2,
    );
    ok(&mut s, r#"{"type":"idle","seq":99}"#, 3);
    assert_eq!(
        seq_err(&mut s, r#"{"type":"error","message":"late"}"#, 4).kind,
        K::RuntimeError
    );
}

#[test]
fn receive_line_reports_decoding_errors_and_skips_blank_lines() {
    let mut s = started();
    assert_eq!(s.receive_line(b"  \r\n", 2), Ok(None));
    assert_eq!(seq_err(&mut s, "DEBUG: starting", 3).kind, K::MalformedJson);
}
