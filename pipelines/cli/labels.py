"""`knowledge labels list|export|pull|import`: reviewers' labels of lookups, and the eval sets they make."""

import argparse
import getpass
import sys
from pathlib import Path

from components.errors import EXIT_OK
from pipelines.cli.common import UsageError, add_overrides, command_parser, load

NAME = "labels"


def add_parser(sub) -> None:
    labels = command_parser(
        sub,
        NAME,
        help="reviewers' labels of lookups: list them, pull them from MLflow, import an eval file, export eval sets",
        description="Labels live in the trace database (lookup_label, beside tool_invocation). Label one "
        "lookup with `knowledge traces label ID`; agents label through the served feedback route or tool.",
    )
    actions = labels.add_subparsers(dest="labels", metavar="ACTION", required=True)
    for add in (_add_list, _add_export, _add_pull, _add_import):
        add_overrides(add(actions))


def default_reviewer() -> str:
    """The OS user, who reviews from this shell."""
    try:
        return getpass.getuser()
    except Exception:  # no user name in this environment (a container without one)
        return "unknown"


def _add_list(actions) -> argparse.ArgumentParser:
    parser = actions.add_parser("list", help="the labels, newest first (superseded ones marked)")
    parser.add_argument("--last", type=int, default=0, metavar="N", help="only the newest N (default 0: all)")
    return parser


def _add_export(actions) -> argparse.ArgumentParser:
    parser = actions.add_parser("export", help="the latest labels as eval sets: DIR/train.jsonl and DIR/check.jsonl")
    parser.add_argument("--out", required=True, metavar="DIR", help="folder to write train.jsonl and check.jsonl to")
    return parser


def _add_pull(actions) -> argparse.ArgumentParser:
    parser = actions.add_parser("pull", help="assessments of lookup traces in MLflow become labels (idempotent)")
    parser.add_argument("--since", metavar="DATE", help="only assessments made since DATE (YYYY-MM-DD[THH:MM])")
    return parser


def _add_import(actions) -> argparse.ArgumentParser:
    parser = actions.add_parser("import", help="the rows of an eval JSONL as labels (linked to no lookup)")
    parser.add_argument("file", metavar="FILE", help="a `knowledge eval` query file (query, relevant, kind)")
    parser.add_argument("--reviewer", default=None, metavar="NAME", help="who labelled them (default: the OS user)")
    return parser


def run(args: argparse.Namespace) -> int:
    from pipelines.state import traces

    if args.labels == "list" and args.last < 0:
        raise UsageError(f"--last {args.last} must be 0 (all) or more")
    since = _since(args) if args.labels == "pull" else None
    cfg = load(args.overrides, torch_free=True, components=False)  # labels are rows: no pipeline runs
    store = traces.open_store(cfg, reading=args.labels in ("list", "export"))
    if args.labels == "list":
        from pipelines.labels.listing import format_labels

        print(format_labels(store.labels(), args.last or None))
    elif args.labels == "export":
        _export(store, Path(args.out))
    elif args.labels == "pull":
        from pipelines.labels.mlflow_pull import format_pull, pull_labels

        report = pull_labels(store, cfg.l0.index_path, cfg.mlflow.tracking_uri, cfg.mlflow.experiment, since)
        print(format_pull(report))
    else:
        _import(store, Path(args.file), args.reviewer or default_reviewer())
    return EXIT_OK


def _since(args: argparse.Namespace):
    from pipelines.tuning.rerun import parse_since

    return parse_since(args.since)


def _export(store, out: Path) -> None:
    from pipelines.labels.export import build_export, format_summary, write_export

    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} is a file: give a folder")
    export = build_export(store.labels())
    try:
        paths = write_export(export, out)
    except OSError as exc:
        raise UsageError(f"cannot write to {out}: {exc.strerror or exc}") from exc
    print(format_summary(export))
    print(f"wrote {paths['train']} and {paths['check']}", file=sys.stderr)


def _import(store, path: Path, reviewer: str) -> None:
    from pipelines.labels.importing import import_labels

    read, new, statuses = import_labels(store, path, reviewer)
    written = ", ".join(f"{count} {status}" for status, count in sorted(statuses.items()))
    print(f"imported {read} row(s) of {path} as labels by {reviewer}: {new} new ({written})")
