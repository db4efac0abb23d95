"""
The YAML pipelines as what runs: config values reach the components, an ablation is a config key
(`pipeline.rerank`, `retrieval.category_filter`, `retrieval.vector_store_mode`; `pipeline=...`
sets it), each variant answers a real lookup and differs from the default the way it should, and
a file or a value that does not load fails with one clear line.
"""

import json

import pytest
import yaml
from haystack import Pipeline
from omegaconf import OmegaConf

from pipelines.config.pipeline_files import YAML_DIR
from pipelines.config.settings import ConfigError, load_config
from pipelines.indexing import build_indexing_pipeline
from pipelines.lookup import ALLOWED_MODULES, LookupService, build_lookup_pipeline
from pipelines.serialized import (
    bypassing,
    load_pipeline,
    main,
    pipeline_data,
    render_pipeline_yaml,
    without_components,
)
from tests.helpers import derived_config, lookup_with

QUERY = "disk almost full on a worker node"
TOMATO_QUERY = "how much should I water tomato plants in the garden"
# Each shipped `pipeline=` selection and the config key it sets.
VARIANTS = {
    "no_rerank": ("pipeline.rerank", False),
    "no_l0_filter": ("retrieval.category_filter", False),
    "haystack_store": ("retrieval.vector_store_mode", "haystack"),
}


def edges(pipeline: Pipeline) -> set[tuple[str, str]]:
    return {(c["sender"], c["receiver"]) for c in pipeline.to_dict()["connections"]}


# config values reach the components ------------------------------------------------------------


def test_overrides_reach_every_lookup_component():
    cfg = load_config(
        ["retrieval.top_k=7", "retrieval.evidence_threshold=0.4", "context.budget_tokens=300", "milvus=server"]
    )
    pipeline = build_lookup_pipeline(cfg)
    retriever = pipeline.get_component("retriever")
    assert (retriever.top_k, retriever.store.index_type, retriever.store.search_params) == (
        7,
        "IVF_FLAT",
        {"nprobe": 16},
    )
    # The retriever alone takes the threshold; the components after it get its `evidence_bar`.
    assert retriever.evidence_threshold == 0.4
    bar_receivers = {receiver for sender, receiver in edges(pipeline) if sender == "retriever.evidence_bar"}
    assert bar_receivers == {f"{n}.evidence_bar" for n in ("reranker", "deduper", "competition", "assembler")}
    assert pipeline.get_component("context_packer").budget_tokens == 300
    assert pipeline.get_component("trace_writer").db_url == cfg.trace.db_url


def test_indexing_derived_values_reach_the_components():
    cfg = load_config(["chunking.max_tokens=128"])
    pipeline = build_indexing_pipeline(cfg, progress_bar=True)
    assert pipeline.get_component("chunker").max_tokens == 128
    assert pipeline.get_component("embedder").progress_bar is True
    assert "chunks=128/" in pipeline.get_component("planner").fingerprint
    assert build_indexing_pipeline(cfg).get_component("embedder").progress_bar is False


def test_every_shipped_yaml_keeps_its_values_in_the_config():
    """
    Literal values in a template would silently ignore overrides: only ${...} and a few constants,
    also inside a value of its own type (a `{type, init_parameters}` envelope).
    """
    allowed_literals = {"tool_name", "default_category", "meta_fields_to_embed"}

    def check(params: dict, where: tuple) -> None:
        for key, value in params.items():
            if isinstance(value, dict) and set(value) == {"type", "init_parameters"}:
                check(value["init_parameters"], (*where, key))
            else:
                assert (isinstance(value, str) and value.startswith("${")) or key in allowed_literals, (*where, key)

    for path in YAML_DIR.glob("*.yml"):
        for name, spec in yaml.safe_load(path.read_text(encoding="utf-8"))["components"].items():
            check(spec["init_parameters"], (path.name, name))


# variants: what they load ---------------------------------------------------------------------


def test_one_lookup_file_and_one_indexing_file_are_shipped():
    assert sorted(path.name for path in YAML_DIR.glob("*.yml")) == ["indexing.yml", "lookup_knowledge.yml"]


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_pipeline_group_sets_one_key_over_the_default_files(variant):
    default = load_config()
    cfg = load_config([f"pipeline={variant}"])
    key, value = VARIANTS[variant]
    assert OmegaConf.select(cfg, key) == value != OmegaConf.select(default, key)
    assert (cfg.pipeline.lookup, cfg.pipeline.indexing) == ("lookup_knowledge.yml", "indexing.yml")
    assert load_config([f"pipeline={variant}", f"{key}={OmegaConf.select(default, key)}"]) == default


@pytest.mark.parametrize("override", ["pipeline.rerank=off", "pipeline.rerank=false", "pipeline=no_rerank"])
def test_rerank_off_is_spelled_several_ways(override):
    assert load_config([override]).pipeline.rerank is False


def test_no_rerank_has_no_reranker_and_feeds_the_deduper_from_the_retriever():
    default = build_lookup_pipeline(load_config())
    ablated = build_lookup_pipeline(load_config(["pipeline.rerank=false"]))
    assert set(default.graph.nodes) - set(ablated.graph.nodes) == {"reranker"}
    assert ("retriever.candidates", "deduper.candidates") in edges(ablated)
    assert {e for e in edges(default) if "reranker" not in e[0] + e[1]} <= edges(ablated)


def test_bypassing_joins_the_neighbours_in_place():
    data = {
        "components": {"a": {}, "b": {}, "c": {}},
        "connections": [
            {"sender": "a.x", "receiver": "b.x"},
            {"sender": "a.y", "receiver": "b.y"},
            {"sender": "b.x", "receiver": "c.x"},
            {"sender": "a.z", "receiver": "c.z"},
        ],
    }
    assert bypassing(data, "b", "x") == {
        "components": {"a": {}, "c": {}},
        "connections": [{"sender": "a.x", "receiver": "c.x"}, {"sender": "a.z", "receiver": "c.z"}],
    }
    assert bypassing(data, "d", "x") == data


def test_no_l0_filter_and_haystack_store_change_one_retriever_value():
    default = build_lookup_pipeline(load_config()).to_dict()
    for override, key, value in [
        ("retrieval.category_filter=false", "category_filter", False),
        ("retrieval.vector_store_mode=haystack", "vector_store_mode", "haystack"),
    ]:
        data = build_lookup_pipeline(load_config([override])).to_dict()
        assert data["connections"] == default["connections"]
        retriever = data["components"]["retriever"]["init_parameters"]
        assert retriever[key] == value and retriever[key] != default["components"]["retriever"]["init_parameters"][key]
        data["components"]["retriever"]["init_parameters"][key] = default["components"]["retriever"]["init_parameters"][
            key
        ]
        assert data["components"] == default["components"]


def test_sidecar_is_in_the_pipeline_only_when_enabled():
    assert "sidecar" not in build_lookup_pipeline(load_config()).graph.nodes
    enabled = build_lookup_pipeline(load_config(["sidecar.enabled=true", "pipeline=no_rerank"]))
    assert "sidecar" in enabled.graph.nodes and ("sidecar.sidecar", "assembler.sidecar") in edges(enabled)
    assert enabled.get_component("sidecar").store == enabled.get_component("retriever").store


def test_evaluation_pipeline_leaves_out_only_the_trace_writer():
    full = build_lookup_pipeline(load_config())
    unrecorded = build_lookup_pipeline(load_config(), record=False)
    assert set(full.graph.nodes) - set(unrecorded.graph.nodes) == {"trace_writer"}
    assert edges(full) - edges(unrecorded) == {("assembler.result", "trace_writer.result")}


# variants: a real lookup each --------------------------------------------------------------------


def test_no_rerank_lookup_ranks_without_boosts(sample_cfg):
    default, _ = lookup_with(sample_cfg, QUERY)
    ablated, outputs = lookup_with(sample_cfg, QUERY, "pipeline.rerank=off", include=("retriever",))
    assert ablated.found and ablated.rerank_trace
    assert all(entry.boosts == {} for entry in ablated.rerank_trace)
    assert any(entry.boosts for entry in default.rerank_trace)
    assert "reranker" not in outputs


def test_no_l0_filter_lookup_never_filters(topics_cfg):
    default, _ = lookup_with(topics_cfg, TOMATO_QUERY)
    assert default.retrieval_trace.attempts[0].category_filter == "gardening"
    ablated, _ = lookup_with(topics_cfg, TOMATO_QUERY, "retrieval.category_filter=false")
    assert ablated.l0_hints.domains == default.l0_hints.domains  # hints still extracted
    (attempt,) = ablated.retrieval_trace.attempts
    assert attempt.category_filter is None and attempt.filter_expression is None
    assert ablated.found


def test_haystack_store_lookup_takes_the_haystack_path(sample_cfg):
    assert sample_cfg.retrieval.vector_store_mode == "sdk"
    result, _ = lookup_with(sample_cfg, QUERY, "retrieval.vector_store_mode=haystack")
    assert result.found and result.retrieval_trace.vector_store_mode == "haystack"
    assert {attempt.path for attempt in result.retrieval_trace.attempts} == {"haystack"}


def test_service_runs_a_variant_and_records_the_call(sample_cfg, tmp_path):
    cfg = derived_config(sample_cfg, "pipeline=no_rerank", f"trace.db_url=sqlite:///{tmp_path}/traces.db")
    result = LookupService(cfg).lookup(QUERY)
    assert result.found and result.invocation_id and result.trace_status == "recorded"


# rendering for hayhooks -----------------------------------------------------------------------


def test_render_resolves_everything_and_loads_back():
    cfg = load_config(["pipeline.rerank=false", "retrieval.top_k=7"])
    text = render_pipeline_yaml(cfg, "lookup")
    assert "${" not in text and "reranker" not in text
    data = yaml.safe_load(text)
    assert data["inputs"] == {"query": "query_transformer.query"}
    assert data["outputs"] == {"result": "trace_writer.result"}
    loaded = Pipeline.loads(text, allowed_modules=ALLOWED_MODULES)
    assert loaded.get_component("retriever").top_k == 7
    assert loaded.to_dict() == build_lookup_pipeline(cfg).to_dict()


def test_rendered_yaml_declares_io_hayhooks_resolves(monkeypatch):
    from hayhooks.server.utils.yaml_utils import get_inputs_outputs_from_yaml

    monkeypatch.setenv("HAYSTACK_DESERIALIZATION_ALLOWLIST", ",".join(ALLOWED_MODULES))
    io = get_inputs_outputs_from_yaml(render_pipeline_yaml(load_config(), "lookup"))
    assert set(io["inputs"]) == {"query"} and set(io["outputs"]) == {"result"}
    io = get_inputs_outputs_from_yaml(render_pipeline_yaml(load_config(), "indexing"))
    assert set(io["inputs"]) == {"rebuild"} and "count" in io["outputs"]


def test_render_command_writes_both_files(tmp_path, capsys):
    assert main(["--output", str(tmp_path / "out"), "pipeline=no_l0_filter", "retrieval.top_k=9"]) == 0
    lookup = (tmp_path / "out" / "lookup_knowledge.yml").read_text(encoding="utf-8")
    assert lookup.startswith("# Rendered from lookup_knowledge.yml with overrides ['pipeline=no_l0_filter'")
    retriever = Pipeline.loads(lookup, allowed_modules=ALLOWED_MODULES).get_component("retriever")
    assert (retriever.top_k, retriever.category_filter) == (9, False)
    assert (tmp_path / "out" / "indexing.yml").is_file()
    assert "wrote" in capsys.readouterr().out


def test_render_command_bad_override_is_one_line(tmp_path, capsys):
    assert main(["--output", str(tmp_path), "pipeline.lookup=no_such_file.yml"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("error: pipeline.lookup=no_such_file.yml: cannot read")


# bad pipelines fail clearly -------------------------------------------------------------------


def write_template(tmp_path, edit) -> str:
    data = yaml.safe_load((YAML_DIR / "lookup_knowledge.yml").read_text(encoding="utf-8"))
    edit(data)
    path = tmp_path / "custom.yml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return str(path)


def test_an_absolute_path_loads_a_custom_file(tmp_path):
    path = write_template(tmp_path, lambda d: d["components"]["retriever"]["init_parameters"].update(top_k=3))
    assert build_lookup_pipeline(load_config([f"pipeline.lookup={path}"])).get_component("retriever").top_k == 3


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d["components"]["retriever"]["init_parameters"].update(top_k="${retrieval.nope}"), "retrieval.nope"),
        (lambda d: d["components"]["retriever"].update(type="os.system"), "os"),
        (lambda d: d["components"]["retriever"]["init_parameters"].update(topk=3), "topk"),
    ],
    ids=["unknown-interpolation", "module-not-allowed", "unknown-init-parameter"],
)
def test_a_bad_template_is_a_config_error(tmp_path, edit, message):
    path = write_template(tmp_path, edit)
    with pytest.raises(ConfigError, match=message) as info:
        build_lookup_pipeline(load_config([f"pipeline.lookup={path}"]))
    assert "\n" not in str(info.value) and str(info.value).startswith("pipeline.lookup=")


def test_a_missing_file_is_a_config_error():
    with pytest.raises(ConfigError, match="cannot read"):
        build_lookup_pipeline(load_config(["pipeline.lookup=missing.yml"]))


def test_leaving_out_a_component_others_need_is_refused():
    with pytest.raises(ConfigError, match="deduper.candidates"):
        load_pipeline(load_config(), "lookup", leave_out=["reranker"])


def test_without_components_drops_their_connections():
    data = pipeline_data(load_config(["sidecar.enabled=true"]), "lookup")
    pruned = without_components(data, ["sidecar"])
    assert "sidecar" not in pruned["components"]
    assert not [c for c in pruned["connections"] if "sidecar" in c["sender"] + c["receiver"]]
    assert len(data["connections"]) - len(pruned["connections"]) == 5


# the CLI --------------------------------------------------------------------------------------


def test_cli_lookup_selects_a_variant(topics_cfg, capsys):
    from pipelines.cli import main as cli_main

    state = [f"paths.state_dir={topics_cfg.paths.state_dir}", "mlflow=off"]
    assert cli_main(["lookup", TOMATO_QUERY, *state, "pipeline=no_l0_filter", "--compact"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["found"] is True and [a["category"] for a in data["retrievalTrace"]["attempts"]] == [None]


def test_cli_lookup_with_a_missing_pipeline_file_is_one_line_exit_2(topics_cfg, capsys):
    from pipelines.cli import main as cli_main

    state = [f"paths.state_dir={topics_cfg.paths.state_dir}", "mlflow=off"]
    assert cli_main(["lookup", TOMATO_QUERY, *state, "pipeline.lookup=no_such.yml"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pipeline.lookup=no_such.yml: cannot read" in err


@pytest.mark.parametrize(("variant", "ranker"), [("default", "reranker"), ("no_rerank", "retriever")])
def test_evaluation_ranks_a_variant_by_what_feeds_the_deduper(sample_cfg, variant, ranker):
    from pipelines.evaluation.run import PipelineSystem

    system = PipelineSystem(derived_config(sample_cfg, f"pipeline={variant}"))
    assert (system.ranker, system.ranker_socket) == (ranker, "candidates")
    ranked = system.rank(QUERY)
    assert ranked.answered and ranked.sources[0] == "disk/disk-full.md"
