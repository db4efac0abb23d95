"""
The `knowledge` command line: one thin entry point over the pipelines.

    knowledge index [--kb DIR] [--rebuild] [key=value ...]
    knowledge lookup "QUERY" [key=value ...]
    knowledge lookup --batch FILE [key=value ...]
    knowledge eval --queries FILE [key=value ...]
    knowledge bench index|lookup [options] [key=value ...]
    knowledge traces list [--last N] [--status ok|error] [key=value ...]
    knowledge traces show ID [--json] [key=value ...]
    knowledge traces export [--format jsonl] [--output FILE] [key=value ...]
    knowledge traces replay [key=value ...]

Hydra overrides go after the arguments. Exit status: 0 on success (found=false included),
2 on bad input or configuration, 1 on any other failure; errors are one line on stderr.
"""

import argparse
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")
# Model-loading bars of transformers are noise on every call; the indexing bar is our own.
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

from components.errors import EXIT_BAD_INPUT, EXIT_FAILURE, EXIT_OK, BadInputError

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
    index.add_argument("--kb", metavar="DIR", help="knowledge base folder (default: kb.path, knowledge/)")
    index.add_argument("--rebuild", action="store_true", help="drop the collection and index everything from scratch")
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
    lookup.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides")

    evaluate = sub.add_parser(
        "eval",
        help="evaluate retrieval quality on a labelled query set, beside two baselines",
        description="Print hit@1, hit@5, MRR@10 (document level), the no-evidence rate on off-topic queries "
        "and the answer rate on answerable ones, for the full pipeline, plain dense retrieval and a "
        "BM25 + dense reciprocal-rank-fusion hybrid over the same chunks.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    evaluate.add_argument("--queries", required=True, metavar="FILE", help="JSONL: query, relevant (sources), kind")
    evaluate.add_argument(
        "--kb", metavar="DIR", help="index this knowledge base first (into the configured collection)"
    )
    evaluate.add_argument("--no-baselines", action="store_true", help="evaluate the pipeline only")
    evaluate.add_argument("--details", metavar="FILE", help="write per-query results as JSONL")
    evaluate.add_argument("--json", action="store_true", help="print the metrics as JSON")
    evaluate.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides")

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

    traces = sub.add_parser(
        "traces",
        help="review recorded lookups (tool_invocation rows): list, show, export, replay the spool",
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


def cmd_index(args: argparse.Namespace) -> int:
    extra = [f"kb.path={args.kb}"] if args.kb else []
    cfg = _load(args.overrides, extra)  # a bad config fails before the slow imports below

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
    return "\n".join(lines)


def _read_batch(path: str) -> list[str]:
    stream = sys.stdin if path == "-" else open(path, encoding="utf-8")  # noqa: SIM115
    with stream:
        queries = []
        for number, line in enumerate(stream, start=1):
            line = line.strip()
            if not line:
                continue
            if line.startswith("{"):
                try:
                    queries.append(str(json.loads(line)["query"]))
                except (json.JSONDecodeError, KeyError, TypeError) as exc:
                    raise UsageError(f"{path}:{number}: not a JSON object with a 'query' field ({exc})") from exc
            else:
                queries.append(line)
    return queries


def cmd_lookup(args: argparse.Namespace) -> int:
    from components.common.text import printable
    from components.contracts import STATUS_ERROR, InvalidQueryError
    from pipelines.lookup import LookupService

    overrides = list(args.overrides)
    if args.batch:
        if args.query is not None:
            overrides.insert(0, args.query)
        cfg = _load(overrides)
        try:
            queries = _read_batch(args.batch)
        except OSError as exc:
            raise UsageError(f"cannot read {args.batch}: {exc.strerror or exc}") from exc
        service = LookupService(cfg)
        invalid = errors = 0
        for query in queries:
            try:
                result = service.lookup(query)
                line = result.to_dict()
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
    cfg = _load(overrides)
    result = LookupService(cfg).lookup(args.query)
    print(json.dumps(result.to_dict(), ensure_ascii=False, indent=None if args.compact else 2))
    if result.evidence_status == STATUS_ERROR:
        _report_failure(result)
        return EXIT_FAILURE
    return EXIT_OK


def _report_failure(result) -> None:
    """The one stderr line of a lookup that failed inside the pipeline (its JSON is on stdout)."""
    print(f"knowledge: error: {result.message} (invocation {result.invocation_id})", file=sys.stderr)


def cmd_eval(args: argparse.Namespace) -> int:
    from pipelines.evaluation import format_metrics, run_evaluation

    cfg = _load(args.overrides)
    report = run_evaluation(
        cfg, args.queries, kb_path=args.kb, baselines=not args.no_baselines, details_path=args.details
    )
    print(json.dumps(report, indent=2) if args.json else format_metrics(report))
    return EXIT_OK


def cmd_bench(args: argparse.Namespace) -> int:
    from pipelines import bench

    cfg = _load(args.overrides)
    if args.bench == "index":
        bench.bench_index(cfg, corpus=args.corpus, min_chunks=args.min_chunks)
    else:
        bench.bench_lookup(
            cfg,
            corpus=args.corpus,
            min_chunks=args.min_chunks,
            queries=args.queries,
            tracing_lookups=args.tracing_lookups,
        )
    return EXIT_OK


def cmd_traces(args: argparse.Namespace) -> int:
    from pipelines import traces

    status = getattr(args, "status", None)
    if status is not None and status not in traces.STATUSES:
        raise UsageError(f"--status {status!r} is not one of {', '.join(traces.STATUSES)}")
    if args.traces == "export" and args.format not in traces.EXPORT_FORMATS:
        raise UsageError(f"--format {args.format!r} is not supported: use {', '.join(traces.EXPORT_FORMATS)}")
    if args.traces == "list" and args.last < 0:
        raise UsageError(f"--last {args.last} must be 0 (all) or more")
    cfg = _load(args.overrides)
    store = traces.open_store(cfg)
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
        pending, inserted = store.replay()
        print(
            f"replayed {pending} spooled record(s) into {traces.redact_url(cfg.trace.db_url)}: {inserted} new, "
            f"{pending - inserted} already present"
        )
    return EXIT_OK


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "index": cmd_index,
    "lookup": cmd_lookup,
    "eval": cmd_eval,
    "bench": cmd_bench,
    "traces": cmd_traces,
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
