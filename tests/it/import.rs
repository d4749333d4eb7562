//! `agentsim import`: a mock-llm journal of requests made over loopback (reqwest) imported into a
//! scenario, served back by mock-llm to the same requests, which get the same replies and a
//! passing report; provider bodies imported; bad input as located errors or listed skips.
#![cfg(feature = "mock-server")]

use std::path::{Path, PathBuf};

use agentsim::import::{self, ImportError};
use agentsim::mock_llm::server::{self, Options, Report};
use agentsim::model::transcript::{Block, Message, Role};
use agentsim::scenario;
use agentsim::wire::encode::{self, Outgoing, ToolSpec};
use agentsim::wire::{self, Provider};
use serde_json::{json, Value};

pub(super) const ORIGINAL: &str = r#"
name: round trip
agents:
  main: { system: "You are a weather assistant.", match: { model: claude-x, system_contains: "weather assistant" } }
  forecaster: { kind: agent, match: { system_contains: "You forecast" } }
  planner: { kind: agent, match: { model: planner-model } }
  writer: { kind: agent }
  streamer: { kind: agent, match: { first_user_contains: "stream please" } }
  chatty: { kind: agent, match: { first_user_contains: "chat stream" } }
  responder: { kind: agent, match: { first_user_contains: "responses stream" } }
  triage: { kind: agent, history: continuation, match: { system_contains: "triage agent" } }
  rome: { kind: agent, history: continuation, match: { system_contains: "Rome forecaster" } }
llm:
  main:
    - text: Let me check.
      tool_use: { name: get_weather, input: { location: Paris } }
    - tool_use: { name: ask_forecaster, input: { question: "Rain tomorrow?" } }
    - It is 18 C in Paris, rain tomorrow.
  forecaster:
    - error: { kind: rate_limit, times: 2, retry_after: 5ms }
    - Rain is likely tomorrow.
  planner:
    - tool_use: [{ name: search, input: { q: a } }, { name: search, input: { q: b } }]
    - error: overloaded
    - Plan ready.
  writer:
    - Draft written.
  streamer:
    - Streamed hello.
  chatty:
    - text: Chatty hello.
      tool_use: { name: noted, input: { n: 1 } }
  responder:
    - text: Responder hello.
      tool_use: { name: noted, input: { n: 2 } }
  triage:
    - tool_use: { name: transfer_to_rome, input: {} }
  rome:
    - tool_use: { name: get_forecast, input: { city: Rome } }
    - Sunny in Rome.
"#;

/// One conversation the test's client holds.
struct Convo {
    provider: Provider,
    model: &'static str,
    system: &'static str,
    first: &'static str,
    stream: bool,
    tools: &'static [&'static str],
}

const CONVOS: &[Convo] = &[
    Convo {
        provider: Provider::Anthropic,
        model: "claude-x",
        system: "You are a weather assistant.",
        first: "Weather in Paris?",
        stream: false,
        tools: &["get_weather", "ask_forecaster"],
    },
    Convo {
        provider: Provider::Anthropic,
        model: "claude-x",
        system: "You forecast the weather.",
        first: "Rain tomorrow?",
        stream: false,
        tools: &[],
    },
    Convo {
        provider: Provider::OpenAiChat,
        model: "planner-model",
        system: "You are a weather assistant.",
        first: "Plan a trip",
        stream: false,
        tools: &["search"],
    },
    Convo {
        provider: Provider::OpenAiResponses,
        model: "writer",
        system: "You write.",
        first: "Write a draft",
        stream: false,
        tools: &[],
    },
    Convo {
        provider: Provider::Anthropic,
        model: "claude-x",
        system: "",
        first: "stream please, say hello",
        stream: true,
        tools: &[],
    },
    Convo {
        provider: Provider::OpenAiChat,
        model: "gpt-x",
        system: "You are the triage agent.",
        first: "Weather in Rome?",
        stream: false,
        tools: &["transfer_to_rome"],
    },
    Convo {
        provider: Provider::OpenAiChat,
        model: "gpt-x",
        system: "",
        first: "chat stream, say hello",
        stream: true,
        tools: &["noted"],
    },
    Convo {
        provider: Provider::OpenAiResponses,
        model: "gpt-x",
        system: "",
        first: "responses stream, say hello",
        stream: true,
        tools: &["noted"],
    },
];

fn path_of(p: Provider) -> &'static str {
    match p {
        Provider::Anthropic => "/v1/messages",
        Provider::OpenAiChat => "/v1/chat/completions",
        Provider::OpenAiResponses => "/v1/responses",
    }
}

/// Runs every conversation against the server at `addr` as a runtime would (tool results sent
/// back, errors retried, a `transfer_to_rome` handing the history to the Rome forecaster): the
/// requests sent and the (status, body) of each answer, in order.
pub(super) async fn drive(
    addr: std::net::SocketAddr,
) -> (Vec<(Provider, Value)>, Vec<(u16, String)>) {
    let client = reqwest::Client::new();
    let schema = json!({"type": "object"});
    let mut sent = Vec::new();
    let mut answers = Vec::new();
    for c in CONVOS {
        let mut system = c.system;
        let mut messages = vec![Message {
            role: Role::User,
            content: std::iter::once(Block::text(c.first)).collect(),
        }];
        let tools: Vec<ToolSpec> = c
            .tools
            .iter()
            .map(|name| ToolSpec {
                name,
                description: "a tool",
                schema: &schema,
            })
            .collect();
        for _attempt in 0..12 {
            let body = encode::request(
                c.provider,
                &Outgoing {
                    model: c.model,
                    system,
                    messages: &messages,
                    tools: &tools,
                    max_tokens: 100,
                    stream: c.stream,
                },
            );
            // Keys a recorder must forward and never write.
            let response = client
                .post(format!("http://{addr}{}", path_of(c.provider)))
                .header("authorization", "Bearer sk-secret-bearer")
                .header("x-api-key", "sk-secret-key")
                .json(&body)
                .send()
                .await
                .expect("the server answers");
            let status = response.status().as_u16();
            let text = response.text().await.expect("a body");
            sent.push((c.provider, body));
            answers.push((status, text.clone()));
            if status != 200 {
                assert!(status == 429 || status >= 500, "{status}: {text}");
                continue;
            }
            if c.stream {
                break;
            }
            let reply: Value = serde_json::from_str(&text).expect("JSON");
            let (blocks, _) = wire::reply::decode(c.provider, &reply).expect("a reply");
            let uses: Vec<(String, String)> = blocks
                .iter()
                .filter_map(|b| match b {
                    Block::ToolUse { id, name, .. } => Some((id.to_string(), name.to_string())),
                    _ => None,
                })
                .collect();
            messages.push(Message {
                role: Role::Assistant,
                content: blocks.into_iter().collect(),
            });
            if uses.is_empty() {
                break;
            }
            let results: Vec<Block> = uses
                .iter()
                .map(|(id, name)| Block::ToolResult {
                    tool_use_id: id.as_str().into(),
                    content: format!("result of {name}").into(),
                    is_error: false,
                })
                .collect();
            messages.push(Message {
                role: Role::User,
                content: results.into_iter().collect(),
            });
            if uses.iter().any(|(_, n)| n == "transfer_to_rome") {
                system = "You are the Rome forecaster.";
            }
        }
    }
    (sent, answers)
}

pub(super) fn temp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("agentsim-import-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// Serves `yaml` with a journal at `journal`, drives the conversations, stops: the answers and
/// the report.
pub(super) async fn serve_and_drive(yaml: &str, journal: &Path) -> (Vec<(u16, String)>, Report) {
    let scenario = scenario::parse(yaml, Path::new("served.yaml"))
        .unwrap_or_else(|e| panic!("the scenario loads: {e}\n{yaml}"));
    let options = Options {
        journal: Some(journal.to_owned()),
        ..Options::default()
    };
    let running = server::start(&scenario, options).await.expect("starts");
    let (_, answers) = drive(running.addr).await;
    running.stop();
    let report = running.finish(std::future::pending()).await.expect("stops");
    (answers, report)
}

#[tokio::test]
async fn a_journal_imported_and_served_back_gives_the_same_replies_and_passes() {
    let first = temp("first.jsonl");
    let (answers, report) = serve_and_drive(ORIGINAL, &first).await;
    assert!(report.passed, "{report:?}");
    assert_eq!(answers.len(), 16, "{answers:#?}");
    let bytes = std::fs::read(&first).unwrap();
    let imported = import::import(&bytes, &first, "imported").expect("imports");
    assert!(imported.skipped.is_empty(), "{:?}", imported.skipped);
    let yaml = &imported.yaml;
    // The smallest routes: none for the agents whose system prompt is theirs alone, one
    // condition for the others; a system prompt sent by two agents written once; the handoff
    // linked; the ids the server generates again not written; the retried errors merged.
    for expected in [
        "  main:\n    system: &system_1 You are a weather assistant.\n    match: { tools: [ask_forecaster, get_weather] }\n",
        "  planner:\n    kind: agent\n    system: *system_1\n    match: { model: planner-model }\n",
        "  writer:\n    kind: agent\n    system: You write.\n  ",
        "  forecaster:\n    kind: agent\n    system: You forecast the weather.\n  ",
        "  streamer:\n    kind: agent\n    match: { first_user_contains: please }\n",
        "  chatty:\n    kind: agent\n    match: { first_user_contains: chat }\n",
        "  rome:\n    kind: agent\n    system: You are the Rome forecaster.\n    history: continuation\n",
        "error: { kind: rate_limit, times: 2, retry_after: 5 }",
        "- error: overloaded",
        "# get_weather as offered (line 1): {\"description\":\"a tool\",\"schema\":{\"type\":\"object\"}}",
        "search: { result: result of search }",
    ] {
        assert!(yaml.contains(expected), "{expected:?} not in\n{yaml}");
    }
    assert!(!yaml.contains("id:"), "{yaml}");
    let second = temp("second.jsonl");
    let (again, report) = serve_and_drive(yaml, &second).await;
    assert!(report.passed, "{report:?}\n{yaml}");
    assert_eq!(again, answers, "{yaml}");
}

/// The journal of the conversations served from [`ORIGINAL`].
async fn journal(name: &str) -> (PathBuf, Vec<u8>) {
    let path = temp(name);
    let (_, report) = serve_and_drive(ORIGINAL, &path).await;
    assert!(report.passed, "{report:?}");
    let bytes = std::fs::read(&path).unwrap();
    (path, bytes)
}

fn lines(bytes: &[u8]) -> Vec<String> {
    String::from_utf8(bytes.to_vec())
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

fn error_of(bytes: &[u8]) -> ImportError {
    match import::import(bytes, Path::new("j.jsonl"), "x") {
        Ok(i) => panic!("imported, but should not:\n{}", i.yaml),
        Err(e) => e,
    }
}

#[tokio::test]
async fn bad_journal_lines_are_errors_at_their_line_or_listed_skips() {
    let (_, bytes) = journal("bad.jsonl").await;
    let good = lines(&bytes);
    assert_eq!(good.len(), 16);
    // A journal cut in the middle of its last line.
    let cut = &bytes[..bytes.len() - 30];
    let e = error_of(cut);
    assert_eq!(
        (e.line, e.to_string().contains("truncated")),
        (16, true),
        "{e}"
    );
    // Invalid UTF-8 in line 3.
    let mut broken = good.clone();
    broken[2] = broken[2].replacen("Paris", "Par\u{0}is", 1);
    let mut raw = broken.join("\n").into_bytes();
    let at = raw.iter().position(|&b| b == 0).unwrap();
    raw[at] = 0xff;
    let e = error_of(&raw);
    assert_eq!(e.line, 3, "{e}");
    assert!(e.message.contains("not UTF-8"), "{e}");
    // An exchange journaled twice.
    let mut twice = good.clone();
    twice.push(good[0].clone());
    let e = error_of(twice.join("\n").as_bytes());
    assert_eq!(e.line, 17, "{e}");
    assert!(
        e.message.contains("journaled twice (also at line 1)"),
        "{e}"
    );
    // Two replies to one turn: the log contradicts itself.
    let mut again: Value = serde_json::from_str(&good[2]).unwrap();
    again["exchange"] = 99.into();
    again["response"]["content"][0]["text"] = "Something else.".into();
    let mut contradicting = good.clone();
    contradicting.push(again.to_string());
    let e = error_of(contradicting.join("\n").as_bytes());
    assert_eq!(e.line, 17, "{e}");
    assert!(e.message.contains("already answered (at line 3)"), "{e}");
    // A reply to a request whose tool result pairs with no tool use.
    let mut unpaired: Value = serde_json::from_str(&good[1]).unwrap();
    unpaired["request"]["messages"][2]["content"][0]["tool_use_id"] = "toolu_nobody".into();
    let mut ids = good.clone();
    ids[1] = unpaired.to_string();
    let e = error_of(ids.join("\n").as_bytes());
    assert_eq!(e.line, 2, "{e}");
    assert!(e.message.contains("refuses"), "{e}");
    // An agent no scenario can declare, and a fork of an agent the log never saw.
    for (agent, message) in [
        ("agent:main", "`address` is not"),
        ("ghost#1", "a fork of `ghost`"),
    ] {
        let mut renamed: Value = serde_json::from_str(&good[0]).unwrap();
        renamed["address"]["agent"] = agent.into();
        let mut lines = good.clone();
        lines[0] = renamed.to_string();
        let e = error_of(lines.join("\n").as_bytes());
        assert_eq!(e.line, 1, "{e}");
        assert!(e.message.contains(message), "{e}");
    }
    // A line over the limit.
    let mut huge = b"{\"exchange\": 1, \"pad\": \"".to_vec();
    huge.resize(import::MAX_LINE_BYTES + 10, b'a');
    huge.extend_from_slice(b"\"}");
    let e = error_of(&huge);
    assert_eq!(e.line, 1, "{e}");
    assert!(e.message.contains("bytes a journal line may have"), "{e}");
    // Records of kinds the reader does not know, and a miss, are listed, in the file too.
    let mut unknown = good.clone();
    unknown.push(r#"{"exchange": 40, "outcome": "teleport"}"#.into());
    unknown.push(r#"{"exchange": 41, "method": "POST", "path": "/v1/complete", "status": 404, "outcome": "unknown-path"}"#.into());
    let imported =
        import::import(unknown.join("\n").as_bytes(), Path::new("j.jsonl"), "x").expect("imports");
    let reasons: Vec<(usize, &str)> = imported
        .skipped
        .iter()
        .map(|s| (s.line, s.reason.as_str()))
        .collect();
    assert_eq!(
        reasons,
        [
            (
                17,
                "exchange 40: a record of an unknown kind (outcome `teleport`)"
            ),
            (
                18,
                "exchange 41: a request to /v1/complete, which mock-llm does not serve"
            ),
        ]
    );
    assert!(
        imported
            .yaml
            .contains("#   line 17: exchange 40: a record of an unknown kind (outcome `teleport`)"),
        "{}",
        imported.yaml
    );
    // Nothing to script.
    let e = error_of(b" \n");
    assert_eq!((e.line, e.message.as_str()), (0, "the input is empty"));
    let e = error_of(b"[1, 2]");
    assert_eq!(e.line, 1, "{e}");
    assert!(e.message.contains("not a JSON object"), "{e}");
}

#[tokio::test]
async fn a_provider_body_becomes_a_script_that_answers_its_requests() {
    let body = json!({
        "model": "claude-x", "max_tokens": 100, "system": "You are a weather assistant.",
        "tools": [{"name": "get_weather", "description": "weather", "input_schema": {"type": "object"}}],
        "messages": [
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": [
                {"type": "text", "text": "Let me check."},
                {"type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": {"city": "Paris"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_01", "content": "18 C"}]},
            {"role": "assistant", "content": "It is 18 C in Paris."},
            {"role": "user", "content": "And tomorrow?"}
        ]
    });
    let text = body.to_string();
    let imported =
        import::import(text.as_bytes(), Path::new("body.json"), "from a body").expect("imports");
    let yaml = &imported.yaml;
    assert!(yaml.contains("id: toolu_01"), "{yaml}");
    assert!(yaml.contains("get_weather: { result: \"18 C\" }"), "{yaml}");
    assert_eq!(imported.skipped.len(), 1, "{:?}", imported.skipped);
    assert!(imported.skipped[0]
        .reason
        .contains("its last message has no reply"));
    // Served, it answers the two requests that came before each assistant turn.
    let scenario = scenario::parse(yaml, Path::new("served.yaml")).expect("loads");
    let running = server::start(&scenario, Options::default()).await.unwrap();
    let client = reqwest::Client::new();
    for (cut, expected) in [(1, 1), (3, 3)] {
        let mut asked = body.clone();
        asked["messages"].as_array_mut().unwrap().truncate(cut);
        let reply: Value = client
            .post(format!("http://{}/v1/messages", running.addr))
            .json(&asked)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let (blocks, _) = wire::reply::decode(Provider::Anthropic, &reply).unwrap();
        let want = wire::validate(Provider::Anthropic, &body).unwrap().messages[expected].clone();
        assert_eq!(blocks, want.content.iter().cloned().collect::<Vec<_>>());
    }
    running.stop();
    let report = running.finish(std::future::pending()).await.unwrap();
    assert!(report.passed, "{report:?}");
}

#[test]
fn bodies_of_one_conversation_are_read_once_and_contradicting_ones_refused() {
    let first = json!({"model": "gpt-x", "messages": [
        {"role": "system", "content": "You plan."},
        {"role": "user", "content": "Plan it"},
        {"role": "assistant", "content": "Step one."},
        {"role": "user", "content": "Go on"}]});
    let mut second = first.clone();
    second["messages"].as_array_mut().unwrap().extend([
        json!({"role": "assistant", "content": "Step two."}),
        json!({"role": "user", "content": "Thanks"}),
    ]);
    // Another setting of the body does not make its history another request.
    second["max_tokens"] = 50.into();
    let list = json!([first, second]).to_string();
    let imported = import::import(list.as_bytes(), Path::new("list.json"), "x").unwrap();
    assert!(
        imported.yaml.contains(
            "  main:\n    # body 1: conversation 1, turn 0\n    - Step one.\n    # body 2: conversation 1, turn 1\n    - Step two.\n"
        ),
        "{}",
        imported.yaml
    );
    // The first body's last request is the one the second answers; the second's is not.
    let lines: Vec<usize> = imported.skipped.iter().map(|s| s.line).collect();
    assert_eq!(lines, [2]);
    let mut other = second.clone();
    other["messages"][2]["content"] = "Step 1!".into();
    let list = json!([first, other]).to_string();
    let e = import::import(list.as_bytes(), Path::new("list.json"), "x").unwrap_err();
    assert_eq!(e.line, 2, "{e}");
    assert!(e.message.contains("contradict"), "{e}");
}

#[test]
fn the_command_never_writes_over_its_input_and_says_what_it_wrote() {
    let input = temp("cli-body.json");
    let body = json!({"model": "m", "messages": [
        {"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]});
    std::fs::write(&input, body.to_string()).unwrap();
    let run = |out: &Path| {
        std::process::Command::new(env!("CARGO_BIN_EXE_agentsim"))
            .args([
                "import",
                input.to_str().unwrap(),
                "--out",
                out.to_str().unwrap(),
            ])
            .output()
            .unwrap()
    };
    let o = run(&input);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("is also an input"));
    assert_eq!(std::fs::read_to_string(&input).unwrap(), body.to_string());
    let out = temp("cli-out.yaml");
    let o = run(&out);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("wrote") && stderr.contains("agents main"),
        "{stderr}"
    );
    let written = std::fs::read_to_string(&out).unwrap();
    scenario::parse(&written, &out).expect("the written file loads");
    assert!(
        written.contains("  main:\n    # body 1: conversation 1, turn 0\n    - hello\n"),
        "{written}"
    );
    // A broken input: exit 1, located.
    std::fs::write(&input, "{\"model\": ").unwrap();
    let o = run(&out);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("cli-body.json:1:"),
        "{:?}",
        o
    );
}

/// The worked example of `docs/import-record.md` shows what the command writes: each `yaml` block
/// after an `<!-- import: FILE -->` comment is the import of that file, byte for byte.
#[test]
fn the_guide_shows_what_import_writes() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let page = std::fs::read_to_string(root.join("docs/import-record.md")).unwrap();
    let mut shown = 0;
    for (at, _) in page.match_indices("<!-- import: ") {
        let rest = &page[at + "<!-- import: ".len()..];
        let file = &rest[..rest.find(" -->").unwrap()];
        let block = &rest[rest.find("```yaml\n").unwrap() + "```yaml\n".len()..];
        let block = &block[..block.find("```\n").unwrap()];
        let bytes = std::fs::read(root.join(file)).unwrap();
        let name = format!(
            "imported from {}",
            Path::new(file).file_name().unwrap().to_string_lossy()
        );
        let imported = import::import(&bytes, Path::new(file), &name).unwrap();
        assert_eq!(
            block, imported.yaml,
            "docs/import-record.md shows another import of {file}"
        );
        shown += 1;
    }
    assert_eq!(shown, 1);
}
