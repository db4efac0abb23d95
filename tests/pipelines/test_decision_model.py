"""
Packaged decides, adapted ranks: a model folder whose calibration says `packaged_decides` has the
packaged model decide answer vs no evidence on its own scale, a user's threshold still wins, and
the decision vectors beside the index follow every indexing run.
"""

from pathlib import Path

import pytest

from components.common.decision_scale import DecisionVectors
from pipelines.config.manifest import format_manifest, manifest_status
from pipelines.config.model_calibration import calibration_in_force
from pipelines.config.settings import load_config
from tests.conftest import EVAL_DIR, SAMPLE_KB, state_overrides
from tests.helpers import collection_rows, looks_up, lookup_with, run_cli, shifted_model

PACKAGED = "packaged:all-MiniLM-L6-v2"
OFF_TOPIC = "recipe for sourdough bread with a crispy crust"  # nothing of the sample knowledge base is about baking


@pytest.fixture(scope="module")
def decided(tmp_path_factory):
    """The sample KB indexed with the shifted model, whose calibration lets the packaged model decide."""
    from pipelines.indexing import run_indexing

    root = tmp_path_factory.mktemp("decided")
    model = shifted_model(root / "model")
    cfg = load_config(state_overrides(root / "state", f"kb.path={SAMPLE_KB}", f"embedder.model={model}"))
    run_indexing(cfg, rebuild=True)
    return cfg, model


def test_the_calibration_names_the_deciding_model_and_where_it_came_from(decided):
    cfg, model = decided
    assert cfg.embedder.decision_model == PACKAGED
    assert calibration_in_force(cfg) == {
        "source": str(model / "calibration.json"),
        "method": "packaged_decides",
        "overridden": [],
        "decision_model": PACKAGED,
        "decision_from": str(model / "calibration.json"),
        "decision_scope": "answer",
    }
    vectors = DecisionVectors.load(cfg.embedder.decision_vectors, PACKAGED)
    assert set(vectors.ids) == {row["id"] for row in collection_rows(cfg, ("id",))}


def test_health_and_cfg_show_what_the_decision_model_decides(decided):
    from pipelines.serving.health import HealthCheck

    cfg, model = decided
    all_bars = load_config([f"embedder.model={model}", "embedder.decision_scope=all"])
    shown = HealthCheck(all_bars, trace_store=None, auth=False).config()["calibration"]
    assert shown["decision_model"] == PACKAGED and shown["decision_scope"] == "all"
    printed = run_cli("lookup", "--cfg", f"embedder.model={model}", "embedder.decision_scope=all")
    assert printed.returncode == 0, printed.stderr
    assert f"decision_model: {PACKAGED}" in printed.stdout and "decision_scope: all" in printed.stdout


def test_the_mlflow_trace_names_the_decision_models_scope(decided):
    from components.tracing.trace_summary import retriever_decision

    cfg, model = decided
    _, outputs = lookup_with(cfg, "disk almost full", f"embedder.model={model}", include=("retriever",))
    attributes = retriever_decision(outputs["retriever"], set(), 0, 1)["attributes"]
    assert attributes["calibration"] == f"{model / 'calibration.json'} (decides: {PACKAGED}, scope: answer)"


def test_the_packaged_model_decides_no_evidence_where_the_shifted_scale_would_answer(decided):
    cfg, model = decided
    uses_model = f"embedder.model={model}"
    result, outputs = lookup_with(cfg, OFF_TOPIC, uses_model, "embedder.decision_scope=all", include=("retriever",))
    assert not result.found
    candidates = outputs["retriever"]["candidates"]
    assert candidates and all(c.rank_similarity is not None for c in candidates)
    assert max(c.similarity for c in candidates) < cfg.retrieval.evidence_threshold  # the packaged scale
    assert max(c.rank_similarity for c in candidates) > cfg.retrieval.uncovered_evidence_threshold  # the shifted one
    assert "decides: packaged:all-MiniLM-L6-v2, scope: all" in outputs["retriever"]["retrieval_trace"].calibration
    on_its_own_scale, _ = lookup_with(cfg, OFF_TOPIC, uses_model, "embedder.decision_model=null")
    assert on_its_own_scale.found  # the same model deciding for itself answers the off-topic query
    answerable, _ = lookup_with(cfg, "disk almost full", uses_model)
    assert answerable.found


def test_answer_only_gating_refuses_with_the_packaged_model_and_ranks_on_the_adapted_scale(decided):
    cfg, model = decided
    uses_model = f"embedder.model={model}"
    refused, outputs = lookup_with(cfg, OFF_TOPIC, uses_model, include=("retriever",))
    trace = outputs["retriever"]["retrieval_trace"]
    assert not refused.found and outputs["retriever"]["candidates"] == []
    assert trace.gate_similarity is not None and trace.gate_similarity < cfg.retrieval.evidence_threshold
    assert f"the deciding model's best similarity to any chunk is {trace.gate_similarity:.3f}" in refused.message
    answered, outputs = lookup_with(cfg, "disk almost full", uses_model, include=("retriever",))
    candidates = outputs["retriever"]["candidates"]
    assert answered.found and outputs["retriever"]["retrieval_trace"].gate_similarity is None
    assert all(c.rank_similarity is None for c in candidates)  # evidence and relevanceLevel read the ranking model's
    assert max(c.similarity for c in candidates) > cfg.retrieval.uncovered_evidence_threshold  # the shifted scale


def test_answer_only_gating_changes_no_decision_of_the_packaged_model(tmp_path_factory):
    """The packaged model as both ranking and decision model gives exactly the packaged model's results."""
    from pipelines.evaluation.run import load_queries
    from pipelines.indexing import run_indexing

    root = tmp_path_factory.mktemp("gated")
    cfg = load_config(state_overrides(root / "state", f"kb.path={SAMPLE_KB}", f"embedder.decision_model={PACKAGED}"))
    run_indexing(cfg, rebuild=True)
    queries = [q.query for q in load_queries(EVAL_DIR / "sample-kb.jsonl")]
    queries += [q.query for q in load_queries(EVAL_DIR / "offtopic-alerts.jsonl")[:12]] + [OFF_TOPIC]
    gated_lookup, alone_lookup = looks_up(cfg), looks_up(cfg, "embedder.decision_model=null")
    refused = 0
    for query in queries:
        gated, alone = gated_lookup(query), alone_lookup(query)
        assert _decisions(gated) == _decisions(alone), query
        refused += not alone.found
    assert refused >= 5 and refused < len(queries)  # the set holds both decisions


def _decisions(result) -> tuple:
    blocks = [(b.evidence_key, b.score) for b in result.evidence_blocks]
    return result.found, result.evidence_status, result.relevance_level, result.message, blocks


def test_a_user_threshold_wins_and_applies_on_the_packaged_scale(decided):
    cfg, model = decided
    overrides = (
        f"embedder.model={model}",
        "retrieval.evidence_threshold=0.01",
        "retrieval.uncovered_evidence_threshold=0.01",
    )
    result, _ = lookup_with(cfg, OFF_TOPIC, *overrides)
    assert result.found
    shown = calibration_in_force(load_config([*overrides, f"paths.state_dir={cfg.paths.state_dir}"]))
    assert shown["decision_model"] == PACKAGED and shown["method"] == "packaged_decides"


def test_decision_vectors_follow_incremental_indexing(small_kb, make_config, tmp_path):
    from pipelines.indexing import run_indexing

    cfg = make_config(f"kb.path={small_kb}", f"embedder.decision_model={PACKAGED}")
    run_indexing(cfg)
    path = Path(cfg.embedder.decision_vectors)

    def in_step() -> set[str]:
        ids = set(DecisionVectors.load(path, PACKAGED).ids)
        assert ids == {row["id"] for row in collection_rows(cfg, ("id",))}
        return ids

    first = in_step()
    status = manifest_status(cfg)["decision_vectors"]
    assert status == {"path": str(path), "model": PACKAGED, "vectors": len(first), "in_step": True}
    (small_kb / "cpu" / "runaway-process.md").unlink()
    changed = small_kb / "disk" / "disk-full.md"
    changed.write_text(changed.read_text(encoding="utf-8") + "\n\n## Also\n\nCheck the log rotation first.\n")
    report = run_indexing(cfg)
    assert report.removed and report.updated
    second = in_step()
    assert second != first and not any(key in second for key in first - second)
    path.unlink()
    assert "decision vectors     NOT IN STEP: no decision vectors at" in format_manifest(cfg)
    with pytest.raises(Exception, match=r"no decision vectors at .* run `knowledge index --rebuild`"):
        lookup_with(cfg, "disk almost full", f"kb.path={small_kb}", f"embedder.decision_model={PACKAGED}")
    run_indexing(cfg, rebuild=True)
    assert in_step()


def test_adapts_default_calibration_is_packaged_decides_and_loads(tmp_path):
    from pipelines.adapt.calibrate import calibration_lines, packaged_decides, write_calibration
    from pipelines.adapt.run import AdaptOptions
    from pipelines.config.model_calibration import read_calibration

    assert AdaptOptions().calibration_method == "packaged_decides"
    calibration = packaged_decides(load_config(), str(tmp_path), ["eval/offtopic-alerts.jsonl"])
    path = write_calibration(tmp_path, calibration)
    data = read_calibration(path)
    assert data["method"] == "packaged_decides" and data["decision_model"] == PACKAGED and data["thresholds"] == {}
    assert "decides answer vs no evidence" in calibration_lines(calibration)
    cfg = load_config([f"retrieval.calibration={path}"])
    assert cfg.embedder.decision_model == PACKAGED and cfg.retrieval.evidence_threshold == 0.35
    assert (
        load_config([f"retrieval.calibration={path}", "embedder.decision_model=null"]).embedder.decision_model is None
    )


def test_a_model_folder_without_the_calibration_its_index_needs_is_refused_in_one_line(decided):
    """The index was built for the packaged model to decide: without calibration.json the shifted model would."""
    from pipelines.config.model_calibration import CalibrationError
    from tests.helpers import run_cli, stderr_lines

    cfg, model = decided
    calibration = model / "calibration.json"
    kept = calibration.read_bytes()
    calibration.unlink()
    try:
        overrides = [f"paths.state_dir={cfg.paths.state_dir}", "mlflow=off", f"embedder.model={model}"]
        with pytest.raises(CalibrationError, match=f"model folder {model} has no calibration.json"):
            load_config(overrides)
        for command in (["lookup", "redis primary down"], ["index"], ["serve", "--port", "65431"]):
            result = run_cli(*command, *overrides, timeout=120)  # a served folder would never end: refused first
            lines = stderr_lines(result)
            assert result.returncode == 2 and len(lines) == 1, (command, result.stderr)
            assert "has no calibration.json" in lines[0] and "knowledge adapt" in lines[0], lines
        explicit = load_config([*overrides, f"embedder.decision_model={PACKAGED}"])  # the user says who decides
        assert explicit.embedder.decision_model == PACKAGED
    finally:
        calibration.write_bytes(kept)


def test_a_sweep_or_compare_side_keeps_its_decision_vectors_in_its_own_folder(tmp_path):
    from pipelines.tuning.sweep import index_redirect

    side = [f"embedder.model={shifted_model(tmp_path / 'model')}"]
    redirect = index_redirect(side, str(tmp_path / "state"))
    cfg = load_config([f"paths.state_dir={tmp_path / 'state'}", *side, *redirect])
    own = Path(cfg.l0.index_path).parent
    assert cfg.embedder.decision_model == PACKAGED
    assert Path(cfg.embedder.decision_vectors).parent == own != tmp_path / "state"


def test_decision_vectors_cover_the_collection_at_every_step_of_a_reindex(small_kb, make_config):
    """A server answering while `knowledge index` runs must find a decision vector for every chunk it finds."""
    import contextlib

    from haystack import tracing
    from haystack.tracing.tracer import NullSpan, Tracer

    from pipelines.indexing import run_indexing

    cfg = make_config(f"kb.path={small_kb}", f"embedder.decision_model={PACKAGED}")
    run_indexing(cfg)
    uncovered: dict[str, int] = {}

    class CoverageCheck(Tracer):
        """Before each component runs: the chunks the collection holds that the file has no vector for."""

        @contextlib.contextmanager
        def trace(self, operation_name, tags=None, parent_span=None):
            if operation_name == "haystack.component.run":
                indexed = {row["id"] for row in collection_rows(cfg, ("id",))}
                missing = indexed - set(DecisionVectors.load(cfg.embedder.decision_vectors, PACKAGED).ids)
                uncovered[str((tags or {}).get("haystack.component.name"))] = len(missing)
            yield NullSpan()

        def current_span(self):
            return None

    for path in small_kb.rglob("*.md"):  # every document changes: every chunk is written again
        path.write_text(path.read_text(encoding="utf-8") + "\n\n## Also\n\nWrite down what you did.\n")
    previous = tracing.tracer.actual_tracer
    tracing.enable_tracing(CoverageCheck())
    try:
        run_indexing(cfg)
    finally:
        tracing.enable_tracing(previous)
    assert not any(uncovered.values()), uncovered
    assert {"writer", "decision_writer", "decision_pruner", "l0_writer"} <= set(uncovered)


def test_a_cut_or_zeroed_decision_vectors_file_is_named_as_damaged(decided):
    import numpy as np

    from components.common.decision_scale import DecisionVectorsError
    from tests.helpers import run_cli

    cfg, model = decided
    path = Path(cfg.embedder.decision_vectors)
    kept = path.read_bytes()
    overrides = [f"paths.state_dir={cfg.paths.state_dir}", "mlflow=off", f"embedder.model={model}"]
    try:
        path.write_bytes(kept[: len(kept) // 2])  # cut, as a full disk or a killed copy leaves it
        with pytest.raises(DecisionVectorsError, match=rf"^the decision vectors {path} are damaged .*`knowledge index"):
            DecisionVectors.load(path, PACKAGED)
        status = run_cli("index", "--status", *overrides, timeout=120)
        assert status.returncode == 0, status.stderr
        assert f"NOT IN STEP: the decision vectors {path} are damaged" in status.stdout
        with pytest.raises(Exception, match=f"the decision vectors {path} are damaged"):  # this process holds the db
            lookup_with(cfg, "disk almost full", f"embedder.model={model}")
        path.write_bytes(kept)
        vectors = DecisionVectors.load(path, PACKAGED)
        DecisionVectors(PACKAGED, vectors.ids, np.zeros_like(vectors.vectors)).save(path)
        with pytest.raises(DecisionVectorsError, match="damaged .*not unit vectors"):
            DecisionVectors.load(path, PACKAGED)
    finally:
        path.write_bytes(kept)
