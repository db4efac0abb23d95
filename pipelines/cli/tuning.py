"""`knowledge eval -m` (a sweep) and `knowledge eval --search NAME` (a guarded Optuna search)."""

import argparse
import sys

from components.errors import EXIT_OK
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
    return EXIT_OK  # "keep the current settings" is a verdict, not a failure


def run_search(args: argparse.Namespace, name: str, overrides: list[str]) -> int:
    from pipelines.config.interrupts import InterruptLatch, interrupt_latch
    from pipelines.evaluation.run import index_first
    from pipelines.tuning.guard_fit import check_relative, fit_guard, fit_query_sets, measure_groups
    from pipelines.tuning.guards import NO_CONSTRAINTS, check_measurable, guard_constraints
    from pipelines.tuning.measured import MeasuredSets
    from pipelines.tuning.search import format_search, run_search
    from pipelines.tuning.space import SearchSpace
    from pipelines.tuning.study import check_study_file, study_storage

    space = SearchSpace.load(name)
    cfg = load(overrides)
    floors = guard_constraints(cfg, space.constraints, args.constraint, space.origin)
    relative = [] if NO_CONSTRAINTS in args.constraint else space.relative
    tuning, guards, held_out = _search_sets(args, cfg)
    if args.kb:
        index_first(cfg, args.kb)
    say = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    check_measurable(floors, [*tuning, *guards])  # a constraint that guards nothing fails before any work
    check_relative(relative, [*tuning, *guards], space.origin)
    check_study_file(study_storage(cfg.paths.state_dir, args.study_file))  # so does a damaged or busy study file
    # Held from the first measurement: a Ctrl+C that a library swallowed still stops the search.
    latch = InterruptLatch()
    with interrupt_latch(latch):
        measured = MeasuredSets()
        current, held_current = measure_groups(cfg, [[*tuning, *guards], held_out], measured)
        guard = fit_guard(cfg, guards, floors, current)
        own = {s.name: current[s.name] for s in tuning}
        bounds, bound_lines = fit_query_sets(cfg, relative, [own, held_current], floors)
        # A held-out file's bound judges the best and the defaults only: no trial is scored on it.
        held_out_bounds = [c for c in bounds if c.set_name not in own]
        for line in [*guard.lines(), *bound_lines]:
            say(line)
        result = run_search(
            space,
            overrides,
            tuning,
            guard.guard_sets,
            held_out,
            args.trials,
            args.seed,
            constraints=[*guard.constraints, *(c for c in bounds if c.set_name in own)],
            study_name=args.study,
            resume=args.resume,
            experiment=args.experiment,
            say=say,
            study_file=args.study_file,
            held_out_bounds=held_out_bounds,
            measured=measured,
            latch=latch,
        )
    result.guard, result.bounds = guard, bound_lines
    print(format_search(result))
    for line in result.runs.announce(result.parent_run_id, f"parent run of this run's {args.trials} trial runs"):
        print(line)
    print(f"  study {result.study_name}: optuna-dashboard {result.storage}")
    return EXIT_OK  # "keep the current settings" is a verdict, not a failure


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
