"""`knowledge labels list`: one line per label, newest first, superseded ones marked."""

from datetime import UTC, datetime
from typing import Any

from pipelines.labels.export import latest_labels


def _when(value: Any) -> str:
    if isinstance(value, datetime):
        return (value if value.tzinfo else value.replace(tzinfo=UTC)).astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")
    return str(value or "")[:19]


def _cut(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 3] + "..."


def format_labels(labels: list[dict[str, Any]], last: int | None = None) -> str:
    """A table (when, who, origin, verdict, sources, query), newest first; `*` marks a superseded label."""
    if not labels:
        return "no labels recorded"
    current = {id(label) for label in latest_labels(labels)[0]}
    shown = list(reversed(labels))[:last] if last else list(reversed(labels))
    lines = [f"{'when (UTC)':<19}  {'who':<16}  {'origin':<6}  {'verdict':<15}  {'sources':<32}  query"]
    for label in shown:
        verdict = label["verdict"] + ("" if id(label) in current else " *")
        sources = ", ".join(label.get("sources") or []) or "-"
        lines.append(
            f"{_when(label['created_at']):<19}  {_cut(label['reviewer'], 16):<16}  {label['origin']:<6}  "
            f"{verdict:<15}  {_cut(sources, 32):<32}  {_cut(label.get('query') or '', 60)}"
        )
    if len(current) < len(labels):
        lines.append("* superseded by a later label of the same lookup (kept, not counted)")
    return "\n".join(lines)
