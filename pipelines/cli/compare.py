"""`knowledge compare`: A/B two configs on a labelled query set, or the sdk and haystack vector paths."""

import argparse
import json
import sys
from pathlib import Path

from components.errors import EXIT_OK
from pipelines.cli.common import UsageError, add_overrides, check_writable, command_parser, load

NAME = "compare"


def add_parser(sub) -> None:
    parser = command_parser(
        sub,
        NAME,
        help="A/B two configs over a labelled query set (--a/--b), or the sdk and haystack vector paths",
        description="With --a and/or --b: evaluate both configs (the overrides after the arguments apply to "
        "both) on a labelled query set (as eval's); print per-metric deltas with a paired bootstrap interval "
        "and an exact sign test, the queries whose top source or answer changed; write an HTML report and "
        "log one MLflow run with both configs as params. Without them: search both vector-store paths "
        "with the same query embeddings; print overlap@k, Jaccard, RBO, top-1 agreement and similarity "
        "differences. Both log to the MLflow experiment lookup-knowledge-compare.",
    )
    parser.add_argument("--queries", required=True, metavar="FILE", help="JSONL with a 'query' field")
    parser.add_argument("--top-k", type=int, metavar="K", help="hits compared per path (default retrieval.top_k)")
    parser.add_argument("--json", action="store_true", help="print the metrics and run id as JSON")
    parser.add_argument("--a", metavar='"k=v ..."', help="config A's overrides (A/B; default: the config as is)")
    parser.add_argument("--b", metavar='"k=v ..."', help="config B's overrides (A/B)")
    parser.add_argument(
        "--report", metavar="FILE", help="A/B: where to write the HTML report (default: STATE_DIR/ab-report.html)"
    )
    add_overrides(parser)


def run(args: argparse.Namespace) -> int:
    from pipelines.evaluation.compare import QueryFileError, format_summary, read_queries, run_comparison

    if args.a is not None or args.b is not None:
        return _compare_ab(args)
    cfg = load(args.overrides)
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
    from pipelines.evaluation.queries import EvaluationInputError, load_queries
    from pipelines.tuning.ab import format_ab, run_ab, split_overrides

    if args.top_k is not None:
        raise UsageError("--top-k belongs to the vector-path comparison; A/B two retrieval.top_k values instead")
    a, b = split_overrides(args.a, "--a"), split_overrides(args.b, "--b")
    for side in (a, b):
        load(args.overrides, side)  # a bad override of either side fails before any work
    check_writable(args.report)
    try:
        queries = load_queries(args.queries)
    except EvaluationInputError as exc:
        raise UsageError(str(exc)) from exc
    say = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    guards, constraints = _guard(args)
    from pipelines.state.lite_snapshot import snapshot_overrides

    with snapshot_overrides(load(args.overrides), say) as snapshot:
        base = [*snapshot, *args.overrides]
        report = run_ab(base, a, b, queries, args.queries, args.report, say=say, guards=guards, constraints=constraints)
    if args.json:
        payload = {
            "verdict": report.verdict,
            "guard": report.guard.to_dict(),
            "metrics": report.metrics,
            "changes": [change.__dict__ for change in report.changes],
            "report": report.report_path,
            "run_id": report.run_id,
        }
        print(json.dumps(payload, ensure_ascii=False, indent=2))
    else:
        print(format_ab(report))
    return EXIT_OK


def _guard(args: argparse.Namespace):
    """The configured guard sets and constraints (conf/guard/), scored on both sides."""
    from pipelines.tuning.guards import QuerySet, guard_constraints, guard_sets

    cfg = load(args.overrides)
    compared = QuerySet(Path(args.queries).stem, args.queries, [], "tuning")
    return guard_sets(cfg, [], [compared]), guard_constraints(cfg, [], [], "guard.constraints")
