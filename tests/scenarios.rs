//! One test per scenario file under `scenarios/`: it loads the file, runs it, checks its
//! expectations, compares the transcript with its snapshot in `snapshots/`, and runs it a second
//! time to check that the transcript is byte-identical (determinism).
//!
//! Every test goes through [`check_scenario`], so the library's API can change without rewriting
//! tests. Filter by name as usual: `cargo test --test scenarios -- spec::complete`.

use std::path::{Path, PathBuf};

use agentsim::report;
use agentsim::scenario::{self, RunOptions};
use libtest_mimic::{Arguments, Failed, Trial};

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            collect(&path, out);
        } else if matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("yaml" | "yml" | "json")
        ) {
            out.push(path);
        }
    }
}

/// `scenarios/spec/complete-returns-result.yaml` → `spec::complete-returns-result`.
fn test_name(root: &Path, path: &Path) -> String {
    let rel = path.strip_prefix(root).expect("under the root");
    let stem = rel.with_extension("");
    stem.components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join("::")
}

fn check_scenario(path: &Path, snapshot: &str) -> Result<(), Failed> {
    let scenario = scenario::load(path).map_err(|e| Failed::from(e.to_string()))?;
    let first = scenario::run(&scenario, RunOptions::default());
    let text = report::text(&first);
    if let Some(failure) = &first.failure {
        return Err(format!(
            "{failure}\n  rerun: {}\n\ntranscript:\n{text}",
            first.rerun_command()
        )
        .into());
    }
    let second = report::text(&scenario::run(&scenario, RunOptions::default()));
    if second != text {
        return Err("two runs with the same seed gave different transcripts".into());
    }
    let snapshots = Path::new(env!("CARGO_MANIFEST_DIR")).join("snapshots");
    let snapshot = snapshot.to_owned();
    let input = path.to_owned();
    std::panic::catch_unwind(move || {
        let mut settings = insta::Settings::clone_current();
        settings.set_snapshot_path(snapshots);
        settings.set_prepend_module_to_snapshot(false);
        settings.set_input_file(&input);
        settings.set_omit_expression(true);
        settings.bind(|| insta::assert_snapshot!(snapshot, text));
    })
    .map_err(|_| Failed::from("the transcript differs from its snapshot (see above)"))
}

fn main() {
    let args = Arguments::from_args();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios");
    let mut files = Vec::new();
    collect(&root, &mut files);
    let trials = files
        .into_iter()
        .map(|path| {
            let name = test_name(&root, &path);
            let snapshot = name.replace("::", "__");
            Trial::test(name, move || check_scenario(&path, &snapshot))
        })
        .collect();
    libtest_mimic::run(&args, trials).exit();
}
