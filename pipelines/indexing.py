"""
The indexing pipeline: markdown -> frontmatter -> heading-aware chunks -> embeddings -> Milvus,
plus the L0 index, as one Haystack pipeline wired in pipelines/yaml/indexing.yml and resolved
against the Hydra config.

    reader -> planner -> chunker -> embedder -> decision_writer -> writer
    reader, embedder -> l0_writer   (a document's summary vector is its first chunk's vector)
    writer -> l0_writer             (the L0 index is written after the vector store)
    embedder, planner, writer -> decision_pruner

With embedder.decision_model, the decision model's vectors of the new chunks are added before the
collection changes and the removed chunks' rows dropped after it, so a serving process always
finds a vector for every chunk the collection holds.
"""

import time

from haystack import Pipeline
from omegaconf import DictConfig

from components.contracts import IndexReport
from components.indexing.markdown_reader import check_knowledge_base
from pipelines.config.errors import unwrap_pipeline_error
from pipelines.config.manifest import write_manifest
from pipelines.serialized import derived_values, load_pipeline


def build_indexing_pipeline(cfg: DictConfig, progress_bar: bool = False) -> Pipeline:
    """The indexing pipeline of a config: the YAML file `cfg.pipeline.indexing` resolved against `cfg`."""
    return load_pipeline(cfg, "indexing", derived=derived_values(cfg, progress_bar=progress_bar))


def run_indexing(cfg: DictConfig, rebuild: bool = False, progress_bar: bool = False, say=None) -> IndexReport:
    """
    Index the knowledge base of `cfg` incrementally (or from scratch with `rebuild`); `say` (one line a
    call) hears what it does, once the knowledge base and the Milvus connection are known to be usable.
    """
    started = time.perf_counter()
    check_knowledge_base(cfg.kb.path)
    pipeline = build_indexing_pipeline(cfg, progress_bar=progress_bar)
    if say is not None:
        client = _open_store(pipeline.get_component("planner").store, rebuild)
        _warm_up(pipeline)  # a model that cannot load (an unwritable ONNX cache) stays the command's one line
        how = "from scratch" if rebuild else "incrementally: unchanged documents are skipped"
        say(f"indexing {cfg.kb.path} into collection {cfg.milvus.collection} {how} ...")
    try:
        outputs = pipeline.run(
            {"planner": {"rebuild": rebuild}},
            include_outputs_from={"reader", "planner", "writer"},
        )
    except Exception as exc:
        raise unwrap_pipeline_error(exc) from exc
    plan = outputs["planner"]["plan"]
    writer = outputs["writer"]
    write_manifest(cfg, outputs["reader"]["documents"], writer["count"])
    report = IndexReport(
        added=plan.added,
        updated=plan.updated,
        unchanged=plan.unchanged,
        removed=plan.removed,
        skipped=outputs["reader"]["skipped"],
        chunks_written=writer["written"],
        chunks_deleted=writer["deleted"],
        collection_count=writer["count"],
        seconds=round(time.perf_counter() - started, 2),
        notes=writer.get("notes", []),
    )
    if say is not None:
        del client  # held until the pipeline's own clients are done with the database
        say(_done_line(report, len(outputs["reader"]["documents"])))
    return report


def _warm_up(pipeline: Pipeline) -> None:
    try:
        pipeline.warm_up()
    except Exception as exc:
        raise unwrap_pipeline_error(exc) from exc


def _open_store(store, rebuild: bool):
    """
    Open the store as the planner and the writer will, so that a held, unreachable or damaged Milvus
    is the command's one line, before a progress line could precede it. A Milvus Lite db that is a
    plain file or a damaged collection is left to a rebuild, which moves or removes it.
    """
    from components.stores.lite_db import is_plain_file
    from components.stores.milvus_collection import ID_FIELD, is_local_uri

    if rebuild and is_local_uri(store.uri) and is_plain_file(store.uri):
        return None
    client = store.connect()
    if not rebuild:
        rows = store.rows([ID_FIELD], client)  # the planner reads them all; the first batch finds what it would
        next(rows, None)
        rows.close()
    return client


def _done_line(report: IndexReport, read: int) -> str:
    return (
        f"indexed in {report.seconds:.1f} s: {read} documents read ({len(report.skipped)} skipped), "
        f"{len(report.added) + len(report.updated)} embedded, {report.chunks_written} chunks written, "
        f"{report.chunks_deleted} deleted"
    )
