"""The result-size measurement of the two views (`python -m pipelines.bench.view_size`)."""

from pipelines.bench.view_size import format_sizes, measure


def test_the_agent_view_is_measured_smaller_than_the_full_result(sample_cfg):
    queries = ["disk almost full on a worker node", "how do I bake sourdough bread"]
    sizes = measure(sample_cfg, queries)
    assert [len(sizes[view]["tokens"]) for view in ("full", "agent")] == [2, 2]
    assert all(a < f for a, f in zip(sizes["agent"]["tokens"], sizes["full"]["tokens"], strict=True))
    report = format_sizes(sizes, "two queries", len(queries), sample_cfg.embedder.model)
    assert "view=full" in report and "view=agent" in report
