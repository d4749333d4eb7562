//! The integration tests, gathered into one test binary so that the crate is linked once rather
//! than once per file (matklad, "Delete Cargo Integration Tests"). Each file of `tests/it/` is a
//! module here: a new test file goes beside the others and gets its `mod` line below (kept in
//! alphabetical order). Run one file's tests with `cargo test --test it <module>::`, e.g.
//! `cargo test --test it cli::`. The data-driven scenario harness stays its own binary
//! (`tests/scenarios.rs`, `harness = false`).

mod architecture;
mod bench_compare;
mod check_runtime;
mod cli;
mod cli_explore;
mod cli_honest;
mod docs;
mod explore;
mod explore_determinism;
mod explore_faults;
mod explore_reset;
mod explore_runtime;
mod fuzz_loader;
mod fuzz_runtime;
mod harness;
mod honest;
mod http_model;
mod import;
mod import_context;
mod import_props;
mod loader;
mod mock_llm;
mod mock_llm_errors;
mod mock_llm_faults;
mod mock_llm_history;
mod mock_llm_reasoning;
mod mock_llm_routing;
mod mock_llm_wrong_url;
mod outside_run;
mod props;
mod question_store;
mod record;
mod record_runtime;
mod record_thinking;
mod restart;
mod runtime_config;
mod serve;
mod serve_callbacks;
mod serve_durable;
mod serve_safety;
mod serve_scale;
mod serve_stores;
mod serve_support;
mod stream_shapes;
mod support;
mod tokio_driver;
mod tree;
mod wire_roundtrip;
