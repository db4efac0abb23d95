"""
Writing one label of one lookup: the path every door takes (`knowledge traces label`, the REST
feedback route, the MCP feedback tool). The verdict is checked, the sources are checked against
the index, the invocation is found (in the database, else in the spool), and the label goes to
the trace store, which spools it when the database is away.

Usage example:

```python
outcome = label_invocation(store, cfg.l0.index_path, invocation_id, RIGHT_SOURCES, ["disk/disk-full.md"],
                           reviewer="alice", origin="cli")
outcome.status  # 'recorded' or 'spooled'
```
"""

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from components.errors import BadInputError
from components.tracing.label_records import NOT_USEFUL, OFF_TOPIC, RIGHT_SOURCES, USEFUL, VERDICTS, WRONG
from components.tracing.trace_store import AmbiguousInvocationIdError, TraceStore, TraceStoreError

# Verdicts that name no source: the sources given with them would say nothing.
SOURCELESS = (WRONG, OFF_TOPIC)


class UnknownInvocationError(BadInputError):
    """The label names an invocation the trace store does not hold (REST: 404)."""


class BadLabelError(BadInputError):
    """A verdict or source that cannot be a label (REST: 422)."""


@dataclass(frozen=True)
class LabelOutcome:
    """What writing one label did: the label, and `recorded`, `spooled`, `rejected` or `lost`."""

    label: dict[str, Any]
    status: str
    invocation_checked: bool = True


def new_label(
    invocation_id: str | None,
    query: str | None,
    verdict: str,
    sources: list[str],
    reviewer: str,
    origin: str,
    label_id: str | None = None,
    created_at: datetime | None = None,
) -> dict[str, Any]:
    """A `lookup_label` record; a fresh id and now unless given (a pull or an import gives stable ids)."""
    return {
        "id": label_id or str(uuid.uuid4()),
        "invocation_id": invocation_id,
        "query": query,
        "verdict": verdict,
        "sources": list(dict.fromkeys(sources)),
        "reviewer": reviewer,
        "origin": origin,
        "created_at": created_at or datetime.now(tz=UTC),
    }


def check_verdict(verdict: str, sources: list[str]) -> None:
    if verdict not in VERDICTS:
        raise BadLabelError(f"verdict {verdict!r} is not one of {', '.join(VERDICTS)}")
    if verdict == RIGHT_SOURCES and not sources:
        raise BadLabelError("right sources need at least one source")
    if verdict in SOURCELESS and sources:
        raise BadLabelError(f"a {verdict} label names no source")


def check_sources(index_path: str, sources: list[str]) -> None:
    """Every source is a document of the index (its KB-relative path, e.g. `disk/disk-full.md`)."""
    if not sources:
        return
    # Here, not at the top: the L0 index brings numpy, which labels without sources never need.
    from components.stores.l0_index_file import L0IndexHandle, L0IndexMissingError

    try:
        index = L0IndexHandle(index_path).get()
    except L0IndexMissingError as exc:
        raise BadLabelError(f"cannot check the sources: {exc}") from exc
    unknown = [source for source in sources if index.entry(source) is None]
    if unknown:
        raise BadLabelError(
            f"source {', '.join(map(repr, unknown))} is not in the index: give the KB-relative path "
            "as a lookup cites it (e.g. disk/disk-full.md)"
        )


def find_invocation(store: TraceStore, invocation_id: str) -> tuple[dict[str, Any] | None, bool]:
    """
    (the invocation's row or spooled record, whether the database could be asked). A lookup whose
    row still waits in the spool is found there; with the database away, an id found nowhere
    cannot be told unknown.
    """
    try:
        row = store.get(invocation_id)
    except AmbiguousInvocationIdError as exc:
        raise UnknownInvocationError(str(exc)) from exc
    except TraceStoreError as exc:
        store.mark_down(exc)  # the label goes straight to the spool rather than wait on the database again
        return _spooled_invocation(store, invocation_id), False
    return row or _spooled_invocation(store, invocation_id), True


def _spooled_invocation(store: TraceStore, invocation_id: str) -> dict[str, Any] | None:
    return next((record for record in store.spooled() if record.get("id") == invocation_id), None)


def top_source(invocation: dict[str, Any] | None) -> list[str]:
    """The best evidence block's source of a recorded lookup ([] without evidence)."""
    blocks = ((invocation or {}).get("retrieval_details") or {}).get("evidence_blocks") or []
    return [blocks[0]["source"]] if blocks and blocks[0].get("source") else []


def label_invocation(
    store: TraceStore,
    index_path: str,
    invocation_id: str,
    verdict: str,
    sources: list[str],
    reviewer: str,
    origin: str,
    label_id: str | None = None,
    created_at: datetime | None = None,
) -> LabelOutcome:
    """
    Check and write one label of one invocation. An agent's `useful` without a source means the
    lookup's best source helped: that source is stored. `label_id` and `created_at`: a label
    pulled from elsewhere keeps its own (pulling it again stores nothing twice).

    :raises BadLabelError: The verdict and sources do not make a label, or a source is not indexed.
    :raises UnknownInvocationError: The database holds no such invocation (nor does the spool).
    """
    check_verdict(verdict, sources)
    check_sources(index_path, sources)
    invocation, asked = find_invocation(store, invocation_id)
    if invocation is None and asked:
        raise UnknownInvocationError(f"no invocation {invocation_id!r} in {store.target}")
    if verdict == USEFUL and not sources:
        sources = top_source(invocation)
    full_id = invocation["id"] if invocation else invocation_id
    query = ((invocation or {}).get("arguments") or {}).get("query")
    label = new_label(full_id, query, verdict, sources, reviewer, origin, label_id, created_at)
    return LabelOutcome(label, store.write_label(label), invocation_checked=invocation is not None)


def feedback_verdict(useful: bool) -> str:
    """The verdict of an agent's `useful: true|false`."""
    return USEFUL if useful else NOT_USEFUL
