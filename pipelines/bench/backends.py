"""
`knowledge bench backends`: the embedding backends side by side, in one run (docs/embedding-backends.md).

- vectors: every eval-set query and every chunk of the sample KB embedded by each backend against
  the torch backend (the reference): the lowest cosine, and how many fall under 0.9999;
- query embedding p50 of the lookup's embedder, 1 and 2 texts (a query and its expanded variant);
- indexing: chunks/s of the indexing embedder over the sample KB's chunks;
- cold start: a one-shot `knowledge lookup` per backend in a fresh process (the config as given,
  MLflow on by default), beside the bare imports that backend's lookup cannot do without;
- serving: `knowledge serve` (one worker) per backend: peak RSS of the worker, single-client p50,
  requests/s at 8 clients.

Backends alternate round by round, so machine load weighs on each alike: on a shared machine read
the ratios, which are measured in the same run, rather than the absolute figures.
"""

import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from components.common.stats import percentile
from pipelines.bench.cold_start import COLD_QUERY, REPO, bare_imports_of, run_seconds
from pipelines.bench.machine import OtherCpu, format_other_cpu
from pipelines.config.settings import embedder_params, load_config

BACKENDS = ("torch", "onnx", "onnx_int8")
PARTS = ("vectors", "embed", "index", "cold_start", "serve")
COSINE_TARGET = 0.9999
SECOND_QUERY = "the worker node root volume has no space left"


def _eval_queries() -> list[str]:
    queries: dict[str, None] = {}
    for path in sorted((REPO / "eval").glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                queries[json.loads(line)["query"]] = None
    return list(queries)


def _sample_chunks(cfg) -> list:
    """The chunks of the sample KB as the indexing pipeline cuts them (no embedding)."""
    from components.indexing.markdown_chunker import MarkdownChunker
    from components.indexing.markdown_reader import MarkdownKnowledgeReader

    documents = MarkdownKnowledgeReader(kb_path=str(REPO / "knowledge")).run()["documents"]
    chunking = cfg.chunking
    chunker = MarkdownChunker(
        tokenizer_model=cfg.embedder.model,
        max_tokens=chunking.max_tokens,
        overlap_tokens=chunking.overlap_tokens,
        min_tokens=chunking.min_tokens,
    )
    return chunker.run(documents=documents)["documents"]


def _config(overrides: Sequence[str], backend: str):
    return load_config([*overrides, f"embedder.backend={backend}"])


def bench_vectors(overrides: Sequence[str], backends: Sequence[str], chunks: list) -> dict[str, Any]:
    """Cosine of each backend's vector to the torch backend's, per text (queries and chunk texts)."""
    import numpy as np
    from haystack import Document

    from components.indexing.document_embedder import KnowledgeDocumentEmbedder

    queries = _eval_queries()
    vectors: dict[str, Any] = {}
    for backend in ["torch", *[b for b in backends if b != "torch"]]:
        embedder = KnowledgeDocumentEmbedder(**embedder_params(_config(overrides, backend)), meta_fields_to_embed=[])
        embedder.warm_up()
        texts = queries + [embedder.embedding_text(c) for c in chunks]
        embedded = embedder.run(documents=[Document(content=text) for text in texts])["documents"]
        vectors[backend] = np.asarray([d.embedding for d in embedded], dtype=np.float32)
    figures = {"texts": len(queries) + len(chunks), "queries": len(queries), "chunks": len(chunks)}
    for backend in backends:
        if backend == "torch":
            continue
        cosines = (vectors[backend] * vectors["torch"]).sum(axis=1)
        figures[backend] = {
            "min_cosine": round(float(cosines.min()), 6),
            "mean_cosine": round(float(cosines.mean()), 6),
            "below_target": int((cosines < COSINE_TARGET).sum()),
        }
    return figures


def _alternating(backends: Sequence[str], rounds: int, measure: Callable[[str], None]) -> None:
    for number in range(rounds):
        order = list(backends) if number % 2 == 0 else list(reversed(backends))
        for backend in order:
            measure(backend)


def bench_embed(overrides: Sequence[str], backends: Sequence[str], rounds: int) -> dict[str, Any]:
    """p50 of the lookup's query embedder, 1 text and 2 texts, backends alternating in rounds of 20 calls."""
    from components.lookup.query_embedder import KnowledgeQueryEmbedder

    embedders = {b: KnowledgeQueryEmbedder(**embedder_params(_config(overrides, b))) for b in backends}
    times: dict[str, dict[int, list[float]]] = {b: {1: [], 2: []} for b in backends}
    texts = {1: [COLD_QUERY], 2: [COLD_QUERY, SECOND_QUERY]}
    for embedder in embedders.values():
        embedder.warm_up()
        for _ in range(5):
            embedder.embed(texts[2])

    def measure(backend: str) -> None:
        for count in (1, 2):
            for _ in range(20):
                started = time.perf_counter()
                embedders[backend].embed(texts[count])
                times[backend][count].append((time.perf_counter() - started) * 1000.0)

    _alternating(backends, rounds, measure)
    return {
        b: {f"p50_{n}_text_ms": round(percentile(times[b][n], 0.5), 2) for n in (1, 2)} | {"calls": len(times[b][1])}
        for b in backends
    }


def bench_index_embedding(
    overrides: Sequence[str], backends: Sequence[str], chunks: list, rounds: int
) -> dict[str, Any]:
    """Chunks per second of the indexing embedder (batch size of the config) over the same chunks."""
    from haystack import Document

    from components.indexing.document_embedder import KnowledgeDocumentEmbedder

    embedders = {}
    for backend in backends:
        cfg = _config(overrides, backend)
        embedders[backend] = KnowledgeDocumentEmbedder(**embedder_params(cfg), batch_size=cfg.embedder.batch_size)
        embedders[backend].warm_up()
    seconds: dict[str, list[float]] = {b: [] for b in backends}

    def measure(backend: str) -> None:
        copies = [Document(content=c.content, meta=dict(c.meta)) for c in chunks]
        started = time.perf_counter()
        embedders[backend].run(documents=copies)
        seconds[backend].append(time.perf_counter() - started)

    _alternating(backends, rounds, measure)
    return {
        b: {"chunks_per_s": round(len(chunks) / statistics.median(seconds[b]), 1), "runs": len(seconds[b])}
        for b in backends
    }


def bench_cold(state_overrides: list[str], backends: Sequence[str], runs: int) -> dict[str, Any]:
    """Median wall seconds of a one-shot lookup per backend and of its bare imports, all alternating."""
    sides = []
    for backend in backends:
        lookup = ["-m", "pipelines.cli", "lookup", COLD_QUERY, "--compact", *state_overrides]
        sides.append((backend, "lookup", [*lookup, f"embedder.backend={backend}"]))
        sides.append((backend, "bare_imports", ["-c", bare_imports_of(backend)]))
    times: dict[tuple[str, str], list[float]] = {(b, s): [] for b, s, _ in sides}
    for number in range(runs):
        for backend, side, args in sides if number % 2 == 0 else list(reversed(sides)):
            times[(backend, side)].append(run_seconds(args))
    figures: dict[str, Any] = {}
    for backend in backends:
        lookup = statistics.median(times[(backend, "lookup")])
        bare = statistics.median(times[(backend, "bare_imports")])
        figures[backend] = {
            "lookup_median_s": round(lookup, 2),
            "bare_imports_median_s": round(bare, 2),
            "ratio": round(lookup / bare, 2),
            "lookup_s": [round(t, 2) for t in times[(backend, "lookup")]],
        }
    return figures


def _worker_peak_rss_mb(pid: int) -> float | None:
    """Peak RSS (VmHWM) of a live process, in MiB."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text(encoding="ascii").splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        return None
    return None


def bench_serving(state_overrides: list[str], backends: Sequence[str], seconds: float, clients: int) -> dict[str, Any]:
    """`knowledge serve` (one worker) per backend in turn: its peak RSS after the load, p50 and req/s."""
    import httpx

    from pipelines.bench.serve_bench import WARM_UP_REQUESTS_S, _summary, served_workers
    from pipelines.serving.loadgen import run_load

    figures: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="knowledge-bench-backends-") as folder:
        for backend in backends:
            overrides = [*state_overrides, f"embedder.backend={backend}"]
            with served_workers(overrides, 1, Path(folder) / f"serve-{backend}.log") as url:
                pid = httpx.get(f"{url}/health", timeout=10.0).json()["pid"]
                run_load(url, 1, WARM_UP_REQUESTS_S, None)
                single = _summary(run_load(url, 1, seconds, None))
                many = _summary(run_load(url, clients, seconds, None))
                figures[backend] = {
                    "peak_rss_mb": _worker_peak_rss_mb(pid),
                    "single_p50_ms": single["p50_ms"],
                    "single_requests_per_s": single["requests_per_s"],
                    f"requests_per_s_{clients}_clients": many["requests_per_s"],
                    f"p95_ms_{clients}_clients": many["p95_ms"],
                    "errors": single["errors"] + many["errors"],
                }
    return figures


def bench_backends(
    overrides: Sequence[str],
    backends: Sequence[str] = BACKENDS,
    rounds: int = 5,
    cold_runs: int = 3,
    serve_seconds: float = 10.0,
    clients: int = 8,
    skip: Sequence[str] = (),
    echo: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Every part not in `skip`, printed as it completes; returns the figures."""
    cfg = _config(overrides, "torch")
    report: dict[str, Any] = {"backends": list(backends), "cpus": os.cpu_count()}
    echo(f"knowledge bench backends: {', '.join(backends)} ({os.cpu_count()} CPUs; backends alternate)")
    with OtherCpu() as other:
        chunks = _sample_chunks(cfg) if {"vectors", "index"} - set(skip) else []
        if "vectors" not in skip:
            report["vectors"] = bench_vectors(overrides, backends, chunks)
            echo(_format_vectors(report["vectors"], backends))
        if "embed" not in skip:
            report["embed"] = bench_embed(overrides, backends, rounds)
            echo(_format_embed(report["embed"], backends))
        if "index" not in skip:
            report["index"] = bench_index_embedding(overrides, backends, chunks, max(2, rounds // 2))
            echo(_format_index(report["index"], backends, len(chunks)))
        if {"cold_start", "serve"} - set(skip):
            with tempfile.TemporaryDirectory(prefix="knowledge-bench-backends-state-") as state:
                state_overrides = [f"paths.state_dir={state}", "mlflow=off"]
                run_seconds(["-m", "pipelines.cli", "index", "--kb", str(REPO / "knowledge"), *state_overrides])
                if "cold_start" not in skip:
                    # The config as given (MLflow on by default): what a one-shot lookup really pays.
                    report["cold_start"] = bench_cold([f"paths.state_dir={state}", *overrides], backends, cold_runs)
                    report["cold_start_mlflow"] = _mlflow_setting(cfg)
                    echo(_format_cold(report["cold_start"], backends, report["cold_start_mlflow"]))
                if "serve" not in skip:
                    report["serve"] = bench_serving(state_overrides, backends, serve_seconds, clients)
                    echo(_format_serve(report["serve"], backends, clients))
    report["other_cpu"] = other.share
    echo(f"  {format_other_cpu(other.share)}")
    return report


def _versus_torch(figures: dict[str, Any], backend: str, key: str) -> str:
    torch_value = figures.get("torch", {}).get(key)
    value = figures[backend][key]
    if backend == "torch" or not torch_value or value is None:
        return ""
    return f" ({value / torch_value:.2f}x torch)"


def _format_vectors(figures: dict[str, Any], backends: Sequence[str]) -> str:
    lines = [f"  vectors vs torch over {figures['queries']} eval queries + {figures['chunks']} sample chunks:"]
    for backend in backends:
        if backend in figures:
            f = figures[backend]
            lines.append(
                f"    {backend}: min cosine {f['min_cosine']}, mean {f['mean_cosine']}, "
                f"{f['below_target']} under {COSINE_TARGET}"
            )
    return "\n".join(lines)


def _format_embed(figures: dict[str, Any], backends: Sequence[str]) -> str:
    lines = ["  query embedding p50 (the lookup's embedder):"]
    for backend in backends:
        f = figures[backend]
        lines.append(
            f"    {backend}: 1 text {f['p50_1_text_ms']} ms{_versus_torch(figures, backend, 'p50_1_text_ms')}, "
            f"2 texts {f['p50_2_text_ms']} ms{_versus_torch(figures, backend, 'p50_2_text_ms')}"
        )
    return "\n".join(lines)


def _format_index(figures: dict[str, Any], backends: Sequence[str], chunks: int) -> str:
    lines = [f"  indexing embedder over {chunks} sample chunks:"]
    for backend in backends:
        f = figures[backend]
        lines.append(f"    {backend}: {f['chunks_per_s']} chunks/s{_versus_torch(figures, backend, 'chunks_per_s')}")
    return "\n".join(lines)


def _mlflow_setting(cfg) -> str:
    return f"MLflow on, sample_rate {cfg.mlflow.sample_rate}" if cfg.mlflow.tracking_uri else "mlflow=off"


def _format_cold(figures: dict[str, Any], backends: Sequence[str], mlflow: str) -> str:
    lines = [f"  cold start, one-shot `knowledge lookup` (sample KB, {mlflow}), median:"]
    for backend in backends:
        f = figures[backend]
        lines.append(
            f"    {backend}: {f['lookup_median_s']} s{_versus_torch(figures, backend, 'lookup_median_s')}; "
            f"its bare imports {f['bare_imports_median_s']} s (ratio {f['ratio']}); runs {f['lookup_s']}"
        )
    return "\n".join(lines)


def _format_serve(figures: dict[str, Any], backends: Sequence[str], clients: int) -> str:
    lines = ["  `knowledge serve`, one worker:"]
    for backend in backends:
        f = figures[backend]
        lines.append(
            f"    {backend}: peak RSS {f['peak_rss_mb']} MB, 1 client p50 {f['single_p50_ms']} ms, "
            f"{clients} clients {f[f'requests_per_s_{clients}_clients']} req/s "
            f"(p95 {f[f'p95_ms_{clients}_clients']} ms), errors {f['errors']}"
        )
    return "\n".join(lines)
