//! Turn throughput of the five workloads of DESIGN §7, with the invariant observer on (the default)
//! and off. Throughput is in model turns (LLM calls); the starting point of each run is copied
//! outside the timed region.
//!
//! `cargo bench --bench turns`; `agentsim bench` measures the same workloads without criterion.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};

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
                b.iter_batched_ref(
                    || prepared.fresh(),
                    |sim| prepared.run(sim).expect("the workload runs"),
                    BatchSize::SmallInput,
                )
            });
        }
        group.finish();
    }
}

criterion_group!(benches, turns);
criterion_main!(benches);
