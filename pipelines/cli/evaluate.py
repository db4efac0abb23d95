"""`knowledge eval`: retrieval quality on labelled query sets beside two baselines, or a sweep, or a search."""

import argparse
import json
import sys
from pathlib import Path

from components.errors import EXIT_OK
from pipelines.cli import tuning
from pipelines.cli.common import (
    UsageError,
    add_overrides,
    add_print_config,
    check_overrides,
    command_parser,
    load,
    print_config,
)

NAME = "eval"


def add_parser(sub) -> None:
    parser = command_parser(
        sub,
        NAME,
        help="evaluate retrieval quality on a labelled query set, beside two baselines",
        description="Print hit@1, hit@5, MRR@10 (document level), the no-evidence rate on off-topic queries "
        "and the answer rate on answerable ones, for the full pipeline, plain dense retrieval and a "
        "BM25 + dense reciprocal-rank-fusion hybrid over the same chunks, and log them as one MLflow run. "
        "-m sweeps Hydra overrides (a=1,2, range(), choice()): one child run per combination; --search NAME "
        "runs Optuna's constrained search over conf/search/NAME.yaml (or a YAML path) with a held-out split. "
        "Searches and sweeps keep to the guard of conf/guard/ (guard sets and constraints; --guard, --constraint "
        "add to it, guard=none drops it) and print a setting only when it keeps every guard and beats the "
        "current settings by a paired sign test, else 'keep the current settings' and why; none feasible exits 1.",
    )
    _add_query_options(parser)
    _add_run_options(parser)
    add_print_config(parser)
    add_overrides(parser)


def _add_query_options(parser: argparse.ArgumentParser) -> None:
    """The query sets, the knowledge base, the systems and what is written of the answers."""
    parser.add_argument(
        "--queries",
        action="append",
        default=[],
        metavar="FILE",
        help="JSONL: query, relevant (sources), kind; repeat it to evaluate several sets together, each reported apart",
    )
    parser.add_argument("--kb", metavar="DIR", help="index this knowledge base first (into the configured collection)")
    parser.add_argument("--no-baselines", action="store_true", help="evaluate the pipeline only")
    parser.add_argument(
        "--details",
        metavar="FILE",
        help="write per-query results as JSONL (one row per query of every set, its `set` named)",
    )
    parser.add_argument("--json", action="store_true", help="print the metrics as JSON")
    parser.add_argument(
        "--record", action="store_true", help="record each query as a tool_invocation row (and MLflow trace)"
    )


def _add_run_options(parser: argparse.ArgumentParser) -> None:
    """How the runs are made (one evaluation, a sweep, a search), what they keep to, where they are logged."""
    parser.add_argument(
        "-m", "--multirun", action="store_true", help="sweep: every combination of a=1,2 / range() / choice() overrides"
    )
    parser.add_argument(
        "--engine",
        choices=("builtin", "mlflow"),
        default="builtin",
        help="builtin (default: every system, all metrics) or mlflow: mlflow.genai.evaluate of the pipeline "
        "with code-based hit@1/hit@5/reciprocal-rank scorers (docs/tracing.md)",
    )
    parser.add_argument("--rank-by", default="hit@1", metavar="METRIC", help="rank sweep combinations (hit@1)")
    parser.add_argument("--search", metavar="NAME", help="Optuna search over the space of conf/search/NAME.yaml")
    parser.add_argument("--trials", type=int, default=20, metavar="N", help="search trials (default 20)")
    parser.add_argument(
        "--holdout",
        action="append",
        default=[],
        metavar="FILE",
        help="held-out queries for the search's best (repeatable)",
    )
    parser.add_argument(
        "--guard",
        action="append",
        default=[],
        metavar="FILE",
        help="a query set scored in every trial for the constraints only, beside guard.sets (repeatable)",
    )
    parser.add_argument(
        "--constraint",
        action="append",
        default=[],
        metavar="SPEC",
        help="search/sweep constraint METRIC[@SET]>=X or <=X, e.g. 'no_evidence_rate>=0.95' (every set with "
        "off-topic queries) or 'answer_rate@prometheus-dev>=0.95' (SET: a query file's stem); adds to the "
        "guard's (conf/guard/, guard.constraints) and the space's constraints; 'none' drops those (repeatable)",
    )
    parser.add_argument("--study", metavar="NAME", help="Optuna study name in the study file")
    parser.add_argument(
        "--study-file", metavar="FILE", help="the search's Optuna study file (default paths.state_dir/optuna.db)"
    )
    parser.add_argument(
        "--resume", action="store_true", help="continue the --study NAME (default: the latest study of the space)"
    )
    parser.add_argument(
        "--holdout-share", type=float, default=0.3, metavar="S", help="without --holdout: share held out (0.3)"
    )
    parser.add_argument("--seed", type=int, default=0, help="search and split seed (default 0)")
    parser.add_argument(
        "--experiment", default="lookup-knowledge-eval", metavar="NAME", help="MLflow experiment of the runs"
    )


def run(args: argparse.Namespace) -> int:
    from pipelines.evaluation.queries import EvaluationInputError

    overrides = [o for o in args.overrides if not o.startswith("search=")]
    search = args.search or next((o.split("=", 1)[1] for o in args.overrides if o.startswith("search=")), None)
    check_overrides(overrides)
    if args.cfg:
        return print_config(overrides)
    if not args.queries:
        raise UsageError("give --queries FILE (or --cfg to print the config)")
    _check_tuning_options(args, search)
    try:
        with _snapshot(args, overrides) as snapshot:
            return _run_kind(args, search, [*snapshot, *overrides])
    except EvaluationInputError as exc:
        raise UsageError(str(exc)) from exc


def _snapshot(args: argparse.Namespace, overrides: list[str]):
    """A snapshot copy of the Lite db while `knowledge serve` holds it (pipelines/state/lite_snapshot.py); none to index."""
    from contextlib import nullcontext

    from pipelines.state.lite_snapshot import snapshot_overrides
    from pipelines.tuning.sweep import parse_overrides

    if args.kb:
        return nullcontext([])
    fixed = [o for o in overrides if not parse_overrides([o])[0].is_sweep_override()]
    return snapshot_overrides(load(fixed), say=lambda line: print(line, file=sys.stderr, flush=True))


def _check_tuning_options(args: argparse.Namespace, search: str | None) -> None:
    """Options of a search or a sweep given to a command that would ignore them: say so rather than guard nothing."""
    search_only = [
        name
        for name, value in (
            ("--study", args.study),
            ("--study-file", args.study_file),
            ("--resume", args.resume),
            ("--holdout", args.holdout),
        )
        if value
    ]
    tuning_only = [name for name, value in (("--guard", args.guard), ("--constraint", args.constraint)) if value]
    if search_only and not search:
        raise UsageError(f"{', '.join(search_only)}: only with a search (--search NAME)")
    if tuning_only and not (search or args.multirun):
        raise UsageError(f"{', '.join(tuning_only)}: only with a search (--search NAME) or a sweep (-m)")


def _run_kind(args: argparse.Namespace, search: str | None, overrides: list[str]) -> int:
    """A search, a sweep, or one evaluation (with the builtin or the MLflow engine)."""
    from pipelines.tuning.sweep import has_sweep

    if search:
        return tuning.run_search(args, search, overrides)
    if args.multirun:
        return tuning.run_sweep(args, overrides)
    if has_sweep(overrides):
        raise UsageError("sweep overrides (a=1,2, range(), choice()) need -m: knowledge eval --queries FILE -m ...")
    # Recorded lookups are traced, every one, into the run's experiment (linked and labelled there).
    recording = [f"mlflow.experiment={args.experiment}", "mlflow.sample_rate=1.0"] if args.record else []
    cfg = load(overrides, [*([f"kb.path={args.kb}"] if args.kb else []), *recording])
    if args.engine == "mlflow":
        return _eval_genai(args, cfg)
    return _eval_builtin(args, cfg)


def _eval_builtin(args: argparse.Namespace, cfg) -> int:
    """Each query set evaluated and logged apart (the knowledge base indexed once, before the first)."""
    from pipelines.evaluation.metrics import format_metrics
    from pipelines.evaluation.reliability import format_reliability
    from pipelines.evaluation.run import run_evaluation_full
    from pipelines.tuning.runs import RunLogger

    for number, queries in enumerate(args.queries):
        evaluation = run_evaluation_full(
            cfg,
            queries,
            kb_path=args.kb if number == 0 else None,
            baselines=not args.no_baselines,
            details_path=args.details,
            record=args.record,
            append_details=number > 0,
            progress=(lambda done, total, name=queries: _progress(name, done, total)) if sys.stderr.isatty() else None,
        )
        print(json.dumps(evaluation.report, indent=2) if args.json else format_metrics(evaluation.report))
        if not args.json and (evaluation.report.get("reliability") or {}).get("answerable"):
            print(format_reliability(evaluation.report["reliability"]))
        runs = RunLogger.from_config(cfg, args.experiment)
        run_id = runs.log_evaluation(evaluation, cfg, run_name=Path(queries).stem)
        for line in runs.announce(run_id):
            print(line, file=sys.stderr if args.json else sys.stdout)
    return EXIT_OK


def _progress(queries: str, done: int, total: int) -> None:
    """
    Lines on a terminal's stderr while an evaluation runs (a set of a hundred queries takes minutes on a loaded
    machine); as `knowledge index` shows its bar, only to a terminal: a pipe or log keeps one line per error.
    """
    line = f"evaluating {queries}: {total} queries (the model loads first) ..." if done == 0 else f"  {done}/{total}"
    print(line, file=sys.stderr, flush=True)


def _eval_genai(args: argparse.Namespace, cfg) -> int:
    from pipelines.evaluation.run import index_first, load_queries
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
