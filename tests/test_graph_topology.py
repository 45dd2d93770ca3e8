"""The graph's topology is pinned by a snapshot; Studio's module carries no checkpointer."""

from pathlib import Path

from kernelskill.graph.builder import builder, graph

SNAPSHOT = Path(__file__).parent / "snapshots" / "graph.mmd"
ROLES = {"generator", "reviewer", "diagnoser", "feature_extractor", "planner", "optimizer"}


def test_six_roles():
    assert set(builder.nodes) == ROLES


def test_topology_snapshot():
    mermaid = graph.get_graph().draw_mermaid()
    if not SNAPSHOT.exists():
        SNAPSHOT.write_text(mermaid)
        raise AssertionError(f"no snapshot: wrote {SNAPSHOT}; review and commit it")
    assert mermaid == SNAPSHOT.read_text(), "graph topology changed: update tests/snapshots/graph.mmd"


def test_edges():
    edges = {(e.source, e.target, e.conditional) for e in graph.get_graph().edges}
    assert ("__start__", "generator", False) in edges
    assert ("generator", "reviewer", False) in edges
    for target in ("diagnoser", "feature_extractor", "__end__"):
        assert ("reviewer", target, True) in edges
    assert ("diagnoser", "reviewer", False) in edges
    assert ("feature_extractor", "planner", False) in edges
    assert ("planner", "optimizer", True) in edges and ("planner", "__end__", True) in edges
    assert ("optimizer", "reviewer", False) in edges


def test_studio_graph_has_no_checkpointer():
    assert graph.checkpointer is None
