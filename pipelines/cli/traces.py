"""`knowledge traces list|show|label|export|replay|rerun`: review the recorded lookups (tool_invocation rows)."""

import argparse
import json
import sys

from components.errors import EXIT_OK
from pipelines.cli.common import UsageError, add_overrides, command_parser, load

NAME = "traces"


def add_parser(sub) -> None:
    traces = command_parser(
        sub,
        NAME,
        help="review recorded lookups (tool_invocation rows): list, show, label, export, replay the spool, rerun "
        "under a new config",
        description="Every lookup leaves one tool_invocation row in trace.db_url (SQLite by default, "
        "trace=postgres for PostgreSQL). Records the database could not take wait in trace.spool_path.",
    )
    actions = traces.add_subparsers(dest="traces", metavar="ACTION", required=True)
    for add in (_add_list, _add_show, _add_label, _add_export, _add_replay, _add_rerun):
        add_overrides(add(actions))


def _add_list(actions) -> argparse.ArgumentParser:
    parser = actions.add_parser("list", help="the latest invocations, newest first")
    parser.add_argument("--last", type=int, default=20, metavar="N", help="how many (default 20; 0: all)")
    parser.add_argument("--status", metavar="STATUS", help="only ok or error invocations")
    return parser


def _add_show(actions) -> argparse.ArgumentParser:
    parser = actions.add_parser("show", help="one invocation: attempts, rerank trace, evidence summaries")
    parser.add_argument("id", metavar="ID", help="invocation id (or a unique prefix of 6+ characters)")
    parser.add_argument("--json", action="store_true", help="the row as JSON")
    return parser


def _add_label(actions) -> argparse.ArgumentParser:
    parser = actions.add_parser(
        "label", help="your verdict on one lookup: its right source(s), --none right, or --off-topic"
    )
    parser.add_argument("id", metavar="ID", help="invocation id (or a unique prefix of 6+ characters)")
    parser.add_argument(
        "--source", action="append", default=[], metavar="PATH", help="a right source, KB-relative (repeatable)"
    )
    parser.add_argument("--none", action="store_true", help="the answer was wrong (the right source not named)")
    parser.add_argument("--off-topic", action="store_true", help="the knowledge base holds nothing for the query")
    parser.add_argument("--reviewer", metavar="NAME", help="who says so (default: the OS user)")
    return parser


def _add_export(actions) -> argparse.ArgumentParser:
    parser = actions.add_parser("export", help="every invocation as JSONL, oldest first")
    parser.add_argument("--format", default="jsonl", metavar="FORMAT", help="jsonl (the only format)")
    parser.add_argument("--output", metavar="FILE", help="write to FILE instead of stdout")
    parser.add_argument("--status", metavar="STATUS", help="only ok or error invocations")
    return parser


def _add_replay(actions) -> argparse.ArgumentParser:
    return actions.add_parser("replay", help="replay spooled records into the trace database now")


def _add_rerun(actions) -> argparse.ArgumentParser:
    parser = command_parser(
        actions,
        "rerun",
        help="ask the recorded queries again under the current config (overrides) and show what would change",
        description="Re-run the queries of recorded lookups (status ok) with the current config and its "
        "overrides; print what changed against the record per query and in total (top source, found, "
        "relevance level, fallback reason) and log it as one MLflow run (experiment lookup-knowledge-rerun). "
        "The reruns are not recorded: the trace table keeps only real traffic.",
    )
    parser.add_argument("--since", metavar="DATE", help="only lookups recorded since DATE (YYYY-MM-DD[THH:MM])")
    parser.add_argument("--last", type=int, default=0, metavar="N", help="only the newest N lookups (0: all)")
    parser.add_argument("--json", action="store_true", help="print the totals and every query as JSON")
    parser.add_argument(
        "--include-evaluation",
        action="store_true",
        help="replay the lookups recorded by `knowledge eval --record` too (default: production traffic only)",
    )
    return parser


def run(args: argparse.Namespace) -> int:
    from pipelines.state import traces

    _check_options(args)
    # Only a rerun runs the pipeline (it loads its own config): the other subcommands read or write rows.
    cfg = load(args.overrides, torch_free=True, components=args.traces == "rerun")
    if args.traces == "rerun":
        return _rerun(args, cfg)
    if args.traces == "label":
        return _label(args, cfg)
    store = traces.open_store(cfg, reading=args.traces != "replay")  # reading never creates a database
    if args.traces == "list":
        print(traces.format_list(store.latest(last=args.last or None, status=args.status)))
    elif args.traces == "show":
        _show(args, cfg, store)
    elif args.traces == "export":
        _export(args, store)
    else:
        print(traces.format_replay(store.replay(), store, cfg.trace.db_url))
    return EXIT_OK


def _check_options(args: argparse.Namespace) -> None:
    from pipelines.state import traces

    status = getattr(args, "status", None)
    if status is not None and status not in traces.STATUSES:
        raise UsageError(f"--status {status!r} is not one of {', '.join(traces.STATUSES)}")
    if args.traces == "export" and args.format not in traces.EXPORT_FORMATS:
        raise UsageError(f"--format {args.format!r} is not supported: use {', '.join(traces.EXPORT_FORMATS)}")
    if args.traces in ("list", "rerun") and args.last < 0:
        raise UsageError(f"--last {args.last} must be 0 (all) or more")
    if args.traces == "label" and bool(args.source) + args.none + args.off_topic != 1:
        raise UsageError("give one verdict: --source PATH (repeatable), --none or --off-topic")


def _show(args: argparse.Namespace, cfg, store) -> None:
    from pipelines.state import traces

    row = store.get(args.id)
    if row is None:
        raise UsageError(f"no invocation {args.id!r} in {traces.redact_url(cfg.trace.db_url)}")
    if args.json:
        print(json.dumps(traces.row_json(row), ensure_ascii=False, indent=2, default=str))
    else:
        print(traces.format_show(row))


def _label(args: argparse.Namespace, cfg) -> int:
    from components.tracing.label_records import OFF_TOPIC, RIGHT_SOURCES, WRONG
    from pipelines.cli.labels import default_reviewer
    from pipelines.labels.record import label_invocation
    from pipelines.state import traces

    verdict = RIGHT_SOURCES if args.source else OFF_TOPIC if args.off_topic else WRONG
    store = traces.open_store(cfg)
    outcome = label_invocation(
        store, cfg.l0.index_path, args.id, verdict, args.source, args.reviewer or default_reviewer(), "cli"
    )
    label = outcome.label
    print(f"{outcome.status} {label['verdict']} label {label['id']} of invocation {label['invocation_id']}")
    if not outcome.invocation_checked:
        print(
            f"knowledge: warning: the trace database is unreachable, invocation {args.id!r} not checked: the label "
            f"waits in {store.spool_path} (`knowledge traces replay`; refused then if no such invocation)",
            file=sys.stderr,
        )
    return EXIT_OK


def _export(args: argparse.Namespace, store) -> None:
    from pipelines.state import traces

    rows = store.iter_all(status=args.status)
    if not args.output:
        traces.export_jsonl(rows, sys.stdout)
        return
    try:
        with open(args.output, "w", encoding="utf-8") as stream:
            count = traces.export_jsonl(rows, stream)
    except OSError as exc:
        raise UsageError(f"cannot write {args.output}: {exc.strerror or exc}") from exc
    print(f"exported {count} invocation(s) to {args.output}", file=sys.stderr)


def _rerun(args: argparse.Namespace, cfg) -> int:
    from pipelines.state.lite_snapshot import snapshot_overrides
    from pipelines.tuning.rerun import parse_since

    parse_since(args.since)  # a bad date is refused before any copy is made

    with snapshot_overrides(cfg, say=lambda line: print(line, file=sys.stderr, flush=True)) as snapshot:
        return _rerun_with(args, load(args.overrides, snapshot), snapshot)


def _rerun_with(args: argparse.Namespace, cfg, snapshot: list[str]) -> int:
    from pipelines.tuning.guards import guard_constraints, guard_sets
    from pipelines.tuning.rerun import format_rerun, is_setting, parse_since, rerun_traces

    since = parse_since(args.since)
    guards, constraints = guard_sets(cfg, [], []), guard_constraints(cfg, [], [], "guard.constraints")
    current = load([o for o in args.overrides if not is_setting(o)], snapshot)
    report = rerun_traces(
        cfg,
        since=since,
        last=args.last or None,
        include_evaluation=args.include_evaluation,
        guards=guards,
        constraints=constraints,
        current_cfg=current,
    )
    if args.json:
        payload = {
            "totals": report.totals,
            "guard": report.guard,
            "guard_fit": report.fit.to_dict() if report.fit is not None else None,
            "run_id": report.run_id,
            "queries": [r.to_dict() for r in report.rows],
        }
        print(json.dumps(payload, ensure_ascii=False, indent=2))
    else:
        print(format_rerun(report))
    return EXIT_OK
