"""`knowledge index`: index the markdown knowledge base incrementally, or print what the index holds."""

import argparse
import json
import sys

from components.errors import EXIT_OK
from pipelines.cli.common import add_overrides, command_parser, load

NAME = "index"


def add_parser(sub) -> None:
    parser = command_parser(
        sub,
        NAME,
        help="index the markdown knowledge base into Milvus and build the L0 index",
        description="Index markdown into Milvus incrementally: unchanged documents are skipped by content "
        "hash, changed ones replaced, deleted ones removed. Prints a report.",
    )
    parser.add_argument(
        "--kb",
        metavar="DIR",
        help="knowledge base folder (default: the one the state dir's index holds, else kb.path, knowledge/); "
        "another one than the index holds needs --rebuild",
    )
    parser.add_argument("--rebuild", action="store_true", help="drop the collection and index everything from scratch")
    parser.add_argument(
        "--status", action="store_true", help="print the index manifest (knowledge base, content, config) and exit"
    )
    parser.add_argument("--json", action="store_true", help="print the report (or --status) as JSON")
    add_overrides(parser)


def run(args: argparse.Namespace) -> int:
    from pipelines.config.manifest import format_manifest, kb_to_index, manifest_status

    cfg = load(args.overrides)  # a bad config fails before the slow imports below
    if args.status:
        print(json.dumps(manifest_status(cfg), indent=2) if args.json else format_manifest(cfg))
        return EXIT_OK
    # `kb.path=DIR` among the overrides asks for a knowledge base as --kb does.
    asked = args.kb or (cfg.kb.path if any(_override_key(o) == "kb.path" for o in args.overrides) else None)
    _set_literal(cfg, "kb.path", kb_to_index(cfg, asked, args.rebuild))

    from pipelines.indexing import run_indexing

    # Progress on stderr whatever it is (a log, a pipe); the bar only on a terminal.
    say = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    report = run_indexing(cfg, rebuild=args.rebuild, progress_bar=sys.stderr.isatty(), say=say)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        print(format_report(report, cfg))
    return EXIT_OK


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
