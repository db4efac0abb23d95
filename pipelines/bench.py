"""
Benchmarks of `knowledge bench`: each one measures the real pipeline against a floor measured
in the same process, on the same data, in the same run, and prints both with their ratio.

Both benchmarks build a throw-away knowledge base under a `tempfile.TemporaryDirectory` (never
in the repository or in /work/shared): the runbook corpus (default
`../shared/corpus/prometheus-runbooks` beside the repository) is repeated until it gives enough
chunks. Copy `k` of a file goes to the folder `<category>-<k>` (so copy `k` of the etcd runbooks
has the category `etcd-k`), and a short line naming a cluster and region of that copy is
inserted under every heading that has text, so no two copies are identical. Milvus Lite, the L0
index and every other state file live in the same temporary folder; MLflow is off.

`bench index` (`bench_index`): indexing throughput.
    Runs the real indexing pipeline (`run_indexing(rebuild=True)`: read, plan, chunk, embed,
    write to Milvus, build the L0 index) over the repeated corpus and times it; in the same run,
    alternating with it, times a bare `SentenceTransformer.encode` (same model, device and batch
    size, `normalize_embeddings=True`) of exactly the texts the pipeline embedded: the KB
    chunked by the pipeline's own `MarkdownChunker`, each chunk turned into text by the
    pipeline's own `KnowledgeDocumentEmbedder.embedding_text`. Bare, pipeline, bare, pipeline,
    bare: each side's figure is the mean of its runs, so a drift of background load during the
    run weighs on both sides alike. Model loading is timed separately and excluded from both (each side is warmed up
    first: the pipeline by a small indexing run into the same collection, the bare model by one
    encode call). Prints chunks/s of both, their ratio (pipeline / bare; target >= 0.85) by wall
    and by process CPU time, the chunk count, the largest difference between a stored vector
    and its bare re-encoding (a check that the texts really are the same), the peak RSS of the
    process and the machine's load average.

`bench lookup` (`bench_lookup`): lookup latency.
    Indexes the repeated corpus (>= 10 000 chunks by default) and times `LookupService.lookup`
    (the full Haystack query pipeline) per query after a few warm-up calls. The floor, timed on
    the same queries (each query on both sides back to back, the first side alternating, so
    background load weighs on both alike), is what any lookup must pay: one query embedding
    through the pipeline's own `KnowledgeQueryEmbedder.run`
    plus one raw `MilvusClient.search` with the same top_k, output fields and search parameters
    and, when the pipeline's first attempt was filtered, the same category filter expression.
    Queries are bucketed by what actually happened in the pipeline (`result.retrieval_trace`):
    `filtered` (attempt 0 filtered on one category and selected, no fallback) and `fallback`
    (a filtered attempt that was retried unfiltered: `fallback_reason` set). Prints p50 / p95 of
    pipeline and floor and the p50 ratio per path (targets: <= 1.3 filtered, <= 2.2 fallback),
    with process CPU time p50s beside them (less sensitive to other work on the machine).

Both also report how much CPU other processes took during the timed part (`OtherCpu`, from
/proc/stat): on a shared machine, figures taken while another process keeps a core busy are
much noisier (torch's threads wait for each other), and the share says so.

Both return a dict of the printed figures. `time_lookups(service, queries)` times any object
with a `lookup(query)` method, so two services (tracing on and off, say) can be compared in
one run.
"""

import math
import os
import re
import resource
import statistics
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from components.markdown_reader import KnowledgeBaseError

DEFAULT_CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "corpus" / "prometheus-runbooks"
INDEX_RATIO_TARGET = 0.85
LOOKUP_RATIO_TARGETS = {"filtered": 1.3, "fallback": 2.2}
WARMUP_LOOKUPS = 3

_ENVIRONMENTS = ("prod", "staging", "edge")
_REGIONS = ("eu-west-1", "us-east-1", "ap-south-1", "eu-central-1", "us-west-2", "sa-east-1", "ap-northeast-1")
_HEADING = re.compile(r"^ {0,3}#{1,6}(\s|$)")
_FENCE = re.compile(r"^ {0,3}(```|~~~)")


class CorpusNotFoundError(KnowledgeBaseError):
    """
    The corpus to repeat is missing or holds no markdown: bad input, CLI exit status 2. (A
    KnowledgeBaseError, not the CLI's UsageError: under `python -m pipelines.cli` that class
    exists twice, as `__main__.UsageError` and `pipelines.cli.UsageError`, and the CLI would not
    recognise the second one.)
    """


# --------------------------------------------------------------------------------------------
# The repeated corpus


@dataclass(frozen=True)
class CorpusFile:
    category: str
    relative: str  # path inside the category folder
    text: str


def resolve_corpus(corpus: str | Path | None) -> Path:
    """The corpus folder to repeat: the given one, else ../shared/corpus/prometheus-runbooks."""
    path = Path(corpus) if corpus else DEFAULT_CORPUS
    if not path.is_dir():
        raise CorpusNotFoundError(f"benchmark corpus {path} does not exist (give one with --corpus DIR)")
    return path


def read_corpus(corpus: Path) -> list[CorpusFile]:
    """
    The markdown files of the corpus, by category folder (top-level files go to `general`);
    hidden, unreadable and non-UTF-8 files are left out, as the indexing reader would skip them.
    """
    files = []
    for path in sorted(corpus.rglob("*")):
        if not path.is_file() or path.suffix.lower() not in (".md", ".markdown"):
            continue
        parts = path.relative_to(corpus).parts
        if any(part.startswith(".") for part in parts):
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        category, relative = (parts[0], Path(*parts[1:]).as_posix()) if len(parts) > 1 else ("general", parts[0])
        files.append(CorpusFile(category, relative, text))
    if not files:
        raise CorpusNotFoundError(f"benchmark corpus {corpus} holds no markdown (.md) file")
    return files


def copy_category(category: str, copy: int) -> str:
    """The category (and folder) of copy `copy` of a corpus category: `etcd` -> `etcd-3`."""
    return f"{category}-{copy}"


def cluster_line(copy: int) -> str:
    """The line that makes copy `copy` distinct: one cluster and region per copy."""
    region = _REGIONS[copy % len(_REGIONS)]
    return f"Scope: cluster `{_ENVIRONMENTS[copy % len(_ENVIRONMENTS)]}-{region}-{copy:02d}` in region {region}."


def _heading_rows(rows: Sequence[str]) -> list[int]:
    """Indices of ATX heading lines outside code fences."""
    headings = []
    in_fence = False
    for index, row in enumerate(rows):
        if _FENCE.match(row):
            in_fence = not in_fence
        elif not in_fence and _HEADING.match(row):
            headings.append(index)
    return headings


def vary_markdown(text: str, copy: int) -> str:
    """
    The text of copy `copy`: the cluster line inserted under every heading whose section has
    text (a heading-only section stays empty, so the copy makes no extra chunk of its own).
    """
    rows = text.splitlines()
    headings = _heading_rows(rows)
    ends = [*headings[1:], len(rows)]
    insert_after = {h for h, end in zip(headings, ends, strict=True) if any(r.strip() for r in rows[h + 1 : end])}
    out: list[str] = []
    for index, row in enumerate(rows):
        out.append(row)
        if index in insert_after:
            out.extend(["", cluster_line(copy), ""])
    if not insert_after:
        out.extend(["", cluster_line(copy)])
    return "\n".join(out) + "\n"


def write_copy(files: Iterable[CorpusFile], kb_root: Path, copy: int) -> int:
    """Write copy `copy` of the corpus files under `kb_root`; returns the number of files."""
    count = 0
    for item in files:
        target = kb_root / copy_category(item.category, copy) / item.relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(vary_markdown(item.text, copy), encoding="utf-8")
        count += 1
    return count


def chunk_knowledge_base(cfg: DictConfig, kb_root: Path) -> list:
    """The chunks the indexing pipeline makes of `kb_root`: its own reader and chunker, same settings."""
    from pipelines.indexing import build_indexing_pipeline

    pipeline = build_indexing_pipeline(_with_kb(cfg, kb_root))
    documents = pipeline.get_component("reader").run()["documents"]
    return pipeline.get_component("chunker").run(documents=documents)["documents"]


def build_repeated_kb(cfg: DictConfig, files: Sequence[CorpusFile], kb_root: Path, min_chunks: int) -> tuple[list, int]:
    """
    Write copies of the corpus under `kb_root` until it chunks into at least `min_chunks`.

    :returns: The chunks (as the indexing pipeline makes them) and the number of copies.
    """
    copies = 0
    chunks: list = []
    while len(chunks) < min_chunks:
        if copies == 0:
            add = 1
        else:
            per_copy = max(1.0, len(chunks) / copies)
            add = max(1, math.ceil((min_chunks - len(chunks)) / per_copy))
        for copy in range(copies, copies + add):
            write_copy(files, kb_root, copy)
        copies += add
        chunks = chunk_knowledge_base(cfg, kb_root)
    return chunks, copies


# --------------------------------------------------------------------------------------------
# Configuration, measurement helpers


def bench_config(cfg: DictConfig, state_dir: Path, kb_root: Path) -> DictConfig:
    """
    `cfg` with every file it writes under `state_dir` and MLflow off. The config is already
    resolved, so each derived path is set, not only `paths.state_dir`. A Milvus server keeps its
    URI but gets a collection of its own, so the rebuild never drops a real collection.
    """
    from components.milvus_store import is_local_uri

    # Any key derived from paths.state_dir (resolved already) moves along with it.
    old_state = str(cfg.paths.state_dir).rstrip("/") + "/"
    bench = OmegaConf.create(_replace_in_strings(OmegaConf.to_container(cfg, resolve=True), old_state, f"{state_dir}/"))
    bench.paths.state_dir = str(state_dir)
    bench.kb.path = str(kb_root)
    if is_local_uri(cfg.milvus.uri):
        bench.milvus.uri = str(state_dir / "milvus.db")
        bench.milvus.collection = "bench"
    else:
        bench.milvus.collection = f"bench_{os.getpid()}"
    bench.l0.index_path = str(state_dir / f"{bench.milvus.collection}.l0.json")
    bench.trace.db_url = f"sqlite:///{state_dir / 'traces.db'}"
    bench.trace.spool_path = str(state_dir / "trace-spool.jsonl")
    bench.mlflow.tracking_uri = None
    return bench


def _replace_in_strings(value: Any, old: str, new: str) -> Any:
    if isinstance(value, str):
        return value.replace(old, new)
    if isinstance(value, dict):
        return {key: _replace_in_strings(item, old, new) for key, item in value.items()}
    if isinstance(value, list):
        return [_replace_in_strings(item, old, new) for item in value]
    return value


def _with_kb(cfg: DictConfig, kb_root: Path) -> DictConfig:
    copy = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True))
    copy.kb.path = str(kb_root)
    return copy


def peak_rss_mb() -> float:
    """Peak resident set size of this process so far, in MiB (Linux reports KiB)."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def load_average() -> float:
    return round(os.getloadavg()[0], 2)


def settle(limit_s: float = 120.0, window_s: float = 1.0, busy_share: float = 0.05) -> float:
    """
    Wait until this process is idle: Milvus Lite runs inside it and may still seal, compact or
    index segments after a large insert, which would weigh on whatever is timed next (the runs
    measured so far were idle after the first one-second window). Returns the seconds waited
    (at most about `limit_s`).
    """
    started = time.perf_counter()
    while time.perf_counter() - started < limit_s:
        cpu = time.process_time()
        time.sleep(window_s)
        if time.process_time() - cpu < busy_share * window_s:
            break
    return time.perf_counter() - started


class OtherCpu:
    """
    How much CPU other processes took while a block ran: the machine's busy time (/proc/stat)
    minus this process's CPU time, as a share of all CPUs over the wall time. On a shared
    machine this tells whether figures were taken on a quiet or a contended machine (torch's
    threads slow down sharply when a core is taken). None where /proc/stat does not exist.

        with OtherCpu() as other:
            ...
        other.share  # e.g. 0.07: other processes used 7% of the CPUs meanwhile
    """

    def __enter__(self) -> "OtherCpu":
        self.share: float | None = None
        self._start = (_machine_busy_s(), time.process_time(), time.perf_counter())
        return self

    def __exit__(self, *exc_info) -> None:
        busy, own, wall = _machine_busy_s(), time.process_time(), time.perf_counter()
        if busy is None or self._start[0] is None or wall <= self._start[2]:
            return
        others = (busy - self._start[0]) - (own - self._start[1])
        self.share = round(max(0.0, others) / ((wall - self._start[2]) * (os.cpu_count() or 1)), 3)


def _machine_busy_s() -> float | None:
    """CPU seconds all CPUs spent busy since boot (user, nice, system, irq, softirq, steal)."""
    try:
        with open("/proc/stat", encoding="ascii") as stat:
            fields = [int(x) for x in stat.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def format_other_cpu(share: float | None) -> str:
    if share is None:
        return "other processes: not measured (no /proc/stat)"
    note = "quiet" if share < 0.1 else "busy: figures are less reliable" if share >= 0.25 else "some load"
    return f"other processes used {share:.0%} of the {os.cpu_count()} CPUs during the timed part ({note})"


def timed(function: Callable[[], Any]) -> tuple[Any, float]:
    """`function()` and its wall-clock seconds."""
    started = time.perf_counter()
    value = function()
    return value, time.perf_counter() - started


def percentile(values: Sequence[float], share: float) -> float:
    """Linear-interpolation percentile (`share` in [0, 1]) of a non-empty sequence."""
    ordered = sorted(values)
    position = (len(ordered) - 1) * share
    low, high = math.floor(position), math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def latency_summary(latencies_ms: Sequence[float]) -> dict[str, float]:
    return {
        "n": len(latencies_ms),
        "p50_ms": round(percentile(latencies_ms, 0.5), 2),
        "p95_ms": round(percentile(latencies_ms, 0.95), 2),
        "mean_ms": round(statistics.fmean(latencies_ms), 2),
    }


def _cleanup_milvus(cfg: DictConfig) -> None:
    """Drop the bench collection of a Milvus server (a Lite db goes with the temp folder)."""
    from components.milvus_store import connect, is_local_uri

    if not is_local_uri(cfg.milvus.uri):
        client = connect(cfg.milvus.uri)
        if client.has_collection(cfg.milvus.collection):
            client.drop_collection(cfg.milvus.collection)


# --------------------------------------------------------------------------------------------
# bench index


def load_pipeline_models(cfg: DictConfig) -> float:
    """Load the pipeline's embedding model (cached per process) and tokenizer; returns seconds."""
    from components.document_embedder import KnowledgeDocumentEmbedder
    from components.models import load_tokenizer

    embedder = KnowledgeDocumentEmbedder(
        model=cfg.embedder.model, device=cfg.embedder.device, batch_size=cfg.embedder.batch_size
    )
    _, seconds = timed(lambda: (embedder.warm_up(), load_tokenizer(cfg.embedder.model)))
    return seconds


def load_bare_model(cfg: DictConfig):
    """A plain `SentenceTransformer` of the configured model; returns (model, seconds)."""
    from sentence_transformers import SentenceTransformer

    from components.models import resolve_model

    return timed(lambda: SentenceTransformer(resolve_model(cfg.embedder.model), device=cfg.embedder.device))


def warm_up_indexing(cfg: DictConfig, files: Sequence[CorpusFile], work: Path) -> float:
    """A small indexing run into the benchmark collection (the timed run rebuilds it); seconds."""
    from pipelines.indexing import run_indexing

    warm_kb = work / "warmup-kb"
    write_copy(files[:8], warm_kb, 0)
    _, seconds = timed(lambda: run_indexing(_with_kb(cfg, warm_kb), rebuild=True))
    return seconds


def embedding_texts(cfg: DictConfig, chunks: Sequence) -> list[str]:
    """Exactly the texts the pipeline's embedder encodes for `chunks`."""
    from pipelines.indexing import build_indexing_pipeline

    embedder = build_indexing_pipeline(cfg).get_component("embedder")
    return [embedder.embedding_text(chunk) for chunk in chunks]


def encode_bare(model, texts: Sequence[str], cfg: DictConfig):
    return model.encode(
        list(texts),
        batch_size=cfg.embedder.batch_size,
        normalize_embeddings=True,
        show_progress_bar=False,
        device=cfg.embedder.device,
    )


def stored_vector_difference(cfg: DictConfig, chunks: Sequence, vectors, samples: int = 16) -> float:
    """Largest |stored - bare| component over a sample of chunks: ~1e-6 when the texts match."""
    import numpy as np

    from components.milvus_store import ID_FIELD, VECTOR_FIELD, connect

    step = max(1, len(chunks) // samples)
    picked = list(range(0, len(chunks), step))[:samples]
    ids = [chunks[i].meta["evidence_key"] for i in picked]
    client = connect(cfg.milvus.uri)
    rows = client.get(cfg.milvus.collection, ids=ids, output_fields=[ID_FIELD, VECTOR_FIELD])
    stored = {row[ID_FIELD]: np.asarray(row[VECTOR_FIELD], dtype=np.float32) for row in rows}
    if len(stored) != len(ids):
        raise RuntimeError(f"only {len(stored)} of {len(ids)} sampled chunks were found in the collection")
    return float(max(np.abs(stored[key] - vectors[i]).max() for key, i in zip(ids, picked, strict=True)))


@dataclass
class Timing:
    """Wall-clock and process CPU seconds (all threads, Milvus Lite's server threads included)."""

    wall_s: float
    cpu_s: float


def timed_cpu(function: Callable[[], Any]) -> tuple[Any, Timing]:
    wall, cpu = time.perf_counter(), time.process_time()
    value = function()
    return value, Timing(time.perf_counter() - wall, time.process_time() - cpu)


def bench_index(
    cfg: DictConfig,
    corpus: str | Path | None = None,
    min_chunks: int = 5000,
    rounds: int = 2,
    echo: Callable[[str], None] = print,
) -> dict[str, Any]:
    """
    Indexing throughput of the pipeline against bare `SentenceTransformer.encode`; see the module
    docstring. The two sides alternate, bare first and last (`rounds` pipeline runs, one more
    bare run: B P B P B by default), and each side's figure is its mean, so a drift of
    background load during the run weighs on both sides alike.
    """
    from pipelines.indexing import run_indexing

    files = read_corpus(resolve_corpus(corpus))
    figures: dict[str, Any] = {"load_avg_start": load_average()}
    with tempfile.TemporaryDirectory(prefix="knowledge-bench-index-") as tmp:
        work = Path(tmp)
        kb_root = work / "kb"
        cfg = bench_config(cfg, work / "state", kb_root)
        echo(f"bench index: repeating {len(files)} runbooks to >= {min_chunks} chunks under {work}")
        chunks, copies = build_repeated_kb(cfg, files, kb_root, min_chunks)
        texts = embedding_texts(cfg, chunks)
        echo(f"{len(chunks)} chunks in {copies} copies; loading models and warming up")

        figures["pipeline_model_load_s"] = round(load_pipeline_models(cfg), 2)
        figures["pipeline_warmup_s"] = round(warm_up_indexing(cfg, files, work), 2)
        model, bare_load_s = load_bare_model(cfg)
        figures["bare_model_load_s"] = round(bare_load_s, 2)
        encode_bare(model, texts[: 2 * cfg.embedder.batch_size], cfg)  # warm-up

        echo(f"timing: bare encode and pipeline alternately, {rounds} pipeline run(s), {rounds + 1} bare")
        bare_runs: list[Timing] = []
        pipeline_runs: list[Timing] = []
        with OtherCpu() as other:
            for _ in range(rounds):
                vectors, timing = timed_cpu(lambda: encode_bare(model, texts, cfg))
                bare_runs.append(timing)
                report, timing = timed_cpu(lambda: run_indexing(cfg, rebuild=True))
                pipeline_runs.append(timing)
                if report.chunks_written != len(chunks):
                    raise RuntimeError(f"the pipeline wrote {report.chunks_written} chunks, the bench chunked {len(chunks)}")
            vectors, timing = timed_cpu(lambda: encode_bare(model, texts, cfg))
            bare_runs.append(timing)
        figures["other_cpu_share"] = other.share
        figures["vector_max_abs_diff"] = stored_vector_difference(cfg, chunks, vectors)
        _cleanup_milvus(cfg)

    figures.update(index_figures(len(chunks), pipeline_runs, bare_runs))
    figures.update(
        copies=copies,
        documents=len(report.added),
        batch_size=cfg.embedder.batch_size,
        device=cfg.embedder.device,
        peak_rss_mb=peak_rss_mb(),
        load_avg_end=load_average(),
    )
    echo(format_index_figures(figures))
    return figures


def index_figures(chunks: int, pipeline_runs: Sequence[Timing], bare_runs: Sequence[Timing]) -> dict[str, Any]:
    """Throughputs and ratios, each side over the mean of its runs."""
    pipeline_wall = statistics.fmean(t.wall_s for t in pipeline_runs)
    pipeline_cpu = statistics.fmean(t.cpu_s for t in pipeline_runs)
    bare_wall = statistics.fmean(t.wall_s for t in bare_runs)
    bare_cpu = statistics.fmean(t.cpu_s for t in bare_runs)
    ratio = bare_wall / pipeline_wall  # = (chunks / pipeline time) / (chunks / bare time)
    return {
        "chunks": chunks,
        "pipeline_s": [round(t.wall_s, 2) for t in pipeline_runs],
        "pipeline_cpu_s": [round(t.cpu_s, 2) for t in pipeline_runs],
        "pipeline_chunks_per_s": round(chunks / pipeline_wall, 1),
        "bare_encode_s": [round(t.wall_s, 2) for t in bare_runs],
        "bare_cpu_s": [round(t.cpu_s, 2) for t in bare_runs],
        "bare_chunks_per_s": round(chunks / bare_wall, 1),
        "ratio": round(ratio, 3),
        "cpu_ratio": round(bare_cpu / pipeline_cpu, 3),
        "target_ratio": INDEX_RATIO_TARGET,
        "meets_target": ratio >= INDEX_RATIO_TARGET,
    }


def _seconds(values: Sequence[float]) -> str:
    return ", ".join(f"{v:.1f}" for v in values) + " s"


def format_index_figures(f: dict[str, Any]) -> str:
    verdict = "meets" if f["meets_target"] else "BELOW"
    return "\n".join(
        [
            f"chunks            {f['chunks']} ({f['documents']} documents, {f['copies']} copies of the corpus)",
            f"pipeline          {f['pipeline_chunks_per_s']:.1f} chunks/s  (read, chunk, embed, write Milvus, L0 index; "
            f"wall {_seconds(f['pipeline_s'])}, CPU {_seconds(f['pipeline_cpu_s'])})",
            f"bare encode       {f['bare_chunks_per_s']:.1f} chunks/s  (batch_size {f['batch_size']}, {f['device']}; "
            f"wall {_seconds(f['bare_encode_s'])}, CPU {_seconds(f['bare_cpu_s'])})",
            f"ratio             {f['ratio']:.3f} pipeline/bare, means of the alternating runs ({verdict} target >= "
            f"{f['target_ratio']}); by CPU time {f['cpu_ratio']:.3f}",
            f"model load        pipeline {f['pipeline_model_load_s']:.2f} s, bare {f['bare_model_load_s']:.2f} s "
            f"(excluded; pipeline warm-up run {f['pipeline_warmup_s']:.2f} s)",
            f"vector check      max |stored - bare| = {f['vector_max_abs_diff']:.2e}",
            f"peak RSS          {f['peak_rss_mb']:.0f} MiB",
            f"load average      {f['load_avg_start']} at start, {f['load_avg_end']} at end (1 min, whole machine)",
            f"machine           {format_other_cpu(f['other_cpu_share'])}",
        ]
    )


# --------------------------------------------------------------------------------------------
# bench lookup

# Queries per intended path, as (category named in the query, what it asks). Checked against
# the repeated runbook corpus: none shares enough words with a runbook title to match it in L0
# (a title match would add that title's categories, one per copy, and drop the filter).
# `filtered`: the named category covers the topic, its best chunk scores over the reference
# threshold. `fallback`: it does not (`general` holds four runbooks, `node` is host-level), so the
# filtered attempt has no usable chunk or a weak one and is retried unfiltered.
FILTERED_QUERIES = (
    ("etcd", "the keyspace is nearly at its storage limit, defragment it"),
    ("node", "disk almost full on the host"),
    ("kubernetes", "container restarts again and again"),
    ("etcd", "fsync to the write ahead log takes too long"),
    ("node", "host running out of inodes"),
    ("kubernetes", "volume claim nearly out of space"),
    ("alertmanager", "notifications are not delivered to slack or pagerduty"),
    ("node", "time on the machine is wrong"),
    ("kubernetes", "a deployment rollout is stuck"),
    ("prometheus", "the write ahead log of the time series database is corrupted"),
)
FALLBACK_QUERIES = (
    ("general", "disk almost full on the host"),
    ("node", "notifications fail to reach slack"),
    ("general", "container restarts again and again"),
    ("node", "webhook receiver returns errors for alert notifications"),
    ("general", "volume claim nearly out of space"),
    ("node", "recording rules cannot be evaluated"),
    ("general", "host running out of inodes"),
    ("node", "a deployment rollout is stuck"),
    ("general", "keyspace nearly at its storage limit, defragment it"),
    ("general", "time on the machine is wrong"),
)
QUERIES_PER_COPY = 3


def lookup_query_candidates(categories: set[str], copies: int) -> dict[str, list[str]]:
    """
    Query texts meant for each path, `QUERIES_PER_COPY` per copy and path, each naming the
    category of its copy (`etcd-3: ...`): the L0 layer recognises exactly that one domain, so the
    first attempt is filtered on it. Which path a query really takes is read from its retrieval
    trace when it runs (`classify_queries`), not assumed from this list.
    """
    planned = {"filtered": FILTERED_QUERIES, "fallback": FALLBACK_QUERIES}
    candidates: dict[str, list[str]] = {}
    for path, pairs in planned.items():
        usable_pairs = [(category, topic) for category, topic in pairs if category in categories]
        texts = []
        for copy in range(copies):
            for offset in range(min(QUERIES_PER_COPY, len(usable_pairs))):
                category, topic = usable_pairs[(copy * QUERIES_PER_COPY + offset) % len(usable_pairs)]
                texts.append(f"{copy_category(category, copy)}: {topic}")
        candidates[path] = texts
    return candidates


def lookup_path(result) -> tuple[str, str | None]:
    """
    What happened in a lookup, from its retrieval trace: (`filtered` | `fallback` | `unfiltered`,
    the first attempt's filter expression).
    """
    trace = result.retrieval_trace
    first = trace.attempts[0] if trace.attempts else None
    if first is None or first.category_filter is None:
        return "unfiltered", None
    if trace.fallback_reason:
        return "fallback", first.filter_expression
    return "filtered", first.filter_expression


@dataclass
class LookupCase:
    query: str
    path: str
    filter_expression: str | None
    fallback_reason: str | None


def classify_queries(service, queries: Iterable[str]) -> list[LookupCase]:
    """Run each query once through the pipeline and record which path it took."""
    cases = []
    for query in queries:
        result = service.lookup(query)
        path, expression = lookup_path(result)
        cases.append(LookupCase(query, path, expression, result.retrieval_trace.fallback_reason))
    return cases


def call_ms(function: Callable[[], Any]) -> tuple[float, float]:
    """Wall-clock and process CPU milliseconds of one call."""
    wall, cpu = time.perf_counter(), time.process_time()
    function()
    return (time.perf_counter() - wall) * 1000.0, (time.process_time() - cpu) * 1000.0


def time_lookups(service, queries: Iterable[str]) -> list[float]:
    """
    Wall-clock milliseconds of `service.lookup(query)` for each query, in order. Any object with
    a `lookup(query)` method will do, e.g. two services built from two configs.
    """
    return [call_ms(lambda q=query: service.lookup(q))[0] for query in queries]


class LookupFloor:
    """
    The least work a lookup has to do: one query embedding through the pipeline's own
    `KnowledgeQueryEmbedder.run` and one raw `MilvusClient.search` with the pipeline's top_k,
    output fields, search parameters and (when given) category filter expression.
    """

    def __init__(self, cfg: DictConfig, query_embedder) -> None:
        from components.milvus_store import connect

        self.cfg = cfg
        self.embedder = query_embedder
        self.client = connect(cfg.milvus.uri)

    def run(self, query: str, filter_expression: str | None):
        from components.milvus_store import CATEGORY_FIELD, CONTENT_FIELD, METADATA_FIELD, VECTOR_FIELD
        from components.vector_search import as_float_list

        embedding = self.embedder.run(texts=[query])["embeddings"][0]
        return self.client.search(
            self.cfg.milvus.collection,
            data=[as_float_list(embedding)],
            limit=self.cfg.retrieval.top_k,
            filter=filter_expression or "",
            output_fields=[CONTENT_FIELD, METADATA_FIELD, CATEGORY_FIELD],
            search_params={"metric_type": "L2", "params": dict(self.cfg.milvus.search_params)},
            anns_field=VECTOR_FIELD,
        )[0]

    def time(self, cases: Iterable[LookupCase]) -> list[float]:
        """Wall-clock milliseconds of the floor for each case, in order."""
        return [call_ms(lambda c=case: self.run(c.query, c.filter_expression))[0] for case in cases]


def pick_cases(cases: Sequence[LookupCase], path: str, count: int) -> list[LookupCase]:
    """`count` cases of one path, cycling through the distinct ones when there are fewer."""
    matching = [c for c in cases if c.path == path]
    if not matching:
        return []
    return [matching[i % len(matching)] for i in range(count)]


def measure_path(service, floor: LookupFloor, cases: Sequence[LookupCase], warmups: int = WARMUP_LOOKUPS) -> dict[str, Any]:
    """
    Pipeline and floor latencies of one path. Each case is timed on both sides back to back,
    the side that goes first alternating, so background load (other work on the machine) weighs
    on both alike. Process CPU time is recorded beside wall time: it is far less sensitive to
    other processes.
    """
    for case in cases[:warmups]:
        service.lookup(case.query)
        floor.run(case.query, case.filter_expression)
    sides: dict[str, list[tuple[float, float]]] = {"pipeline": [], "floor": []}
    for number, case in enumerate(cases):
        calls = [
            ("pipeline", lambda c=case: service.lookup(c.query)),
            ("floor", lambda c=case: floor.run(c.query, c.filter_expression)),
        ]
        for side, function in calls if number % 2 == 0 else reversed(calls):
            sides[side].append(call_ms(function))
    summaries = {}
    for side, samples in sides.items():
        summaries[side] = latency_summary([wall for wall, _ in samples])
        summaries[side]["cpu_p50_ms"] = round(percentile([cpu for _, cpu in samples], 0.5), 2)

    def p50_ratio(column: int) -> float:  # 0: wall, 1: CPU
        return percentile([s[column] for s in sides["pipeline"]], 0.5) / percentile([s[column] for s in sides["floor"]], 0.5)

    return {
        "queries": len(cases),
        "distinct_queries": len({c.query for c in cases}),
        **summaries,
        "p50_ratio": p50_ratio(0),  # unrounded: the target verdict is taken on it
        "cpu_p50_ratio": round(p50_ratio(1), 3),
    }


def bench_lookup(
    cfg: DictConfig,
    corpus: str | Path | None = None,
    min_chunks: int = 10000,
    queries: int = 60,
    echo: Callable[[str], None] = print,
    tracing_lookups: int = 60,
) -> dict[str, Any]:
    """
    Lookup latency of the pipeline against one embedding + one search (see the module docstring),
    then, on the same collection, lookup latency with MLflow tracing off vs on
    (`pipelines.tracing_bench.compare_tracing_overhead`, `tracing_lookups` per mode; 0 skips it).
    """
    from pipelines.indexing import run_indexing
    from pipelines.lookup import LookupService

    files = read_corpus(resolve_corpus(corpus))
    figures: dict[str, Any] = {"load_avg_start": load_average()}
    with tempfile.TemporaryDirectory(prefix="knowledge-bench-lookup-") as tmp:
        work = Path(tmp)
        kb_root = work / "kb"
        cfg = bench_config(cfg, work / "state", kb_root)
        echo(f"bench lookup: repeating {len(files)} runbooks to >= {min_chunks} chunks under {work}")
        _, copies = build_repeated_kb(cfg, files, kb_root, min_chunks)
        report, index_s = timed(lambda: run_indexing(cfg, rebuild=True))
        echo(f"indexed {report.collection_count} chunks in {index_s:.1f} s; classifying queries")

        service = LookupService(cfg)
        _, warm_s = timed(service.warm_up)
        settle_s = settle()
        candidates = lookup_query_candidates({f.category for f in files}, copies)
        cases = classify_queries(service, [q for group in candidates.values() for q in group])
        floor = LookupFloor(cfg, service.pipeline.get_component("query_embedder"))

        paths: dict[str, Any] = {}
        for path in ("filtered", "fallback"):
            picked = pick_cases(cases, path, queries)
            if not picked:
                echo(f"warning: no crafted query took the {path} path; it is not measured")
                continue
            with OtherCpu() as other:
                paths[path] = measure_path(service, floor, picked)
            paths[path]["other_cpu_share"] = other.share
            paths[path]["target_p50_ratio"] = LOOKUP_RATIO_TARGETS[path]
            paths[path]["meets_target"] = paths[path]["p50_ratio"] <= LOOKUP_RATIO_TARGETS[path]
            paths[path]["p50_ratio"] = round(paths[path]["p50_ratio"], 3)
        tracing = None
        if tracing_lookups > 0:
            from pipelines.tracing_bench import compare_tracing_overhead

            echo("")
            tracing = compare_tracing_overhead(
                cfg, [c.query for c in cases] or list(candidates.values())[0], n=tracing_lookups, out=echo
            )
        _cleanup_milvus(cfg)

    reasons: dict[str, int] = {}
    for case in cases:
        if case.fallback_reason:
            reasons[case.fallback_reason] = reasons.get(case.fallback_reason, 0) + 1
    figures.update(
        chunks=report.collection_count,
        copies=copies,
        index_s=round(index_s, 1),
        service_warmup_s=round(warm_s, 2),
        settle_s=round(settle_s, 1),
        top_k=cfg.retrieval.top_k,
        crafted_queries={path: sum(1 for c in cases if c.path == path) for path in ("filtered", "fallback", "unfiltered")},
        fallback_reasons=reasons,
        paths=paths,
        tracing=tracing,
        peak_rss_mb=peak_rss_mb(),
        load_avg_end=load_average(),
    )
    echo(format_lookup_figures(figures))
    return figures


def format_lookup_figures(f: dict[str, Any]) -> str:
    crafted = ", ".join(f"{path} {n}" for path, n in f["crafted_queries"].items())
    lines = [
        f"collection        {f['chunks']} chunks ({f['copies']} copies of the corpus), top_k {f['top_k']}, "
        f"indexed in {f['index_s']} s, then {f['settle_s']} s until Milvus Lite's background work settled",
        f"crafted queries   {crafted} (by what the retrieval trace shows); fallback reasons {f['fallback_reasons']}",
    ]
    for path, p in f["paths"].items():
        verdict = "meets" if p["meets_target"] else "OVER"
        lines.append(
            f"{path:<17} pipeline p50 {p['pipeline']['p50_ms']:.1f} ms p95 {p['pipeline']['p95_ms']:.1f} ms | "
            f"floor p50 {p['floor']['p50_ms']:.1f} ms p95 {p['floor']['p95_ms']:.1f} ms | "
            f"p50 ratio {p['p50_ratio']:.3f} ({verdict} target <= {p['target_p50_ratio']}) "
            f"[{p['queries']} timed, {p['distinct_queries']} distinct]"
        )
        lines.append(
            f"{'':<17} CPU time p50: pipeline {p['pipeline']['cpu_p50_ms']:.1f} ms, floor "
            f"{p['floor']['cpu_p50_ms']:.1f} ms, ratio {p['cpu_p50_ratio']:.2f}; {format_other_cpu(p['other_cpu_share'])}"
        )
    lines += [
        f"peak RSS          {f['peak_rss_mb']:.0f} MiB",
        f"load average      {f['load_avg_start']} at start, {f['load_avg_end']} at end (1 min, whole machine)",
    ]
    return "\n".join(lines)
