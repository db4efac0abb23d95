"""`knowledge lookup`: one query, a batch of them, or one asked of a running server; the result as JSON."""

import argparse
import json
import sys

from components.errors import EXIT_BAD_INPUT, EXIT_FAILURE, EXIT_OK
from pipelines.cli.common import (
    UsageError,
    add_overrides,
    add_print_config,
    command_parser,
    lookup_config,
    print_config,
)
from pipelines.cli.held_logs import held_logs

NAME = "lookup"
# The loggers of the trace store and its spool: what they say of a failed lookup joins its error line.
TRACE_LOGGER = "components.tracing"


def add_parser(sub) -> None:
    parser = command_parser(
        sub,
        NAME,
        help="look up one query (or a batch) and print the evidence-first result as JSON",
        description=(
            "Run lookup_knowledge: print the result JSON (found, evidenceBlocks, contextPack, traces).\n\n"
            "MLflow: a lookup typed at a terminal (or with --trace) is always traced; others (agents calling the\n"
            "CLI, --batch, `knowledge serve`) trace a share, mlflow.sample_rate (default 0.05, one in twenty;\n"
            "failed calls always).\n"
            "Every lookup keeps its tool_invocation row (`knowledge traces show ID`); mlflow=off turns MLflow off."
        ),
    )
    parser.add_argument("query", nargs="?", help="the question or alert text (omit with --batch)")
    parser.add_argument(
        "--batch", metavar="FILE", help="one query per line, or JSONL with a 'query' field; '-' for stdin"
    )
    parser.add_argument("--compact", action="store_true", help="one-line JSON")
    parser.add_argument(
        "--view", choices=("full", "agent"), default="full", help="agent: packed context and citations only"
    )
    parser.add_argument(
        "--url", metavar="URL", help="ask a running `knowledge serve` (e.g. http://127.0.0.1:1416) instead"
    )
    parser.add_argument(
        "--trace",
        action="store_true",
        help="trace this lookup in MLflow whatever mlflow.sample_rate (the default when typed at a terminal)",
    )
    add_print_config(parser)
    add_overrides(parser)


def run(args: argparse.Namespace) -> int:
    overrides = list(args.overrides)
    if args.cfg:  # an override given first lands in QUERY
        return print_config([args.query, *overrides] if args.query is not None else overrides)
    if args.url:
        return _lookup_remote(args)
    if args.batch:
        if args.query is not None:
            overrides.insert(0, args.query)
        return _lookup_batch(args, overrides)
    if args.query is None:
        raise UsageError("give a QUERY, or --batch FILE")
    return _lookup_one(args, overrides)


def _lookup_one(args: argparse.Namespace, overrides: list[str]) -> int:
    cfg = lookup_config(overrides)
    from components.contracts import STATUS_ERROR
    from pipelines.lookup import LookupService

    # One lookup, then exit: MLflow is imported only if its trace is sampled. A person at a terminal
    # looks for the trace of what they typed; an agent calling the CLI on every step is sampled.
    every_call = args.trace or sys.stdin.isatty()
    with held_logs(TRACE_LOGGER) as held:
        result = LookupService(cfg, one_shot=True, trace_every_call=every_call).lookup(args.query)
    print(json.dumps(_shown(result, args.view), ensure_ascii=False, indent=None if args.compact else 2))
    if result.evidence_status == STATUS_ERROR:
        _report_failure(result, held.fold())
        return EXIT_FAILURE
    held.show()
    return EXIT_OK


def _lookup_batch(args: argparse.Namespace, overrides: list[str]) -> int:
    """One JSON line per query line; exit 1 if a lookup failed, else 2 if a line was unusable."""
    cfg = lookup_config(overrides)
    from components.common.text import printable
    from components.contracts import STATUS_ERROR, InvalidQueryError
    from pipelines.lookup import LookupService

    try:
        queries = _read_batch(args.batch)
    except OSError as exc:
        raise UsageError(f"cannot read {args.batch}: {exc.strerror or exc}") from exc
    service = LookupService(cfg)
    invalid = errors = 0
    for number, query, problem in queries:
        if problem is not None:
            invalid += 1
            print(json.dumps({"line": number, "error": f"{args.batch}:{number}: {problem}"}), flush=True)
            continue
        try:
            result = service.lookup(query)
            line = _shown(result, args.view)
            if result.evidence_status == STATUS_ERROR:
                errors += 1
                _report_failure(result)
        except InvalidQueryError as exc:
            invalid += 1
            line = {"query": printable(query), "error": str(exc)}
        print(json.dumps(line, ensure_ascii=False), flush=True)
    return EXIT_FAILURE if errors else EXIT_BAD_INPUT if invalid else EXIT_OK


def _read_batch(path: str) -> list[tuple[int, str | None, str | None]]:
    """
    The batch's queries as (line number, query, error): a JSONL line whose `query` is not a
    string is an error of that line; invalid UTF-8 stops the batch, naming the file and line.
    """
    stream = sys.stdin.buffer if path == "-" else open(path, "rb")  # noqa: SIM115
    with stream:
        queries: list[tuple[int, str | None, str | None]] = []
        for number, raw in enumerate(stream, start=1):
            try:
                line = raw.decode("utf-8").strip()
            except UnicodeDecodeError as exc:
                raise UsageError(f"{path}:{number}: invalid UTF-8 at byte {exc.start} of the line") from exc
            if not line:
                continue
            if line.startswith("{"):
                queries.append((number, *_json_query(line)))
            else:
                queries.append((number, line, None))
    return queries


def _json_query(line: str) -> tuple[str | None, str | None]:
    try:
        query = json.loads(line)["query"]
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        return None, f"not a JSON object with a 'query' field ({exc})"
    if not isinstance(query, str):
        return None, f"'query' must be a string, not {'null' if query is None else type(query).__name__}"
    return query, None


def _lookup_remote(args: argparse.Namespace) -> int:
    from pipelines.serving.client import RemoteLookupError, remote_lookup

    if args.query is None or args.batch or args.overrides:
        raise UsageError("--url takes one QUERY (the server's config applies: no overrides, no --batch)")
    try:
        status, result = remote_lookup(args.url, args.query)
    except RemoteLookupError as exc:
        if exc.bad_input:
            raise UsageError(str(exc)) from exc
        raise
    if args.view == "agent" and status == 200:
        from pipelines.serving.views import agent_view

        result = agent_view(result)
    print(json.dumps(result, ensure_ascii=False, indent=None if args.compact else 2))
    if status != 200:
        print(f"knowledge: error: {result.get('message')} (invocation {result.get('invocationId')})", file=sys.stderr)
        return EXIT_FAILURE
    return EXIT_OK


def _shown(result, view: str) -> dict:
    """The result as `--view` shows it: the full result, or the agent view (packed context and citations)."""
    from pipelines.serving.views import shown

    return shown(result.to_dict(), view)


def _report_failure(result, trace_problems: list[str] = ()) -> None:
    """
    The one stderr line of a lookup that failed inside the pipeline (its JSON is on stdout), with
    what went wrong recording it: a read-only state folder fails the lookup and its trace record
    alike, and that is one fault, said once.
    """
    recorded = "".join(f"; {problem}" for problem in trace_problems)
    print(f"knowledge: error: {result.message} (invocation {result.invocation_id}{recorded})", file=sys.stderr)
