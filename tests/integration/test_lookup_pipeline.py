"""
The lookup_knowledge pipeline as a whole: component order (Haystack tracing), its YAML rendered
for the default config, component serialization, and the explicit agent tool boundary.
"""

import contextlib
import json

import pytest
import yaml
from haystack import Pipeline, component, tracing
from haystack.components.agents import Agent
from haystack.core.errors import DeserializationError
from haystack.dataclasses import ChatMessage, ToolCall

from components.lookup.competition_detector import CompetitionDetector
from components.lookup.context_packer import ContextPacker
from components.lookup.evidence_deduper import EvidenceDeduper
from components.lookup.fallback_retriever import FallbackRetriever
from components.lookup.l0_hint_extractor import L0HintExtractor
from components.lookup.query_embedder import KnowledgeQueryEmbedder
from components.lookup.query_transformer import QueryTransformer
from components.lookup.result_assembler import ResultAssembler
from components.lookup.rule_reranker import RuleReranker
from components.lookup.sidecar_comparator import SidecarComparator
from components.stores.knowledge_store import KnowledgeStore
from components.stores.l0_index import L0Index
from components.stores.l0_index_file import load_l0_index, save_l0_index
from components.tracing.trace_writer import TraceWriter
from pipelines.config.settings import load_config
from pipelines.lookup import LookupService
from pipelines.serialized import render_pipeline_yaml
from pipelines.serving.agent_tool import TOOL_NAME, lookup_knowledge_tool
from tests.helpers import assert_round_trips, count_stats, derived_config
from tests.pipelines.test_serialized import normalized

QUERY = "disk almost full on a worker node"
COMPONENT_TYPES = {
    "query_transformer": QueryTransformer,
    "l0_hints": L0HintExtractor,
    "query_embedder": KnowledgeQueryEmbedder,
    "retriever": FallbackRetriever,
    "reranker": RuleReranker,
    "competition": CompetitionDetector,
    "deduper": EvidenceDeduper,
    "context_packer": ContextPacker,
    "assembler": ResultAssembler,
    "trace_writer": TraceWriter,
}


# component order -----------------------------------------------------------------------------


class _Span(tracing.Span):
    def set_tag(self, key, value) -> None:
        pass


class ComponentOrderTracer(tracing.Tracer):
    """Records the name of every component run, in the order the runs start."""

    def __init__(self) -> None:
        self.components: list[str] = []

    @contextlib.contextmanager
    def trace(self, operation_name, tags=None, parent_span=None):
        if operation_name == "haystack.component.run":
            self.components.append(tags["haystack.component.name"])
        yield _Span()

    def current_span(self):
        return None


def components_run(service) -> list[str]:
    """The components one lookup of `service` runs, in the order their runs start."""
    recorder = ComponentOrderTracer()
    previous = tracing.tracer.actual_tracer
    tracing.enable_tracing(recorder)
    try:
        result = service.lookup(QUERY)
    finally:
        tracing.enable_tracing(previous)
    assert result.found
    return recorder.components


def test_pipeline_components_execute_in_order(sample_service):
    ran = components_run(sample_service)
    position = {name: ran.index(name) for name in ran}
    stages = [
        "query_transformer",
        "l0_hints",
        "query_embedder",
        "retriever",
        "reranker",
        "competition",
        "deduper",
        "context_packer",
        "assembler",
    ]
    assert set(stages) <= set(ran) and all(ran.count(name) == 1 for name in ran)
    assert position["query_transformer"] < position["retriever"]  # transform before retrieval
    assert position["retriever"] < position["reranker"] < position["deduper"]  # retrieve before post-processing
    # Competing documents are judged on the reranked order, before the blocks are chosen.
    assert position["reranker"] < position["competition"] < position["deduper"]
    assert position["deduper"] < position["context_packer"]  # evidence blocks before packing
    # Result assembly comes after every stage, and trace recording after result assembly.
    assert all(position[name] < position["assembler"] for name in stages[:-1])
    assert ran[position["assembler"] + 1 :] == ["trace_writer"]
    # The sidecar, disabled by default, is not on the runtime path.
    assert "sidecar" not in ran


def test_enabled_sidecar_runs_after_retrieval_and_before_assembly(sample_cfg):
    ran = components_run(LookupService(derived_config(sample_cfg, "sidecar.enabled=true")))
    assert ran.count("sidecar") == 1
    assert ran.index("retriever") < ran.index("sidecar") < ran.index("assembler")


# the L0 index, read once per lookup ----------------------------------------------------------


def test_one_lookup_stats_the_l0_index_file_once(sample_service, sample_cfg, monkeypatch):
    sample_service.lookup(QUERY)  # warmed up, the index loaded
    calls = count_stats(monkeypatch, sample_cfg.l0.index_path)
    assert sample_service.lookup(QUERY).found
    assert calls == ["stat"]


def test_a_re_index_during_a_lookup_leaves_its_components_one_view(sample_cfg, tmp_path, monkeypatch):
    """Every component after the query transformer gets the index it read, though the file changes meanwhile."""
    path = tmp_path / "kb.l0.json"
    save_l0_index(load_l0_index(sample_cfg.l0.index_path), path)
    service = LookupService(derived_config(sample_cfg, f"l0.index_path={path}"))
    service.warm_up()
    read, received = [], {}

    def recording(name, run):
        def wrapped(**inputs):
            if name == "l0_hints":  # just after the transformer read the file: a re-index lands
                save_l0_index(L0Index(load_l0_index(path).entries[:1]), path)
            outputs = run(**inputs)
            if name == "query_transformer":
                read.append(outputs["l0_index"])
            else:
                received[name] = inputs["l0_index"]
            return outputs

        return wrapped

    downstream = ("l0_hints", "reranker", "competition", "assembler")
    for name in ("query_transformer", *downstream):
        instance = service.pipeline.get_component(name)
        monkeypatch.setattr(instance, "run", recording(name, instance.run))
    assert service.lookup(QUERY).found
    assert len(read) == 1 and set(received) == set(downstream)
    assert all(index is read[0] for index in received.values()), received
    service.lookup(QUERY)
    assert len(read[1].entries) == 1  # the next lookup reads the new version


# rendered YAML ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def rendered() -> str:
    return render_pipeline_yaml(load_config(), "lookup")


def test_rendered_yaml_of_the_default_config(rendered):
    data = yaml.safe_load(rendered)
    assert set(data["components"]) == set(COMPONENT_TYPES)  # no sidecar: disabled by default
    assert (
        data["components"]["retriever"]["init_parameters"]["store"]["init_parameters"]["uri"] == ".knowledge/milvus.db"
    )
    # The query transformer alone reads the L0 index file; the others take the index it read.
    readers = [name for name, spec in data["components"].items() if "l0_index_path" in spec["init_parameters"]]
    assert readers == ["query_transformer"]
    assert data["components"]["query_transformer"]["init_parameters"]["l0_index_path"] == ".knowledge/knowledge.l0.json"
    fed = {c["receiver"].split(".")[0] for c in data["connections"] if c["sender"] == "query_transformer.l0_index"}
    assert fed == {"l0_hints", "reranker", "competition", "assembler"}
    assert "/work/" not in rendered and "/tmp/" not in rendered


def test_rendered_yaml_needs_the_allowlist(rendered):
    with pytest.raises(DeserializationError):
        Pipeline.loads(rendered)


def test_rendered_yaml_loads_and_answers_a_query(rendered, sample_cfg, sample_service, tmp_path):
    pipeline = Pipeline.loads(rendered, allowed_modules=["components"])
    assert {name: type(pipeline.get_component(name)) for name in COMPONENT_TYPES} == COMPONENT_TYPES
    assert normalized(pipeline.dumps()) == normalized(rendered)

    data = pipeline.to_dict()
    for spec in data["components"].values():
        params = spec["init_parameters"]
        if "store" in params:
            params["store"]["init_parameters"]["uri"] = sample_cfg.milvus.uri
        if "l0_index_path" in params:
            params["l0_index_path"] = sample_cfg.l0.index_path
    recorder = data["components"]["trace_writer"]["init_parameters"]
    recorder.update(
        db_url=f"sqlite:///{tmp_path}/traces.db", spool_path=str(tmp_path / "spool.jsonl"), tracking_uri=None
    )
    pointed = Pipeline.from_dict(data, allowed_modules=["components"])
    result = pointed.run({"query_transformer": {"query": QUERY}})["trace_writer"]["result"]
    assert result.invocation_id and result.trace_status == "recorded"
    assert result.found and result.evidence_blocks[0].source == "disk/disk-full.md"
    # The rendered YAML is the default configuration: the same evidence as the session's service.
    expected = sample_service.lookup(QUERY)
    assert [b.evidence_key for b in result.evidence_blocks] == [b.evidence_key for b in expected.evidence_blocks]


@pytest.mark.parametrize(
    "instance",
    [
        QueryTransformer(l0_index_path="/data/kb.l0.json", max_chars=500, on_overlong="error", expand_entities=False),
        L0HintExtractor(title_min_overlap=0.7, domain_from_matches=False, domain_min_precision=0.4),
        KnowledgeQueryEmbedder(model="some/model", device="cpu"),
        FallbackRetriever(
            store=KnowledgeStore(
                uri="http://127.0.0.1:19530", collection="kb", index_type="IVF_FLAT", search_params={"nprobe": 16}
            ),
            top_k=7,
            reference_threshold=0.55,
            evidence_threshold=0.3,
            l1_enabled=False,
            vector_store_mode="auto",
            category_filter=False,
        ),
        SidecarComparator(
            store=KnowledgeStore(uri="/data/kb.db", collection="kb", index_type="FLAT"),
            enabled=True,
            path="sdk",
            top_k=5,
        ),
        RuleReranker(weights={"lexical_overlap": 0.1}),
        EvidenceDeduper(per_document_cap=1, max_evidence=3),
        ContextPacker(budget_tokens=300, tokenizer_model="packaged:all-MiniLM-L6-v2"),
        ResultAssembler(high_relevance=0.7, reference_threshold=0.45, high_margin=0.2),
        CompetitionDetector(
            margin=0.1,
            sibling_margin=0.3,
            sibling_similarity=0.9,
            cross_reference=False,
        ),
    ],
    ids=lambda instance: type(instance).__name__,
)
def test_query_component_to_dict_from_dict_round_trip(instance):
    assert_round_trips(instance)


# the agent tool ------------------------------------------------------------------------------


@component
class ScriptedChatGenerator:
    """A chat generator that asks for one lookup_knowledge call, then answers from its result."""

    def __init__(self, query: str) -> None:
        self.query = query
        self.seen: list[list[ChatMessage]] = []

    @component.output_types(replies=list[ChatMessage])
    def run(self, messages: list[ChatMessage], tools=None, **kwargs):
        self.seen.append(list(messages))
        results = [m.tool_call_result for m in messages if m.tool_call_result is not None]
        if not results:
            call = ToolCall(tool_name=TOOL_NAME, arguments={"query": self.query}, id="call-1")
            return {"replies": [ChatMessage.from_assistant(tool_calls=[call])]}
        found = json.loads(results[-1].result)["found"]
        return {"replies": [ChatMessage.from_assistant(f"answered from the knowledge base: found={found}")]}


def test_tool_boundary_remains_explicit(sample_service):
    tool = lookup_knowledge_tool(sample_service)
    assert tool.name == "lookup_knowledge"
    assert tool.parameters["required"] == ["query"]
    assert list(tool.parameters["properties"]) == ["query"]  # one argument: the query
    assert tool.parameters["properties"]["query"]["type"] == "string"

    generator = ScriptedChatGenerator(QUERY)
    agent = Agent(chat_generator=generator, tools=[tool])
    out = agent.run(messages=[ChatMessage.from_user("Our worker node's disk is almost full. What do we do?")])

    assert out["tool_call_counts"] == {"lookup_knowledge": 1}
    tool_messages = [m for m in out["messages"] if m.tool_call_result is not None]
    (message,) = tool_messages
    call_result = message.tool_call_result
    assert call_result.origin.tool_name == "lookup_knowledge"
    assert call_result.origin.arguments == {"query": QUERY}  # the same query argument
    assert call_result.error is False
    payload = json.loads(call_result.result)
    expected = sample_service.lookup(QUERY).to_dict()
    # The agent view by default: the packed context and one citation per evidence block.
    assert payload["found"] is True and payload["context"] == expected["contextPack"]["text"]
    assert [c["source"] for c in payload["citations"]] == [b["source"] for b in expected["evidenceBlocks"]]
    # The result reached the model: its second call saw the tool message.
    assert len(generator.seen) == 2 and any(m.tool_call_result for m in generator.seen[1])
    assert out["last_message"].text == "answered from the knowledge base: found=True"
    # Knowledge reaches the conversation only through that tool call: nothing was injected before it.
    assert not any("source:" in (m.text or "") for m in generator.seen[0])


def test_the_tools_result_is_what_lookup_view_agent_prints(sample_cfg, sample_service, capsys):
    from pipelines.cli import main
    from tests.conftest import sample_overrides

    state = [f"paths.state_dir={sample_cfg.paths.state_dir}", *sample_overrides(sample_cfg), "mlflow=off"]
    assert main(["lookup", QUERY, "--view", "agent", *state]) == 0
    printed = json.loads(capsys.readouterr().out)
    result = lookup_knowledge_tool(sample_service).invoke(query=QUERY)
    assert {**result, "invocationId": None} == {**printed, "invocationId": None}  # each call has its own id
    full = lookup_knowledge_tool(sample_service, view="full").invoke(query=QUERY)
    assert full["evidenceBlocks"] and "evidenceBlocks" not in result
    with pytest.raises(ValueError, match="view='short'"):
        lookup_knowledge_tool(sample_service, view="short")
