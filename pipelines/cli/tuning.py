"""`knowledge eval -m` (a sweep) and `knowledge eval --search NAME` (a guarded Optuna search)."""

import argparse
import sys

from components.errors import EXIT_FAILURE, EXIT_OK
from pipelines.cli.common import load


def run_sweep(args: argparse.Namespace, overrides: list[str]) -> int:
    from pipelines.tuning.sweep import format_ranking, run_guarded_sweep

    result = run_guarded_sweep(
        overrides,
        args.queries,
        args.guard,
        args.constraint,
        kb_path=args.kb,
        baselines=not args.no_baselines,
        rank_by=args.rank_by,
        experiment=args.experiment,
        say=lambda line: print(line, file=sys.stderr, flush=True),
    )
    print(format_ranking(result))
    for line in result.runs.announce(result.parent_run_id, f"parent run of {len(result.trials)} child runs"):
        print(line)
    if not any(trial.feasible for trial in result.trials):
        print("knowledge: error: no combination met the constraints", file=sys.stderr)
        return EXIT_FAILURE
    return EXIT_OK


def run_search(args: argparse.Namespace, name: str, overrides: list[str]) -> int:
    from pipelines.evaluation import index_first
    from pipelines.tuning.guards import guard_constraints
    from pipelines.tuning.search import format_search, run_search
    from pipelines.tuning.space import SearchSpace

    space = SearchSpace.load(name)
    cfg = load(overrides)
    constraints = guard_constraints(cfg, space.constraints, args.constraint, space.origin)
    tuning, guards, held_out = _search_sets(args, cfg)
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
        say=lambda line: print(line, file=sys.stderr, flush=True),
        study_file=args.study_file,
    )
    print(format_search(result))
    for line in result.runs.announce(result.parent_run_id, f"parent run of this run's {args.trials} trial runs"):
        print(line)
    print(f"  study {result.study_name}: optuna-dashboard {result.storage}")
    return _search_status(result)


def _query_sets(args: argparse.Namespace, cfg):
    """The tuning sets (--queries) and the guard sets (guard.sets and --guard)."""
    from pipelines.tuning.guards import guard_sets, load_sets

    tuning = load_sets(args.queries, "tuning")
    return tuning, guard_sets(cfg, args.guard, tuning)


def _search_sets(args: argparse.Namespace, cfg):
    """Tuning, guard and held-out sets: the --holdout files, else a seeded share of each tuning set."""
    from pipelines.tuning.guards import load_sets
    from pipelines.tuning.space import split_sets

    tuning, guards = _query_sets(args, cfg)
    if args.holdout:
        held_out = load_sets(args.holdout, "held-out", [*tuning, *guards])
    else:
        tuning, held_out = split_sets(tuning, args.holdout_share, args.seed)
    return tuning, guards, held_out


def _search_status(result) -> int:
    """Exit 1, with the one line that says why, when no trial (the current settings included) met the constraints."""
    if result.best is None:
        print("knowledge: error: no trial met the constraints", file=sys.stderr)
        return EXIT_FAILURE
    return EXIT_OK
