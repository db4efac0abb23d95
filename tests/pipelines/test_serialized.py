"""pipelines/yaml/indexing.yml rendered for a config, and the serialization of every indexing component."""

import pytest
import yaml
from haystack import Pipeline
from haystack.core.errors import DeserializationError

from components.errors import ParameterError
from components.indexing.decision_vector_pruner import DecisionVectorPruner
from components.indexing.decision_vector_writer import DecisionVectorWriter
from components.indexing.document_embedder import KnowledgeDocumentEmbedder
from components.indexing.index_planner import IndexPlanner
from components.indexing.l0_index_writer import L0IndexWriter
from components.indexing.markdown_chunker import MarkdownChunker
from components.indexing.markdown_reader import MarkdownKnowledgeReader
from components.indexing.milvus_writer import MilvusChunkWriter
from components.stores.knowledge_store import KnowledgeStore
from pipelines.config.manifest import index_fingerprint
from pipelines.config.pipeline_files import YAML_DIR
from pipelines.config.settings import ConfigError, load_config
from pipelines.indexing import build_indexing_pipeline
from pipelines.serialized import HAYHOOKS_IO_KEYS, check_pipelines, load_pipeline, render_pipeline_yaml
from tests.helpers import assert_round_trips

COMPONENT_TYPES = {
    "reader": MarkdownKnowledgeReader,
    "planner": IndexPlanner,
    "chunker": MarkdownChunker,
    "embedder": KnowledgeDocumentEmbedder,
    "writer": MilvusChunkWriter,
    "l0_writer": L0IndexWriter,
    "decision_writer": DecisionVectorWriter,
    "decision_pruner": DecisionVectorPruner,
}


def normalized(text: str) -> dict:
    """The pipeline data with connections in a fixed order (loading may list them differently), without hayhooks IO."""
    data = yaml.safe_load(text)
    for key in HAYHOOKS_IO_KEYS:
        data.pop(key, None)
    data["connections"] = sorted(data["connections"], key=lambda c: (c["sender"], c["receiver"]))
    return data


@pytest.fixture(scope="module")
def rendered() -> str:
    return render_pipeline_yaml(load_config(), "indexing")


def test_rendered_yaml_is_the_default_pipeline(rendered):
    assert normalized(rendered) == normalized(build_indexing_pipeline(load_config()).dumps())
    assert "${" not in rendered
    assert yaml.safe_load(rendered)["inputs"] == {"rebuild": "planner.rebuild"}


def test_rendered_yaml_uses_relative_default_paths(rendered):
    data = yaml.safe_load(rendered)
    components = data["components"]
    assert components["reader"]["init_parameters"]["kb_path"] == "knowledge/"
    assert components["writer"]["init_parameters"]["store"]["init_parameters"]["uri"] == ".knowledge/milvus.db"
    assert components["l0_writer"]["init_parameters"]["index_path"] == ".knowledge/knowledge.l0.json"
    assert components["planner"]["init_parameters"]["fingerprint"] == index_fingerprint(load_config())
    assert "/work/" not in rendered and "/tmp/" not in rendered  # nothing machine-specific


def test_rendered_yaml_loads_with_the_allowlist(rendered):
    pipeline = Pipeline.loads(rendered, allowed_modules=["components"])
    assert {name: type(pipeline.get_component(name)) for name in COMPONENT_TYPES} == COMPONENT_TYPES
    assert normalized(pipeline.dumps()) == normalized(rendered)  # loads -> dumps is lossless
    # decision_writer -> writer adds decision vectors before the collection changes; writer -> l0_writer and
    # writer -> decision_pruner write the L0 index and drop removed decision vectors after it
    assert len(normalized(rendered)["connections"]) == 13


def test_rendered_yaml_names_the_credentials_environment_variables(rendered, monkeypatch):
    monkeypatch.setenv("MILVUS_TOKEN", "tok-51c0")  # not a secret: a throwaway value
    components = yaml.safe_load(rendered)["components"]
    for name in ("planner", "writer"):
        store = components[name]["init_parameters"]["store"]
        assert store["type"] == "components.stores.knowledge_store.KnowledgeStore"
        auth = store["init_parameters"]["auth"]
        assert auth["type"] == "components.stores.milvus_auth.MilvusAuth"
        assert auth["init_parameters"]["token"] == {"type": "env_var", "env_vars": ["MILVUS_TOKEN"], "strict": False}
        assert (auth["init_parameters"]["secure"], auth["init_parameters"]["server_pem_path"]) == (False, None)
    pipeline = Pipeline.loads(rendered, allowed_modules=["components"])
    assert pipeline.get_component("writer").store.credentials() == {"token": "tok-51c0"}
    assert "tok-51c0" not in pipeline.dumps()


def test_credentials_in_the_config_reach_the_components_but_no_file(monkeypatch):
    monkeypatch.delenv("MILVUS_TOKEN", raising=False)
    cfg = load_config(["milvus.user=user-9d1e", "milvus.password=pw-77b3", "milvus.secure=true"])
    pipeline = load_pipeline(cfg, "indexing")
    for name in ("planner", "writer"):
        auth = pipeline.get_component(name).store.auth
        assert auth.connect_args() == {"user": "user-9d1e", "password": "pw-77b3", "secure": True}
        assert "user-9d1e" not in repr(auth) and "pw-77b3" not in repr(auth)
    with pytest.raises(ConfigError, match="cannot be written to a pipeline file"):
        render_pipeline_yaml(cfg, "indexing")


def test_rendered_yaml_needs_the_allowlist(rendered):
    with pytest.raises(DeserializationError):
        Pipeline.loads(rendered)


def test_pipeline_built_from_overrides_round_trips(tmp_path):
    cfg = load_config([f"paths.state_dir={tmp_path}", "chunking.max_tokens=128", "milvus=server", "mlflow=off"])
    pipeline = build_indexing_pipeline(cfg)
    text = pipeline.dumps()
    assert "max_tokens: 128" in text and "nlist: 128" in text and "IVF_FLAT" in text
    assert normalized(Pipeline.loads(text, allowed_modules=["components"]).dumps()) == normalized(text)


@pytest.mark.parametrize(
    "instance",
    [
        MarkdownKnowledgeReader(kb_path="docs/kb", default_category="misc"),
        IndexPlanner(store=KnowledgeStore(uri="/data/kb.db", collection="kb"), fingerprint="model=x;chunks=1/2/3"),
        MarkdownChunker(max_tokens=64, overlap_tokens=8, min_tokens=4, tokenizer_model="packaged:all-MiniLM-L6-v2"),
        KnowledgeDocumentEmbedder(
            model="some/model", device="cpu", batch_size=4, progress_bar=True, meta_fields_to_embed=["title"]
        ),
        MilvusChunkWriter(
            store=KnowledgeStore(
                uri="http://127.0.0.1:19530", collection="kb", index_type="IVF_FLAT", index_params={"nlist": 64}
            )
        ),
        L0IndexWriter(index_path="/data/kb.l0.json", model="some/model", device="cpu"),
    ],
    ids=lambda instance: type(instance).__name__,
)
def test_component_to_dict_from_dict_round_trip(instance):
    assert_round_trips(instance)


def test_loaded_yaml_pipeline_indexes(rendered, small_kb, tmp_path, monkeypatch):
    """The rendered YAML is a working pipeline: run from a folder holding knowledge/, it indexes it."""
    (tmp_path / "work").mkdir()
    small_kb.rename(tmp_path / "work" / "knowledge")
    monkeypatch.chdir(tmp_path / "work")
    pipeline = Pipeline.loads(rendered, allowed_modules=["components"])
    outputs = pipeline.run({"planner": {"rebuild": False}}, include_outputs_from={"planner", "writer", "l0_writer"})
    assert len(outputs["planner"]["plan"].added) == 4
    assert outputs["writer"]["written"] == outputs["writer"]["count"] > 4
    assert outputs["l0_writer"]["entries"] == 4
    assert (tmp_path / "work" / ".knowledge" / "milvus.db").exists()
    assert (tmp_path / "work" / ".knowledge" / "knowledge.l0.json").is_file()


def test_an_out_of_range_value_in_a_rendered_yaml_is_refused_naming_the_parameter(rendered):
    data = yaml.safe_load(rendered)
    data["components"]["chunker"]["init_parameters"]["max_tokens"] = 8
    with pytest.raises(DeserializationError) as error:
        Pipeline.loads(yaml.safe_dump(data), allowed_modules=["components"])
    assert isinstance(error.value.__cause__, ParameterError)
    assert str(error.value.__cause__) == "max_tokens=8 must be at least 16"


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("retrieval.top_k=-3", "retrieval.top_k=-3: must be at least 1"),
        ("chunking.min_tokens=-1", "chunking.min_tokens=-1: must be at least 0"),
        ("milvus.timeout_ms=-1", "milvus.timeout_ms=-1: must be at least 0"),
        ("rerank.weights.bm25=-0.5", "rerank.weights.bm25=-0.5: must be at least 0"),
    ],
)
def test_rendering_a_config_a_component_refuses_names_the_config_key(override, message):
    name = "indexing" if override.startswith("chunking.") else "lookup"
    with pytest.raises(ConfigError) as error:
        render_pipeline_yaml(load_config([override]), name)
    assert str(error.value) == message


def test_the_config_check_builds_the_components_the_config_turns_off():
    cfg = load_config(["pipeline.rerank=false", "sidecar.enabled=false", "rerank.weights.bm25=-0.5"])
    load_pipeline(cfg, "lookup")  # the reranker is bypassed: the pipeline itself loads
    with pytest.raises(ConfigError, match=r"^rerank\.weights\.bm25=-0\.5: must be at least 0$"):
        check_pipelines(cfg)


def test_a_parameter_the_file_sets_itself_is_named_by_component(tmp_path):
    template = yaml.safe_load((YAML_DIR / "lookup_knowledge.yml").read_text(encoding="utf-8"))
    template["components"]["trace_writer"]["init_parameters"]["tool_name"] = " "
    custom = tmp_path / "custom.yml"
    custom.write_text(yaml.safe_dump(template), encoding="utf-8")
    with pytest.raises(ConfigError) as error:
        check_pipelines(load_config([f"pipeline.lookup={custom}"]))
    assert str(error.value) == f"pipeline.lookup={custom}: trace_writer.tool_name=' ': must be a non-empty string"
