"""A model folder's calibration: applied on load, a user override wins, shown where it came from; the verdict's rule."""

import json
import os
from pathlib import Path

import pytest

from components.common.embedding_models import resolve_model
from components.common.onnx_export import export_dir
from pipelines.adapt.calibrate import map_threshold
from pipelines.config.model_calibration import CalibrationError, calibration_in_force
from pipelines.config.settings import load_config
from tests.helpers import lookup_with, run_cli, stderr_lines

PACKAGED = "packaged:all-MiniLM-L6-v2"
QUERY = "disk almost full"
THRESHOLD = "retrieval.evidence_threshold"


def _model_with_calibration(folder: Path, thresholds: dict[str, float]) -> Path:
    """The packaged model's files (linked, not copied) in a folder of its own, with a calibration.json."""
    source = Path(resolve_model(PACKAGED))
    for path in source.rglob("*"):
        if path.is_file():
            link = folder / path.relative_to(source)
            link.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(path, link)
    calibration = {"method": "score_map", "thresholds": thresholds, "model_revision": ""}  # no adapt.json: ""
    (folder / "calibration.json").write_text(json.dumps(calibration))
    return folder


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory):
    """The small sample KB indexed with a model folder whose calibration asks far more of evidence."""
    from pipelines.indexing import run_indexing
    from tests.conftest import SAMPLE_KB, state_overrides

    root = tmp_path_factory.mktemp("calibrated")
    model = _model_with_calibration(root / "model", {"retrieval.evidence_threshold": 0.97})
    cfg = load_config(state_overrides(root / "state", f"kb.path={SAMPLE_KB}", f"embedder.model={model}"))
    run_indexing(cfg, rebuild=True)
    return cfg, model


def test_the_model_folders_calibration_decides_no_evidence_and_a_user_override_wins(calibrated):
    cfg, model = calibrated
    assert cfg.retrieval.evidence_threshold == 0.97
    assert cfg.retrieval.calibration == str(model / "calibration.json")
    uses_model = f"embedder.model={model}"  # lookup_with composes the config again from these overrides
    result, outputs = lookup_with(cfg, QUERY, uses_model, include=("retriever",))
    assert not result.found  # the calibration's bar: the packaged thresholds would answer (below)
    assert outputs["retriever"]["retrieval_trace"].calibration == str(model / "calibration.json")
    overridden, _ = lookup_with(cfg, QUERY, uses_model, "retrieval.evidence_threshold=0.35")
    assert overridden.found
    in_force = calibration_in_force(load_config([f"embedder.model={model}", "retrieval.evidence_threshold=0.35"]))
    assert in_force["overridden"] == ["retrieval.evidence_threshold"] and in_force["method"] == "score_map"
    unused, _ = lookup_with(cfg, QUERY, uses_model, "retrieval.calibration=conf")
    assert unused.found


def test_cfg_shows_where_the_thresholds_came_from(calibrated):
    _, model = calibrated
    shown = run_cli("lookup", "--cfg", f"embedder.model={model}")
    assert shown.returncode == 0, shown.stderr
    assert f"calibration: {model / 'calibration.json'}" in shown.stdout and "evidence_threshold: 0.97" in shown.stdout
    assert "calibration: conf" in run_cli("lookup", "--cfg").stdout


def test_health_names_the_calibration_in_force(calibrated):
    from pipelines.serving.health import HealthCheck

    cfg, model = calibrated
    overridden = load_config(
        [f"embedder.model={model}", "retrieval.evidence_threshold=0.4", f"paths.state_dir={cfg.paths.state_dir}"]
    )
    shown = HealthCheck(overridden, trace_store=None, auth=False).config()
    assert shown["calibration"] == {
        "source": str(model / "calibration.json"),
        "method": "score_map",
        "overridden": ["retrieval.evidence_threshold"],
    }
    assert shown["thresholds"]["evidence"] == 0.4


def test_a_bad_calibration_file_is_one_clear_error(tmp_path):
    bad = tmp_path / "calibration.json"
    bad.write_text(json.dumps({"thresholds": {"retrieval.top_k": 3}}))
    with pytest.raises(CalibrationError, match="a calibration sets"):
        load_config([f"retrieval.calibration={bad}"])
    bad.write_text(json.dumps({"thresholds": {"retrieval.evidence_threshold": 3}}))
    with pytest.raises(CalibrationError, match=r"not a number in \[0, 1\]"):
        load_config([f"retrieval.calibration={bad}"])
    result = run_cli("lookup", "--cfg", f"retrieval.calibration={tmp_path / 'missing.json'}")
    assert result.returncode == 2 and len(stderr_lines(result)) == 1, result.stderr


def test_an_adapted_folders_description_does_not_make_a_new_onnx_export(tmp_path):
    model = _model_with_calibration(tmp_path / "model", {})
    (model / "adapt.json").write_text("{}")
    before = export_dir(model)
    (model / "calibration.json").write_text(json.dumps({"thresholds": {"retrieval.evidence_threshold": 0.5}}))
    (model / "README.md").unlink()
    (model / "README.md").write_text("# Knowledge-base adapted embedding model\n\n## Verdict\n")
    assert export_dir(model) == before


def test_the_score_map_moves_a_threshold_to_the_same_share_of_texts():
    import numpy as np

    base = np.array([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8])
    adapted = base + 0.15  # the same order, a scale shifted up
    weights = np.full(len(base), 1 / len(base))
    assert map_threshold(base, adapted, weights, 0.35) == pytest.approx(0.55)
    assert map_threshold(base, adapted, weights, 0.0) == pytest.approx(0.25)


def _verdict(base_hits: int, adapted_hits: int, base_rejected: int, adapted_rejected: int):
    """The shared rule's verdict on 40 KB queries and 40 off-topic texts, answers made to order."""
    from pipelines.adapt.verdict import KB_SET, decide
    from pipelines.evaluation.run import EvalQuery, Ranked

    kb = [EvalQuery(f"q{i}", {"a.md"}, "answerable") for i in range(40)]
    off = [EvalQuery(f"o{i}", set(), "off_topic") for i in range(40)]
    sets = {KB_SET: kb, "offtopic": off}

    def answers(hits: int, rejected: int) -> dict:
        ranked = [Ranked(["a.md"] if i < hits else ["b.md"], True) for i in range(40)]
        return {KB_SET: ranked, "offtopic": [Ranked([], i >= rejected) for i in range(40)]}

    return decide(
        load_config(["mlflow=off"]),
        sets,
        {"base": answers(base_hits, base_rejected), "adapted": answers(adapted_hits, adapted_rejected)},
        "embedder.model=DIR",
    )


def test_a_guard_failure_makes_the_verdict_refuse_a_model_that_ranks_better():
    leaky = _verdict(base_hits=20, adapted_hits=36, base_rejected=40, adapted_rejected=38)  # 0.95: one point under
    assert leaky.recommended is None and "no_evidence_rate@offtopic>=0.99" in leaky.reason
    assert _verdict(base_hits=20, adapted_hits=36, base_rejected=40, adapted_rejected=40).recommended is not None
    no_gain = _verdict(base_hits=20, adapted_hits=21, base_rejected=40, adapted_rejected=40)
    assert no_gain.recommended is None and "not better" in no_gain.reason


def test_adapt_writes_a_calibration_judges_the_model_and_its_onnx_export_loads(small_kb, make_config, tmp_path):
    """The smallest real training: one step of one pair, then the calibration and the verdict on a small guard."""
    from components.common.embedding_models import load_onnx_encoder
    from pipelines.adapt.run import AdaptOptions, adapt_model
    from pipelines.adapt.verdict import NotRecommendedError

    guard = tmp_path / "guard.jsonl"
    guard.write_text(
        "\n".join(json.dumps({"query": q, "relevant": []}) for q in ("Redis is down", "Kafka consumer lag high"))
    )
    output = tmp_path / "model"
    options = AdaptOptions(
        kb_path=str(small_kb),
        output=str(output),
        batch_size=1,
        max_steps=1,
        calibrate=True,
        verdict=True,
        guard_sets=[str(guard)],
        calibration_method="score_map",
    )
    lines: list[str] = []
    try:
        adapt_model(make_config(), options, say=lines.append)
        recommended = True
    except NotRecommendedError as exc:
        recommended = False
        assert "marked as not recommended" in str(exc)
    calibration = json.loads((output / "calibration.json").read_text())
    assert (
        set(calibration["thresholds"]) == set(calibration["base_thresholds"]) and calibration["method"] == "score_map"
    )
    assert calibration["verdict"]["recommended"] is recommended
    card = (output / "README.md").read_text()
    assert "## Verdict" in card and ("Verdict: recommended" if recommended else "Verdict: not recommended") in card
    assert any(line.startswith("  guard ") and "adapted" in line for line in lines), lines
    vectors = load_onnx_encoder(str(output), "onnx").encode(["disk almost full"])
    assert vectors.shape == (1, 384)
    assert load_config([f"embedder.model={output}"]).retrieval.calibration == str(output / "calibration.json")


def _calibration(path: Path, **fields) -> Path:
    path.write_text(json.dumps({"method": "score_map", "thresholds": {}, "model_revision": "", **fields}))
    return path


def test_a_calibration_is_refused_for_a_boolean_an_unknown_method_or_another_model(tmp_path):
    with pytest.raises(CalibrationError, match=r"evidence_threshold=True, not a number in \[0, 1\]"):
        load_config([f"retrieval.calibration={_calibration(tmp_path / 'c.json', thresholds={THRESHOLD: True})}"])
    with pytest.raises(CalibrationError, match="method 'magic'; known methods: packaged_decides, score_map"):
        load_config([f"retrieval.calibration={_calibration(tmp_path / 'c.json', method='magic')}"])
    unnamed = tmp_path / "unnamed.json"
    unnamed.write_text(json.dumps({"method": "score_map", "thresholds": {}}))
    with pytest.raises(CalibrationError, match="names no model_revision"):
        load_config([f"retrieval.calibration={unnamed}"])
    adapted = _model_with_calibration(tmp_path / "adapted", {THRESHOLD: 0.9})
    (adapted / "adapt.json").write_text('{"train_seconds": 1}')  # a model adapt trained: a revision of its own
    with pytest.raises(CalibrationError, match=f"was fitted for the model of revision none, not for {adapted}"):
        load_config([f"embedder.model={adapted}"])
    from components.common.embedding_models import model_revision

    _calibration(adapted / "calibration.json", model_revision=model_revision(str(adapted)))
    assert load_config([f"embedder.model={adapted}"]).retrieval.calibration == str(adapted / "calibration.json")
    with pytest.raises(CalibrationError, match="not for packaged:all-MiniLM-L6-v2"):  # its file, another model
        load_config([f"retrieval.calibration={adapted / 'calibration.json'}"])


def test_a_missing_decision_model_is_named_by_the_key_or_file_that_set_it(tmp_path):
    decides = _calibration(tmp_path / "c.json", method="packaged_decides", decision_model="/no/such/model")
    with pytest.raises(CalibrationError, match=rf"^{decides}'s decision_model: no model folder at /no/such/model"):
        load_config([f"retrieval.calibration={decides}"])
    with pytest.raises(CalibrationError, match=r"^embedder.decision_model: no model folder at /no/such/model"):
        load_config(["embedder.decision_model=/no/such/model"])
    result = run_cli("lookup", "disk full", f"retrieval.calibration={decides}")
    assert result.returncode == 2 and stderr_lines(result) == [
        f"knowledge: error: {decides}'s decision_model: no model folder at /no/such/model (a sentence-transformers "
        "folder, e.g. what `knowledge adapt` wrote, or packaged:NAME)"
    ], result.stderr


def test_health_compares_the_config_with_the_calibration_it_applied_not_a_later_file(tmp_path):
    from pipelines.serving.health import HealthCheck

    model = _model_with_calibration(tmp_path / "model", {THRESHOLD: 0.9, "retrieval.high_relevance": 0.95})
    cfg = load_config([f"embedder.model={model}", f"paths.state_dir={tmp_path / 'state'}"])
    _calibration(model / "calibration.json", thresholds={THRESHOLD: 0.5})  # changed on disk while serving
    assert HealthCheck(cfg, trace_store=None, auth=False).config()["calibration"]["overridden"] == []


def test_a_model_adapt_did_not_recommend_is_said_so_everywhere_it_is_loaded(tmp_path):
    from pipelines.serving.health import HealthCheck

    model = _model_with_calibration(tmp_path / "model", {})
    verdict = {"recommended": False, "reason": "no_evidence_rate@offtopic>=0.99 fails"}
    _calibration(model / "calibration.json", verdict=verdict)
    cfg = load_config([f"embedder.model={model}", f"paths.state_dir={tmp_path / 'state'}"])
    shown = HealthCheck(cfg, trace_store=None, auth=False).config()["calibration"]
    assert shown["verdict"] == "not recommended: no_evidence_rate@offtopic>=0.99 fails"
    printed = run_cli("lookup", "--cfg", f"embedder.model={model}")
    assert printed.returncode == 0, printed.stderr
    assert f"# embedder.model {model}: not recommended: no_evidence_rate@offtopic>=0.99 fails" in printed.stdout
    assert stderr_lines(printed) == [
        f"note: embedder.model {model} was judged by `knowledge adapt`: not recommended: "
        "no_evidence_rate@offtopic>=0.99 fails"
    ]
    from pipelines.lookup import build_lookup_pipeline

    writer = build_lookup_pipeline(cfg).get_component("trace_writer")
    assert writer.model_verdict == shown["verdict"]  # the `model_verdict` tag of every MLflow trace
