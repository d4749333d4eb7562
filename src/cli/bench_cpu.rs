//! CPU time for `agentsim bench`: of this process (`bench runtime`), and of each mock server
//! `bench mock-llm` measures, so that it can report CPU time per request beside requests per
//! second: agentsim's server threads (this process less the load generator's thread), or another
//! server's process by its pid (`--against-pid`, read from `/proc`, Linux only).

use std::net::SocketAddr;
use std::time::Duration;

use agentsim::mock_llm::load::{self, Load, Row};
use agentsim::wire::Provider;

/// CPU seconds (user + system) of `who` (`RUSAGE_SELF`, `RUSAGE_THREAD`, `RUSAGE_CHILDREN`), or
/// 0 when the kernel does not say.
pub(crate) fn rusage_seconds(who: i32) -> f64 {
    // SAFETY: getrusage fills the struct it is given; a zeroed rusage is a valid value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(who, &mut usage) } != 0 {
        return 0.0;
    }
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    t(usage.ru_utime) + t(usage.ru_stime)
}

/// Whose CPU time a measured server's requests cost.
#[derive(Clone, Copy, Debug)]
pub(crate) enum ServerCpu {
    /// agentsim's server, on its own threads in this process: the process's CPU time less the
    /// calling thread's (the load generator runs on the calling thread, alone).
    ThisProcessButMe,
    /// Another server's process, from `/proc/PID/stat`.
    Process(u32),
    /// Not known (a peer without `--against-pid`).
    Unknown,
}

impl ServerCpu {
    /// CPU seconds so far, or None when they cannot be read.
    pub(crate) fn seconds(self) -> Option<f64> {
        match self {
            ServerCpu::ThisProcessButMe => {
                Some(rusage_seconds(libc::RUSAGE_SELF) - rusage_seconds(libc::RUSAGE_THREAD))
            }
            ServerCpu::Process(pid) => process_seconds(pid),
            ServerCpu::Unknown => None,
        }
    }
}

/// User + system CPU seconds of process `pid` from `/proc/PID/stat` (fields 14 and 15, in clock
/// ticks), or None when it cannot be read (not Linux, no such process).
fn process_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let ticks = stat_ticks(&stat)?;
    // SAFETY: sysconf reads a configuration value; it has no preconditions.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (per_second > 0).then(|| ticks as f64 / per_second as f64)
}

/// utime + stime of a `/proc/PID/stat` line. The command name (field 2) is in parentheses and
/// may hold spaces, so fields are counted after its closing parenthesis.
fn stat_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    // After the name: state is field 3, so utime (14) is the 12th and stime (15) the 13th.
    let utime: u64 = fields.nth(11)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

/// A server to measure, and whose CPU time it spends.
pub(crate) struct Server {
    pub(crate) name: String,
    pub(crate) addr: SocketAddr,
    pub(crate) cpu: ServerCpu,
}

/// One measured row and the server's CPU time per request in it (µs), when known.
pub(crate) struct CpuRow {
    pub(crate) row: Row,
    pub(crate) cpu_us_per_request: Option<f64>,
}

/// Measures every server in every mode, one at a time, as [`load::compare`] does (a probe that
/// the server gives the benchmark's reply, a short unmeasured warm-up, the measured run), and
/// reads each server's CPU time just before and after its measured run.
pub(crate) async fn compare(
    servers: &[Server],
    modes: &[(Provider, bool)],
    connections: usize,
    duration: Duration,
    mut progress: impl FnMut(&CpuRow),
) -> Result<Vec<CpuRow>, String> {
    let mut rows = Vec::new();
    for &(provider, stream) in modes {
        for server in servers {
            let target = load::Target {
                name: server.name.clone(),
                addr: server.addr,
            };
            // Probe and warm-up: `load::compare` on a short duration (it warms up for as long as
            // it measures), its figures dropped.
            let warm = duration.min(Duration::from_millis(250));
            load::compare(&[target], &[(provider, stream)], connections, warm, |_| {}).await?;
            let load = Load {
                addr: server.addr,
                provider,
                stream,
                connections,
                duration,
            };
            let before = server.cpu.seconds();
            let measured = load::run(&load).await;
            let after = server.cpu.seconds();
            let cpu_us_per_request = match (before, after) {
                (Some(b), Some(a)) if measured.requests > 0 => {
                    Some((a - b).max(0.0) * 1e6 / measured.requests as f64)
                }
                _ => None,
            };
            let row = CpuRow {
                row: Row {
                    server: server.name.clone(),
                    api: load::api_name(provider),
                    stream,
                    measured,
                },
                cpu_us_per_request,
            };
            progress(&row);
            rows.push(row);
        }
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_ticks_reads_utime_and_stime_after_a_name_with_spaces() {
        let stat = "4242 (node server) S 1 4242 4242 0 -1 4194304 100 0 0 0 250 31 0 0 20 0 7 0 1";
        assert_eq!(stat_ticks(stat), Some(281));
        assert_eq!(stat_ticks("4242 (x) S 1"), None);
        assert_eq!(stat_ticks("no parenthesis"), None);
    }

    #[test]
    fn this_process_but_me_counts_other_threads_only() {
        let before = ServerCpu::ThisProcessButMe.seconds().unwrap();
        // Burn 0.1 s of CPU on another thread (bounded in wall time, the machine may be busy):
        // it counts.
        let burnt = std::thread::spawn(|| {
            let start = std::time::Instant::now();
            let mut x = 0u64;
            while rusage_seconds(libc::RUSAGE_THREAD) < 0.1
                && start.elapsed() < Duration::from_secs(20)
            {
                for _ in 0..10_000 {
                    x = std::hint::black_box(x.wrapping_add(1));
                }
            }
            rusage_seconds(libc::RUSAGE_THREAD)
        })
        .join()
        .unwrap();
        assert!(
            burnt >= 0.1,
            "the machine gave the thread {burnt} s in 20 s"
        );
        let after = ServerCpu::ThisProcessButMe.seconds().unwrap();
        assert!(after - before >= 0.09, "{before} -> {after}");
        let own = ServerCpu::Process(std::process::id()).seconds().unwrap();
        assert!(
            own >= after - 0.05,
            "the process's CPU time covers its threads: {own} vs {after}"
        );
    }
}
