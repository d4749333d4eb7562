//! The CLI never says "passed" where it should not, never writes over what it was handed, and
//! never lets a file drive the terminal it prints on (issue 36's findings, each reproduced).

use std::path::{Path, PathBuf};
use std::process::Command;

use super::support::{agentsim, stderr, stdout};

/// A fresh, empty directory under the target directory.
fn fresh(name: &str) -> PathBuf {
    super::support::fresh_dir("cli-honest", name)
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

const PASSING: &str =
    "name: passes\nllm: { main: [hi] }\nsteps:\n  - user: x\n  - expect: { sent: [hi] }\n";
const FAILING: &str =
    "name: fails\nllm: { main: [hi] }\nsteps:\n  - user: x\n  - expect: { sent: [bye] }\n";

#[test]
fn check_runs_every_file_run_would_load_and_reports_every_file_it_skips() {
    let dir = fresh("skips");
    std::fs::write(dir.join("a.yaml"), PASSING).unwrap();
    std::fs::write(dir.join("B.YAML"), PASSING).unwrap();
    std::fs::write(dir.join("c.JSON"), r#"{"$schema": "./schema.json", "name": "json with a schema key", "llm": {"main": ["hi"]}, "steps": [{"user": "x"}, {"expect": {"sent": ["hi"]}}]}"#).unwrap();
    let schema = agentsim(&["schema"]);
    assert!(schema.status.success());
    std::fs::write(dir.join("schema.json"), &schema.stdout).unwrap();
    std::fs::write(dir.join(".draft.yaml"), FAILING).unwrap();
    std::os::unix::fs::symlink(dir.join("gone.yaml"), dir.join("d.yaml")).unwrap();
    std::os::unix::fs::symlink(dir.join("gone.txt"), dir.join("README.txt")).unwrap();
    std::os::unix::fs::symlink("/usr", dir.join("usr")).unwrap();
    let junit = dir.join("junit.xml");
    let o = agentsim(&["check", s(&dir), "--junit", s(&junit)]);
    let out = stdout(&o);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{out}{err}");
    for line in [
        "skip ", // the hidden file
        "ok   ",
    ] {
        assert!(out.contains(line), "{out}");
    }
    assert!(out.contains("B.YAML\n"), "{out}");
    assert!(out.contains("c.JSON\n"), "{out}");
    assert!(
        out.contains(
            "schema.json (a JSON Schema, not a scenario: it has `$schema` and no `name`, `steps`"
        ),
        "{out}"
    );
    assert!(
        out.contains(".draft.yaml (hidden: its name starts with `.`"),
        "{out}"
    );
    assert!(
        out.contains("d.yaml\n  a symbolic link to nothing"),
        "{out}"
    );
    assert!(!out.contains("README.txt"), "not a scenario's name: {out}");
    assert!(
        out.contains("6 scenarios: 3 passed, 1 failed, 2 skipped"),
        "{out}"
    );
    assert!(
        err.contains("note: not following") && err.contains("--follow-links"),
        "{err}"
    );
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert!(
        xml.contains(r#"tests="6" failures="0" errors="1""#),
        "{xml}"
    );
    assert_eq!(xml.matches("<skipped message=").count(), 2, "{xml}");
    // `run` loads the JSON scenario with its `$schema` key, as check does.
    let o = agentsim(&["run", s(&dir.join("c.JSON"))]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

#[test]
fn a_file_without_steps_fails_run_check_and_explore_with_a_located_error() {
    let dir = fresh("no-steps");
    let file = dir.join("served.yaml");
    std::fs::write(&file, "name: served only\nllm: { main: [hi] }\n").unwrap();
    let expected = format!("{}:1:1: the scenario has no `steps`", file.display());
    let o = agentsim(&["run", s(&file)]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains(&expected), "{}", stderr(&o));
    let o = agentsim(&["check", s(&file)]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stdout(&o).contains(&expected), "{}", stdout(&o));
    assert!(stdout(&o).contains("0 passed, 1 failed"), "{}", stdout(&o));
    let o = agentsim(&["explore", s(&file), "--runs", "1", "--no-write"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains(&expected), "{}", stderr(&o));
}

#[test]
fn no_output_flag_writes_over_an_input() {
    let dir = fresh("overwrite");
    let file = dir.join("x.yaml");
    std::fs::write(&file, PASSING).unwrap();
    let linked = dir.join("hard-link.yaml");
    std::fs::hard_link(&file, &linked).unwrap();
    let dotted = format!("{}/./x.yaml", dir.display());
    for args in [
        vec!["run", s(&file), "--html", s(&file)],
        vec!["run", s(&file), "--html", &dotted],
        vec!["run", s(&file), "--html", s(&linked)],
        vec!["check", s(&file), "--junit", s(&file)],
        vec![
            "mock-llm",
            s(&file),
            "--addr",
            "127.0.0.1:0",
            "--journal",
            s(&file),
        ],
        vec![
            "mock-llm",
            s(&file),
            "--addr",
            "127.0.0.1:0",
            "--report",
            s(&file),
        ],
        vec![
            "mock-llm",
            s(&file),
            "--addr",
            "127.0.0.1:0",
            "--transcript",
            s(&file),
        ],
    ] {
        let o = agentsim(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("is also an input")
                && stderr(&o).contains("never writes over a file it reads"),
            "{args:?}: {}",
            stderr(&o)
        );
        assert_eq!(std::fs::read_to_string(&file).unwrap(), PASSING, "{args:?}");
    }
    // Two outputs on one path.
    let report = dir.join("report.json");
    let o = agentsim(&[
        "mock-llm",
        s(&file),
        "--addr",
        "127.0.0.1:0",
        "--report",
        s(&report),
        "--transcript",
        s(&report),
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("--report and --transcript name one file"),
        "{}",
        stderr(&o)
    );
    // A page directory that holds the scenario under a page's name.
    let tricky = dir.join("pages");
    std::fs::create_dir_all(&tricky).unwrap();
    let input = tricky.join("index.html");
    std::fs::write(&input, PASSING).unwrap();
    let o = agentsim(&["check", s(&input), "--html", s(&tricky)]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert_eq!(std::fs::read_to_string(&input).unwrap(), PASSING);
    // Outputs are written whole: no temporary file is left beside them.
    let page = dir.join("page.html");
    let o = agentsim(&["run", s(&file), "--html", s(&page)]);
    assert_eq!(o.status.code(), Some(0));
    assert!(std::fs::read_to_string(&page)
        .unwrap()
        .ends_with("</html>\n"));
    let leftovers: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn check_html_pages_never_collide() {
    let dir = fresh("pages");
    std::fs::create_dir_all(dir.join("a")).unwrap();
    std::fs::write(dir.join("a").join("x.yaml"), PASSING).unwrap();
    std::fs::write(dir.join("a_x.yaml"), FAILING).unwrap();
    let out = dir.join("html");
    let o = agentsim(&[
        "check",
        s(&dir.join("a")),
        s(&dir.join("a_x.yaml")),
        "--html",
        s(&out),
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let pages: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n != "index.html")
        .collect();
    assert_eq!(pages.len(), 2, "{pages:?}");
    let index = std::fs::read_to_string(out.join("index.html")).unwrap();
    let failing = index
        .lines()
        .find(|l| l.starts_with("<li>FAIL"))
        .expect("a failing row");
    let href = failing
        .split("href=\"")
        .nth(1)
        .unwrap()
        .split('"')
        .next()
        .unwrap();
    let page = std::fs::read_to_string(out.join(href)).unwrap();
    assert!(page.contains("class=\"verdict failed\""), "{href}");
    let passing = index.lines().find(|l| l.starts_with("<li>ok")).unwrap();
    let href = passing
        .split("href=\"")
        .nth(1)
        .unwrap()
        .split('"')
        .next()
        .unwrap();
    let page = std::fs::read_to_string(out.join(href)).unwrap();
    assert!(page.contains("class=\"verdict passed\""), "{href}");
}

#[test]
fn ctrl_c_during_check_prints_the_total_writes_the_report_and_exits_130() {
    let dir = fresh("ctrl-c");
    let scenarios = dir.join("s");
    std::fs::create_dir_all(&scenarios).unwrap();
    let mut long = String::from("name: long\nllm:\n  main:\n");
    for _ in 0..200 {
        long.push_str("    - a reply\n");
    }
    long.push_str("steps:\n");
    for _ in 0..200 {
        long.push_str("  - user: hello\n");
    }
    for i in 0..2_000 {
        std::fs::write(scenarios.join(format!("{i:04}.yaml")), &long).unwrap();
    }
    let junit = dir.join("junit.xml");
    std::fs::write(
        &junit,
        "<testsuites tests=\"1\" failures=\"0\" errors=\"0\"/>\n",
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_agentsim"))
        .args(["check", s(&scenarios), "--jobs", "1", "--junit", s(&junit)])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut reader = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    std::io::BufRead::read_line(&mut reader, &mut first).unwrap();
    assert!(first.starts_with("ok "), "{first}");
    // The stale report is gone as soon as the check starts.
    assert!(
        !junit.exists(),
        "a previous run's report must not survive a new check"
    );
    let kill = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut reader, &mut rest).unwrap();
    let mut status = None;
    for _ in 0..1200 {
        if let Some(s) = child.try_wait().unwrap() {
            status = Some(s);
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let Some(status) = status else {
        let _ = child.kill();
        panic!("check did not stop within 60 s of Ctrl-C");
    };
    let mut err = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(130), "{rest}{err}");
    assert!(
        err.contains("interrupted: finishing the scenarios in flight"),
        "{err}"
    );
    let total = rest.lines().last().unwrap_or("");
    assert!(
        total.starts_with("2000 scenarios: ") && total.contains("not run (interrupted)"),
        "{total}"
    );
    let xml = std::fs::read_to_string(&junit).expect("the report of what ran");
    assert!(
        xml.contains(r#"tests="2000""#),
        "{}",
        &xml[..300.min(xml.len())]
    );
    assert!(
        xml.contains("<skipped message=\"not run: the check was interrupted (Ctrl-C)\"/>"),
        "the cases never run are marked"
    );
}

#[test]
fn explore_reruns_report_a_known_finding_instead_of_writing_it_again() {
    let dir = fresh("explore-known");
    let out = dir.join("found");
    let explore = || {
        agentsim(&[
            "explore",
            "--generated",
            "--runs",
            "20",
            "--no-steer",
            "--bug",
            "iteration-off-by-one",
            "--out",
            s(&out),
        ])
    };
    assert_eq!(explore().status.code(), Some(1));
    let o = explore();
    assert_eq!(o.status.code(), Some(1));
    assert!(stdout(&o).contains("known, "), "{}", stdout(&o));
    assert!(stdout(&o).contains("(not written again)"), "{}", stdout(&o));
    assert_eq!(std::fs::read_dir(&out).unwrap().count(), 1);
}

/// ESC (a screen clear and an OSC 52 clipboard write), BEL, CR and a bidi override, in an agent
/// name, an unknown field's name and an expectation's map key: none reaches any output raw.
#[test]
fn nothing_a_scenario_holds_drives_the_terminal_or_the_reports() {
    let dir = fresh("escape");
    let hostile = r#"\e[2J\e]52;c;aGk=\a\r\u202E"#;
    let files = [
        format!("name: \"n{hostile}\"\nagents:\n  \"r{hostile}\": {{ kind: skill }}\nllm: {{ main: [hi] }}\nsteps:\n  - user: x\n"),
        format!("name: t\n\"f{hostile}\": 1\nllm: {{ main: [hi] }}\nsteps:\n  - user: x\n"),
        format!("name: t\nllm: {{ main: [hi] }}\nsteps:\n  - user: x\n  - expect: {{ iterations: {{ \"k{hostile}\": 1 }}, llm_calls: {{ \"m{hostile}\": 1 }} }}\n"),
        format!("name: t\nllm: {{ main: [\"hi{hostile}\"] }}\nsteps:\n  - user: x\n  - expect: {{ sent: [\"bye{hostile}\"] }}\n"),
    ];
    let raw = |text: &str| {
        text.chars()
            .any(|c| matches!(c, '\u{1b}' | '\u{7}' | '\r' | '\u{202e}'))
    };
    for (i, yaml) in files.iter().enumerate() {
        let file = dir.join(format!("{i}.yaml"));
        std::fs::write(&file, yaml).unwrap();
        let junit = dir.join(format!("{i}.xml"));
        let html = dir.join(format!("html-{i}"));
        let page = dir.join(format!("{i}.html"));
        for o in [
            agentsim(&["check", s(&file), "--junit", s(&junit), "--html", s(&html)]),
            agentsim(&["check", s(&file), "--format", "json"]),
            agentsim(&["run", s(&file), "--html", s(&page)]),
            agentsim(&["run", s(&file), "--format", "json"]),
        ] {
            assert!(!raw(&stdout(&o)), "file {i} stdout: {:?}", stdout(&o));
            assert!(!raw(&stderr(&o)), "file {i} stderr: {:?}", stderr(&o));
        }
        let mut outputs = vec![std::fs::read_to_string(&junit).unwrap()];
        if page.exists() {
            outputs.push(std::fs::read_to_string(&page).unwrap());
        }
        for entry in std::fs::read_dir(&html).unwrap() {
            outputs.push(std::fs::read_to_string(entry.unwrap().path()).unwrap());
        }
        for text in outputs {
            assert!(!raw(&text), "file {i}: {text}");
        }
    }
}
