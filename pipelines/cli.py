"""
The `knowledge` command line: one thin entry point over the pipelines.

    knowledge index [--kb DIR] [--rebuild] [--status] [key=value ...]
    knowledge lookup "QUERY" [key=value ...]
    knowledge lookup --batch FILE [key=value ...]
    knowledge lookup --url http://127.0.0.1:1416 "QUERY"
    knowledge serve [--host H] [--port P] [--mcp] [--workers N] [key=value ...]
    knowledge eval --queries FILE [--queries FILE ...] [--guard FILE] [-m] [--search NAME --trials N]
                   [--constraint SPEC] [--study NAME --resume] [key=value ...]
    knowledge eval|lookup|serve --cfg [key=value ...]
    knowledge compare --queries FILE [--top-k K] [--json] [key=value ...]
    knowledge compare --a "k=v ..." --b "k=v ..." --queries FILE [--report FILE] [--json] [key=value ...]
    knowledge adapt [--kb DIR] [--epochs N] [--output DIR] [--seed S] [key=value ...]
    knowledge bench index|lookup|serve|backends|all [options] [key=value ...]
    knowledge traces list [--last N] [--status ok|error] [key=value ...]
    knowledge traces show ID [--json] [key=value ...]
    knowledge traces export [--format jsonl] [--output FILE] [key=value ...]
    knowledge traces replay [key=value ...]
    knowledge traces rerun [--since DATE] [--last N] [--json] [key=value ...]
    knowledge dev milvus-server [--data-dir DIR] [--port P]

Hydra overrides go after the arguments. Exit status: 0 on success (found=false included),
2 on bad input or configuration, 1 on any other failure; errors are one line on stderr.
"""

import argparse
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")
# Model-loading bars of transformers are noise on every call; the indexing bar is our own.
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

from components.errors import EXIT_BAD_INPUT, EXIT_FAILURE, EXIT_OK, BadInputError, KnowledgeFailure

EPILOG = """\
Configuration: any key of conf/ can be overridden after the arguments, for example
  knowledge lookup "disk almost full" retrieval.top_k=30 retrieval.reference_threshold=0.6
  knowledge index --kb ~/runbooks milvus.uri=/tmp/kb.db
  knowledge lookup "cert expiry" mlflow=off trace=postgres
Exit status: 0 success (found=false is a success), 2 bad input or config, 1 failure.
"""


class UsageError(BadInputError):
    """Bad command-line input (exit status 2)."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="knowledge",
        description="Evidence-first knowledge retrieval over a markdown knowledge base in Milvus.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "-v", "--verbose", action="count", default=0, help="more logging on stderr (-v info, -vv debug)"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    index = sub.add_parser(
        "index",
        help="index the markdown knowledge base into Milvus and build the L0 index",
        description="Index markdown into Milvus incrementally: unchanged documents are skipped by content "
        "hash, changed ones replaced, deleted ones removed. Prints a report.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    index.add_argument(
        "--kb",
        metavar="DIR",
        help="knowledge base folder (default: the one the state dir's index holds, else kb.path, knowledge/); "
        "another one than the index holds needs --rebuild",
    )
    index.add_argument("--rebuild", action="store_true", help="drop the collection and index everything from scratch")
    index.add_argument(
        "--status", action="store_true", help="print the index manifest (knowledge base, content, config) and exit"
    )
    index.add_argument("--json", action="store_true", help="print the report as JSON")
    index.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides")

    lookup = sub.add_parser(
        "lookup",
        help="look up one query (or a batch) and print the evidence-first result as JSON",
        description="Run lookup_knowledge: print the result JSON (found, evidenceBlocks, contextPack, traces).",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    lookup.add_argument("query", nargs="?", help="the question or alert text (omit with --batch)")
    lookup.add_argument(
        "--batch", metavar="FILE", help="one query per line, or JSONL with a 'query' field; '-' for stdin"
    )
    lookup.add_argument("--compact", action="store_true", help="one-line JSON")
    lookup.add_argument(
        "--view", choices=("full", "agent"), default="full", help="agent: packed context and citations only"
    )
    lookup.add_argument(
        "--url", metavar="URL", help="ask a running `knowledge serve` (e.g. http://127.0.0.1:1416) instead"
    )
    lookup.add_argument("--cfg", action="store_true", help="print the composed config (YAML) and exit")
    lookup.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides")

    serve = sub.add_parser(
        "serve",
        help="serve lookup_knowledge over HTTP (hayhooks REST) or, with --mcp, over MCP",
        description="Serve POST /lookup_knowledge/run and GET /health (REST, default port serve.port=1416), or "
        "the MCP tool lookup_knowledge at /mcp and /sse (--mcp, serve.mcp_port=1417). Binds to 127.0.0.1; "
        "any other address needs an API key (KNOWLEDGE_API_KEY or serve.api_key).",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    serve.add_argument("--host", help="address to bind (default serve.host, 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port (default serve.port, or serve.mcp_port with --mcp)")
    serve.add_argument("--mcp", action="store_true", help="serve the MCP tool instead of the REST endpoint")
    serve.add_argument(
        "--workers",
        type=int,
        help="worker processes sharing the port (default serve.workers, 1); above 1 needs milvus=server",
    )
    serve.add_argument("--cfg", action="store_true", help="print the composed config (YAML) and exit")
    serve.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides")

    evaluate = sub.add_parser(
        "eval",
        help="evaluate retrieval quality on a labelled query set, beside two baselines",
        description="Print hit@1, hit@5, MRR@10 (document level), the no-evidence rate on off-topic queries "
        "and the answer rate on answerable ones, for the full pipeline, plain dense retrieval and a "
        "BM25 + dense reciprocal-rank-fusion hybrid over the same chunks, and log them as one MLflow run. "
        "-m sweeps Hydra overrides (a=1,2, range(), choice()): one child run per combination; --search NAME "
        "runs Optuna's constrained search over conf/search/NAME.yaml (or a YAML path) with a held-out split. "
        "Searches and sweeps keep to constraints (--constraint, --guard): the printed best meets all of them, "
        "and none feasible exits 1.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    evaluate.add_argument(
        "--queries",
        action="append",
        default=[],
        metavar="FILE",
        help="JSONL: query, relevant (sources), kind; repeat it to evaluate several sets together, each reported apart",
    )
    evaluate.add_argument(
        "--kb", metavar="DIR", help="index this knowledge base first (into the configured collection)"
    )
    evaluate.add_argument("--no-baselines", action="store_true", help="evaluate the pipeline only")
    evaluate.add_argument("--details", metavar="FILE", help="write per-query results as JSONL")
    evaluate.add_argument("--json", action="store_true", help="print the metrics as JSON")
    evaluate.add_argument(
        "--record", action="store_true", help="record each query as a tool_invocation row (and MLflow trace)"
    )
    evaluate.add_argument(
        "-m", "--multirun", action="store_true", help="sweep: every combination of a=1,2 / range() / choice() overrides"
    )
    evaluate.add_argument(
        "--engine",
        choices=("builtin", "mlflow"),
        default="builtin",
        help="builtin (default: every system, all metrics) or mlflow: mlflow.genai.evaluate of the pipeline "
        "with code-based hit@1/hit@5/reciprocal-rank scorers (docs/tracing.md)",
    )
    evaluate.add_argument("--rank-by", default="hit@1", metavar="METRIC", help="rank sweep combinations (hit@1)")
    evaluate.add_argument("--search", metavar="NAME", help="Optuna search over the space of conf/search/NAME.yaml")
    evaluate.add_argument("--trials", type=int, default=20, metavar="N", help="search trials (default 20)")
    evaluate.add_argument(
        "--holdout",
        action="append",
        default=[],
        metavar="FILE",
        help="held-out queries for the search's best (repeatable)",
    )
    evaluate.add_argument(
        "--guard",
        action="append",
        default=[],
        metavar="FILE",
        help="a query set scored in every trial for the constraints only, e.g. eval/offtopic-alerts.jsonl (repeatable)",
    )
    evaluate.add_argument(
        "--constraint",
        action="append",
        default=[],
        metavar="SPEC",
        help="search/sweep constraint METRIC[@SET]>=X or <=X, e.g. 'no_evidence_rate>=0.95' (every set with "
        "off-topic queries) or 'answer_rate@prometheus-dev>=0.95' (SET: a query file's stem); adds to the "
        "space's constraints (a sweep's default: no_evidence_rate>=0.95); 'none' drops those (repeatable)",
    )
    evaluate.add_argument("--study", metavar="NAME", help="Optuna study name in paths.state_dir/optuna.db")
    evaluate.add_argument(
        "--resume", action="store_true", help="continue the --study NAME (default: the latest study of the space)"
    )
    evaluate.add_argument(
        "--holdout-share", type=float, default=0.3, metavar="S", help="without --holdout: share held out (0.3)"
    )
    evaluate.add_argument("--seed", type=int, default=0, help="search and split seed (default 0)")
    evaluate.add_argument(
        "--experiment", default="lookup-knowledge-eval", metavar="NAME", help="MLflow experiment of the runs"
    )
    evaluate.add_argument("--cfg", action="store_true", help="print the composed config (YAML) and exit")
    evaluate.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides")

    adapt = sub.add_parser(
        "adapt",
        help="fine-tune the embedding model on the knowledge base alone (no labels), for embedder.model=DIR",
        description="Fine-tune embedder.model (the packaged all-MiniLM-L6-v2) on pairs made from the knowledge base "
        "alone: title -> section, heading path -> section, first sentence -> rest, with in-batch negatives and "
        "a sibling document's hard negative. Resumable (checkpoints in DIR/checkpoints), deterministic with "
        "--seed; writes a model folder with a model card. Use it with embedder.model=DIR.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    adapt.add_argument("--kb", metavar="DIR", help="knowledge base folder (default: kb.path)")
    adapt.add_argument("--epochs", type=int, default=1, metavar="N", help="training epochs (default 1)")
    adapt.add_argument(
        "--output", metavar="DIR", help="model folder (default: paths.state_dir/models/adapted-<kb folder name>)"
    )
    adapt.add_argument("--seed", type=int, default=0, metavar="S", help="random seed (default 0)")
    adapt.add_argument("--batch-size", type=int, default=32, metavar="B", help="pairs per batch (default 32)")
    adapt.add_argument("--max-steps", type=int, metavar="N", help="stop after N steps (default: all epochs)")
    adapt.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides")

    comparison = sub.add_parser(
        "compare",
        help="A/B two configs over a labelled query set (--a/--b), or the sdk and haystack vector paths",
        description="With --a and/or --b: evaluate both configs (the overrides after the arguments apply to "
        "both) on a labelled query set (as eval's); print per-metric deltas with a paired bootstrap interval "
        "and an exact sign test, the queries whose top source or answer changed; write an HTML report and "
        "log one MLflow run with both configs as params. Without them: search both vector-store paths "
        "with the same query embeddings; print overlap@k, Jaccard, RBO, top-1 agreement and similarity "
        "differences. Both log to the MLflow experiment lookup-knowledge-compare.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    comparison.add_argument("--queries", required=True, metavar="FILE", help="JSONL with a 'query' field")
    comparison.add_argument("--top-k", type=int, metavar="K", help="hits compared per path (default retrieval.top_k)")
    comparison.add_argument("--json", action="store_true", help="print the metrics and run id as JSON")
    comparison.add_argument("--a", metavar='"k=v ..."', help="config A's overrides (A/B; default: the config as is)")
    comparison.add_argument("--b", metavar='"k=v ..."', help="config B's overrides (A/B)")
    comparison.add_argument(
        "--report", metavar="FILE", help="A/B: where to write the HTML report (default: STATE_DIR/ab-report.html)"
    )
    comparison.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides")

    bench = sub.add_parser(
        "bench",
        help="benchmarks that print figures (indexing throughput, lookup latency)",
        description="Benchmarks measured against a floor in the same run.",
    )
    bench_sub = bench.add_subparsers(dest="bench", metavar="BENCH", required=True)
    bench_index = bench_sub.add_parser(
        "index",
        help="indexing throughput vs bare SentenceTransformer.encode of the same chunk texts",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    bench_index.add_argument(
        "--corpus", metavar="DIR", help="corpus to repeat (default: ../shared/corpus/prometheus-runbooks)"
    )
    bench_index.add_argument(
        "--min-chunks", type=int, default=5000, help="repeat the corpus to at least this many chunks"
    )
    bench_index.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides")
    bench_lookup = bench_sub.add_parser(
        "lookup",
        help="lookup latency (p50/p95) vs one embedding + one raw MilvusClient.search",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    bench_lookup.add_argument(
        "--corpus", metavar="DIR", help="corpus to repeat (default: ../shared/corpus/prometheus-runbooks)"
    )
    bench_lookup.add_argument("--min-chunks", type=int, default=10000, help="collection size, in chunks")
    bench_lookup.add_argument("--queries", type=int, default=60, help="timed lookups per path")
    bench_lookup.add_argument(
        "--tracing-lookups", type=int, default=60, help="timed lookups per mode for MLflow tracing off vs on (0: skip)"
    )
    bench_lookup.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides")
    bench_serve = bench_sub.add_parser(
        "serve",
        help="HTTP load on a running `knowledge serve`: requests/s, p50/p95/p99, errors, overhead",
        description="Give the server's overrides too (paths.state_dir=...): the overhead reads its trace rows.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    bench_serve.add_argument("--url", default="http://127.0.0.1:1416", help="the running server")
    bench_serve.add_argument("--clients", type=int, default=8, help="concurrent clients")
    bench_serve.add_argument("--seconds", type=float, default=60.0, help="duration of the concurrent phase")
    bench_serve.add_argument("--single-seconds", type=float, default=15.0, help="duration of the one-client phase")
    bench_serve.add_argument(
        "--workers",
        metavar="N[,N...]",
        help="start `knowledge serve --workers N` itself for each count (with the overrides: milvus=server, "
        "a shared trace.db_url) instead of using --url; prints requests/s, p95, trace rows and the scaling",
    )
    bench_serve.add_argument(
        "--duration", type=float, default=30.0, help="with --workers: seconds of load per worker count"
    )
    bench_serve.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides")

    bench_backends = bench_sub.add_parser(
        "backends",
        help="the embedding backends side by side: vectors, query embedding, indexing, cold start, serving",
        description="torch, onnx and onnx_int8 in one run, alternating: cosine of each backend's vectors to "
        "torch's over the eval queries and sample chunks, query embedding p50 (1 and 2 texts), indexing "
        "embedder chunks/s, one-shot lookup cold start against the bare imports it needs, and a one-worker "
        "`knowledge serve` per backend (peak RSS, single-client p50, req/s at --clients).",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    bench_backends.add_argument(
        "--backends", default="torch,onnx,onnx_int8", metavar="B[,B...]", help="backends to compare (torch first)"
    )
    bench_backends.add_argument("--rounds", type=int, default=5, help="alternating rounds of 20 embeddings each")
    bench_backends.add_argument("--cold-runs", type=int, default=3, help="one-shot lookups per backend")
    bench_backends.add_argument("--serve-seconds", type=float, default=10.0, help="seconds per serve load phase")
    bench_backends.add_argument("--clients", type=int, default=8, help="concurrent clients of the serve part")
    bench_backends.add_argument(
        "--skip",
        action="append",
        default=[],
        metavar="PART",
        help="leave a part out (repeatable): " + ", ".join(("vectors", "embed", "index", "cold_start", "serve")),
    )
    bench_backends.add_argument("--output", metavar="FILE", help="also write the figures as JSON")
    bench_backends.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides")

    bench_all = bench_sub.add_parser(
        "all",
        help="every benchmark, one table (also --output JSON and an MLflow run)",
        description="Index throughput, lookup latency (filtered, fallback, MLflow tracing), sidecar overhead, "
        "serve figures (--serve-url), a scale point and the one-shot cold start, each against its floor.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    bench_all.add_argument("--corpus", metavar="DIR", help="corpus to repeat for the index and lookup parts")
    bench_all.add_argument("--min-chunks", type=int, default=2000, help="index and lookup parts: chunks")
    bench_all.add_argument("--lookup-queries", type=int, default=40, help="timed lookups per lookup path")
    bench_all.add_argument("--tracing-lookups", type=int, default=40, help="lookups per tracing mode (0: skip)")
    bench_all.add_argument("--index-rounds", type=int, default=2, help="timed pipeline runs of the index part")
    bench_all.add_argument("--sidecar-lookups", type=int, default=40, help="lookups per sidecar mode")
    bench_all.add_argument("--base-chunks", type=int, default=10000, help="scale part: the base size")
    bench_all.add_argument("--scale-chunks", type=int, default=100000, help="scale part: the large size")
    bench_all.add_argument("--scale-lookups", type=int, default=40, help="timed lookups per scale point")
    bench_all.add_argument("--cold-runs", type=int, default=3, help="one-shot lookups and bare imports timed")
    bench_all.add_argument("--serve-url", metavar="URL", help="a running server for the serve part")
    bench_all.add_argument(
        "--skip",
        action="append",
        default=[],
        metavar="PART",
        help="leave a part out (repeatable): "
        + ", ".join(("index", "lookup", "sidecar", "serve", "scale", "cold_start")),
    )
    bench_all.add_argument("--output", metavar="FILE", help="also write the figures as JSON")
    bench_all.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides")

    dev = sub.add_parser(
        "dev",
        help="development helpers: a local Milvus standalone server",
        description="`knowledge dev milvus-server` runs a Milvus 2.3 standalone server (PyPI `milvus`) on "
        "loopback until Ctrl+C, its data in --data-dir; use it with milvus=server milvus.uri=http://127.0.0.1:PORT.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    dev_sub = dev.add_subparsers(dest="dev", metavar="HELPER", required=True)
    dev_server = dev_sub.add_parser("milvus-server", help="a Milvus standalone server on 127.0.0.1 until Ctrl+C")
    dev_server.add_argument(
        "--data-dir", default=".knowledge/milvus-server", help="where its data lives (kept between runs)"
    )
    dev_server.add_argument("--port", type=int, default=19530, help="port (default 19530, as conf/milvus/server.yaml)")

    traces = sub.add_parser(
        "traces",
        help="review recorded lookups (tool_invocation rows): list, show, export, replay the spool, rerun under a new config",
        description="Every lookup leaves one tool_invocation row in trace.db_url (SQLite by default, "
        "trace=postgres for PostgreSQL). Records the database could not take wait in trace.spool_path.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    traces_sub = traces.add_subparsers(dest="traces", metavar="ACTION", required=True)
    traces_list = traces_sub.add_parser("list", help="the latest invocations, newest first")
    traces_list.add_argument("--last", type=int, default=20, metavar="N", help="how many (default 20; 0: all)")
    traces_list.add_argument("--status", metavar="STATUS", help="only ok or error invocations")
    traces_list.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides")
    traces_show = traces_sub.add_parser("show", help="one invocation: attempts, rerank trace, evidence summaries")
    traces_show.add_argument("id", metavar="ID", help="invocation id (or a unique prefix of 6+ characters)")
    traces_show.add_argument("--json", action="store_true", help="the row as JSON")
    traces_show.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides")
    traces_export = traces_sub.add_parser("export", help="every invocation as JSONL, oldest first")
    traces_export.add_argument("--format", default="jsonl", metavar="FORMAT", help="jsonl (the only format)")
    traces_export.add_argument("--output", metavar="FILE", help="write to FILE instead of stdout")
    traces_export.add_argument("--status", metavar="STATUS", help="only ok or error invocations")
    traces_export.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides")
    traces_replay = traces_sub.add_parser("replay", help="replay spooled records into the trace database now")
    traces_replay.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides")
    traces_rerun = traces_sub.add_parser(
        "rerun",
        help="ask the recorded queries again under the current config (overrides) and show what would change",
        description="Re-run the queries of recorded lookups (status ok) with the current config and its "
        "overrides; print what changed against the record per query and in total (top source, found, "
        "relevance level, fallback reason) and log it as one MLflow run (experiment lookup-knowledge-rerun). "
        "The reruns are not recorded: the trace table keeps only real traffic.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    traces_rerun.add_argument("--since", metavar="DATE", help="only lookups recorded since DATE (YYYY-MM-DD[THH:MM])")
    traces_rerun.add_argument("--last", type=int, default=0, metavar="N", help="only the newest N lookups (0: all)")
    traces_rerun.add_argument("--json", action="store_true", help="print the totals and every query as JSON")
    traces_rerun.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides")
    return parser


def _configure_logging(verbosity: int) -> None:
    level = logging.WARNING if verbosity == 0 else logging.INFO if verbosity == 1 else logging.DEBUG
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    if verbosity < 2:
        # pymilvus and milvus_lite log an ERROR with a traceback for errors we report ourselves in one line.
        for noisy in ("pymilvus", "grpc", "milvus_lite", "httpx", "urllib3", "sentence_transformers", "haystack"):
            quiet = noisy in ("pymilvus", "grpc", "milvus_lite")
            logging.getLogger(noisy).setLevel(logging.CRITICAL if quiet else max(level, logging.WARNING))
        # On a failed run Haystack snapshots the pipeline state for debugging and warns about every
        # field it cannot serialize; the failure itself is reported (and recorded) in one line.
        for snapshot_logger in ("haystack.utils.base_serialization", "haystack.core.pipeline.breakpoint"):
            logging.getLogger(snapshot_logger).setLevel(logging.ERROR)


def _load(overrides: Sequence[str], extra: Sequence[str] = ()):
    from pipelines.settings import load_config

    for override in overrides:
        if "=" not in override:
            raise UsageError(f"unexpected argument {override!r}: overrides look like key=value")
    return load_config([*extra, *overrides])


def _override_key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")


def _set_literal(cfg, key: str, value: str) -> None:
    """
    Set a config string as it is. A path a shell passes can hold anything Hydra's override
    grammar or OmegaConf's interpolation would parse (`(`, `,`, `'`, `${`): it never goes through
    an override, and `${` is escaped (with the backslashes before it) so it stays literal.
    """
    import re

    from omegaconf import OmegaConf

    OmegaConf.update(cfg, key, re.sub(r"(\\*)\$\{", lambda m: m.group(1) * 2 + "\\${", value))


def cmd_index(args: argparse.Namespace) -> int:
    from pipelines.manifest import format_manifest, kb_to_index

    cfg = _load(args.overrides)  # a bad config fails before the slow imports below
    if args.status:
        print(format_manifest(cfg))
        return EXIT_OK
    # `kb.path=DIR` among the overrides asks for a knowledge base as --kb does.
    asked = args.kb or (cfg.kb.path if any(_override_key(o) == "kb.path" for o in args.overrides) else None)
    _set_literal(cfg, "kb.path", kb_to_index(cfg, asked, args.rebuild))

    from pipelines.indexing import run_indexing

    report = run_indexing(cfg, rebuild=args.rebuild, progress_bar=sys.stderr.isatty())
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        print(format_report(report, cfg))
    return EXIT_OK


def format_report(report, cfg) -> str:
    lines = [
        f"Indexed {cfg.kb.path} into {cfg.milvus.uri} (collection {cfg.milvus.collection}) in {report.seconds:.2f} s",
        f"  added {len(report.added)}, updated {len(report.updated)}, unchanged {len(report.unchanged)}, "
        f"removed {len(report.removed)}, skipped {len(report.skipped)}",
        f"  chunks written {report.chunks_written}, deleted {report.chunks_deleted}, "
        f"in collection {report.collection_count}",
        f"  L0 index: {cfg.l0.index_path}",
    ]
    for skipped in report.skipped:
        lines.append(f"  skipped {skipped.source}: {skipped.reason}")
    lines.extend(f"  note: {note}" for note in report.notes)
    return "\n".join(lines)


def _read_batch(path: str) -> list[tuple[int, str | None, str | None]]:
    """
    The batch's queries as (line number, query, error): a JSONL line whose `query` is not a
    string is an error of that line; invalid UTF-8 stops the batch, naming the file and line.
    """
    stream = sys.stdin.buffer if path == "-" else open(path, "rb")  # noqa: SIM115
    with stream:
        queries: list[tuple[int, str | None, str | None]] = []
        for number, raw in enumerate(stream, start=1):
            try:
                line = raw.decode("utf-8").strip()
            except UnicodeDecodeError as exc:
                raise UsageError(f"{path}:{number}: invalid UTF-8 at byte {exc.start} of the line") from exc
            if not line:
                continue
            if line.startswith("{"):
                queries.append((number, *_json_query(line)))
            else:
                queries.append((number, line, None))
    return queries


def _json_query(line: str) -> tuple[str | None, str | None]:
    try:
        query = json.loads(line)["query"]
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        return None, f"not a JSON object with a 'query' field ({exc})"
    if not isinstance(query, str):
        return None, f"'query' must be a string, not {'null' if query is None else type(query).__name__}"
    return query, None


def _lookup_config(overrides: Sequence[str]):
    """The config of a lookup or serve process; with an ONNX backend, torch is kept out before Haystack loads."""
    from components.common.embedding_models import keep_torch_out

    cfg = _load(overrides)
    keep_torch_out(cfg.embedder.backend)
    return cfg


def _shown(result, view: str) -> dict:
    """The result as `--view` shows it: the full result, or the agent view (packed context and citations)."""
    data = result.to_dict()
    if view == "full":
        return data
    from pipelines.agent import agent_view

    return agent_view(data)


def cmd_lookup(args: argparse.Namespace) -> int:
    overrides = list(args.overrides)
    if args.cfg:  # an override given first lands in QUERY
        return _print_config([args.query, *overrides] if args.query is not None else overrides)
    if args.url:
        return _lookup_remote(args)
    if args.batch:
        if args.query is not None:
            overrides.insert(0, args.query)
        cfg = _lookup_config(overrides)
        from components.common.text import printable
        from components.contracts import STATUS_ERROR, InvalidQueryError
        from pipelines.lookup import LookupService

        try:
            queries = _read_batch(args.batch)
        except OSError as exc:
            raise UsageError(f"cannot read {args.batch}: {exc.strerror or exc}") from exc
        service = LookupService(cfg)
        invalid = errors = 0
        for number, query, problem in queries:
            if problem is not None:
                invalid += 1
                print(json.dumps({"line": number, "error": f"{args.batch}:{number}: {problem}"}), flush=True)
                continue
            try:
                result = service.lookup(query)
                line = _shown(result, args.view)
                if result.evidence_status == STATUS_ERROR:
                    errors += 1
                    _report_failure(result)
            except InvalidQueryError as exc:
                invalid += 1
                line = {"query": printable(query), "error": str(exc)}
            print(json.dumps(line, ensure_ascii=False), flush=True)
        return EXIT_FAILURE if errors else EXIT_BAD_INPUT if invalid else EXIT_OK
    if args.query is None:
        raise UsageError("give a QUERY, or --batch FILE")
    cfg = _lookup_config(overrides)
    from components.contracts import STATUS_ERROR
    from components.tracing.mlflow_sink import defer_setup
    from pipelines.lookup import LookupService

    defer_setup()  # one lookup, then exit: MLflow is imported only if its trace is sampled
    result = LookupService(cfg).lookup(args.query)
    print(json.dumps(_shown(result, args.view), ensure_ascii=False, indent=None if args.compact else 2))
    if result.evidence_status == STATUS_ERROR:
        _report_failure(result)
        return EXIT_FAILURE
    return EXIT_OK


def _lookup_remote(args: argparse.Namespace) -> int:
    from pipelines.serving.client import RemoteLookupError, remote_lookup

    if args.query is None or args.batch or args.overrides:
        raise UsageError("--url takes one QUERY (the server's config applies: no overrides, no --batch)")
    try:
        status, result = remote_lookup(args.url, args.query)
    except RemoteLookupError as exc:
        if exc.bad_input:
            raise UsageError(str(exc)) from exc
        raise
    if args.view == "agent" and status == 200:
        from pipelines.agent import agent_view

        result = agent_view(result)
    print(json.dumps(result, ensure_ascii=False, indent=None if args.compact else 2))
    if status != 200:
        print(f"knowledge: error: {result.get('message')} (invocation {result.get('invocationId')})", file=sys.stderr)
        return EXIT_FAILURE
    return EXIT_OK


def cmd_serve(args: argparse.Namespace) -> int:
    _check_port(args.port)
    if args.cfg:
        return _print_config(args.overrides)
    cfg = _lookup_config(args.overrides)
    from pipelines.serving.bind import check_bind, check_workers, resolve_api_key

    host = args.host or cfg.serve.host
    workers = args.workers if args.workers is not None else cfg.serve.workers
    check_bind(host, resolve_api_key(cfg))  # before the slow imports and long before binding
    check_workers(cfg, workers, args.mcp)

    from pipelines.serving.app import serve

    port = args.port if args.port is not None else cfg.serve.mcp_port if args.mcp else cfg.serve.port
    serve(cfg, list(args.overrides), host=host, port=port, mcp=args.mcp, workers=workers)
    return EXIT_OK


def _report_failure(result) -> None:
    """The one stderr line of a lookup that failed inside the pipeline (its JSON is on stdout)."""
    print(f"knowledge: error: {result.message} (invocation {result.invocation_id})", file=sys.stderr)


def cmd_eval(args: argparse.Namespace) -> int:
    from pipelines.evaluation import EvaluationInputError, format_metrics, run_evaluation_full
    from pipelines.tuning.runs import RunLogger
    from pipelines.tuning.sweep import has_sweep

    overrides = [o for o in args.overrides if not o.startswith("search=")]
    search = args.search or next((o.split("=", 1)[1] for o in args.overrides if o.startswith("search=")), None)
    for override in overrides:
        if "=" not in override:
            raise UsageError(f"unexpected argument {override!r}: overrides look like key=value")
    if args.cfg:
        return _print_config(overrides)
    if not args.queries:
        raise UsageError("give --queries FILE (or --cfg to print the config)")
    _check_tuning_options(args, search)
    try:
        if search:
            return _eval_search(args, search, overrides)
        if args.multirun:
            return _eval_sweep(args, overrides)
        if has_sweep(overrides):
            raise UsageError("sweep overrides (a=1,2, range(), choice()) need -m: knowledge eval --queries FILE -m ...")
        # Recorded lookups are traced, every one, into the run's experiment (linked and labelled there).
        recording = [f"mlflow.experiment={args.experiment}", "mlflow.sample_rate=1.0"] if args.record else []
        cfg = _load(overrides, [*([f"kb.path={args.kb}"] if args.kb else []), *recording])
        if args.engine == "mlflow":
            return _eval_genai(args, cfg)
        for number, queries in enumerate(args.queries):
            evaluation = run_evaluation_full(
                cfg,
                queries,
                kb_path=args.kb if number == 0 else None,
                baselines=not args.no_baselines,
                details_path=args.details,
                record=args.record,
            )
            print(json.dumps(evaluation.report, indent=2) if args.json else format_metrics(evaluation.report))
            runs = RunLogger.from_config(cfg, args.experiment)
            run_id = runs.log_evaluation(evaluation, cfg, run_name=Path(queries).stem)
            for line in runs.announce(run_id):
                print(line, file=sys.stderr if args.json else sys.stdout)
    except EvaluationInputError as exc:
        raise UsageError(str(exc)) from exc
    return EXIT_OK


def _eval_genai(args: argparse.Namespace, cfg) -> int:
    from pipelines.evaluation import index_first, load_queries
    from pipelines.tuning.mlflow_eval import run_genai_evaluation

    if len(args.queries) > 1:
        raise UsageError("--engine mlflow evaluates one --queries file at a time")
    queries_path = args.queries[0]
    queries = load_queries(queries_path)
    if args.kb:
        cfg = index_first(cfg, args.kb)
    try:
        result = run_genai_evaluation(cfg, queries, queries_path, args.experiment)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    metrics = {name: round(float(value), 4) for name, value in sorted(result.metrics.items())}
    print(json.dumps(metrics, indent=2) if args.json else "\n".join(f"{k:<24}{v:.4f}" for k, v in metrics.items()))
    print(f"MLflow run {result.run_id} in experiment {args.experiment!r} at {cfg.mlflow.tracking_uri}", file=sys.stderr)
    return EXIT_OK


def _check_tuning_options(args: argparse.Namespace, search: str | None) -> None:
    """Options of a search or a sweep given to a command that would ignore them: say so rather than guard nothing."""
    search_only = [
        name
        for name, value in (("--study", args.study), ("--resume", args.resume), ("--holdout", args.holdout))
        if value
    ]
    tuning = [name for name, value in (("--guard", args.guard), ("--constraint", args.constraint)) if value]
    if search_only and not search:
        raise UsageError(f"{', '.join(search_only)}: only with a search (--search NAME)")
    if tuning and not (search or args.multirun):
        raise UsageError(f"{', '.join(tuning)}: only with a search (--search NAME) or a sweep (-m)")


def _print_config(overrides: Sequence[str]) -> int:
    """The composed config as YAML, secrets masked (`--cfg`)."""
    from omegaconf import OmegaConf

    from pipelines.settings import SECRET_KEYS

    cfg = _load(overrides)
    for key in SECRET_KEYS:
        if OmegaConf.select(cfg, key):
            OmegaConf.update(cfg, key, "***")
    print(OmegaConf.to_yaml(cfg), end="")
    return EXIT_OK


def _eval_sets(args: argparse.Namespace):
    from pipelines.tuning.guards import load_sets

    tuning = load_sets(args.queries, "tuning")
    return tuning, load_sets(args.guard, "guard", tuning)


def _eval_sweep(args: argparse.Namespace, overrides: list[str]) -> int:
    from pipelines.tuning.guards import DEFAULT_SWEEP_CONSTRAINTS, parse_constraints
    from pipelines.tuning.sweep import format_ranking, run_sweep

    constraints = parse_constraints(list(DEFAULT_SWEEP_CONSTRAINTS), args.constraint, "the sweep's default guard")
    tuning, guards = _eval_sets(args)
    result = run_sweep(
        overrides,
        [],
        ", ".join(args.queries),
        kb_path=args.kb,
        baselines=not args.no_baselines,
        rank_by=args.rank_by,
        experiment=args.experiment,
        say=lambda line: print(line, file=sys.stderr, flush=True),
        sets=[*tuning, *guards],
        constraints=constraints,
    )
    print(format_ranking(result))
    for line in result.runs.announce(result.parent_run_id, f"parent run of {len(result.trials)} child runs"):
        print(line)
    if result.best is None:
        print("knowledge: error: no combination met the constraints", file=sys.stderr)
        return EXIT_FAILURE
    return EXIT_OK


def _eval_search(args: argparse.Namespace, name: str, overrides: list[str]) -> int:
    from pipelines.evaluation import index_first
    from pipelines.tuning.guards import load_sets, parse_constraints
    from pipelines.tuning.search import SearchSpace, format_search, run_search, split_sets

    space = SearchSpace.load(name)
    constraints = parse_constraints(space.constraints, args.constraint, space.origin)
    cfg = _load(overrides)
    tuning, guards = _eval_sets(args)
    if args.holdout:
        held_out = load_sets(args.holdout, "held-out", [*tuning, *guards])
    else:
        tuning, held_out = split_sets(tuning, args.holdout_share, args.seed)
    if args.kb:
        index_first(cfg, args.kb)
    result = run_search(
        space,
        overrides,
        tuning,
        guards,
        held_out,
        args.trials,
        args.seed,
        constraints=constraints,
        study_name=args.study,
        resume=args.resume,
        experiment=args.experiment,
    )
    print(format_search(result))
    for line in result.runs.announce(result.parent_run_id, f"parent run of this run's {args.trials} trial runs"):
        print(line)
    print(f"  study {result.study_name}: optuna-dashboard {result.storage}")
    if result.best is None:
        print("knowledge: error: no trial met the constraints", file=sys.stderr)
        return EXIT_FAILURE
    if result.recommended is None:
        breaks = ", ".join(result.held_out_breaks)
        print(f"knowledge: error: the best trial breaks {breaks} on the held-out queries", file=sys.stderr)
        return EXIT_FAILURE
    return EXIT_OK


def cmd_adapt(args: argparse.Namespace) -> int:
    for name in ("epochs", "batch_size", "max_steps"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise UsageError(f"--{name.replace('_', '-')} {value} must be 1 or more")
    cfg = _load(args.overrides)  # a bad config fails before the slow imports below

    from pipelines.adapt import AdaptOptions, adapt_model

    options = AdaptOptions(
        kb_path=args.kb,
        output=args.output,
        epochs=args.epochs,
        seed=args.seed,
        batch_size=args.batch_size,
        max_steps=args.max_steps,
        progress_bar=sys.stderr.isatty(),
    )
    adapt_model(cfg, options, say=lambda line: print(line, flush=True))
    return EXIT_OK


def cmd_compare(args: argparse.Namespace) -> int:
    from pipelines.compare import QueryFileError, format_summary, read_queries, run_comparison

    if args.a is not None or args.b is not None:
        return _compare_ab(args)
    cfg = _load(args.overrides)
    if args.top_k is not None and args.top_k < 1:
        raise UsageError(f"--top-k {args.top_k} must be 1 or more")
    try:
        items = read_queries(args.queries)
    except QueryFileError as exc:
        raise UsageError(str(exc)) from exc
    report = run_comparison(cfg, items, queries_file=args.queries, top_k=args.top_k)
    if args.json:
        keys = ("run_id", "experiment", "tracking_uri", "top_k", "score_labels", "metrics")
        print(json.dumps({key: report[key] for key in keys}, indent=2))
    else:
        print(format_summary(report))
    return EXIT_OK


def _compare_ab(args: argparse.Namespace) -> int:
    from pipelines.evaluation import EvaluationInputError, load_queries
    from pipelines.tuning.ab import format_ab, run_ab, split_overrides

    if args.top_k is not None:
        raise UsageError("--top-k belongs to the vector-path comparison; A/B two retrieval.top_k values instead")
    a, b = split_overrides(args.a, "--a"), split_overrides(args.b, "--b")
    for side in (a, b):
        _load(args.overrides, side)  # a bad override of either side fails before any work
    _check_writable(args.report)
    try:
        queries = load_queries(args.queries)
    except EvaluationInputError as exc:
        raise UsageError(str(exc)) from exc
    say = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    report = run_ab(list(args.overrides), a, b, queries, args.queries, args.report, say=say)
    if args.json:
        payload = {
            "metrics": report.metrics,
            "changes": [change.__dict__ for change in report.changes],
            "report": report.report_path,
            "run_id": report.run_id,
        }
        print(json.dumps(payload, ensure_ascii=False, indent=2))
    else:
        print(format_ab(report))
    return EXIT_OK


# The least each numeric option of `bench index|lookup|serve` takes (checked before any work).
BENCH_MINIMUMS = {
    "min_chunks": 1,
    "queries": 1,
    "tracing_lookups": 0,
    "clients": 1,
    "seconds": 0.1,
    "single_seconds": 0.1,
}


def _check_bench_options(args: argparse.Namespace) -> None:
    for name, least in BENCH_MINIMUMS.items():
        value = getattr(args, name, None)
        if value is not None and value < least:
            raise UsageError(f"--{name.replace('_', '-')} {value} must be at least {least}")


def _check_writable(path: str | None) -> None:
    """An output file (when given) whose folder exists: a bad path fails before the work, not after it."""
    if path and not Path(path).resolve().parent.is_dir():
        raise UsageError(f"cannot write {path}: its folder does not exist")


def _check_port(port: int | None) -> None:
    if port is not None and not 0 < port < 65536:
        raise UsageError(f"--port {port} is not a TCP port (1-65535)")


def _worker_counts(text: str) -> list[int]:
    try:
        counts = [int(part) for part in text.split(",") if part.strip()]
    except ValueError as exc:
        raise UsageError(f"--workers takes counts like 1,2, not {text!r}") from exc
    if not counts or min(counts) < 1:
        raise UsageError(f"--workers takes counts of at least 1, like 1,2, not {text!r}")
    return counts


def cmd_bench(args: argparse.Namespace) -> int:
    from pipelines import bench

    if args.bench == "all":
        _load(args.overrides)  # bad overrides exit 2 before any work; each benchmark composes its own config
        return _bench_all(args)
    if args.bench == "backends":
        return _bench_backends(args)
    _check_bench_options(args)
    cfg = _load(args.overrides)
    if args.bench == "index":
        bench.bench_index(args.overrides, corpus=args.corpus, min_chunks=args.min_chunks)
    elif args.bench == "serve":
        from pipelines.bench.serve_bench import bench_serve, bench_serve_workers

        if args.workers:
            counts = _worker_counts(args.workers)
            from pipelines.serving.bind import check_workers

            check_workers(cfg, max(counts), mcp=False)  # several workers need a Milvus server: say so now
            bench_serve_workers(cfg, list(args.overrides), counts, clients=args.clients, duration=args.duration)
        else:
            bench_serve(cfg, args.url, clients=args.clients, seconds=args.seconds, single_seconds=args.single_seconds)
    else:
        bench.bench_lookup(
            args.overrides,
            corpus=args.corpus,
            min_chunks=args.min_chunks,
            queries=args.queries,
            tracing_lookups=args.tracing_lookups,
        )
    return EXIT_OK


def _bench_backends(args: argparse.Namespace) -> int:
    from components.common.choices import EmbeddingBackend
    from pipelines.bench.backends import PARTS, bench_backends

    _load(args.overrides)
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    unknown = sorted(set(backends) - set(EmbeddingBackend.values()))
    if unknown or not backends:
        raise UsageError(f"--backends {args.backends!r}: choose among {', '.join(EmbeddingBackend.values())}")
    skipped = sorted(set(args.skip) - set(PARTS))
    if skipped:
        raise UsageError(f"--skip {', '.join(skipped)}: parts are {', '.join(PARTS)}")
    if min(args.rounds, args.cold_runs, args.clients) < 1 or args.serve_seconds <= 0:
        raise UsageError("--rounds, --cold-runs and --clients must be 1 or more, --serve-seconds above 0")
    _check_writable(args.output)
    report = bench_backends(
        args.overrides,
        backends,
        rounds=args.rounds,
        cold_runs=args.cold_runs,
        serve_seconds=args.serve_seconds,
        clients=args.clients,
        skip=args.skip,
    )
    if args.output:
        Path(args.output).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return EXIT_OK


def _bench_all(args: argparse.Namespace) -> int:
    from pipelines.bench.all import PARTS, BenchAllOptions, bench_all, format_report

    unknown = sorted(set(args.skip) - set(PARTS))
    if unknown:
        raise UsageError(f"--skip {', '.join(unknown)}: parts are {', '.join(PARTS)}")
    sizes = {k: getattr(args, k) for k in ("min_chunks", "base_chunks", "scale_chunks", "cold_runs", "index_rounds")}
    small = [f"--{k.replace('_', '-')} {v}" for k, v in sizes.items() if v < 1]
    if small or args.base_chunks >= args.scale_chunks:
        raise UsageError(
            ", ".join(small) + " must be 1 or more" if small else "--scale-chunks must exceed --base-chunks"
        )
    _check_writable(args.output)
    options = BenchAllOptions(
        corpus=args.corpus,
        lookup_queries=args.lookup_queries,
        tracing_lookups=args.tracing_lookups,
        sidecar_lookups=args.sidecar_lookups,
        scale_lookups=args.scale_lookups,
        serve_url=args.serve_url,
        skip=tuple(args.skip),
        **sizes,
    )
    report = bench_all(args.overrides, options)
    if args.output:
        try:
            Path(args.output).write_text(json.dumps(report, indent=2, default=str) + "\n", encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"cannot write {args.output}: {exc.strerror or exc}") from exc
    print(format_report(report))
    return EXIT_OK


def cmd_traces(args: argparse.Namespace) -> int:
    from pipelines import traces

    status = getattr(args, "status", None)
    if status is not None and status not in traces.STATUSES:
        raise UsageError(f"--status {status!r} is not one of {', '.join(traces.STATUSES)}")
    if args.traces == "export" and args.format not in traces.EXPORT_FORMATS:
        raise UsageError(f"--format {args.format!r} is not supported: use {', '.join(traces.EXPORT_FORMATS)}")
    if args.traces in ("list", "rerun") and args.last < 0:
        raise UsageError(f"--last {args.last} must be 0 (all) or more")
    cfg = _load(args.overrides)
    if args.traces == "rerun":
        return _traces_rerun(args, cfg)
    store = traces.open_store(cfg, reading=args.traces != "replay")  # reading never creates a database
    if args.traces == "list":
        print(traces.format_list(store.latest(last=args.last or None, status=status)))
    elif args.traces == "show":
        row = store.get(args.id)
        if row is None:
            raise UsageError(f"no invocation {args.id!r} in {traces.redact_url(cfg.trace.db_url)}")
        if args.json:
            print(json.dumps(traces.row_json(row), ensure_ascii=False, indent=2, default=str))
        else:
            print(traces.format_show(row))
    elif args.traces == "export":
        rows = store.iter_all(status=status)
        if args.output:
            try:
                with open(args.output, "w", encoding="utf-8") as stream:
                    count = traces.export_jsonl(rows, stream)
            except OSError as exc:
                raise UsageError(f"cannot write {args.output}: {exc.strerror or exc}") from exc
            print(f"exported {count} invocation(s) to {args.output}", file=sys.stderr)
        else:
            traces.export_jsonl(rows, sys.stdout)
    else:
        print(traces.format_replay(store.replay(), store, cfg.trace.db_url))
    return EXIT_OK


def _traces_rerun(args: argparse.Namespace, cfg) -> int:
    from pipelines.tuning.rerun import format_rerun, parse_since, rerun_traces

    report = rerun_traces(cfg, since=parse_since(args.since), last=args.last or None)
    if args.json:
        payload = {"totals": report.totals, "run_id": report.run_id, "queries": [r.to_dict() for r in report.rows]}
        print(json.dumps(payload, ensure_ascii=False, indent=2))
    else:
        print(format_rerun(report))
    return EXIT_OK


def cmd_dev(args: argparse.Namespace) -> int:
    from pipelines.dev.milvus_server import MilvusServerUnavailableError, serve_until_interrupted

    _check_port(args.port)
    try:
        return serve_until_interrupted(Path(args.data_dir), args.port)
    except MilvusServerUnavailableError as exc:
        raise KnowledgeFailure(str(exc)) from exc


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "index": cmd_index,
    "lookup": cmd_lookup,
    "eval": cmd_eval,
    "compare": cmd_compare,
    "adapt": cmd_adapt,
    "bench": cmd_bench,
    "serve": cmd_serve,
    "traces": cmd_traces,
    "dev": cmd_dev,
}


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    """
    Parse, letting key=value overrides follow options too (`traces show ID --json trace=postgres`):
    argparse fills a positional list once, so overrides after an option come back as extras.
    """
    parser = _parser()
    args, extra = parser.parse_known_args(argv)
    if extra:
        stray = [a for a in extra if a.startswith("-") or not hasattr(args, "overrides")]
        if stray:
            parser.error(f"unrecognized arguments: {' '.join(stray)}")
        args.overrides = [*args.overrides, *extra]
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(argv)
    _configure_logging(args.verbose)
    try:
        return COMMANDS[args.command](args)
    except KeyboardInterrupt:
        print("knowledge: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # the one place that turns any failure into one line
        from pipelines.errors import report_error

        return report_error(exc, debug=bool(os.environ.get("KNOWLEDGE_DEBUG")))


if __name__ == "__main__":
    sys.exit(main())
