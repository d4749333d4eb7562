//! The agent tree as a reader sees it once agents ended: the ended nodes the runtime keeps
//! (`Runtime::ended_agents`), run from scenario files with the ring of ended places made small.

use agentsim::scenario;

/// A workflow agent's `metadata.subagents` stays with its node once it ended, whether the node
/// takes a new place among the ended ones or reuses the oldest's.
#[test]
fn an_ended_workflow_node_keeps_its_metadata_in_a_new_or_reused_place() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("scenarios/spec/workflow-six-steps-with-two-children.yaml");
    for ended_nodes in [64, 2] {
        let mut s = scenario::load(&path).unwrap();
        s.config.ended_nodes = ended_nodes;
        let mut sim = s.sim(0, true, false);
        sim.user("default", "plan a night in town").unwrap();
        sim.run_until_idle().unwrap();
        let main = sim
            .runtime()
            .ended_agents()
            .next_back()
            .expect("main ended last")
            .clone();
        assert_eq!(&*main.name, "main", "ring of {ended_nodes}");
        let children = main.metadata["subagents"].as_array().map(Vec::len);
        assert_eq!(
            children,
            Some(2),
            "ring of {ended_nodes}: {:?}",
            main.metadata
        );
        // Its children ran the same workflow and started none.
        let child = sim.runtime().ended_agents().next().unwrap();
        assert_eq!(
            child.metadata["subagents"],
            serde_json::json!([]),
            "ring of {ended_nodes}"
        );
    }
}

/// A node without metadata that reuses the place of one with metadata does not inherit it.
#[test]
fn a_reused_ended_place_keeps_no_metadata_of_its_former_node() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("scenarios/spec/workflow-batch-agent-questions-get-no-answer.yaml");
    let mut s = scenario::load(&path).unwrap();
    // One place: the workflow child's node ends first, then main's takes its place.
    s.config.ended_nodes = 1;
    let mut sim = s.sim(0, true, false);
    sim.user("default", "we need a notice").unwrap();
    sim.run_until_idle().unwrap();
    let ended: Vec<_> = sim.runtime().ended_agents().collect();
    assert_eq!(ended.len(), 1);
    assert_eq!(&*ended[0].name, "main");
    assert!(ended[0].metadata.is_empty(), "{:?}", ended[0].metadata);
}
