//! CPU time of agentsim and of the runtimes it ran, for the benchmarks' share of the time spent
//! in agentsim (`bench runtime`, `explore --runtime`).

/// CPU seconds (user + system) of this process and of its reaped children so far.
pub(crate) fn cpu() -> (f64, f64) {
    fn seconds(who: i32) -> f64 {
        // SAFETY: getrusage fills the struct it is given; a zeroed rusage is a valid value.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        if unsafe { libc::getrusage(who, &mut usage) } != 0 {
            return 0.0;
        }
        let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
        t(usage.ru_utime) + t(usage.ru_stime)
    }
    (seconds(libc::RUSAGE_SELF), seconds(libc::RUSAGE_CHILDREN))
}
