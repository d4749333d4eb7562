//! What `agentsim check` reports for CI: one case per scenario file, as JUnit XML
//! (`--junit FILE`) or JSON (`--format json`).
//!
//! The JUnit document follows the format CI systems read (GitLab, GitHub's test reporters,
//! Jenkins): `<testsuites>` with one `<testsuite>` per directory, one `<testcase>` per file
//! (`classname` the directory with dots, `name` the file stem, `file` the path), a `<failure>` for
//! a scenario that ran and failed (its message, the step's location and the command that reruns
//! it) and an `<error>` for a file that could not be loaded. `tests/clients/junit.xsd` is the
//! schema CI validates it against.

use std::fmt::Write as _;
use std::path::Path;

use serde_json::{json, Value};

/// One scenario file's result.
#[derive(Clone, Debug, PartialEq)]
pub struct Case {
    /// The file, as given.
    pub path: String,
    /// Seconds it took.
    pub seconds: f64,
    /// What happened.
    pub result: CaseResult,
}

/// What happened to one scenario file.
#[derive(Clone, Debug, PartialEq)]
pub enum CaseResult {
    /// It ran and passed.
    Passed {
        /// The scenario's name.
        name: String,
        /// The seed.
        seed: u64,
        /// The invariant it expected to break, and did.
        reproduced: Option<String>,
    },
    /// It ran and failed.
    Failed {
        /// The scenario's name.
        name: String,
        /// The seed.
        seed: u64,
        /// The failure, structured ([`crate::scenario::Failure::to_json`]).
        failure: Value,
        /// `(line, column)` of the step, if the failure is tied to one.
        location: Option<(u32, u32)>,
        /// The command that reruns it.
        rerun: String,
    },
    /// It could not be loaded (or read).
    Broken {
        /// What was wrong.
        message: String,
        /// `(line, column)`, when the loader located it.
        location: Option<(u32, u32)>,
    },
    /// It was not run: a file with a scenario's name that is not a scenario (a JSON Schema), or
    /// one the check never reached (interrupted).
    Skipped {
        /// Why it was not run.
        reason: String,
    },
}

impl Case {
    /// Whether it passed.
    pub fn passed(&self) -> bool {
        matches!(self.result, CaseResult::Passed { .. })
    }

    /// Whether it was not run.
    pub fn skipped(&self) -> bool {
        matches!(self.result, CaseResult::Skipped { .. })
    }

    /// Whether it failed (ran and failed, or could not be loaded).
    pub fn failed(&self) -> bool {
        !self.passed() && !self.skipped()
    }

    /// The case as JSON.
    pub fn to_json(&self) -> Value {
        let mut v = json!({"path": self.path, "passed": self.passed(), "seconds": self.seconds});
        match &self.result {
            CaseResult::Passed {
                name,
                seed,
                reproduced,
            } => {
                v["name"] = name.as_str().into();
                v["seed"] = (*seed).into();
                v["reproduced"] = reproduced.as_deref().into();
            }
            CaseResult::Failed {
                name,
                seed,
                failure,
                rerun,
                ..
            } => {
                v["name"] = name.as_str().into();
                v["seed"] = (*seed).into();
                v["failure"] = failure.clone();
                v["rerun"] = rerun.as_str().into();
            }
            CaseResult::Broken { message, location } => {
                let mut e = json!({"kind": "load", "message": message});
                if let Some((line, column)) = location {
                    e["line"] = (*line).into();
                    e["column"] = (*column).into();
                }
                v["failure"] = e;
            }
            CaseResult::Skipped { reason } => {
                v["skipped"] = reason.as_str().into();
            }
        }
        v
    }
}

/// The whole check as JSON: every case in order, the counts and the time.
pub fn json_report(cases: &[Case], seconds: f64, not_run: usize) -> Value {
    let passed = cases.iter().filter(|c| c.passed()).count();
    let skipped = cases.iter().filter(|c| c.skipped()).count();
    json!({
        "scenarios": cases.iter().map(Case::to_json).collect::<Vec<_>>(),
        "passed": passed,
        "failed": cases.len() - passed - skipped,
        "skipped": skipped,
        "not_run": not_run,
        "seconds": seconds,
    })
}

pub use super::escape::markup;

/// The directory of `path` with dots (`scenarios/spec/a.yaml` → `scenarios.spec`), and its stem.
fn class_and_name(path: &str) -> (String, String) {
    let p = Path::new(path);
    let class = p
        .parent()
        .map(|d| {
            d.components()
                .filter_map(|c| match c {
                    std::path::Component::Normal(s) => Some(s.to_string_lossy().into_owned()),
                    _ => None,
                })
                .collect::<Vec<_>>()
                .join(".")
        })
        .filter(|c| !c.is_empty())
        .unwrap_or_else(|| ".".to_owned());
    let name = p
        .file_stem()
        .map_or_else(|| path.to_owned(), |s| s.to_string_lossy().into_owned());
    (class, name)
}

/// The check as a JUnit XML document: one test suite per directory, in order of first
/// appearance; one test case per file.
pub fn junit(cases: &[Case], seconds: f64) -> String {
    let mut suites: Vec<(String, Vec<&Case>)> = Vec::new();
    for case in cases {
        let (class, _) = class_and_name(&case.path);
        match suites.iter_mut().find(|(c, _)| *c == class) {
            Some((_, list)) => list.push(case),
            None => suites.push((class, vec![case])),
        }
    }
    let count =
        |list: &[&Case], f: fn(&CaseResult) -> bool| list.iter().filter(|c| f(&c.result)).count();
    let failed = |r: &CaseResult| matches!(r, CaseResult::Failed { .. });
    let broken = |r: &CaseResult| matches!(r, CaseResult::Broken { .. });
    let skipped = |r: &CaseResult| matches!(r, CaseResult::Skipped { .. });
    let all: Vec<&Case> = cases.iter().collect();
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        out,
        "<testsuites name=\"agentsim check\" tests=\"{}\" failures=\"{}\" errors=\"{}\" time=\"{seconds:.3}\">",
        cases.len(),
        count(&all, failed),
        count(&all, broken),
    );
    for (class, list) in &suites {
        let time: f64 = list.iter().map(|c| c.seconds).sum();
        let _ = writeln!(
            out,
            "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"{}\" time=\"{time:.3}\">",
            markup(class),
            list.len(),
            count(list, failed),
            count(list, broken),
            count(list, skipped),
        );
        for case in list {
            let (_, name) = class_and_name(&case.path);
            let _ = write!(
                out,
                "    <testcase classname=\"{}\" name=\"{}\" file=\"{}\" time=\"{:.3}\"",
                markup(class),
                markup(&name),
                markup(&case.path),
                case.seconds
            );
            match &case.result {
                CaseResult::Passed { .. } => out.push_str("/>\n"),
                CaseResult::Failed {
                    failure,
                    location,
                    rerun,
                    seed,
                    ..
                } => {
                    let message = failure["message"].as_str().unwrap_or("failed");
                    let first = message.lines().next().unwrap_or("failed");
                    let kind = failure["kind"].as_str().unwrap_or("failure");
                    let at = location.map_or(String::new(), |(l, c)| {
                        format!("\nat {}:{l}:{c}", case.path)
                    });
                    let _ = write!(
                        out,
                        ">\n      <failure message=\"{}\" type=\"{}\">{}{}\nseed: {seed}\nrerun: {}</failure>\n    </testcase>\n",
                        markup(first),
                        markup(kind),
                        markup(message),
                        markup(&at),
                        markup(rerun)
                    );
                }
                CaseResult::Skipped { reason } => {
                    let _ = write!(
                        out,
                        ">\n      <skipped message=\"{}\"/>\n    </testcase>\n",
                        markup(reason)
                    );
                }
                CaseResult::Broken { message, .. } => {
                    let first = message.lines().next().unwrap_or("cannot be loaded");
                    let _ = write!(
                        out,
                        ">\n      <error message=\"{}\" type=\"load\">{}</error>\n    </testcase>\n",
                        markup(first),
                        markup(message)
                    );
                }
            }
        }
        out.push_str("  </testsuite>\n");
    }
    out.push_str("</testsuites>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cases() -> Vec<Case> {
        vec![
            Case {
                path: "scenarios/spec/ok.yaml".into(),
                seconds: 0.01,
                result: CaseResult::Passed {
                    name: "ok".into(),
                    seed: 0,
                    reproduced: None,
                },
            },
            Case {
                path: "scenarios/spec/bad <1>.yaml".into(),
                seconds: 0.02,
                result: CaseResult::Failed {
                    name: "bad".into(),
                    seed: 3,
                    failure: json!({"kind": "expectation", "message": "step 2 (line 6, column 5): expectation failed\n    sent: expected \"a\" & got \u{1b}\"b\""}),
                    location: Some((6, 5)),
                    rerun: "agentsim run 'scenarios/spec/bad <1>.yaml' --seed 3".into(),
                },
            },
            Case {
                path: "other/broken.yaml".into(),
                seconds: 0.0,
                result: CaseResult::Broken {
                    message: "other/broken.yaml:3:5: unknown field `x`".into(),
                    location: Some((3, 5)),
                },
            },
        ]
    }

    #[test]
    fn junit_has_a_suite_per_directory_and_escapes_everything() {
        let x = junit(&cases(), 0.5);
        assert!(x.starts_with("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"agentsim check\" tests=\"3\" failures=\"1\" errors=\"1\""));
        assert!(x.contains(
            "<testsuite name=\"scenarios.spec\" tests=\"2\" failures=\"1\" errors=\"0\""
        ));
        assert!(x.contains("<testsuite name=\"other\" tests=\"1\" failures=\"0\" errors=\"1\""));
        assert!(x.contains("name=\"bad &lt;1&gt;\""));
        assert!(x.contains("type=\"expectation\""));
        assert!(x.contains("expected &quot;a&quot; &amp; got \\u{1b}&quot;b&quot;"));
        assert!(x.contains("at scenarios/spec/bad &lt;1&gt;.yaml:6:5\nseed: 3\nrerun: agentsim run &#39;scenarios/spec/bad &lt;1&gt;.yaml&#39; --seed 3</failure>"));
        assert!(x.contains(
            "<error message=\"other/broken.yaml:3:5: unknown field `x`\" type=\"load\">"
        ));
        assert!(!x.chars().any(|c| (c as u32) < 0x20 && c != '\n'));
        assert!(x.ends_with("</testsuites>\n"));
    }

    #[test]
    fn json_lists_each_case_with_its_structured_failure() {
        let v = json_report(&cases(), 0.5, 2);
        assert_eq!(v["passed"], 1);
        assert_eq!(v["failed"], 2);
        assert_eq!(v["not_run"], 2);
        assert_eq!(v["scenarios"][1]["failure"]["kind"], "expectation");
        assert_eq!(v["scenarios"][1]["seed"], 3);
        assert_eq!(v["scenarios"][2]["failure"]["kind"], "load");
        assert_eq!(v["scenarios"][2]["failure"]["line"], 3);
        assert_eq!(v["scenarios"][0]["reproduced"], Value::Null);
    }
}
