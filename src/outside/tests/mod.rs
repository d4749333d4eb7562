//! Tests of the runtime protocol's codec and sequence checks: every error kind with a line that
//! commits it, the spec's example exchange, the limits, and properties over arbitrary bytes.

mod decode;
mod encode;
mod error;
mod example;
mod inferred;
mod properties;
mod session;

use super::codec::{decode_line, FromRuntime, Hello, ProtocolError, ToRuntime};
use super::session::Session;

/// Section 10 of the runtime protocol, as written there (`→` agentsim to the runtime, `←` the
/// runtime to agentsim).
const EXAMPLE: &str = r#"→ {"type":"hello","protocol":1,"run":"a skill asks the user, then completes#0","seed":0,"state_dir":"/tmp/agentsim-run-7/state","restarts":0,"awaiting_idle":null,"time_scale":0.1,"agents":[{"name":"main","kind":"main","frame":"main","system":"You are main.","model":"main","max_iterations":10,"tools":["web_search"],"parallel_tools":false,"stream":false,"passthrough":false,"batch":null,"description":null},{"name":"research","kind":"skill","frame":"skill:research","system":"You are skill:research.","model":"research","max_iterations":25,"tools":["web_search"],"parallel_tools":false,"stream":false,"passthrough":false,"batch":null,"description":null}],"tools":[{"name":"web_search","description":"","input_schema":{"type":"object"},"timeout_ms":null}],"settings":{"cancel_words":["cancel","stop","abort","nevermind","never mind","quit"],"query_user":"interactive","max_depth":256}}
← {"type":"ready","protocol":1,"capabilities":["stack","tool-results","ask-user","cancel-words"],"name":"reference-python 1"}
→ {"type":"user","seq":1,"conversation":"default","text":"research Python async APIs"}
← {"type":"send","conversation":"default","text":"Which Python version?"}
← {"type":"stack","conversation":"default","frames":[{"name":"main","iterations":1},{"name":"skill:research","iterations":1}]}
← {"type":"idle","seq":1}
→ {"type":"user","seq":2,"conversation":"default","text":"3.13"}
← {"type":"event","conversation":"default","kind":"tool_result","frame":"skill:research","tool_use_id":"toolu_b","content":"3.13","is_error":false}
← {"type":"tool_call","call":"toolu_c","conversation":"default","agent":"research","name":"web_search","input":{"q":"3.13 async"}}
→ {"type":"tool_result","call":"toolu_c","content":"3 results","is_error":false}
← {"type":"event","conversation":"default","kind":"tool_result","frame":"skill:research","tool_use_id":"toolu_c","content":"3 results","is_error":false}
← {"type":"event","conversation":"default","kind":"tool_result","frame":"skill:research","tool_use_id":"toolu_d","content":"3 APIs","is_error":false}
← {"type":"event","conversation":"default","kind":"tool_result","frame":"main","tool_use_id":"toolu_a","content":"3 APIs","is_error":false}
← {"type":"send","conversation":"default","text":"Here is what research found: 3 APIs."}
← {"type":"stack","conversation":"default","frames":[],"ended":[{"name":"skill:research","iterations":3,"reason":"completed"},{"name":"main","iterations":2,"reason":"answered"}]}
← {"type":"idle","seq":2}
→ {"type":"shutdown"}"#;

/// The example's `hello`.
fn example_hello() -> Hello {
    let line = EXAMPLE.lines().next().unwrap().strip_prefix("→ ").unwrap();
    match serde_json::from_str(line).unwrap() {
        ToRuntime::Hello(hello) => hello,
        other => panic!("the example starts with {other:?}"),
    }
}

/// The example's hello with a passthrough skill `lookup` added.
fn hello_with_passthrough() -> Hello {
    let mut hello = example_hello();
    let mut lookup = hello.agents[1].clone();
    lookup.name = "lookup".into();
    lookup.frame = "skill:lookup".into();
    lookup.passthrough = true;
    hello.agents.push(lookup);
    hello
}

/// A session after `hello`, `ready` (line 1) and a `user` seq 1 for `default`.
fn started() -> Session {
    let mut s = Session::new();
    s.sent_hello(&hello_with_passthrough());
    ok(
        &mut s,
        r#"{"type":"ready","protocol":1,"capabilities":[]}"#,
        1,
    );
    s.sent_user(1, "default");
    s
}

fn ok(s: &mut Session, line: &str, n: u64) -> FromRuntime {
    match s.receive_line(line.as_bytes(), n) {
        Ok(Some(m)) => m,
        other => panic!("line {n} `{line}`: {other:?}"),
    }
}

fn seq_err(s: &mut Session, line: &str, n: u64) -> ProtocolError {
    match s.receive_line(line.as_bytes(), n) {
        Err(e) => {
            assert_eq!(e.line, n);
            e
        }
        other => panic!("line {n} `{line}` was accepted: {other:?}"),
    }
}

fn decode_err(line: &[u8]) -> ProtocolError {
    match decode_line(line, 7) {
        Err(e) => {
            assert_eq!(e.line, 7, "{e}");
            e
        }
        Ok(m) => panic!("{:?} decoded as {m:?}", String::from_utf8_lossy(line)),
    }
}

fn decoded(line: &str) -> FromRuntime {
    match decode_line(line.as_bytes(), 1) {
        Ok(Some(m)) => m,
        other => panic!("`{line}`: {other:?}"),
    }
}
