"""
Per-query parity of the lookup pipeline across Milvus engines, on the labelled `eval/` sets:

- `file`: Milvus Lite in a file (both legs), the reference;
- `grpc`: the Milvus Lite gRPC server (`milvus-lite server`, both legs);
- `file-dense`: the Lite file with the BM25 leg off (`retrieval.bm25_top_k=0`);
- `standalone`: the Milvus 2.3 standalone (PyPI `milvus`), which has no BM25 function: dense only.

Each KB is indexed once per engine with the exact FLAT index, every query is looked up on each,
and a query's result (evidence keys in order, their scores, BM25 ranks and scores, found, the
fallback taken) is compared between `grpc` and `file`, and between `standalone` and `file-dense`.
`--save` writes every result; `--against` compares this run's `file` results with a saved run's
(the same code before and after a change). Both servers are started here, on 127.0.0.1, and
stopped at the end.

    python -m pipelines.bench.server_parity --save /tmp/parity.json
"""

import argparse
import json
import sys
import tempfile
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from pipelines.evaluation.metrics import EvalQuery
from pipelines.evaluation.run import load_queries

REPO = Path(__file__).resolve().parents[2]
SAMPLE_KB = REPO / "knowledge"
RUNBOOKS = REPO.parent / "shared" / "corpus" / "prometheus-runbooks"
# The eval set over the sample knowledge base; every other set is over the runbook corpus.
SAMPLE_SET = "sample-kb.jsonl"
ENGINES = ("file", "grpc", "file-dense", "standalone")
# (engine, its reference): a pair's results must be identical query by query.
PAIRS = (("grpc", "file"), ("standalone", "file-dense"))
DENSE_ONLY = ("retrieval.bm25_top_k=0",)
SCORE_DIGITS = 4


def fingerprint(result) -> dict[str, Any]:
    """What must not differ between engines: the evidence in order with its scores, found, the fallback."""
    trace = result.retrieval_trace
    return {
        "found": result.found,
        "fallback": trace.fallback_reason,
        "legs": list(trace.legs),
        "evidence": [
            [
                block.evidence_key,
                round(block.score, SCORE_DIGITS),
                block.bm25_rank,
                None if block.bm25_score is None else round(block.bm25_score, SCORE_DIGITS - 1),
            ]
            for block in result.evidence_blocks
        ],
        "sources": [block.source for block in result.evidence_blocks],
    }


def hit_at_1(queries: list[EvalQuery], results: list[dict[str, Any]]) -> str:
    """hit@1 over the answerable queries; over a set of off-topic ones, the share answered `found=false`."""
    pairs = list(zip(queries, results, strict=True))
    answerable = [(query, result) for query, result in pairs if query.answerable]
    if not answerable:
        return f"{sum(not result['found'] for _, result in pairs) / len(pairs):.3f} not found"
    hits = [bool(result["sources"]) and result["sources"][0] in query.relevant for query, result in answerable]
    return f"{sum(hits) / len(hits):.3f}"


def engine_overrides(engine: str, uris: dict[str, str]) -> list[str]:
    if engine in ("file", "file-dense"):
        return [] if engine == "file" else list(DENSE_ONLY)
    full_text = "true" if engine == "grpc" else "false"
    return ["milvus=server", f"milvus.uri={uris[engine]}", "milvus.index_type=FLAT", f"milvus.full_text={full_text}"]


class Pipelines:
    """One lookup pipeline per (knowledge base, engine), its KB indexed on first use."""

    def __init__(self, state: Path, uris: dict[str, str]) -> None:
        self.state = state
        self.uris = uris
        self._built: dict[tuple[Path, str], Any] = {}

    def get(self, kb: Path, engine: str):
        if (kb, engine) not in self._built:
            self._built[kb, engine] = self._build(kb, engine)
        return self._built[kb, engine]

    def _build(self, kb: Path, engine: str):
        from pipelines.config.settings import load_config
        from pipelines.indexing import run_indexing
        from pipelines.lookup import build_lookup_pipeline

        # The Lite file is shared by `file` and `file-dense`: indexed once, by `file` (the first engine).
        state_dir = self.state / ("file" if engine == "file-dense" else engine) / kb.name
        collection = f"parity_{kb.name.replace('-', '_')}"
        overrides = [f"paths.state_dir={state_dir}", f"kb.path={kb}", "mlflow=off", f"milvus.collection={collection}"]
        cfg = load_config([*overrides, *engine_overrides(engine, self.uris)])
        if engine != "file-dense" or (kb, "file") not in self._built:
            run_indexing(cfg, rebuild=True)
        return build_lookup_pipeline(cfg, record=False)

    def results(self, kb: Path, engine: str, queries: list[EvalQuery]) -> list[dict[str, Any]]:
        pipeline = self.get(kb, engine)
        return [
            fingerprint(pipeline.run({"query_transformer": {"query": query.query}})["assembler"]["result"])
            for query in queries
        ]


def compare(results: list[dict], reference: list[dict]) -> list[int]:
    """The 0-based positions of the queries whose results differ."""
    return [i for i, (a, b) in enumerate(zip(results, reference, strict=True)) if a["evidence"] != b["evidence"]]


def run(sets: list[Path], engines: tuple[str, ...], state: Path, out: Callable[[str], None]) -> dict[str, Any]:
    from pipelines.dev.lite_server import LiteServerProcess
    from pipelines.dev.milvus_server import MilvusServerProcess

    report: dict[str, Any] = {}
    with ExitStack() as servers:
        uris = {}
        if "grpc" in engines:
            uris["grpc"] = servers.enter_context(LiteServerProcess(state / "lite-server")).uri
        if "standalone" in engines:
            uris["standalone"] = servers.enter_context(MilvusServerProcess(state / "standalone")).uri
        pipelines = Pipelines(state, uris)
        for path in sets:
            queries = load_queries(path)
            kb = SAMPLE_KB if path.name == SAMPLE_SET else RUNBOOKS
            report[path.name] = {engine: pipelines.results(kb, engine, queries) for engine in engines}
            report[path.name]["_queries"] = [query.query for query in queries]
            out(summary_row(path.name, queries, report[path.name], engines))
    return report


def summary_row(name: str, queries: list[EvalQuery], results: dict[str, list], engines: tuple[str, ...]) -> str:
    cells = [name, str(len(queries))]
    for engine, reference in PAIRS:
        if engine in engines and reference in engines:
            differing = compare(results[engine], results[reference])
            cells.append(f"{len(queries) - len(differing)}/{len(queries)}")
        else:
            cells.append("-")
    cells += [hit_at_1(queries, results[engine]) if engine in engines else "-" for engine in ENGINES]
    return "| " + " | ".join(cells) + " |"


HEADER = (
    "| eval set | queries | grpc = file | 2.3 = file-dense | hit@1 file | hit@1 grpc | hit@1 file-dense "
    "| hit@1 2.3 |\n|---|---:|---:|---:|---:|---:|---:|---:|"
)


def against(report: dict[str, Any], saved: dict[str, Any], out: Callable[[str], None]) -> int:
    """Compare every engine's results with a saved run's; print the queries that differ. Their number."""
    differing = 0
    for name, engines in report.items():
        for engine, results in engines.items():
            if engine.startswith("_") or engine not in saved.get(name, {}):
                continue
            changed = compare(results, saved[name][engine])
            differing += len(changed)
            out(f"{name} {engine}: {len(results) - len(changed)}/{len(results)} identical to the saved run")
            for i in changed[:5]:
                out(f"  differs: {engines['_queries'][i]!r}")
    return differing


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", nargs="*", type=Path, default=sorted((REPO / "eval").glob("*.jsonl")))
    parser.add_argument("--engines", default=",".join(ENGINES), help=f"comma-separated, of {', '.join(ENGINES)}")
    parser.add_argument("--save", type=Path, help="write every result (JSON) here")
    parser.add_argument("--against", type=Path, help="a saved run to compare this run's results with")
    args = parser.parse_args(argv)
    engines = tuple(engine for engine in ENGINES if engine in args.engines.split(","))
    with tempfile.TemporaryDirectory(prefix="parity-") as state:
        print(HEADER, flush=True)
        report = run(args.sets, engines, Path(state), lambda line: print(line, flush=True))
    if args.save:
        args.save.write_text(json.dumps(report))
    if args.against:
        return 1 if against(report, json.loads(args.against.read_text()), print) else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
