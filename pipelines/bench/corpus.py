"""The benchmark corpus: the runbook corpus repeated into a throw-away knowledge base, each copy varied
(see docs/benchmarks.md)."""

import math
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

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


def chunk_knowledge_base(cfg: DictConfig, kb_root: Path) -> list:
    """The chunks the indexing pipeline makes of `kb_root`: its own reader and chunker, same settings."""
    from pipelines.indexing import build_indexing_pipeline

    pipeline = build_indexing_pipeline(_with_kb(cfg, kb_root))
    documents = pipeline.get_component("reader").run()["documents"]
    return pipeline.get_component("chunker").run(documents=documents)["documents"]


def build_repeated_kb(cfg: DictConfig, files: Sequence[CorpusFile], kb_root: Path, min_chunks: int) -> tuple[list, int]:
    """
    Write copies of the corpus under `kb_root` until it chunks into at least `min_chunks`.

    :returns: The chunks (as the indexing pipeline makes them) and the number of copies.
    """
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
        chunks = chunk_knowledge_base(cfg, kb_root)
    return chunks, copies


def bench_config(cfg: DictConfig, state_dir: Path, kb_root: Path) -> DictConfig:
    """
    `cfg` with every file it writes under `state_dir` and MLflow off. The config is already
    resolved, so each derived path is set, not only `paths.state_dir`. A Milvus server keeps its
    URI but gets a collection of its own, so the rebuild never drops a real collection.
    """
    from components.stores.milvus_collection import is_local_uri

    # Any key derived from paths.state_dir (resolved already) moves along with it.
    old_state = str(cfg.paths.state_dir).rstrip("/") + "/"
    bench = OmegaConf.create(_replace_in_strings(OmegaConf.to_container(cfg, resolve=True), old_state, f"{state_dir}/"))
    bench.paths.state_dir = str(state_dir)
    bench.kb.path = str(kb_root)
    if is_local_uri(cfg.milvus.uri):
        bench.milvus.uri = str(state_dir / "milvus.db")
        bench.milvus.collection = "bench"
    else:
        bench.milvus.collection = f"bench_{os.getpid()}"
    bench.l0.index_path = str(state_dir / f"{bench.milvus.collection}.l0.json")
    bench.trace.db_url = f"sqlite:///{state_dir / 'traces.db'}"
    bench.trace.spool_path = str(state_dir / "trace-spool.jsonl")
    bench.mlflow.tracking_uri = None
    return bench


def _replace_in_strings(value: Any, old: str, new: str) -> Any:
    if isinstance(value, str):
        return value.replace(old, new)
    if isinstance(value, dict):
        return {key: _replace_in_strings(item, old, new) for key, item in value.items()}
    if isinstance(value, list):
        return [_replace_in_strings(item, old, new) for item in value]
    return value


def _with_kb(cfg: DictConfig, kb_root: Path) -> DictConfig:
    copy = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True))
    copy.kb.path = str(kb_root)
    return copy
