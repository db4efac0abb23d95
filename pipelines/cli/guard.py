"""`knowledge guard build`: an off-topic guard set that fits the knowledge base (docs/tuning.md#guard-sets)."""

import argparse
import sys

from components.errors import EXIT_OK
from pipelines.cli.common import UsageError, add_overrides, check_writable, command_parser, load

NAME = "guard"


def add_parser(sub) -> None:
    parser = command_parser(
        sub,
        NAME,
        help="build an off-topic guard set that fits the knowledge base (for guard=built)",
        description="build: keep the texts of the shipped catalogue of off-topic operations alerts and questions "
        "(eval/guard-catalogue.jsonl) whose service and key terms the knowledge base never mentions (the L0 "
        "index's vocabulary; the knowledge base is indexed first when the state dir does not hold it), and write "
        "them as a query set that guard=built scores in every sweep, search, A/B, rerun and adapt.",
    )
    parser.add_argument("action", choices=("build",), help="build the guard set")
    parser.add_argument(
        "--kb", metavar="DIR", help="knowledge base folder (default: the one the state dir's index holds)"
    )
    parser.add_argument(
        "--out", metavar="FILE", help="where to write it (default: STATE_DIR/guard/built.jsonl, what guard=built reads)"
    )
    add_overrides(parser)


def run(args: argparse.Namespace) -> int:
    cfg = load(args.overrides)
    check_writable(args.out)

    from components.stores.l0_index_file import load_l0_index
    from pipelines.config.manifest import indexed_kb
    from pipelines.evaluation.run import index_first
    from pipelines.tuning.guard_build import build_guard, built_guard_path, read_catalogue, write_guard

    kb = args.kb or indexed_kb(cfg)
    if not kb:
        raise UsageError("no knowledge base to build a guard for: give --kb DIR")
    print(f"reading the vocabulary of {kb} (indexing it first if needed) ...", file=sys.stderr, flush=True)
    cfg = index_first(cfg, kb)
    built = build_guard(load_l0_index(cfg.l0.index_path).vocabulary, read_catalogue())
    if not built.kept:
        raise UsageError(f"the knowledge base {kb} mentions every service of the catalogue: no text is off-topic")
    path = write_guard(built, args.out or built_guard_path(cfg))
    print("\n".join(built.lines(str(path))))
    hint = "guard=built" if not args.out else f"guard.sets=[{path}]"
    print(f"use it with: {hint} (on knowledge eval -m, --search, compare, traces rerun, adapt)")
    return EXIT_OK
