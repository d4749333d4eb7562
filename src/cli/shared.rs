//! What several commands share: the async runtime and stop signal of the servers, refusing an
//! output that is one of the inputs, writing an output whole or not at all (an imported scenario
//! with what its scripts leave out listed), and writing a file without overwriting one.

use std::path::{Path, PathBuf};

use agentsim::report;
#[cfg(feature = "mock-server")]
use std::process::ExitCode;

/// The multi-threaded tokio runtime the servers run on; exit code 2, said why, when it cannot
/// start.
#[cfg(feature = "mock-server")]
pub(super) fn async_runtime() -> Result<tokio::runtime::Runtime, ExitCode> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| {
            eprintln!("error: cannot start the async runtime: {e}");
            ExitCode::from(2)
        })
}

/// Ctrl-C or SIGTERM, registered now (before the caller says it listens), awaited later: a signal
/// that comes right after the `listening on` line is never missed.
#[cfg(feature = "mock-server")]
pub(super) fn stop_signal() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let signals = (
            signal(SignalKind::interrupt()),
            signal(SignalKind::terminate()),
        );
        async move {
            match signals {
                (Ok(mut int), Ok(mut term)) => {
                    tokio::select! {
                        _ = int.recv() => {}
                        _ = term.recv() => {}
                    }
                }
                _ => {
                    let _ = tokio::signal::ctrl_c().await;
                }
            }
        }
    }
    #[cfg(not(unix))]
    {
        async {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// Refuses, before anything runs, an output path that is one of the inputs: the same file by
/// inode (a hard link, `./x` for `x`) or, when the output does not exist yet, by canonical path.
/// `outputs` are `(flag, path)`; the error names the flag, the path and the rule.
pub(super) fn refuse_outputs_over_inputs(
    inputs: &[&Path],
    outputs: &[(&str, &Path)],
) -> Result<(), String> {
    for (i, (flag, output)) in outputs.iter().enumerate() {
        if let Some((other, _)) = outputs[..i]
            .iter()
            .find(|(other, path)| other != flag && same_file(path, output))
        {
            return Err(format!(
                "{other} and {flag} name one file ({}): each output needs its own path",
                report::printable(&output.display().to_string())
            ));
        }
        if let Some(input) = inputs.iter().find(|input| same_file(input, output)) {
            return Err(format!(
                "{flag} {} is also an input ({}): agentsim never writes over a file it reads; choose another path",
                report::printable(&output.display().to_string()),
                report::printable(&input.display().to_string())
            ));
        }
    }
    Ok(())
}

/// Whether two paths name one file (by device and inode where both exist, else by canonical
/// path of the parent directory and the name).
pub(super) fn same_file(a: &Path, b: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        if let (Ok(ma), Ok(mb)) = (std::fs::metadata(a), std::fs::metadata(b)) {
            return ma.dev() == mb.dev() && ma.ino() == mb.ino();
        }
    }
    match (canonical(a), canonical(b)) {
        (Some(ca), Some(cb)) => ca == cb,
        _ => false,
    }
}

/// The canonical form of a path that may not exist yet: its parent canonicalized, then its name.
fn canonical(path: &Path) -> Option<PathBuf> {
    if let Ok(c) = std::fs::canonicalize(path) {
        return Some(c);
    }
    let name = path.file_name()?;
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    Some(std::fs::canonicalize(parent).ok()?.join(name))
}

/// Writes `contents` to `path` whole or not at all: into a temporary file beside it, then renamed
/// over it, so that a crash or Ctrl-C never leaves half a file (and a reader never sees one).
pub(super) fn write_atomic(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    let temporary = temporary_beside(path)?;
    let written =
        std::fs::write(&temporary, contents).and_then(|()| std::fs::rename(&temporary, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    written
}

/// A name for a temporary file in the directory of `path` (hidden, so `check` walks past it).
fn temporary_beside(path: &Path) -> std::io::Result<PathBuf> {
    let name = path.file_name().ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{} names no file", path.display()),
        )
    })?;
    let mut temporary = std::ffi::OsString::from(".");
    temporary.push(name);
    temporary.push(format!(".agentsim-{}.tmp", std::process::id()));
    Ok(path.with_file_name(temporary))
}

/// What [`write_new`] did.
pub(super) enum Written {
    /// A new file, and the path `stem.yaml` if it was taken by another content.
    New(PathBuf, Option<PathBuf>),
    /// A file of `dir` named after `stem` already holds exactly these contents: nothing written.
    Known(PathBuf),
}

/// Writes `contents` to a file of `dir` named after `stem` that did not exist: `stem.yaml`, or
/// `stem-2.yaml`, `stem-3.yaml`, ... A file already there is never overwritten, and a file there
/// with the same contents (the same failure found again) is reported, not written twice. The new
/// file appears whole (written aside, then linked to its name).
pub(super) fn write_new(dir: &Path, stem: &str, contents: &str) -> std::io::Result<Written> {
    write_new_with(dir, stem, &|_| contents.to_owned())
}

/// [`write_new`], with contents that may name the file they are written to (`contents` is
/// called with each path tried).
pub(super) fn write_new_with(
    dir: &Path,
    stem: &str,
    contents: &dyn Fn(&Path) -> String,
) -> std::io::Result<Written> {
    std::fs::create_dir_all(dir)?;
    let first = dir.join(format!("{stem}.yaml"));
    let temporary = temporary_beside(&first)?;
    let written = (|| {
        for n in 1..10_000u32 {
            let path = if n == 1 {
                first.clone()
            } else {
                dir.join(format!("{stem}-{n}.yaml"))
            };
            let text = contents(&path);
            std::fs::write(&temporary, &text)?;
            match std::fs::hard_link(&temporary, &path) {
                Ok(()) => {
                    let taken = (n > 1).then(|| first.clone());
                    return Ok(Written::New(path, taken));
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    if std::fs::read(&path).is_ok_and(|there| there == text.as_bytes()) {
                        return Ok(Written::Known(path));
                    }
                }
                Err(e) => return Err(e),
            }
        }
        Err(std::io::Error::other(format!(
            "every name from {stem}.yaml to {stem}-9999.yaml is taken"
        )))
    })();
    let _ = std::fs::remove_file(&temporary);
    written
}

/// [`refuse_outputs_over_inputs`] as a command answers it: the error printed, exit 2.
pub(super) fn check_outputs(inputs: &[&Path], outputs: &[(&str, &Path)]) -> Result<(), ExitCode> {
    refuse_outputs_over_inputs(inputs, outputs).map_err(|e| {
        eprintln!("error: {e}");
        ExitCode::from(2)
    })
}

/// [`write_atomic`] as a command answers it: a failure printed with the path, exit 2.
pub(super) fn write_output(path: &Path, contents: &[u8]) -> Result<(), ExitCode> {
    write_atomic(path, contents).map_err(|e| {
        eprintln!(
            "error: cannot write {}: {e}",
            report::printable(&path.display().to_string())
        );
        ExitCode::from(2)
    })
}

/// Writes an imported scenario to `out` (whole or not at all) after listing on stderr what its
/// scripts leave out (`place` says where a skipped line is), and says what was written.
pub(super) fn write_imported(
    out: &Path,
    imported: &agentsim::import::Imported,
    place: &dyn Fn(usize) -> String,
) -> ExitCode {
    for skip in &imported.skipped {
        eprintln!(
            "skipped: {}: {}",
            place(skip.line),
            report::printable(&skip.reason)
        );
    }
    if let Err(code) = write_output(out, imported.yaml.as_bytes()) {
        return code;
    }
    let n = imported.skipped.len();
    eprintln!(
        "wrote {}: {} exchanges, agents {}{}",
        report::printable(&out.display().to_string()),
        imported.exchanges,
        imported.agents.join(", "),
        match n {
            0 => String::new(),
            1 => "; 1 thing not in the scripts, listed above and in the file".to_owned(),
            n => format!("; {n} things not in the scripts, listed above and in the file"),
        }
    );
    ExitCode::SUCCESS
}
