//! Persistence and restart: restoring at quiescent points continues exactly as the uninterrupted
//! run; a torn last line of `context.jsonl` is recovered; anything else corrupt is an error, never
//! a panic; the file store writes what the simulator keeps in memory.

use std::sync::Arc;

use agentsim::agents::tree::Status;
use agentsim::explore::generate::{generate, GenConfig};
use agentsim::persist::RestoreError;
use agentsim::runtime::Runtime;
use agentsim::scenario::play::{play, Hooks, Stop};
use agentsim::scenario::{self, RunOptions, Scenario, Step, StepKind};
use agentsim::sim::{Entry, Note, Record};
use agentsim::store::FileStore;
use proptest::prelude::*;

fn cases() -> u32 {
    std::env::var("AGENTSIM_PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64)
}

/// The records without restart notes, as JSON (frame ids, call ids and all).
fn comparable(records: &[Record]) -> String {
    let kept: Vec<&Record> = records
        .iter()
        .filter(|r| !matches!(r.entry, Entry::Sim(Note::Restart { .. })))
        .collect();
    serde_json::to_string(&kept).unwrap()
}

/// The scenario with a restart after every step that runs until idle (a quiescent point: a
/// user message, a trigger or an async answer that waits).
fn with_restarts(s: &Scenario) -> Scenario {
    let mut r = s.clone();
    r.steps = s
        .steps
        .iter()
        .flat_map(|step| {
            let quiescent = matches!(
                step.kind,
                StepKind::User { wait: true, .. }
                    | StepKind::Trigger { wait: true, .. }
                    | StepKind::AsyncAnswer { wait: true, .. }
            );
            let restart = Step {
                line: 0,
                column: 0,
                kind: StepKind::Restart,
            };
            std::iter::once(step.clone()).chain(quiescent.then_some(restart))
        })
        .collect();
    r.config.persist = true;
    r
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), failure_persistence: None, ..ProptestConfig::default() })]

    /// Restarting a generated run at every quiescent point gives the same transcript as the
    /// uninterrupted run (restart-equivalence).
    #[test]
    fn restarting_at_every_quiescent_point_continues_exactly(seed in any::<u64>()) {
        let mut s = generate(seed, &GenConfig::default());
        s.config.persist = true;
        let plain = scenario::run(&s, RunOptions::default());
        let restarted = scenario::run(&with_restarts(&s), RunOptions::default());
        prop_assert_eq!(comparable(&plain.records), comparable(&restarted.records), "seed {}", seed);
        prop_assert_eq!(plain.failure.is_some(), restarted.failure.is_some(), "seed {}", seed);
    }

    /// Restarting a generated run before every simulator step, in the middle of turns, keeps
    /// every invariant: each restart restores the sessions exactly as they were at the crash (the
    /// simulator checks it, as restart-equivalence), calls in flight are issued again, and the
    /// continued run ends as cleanly as the uninterrupted one.
    #[test]
    fn restarting_before_every_step_keeps_every_invariant(seed in any::<u64>()) {
        let mut s = generate(seed, &GenConfig::default());
        s.config.persist = true;
        let mut sim = s.sim(seed, true, false);
        let mut hooks = RestartEveryStep { restarts: 0 };
        let stopped = play(&mut sim, &s.steps, &mut hooks).err();
        let violation = stopped.as_ref().and_then(|st| match &st.stop {
            Stop::Run(e) => e.violation().cloned(),
            Stop::Expectation(_) | Stop::Cancelled => None,
        });
        prop_assert!(violation.is_none(), "seed {}: {:?}", seed, violation);
        let plain = scenario::run(&s, RunOptions::default());
        if plain.failure.is_none() && stopped.is_none() {
            // Both ran to the end: every conversation ends with the same stack.
            let describe = |rt: &Runtime| -> Vec<String> {
                rt.stacks().views().map(|v| format!("{}: {}", v.key(), v.describe())).collect()
            };
            let mut again = s.sim(seed, true, false);
            play(&mut again, &s.steps, &mut agentsim::scenario::play::Plain).unwrap();
            prop_assert_eq!(describe(sim.runtime()), describe(again.runtime()), "seed {}", seed);
        }
    }
}

/// Hooks that restart the runtime before every simulator step.
struct RestartEveryStep {
    restarts: u64,
}

impl Hooks for RestartEveryStep {
    fn restart_before_step(&mut self, _sim: &mut agentsim::sim::Sim) -> bool {
        self.restarts += 1;
        true
    }
}

#[test]
fn a_restart_in_the_middle_of_a_turn_restores_the_frames_and_issues_the_call_again() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("scenarios/spec/persist-restart-in-the-middle-of-a-turn-recovers-the-conversation-and-issues-the-call-again.yaml");
    let s = scenario::load(&path).unwrap();
    let mut sim = s.sim(0, true, true);
    sim.user("default", "research Python async APIs").unwrap();
    sim.advance(1_000).unwrap();
    let before: Vec<_> = sim
        .runtime()
        .stack("default")
        .unwrap()
        .frames()
        .map(|f| (f.frame_id(), f.session().clone(), f.iteration()))
        .collect();
    assert_eq!(
        before.len(),
        2,
        "the skill holds the conversation at the crash"
    );
    sim.restart().unwrap();
    let after: Vec<_> = sim
        .runtime()
        .stack("default")
        .unwrap()
        .frames()
        .map(|f| (f.frame_id(), f.session().clone(), f.iteration()))
        .collect();
    assert_eq!(before, after, "nothing recorded is lost");
    let top = sim.runtime().stack("default").unwrap().top().unwrap();
    assert!(
        matches!(
            top.phase(),
            agentsim::agents::frame::Phase::AwaitTool { .. }
        ),
        "the tool run is in flight again: {:?}",
        top.phase()
    );
    sim.run_until_idle().unwrap();
    assert_eq!(
        sim.now(),
        3_000,
        "the tool ran again for its 2 s, from the restart"
    );
    assert!(sim.runtime().stack("default").unwrap().is_empty());
}

/// A simulation of the stack diagram left at depth 2, with its persisted bytes.
fn persisted_at_depth_two() -> (Scenario, agentsim::sim::Sim) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("scenarios/examples/stack-diagram.yaml");
    let mut s = scenario::load(&path).unwrap();
    s.config.persist = true;
    let mut sim = s.sim(0, true, true);
    sim.user("default", "research Python async APIs").unwrap();
    sim.run_until_idle().unwrap();
    assert_eq!(sim.runtime().stack("default").unwrap().depth(), 2);
    (s, sim)
}

fn restore(s: &Scenario, state: &str, context: &str) -> Result<Runtime, RestoreError> {
    Runtime::restore(
        Arc::new(s.catalog.clone()),
        s.config.clone(),
        state,
        context,
        0,
    )
}

#[test]
fn a_restored_runtime_has_the_same_state_and_sessions() {
    let (s, sim) = persisted_at_depth_two();
    let (state, context) = sim.persisted();
    let rt = restore(&s, state.unwrap(), context).unwrap();
    assert_eq!(rt.state(), sim.runtime().state());
    let a = sim.runtime().stack("default").unwrap();
    let b = rt.stack("default").unwrap();
    assert_eq!(a.depth(), b.depth());
    for (x, y) in a.frames().zip(b.frames()) {
        assert_eq!(x.session(), y.session(), "{}", x.agent_name());
        assert_eq!(x.frame_id(), y.frame_id());
        assert_eq!(x.iteration(), y.iteration());
    }
}

#[test]
fn a_torn_last_line_is_ignored_and_nothing_complete_is_lost() {
    let (s, sim) = persisted_at_depth_two();
    let (state, context) = sim.persisted();
    let torn = format!("{context}{{\"type\":\"user\",\"agent_session_id\":\"00000000-");
    let rt = restore(&s, state.unwrap(), &torn).unwrap();
    assert_eq!(rt.state(), sim.runtime().state());
    let replayed = agentsim::persist::replay_context(&torn, false).unwrap();
    assert!(replayed.torn_bytes > 0);
    let complete = agentsim::persist::replay_context(context, false).unwrap();
    assert_eq!(replayed.sessions, complete.sessions);
}

#[test]
fn corrupt_persisted_state_is_an_error_naming_what_is_wrong() {
    let (s, sim) = persisted_at_depth_two();
    let (state, context) = sim.persisted();
    let state = state.unwrap();
    // A corrupt line in the middle of the journal.
    let mut lines: Vec<&str> = context.lines().collect();
    lines.insert(1, "{not json");
    let bad = lines.join("\n") + "\n";
    match restore(&s, state, &bad) {
        Err(RestoreError::Context { line: 2, .. }) => {}
        other => panic!("expected an error at line 2, got {:?}", other.map(|_| ())),
    }
    // A corrupt state.json, and one of a future version.
    assert!(matches!(
        restore(&s, "{", context),
        Err(RestoreError::State(_))
    ));
    let future = state.replacen("\"version\":1", "\"version\":99", 1);
    assert!(
        matches!(restore(&s, &future, context), Err(RestoreError::State(m)) if m.contains("version 99"))
    );
    // A frame whose agent is no longer declared.
    let mut other = s.clone();
    other.catalog.skills.clear();
    assert!(matches!(
        restore(&other, state, context),
        Err(RestoreError::MissingAgent(name)) if name == "research"
    ));
    // A frame whose session has no journal entries.
    let first_line_only = context.lines().next().unwrap().to_owned() + "\n";
    assert!(matches!(
        restore(&s, state, &first_line_only),
        Err(RestoreError::MissingSession(_))
    ));
}

#[test]
fn the_file_store_writes_what_the_simulator_keeps_in_memory() {
    let (s, sim) = persisted_at_depth_two();
    let (state, context) = sim.persisted();
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("file-store");
    let _ = std::fs::remove_dir_all(&dir);
    let store = FileStore::new(&dir).unwrap();
    // The journal arrives line by line; the state is replaced whole.
    for line in context.split_inclusive('\n') {
        store.append_context(line).unwrap();
    }
    store.write_state("{\"stale\": true}").unwrap();
    store.write_state(state.unwrap()).unwrap();
    assert!(!dir.join("state.json.tmp").exists());
    let (loaded_state, loaded_context) = store.load().unwrap();
    assert_eq!(loaded_state.as_deref(), state);
    assert_eq!(loaded_context, context);
    let rt = restore(&s, &loaded_state.unwrap(), &loaded_context).unwrap();
    assert_eq!(rt.state(), sim.runtime().state());
}

#[test]
fn restarting_without_persistence_is_a_clear_error() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("scenarios/examples/stack-diagram.yaml");
    let s = scenario::load(&path).unwrap();
    let mut sim = s.sim(0, true, true);
    let err = sim.restart().unwrap_err();
    assert!(err.to_string().contains("persistence is off"), "{err}");
}

#[test]
fn forks_persist_and_a_broken_fork_record_is_an_error_naming_what_is_wrong() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("scenarios/spec/fork-restart-while-forks-run-restores-them-running.yaml");
    let s = scenario::load(&path).unwrap();
    let mut sim = s.sim(0, true, true);
    sim.user("default", "look it up").unwrap();
    sim.advance(1000).unwrap();
    assert_eq!(sim.runtime().stacks().detached(), 2);
    let (state, context) = sim.persisted();
    let (state, context) = (state.unwrap().to_owned(), context.to_owned());
    // Both forks restore, running, with their caller waiting.
    let rt = restore(&s, &state, &context).unwrap();
    assert_eq!(rt.stacks().detached(), 2);
    assert!(!rt.is_idle());
    // A fork whose journal line claims more of its caller than the caller had.
    let bad: String = context
        .lines()
        .map(|l| {
            if l.contains("\"fork_session\"") {
                l.replacen("\"messages\":1", "\"messages\":9", 1)
            } else {
                l.to_owned()
            }
        })
        .map(|l| l + "\n")
        .collect();
    assert_ne!(bad, context, "the journal has a fork_session line");
    match restore(&s, &state, &bad) {
        Err(RestoreError::Context { message, .. }) => {
            assert!(message.contains("starts with 9 messages"), "{message}")
        }
        other => panic!("expected a journal error, got {:?}", other.map(|_| ())),
    }
    // A fork whose caller is not in the state.
    let json: serde_json::Value = serde_json::from_str(&state).unwrap();
    let caller = json["conversations"][0]["active_stack"][0]["frame_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let orphan = state.replace(
        &format!("\"caller\":\"{caller}\""),
        "\"caller\":\"00000000-0000-0000-0000-000000000000\"",
    );
    assert_ne!(orphan, state);
    match restore(&s, &orphan, &context) {
        Err(RestoreError::State(m)) => assert!(m.contains("which is not running"), "{m}"),
        other => panic!("expected a state error, got {:?}", other.map(|_| ())),
    }
    // A fork that would wait for the user's next message, which a fork never does.
    let mut json: serde_json::Value = serde_json::from_str(&state).unwrap();
    json["conversations"][0]["forks"][0]["waiting"] = serde_json::json!({ "for": "user" });
    match restore(&s, &json.to_string(), &context) {
        Err(RestoreError::State(m)) => assert!(m.contains("which a fork never does"), "{m}"),
        other => panic!("expected a state error, got {:?}", other.map(|_| ())),
    }
    // Main parked on a wait whose fork the state lost: it would wait forever.
    let mut json: serde_json::Value = serde_json::from_str(&state).unwrap();
    json["conversations"][0]["forks"] = serde_json::json!([]);
    match restore(&s, &json.to_string(), &context) {
        Err(RestoreError::State(m)) => assert!(m.contains("which is not running"), "{m}"),
        other => panic!("expected a state error, got {:?}", other.map(|_| ())),
    }
    // A place far beyond any arena.
    let mut json: serde_json::Value = serde_json::from_str(&state).unwrap();
    json["conversations"][0]["forks"][0]["slot"] = serde_json::json!(4_000_000_000u32);
    match restore(&s, &json.to_string(), &context) {
        Err(RestoreError::State(m)) => assert!(m.contains("beyond the limit"), "{m}"),
        other => panic!("expected a state error, got {:?}", other.map(|_| ())),
    }
}

/// A simulation where two forks wait for their questions' answers.
fn two_forks_asking() -> (Scenario, agentsim::sim::Sim) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("scenarios/spec/questions-a-restart-keeps-each-open-question-and-its-id.yaml");
    let s = scenario::load(&path).unwrap();
    let mut sim = s.sim(0, true, true);
    sim.user("default", "plan meals").unwrap();
    sim.run_until_idle().unwrap();
    (s, sim)
}

#[test]
fn a_restore_keeps_every_open_question_with_its_id() {
    let (s, sim) = two_forks_asking();
    let before = sim.runtime().questions();
    assert_eq!(before.len(), 2);
    let (state, context) = sim.persisted();
    let rt = restore(&s, state.unwrap(), context).unwrap();
    assert_eq!(rt.questions(), before);
}

/// A state written before questions had ids: each open question gets an id derived from its
/// `ask_user` (no id is drawn, which would shift every later one), and the derivation never
/// changes, since a client may hold the id.
#[test]
fn a_state_without_question_ids_gives_each_question_the_id_of_its_tool_use() {
    fn strip(value: &mut serde_json::Value) -> usize {
        match value {
            serde_json::Value::Object(map) => {
                let here = usize::from(
                    map.contains_key("tool_use_id") && map.remove("question").is_some(),
                );
                here + map.values_mut().map(strip).sum::<usize>()
            }
            serde_json::Value::Array(items) => items.iter_mut().map(strip).sum(),
            _ => 0,
        }
    }
    let (s, sim) = two_forks_asking();
    let before = sim.runtime().questions();
    let (state, context) = sim.persisted();
    let mut legacy: serde_json::Value = serde_json::from_str(state.unwrap()).unwrap();
    assert_eq!(strip(&mut legacy), 2, "both questions' ids are taken out");
    let rt = restore(&s, &legacy.to_string(), context).unwrap();
    let after = rt.questions();
    let seen: Vec<(String, String)> = after
        .iter()
        .map(|q| {
            (
                q.tool_use_id.as_deref().unwrap().to_owned(),
                q.id.to_string(),
            )
        })
        .collect();
    assert_eq!(after.len(), 2);
    for (b, a) in before.iter().zip(&after) {
        assert_eq!(
            (&b.tool_use_id, &b.text, b.agent_id),
            (&a.tool_use_id, &a.text, a.agent_id)
        );
        assert_ne!(a.id, b.id, "the drawn id was not in the state");
    }
    // FNV-1a (64 bits) of the tool use's id from two offset bases, high and low halves.
    let pinned = [
        ("toolu_05", "4cde2807-b98f-acbc-63ab-859a30391621"),
        ("toolu_06", "4cde2b07-b98f-b1d5-63ab-829a30391108"),
    ];
    let pinned: Vec<(String, String)> = pinned
        .iter()
        .map(|(t, id)| (t.to_string(), id.to_string()))
        .collect();
    assert_eq!(seen, pinned);
}

/// A crash after an answer was journaled but before the state was written again: the restored
/// runtime sees the `ask_user` answered in the journal and resumes the asker itself, which runs
/// again (it no longer awaits the user) and calls its model.
#[test]
fn an_answer_journaled_but_not_yet_in_the_state_resumes_its_asker_on_restore() {
    let (s, mut sim) = two_forks_asking();
    let questions = sim.runtime().questions();
    let asked = &questions[1];
    assert_eq!(
        sim.runtime().agent(asked.agent_id).unwrap().status,
        Status::AwaitingUser
    );
    let state = sim.persisted().0.unwrap().to_owned();
    // The answer goes in; the journal now holds its tool_result.
    sim.answer(asked.id, "pasta").unwrap();
    let (_, context) = sim.persisted();
    let rt = restore(&s, &state, context).unwrap();
    let node = rt.agent(asked.agent_id).unwrap();
    assert_eq!(
        node.status,
        Status::Running,
        "the answered asker runs again"
    );
    assert!(
        rt.questions().iter().all(|q| q.id != asked.id),
        "the answered question is no longer open"
    );
    assert!(
        rt.effects()
            .any(|e| matches!(e, agentsim::protocol::Effect::CallLlm { .. })),
        "the asker calls its model"
    );
}

/// The same crash window when the asker's reply has a slow tool after its `ask_user`: restored,
/// the asker runs that tool, and while it does it is running, not still awaiting the user.
#[test]
fn an_asker_resumed_on_restore_runs_its_next_tool_as_a_running_agent() {
    let yaml = r#"
name: ask, then a slow tool
settings: { persist: true }
agents:
  main: { fork: true }
llm:
  main:
    - tool_use: [{ name: fork, input: { prompt: ask } }, { name: wait, input: { handle: 1 } }]
    - text: done
  main#1:
    - tool_use: [{ name: ask_user, input: { question: Which? } }, { name: slow, input: {} }]
    - text: answered
tools:
  slow: { result: slow result, after: 5s }
steps: []
"#;
    let s = scenario::parse(yaml, std::path::Path::new("inline.yaml")).unwrap();
    let mut sim = s.sim(0, true, true);
    sim.user("default", "go").unwrap();
    sim.run_until_idle().unwrap();
    let asked = sim.runtime().questions().remove(0);
    let state = sim.persisted().0.unwrap().to_owned();
    sim.answer(asked.id, "this one").unwrap();
    let (_, context) = sim.persisted();
    let rt = restore(&s, &state, context).unwrap();
    assert!(
        rt.effects()
            .any(|e| matches!(e, agentsim::protocol::Effect::RunTool { .. })),
        "the asker runs its slow tool"
    );
    assert_eq!(rt.agent(asked.agent_id).unwrap().status, Status::Running);
}

/// A main frame whose conversation has nothing in the journal yet is restored with an empty
/// session, while any other frame without its session in the journal is an error naming it.
#[test]
fn only_a_main_frame_may_restore_without_its_session_in_the_journal() {
    let yaml = r#"
name: a model call in flight
settings: { persist: true }
llm:
  main:
    - { text: done, after: 5s }
steps: []
"#;
    let s = scenario::parse(yaml, std::path::Path::new("inline.yaml")).unwrap();
    let mut sim = s.sim(0, true, true);
    sim.user("default", "go").unwrap();
    let (state, context) = sim.persisted();
    let state = state.unwrap();
    let json: serde_json::Value = serde_json::from_str(state).unwrap();
    let main = json["conversations"][0]["main_session_id"]
        .as_str()
        .unwrap();
    let without_main: String = context
        .lines()
        .filter(|line| !line.contains(main))
        .map(|line| format!("{line}\n"))
        .collect();
    assert_ne!(
        without_main.len(),
        context.len(),
        "the journal held main's message"
    );
    let rt = restore(&s, state, &without_main).unwrap();
    let frame = rt.stack("default").unwrap().frames().next().unwrap();
    assert!(frame.session().messages.is_empty());

    // The same journal loss for a child is an error naming its session.
    let (s, sim) = persisted_at_depth_two();
    let (state, context) = sim.persisted();
    let child = sim
        .runtime()
        .stack("default")
        .unwrap()
        .frames()
        .nth(1)
        .unwrap();
    let id = child.session().session_id.clone();
    let without_child: String = context
        .lines()
        .filter(|line| !line.contains(&*id))
        .map(|line| format!("{line}\n"))
        .collect();
    match restore(&s, state.unwrap(), &without_child) {
        Err(RestoreError::MissingSession(missing)) => assert_eq!(missing.to_string(), *id),
        other => panic!("expected a missing session, got {:?}", other.map(|_| ())),
    }
}
