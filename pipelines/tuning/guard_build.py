"""
`knowledge guard build`: a guard set for the user's own knowledge base, made without labels.

The shipped catalogue (`eval/guard-catalogue.jsonl`) holds short off-topic operations texts (alerts
and engineers' questions) about many services, each with the service's name and key terms. A text
is kept when none of those terms is in the knowledge base's vocabulary (the L0 index's terms: its
words, titles, keywords and entity names): the knowledge base never mentions the service, so a
lookup should find no evidence for it. What is kept is written as a query set (kind `off_topic`)
that `guard=built` (or `guard.sets=[FILE]`) scores beside every tuning path.

    built = build_guard(load_l0_index(cfg.l0.index_path).vocabulary, read_catalogue())
    write_guard(built, "out.jsonl")
"""

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from components.common.text import terms
from pipelines.config.settings import CONF_DIR, ConfigError

CATALOGUE = CONF_DIR.resolve().parent / "eval" / "guard-catalogue.jsonl"
# Where `guard=built` (conf/guard/built.yaml) looks for it, under the state dir.
BUILT_GUARD = Path("guard") / "built.jsonl"
# Catalogue fields that describe a text, not a query: left out of the written query set.
CATALOGUE_ONLY = ("service", "terms")


@dataclass
class BuiltGuard:
    """The texts kept, and per service dropped the terms the knowledge base mentions."""

    kept: list[dict[str, Any]]
    dropped: dict[str, list[str]] = field(default_factory=dict)
    total: int = 0

    @property
    def kept_services(self) -> list[str]:
        return list(dict.fromkeys(row["service"] for row in self.kept))

    def lines(self, path: str | None = None) -> list[str]:
        where = f" into {path}" if path else ""
        lines = [
            f"kept {len(self.kept)} of {self.total} off-topic texts{where}: "
            f"{len(self.kept_services)} services the knowledge base never mentions"
        ]
        lines.append(f"  kept: {', '.join(self.kept_services) or '-'}")
        dropped = [f"{service} ({', '.join(words)})" for service, words in self.dropped.items()]
        lines.append(f"  dropped, the knowledge base mentions them: {'; '.join(dropped) or '-'}")
        return lines


def read_catalogue(path: str | Path = CATALOGUE) -> list[dict[str, Any]]:
    rows = []
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        row = json.loads(line)
        if not row.get("query") or not row.get("service") or not row.get("terms"):
            raise ConfigError(f"{path} line {number}: a catalogue row needs query, service and terms")
        rows.append(row)
    return rows


def mentioned(row: dict[str, Any], vocabulary: frozenset[str]) -> list[str]:
    """The row's service name and key terms the knowledge base uses, as written in the catalogue."""
    words = [*row["terms"], *row["service"].split("/")]
    return list(dict.fromkeys(word for word in words if set(terms(word)) & vocabulary))


def build_guard(vocabulary: Iterable[str], catalogue: list[dict[str, Any]]) -> BuiltGuard:
    """Keep the texts whose service and key terms are all outside `vocabulary`."""
    vocabulary = frozenset(vocabulary)
    built = BuiltGuard([], total=len(catalogue))
    for row in catalogue:
        words = mentioned(row, vocabulary)
        if words:
            known = built.dropped.setdefault(row["service"], [])
            known += [w for w in words if w not in known]
        else:
            built.kept.append(row)
    return built


def write_guard(built: BuiltGuard, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = [{k: v for k, v in row.items() if k not in CATALOGUE_ONLY} for row in built.kept]
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
    return path


def built_guard_path(cfg) -> Path:
    return Path(cfg.paths.state_dir) / BUILT_GUARD
