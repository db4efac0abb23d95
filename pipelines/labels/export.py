"""
Labels as eval sets: `knowledge labels export --out DIR` writes DIR/train.jsonl and
DIR/check.jsonl in the format `knowledge eval` reads.

- Only the latest label of each invocation counts (by `created_at`); an imported label, linked
  to no invocation, counts on its own.
- A label says what answers its query when it names sources (`right_sources`, or an agent's
  `useful` with the source that helped: kind `answerable`) or that nothing does (`off_topic`).
  `wrong` and `not_useful` say what did not answer, not what would: counted, left out.
- Labels of one query (normalised: case and spacing) are merged when they agree (duplicates,
  counted) and left out when they do not (contradictions, reported by query).
- Each query goes to the side `pipelines.labels.split.label_split` gives it.

Usage example:

```python
export = build_export(store.labels())
write_export(export, Path("labels-out"))
print(format_summary(export))
```
"""

import hashlib
import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from components.tracing.label_records import OFF_TOPIC, RIGHT_SOURCES, USEFUL
from pipelines.labels.split import SPLITS, label_split, normalised_query

ANSWERABLE = "answerable"
# A label's claim about its query: (kind, relevant sources).
Claim = tuple[str, tuple[str, ...]]


@dataclass
class LabelExport:
    """The eval rows of each split and what was merged, left out or superseded on the way."""

    rows: dict[str, list[dict[str, Any]]] = field(default_factory=lambda: {split: [] for split in SPLITS})
    duplicates: dict[str, int] = field(default_factory=dict)  # query -> labels merged into its row
    contradictions: dict[str, list[Claim]] = field(default_factory=dict)  # query -> the claims that disagree
    silent: Counter = field(default_factory=Counter)  # verdict -> labels that name no right answer
    superseded: int = 0

    def counts(self) -> dict[str, Counter]:
        return {split: Counter(row["kind"] for row in rows) for split, rows in self.rows.items()}


def latest_labels(labels: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    """(the latest label of each invocation, how many earlier ones it superseded); labels oldest first."""
    latest: dict[str, dict[str, Any]] = {}
    for label in labels:
        latest[label["invocation_id"] or f"label:{label['id']}"] = label
    return list(latest.values()), len(labels) - len(latest)


def claim_of(label: dict[str, Any]) -> Claim | None:
    """What a label says answers its query, or None when it says nothing about that."""
    sources = tuple(sorted(label.get("sources") or []))
    if label["verdict"] in (RIGHT_SOURCES, USEFUL) and sources:
        return ANSWERABLE, sources
    if label["verdict"] == OFF_TOPIC:
        return OFF_TOPIC, ()
    return None


def row_id(query: str) -> str:
    """A stable id per query: the same row keeps its id in every export."""
    return "label-" + hashlib.sha256(normalised_query(query).encode("utf-8")).hexdigest()[:12]


def build_export(labels: list[dict[str, Any]]) -> LabelExport:
    """The eval rows of a store's labels (`TraceStore.labels()`, oldest first)."""
    export = LabelExport()
    latest, export.superseded = latest_labels(labels)
    by_query: dict[str, list[tuple[str, Claim]]] = {}
    for label in latest:
        claim = claim_of(label)
        if claim is None or not (label.get("query") or "").strip():
            export.silent[label["verdict"]] += 1
            continue
        by_query.setdefault(normalised_query(label["query"]), []).append((label["query"], claim))
    for key in sorted(by_query):
        labelled = by_query[key]
        query = labelled[0][0]
        claims = sorted({claim for _, claim in labelled})
        if len(claims) > 1:
            export.contradictions[query] = claims
            continue
        if len(labelled) > 1:
            export.duplicates[query] = len(labelled)
        kind, relevant = claims[0]
        row = {"id": row_id(query), "query": query, "relevant": list(relevant), "kind": kind}
        export.rows[label_split(query)].append(row)
    return export


def write_export(export: LabelExport, out_dir: Path) -> dict[str, Path]:
    """DIR/train.jsonl and DIR/check.jsonl (both written, an empty side as an empty file)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {}
    for split, rows in export.rows.items():
        paths[split] = out_dir / f"{split}.jsonl"
        paths[split].write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
    return paths


def format_summary(export: LabelExport) -> str:
    """Counts per split and kind, then the duplicates, contradictions and silent labels."""
    counts = export.counts()
    lines = [
        f"{split}: {sum(counts[split].values())} queries ({counts[split][ANSWERABLE]} answerable, "
        f"{counts[split][OFF_TOPIC]} off_topic)"
        for split in SPLITS
    ]
    lines.append(f"superseded labels (a later label of the same lookup counts): {export.superseded}")
    lines.append(f"duplicates merged: {len(export.duplicates)} queries")
    lines += [f"  {count}x {query}" for query, count in export.duplicates.items()]
    lines.append(f"contradictions left out: {len(export.contradictions)} queries")
    for query, claims in export.contradictions.items():
        said = "; ".join(", ".join(relevant) if kind == ANSWERABLE else kind for kind, relevant in claims)
        lines.append(f"  {query}: {said}")
    silent = ", ".join(f"{count} {verdict}" for verdict, count in sorted(export.silent.items())) or "0"
    lines.append(f"left out, no right answer named: {silent}")
    return "\n".join(lines)
