//! CPU time of agentsim and of the runtimes it ran, for the benchmarks' share of the time spent
//! in agentsim (`bench runtime`, `explore --runtime`).

/// CPU seconds (user + system) of this process and of its reaped children so far.
pub(crate) fn cpu() -> (f64, f64) {
    use super::bench_cpu::rusage_seconds;
    (
        rusage_seconds(libc::RUSAGE_SELF),
        rusage_seconds(libc::RUSAGE_CHILDREN),
    )
}
