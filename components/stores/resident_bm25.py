"""
Milvus Lite's BM25 full-text search over the collection held in memory, scored as it scores: its
own analyzer and BM25 parameters (the collection's schema and index), its statistics (per flushed
segment, over every row the segment file holds, a row deleted or replaced since included, whatever
the filter), its float32 arithmetic and its order of ties. Read from the collection's files (its
manifest, schema and segment files), so it holds only while every row is flushed: with rows in the
write-ahead log (Milvus Lite scores those with the filtered rows' statistics) `read` gives None.
See docs/architecture.md, "One scan".
"""

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
from milvus_lite.analyzer import Analyzer, compute_tf, create_analyzer
from milvus_lite.index.sparse_factory import create_sparse_index
from milvus_lite.schema.persistence import load_schema
from milvus_lite.schema.types import FunctionType
from milvus_lite.storage.manifest import Manifest

from components.stores.milvus_collection import BM25_METRIC, ID_FIELD, SPARSE_FIELD

# Milvus Lite's names in a collection's folder and its segment files.
SCHEMA_FILE, WAL_DIR, PARTITIONS_DIR, SEQ_COLUMN = "schema.json", "wal", "partitions", "_seq"
# One stored (term, frequency) pair of a sparse row, as Milvus Lite packs it.
SPARSE_PAIR = np.dtype([("term", "<u4"), ("tf", "<f4")])
NOT_LIVE = -1


@dataclass(frozen=True)
class Bm25Segment:
    """
    One segment file's BM25 statistics (over all its rows) and postings by term (its rows in file
    order), and the resident position of each of its rows that is live (NOT_LIVE: deleted or replaced).
    """

    live: np.ndarray
    terms: np.ndarray
    starts: np.ndarray
    rows: np.ndarray
    tfs: np.ndarray
    doc_lengths: np.ndarray
    avgdl: float

    @classmethod
    def of(cls, sparse: list[bytes], live: np.ndarray) -> "Bm25Segment":
        """The segment of these packed sparse rows (file order) and their resident positions."""
        pairs = np.frombuffer(b"".join(sparse), dtype=SPARSE_PAIR)
        row_of_pair = np.repeat(np.arange(len(sparse)), [len(row) // SPARSE_PAIR.itemsize for row in sparse])
        # Each row's length sums its frequencies (whole numbers: exact in any order).
        lengths = np.bincount(row_of_pair, weights=pairs["tf"].astype(np.float64), minlength=len(sparse))
        order = np.lexsort((row_of_pair, pairs["term"]))
        terms, starts = np.unique(pairs["term"][order], return_index=True)
        avgdl = float(lengths.sum()) / len(sparse) if len(sparse) else 0.0
        # Rows as int32 and frequencies as stored (float32): half the memory, the same values.
        return cls(
            live,
            terms,
            np.append(starts, order.size),
            row_of_pair[order].astype(np.int32),
            pairs["tf"][order],
            lengths.astype(np.float32),
            avgdl,
        )

    def __len__(self) -> int:
        return self.live.size

    def posting(self, term: int) -> tuple[np.ndarray, np.ndarray]:
        """The rows holding `term` (in file order) and its frequency in each."""
        at = int(np.searchsorted(self.terms, term))
        if at == self.terms.size or self.terms[at] != term:
            return self.rows[:0], self.tfs[:0]
        return self.rows[self.starts[at] : self.starts[at + 1]], self.tfs[self.starts[at] : self.starts[at + 1]]

    def ranked(self, query: dict[int, float], limit: int, allowed: np.ndarray, k1: float, b: float) -> list[tuple]:
        """
        The `limit` best (score, resident position) of the live rows that `allowed` (by resident
        position) keeps, as Milvus Lite's `SparseInvertedIndex.search` ranks them: float32 scores,
        ties in the order the rows were first scored (by query term, then file order).
        """
        valid = self.live >= 0
        valid[valid] = allowed[self.live[valid]]
        scores = np.zeros(len(self), dtype=np.float32)
        first_scored = np.full(len(self), np.iinfo(np.int64).max, dtype=np.int64)
        avgdl = np.float32(self.avgdl if self.avgdl > 0 else 1.0)
        for turn, (term, weight) in enumerate(query.items()):
            rows, tfs = self.posting(term)
            if rows.size == 0:
                continue
            # Document frequency over every row of the segment, as the index was built.
            idf = math.log((len(self) - rows.size + 0.5) / (rows.size + 0.5) + 1.0)
            keep = valid[rows]
            rows, tfs = rows[keep], tfs[keep]
            # Each step as Milvus Lite's Python evaluates it: its float64 scalars meet float32 lengths.
            norm = np.float32(1.0 - b) + np.float32(b) * self.doc_lengths[rows] / avgdl
            tf_norm = (tfs.astype(np.float64) * (k1 + 1.0)).astype(np.float32) / (tfs + np.float32(k1) * norm)
            scores[rows] += np.float32(idf) * tf_norm * np.float32(weight)
            first_scored[rows] = np.minimum(first_scored[rows], turn * len(self) + rows.astype(np.int64))
        scored = np.flatnonzero(first_scored < np.iinfo(np.int64).max)
        best = scored[np.lexsort((first_scored[scored], -scores[scored]))][:limit]
        return [(scores[row], int(self.live[row])) for row in best]


@dataclass(frozen=True)
class ResidentBm25:
    """The BM25 field's analyzer and parameters, and the collection's segments in search order."""

    analyzer: Analyzer
    k1: float
    b: float
    segments: tuple[Bm25Segment, ...]

    @classmethod
    def read(cls, folder: Path, positions: dict[str, int]) -> "ResidentBm25 | None":
        """
        The BM25 of the Milvus Lite collection in `folder` whose live rows are at `positions` (by
        key); None when it has no BM25 field, has rows not flushed, or its files hold other rows.
        """
        analyzer = _analyzer(folder / SCHEMA_FILE)
        if analyzer is None or any((folder / WAL_DIR).glob("*")):
            return None
        manifest = Manifest.load(str(folder))
        spec = manifest.index_specs.get(SPARSE_FIELD)
        scorer = create_sparse_index(BM25_METRIC, spec.build_params if spec else {})
        segments = _segments(folder, manifest, positions)
        return None if segments is None else cls(analyzer, scorer.k1, scorer.b, segments)

    def ranked(self, text: str, limit: int, allowed: np.ndarray) -> list[tuple[int, float]]:
        """
        The `limit` best (resident position, distance) of the rows `allowed` keeps (a boolean by
        resident position): what Milvus Lite's BM25 search of `text` returns, its distance the
        negated float32 score, best first.
        """
        query = compute_tf(self.analyzer.analyze(text))
        if not query or limit <= 0:
            return []
        hits = [hit for segment in self.segments for hit in segment.ranked(query, limit, allowed, self.k1, self.b)]
        hits.sort(key=lambda hit: -hit[0])  # stable: a tie keeps the segments' order, as Milvus Lite merges
        return [(position, -float(score)) for score, position in hits[:limit]]


def _analyzer(schema_file: Path) -> Analyzer | None:
    """The analyzer of the BM25 function that fills the `sparse` field, as Milvus Lite builds it."""
    if not schema_file.is_file():
        return None
    _, schema = load_schema(str(schema_file))
    fields = {field.name: field for field in schema.fields}
    for function in schema.functions or ():
        if function.function_type == FunctionType.BM25 and function.output_field_names[0] == SPARSE_FIELD:
            return create_analyzer(fields[function.input_field_names[0]].analyzer_params)
    return None


def _segments(folder: Path, manifest: Manifest, positions: dict[str, int]) -> tuple[Bm25Segment, ...] | None:
    """
    Every segment file in the manifest's order, each row marked live when it is the latest version
    of a resident key; None unless every resident key is live in exactly one.
    """
    tables = [
        pq.read_table(folder / PARTITIONS_DIR / partition / name, columns=[ID_FIELD, SEQ_COLUMN, SPARSE_FIELD])
        for partition, names in manifest.get_all_data_files().items()
        for name in names
    ]
    latest: dict[str, int] = {}
    for table in tables:
        for key, seq in zip(table.column(ID_FIELD).to_pylist(), table.column(SEQ_COLUMN).to_pylist(), strict=True):
            latest[key] = max(seq, latest.get(key, seq))
    segments, found = [], 0
    for table in tables:
        keys, seqs = table.column(ID_FIELD).to_pylist(), table.column(SEQ_COLUMN).to_pylist()
        live = np.asarray(
            [
                positions.get(key, NOT_LIVE) if seq == latest[key] else NOT_LIVE
                for key, seq in zip(keys, seqs, strict=True)
            ],
            dtype=np.int64,
        )
        found += int((live >= 0).sum())
        segments.append(Bm25Segment.of(table.column(SPARSE_FIELD).to_pylist(), live))
    return tuple(segments) if found == len(positions) else None
