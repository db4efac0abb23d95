"""
Reading `tool_invocation` back: the helpers behind `knowledge traces list|show|export|replay`.

Rows come from `components.tracing.trace_store.TraceStore`; these functions only format them.
"""

import json
import os
from datetime import UTC, datetime
from typing import Any, TextIO

from omegaconf import DictConfig

from components.errors import BadInputError, KnowledgeFailure, ParameterError
from components.tracing.trace_database import redact, sqlite_path
from components.tracing.trace_records import finite_only, to_jsonable
from components.tracing.trace_replay import ReplayReport
from components.tracing.trace_store import TraceStore
from pipelines.config.pipeline_files import wired_key, wired_values
from pipelines.config.settings import ConfigError

EXPORT_FORMATS = ("jsonl",)
STATUSES = ("ok", "error")


def redact_url(db_url: str) -> str:
    """The database URL for messages, password hidden."""
    return redact(db_url)


class NoTraceDatabaseError(BadInputError):
    """A read of a SQLite trace database that does not exist (CLI exit status 2): reading never creates it."""


class ReadOnlyTraceFolderError(KnowledgeFailure):
    """A SQLite trace database in a read-only folder (exit status 1, like a read-only state folder for Milvus Lite)."""


# The trace writer's init parameters that open its store; the lookup pipeline's file wires each to a key.
_STORE_PARAMETERS = ("db_url", "spool_path", "retry_interval", "timeout_s")


def _store_parameters(cfg: DictConfig) -> dict[str, Any]:
    """The trace store's parameters as the lookup pipeline gives them, checked by the store's own rules."""
    parameters = wired_values(cfg, "lookup", "trace_writer", _STORE_PARAMETERS)
    try:
        TraceStore.check_parameters(**parameters)
    except ParameterError as exc:
        key = wired_key(cfg, "lookup", "trace_writer", exc.parameter)
        raise ConfigError(exc.rename(key or f"trace_writer.{exc.parameter}")) from exc
    return parameters


def open_store(cfg: DictConfig, reading: bool = False) -> TraceStore:
    """
    The trace store of a config, without building the lookup pipeline. `reading`: for list, show
    and export, which must not create a database (or its folder) where none was recorded.
    """
    parameters = _store_parameters(cfg)  # the store's own rules, before the path is read from the URL
    if reading:
        path = sqlite_path(parameters["db_url"])
        if path is not None and not path.is_file():
            raise NoTraceDatabaseError(
                f"no trace database at {path}: nothing has been recorded there (check trace.db_url / paths.state_dir)"
            )
        if path is not None and not os.access(path.parent, os.W_OK):  # EROFS too, even for root
            raise ReadOnlyTraceFolderError(
                f"the trace database {path} cannot be opened: its folder {path.parent} is read-only (SQLite writes "
                "its WAL journal beside it even to read); copy it to a writable folder and give "
                "trace.db_url=sqlite:///COPY"
            )
    return TraceStore(**parameters, read_only=reading)


def format_replay(report: ReplayReport, store: TraceStore, db_url: str) -> str:
    """The one-line summary of `knowledge traces replay`."""
    line = (
        f"replayed {report.pending} spooled record(s) into {redact_url(db_url)}: {report.inserted} new, "
        f"{report.already_present} already present"
    )
    if report.rejected or report.torn:
        line += f"; {report.rejected} refused and {report.torn} torn line(s) moved to {store.dead_letter_path}"
    if report.kept_for_others:
        line += f"; {report.kept_for_others} record(s) for other trace databases kept in {store.spool_path}"
    return line


def _when(value: Any) -> str:
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return str(value or "")


def _query(row: dict[str, Any]) -> str:
    arguments = row.get("arguments") or {}
    query = arguments.get("query") if isinstance(arguments, dict) else arguments
    return query if isinstance(query, str) else json.dumps(query, ensure_ascii=False)


def _cut(text: str, width: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _num(value: Any, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def format_list(rows: list[dict[str, Any]]) -> str:
    """One line per invocation, newest first."""
    if not rows:
        return "no invocations recorded"
    header = (
        f"{'created (UTC)':<19}  {'invocation id':<36}  {'status':<6}  {'found':<5}  {'layer':<5}  {'ms':>8}  query"
    )
    lines = [header]
    for row in rows:
        created = _when(row.get("created_at"))[:19]
        found = "-" if row.get("found") is None else ("yes" if row.get("found") else "no")
        latency = "-" if row.get("latency_ms") is None else f"{row['latency_ms']:.1f}"
        query = _query(row)
        if row.get("status") == "error" and row.get("error"):
            query = f"{query}  ! {row['error']}"
        lines.append(
            f"{created:<19}  {row['id']:<36}  {row.get('status') or '':<6}  {found:<5}  "
            f"{(row.get('retrieval_layer') or '-'):<5}  {latency:>8}  {_cut(query, 70)}"
        )
    return "\n".join(lines)


def format_show(row: dict[str, Any]) -> str:
    """One invocation, readable: the call, the attempts, the rerank trace, the evidence summaries."""
    details = row.get("retrieval_details") or {}
    sections = (
        _call_lines(row, details),
        _transform_lines(details.get("query_transform")),
        _hint_lines(details.get("l0_hints")),
        _attempts_lines(details),
        _rerank_lines(details.get("rerank_trace")),
        _evidence_lines(details),
        _pack_lines(details.get("context_pack_summary")),
        _sidecar_lines(details.get("sidecar")),
    )
    # A section absent from the row prints nothing, not even its blank line.
    return "\n\n".join("\n".join(lines) for lines in sections if lines)


def _call_lines(row: dict[str, Any], details: dict[str, Any]) -> list[str]:
    lines = [
        f"Invocation {row['id']}  ({row.get('tool_name')})",
        f"  created    {_when(row.get('created_at'))}    latency {_num(row.get('latency_ms'), 1)} ms",
        f"  status     {row.get('status')}    record {row.get('trace_status') or '-'}",
        f"  arguments  {json.dumps(row.get('arguments'), ensure_ascii=False)}",
        f"  found      {row.get('found')}    evidence status {details.get('evidence_status', '-')}    "
        f"relevance {details.get('relevance_level', '-')}    layer {row.get('retrieval_layer') or '-'}",
    ]
    if row.get("error"):
        lines.append(f"  error      {row['error']}")
    if details.get("completed_stages") is not None:
        lines.append(f"  completed  {', '.join(details['completed_stages']) or '(no stage)'}")
    return lines


def _transform_lines(transform: dict[str, Any] | None) -> list[str]:
    if not transform:
        return []
    lines = ["Query transform", f"  normalized  {transform.get('normalized')!r}"]
    if transform.get("expansions"):
        lines.append(f"  expansions  {', '.join(transform['expansions'])}")
    if transform.get("truncated"):
        lines.append(f"  truncated   from {transform.get('original_chars')} characters")
    return lines


HINT_LABELS = (
    ("matched_titles", "titles"),
    ("matched_keywords", "keywords"),
    ("domains", "domains"),
    ("entities", "entities"),
)


def _hint_lines(hints: dict[str, Any] | None) -> list[str]:
    if not hints:
        return []
    return ["L0 hints (hint data, never evidence)"] + [
        f"  {label:<9} {', '.join(hints.get(key) or []) or '-'}" for key, label in HINT_LABELS
    ]


def _attempts_lines(details: dict[str, Any]) -> list[str]:
    trace = details.get("retrieval_trace")
    if not trace:
        return []
    selected = trace.get("selected_attempt")
    fallback = details.get("fallback_reason") or trace.get("fallback_reason")
    lines = [
        f"Retrieval attempts (mode {trace.get('vector_store_mode')}, selected {selected}, "
        f"fallback {fallback or 'none'})"
    ]
    if not trace.get("attempts"):
        lines.append("  (no attempt: L1 disabled)" if trace.get("l1_enabled") is False else "  (no attempt)")
    for attempt in trace.get("attempts") or []:
        lines += _attempt_lines(attempt, selected)
    return lines


def _attempt_lines(attempt: dict[str, Any], selected: Any) -> list[str]:
    mark = "*" if attempt.get("index") == selected else " "
    scope = f"category={attempt['category_filter']}" if attempt.get("category_filter") else "unfiltered"
    lines = [
        f" {mark}#{attempt.get('index')}  {scope:<22} path {attempt.get('path')}  "
        f"candidates {attempt.get('candidate_count')}  usable {attempt.get('usable_count')}  "
        f"top {_num(attempt.get('top_similarity'))}  {attempt.get('outcome')}",
        f"      query {attempt.get('query')!r}",
    ]
    if attempt.get("error"):
        lines.append(f"      note  {attempt['error']}")
    return lines


def _rerank_lines(rerank: list[dict[str, Any]] | None) -> list[str]:
    if not rerank:
        return []
    header = f"  {'rank':>4}  {'final':>6}  {'base':>6}  {'source':<40} boosts"
    return ["Rerank trace", header] + [_rerank_entry_line(entry) for entry in rerank]


def _rerank_entry_line(entry: dict[str, Any]) -> str:
    boosts = ", ".join(f"{k} {v:+.3f}" for k, v in (entry.get("boosts") or {}).items() if v)
    return (
        f"  {entry.get('rank'):>4}  {_num(entry.get('final_score')):>6}  {_num(entry.get('base_score')):>6}  "
        f"{_cut(entry.get('source') or '', 40):<40} {boosts or '-'}"
    )


def _evidence_lines(details: dict[str, Any]) -> list[str]:
    blocks = details.get("evidence_blocks")
    if blocks is None:
        return []
    counts = f"{details.get('final_evidence_count', len(blocks))} of {details.get('candidate_count', '?')} candidates"
    lines = [f"Evidence ({counts})"]
    if not blocks:
        lines.append("  (none)")
    for number, block in enumerate(blocks, start=1):
        lines += _block_lines(number, block)
    return lines


def _block_lines(number: int, block: dict[str, Any]) -> list[str]:
    where = block.get("breadcrumb") or block.get("title") or ""
    lines = [
        f"  {number}. {block.get('source')}  {where}  [{block.get('retrieval_layer')}]  "
        f"score {_num(block.get('score'))}  rerank {_num(block.get('rerank_score'))}"
    ]
    if block.get("hit_reasons"):
        lines.append(f"     hits: {'; '.join(block['hit_reasons'])}")
    if block.get("content_preview"):
        lines.append(f'     "{_cut(block["content_preview"], 160)}" ({block.get("content_chars")} chars)')
    return lines


def _pack_lines(pack: dict[str, Any] | None) -> list[str]:
    if not pack:
        return []
    lines = [
        "Context pack",
        f"  {pack.get('used_tokens')}/{pack.get('budget_tokens')} tokens, truncated {pack.get('truncated')}",
        f"  included {', '.join(pack.get('included_sources') or []) or '-'}",
    ]
    if pack.get("omitted_sources"):
        lines.append(f"  omitted  {', '.join(pack['omitted_sources'])}")
    return lines


def _sidecar_lines(sidecar: dict[str, Any] | None) -> list[str]:
    if not sidecar or sidecar.get("status") in (None, "disabled"):
        return []
    return [f"Sidecar: {sidecar.get('status')} ({sidecar.get('path')})"]


def row_json(row: dict[str, Any]) -> dict[str, Any]:
    return finite_only(to_jsonable(row))


def export_jsonl(rows: list[dict[str, Any]], stream: TextIO) -> int:
    """One standard JSON object per row (created_at in ISO 8601, no NaN), oldest first; returns the count."""
    for row in rows:
        stream.write(json.dumps(row_json(row), ensure_ascii=False, default=str, allow_nan=False) + "\n")
    return len(rows)
