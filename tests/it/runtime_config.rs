//! The `runtime:` block of a config file (`agentsim.yaml` in the current directory, or
//! `--config FILE`): `run` and `check` go to the runtime it names, flags win over it, and a bad
//! block or a runtime flag with no runtime is an error, never ignored.

use std::path::{Path, PathBuf};
use std::process::Output;

use super::support::text;

const HELLO: &str = "name: hello
llm: { main: [Hi there.] }
steps:
  - user: hello
  - expect: { sent: [Hi there.], depth: 0 }
";

fn fresh(name: &str) -> PathBuf {
    let dir = super::support::fresh_dir("runtime-config", name);
    std::fs::write(dir.join("hello.yaml"), HELLO).unwrap();
    dir
}

fn fake() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/runtimes/fake.py")
        .display()
        .to_string()
}

fn agentsim(dir: &Path, args: &[&str]) -> Output {
    super::support::agentsim_in(dir, args, &[])
}

#[test]
fn run_and_check_go_to_the_runtime_of_agentsim_yaml() {
    let dir = fresh("default");
    std::fs::write(
        dir.join("agentsim.yaml"),
        format!(
            "runtime:\n  command: [python3, '{}', ok]\n  timeouts: {{ idle: 20s }}\n",
            fake()
        ),
    )
    .unwrap();
    let o = agentsim(&dir, &["run", "hello.yaml"]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(
        out.contains("runtime → user default: \"Hi there.\""),
        "{out}"
    );
    // The rerun names the runtime and the folder it ran in.
    let o = agentsim(&dir, &["run", "hello.yaml", "--format", "json"]);
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(
        report["runtime"].as_str().unwrap().contains("fake.py ok"),
        "{report}"
    );
    let o = agentsim(&dir, &["check", "."]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        text(&o).contains("agentsim.yaml (agentsim's config file"),
        "{}",
        text(&o)
    );
    assert!(
        text(&o).contains("2 scenarios: 1 passed, 0 failed, 1 skipped"),
        "{}",
        text(&o)
    );
    // A flag wins over the file: this command exits before `ready`.
    let o = agentsim(&dir, &["run", "hello.yaml", "--runtime", "python3 -c pass"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("python3 -c pass"), "{}", text(&o));
}

#[test]
fn config_names_another_file_and_a_bad_block_is_an_error_naming_the_field() {
    let dir = fresh("explicit");
    std::fs::write(
        dir.join("runtimes.yaml"),
        format!("runtime:\n  command: python3 '{}' ok\n", fake()),
    )
    .unwrap();
    let o = agentsim(&dir, &["run", "hello.yaml", "--config", "runtimes.yaml"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    std::fs::write(
        dir.join("bad.yaml"),
        "runtime:\n  command: python3 x.py\n  env: [OPENAI_BASE_URL]\n",
    )
    .unwrap();
    let o = agentsim(&dir, &["run", "hello.yaml", "--config", "bad.yaml"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("bad.yaml: runtime.env[0]: `OPENAI_BASE_URL` is set by agentsim"),
        "{}",
        text(&o)
    );
    let o = agentsim(&dir, &["run", "hello.yaml", "--config", "missing.yaml"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("missing.yaml: cannot read it"),
        "{}",
        text(&o)
    );
}

#[test]
fn a_runtime_flag_without_a_runtime_is_an_error_and_no_block_runs_agentsims_own() {
    let dir = fresh("none");
    let o = agentsim(&dir, &["run", "hello.yaml", "--runtime-env", "X=1"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("--runtime-env is for a run against your runtime"),
        "{}",
        text(&o)
    );
    // A config file without a `runtime:` block leaves the run to agentsim's own runtime.
    std::fs::write(dir.join("agentsim.yaml"), "{}\n").unwrap();
    let o = agentsim(&dir, &["run", "hello.yaml"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("push main depth=1"), "{}", text(&o));
}
