"""
Cold start of a one-shot `knowledge lookup` (a fresh process each time) beside the bare imports
its embedding backend cannot do without (`BARE_IMPORTS`): Haystack, pymilvus and Milvus Lite, with
torch + sentence-transformers for the torch backend, onnxruntime + tokenizers (torch kept out) for the ONNX ones.
Both run as subprocesses, alternating, so machine load weighs on both alike.
"""

import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from components.common.embedding_models import DEFAULT_MODEL

REPO = Path(__file__).resolve().parents[2]
COLD_RATIO_TARGET = 1.3
_STACK = "import haystack, pymilvus, milvus_lite"
BARE_IMPORTS = {
    "torch": f"import torch, sentence_transformers; {_STACK}",
    "onnx": f"import sys; sys.modules['torch'] = None; import onnxruntime, tokenizers; {_STACK}",
}
BARE_IMPORT_LABELS = {
    "torch": "import torch + sentence_transformers",
    "onnx": "import onnxruntime + haystack + pymilvus",
}


def bare_imports_of(backend: str) -> str:
    return BARE_IMPORTS["torch" if backend == "torch" else "onnx"]


COLD_QUERY = "disk almost full on a worker node"


def _env() -> dict[str, str]:
    env = dict(os.environ)
    # The subprocess runs this checkout's code, whatever is installed in the interpreter.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")
    return env


def run_seconds(args: Sequence[str], timeout_s: float = 600.0) -> float:
    """Wall seconds of `python ARGS` in a fresh process; a failure raises with its last stderr line."""
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, *args], cwd=REPO, env=_env(), capture_output=True, text=True, timeout=timeout_s, check=False
    )
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"`python {' '.join(args)}` exited {done.returncode}: {last}")
    return seconds


def bench_cold_start(
    runs: int = 3,
    echo: Callable[[str], None] = print,
    backend: str = "onnx",
    model: str = DEFAULT_MODEL,
    decision_model: str | None = None,
) -> dict[str, Any]:
    """
    Median wall seconds of `runs` one-shot lookups and `runs` bare imports (sample KB, MLflow off),
    indexed and looked up with `model` (and `decision_model` deciding, if any): the cold start of
    the model the user configured, an adapted one with its decision model too.
    """
    bare_import = ("-c", bare_imports_of(backend))
    models = [f"embedder.model={model}", f"embedder.decision_model={decision_model or 'null'}"]
    with tempfile.TemporaryDirectory(prefix="knowledge-bench-cold-") as tmp:
        state = [f"paths.state_dir={tmp}", "mlflow=off", *models]
        index_s = run_seconds(["-m", "pipelines.cli", "index", "--kb", str(REPO / "knowledge"), *state])
        echo(f"cold start: sample KB indexed in a subprocess ({index_s:.1f} s); {runs} run(s) of each, alternating")
        lookup = ["-m", "pipelines.cli", "lookup", COLD_QUERY, "--compact", *state, f"embedder.backend={backend}"]
        times: dict[str, list[float]] = {"bare_import": [], "lookup": []}
        for number in range(runs):
            order = ("bare_import", "lookup") if number % 2 == 0 else ("lookup", "bare_import")
            for side in order:
                times[side].append(run_seconds(bare_import if side == "bare_import" else lookup))
    medians = {side: statistics.median(values) for side, values in times.items()}
    ratio = medians["lookup"] / medians["bare_import"]
    return {
        "backend": backend,
        "model": model,
        "decision_model": decision_model,
        "bare_import_label": BARE_IMPORT_LABELS["torch" if backend == "torch" else "onnx"],
        "runs": runs,
        "lookup_s": [round(t, 2) for t in times["lookup"]],
        "bare_import_s": [round(t, 2) for t in times["bare_import"]],
        "lookup_median_s": round(medians["lookup"], 2),
        "bare_import_median_s": round(medians["bare_import"], 2),
        "ratio": round(ratio, 3),
        "target_ratio": COLD_RATIO_TARGET,
        "meets_target": ratio <= COLD_RATIO_TARGET,
    }
