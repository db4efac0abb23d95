"""The `knowledge` parser from the command modules, logging, and the one place failures become one line."""

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from components.common.masking import mask_handlers
from pipelines.cli import adapt, bench, compare, dev, evaluate, guard, index, labels, lookup, serve, traces
from pipelines.cli.common import EPILOG

# In the order `knowledge --help` lists them.
COMMAND_MODULES = (index, lookup, serve, evaluate, adapt, compare, guard, bench, dev, traces, labels)
COMMANDS = {module.NAME: module.run for module in COMMAND_MODULES}

# Loggers that write for errors we report ourselves in one line (pymilvus and milvus_lite log an
# ERROR with a traceback), and the chatty ones kept at WARNING.
QUIET_LOGGERS = ("pymilvus", "grpc", "milvus_lite")
CHATTY_LOGGERS = ("httpx", "urllib3", "sentence_transformers", "haystack")
# On a failed run Haystack snapshots the pipeline state for debugging and warns about every
# field it cannot serialize; the failure itself is reported (and recorded) in one line.
SNAPSHOT_LOGGERS = ("haystack.utils.base_serialization", "haystack.core.pipeline.breakpoint")


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


def configure_logging(verbosity: int) -> None:
    level = logging.WARNING if verbosity == 0 else logging.INFO if verbosity == 1 else logging.DEBUG
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    mask_handlers(logging.getLogger())  # every logger's records reach stderr through the root's handler
    if verbosity >= 2:
        return
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.CRITICAL)
    for name in CHATTY_LOGGERS:
        logging.getLogger(name).setLevel(max(level, logging.WARNING))
    for name in SNAPSHOT_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)


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
