"""The benchmark corpus: the runbook corpus repeated into a throw-away knowledge base, each copy varied
(see docs/benchmarks.md)."""

import math
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig

from components.indexing.markdown_reader import KnowledgeBaseError

DEFAULT_CORPUS = Path(__file__).resolve().parents[3] / "shared" / "corpus" / "prometheus-runbooks"


_ENVIRONMENTS = ("prod", "staging", "edge")


_REGIONS = ("eu-west-1", "us-east-1", "ap-south-1", "eu-central-1", "us-west-2", "sa-east-1", "ap-northeast-1")


_HEADING = re.compile(r"^ {0,3}#{1,6}(\s|$)")


_FENCE = re.compile(r"^ {0,3}(```|~~~)")


class CorpusNotFoundError(KnowledgeBaseError):
    """The corpus to repeat is missing or holds no markdown: bad input, CLI exit status 2."""


@dataclass(frozen=True)
class CorpusFile:
    category: str
    relative: str  # path inside the category folder
    text: str


def resolve_corpus(corpus: str | Path | None) -> Path:
    """The corpus folder to repeat: the given one, else ../shared/corpus/prometheus-runbooks."""
    path = Path(corpus) if corpus else DEFAULT_CORPUS
    if not path.is_dir():
        raise CorpusNotFoundError(f"benchmark corpus {path} does not exist (give one with --corpus DIR)")
    return path


def read_corpus(corpus: Path) -> list[CorpusFile]:
    """
    The markdown files of the corpus, by category folder (top-level files go to `general`);
    hidden, unreadable and non-UTF-8 files are left out, as the indexing reader would skip them.
    """
    files = []
    for path in sorted(corpus.rglob("*")):
        if not path.is_file() or path.suffix.lower() not in (".md", ".markdown"):
            continue
        parts = path.relative_to(corpus).parts
        if any(part.startswith(".") for part in parts):
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        category, relative = (parts[0], Path(*parts[1:]).as_posix()) if len(parts) > 1 else ("general", parts[0])
        files.append(CorpusFile(category, relative, text))
    if not files:
        raise CorpusNotFoundError(f"benchmark corpus {corpus} holds no markdown (.md) file")
    return files


def copy_category(category: str, copy: int) -> str:
    """The category (and folder) of copy `copy` of a corpus category: `etcd` -> `etcd-3`."""
    return f"{category}-{copy}"


def cluster_line(copy: int) -> str:
    """The line that makes copy `copy` distinct: one cluster and region per copy."""
    region = _REGIONS[copy % len(_REGIONS)]
    return f"Scope: cluster `{_ENVIRONMENTS[copy % len(_ENVIRONMENTS)]}-{region}-{copy:02d}` in region {region}."


def _heading_rows(rows: Sequence[str]) -> list[int]:
    """Indices of ATX heading lines outside code fences."""
    headings = []
    in_fence = False
    for index, row in enumerate(rows):
        if _FENCE.match(row):
            in_fence = not in_fence
        elif not in_fence and _HEADING.match(row):
            headings.append(index)
    return headings


def vary_markdown(text: str, copy: int) -> str:
    """
    The text of copy `copy`: the cluster line inserted under every heading whose section has
    text (a heading-only section stays empty, so the copy makes no extra chunk of its own).
    """
    rows = text.splitlines()
    headings = _heading_rows(rows)
    ends = [*headings[1:], len(rows)]
    insert_after = {h for h, end in zip(headings, ends, strict=True) if any(r.strip() for r in rows[h + 1 : end])}
    out: list[str] = []
    for index, row in enumerate(rows):
        out.append(row)
        if index in insert_after:
            out.extend(["", cluster_line(copy), ""])
    if not insert_after:
        out.extend(["", cluster_line(copy)])
    return "\n".join(out) + "\n"


def write_copy(files: Iterable[CorpusFile], kb_root: Path, copy: int) -> int:
    """Write copy `copy` of the corpus files under `kb_root`; returns the number of files."""
    count = 0
    for item in files:
        target = kb_root / copy_category(item.category, copy) / item.relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(vary_markdown(item.text, copy), encoding="utf-8")
        count += 1
    return count


def bench_overrides(overrides: Sequence[str], state_dir: Path, kb_root: Path) -> list[str]:
    """
    The user's overrides, then the benchmark's own (the last value of a key wins): state under
    `state_dir`, so every path derived from `paths.state_dir` follows by interpolation; the benchmark
    knowledge base; MLflow off; and a collection of its own, so a rebuild on a Milvus server (or in a
    Lite db the user names) never drops a real collection.
    """
    return [
        *overrides,
        _path_override("paths.state_dir", state_dir),
        _path_override("kb.path", kb_root),
        "mlflow=off",
        "mlflow.tracking_uri=null",
        f"milvus.collection=bench_{os.getpid()}",
    ]


def load_bench_config(overrides: Sequence[str], state_dir: Path, kb_root: Path) -> DictConfig:
    """The benchmark's config, composed by the normal loader from `bench_overrides`."""
    from pipelines.config.settings import load_config

    return load_config(bench_overrides(overrides, state_dir, kb_root))


def _path_override(key: str, path: Path) -> str:
    """`key='path'`, quoted so that a path with spaces or commas stays one value."""
    quoted = str(path).replace("'", "\\'")
    return f"{key}='{quoted}'"


def chunk_knowledge_base(cfg: DictConfig) -> list:
    """The chunks the indexing pipeline makes of `cfg.kb.path`: its own reader and chunker, same settings."""
    from pipelines.indexing import build_indexing_pipeline

    pipeline = build_indexing_pipeline(cfg)
    documents = pipeline.get_component("reader").run()["documents"]
    return pipeline.get_component("chunker").run(documents=documents)["documents"]


def build_repeated_kb(cfg: DictConfig, files: Sequence[CorpusFile], min_chunks: int) -> tuple[list, int]:
    """
    Write copies of the corpus under `cfg.kb.path` until it chunks into at least `min_chunks`.

    :returns: The chunks (as the indexing pipeline makes them) and the number of copies.
    """
    kb_root = Path(cfg.kb.path)
    copies = 0
    chunks: list = []
    while len(chunks) < min_chunks:
        if copies == 0:
            add = 1
        else:
            per_copy = max(1.0, len(chunks) / copies)
            add = max(1, math.ceil((min_chunks - len(chunks)) / per_copy))
        for copy in range(copies, copies + add):
            write_copy(files, kb_root, copy)
        copies += add
        chunks = chunk_knowledge_base(cfg)
    return chunks, copies
