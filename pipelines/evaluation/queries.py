"""
Reading a labelled query set: JSONL with `query`, `relevant` (sources relative to the knowledge
base; empty for an off-topic query) and `kind` ("answerable" or "off_topic"); `id` and `style`
are optional.

Kept apart from pipelines/evaluation/run.py so that commands which only read a query file
(`knowledge labels import`) import none of the retrieval stack.
"""

import json
from pathlib import Path
from typing import Any

from components.errors import BadInputError
from pipelines.evaluation.metrics import EvalQuery

QUERY_KINDS = ("answerable", "off_topic")


class EvaluationInputError(BadInputError):
    """The query file cannot be used."""


def _kind_of(row: dict[str, Any]) -> str:
    kind = row.get("kind") or ("answerable" if row.get("relevant") else "off_topic")
    if kind not in QUERY_KINDS:
        raise ValueError(f"unknown kind {kind!r}: the kinds are {', '.join(QUERY_KINDS)}")
    return kind


def load_queries(path: str | Path) -> list[EvalQuery]:
    queries = []
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise EvaluationInputError(f"cannot read {path}: {exc.strerror or exc}") from exc
    try:
        lines = data.decode("utf-8").splitlines()
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise EvaluationInputError(f"{path}:{line}: not UTF-8 text (byte {data[exc.start]:#04x})") from exc
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            queries.append(
                EvalQuery(
                    query=row["query"],
                    relevant=set(row.get("relevant") or []),
                    kind=_kind_of(row),
                    id=str(row.get("id", number)),
                    style=row.get("style", ""),
                )
            )
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise EvaluationInputError(f"{path}:{number}: not a query line ({exc})") from exc
        except ValueError as exc:  # an unknown kind would count as answerable with nothing relevant, silently
            raise EvaluationInputError(f"{path}:{number}: {exc}") from exc
    if not queries:
        raise EvaluationInputError(f"{path} holds no queries")
    return queries
