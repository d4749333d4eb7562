//! What several commands share: the async runtime and stop signal of the servers, and writing a
//! file without overwriting one.

use std::path::{Path, PathBuf};
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

/// Writes `contents` to a file of `dir` named after `stem` that did not exist: `stem.yaml`, or
/// `stem-2.yaml`, `stem-3.yaml`, ... A file already there is never overwritten. Returns the path
/// written and, if `stem.yaml` was taken, that path.
pub(super) fn write_new(
    dir: &Path,
    stem: &str,
    contents: &str,
) -> std::io::Result<(PathBuf, Option<PathBuf>)> {
    std::fs::create_dir_all(dir)?;
    let first = dir.join(format!("{stem}.yaml"));
    for n in 1..10_000u32 {
        let path = if n == 1 {
            first.clone()
        } else {
            dir.join(format!("{stem}-{n}.yaml"))
        };
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path);
        match file {
            Ok(mut f) => {
                std::io::Write::write_all(&mut f, contents.as_bytes())?;
                let taken = (n > 1).then_some(first);
                return Ok((path, taken));
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(std::io::Error::other(format!(
        "every name from {stem}.yaml to {stem}-9999.yaml is taken"
    )))
}
