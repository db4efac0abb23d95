"""
The decision scale: one model ranks, another decides (docs/adapt.md#calibration).

An adapted model ranks the knowledge base better, but its similarities sit higher for anything that
looks like the knowledge base, off-topic texts included, so every bar of `conf/retrieval` would mean
something else on its scale. With a decision model (`embedder.decision_model`, or a model folder
whose calibration is `packaged_decides`) the Milvus search still runs with the ranking model's
query embedding, and each candidate then gets its similarity from the decision model: the dot
product of the decision model's query embedding with the chunk's decision vector, both unit length,
which is the cosine similarity the pipeline's `similarity` is everywhere (1 - d/2 for the L2
distance of unit vectors, clamped to [0, 1]). Every threshold, the fallback trigger and
`relevanceLevel` read `similarity`, so they decide on the decision model's scale; the ranking
model's similarity stays in `rank_similarity` for the reranker. That is `embedder.decision_scope=all`;
with `answer` (the default) the candidates keep the ranking model's similarity and the decision
model's best over every chunk (`DecisionVectors.best`) only gates answer vs no evidence
(`DecisionScale.gated` in components/lookup/retrieval_legs.py).

The chunks' decision vectors are written beside the index by `knowledge index`
(`<collection>.decision-vectors.npz`: chunk ids, float32 unit vectors, the decision model's name).

Usage example:

```python
>>> import numpy as np
>>> from components.contracts import Candidate
>>> vectors = DecisionVectors("packaged:m", ("a#0", "b#0"), np.array([[1.0, 0.0], [0.0, 1.0]], dtype=np.float32))
>>> found = Candidate("a#0", "a.md", "text", 0.9, 0.2, "l2_distance", "sdk")
>>> [(c.similarity, c.rank_similarity) for c in on_decision_scale([found], np.array([0.6, 0.8]), vectors)]
[(0.6, 0.9)]

```
"""

import os
import zipfile
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from components.contracts import Candidate
from components.errors import BadInputError

REBUILD = "run `knowledge index --rebuild`"
WRITE_AGAIN = "run `knowledge index --rebuild` to write them again"
UNIT_TOLERANCE = 1e-3  # of a float32 row's length: the embedders write unit rows
# Where the default config keeps the file (`embedder.decision_vectors`), for components built without config.
DEFAULT_DECISION_VECTORS = ".knowledge/knowledge.decision-vectors.npz"


class DecisionVectorsError(BadInputError):
    """The decision vectors are missing, of another model, or do not cover the indexed chunks."""


@dataclass(frozen=True)
class DecisionVectors:
    """The decision model's unit vectors of the indexed chunks, by chunk id (evidence key)."""

    model: str
    ids: tuple[str, ...]
    vectors: np.ndarray  # float32, one unit row per id
    positions: dict[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.vectors.ndim != 2 or len(self.ids) != self.vectors.shape[0]:
            raise ValueError(f"{len(self.ids)} ids for vectors of shape {self.vectors.shape}")
        object.__setattr__(self, "positions", {key: row for row, key in enumerate(self.ids)})

    @classmethod
    def empty(cls, model: str, dimension: int = 0) -> "DecisionVectors":
        return cls(model, (), np.zeros((0, dimension), dtype=np.float32))

    @classmethod
    def load(cls, path: str | Path, model: str) -> "DecisionVectors":
        """
        The file at `path`, checked to hold `model`'s vectors.

        :raises DecisionVectorsError: No file, an unreadable one, or another model's.
        """
        path = Path(path)
        if not path.is_file():
            raise DecisionVectorsError(
                f"no decision vectors at {path} (the decision model {model} scores every candidate): {REBUILD}"
            )
        try:
            with np.load(path, allow_pickle=False) as data:
                stored = str(data["model"])
                loaded = cls(stored, tuple(str(key) for key in data["ids"]), data["vectors"].astype(np.float32))
        # A cut file is no zip (BadZipFile) or ends early (EOFError): numpy's message names no file.
        except (OSError, KeyError, ValueError, EOFError, zipfile.BadZipFile) as exc:
            raise DecisionVectorsError(f"the decision vectors {path} are damaged ({exc}): {WRITE_AGAIN}") from exc
        if stored != model:
            raise DecisionVectorsError(
                f"the decision vectors {path} are of {stored}, not of the decision model {model}: {REBUILD}"
            )
        if not _unit_rows(loaded.vectors):
            raise DecisionVectorsError(
                f"the decision vectors {path} are damaged (rows that are not unit vectors, e.g. zeros): {WRITE_AGAIN}"
            )
        return loaded

    def save(self, path: str | Path) -> Path:
        """Write the file whole, then move it in place: a reader never sees half of it."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(path.name + ".partial.npz")
        np.savez(partial, model=np.array(self.model), ids=np.array(self.ids, dtype=str), vectors=self.vectors)
        os.replace(partial, path)
        return path

    def updated(self, removed: list[str], ids: list[str], vectors: np.ndarray) -> "DecisionVectors":
        """A new set: `removed` ids dropped, `ids` with `vectors` added (replacing rows of the same id)."""
        gone = set(removed) | set(ids)
        keep = [row for row, key in enumerate(self.ids) if key not in gone]
        kept_ids = tuple(self.ids[row] for row in keep)
        if not ids:
            return DecisionVectors(self.model, kept_ids, self.vectors[keep])
        added = np.asarray(vectors, dtype=np.float32)
        base = self.vectors[keep] if keep else np.zeros((0, added.shape[1]), dtype=np.float32)
        return DecisionVectors(self.model, kept_ids + tuple(ids), np.vstack([base, added]))

    def similarities(self, query: np.ndarray, keys: list[str]) -> np.ndarray:
        """
        The decision similarity of the query to each chunk of `keys`, in [0, 1].

        :raises DecisionVectorsError: A chunk the index holds has no decision vector (a stale file).
        """
        missing = [key for key in keys if key not in self.positions]
        if missing:
            raise DecisionVectorsError(
                f"the decision vectors do not cover the index ({len(missing)} chunks missing, e.g. {missing[0]}): "
                f"{REBUILD}"
            )
        query = self._checked_query(query)
        rows = self.vectors[[self.positions[key] for key in keys]] if keys else self.vectors[:0]
        return np.clip(rows @ query, 0.0, 1.0)

    def _checked_query(self, query: np.ndarray) -> np.ndarray:
        """The query as float32; one of another dimension than the file's is the decision model's mismatch."""
        query = np.asarray(query, dtype=np.float32)
        if len(self.ids) and query.shape != (self.vectors.shape[1],):
            raise DecisionVectorsError(
                f"the decision vectors hold {self.vectors.shape[1]}-d vectors, the decision model gives "
                f"{query.shape[-1]}-d ones: {REBUILD}"
            )
        return query

    def best(self, query: np.ndarray) -> float:
        """The best decision similarity over every chunk (an unfiltered search on the decision scale)."""
        if not len(self.ids):
            return 0.0
        return float(np.clip(np.max(self.vectors @ self._checked_query(query)), 0.0, 1.0))


def _unit_rows(vectors: np.ndarray) -> bool:
    return bool(np.all(np.abs(np.linalg.norm(vectors, axis=1) - 1.0) <= UNIT_TOLERANCE)) if len(vectors) else True


def on_decision_scale(candidates: list[Candidate], query: np.ndarray, vectors: DecisionVectors) -> list[Candidate]:
    """
    New candidates whose `similarity` is the decision model's and `rank_similarity` the ranking
    model's (kept from a first rescale: rescaling twice changes nothing).
    """
    scores = vectors.similarities(query, [c.evidence_key for c in candidates])
    return [
        replace(
            c,
            similarity=round(float(score), 6),
            rank_similarity=c.similarity if c.rank_similarity is None else c.rank_similarity,
        )
        for c, score in zip(candidates, scores, strict=True)
    ]


def ranking_similarity(candidate: Candidate) -> float:
    """The similarity that ranks: the ranking model's when a decision model rescored the candidate."""
    return candidate.similarity if candidate.rank_similarity is None else candidate.rank_similarity


class DecisionVectorsFile:
    """
    The decision vectors file of a collection, read once per version of the file: on first use and
    again when `knowledge index` replaced it (another inode, modification time or size), so a
    running server follows the index. Each version is whole (written beside, then renamed).
    """

    def __init__(self, path: str | Path, model: str) -> None:
        self.path = Path(path)
        self.model = model
        self._loaded: tuple[tuple[int, int, int] | None, DecisionVectors] | None = None

    def get(self) -> DecisionVectors:
        version = self._version()
        if self._loaded is None or version is None or self._loaded[0] != version:
            loaded = DecisionVectors.load(self.path, self.model)
            # Replaced while being read: the next call reads the newer version.
            self._loaded = (version if self._version() == version else None, loaded)
        return self._loaded[1]

    def _version(self) -> tuple[int, int, int] | None:
        try:
            stat = self.path.stat()
        except OSError:
            return None
        return stat.st_ino, stat.st_mtime_ns, stat.st_size
