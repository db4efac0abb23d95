"""
Both embedding backends on the bundled knowledge base: a one-shot lookup with the ONNX backend
never imports torch, and the torch and ONNX backends give the same evaluation results.
"""

import json
import subprocess
import sys

import pytest

from pipelines.config.settings import load_config
from pipelines.evaluation.run import build_systems, evaluate, load_queries
from pipelines.indexing import run_indexing
from tests.conftest import EVAL_DIR, SAMPLE_KB, state_overrides
from tests.helpers import REPO, child_env, derived_config

DISK_QUERY = "disk almost full on a worker node"

# A one-shot lookup in a child process, reporting what it imported.
_LOOKUP_AND_REPORT = """
import json, sys
from pipelines.cli import main
code = main(["lookup", sys.argv[1], "--compact", *sys.argv[2:]])
loaded = sorted(n for n, m in sys.modules.items() if m is not None and (n == "torch" or n.startswith("torch.")))
print(json.dumps({"code": code, "torch_modules": loaded, "sentence_transformers": "sentence_transformers" in sys.modules}))
"""


def _child_lookup(state, *overrides: str, importtime: bool = False) -> tuple[dict, dict, str]:
    args = [sys.executable, *(["-X", "importtime"] if importtime else []), "-c", _LOOKUP_AND_REPORT]
    done = subprocess.run(
        [*args, DISK_QUERY, f"paths.state_dir={state}", "mlflow=off", *overrides],
        cwd=REPO,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result, report = (json.loads(line) for line in done.stdout.strip().splitlines()[-2:])
    return result, report, done.stderr


def test_one_shot_lookup_with_onnx_never_imports_torch(served_index):
    result, report, stderr = _child_lookup(served_index, "embedder.backend=onnx", importtime=True)
    assert report == {"code": 0, "torch_modules": [], "sentence_transformers": False}
    # `import time: self | cumulative | name`; the refused `import torch` of Haystack shows as a line of a few µs.
    rows = [line.split(":", 1)[1].split("|") for line in stderr.splitlines() if line.startswith("import time:")]
    cumulative_us = {name.strip(): int(total) for _, total, name in rows[1:]}
    assert "onnxruntime" in cumulative_us and cumulative_us.get("torch", 0) < 1000
    assert not [name for name in cumulative_us if name.startswith(("torch.", "sentence_transformers", "transformers"))]
    assert result["found"] and result["evidenceBlocks"][0]["source"] == "disk/disk-full.md"


def test_one_shot_lookup_with_torch_still_works_and_loads_it(served_index):
    result, report, _ = _child_lookup(served_index, "embedder.backend=torch")
    assert report["code"] == 0 and "torch" in report["torch_modules"] and report["sentence_transformers"]
    assert result["evidenceBlocks"][0]["source"] == "disk/disk-full.md"


@pytest.fixture(scope="module")
def torch_indexed(tmp_path_factory):
    """knowledge/ indexed with the torch backend (its own state folder)."""
    state = tmp_path_factory.mktemp("torch-backend")
    cfg = load_config(state_overrides(state, f"kb.path={SAMPLE_KB}", "embedder.backend=torch"))
    run_indexing(cfg, rebuild=True)
    return cfg


def _answers(cfg):
    queries = load_queries(EVAL_DIR / "sample-kb.jsonl")
    evaluation = evaluate(cfg, queries, build_systems(cfg, baselines=True))
    ranked = {name: [(a.sources, a.answered) for a in answers] for name, answers in evaluation.answers.items()}
    return evaluation.report["systems"], ranked


def test_torch_and_onnx_backends_give_the_same_evaluation(torch_indexed):
    torch_report, torch_ranked = _answers(torch_indexed)
    onnx_report, onnx_ranked = _answers(derived_config(torch_indexed, "embedder.backend=onnx"))
    assert onnx_ranked == torch_ranked
    for report in (torch_report, onnx_report):
        for metrics in report.values():
            metrics.pop("latency_p50_ms"), metrics.pop("latency_p95_ms")  # timings differ, every metric is equal
    assert onnx_report == torch_report


def test_switching_between_torch_and_onnx_re_embeds_nothing(torch_indexed):
    report = run_indexing(derived_config(torch_indexed, "embedder.backend=onnx"))
    assert report.chunks_written == 0 and report.added == [] and report.updated == []
    assert len(report.unchanged) > 0
