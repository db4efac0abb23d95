"""
The index manifest: what a state dir's index was built from, written by every indexing run and
read by `knowledge index` (which knowledge base to re-index), `knowledge eval` (are the query
set's sources indexed) and sweeps (which knowledge base an index-time combination re-indexes).

It lives beside the L0 index (`<collection>.manifest.json` in the L0 index's folder, the state
dir by default), so a sweep combination indexed into its own folder has its own manifest.

    manifest = read_manifest(cfg)
    manifest.kb_path if manifest else "indexed before manifests"

See docs/tuning.md ("The state dir knows its knowledge base").
"""

import hashlib
import json
import logging
import os
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from components.common.embedding_models import model_revision, vector_space
from components.errors import BadInputError

logger = logging.getLogger(__name__)

MANIFEST_VERSION = 2
# Manifests of version 1 were written before checksums: only they may lack one.
FIRST_CHECKSUMMED_VERSION = 2
# Missing sources named in the refusal of an evaluation.
SHOWN_MISSING = 5
KEY_WIDTH = 20  # of `index --status`


class KnowledgeBaseMismatchError(BadInputError):
    """The knowledge base asked for is not the one the state dir's index holds."""


class SourcesNotIndexedError(BadInputError):
    """Relevant sources of a query set are not in the index: every metric would be wrong."""


@dataclass
class IndexManifest:
    """What one index was built from: the knowledge base, its content, the index-time config."""

    kb_path: str
    content_fingerprint: str
    documents: int
    chunks: int
    indexed_at: str
    index_config: dict[str, Any] = field(default_factory=dict)
    version: int | None = MANIFEST_VERSION
    checksum: str = ""  # of every other field: a hand edit (another kb_path) is caught before it is acted on

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "IndexManifest":
        known = {name: data[name] for name in cls.__dataclass_fields__ if name in data}
        # Every manifest was written with its version: one without is not taken for the current format.
        return cls(**{"version": None, **known})

    def fields_checksum(self) -> str:
        fields = {key: value for key, value in asdict(self).items() if key != "checksum"}
        return hashlib.sha256(json.dumps(fields, sort_keys=True).encode("utf-8")).hexdigest()

    @property
    def edit_reason(self) -> str | None:
        """Why it was changed since indexing wrote it; None when it was not (or, written before checksums, cannot tell)."""
        if self.checksum:
            return None if self.checksum == self.fields_checksum() else "its checksum does not match"
        if self.written_before_checksums:
            return None
        return "its checksum is missing"

    @property
    def edited(self) -> bool:
        return self.edit_reason is not None

    @property
    def written_before_checksums(self) -> bool:
        version = self.version
        return isinstance(version, int) and not isinstance(version, bool) and 0 < version < FIRST_CHECKSUMMED_VERSION


DECISION_MARK = ";decision="  # in the index fingerprint, last: the decision model follows it
# Bump when chunk text or embedded text changes shape, so every document is re-embedded once.
CHUNK_FORMAT_VERSION = 4


def index_fingerprint(cfg: DictConfig) -> str:
    """Everything besides file content that changes chunks or vectors."""
    chunking = cfg.chunking
    revision = model_revision(cfg.embedder.model)
    model = f"{cfg.embedder.model}@{revision}" if revision else cfg.embedder.model
    # A decision model has vectors of its own beside the index: turning it on or changing it re-embeds.
    decision = f"{DECISION_MARK}{cfg.embedder.decision_model}" if cfg.embedder.decision_model else ""
    return (
        f"model={vector_space(model, cfg.embedder.backend)};chunks={chunking.max_tokens}/{chunking.overlap_tokens}/{chunking.min_tokens};"
        f"format={CHUNK_FORMAT_VERSION}{decision}"
    )


def manifest_path(cfg: DictConfig) -> Path:
    """Where the manifest of the configured index lives: beside its L0 index."""
    return Path(cfg.l0.index_path).parent / f"{cfg.milvus.collection}.manifest.json"


def absolute_kb(kb_path: str | Path) -> str:
    return str(Path(kb_path).expanduser().resolve())


def index_time_config(cfg: DictConfig) -> dict[str, Any]:
    """The keys that shape chunks, vectors and the collection (what a sweep over them re-indexes for)."""
    from omegaconf import OmegaConf

    milvus = cfg.milvus
    return {
        "chunking": OmegaConf.to_container(cfg.chunking),
        "embedder.model": cfg.embedder.model,
        "milvus.uri": milvus.uri,
        "milvus.collection": milvus.collection,
        "milvus.index_type": milvus.index_type,
        "milvus.index_params": OmegaConf.to_container(milvus.index_params),
        "milvus.full_text": milvus.full_text,
        "l0.index_path": cfg.l0.index_path,
        "index_fingerprint": index_fingerprint(cfg),
    }


def content_fingerprint(documents: list[Any]) -> str:
    """One hash of the indexed documents: their sources and content hashes, in source order."""
    lines = sorted(f"{d.meta['source']}\x1f{d.meta['doc_hash']}" for d in documents)
    return hashlib.sha256("\n".join(lines).encode("utf-8")).hexdigest()


def write_manifest(cfg: DictConfig, documents: list[Any], chunks: int) -> IndexManifest:
    """Record what was just indexed (written atomically: a reader never sees half a manifest)."""
    manifest = IndexManifest(
        kb_path=absolute_kb(cfg.kb.path),
        content_fingerprint=content_fingerprint(documents),
        documents=len(documents),
        chunks=chunks,
        indexed_at=datetime.now(UTC).isoformat(timespec="seconds"),
        index_config=index_time_config(cfg),
    )
    manifest.checksum = manifest.fields_checksum()
    path = manifest_path(cfg)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(asdict(manifest), indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return manifest


def read_manifest(cfg: DictConfig) -> IndexManifest | None:
    """The manifest of the configured index; None when there is none (indexed before manifests, or never)."""
    path = manifest_path(cfg)
    if not path.is_file():
        return None
    try:
        return IndexManifest.from_dict(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError) as exc:
        # An unreadable manifest must not block the index it describes: treat it as absent.
        logger.warning("Ignoring the unreadable index manifest %s: %s", path, exc)
        return None


def manifest_decision_model(cfg: DictConfig) -> str | None:
    """The decision model the configured index was built for with the configured model, None if none."""
    manifest = read_manifest(cfg)
    if manifest is None or manifest.index_config.get("embedder.model") != cfg.embedder.model:
        return None
    _, found, decision = str(manifest.index_config.get("index_fingerprint", "")).partition(DECISION_MARK)
    return decision if found and decision else None


def indexed_kb(cfg: DictConfig) -> str:
    """The knowledge base the configured index holds: the manifest's, else (no manifest yet) `kb.path`."""
    manifest = read_manifest(cfg)
    return manifest.kb_path if manifest else cfg.kb.path


def kb_to_index(cfg: DictConfig, asked: str | None, rebuild: bool) -> str:
    """
    The knowledge base an indexing run should read. Without `asked`, the manifest's (or, with
    no manifest yet, the configured `kb.path`, as before manifests). A different `asked` one
    replaces the index's documents, so it needs `rebuild`.
    """
    manifest = read_manifest(cfg)
    kb = asked if asked is not None else indexed_kb(cfg)
    if rebuild:
        return kb
    if manifest is None:
        _check_unmanifested_index(cfg, kb)
    elif manifest.edited:
        raise KnowledgeBaseMismatchError(
            f"the index manifest {manifest_path(cfg)} was edited after indexing ({manifest.edit_reason}): "
            "give --rebuild --kb DIR to index DIR again, or another paths.state_dir"
        )
    elif absolute_kb(kb) != manifest.kb_path:
        raise KnowledgeBaseMismatchError(
            f"{manifest_path(cfg).parent} holds an index of {manifest.kb_path}, not {absolute_kb(kb)}: "
            "give --rebuild to replace it, or another paths.state_dir"
        )
    return kb


def _check_unmanifested_index(cfg: DictConfig, kb: str) -> None:
    """
    A state dir indexed before manifests: refuse a knowledge base that shares no document with
    the index (indexing it would remove every indexed document); any overlap indexes as before.
    """
    from components.indexing.markdown_reader import MarkdownKnowledgeReader

    indexed = indexed_sources(cfg)
    if not indexed:
        return
    sources = {document.meta["source"] for document in MarkdownKnowledgeReader(kb_path=kb).run()["documents"]}
    if not sources & indexed:
        raise KnowledgeBaseMismatchError(
            f"the index at {cfg.l0.index_path} (no manifest: indexed before manifests) holds {len(indexed)} "
            f"documents, none of them in {absolute_kb(kb)}: give --kb with its knowledge base, or --rebuild to "
            "replace it"
        )


def indexed_sources(cfg: DictConfig) -> set[str] | None:
    """The sources in the configured index (from its L0 index); None when nothing is indexed yet."""
    from components.stores.l0_index_file import L0IndexMissingError, load_l0_index

    try:
        return {entry.source for entry in load_l0_index(cfg.l0.index_path).entries}
    except L0IndexMissingError:
        return None


def check_sources_indexed(cfg: DictConfig, relevant: list[set[str]]) -> None:
    """
    Refuse a query set whose relevant sources are not in the index: scored against another
    knowledge base, every query would count as a miss and a "best" would still be printed.
    """
    indexed = indexed_sources(cfg)
    if indexed is None:
        return  # the lookup pipeline says "run `knowledge index` first" in its own words
    wanted = sorted(set().union(*relevant)) if relevant else []
    missing = [source for source in wanted if source not in indexed]
    if not missing:
        return
    manifest = read_manifest(cfg)
    holds = f"the index of {manifest.kb_path}" if manifest else f"the index at {cfg.l0.index_path}"
    shown = ", ".join(missing[:SHOWN_MISSING]) + (", ..." if len(missing) > SHOWN_MISSING else "")
    raise SourcesNotIndexedError(
        f"{len(missing)} of {len(wanted)} relevant sources of the query set are not in {holds} ({shown}): "
        "index their knowledge base (knowledge index --kb DIR --rebuild, or --kb DIR here)"
    )


NO_MANIFEST = "nothing indexed here yet, or indexed before manifests (the next `knowledge index` writes one)"


def decision_vectors_status(cfg: DictConfig, chunks: int) -> dict[str, Any] | None:
    """
    The decision model's vectors beside the index, when a decision model is in force: their file,
    how many chunks they cover, or why a lookup would refuse them. None without a decision model.
    """
    from components.common.decision_scale import DecisionVectors, DecisionVectorsError

    model = cfg.embedder.decision_model
    if model is None:
        return None
    path = str(cfg.embedder.decision_vectors)
    try:
        vectors = len(DecisionVectors.load(path, model).ids)
    except DecisionVectorsError as exc:
        return {"path": path, "model": model, "in_step": False, "reason": str(exc)}
    if vectors != chunks:
        reason = f"{vectors} vectors for {chunks} indexed chunks: run `knowledge index --rebuild`"
        return {"path": path, "model": model, "vectors": vectors, "in_step": False, "reason": reason}
    return {"path": path, "model": model, "vectors": vectors, "in_step": True}


def manifest_status(cfg: DictConfig) -> dict[str, Any]:
    """`knowledge index --status --json`: the manifest's fields, or why there is none."""
    path = manifest_path(cfg)
    manifest = read_manifest(cfg)
    if manifest is None:
        return {"manifest": str(path), "indexed": False, "reason": NO_MANIFEST}
    decision = decision_vectors_status(cfg, manifest.chunks)
    shown = {"manifest": str(path), "indexed": True, "edited": manifest.edited, **asdict(manifest)}
    return shown if decision is None else {**shown, "decision_vectors": decision}


def format_manifest(cfg: DictConfig) -> str:
    """`knowledge index --status`: the manifest, or why there is none."""
    path = manifest_path(cfg)
    manifest = read_manifest(cfg)
    if manifest is None:
        return f"no index manifest at {path}: {NO_MANIFEST}"
    lines = [
        f"index manifest {path}",
        f"  {'knowledge base':<{KEY_WIDTH}} {manifest.kb_path}",
        f"  {'content':<{KEY_WIDTH}} {manifest.content_fingerprint[:16]} ({manifest.documents} documents, "
        f"{manifest.chunks} chunks)",
        f"  {'indexed at':<{KEY_WIDTH}} {manifest.indexed_at}",
    ]
    for key, value in manifest.index_config.items():
        lines.append(f"  {key:<{KEY_WIDTH}} {json.dumps(value) if isinstance(value, dict) else value}")
    decision = decision_vectors_status(cfg, manifest.chunks)
    if decision is not None:
        lines.append(f"  {'decision vectors':<{KEY_WIDTH}} {_decision_line(decision)}")
    if manifest.edited:
        lines.append(f"  edited after indexing ({manifest.edit_reason}): `knowledge index --rebuild --kb DIR`")
    return "\n".join(lines)


def _decision_line(decision: dict[str, Any]) -> str:
    if decision["in_step"]:
        return f"{decision['path']} ({decision['vectors']} chunks, {decision['model']} decides)"
    return f"NOT IN STEP: {decision['reason']}"
