"""The `knowledge` parser from the command modules and the one place failures become one line."""

import argparse
import os
import sys
from collections.abc import Sequence

from pipelines.cli import adapt, bench, compare, dev, evaluate, guard, index, labels, lookup, serve, traces
from pipelines.cli.common import EPILOG
from pipelines.config.logs import configure_logging

# In the order `knowledge --help` lists them.
COMMAND_MODULES = (index, lookup, serve, evaluate, adapt, compare, guard, bench, dev, traces, labels)
COMMANDS = {module.NAME: module.run for module in COMMAND_MODULES}


def build_parser() -> argparse.ArgumentParser:
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
    for module in COMMAND_MODULES:
        module.add_parser(sub)
    return parser


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    """
    Parse, letting key=value overrides follow options too (`traces show ID --json trace=postgres`):
    argparse fills a positional list once, so overrides after an option come back as extras.
    """
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:
        stray = [a for a in extra if a.startswith("-") or not hasattr(args, "overrides")]
        if stray:
            parser.error(f"unrecognized arguments: {' '.join(stray)}")
        args.overrides = [*args.overrides, *extra]
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    configure_logging(args.verbose)
    try:
        return COMMANDS[args.command](args)
    except KeyboardInterrupt:
        print("knowledge: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # the one place that turns any failure into one line
        from pipelines.config.errors import report_error

        return report_error(exc, debug=bool(os.environ.get("KNOWLEDGE_DEBUG")))
