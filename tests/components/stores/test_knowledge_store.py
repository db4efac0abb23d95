"""KnowledgeStore: one frozen, serializable value for the Milvus collection, over a real Milvus Lite db."""

import dataclasses

import pytest
import yaml
from haystack import Pipeline
from haystack.utils import Secret

from components.contracts import IndexPlan
from components.indexing.milvus_writer import MilvusChunkWriter
from components.lookup.fallback_retriever import FallbackRetriever
from components.stores.knowledge_store import KnowledgeStore
from components.stores.milvus_auth import MilvusAuth, env_secret
from components.stores.vector_search import HaystackVectorSearch, SdkVectorSearch
from tests.components.chunks import chunk
from tests.components.refusals import assert_refused

CHUNKS = [chunk("disk/full.md", 0, [1, 0, 0, 0], "disk"), chunk("db/lag.md", 0, [0, 1, 0, 0], "db")]
SERVER_AUTH = MilvusAuth(token=env_secret("token"), secure=True, server_pem_path="/certs/milvus.pem")


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> KnowledgeStore:
    store = KnowledgeStore(uri=str(tmp_path_factory.mktemp("store") / "milvus.db"), collection="kb")
    MilvusChunkWriter(store=store).run(documents=CHUNKS, plan=IndexPlan())
    return store


def test_to_dict_from_dict_round_trips_with_its_credentials_by_name():
    store = KnowledgeStore(
        uri="https://milvus.example:19530",
        collection="kb",
        auth=SERVER_AUTH,
        timeout_ms=2500,
        index_type="IVF_FLAT",
        index_params={"nlist": 64},
        search_params={"nprobe": 8},
        full_text=True,
    )
    data = store.to_dict()
    assert data["type"] == "components.stores.knowledge_store.KnowledgeStore"
    assert data["init_parameters"]["auth"]["type"] == "components.stores.milvus_auth.MilvusAuth"
    assert data["init_parameters"]["auth"]["init_parameters"]["token"]["env_vars"] == ["MILVUS_TOKEN"]
    assert KnowledgeStore.from_dict(data) == store
    assert yaml.safe_load(yaml.safe_dump(data)) == data  # plain values only


def test_a_token_in_the_store_is_never_serialized_nor_shown():
    store = KnowledgeStore(uri="http://127.0.0.1:19530", auth=MilvusAuth(password=Secret.from_token("pw-4f1a")))
    assert "pw-4f1a" not in repr(store) and "password=***" in repr(store)
    assert store.credentials() == {"password": "pw-4f1a"}
    with pytest.raises(ValueError):
        store.to_dict()


def test_it_is_frozen_and_keeps_its_own_parameter_dicts():
    params = {"nprobe": 4}
    store = KnowledgeStore(uri="/data/kb.db", search_params=params)
    params["nprobe"] = 99
    assert store.search_params == {"nprobe": 4}
    with pytest.raises(dataclasses.FrozenInstanceError):
        store.collection = "other"  # type: ignore[misc]


def test_a_pipeline_file_loads_it_as_a_nested_init_parameter(store):
    retriever = FallbackRetriever(store=dataclasses.replace(store, auth=SERVER_AUTH), top_k=3)
    pipeline = Pipeline()
    pipeline.add_component("retriever", retriever)
    loaded = Pipeline.loads(pipeline.dumps(), allowed_modules=["components"]).get_component("retriever")
    assert isinstance(loaded.store, KnowledgeStore) and isinstance(loaded.store.auth, MilvusAuth)
    assert loaded.store == retriever.store and loaded.top_k == 3


def test_lite_connection_arguments_leave_the_credentials_out():
    lite = KnowledgeStore(uri="/data/kb.db", auth=SERVER_AUTH, timeout_ms=1500)
    server = dataclasses.replace(lite, uri="http://127.0.0.1:19530")
    assert lite.is_local and not server.is_local and lite.timeout_s == 1.5
    assert "secure" not in lite.connection_args() and "grpc_options" in lite.connection_args()
    assert server.connection_args()["secure"] is True and server.connection_args()["dedicated"] is True


def test_rows_and_row_count_read_the_collection(store):
    assert store.row_count() == 2
    assert sorted(row["id"] for row in store.rows(["id"])) == ["db/lag.md#0", "disk/full.md#0"]
    absent = dataclasses.replace(store, collection="absent")
    assert absent.row_count() == 0 and list(absent.rows(["id"])) == []


def test_open_collection_never_creates_one(store):
    client, layout = store.open_collection()
    assert layout.dim == 4 and layout.has_category
    with pytest.raises(LookupError, match="collection absent does not exist"):
        dataclasses.replace(store, collection="absent").open_collection()
    assert not client.has_collection("absent")


def test_vector_search_gives_each_path_on_this_store(store):
    sdk, haystack = store.vector_search("sdk"), store.vector_search("haystack")
    assert isinstance(sdk, SdkVectorSearch) and isinstance(haystack, HaystackVectorSearch)
    assert sdk.store is store and haystack.store is store
    assert sdk.search([1.0, 0.0, 0.0, 0.0], 1, None)[0].evidence_key == "disk/full.md#0"
    with pytest.raises(ValueError, match="unknown vector store path 'spring'"):
        store.vector_search("spring")


def test_a_uri_pymilvus_would_not_take_is_refused_naming_the_forms():
    with pytest.raises(ValueError, match=r"uri='kb' is neither a Milvus Lite file ending in \.db nor a server URI"):
        KnowledgeStore(uri="kb")


class TestKnowledgeStoreInit:
    @pytest.mark.parametrize("collection", ["", "9lives", "my-kb", "a" * 256])
    def test_refuses_a_collection_name_milvus_would_refuse(self, collection):
        with pytest.raises(ValueError, match="^collection=.* must be 1-255 letters, digits or underscores"):
            KnowledgeStore(uri="unused.db", collection=collection)

    @pytest.mark.parametrize("timeout_ms", [-1, -3000])
    def test_refuses_a_negative_timeout(self, timeout_ms):
        with pytest.raises(ValueError, match=f"^timeout_ms={timeout_ms} must be at least 0$"):
            KnowledgeStore(uri="unused.db", timeout_ms=timeout_ms)

    @pytest.mark.parametrize("index_type", ["", "IVF_PQ", "flat"])
    def test_refuses_an_index_type_it_cannot_create(self, index_type):
        with pytest.raises(ValueError, match="^index_type='[^']*' must be one of FLAT, IVF_FLAT, HNSW, AUTOINDEX"):
            KnowledgeStore(uri="unused.db", index_type=index_type)


# Each init parameter out of its bound: (parameter, value, what the one-line error says).
REFUSED = [
    ("uri", "", "neither a Milvus Lite file"),
    ("collection", "", "1-255 letters"),
    ("auth", "token", "MilvusAuth"),
    ("timeout_ms", -1, "at least 0"),
    ("index_type", "IVF_PQ", "one of FLAT, IVF_FLAT, HNSW, AUTOINDEX"),
    ("index_params", [1], "must map Milvus parameters"),
    ("search_params", "nprobe", "must map Milvus parameters"),
    ("full_text", "yes", "true or false"),
]


@pytest.mark.parametrize(("parameter", "value", "rule"), REFUSED, ids=[f"{p}={v!r}" for p, v, _ in REFUSED])
def test_each_init_parameter_out_of_its_bound_is_refused_by_name(parameter, value, rule):
    assert_refused(lambda **changed: KnowledgeStore(**{**{"uri": "milvus.db"}, **changed}), parameter, value, rule)
