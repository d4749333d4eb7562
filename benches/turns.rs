//! Turn throughput of the five workloads of DESIGN §7, with the invariant observer on (the default)
//! and off. Throughput is in model turns (LLM calls). Each run is copied from the starting point,
//! run and dropped in turn, as `explore` does; only the run is timed.
//!
//! `cargo bench --bench turns`; `agentsim bench` measures the same workloads without criterion.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};

use agentsim::workloads::Workload;

fn turns(c: &mut Criterion) {
    for workload in Workload::ALL {
        let mut group = c.benchmark_group(workload.name());
        for observer in [true, false] {
            let prepared = workload.prepare(observer);
            group.throughput(Throughput::Elements(prepared.turns()));
            let id = if observer {
                "observer-on"
            } else {
                "observer-off"
            };
            group.bench_function(id, |b| {
                b.iter_custom(|iters| {
                    let mut measured = Duration::ZERO;
                    for _ in 0..iters {
                        let mut sim = prepared.fresh();
                        let start = Instant::now();
                        black_box(prepared.run(&mut sim).expect("the workload runs"));
                        measured += start.elapsed();
                    }
                    measured
                })
            });
        }
        group.finish();
    }
}

criterion_group!(benches, turns);
criterion_main!(benches);
