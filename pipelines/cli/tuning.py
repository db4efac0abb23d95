"""`knowledge eval -m` (a sweep) and `knowledge eval --search NAME` (a guarded Optuna search)."""

import argparse
import sys

from components.errors import EXIT_FAILURE, EXIT_OK
from pipelines.cli.common import load


def run_sweep(args: argparse.Namespace, overrides: list[str]) -> int:
    from pipelines.tuning.guards import DEFAULT_SWEEP_CONSTRAINTS, parse_constraints
    from pipelines.tuning.sweep import format_ranking, run_sweep

    constraints = parse_constraints(list(DEFAULT_SWEEP_CONSTRAINTS), args.constraint, "the sweep's default guard")
    tuning, guards = _query_sets(args)
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


def run_search(args: argparse.Namespace, name: str, overrides: list[str]) -> int:
    from pipelines.evaluation import index_first
    from pipelines.tuning.guards import parse_constraints
    from pipelines.tuning.search import format_search, run_search
    from pipelines.tuning.space import SearchSpace

    space = SearchSpace.load(name)
    constraints = parse_constraints(space.constraints, args.constraint, space.origin)
    cfg = load(overrides)
    tuning, guards, held_out = _search_sets(args)
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
    return _search_status(result)


def _query_sets(args: argparse.Namespace):
    """The tuning sets (--queries) and the guard sets (--guard)."""
    from pipelines.tuning.guards import load_sets

    tuning = load_sets(args.queries, "tuning")
    return tuning, load_sets(args.guard, "guard", tuning)


def _search_sets(args: argparse.Namespace):
    """Tuning, guard and held-out sets: the --holdout files, else a seeded share of each tuning set."""
    from pipelines.tuning.guards import load_sets
    from pipelines.tuning.space import split_sets

    tuning, guards = _query_sets(args)
    if args.holdout:
        held_out = load_sets(args.holdout, "held-out", [*tuning, *guards])
    else:
        tuning, held_out = split_sets(tuning, args.holdout_share, args.seed)
    return tuning, guards, held_out


def _search_status(result) -> int:
    """Exit 1, with the one line that says why, when the search has no setting to recommend."""
    if result.best is None:
        print("knowledge: error: no trial met the constraints", file=sys.stderr)
        return EXIT_FAILURE
    if result.recommended is None:
        breaks = ", ".join(result.held_out_breaks)
        print(f"knowledge: error: the best trial breaks {breaks} on the held-out queries", file=sys.stderr)
        return EXIT_FAILURE
    return EXIT_OK
