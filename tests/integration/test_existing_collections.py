"""
Reusing an existing collection with only `id`, `content`, `vector` and `metadata` fields (no
`category` column), IVF_FLAT, with each metric L2, IP and COSINE, built with pymilvus directly:
indexing writes into it without the column, filtered lookups work in every mode, scores map onto
the same similarity, and opening it never changes it.
"""

import shutil

import pytest
from pymilvus import DataType, MilvusClient

from components.common.scoring import haystack_score_label, sdk_score_label
from components.contracts import L0Hints, QueryTransform
from components.lookup.fallback_retriever import FallbackRetriever
from components.lookup.query_embedder import KnowledgeQueryEmbedder
from components.stores.knowledge_store import KnowledgeStore
from components.stores.milvus_collection import describe_layout, row_count
from components.stores.milvus_errors import CollectionMismatchError
from components.stores.vector_search import HaystackVectorSearch, SdkVectorSearch, UnsupportedFilterError
from pipelines.config.settings import load_config
from pipelines.indexing import run_indexing
from tests.conftest import SAMPLE_KB, state_overrides
from tests.helpers import MODEL

METRICS = ("L2", "IP", "COSINE")
MODES = ("sdk", "haystack", "auto")
SOURCES = ["cpu/runaway-process.md", "database/postgresql-replication-lag.md", "disk/disk-full.md"]
QUERY = "the disk is full and writes fail"


def create_four_field_collection(uri: str, name: str, metric: str, dim: int = 384) -> None:
    client = MilvusClient(uri=uri)
    schema = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)
    schema.add_field("id", DataType.VARCHAR, is_primary=True, max_length=64)
    schema.add_field("content", DataType.VARCHAR, max_length=65535)
    schema.add_field("vector", DataType.FLOAT_VECTOR, dim=dim)
    schema.add_field("metadata", DataType.JSON)
    params = client.prepare_index_params()
    params.add_index("vector", index_type="IVF_FLAT", metric_type=metric, params={"nlist": 4})
    client.create_collection(name, schema=schema, index_params=params)


def snapshot(client: MilvusClient, name: str) -> tuple[int, list[str], list[str]]:
    """Row count, sorted ids and field names of a collection."""
    ids = sorted(row["id"] for row in client.query(name, filter='id != ""', output_fields=["id"], limit=16384))
    fields = [field["name"] for field in client.describe_collection(name)["fields"]]
    return row_count(client, name), ids, fields


@pytest.fixture(scope="module")
def existing(tmp_path_factory):
    """One Milvus Lite db with a 4-field collection per metric, each indexed by `knowledge index`."""
    root = tmp_path_factory.mktemp("existing")
    kb = root / "kb"
    for source in SOURCES:
        (kb / source).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(SAMPLE_KB / source, kb / source)
    uri = str(root / "state" / "milvus.db")
    (root / "state").mkdir()
    configs, reports = {}, {}
    for metric in METRICS:
        name = f"reused_{metric.lower()}"
        create_four_field_collection(uri, name, metric)
        cfg = load_config(
            state_overrides(root / "state", f"kb.path={kb}", f"milvus.uri={uri}", f"milvus.collection={name}")
        )
        reports[metric] = run_indexing(cfg)
        configs[metric] = cfg
    return configs, reports


@pytest.fixture(scope="module")
def query_vector():
    embedder = KnowledgeQueryEmbedder(model=MODEL)
    embedder.warm_up()
    return embedder.run(query=QUERY)["query_embedding"].tolist()


@pytest.mark.parametrize("metric", METRICS)
def test_index_writes_into_a_collection_without_category_column(existing, metric):
    configs, reports = existing
    report = reports[metric]
    assert sorted(report.added) == SOURCES and report.skipped == []
    assert report.chunks_written == report.collection_count > len(SOURCES)
    client = MilvusClient(uri=configs[metric].milvus.uri)
    layout = describe_layout(client, configs[metric].milvus.collection)
    assert (layout.metric, layout.index_type, layout.has_category, layout.dim) == (metric, "IVF_FLAT", False, 384)
    # A second run finds every document complete and unchanged.
    again = run_indexing(configs[metric])
    assert sorted(again.unchanged) == SOURCES and again.chunks_written == 0


@pytest.mark.parametrize("metric", METRICS)
def test_sdk_path_filters_on_the_json_key(existing, metric, query_vector):
    cfg = existing[0][metric]
    search = SdkVectorSearch(KnowledgeStore(uri=cfg.milvus.uri, collection=cfg.milvus.collection))
    hits = search.search(query_vector, 10, "disk")
    assert hits and {hit.category for hit in hits} == {"disk"}
    assert search.describe_filter("disk") == 'metadata["category"] == "disk"'
    assert {hit.raw_score_label for hit in hits} == {sdk_score_label(metric)}
    assert metric.lower() in hits[0].raw_score_label


@pytest.mark.parametrize("metric", METRICS)
def test_haystack_path_reports_the_json_filter_unsupported_but_searches_unfiltered(existing, metric, query_vector):
    cfg = existing[0][metric]
    search = HaystackVectorSearch(KnowledgeStore(uri=cfg.milvus.uri, collection=cfg.milvus.collection))
    with pytest.raises(UnsupportedFilterError, match="no category column"):
        search.search(query_vector, 10, "disk")
    hits = search.search(query_vector, 10, None)
    assert hits and {hit.raw_score_label for hit in hits} == {haystack_score_label(metric)}


def test_same_chunk_gets_the_same_similarity_for_every_metric_and_path(existing, query_vector):
    configs, _ = existing
    similarities = {}
    for metric in METRICS:
        cfg = configs[metric]
        for search in (
            SdkVectorSearch(
                KnowledgeStore(uri=cfg.milvus.uri, collection=cfg.milvus.collection, search_params={"nprobe": 4})
            ),
            HaystackVectorSearch(
                KnowledgeStore(uri=cfg.milvus.uri, collection=cfg.milvus.collection, search_params={"nprobe": 4})
            ),
        ):
            hits = search.search(query_vector, 3, None)
            similarities[(metric, search.path)] = {hit.evidence_key: hit.similarity for hit in hits}
    reference = similarities[("L2", "sdk")]
    assert reference and max(reference.values()) > 0.3
    for key, values in similarities.items():
        assert values.keys() == reference.keys(), key
        for evidence_key, similarity in values.items():
            assert similarity == pytest.approx(reference[evidence_key], abs=1e-3), key


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("metric", METRICS)
def test_filtered_attempt_works_in_every_mode_and_leaves_the_collection_unchanged(existing, metric, mode, query_vector):
    cfg = existing[0][metric]
    client = MilvusClient(uri=cfg.milvus.uri)
    before = snapshot(client, cfg.milvus.collection)
    retriever = FallbackRetriever(
        store=KnowledgeStore(uri=cfg.milvus.uri, collection=cfg.milvus.collection, search_params={"nprobe": 4}),
        vector_store_mode=mode,
    )
    transform = QueryTransform(raw=QUERY, normalized=QUERY, variants=[QUERY])
    out = retriever.run(query_transform=transform, hints=L0Hints(domains=["disk"]), query_embedding=query_vector)
    first = out["retrieval_trace"].attempts[0]
    assert first.category_filter == "disk" and first.candidate_count > 0
    assert first.path == "sdk"  # the JSON-key filter is served by the SDK path in every mode
    assert first.filter_expression == 'metadata["category"] == "disk"'
    if mode != "sdk":
        assert "cannot filter" in first.error or "UnsupportedFilterError" in first.error
    assert snapshot(client, cfg.milvus.collection) == before


def test_an_embedder_of_another_dimension_is_refused_naming_both(existing):
    cfg = existing[0]["L2"]
    for search in (
        SdkVectorSearch(KnowledgeStore(uri=cfg.milvus.uri, collection=cfg.milvus.collection)),
        HaystackVectorSearch(KnowledgeStore(uri=cfg.milvus.uri, collection=cfg.milvus.collection)),
    ):
        with pytest.raises(CollectionMismatchError, match="384-d.*8-d"):
            search.search([0.5] * 8, 3, None)


def test_index_with_another_dimension_is_refused_before_writing(tmp_path):
    from haystack import Document

    from components.contracts import IndexPlan
    from components.indexing.milvus_writer import MilvusChunkWriter

    uri = str(tmp_path / "milvus.db")
    create_four_field_collection(uri, "small", "COSINE", dim=8)
    chunk = Document(content="text", embedding=[0.1] * 384, meta={"evidence_key": "a#0", "source": "a.md"})
    with pytest.raises(CollectionMismatchError, match="8-d.*384-d"):
        MilvusChunkWriter(store=KnowledgeStore(uri=uri, collection="small")).run(documents=[chunk], plan=IndexPlan())
    assert row_count(MilvusClient(uri=uri), "small") == 0


def test_a_chunk_longer_than_an_existing_content_field_is_refused_before_writing(tmp_path):
    from haystack import Document

    from components.contracts import IndexPlan
    from components.indexing.milvus_writer import MilvusChunkWriter

    uri = str(tmp_path / "milvus.db")
    client = MilvusClient(uri=uri)
    schema = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)
    schema.add_field("id", DataType.VARCHAR, is_primary=True, max_length=64)
    schema.add_field("content", DataType.VARCHAR, max_length=100)
    schema.add_field("vector", DataType.FLOAT_VECTOR, dim=4)
    schema.add_field("metadata", DataType.JSON)
    params = client.prepare_index_params()
    params.add_index("vector", index_type="FLAT", metric_type="L2")
    client.create_collection("short", schema=schema, index_params=params)
    chunks = [
        Document(content="fits", embedding=[0.5] * 4, meta={"evidence_key": "a#0", "source": "a.md"}),
        Document(content="x" * 101, embedding=[0.5] * 4, meta={"evidence_key": "b#0", "source": "b.md"}),
    ]
    with pytest.raises(CollectionMismatchError, match="a chunk of b.md has 101 characters.*at most 100"):
        MilvusChunkWriter(store=KnowledgeStore(uri=uri, collection="short")).run(documents=chunks, plan=IndexPlan())
    assert row_count(client, "short") == 0


@pytest.mark.parametrize("mode", MODES)
def test_lookup_over_an_existing_cosine_collection_in_every_mode(existing, mode, tmp_path):
    from pipelines.lookup import LookupService

    cfg = existing[0]["COSINE"]
    overrides = [
        f"milvus.uri={cfg.milvus.uri}",
        f"milvus.collection={cfg.milvus.collection}",
        f"l0.index_path={cfg.l0.index_path}",
        f"retrieval.vector_store_mode={mode}",
        f"trace.db_url=sqlite:///{tmp_path}/traces.db",
    ]
    result = LookupService(load_config(state_overrides(tmp_path / "state", *overrides))).lookup(
        "disk full, no space left on device"
    )
    payload = result.to_dict()
    assert payload["evidenceStatus"] != "error", payload.get("error")
    assert result.found and payload["evidenceBlocks"][0]["source"] == "disk/disk-full.md"
    assert "cosine" in payload["evidenceBlocks"][0]["rawScoreLabel"]
