"""`knowledge bench index|lookup|serve|backends|all`: benchmarks that print figures beside their floors."""

import argparse
import json
from pathlib import Path

from components.errors import EXIT_OK
from pipelines.cli.common import UsageError, add_overrides, check_writable, command_parser, load

NAME = "bench"

# The least each numeric option of `bench index|lookup|serve` takes (checked before any work).
BENCH_MINIMUMS = {
    "min_chunks": 1,
    "queries": 1,
    "tracing_lookups": 0,
    "profile": 0,
    "clients": 1,
    "seconds": 0.1,
    "single_seconds": 0.1,
}
# The parts of `bench backends` and `bench all`, named in their help without importing the benchmarks
# (pipelines.bench.backends.PARTS and pipelines.bench.all.PARTS; a test keeps them equal).
BACKENDS_PARTS = ("vectors", "embed", "index", "cold_start", "serve")
ALL_PARTS = ("index", "lookup", "sidecar", "serve", "scale", "cold_start")
DEFAULT_CORPUS_HELP = "corpus to repeat (default: ../shared/corpus/prometheus-runbooks)"


def add_parser(sub) -> None:
    bench = sub.add_parser(
        NAME,
        help="benchmarks that print figures (indexing throughput, lookup latency)",
        description="Benchmarks measured against a floor in the same run.",
    )
    bench_sub = bench.add_subparsers(dest="bench", metavar="BENCH", required=True)
    for add in (_add_index, _add_lookup, _add_serve, _add_backends, _add_all):
        add_overrides(add(bench_sub))


def _add_index(bench_sub) -> argparse.ArgumentParser:
    parser = command_parser(
        bench_sub, "index", help="indexing throughput vs bare SentenceTransformer.encode of the same chunk texts"
    )
    parser.add_argument("--corpus", metavar="DIR", help=DEFAULT_CORPUS_HELP)
    parser.add_argument("--min-chunks", type=int, default=5000, help="repeat the corpus to at least this many chunks")
    return parser


def _add_lookup(bench_sub) -> argparse.ArgumentParser:
    parser = command_parser(
        bench_sub,
        "lookup",
        help="lookup latency (p50/p95) vs the dense floor (one embedding + one raw search) and the hybrid floor "
        "(+ one BM25 search), the stock Haystack hybrid beside them",
    )
    parser.add_argument("--corpus", metavar="DIR", help=DEFAULT_CORPUS_HELP)
    parser.add_argument("--min-chunks", type=int, default=10000, help="collection size, in chunks")
    parser.add_argument("--queries", type=int, default=60, help="timed lookups per path")
    parser.add_argument(
        "--tracing-lookups", type=int, default=60, help="timed lookups per mode for MLflow tracing off vs on (0: skip)"
    )
    parser.add_argument(
        "--profile",
        type=int,
        default=20,
        metavar="N",
        help="then N lookups per path stage by stage, with the searches per lookup (default 20; 0: skip)",
    )
    return parser


def _add_serve(bench_sub) -> argparse.ArgumentParser:
    parser = command_parser(
        bench_sub,
        "serve",
        help="HTTP load on a running `knowledge serve`: requests/s, p50/p95/p99, errors, overhead",
        description="Give the server's overrides too (paths.state_dir=...): the overhead reads its trace rows.",
    )
    parser.add_argument("--url", default="http://127.0.0.1:1416", help="the running server")
    parser.add_argument("--clients", type=int, default=8, help="concurrent clients")
    parser.add_argument("--seconds", type=float, default=60.0, help="duration of the concurrent phase")
    parser.add_argument("--single-seconds", type=float, default=15.0, help="duration of the one-client phase")
    parser.add_argument(
        "--workers",
        metavar="N[,N...]",
        help="start `knowledge serve --workers N` itself for each count (with the overrides: milvus=server, "
        "a shared trace.db_url) instead of using --url; prints requests/s, p95, trace rows and the scaling",
    )
    parser.add_argument("--duration", type=float, default=30.0, help="with --workers: seconds of load per worker count")
    return parser


def _add_backends(bench_sub) -> argparse.ArgumentParser:
    parser = command_parser(
        bench_sub,
        "backends",
        help="the embedding backends side by side: vectors, query embedding, indexing, cold start, serving",
        description="torch, onnx and onnx_int8 in one run, alternating: cosine of each backend's vectors to "
        "torch's over the eval queries and sample chunks, query embedding p50 (1 and 2 texts), indexing "
        "embedder chunks/s, one-shot lookup cold start against the bare imports it needs, and a one-worker "
        "`knowledge serve` per backend (peak RSS, single-client p50, req/s at --clients).",
    )
    parser.add_argument(
        "--backends", default="torch,onnx,onnx_int8", metavar="B[,B...]", help="backends to compare (torch first)"
    )
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds of 20 embeddings each")
    parser.add_argument("--cold-runs", type=int, default=3, help="one-shot lookups per backend")
    parser.add_argument("--serve-seconds", type=float, default=10.0, help="seconds per serve load phase")
    parser.add_argument("--clients", type=int, default=8, help="concurrent clients of the serve part")
    _add_skip_and_output(parser, BACKENDS_PARTS)
    return parser


def _add_all(bench_sub) -> argparse.ArgumentParser:
    parser = command_parser(
        bench_sub,
        "all",
        help="every benchmark, one table (also --output JSON and an MLflow run)",
        description="Index throughput, lookup latency (filtered, fallback, MLflow tracing), sidecar overhead, "
        "serve figures (--serve-url), a scale point and the one-shot cold start, each against its floor.",
    )
    parser.add_argument("--corpus", metavar="DIR", help="corpus to repeat for the index and lookup parts")
    parser.add_argument("--min-chunks", type=int, default=2000, help="index and lookup parts: chunks")
    parser.add_argument("--lookup-queries", type=int, default=40, help="timed lookups per lookup path")
    parser.add_argument("--tracing-lookups", type=int, default=40, help="lookups per tracing mode (0: skip)")
    parser.add_argument("--index-rounds", type=int, default=2, help="timed pipeline runs of the index part")
    parser.add_argument("--sidecar-lookups", type=int, default=40, help="lookups per sidecar mode")
    parser.add_argument("--base-chunks", type=int, default=10000, help="scale part: the base size")
    parser.add_argument("--scale-chunks", type=int, default=100000, help="scale part: the large size")
    parser.add_argument("--scale-lookups", type=int, default=40, help="timed lookups per scale point")
    parser.add_argument("--cold-runs", type=int, default=3, help="one-shot lookups and bare imports timed")
    parser.add_argument("--serve-url", metavar="URL", help="a running server for the serve part")
    _add_skip_and_output(parser, ALL_PARTS)
    return parser


def _add_skip_and_output(parser: argparse.ArgumentParser, parts: tuple[str, ...]) -> None:
    parser.add_argument(
        "--skip",
        action="append",
        default=[],
        metavar="PART",
        help="leave a part out (repeatable): " + ", ".join(parts),
    )
    parser.add_argument("--output", metavar="FILE", help="also write the figures as JSON")


def run(args: argparse.Namespace) -> int:
    from pipelines import bench

    if args.bench == "all":
        load(args.overrides)  # bad overrides exit 2 before any work; each benchmark composes its own config
        return _bench_all(args)
    if args.bench == "backends":
        return _bench_backends(args)
    _check_minimums(args)
    cfg = load(args.overrides)
    if args.bench == "index":
        bench.bench_index(args.overrides, corpus=args.corpus, min_chunks=args.min_chunks)
    elif args.bench == "serve":
        _bench_serve(args, cfg)
    else:
        bench.bench_lookup(
            args.overrides,
            corpus=args.corpus,
            min_chunks=args.min_chunks,
            queries=args.queries,
            tracing_lookups=args.tracing_lookups,
            profile=args.profile,
        )
    return EXIT_OK


def _check_minimums(args: argparse.Namespace) -> None:
    for name, least in BENCH_MINIMUMS.items():
        value = getattr(args, name, None)
        if value is not None and value < least:
            raise UsageError(f"--{name.replace('_', '-')} {value} must be at least {least}")


def _bench_serve(args: argparse.Namespace, cfg) -> None:
    from pipelines.bench.serve_bench import bench_serve, bench_serve_workers

    if not args.workers:
        bench_serve(cfg, args.url, clients=args.clients, seconds=args.seconds, single_seconds=args.single_seconds)
        return
    counts = _worker_counts(args.workers)
    from pipelines.serving.bind import check_workers

    check_workers(cfg, max(counts), mcp=False)  # several workers need a Milvus server: say so now
    bench_serve_workers(cfg, list(args.overrides), counts, clients=args.clients, duration=args.duration)


def _worker_counts(text: str) -> list[int]:
    try:
        counts = [int(part) for part in text.split(",") if part.strip()]
    except ValueError as exc:
        raise UsageError(f"--workers takes counts like 1,2, not {text!r}") from exc
    if not counts or min(counts) < 1:
        raise UsageError(f"--workers takes counts of at least 1, like 1,2, not {text!r}")
    return counts


def _bench_backends(args: argparse.Namespace) -> int:
    from components.common.choices import EmbeddingBackend
    from pipelines.bench.backends import PARTS, bench_backends

    load(args.overrides)
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    unknown = sorted(set(backends) - set(EmbeddingBackend.values()))
    if unknown or not backends:
        raise UsageError(f"--backends {args.backends!r}: choose among {', '.join(EmbeddingBackend.values())}")
    skipped = sorted(set(args.skip) - set(PARTS))
    if skipped:
        raise UsageError(f"--skip {', '.join(skipped)}: parts are {', '.join(PARTS)}")
    if min(args.rounds, args.cold_runs, args.clients) < 1 or args.serve_seconds <= 0:
        raise UsageError("--rounds, --cold-runs and --clients must be 1 or more, --serve-seconds above 0")
    check_writable(args.output)
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
    check_writable(args.output)
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
