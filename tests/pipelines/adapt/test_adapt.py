"""`knowledge adapt`: pairs from the knowledge base alone, the eval guard, and a small real training run."""

import json
from pathlib import Path

import pytest
from haystack import Document

from pipelines.adapt.pairs import (
    EVAL_DIR,
    Pair,
    TrainingSourceError,
    check_provenance,
    check_training_source,
    mine_pairs,
    nearest_siblings,
    split_first_sentence,
)
from tests.conftest import SAMPLE_KB
from tests.helpers import run_cli, stderr_lines


def _eval_texts() -> list[str]:
    """Every query and label of every labelled set in eval/."""
    texts: list[str] = []
    for path in sorted(EVAL_DIR.glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                item = json.loads(line)
                texts.append(item["query"])
                texts.extend(item.get("relevant") or [])
    return texts


@pytest.fixture(scope="module")
def sample_pairs():
    return mine_pairs(SAMPLE_KB)


def test_pairs_come_only_from_the_knowledge_base_files(sample_pairs):
    reader_sources = {str(p.relative_to(SAMPLE_KB)) for p in SAMPLE_KB.rglob("*.md")}
    assert sample_pairs.documents == len(reader_sources)
    assert all(count > 0 for count in sample_pairs.counts().values()), sample_pairs.counts()
    for pair in sample_pairs.pairs:
        assert pair.source in reader_sources and pair.negative_source in reader_sources
        assert pair.negative_source != pair.source
    eval_texts = _eval_texts()
    assert len(eval_texts) > 100
    training_text = "\n".join(f"{p.anchor}\n{p.positive}\n{p.negative}" for p in sample_pairs.pairs)
    leaked = [text for text in eval_texts if text in training_text]
    assert leaked == []


def test_provenance_check_rejects_text_that_is_not_in_the_document(sample_pairs):
    pair = sample_pairs.pairs[0]
    eval_query = _eval_texts()[0]
    documents = [
        Document(content=(SAMPLE_KB / source).read_text(encoding="utf-8"), meta={"source": source, "title": ""})
        for source in {pair.source, pair.negative_source}
    ]
    check_provenance(
        [Pair("title", pair.anchor.split(" > ")[0], pair.positive, pair.negative, pair.source, pair.negative_source)],
        documents,
    )
    with pytest.raises(AssertionError, match="not found"):
        check_provenance(
            [Pair("sentence", eval_query, pair.positive, pair.negative, pair.source, pair.negative_source)], documents
        )
    with pytest.raises(AssertionError, match="no document"):
        check_provenance([Pair("title", "x", "y", "z", "eval/prometheus-dev.jsonl", pair.source)], documents)


@pytest.mark.parametrize("path", [EVAL_DIR, EVAL_DIR / "sub", EVAL_DIR.parent])
def test_a_knowledge_base_overlapping_eval_is_refused(path):
    with pytest.raises(TrainingSourceError, match="evaluation folder"):
        check_training_source(path)
    check_training_source(SAMPLE_KB)


def test_cli_refuses_the_eval_folder_in_one_line(tmp_path):
    result = run_cli("adapt", "--kb", str(EVAL_DIR), "--output", str(tmp_path / "model"), "mlflow=off")
    assert result.returncode == 2
    lines = stderr_lines(result)
    assert len(lines) == 1 and "evaluation folder" in lines[0], result.stderr
    assert not (tmp_path / "model").exists()


def test_cli_refuses_bad_numbers(tmp_path):
    result = run_cli("adapt", "--epochs", "0", "--output", str(tmp_path / "model"))
    assert result.returncode == 2 and "--epochs 0 must be 1 or more" in result.stderr


def test_siblings_are_the_closest_titles_of_the_same_category():
    def doc(source, title, category):
        return Document(content="x", meta={"source": source, "title": title, "category": category})

    documents = [
        doc("disk/space.md", "Node Filesystem Space Filling Up", "disk"),
        doc("disk/inodes.md", "Node Filesystem Files Filling Up", "disk"),
        doc("disk/raid.md", "Node RAID Degraded", "disk"),
        doc("net/space.md", "Node Filesystem Space Almost Full", "net"),
        doc("solo/alone.md", "Node Filesystem Space Filling Up Fast", "solo"),
    ]
    nearest = nearest_siblings(documents)
    assert nearest["disk/space.md"] == "disk/inodes.md"  # not the closer title of another category
    assert nearest["disk/raid.md"] in ("disk/space.md", "disk/inodes.md")
    assert nearest["solo/alone.md"] == "disk/space.md"  # no sibling: the closest title anywhere


def test_first_sentence_split():
    first, rest = split_first_sentence(
        "This alert fires when the disk\nis almost full. Check the node, then free space by removing old logs."
    )
    assert first == "This alert fires when the disk is almost full."
    assert rest == "Check the node, then free space by removing old logs."
    assert split_first_sentence("```bash\ndf -h\n```\n\nThen look at the output of the command.") == (None, None)


def _weights(folder: Path):
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))


def _same_weights(left: Path, right: Path) -> bool:
    import torch

    a, b = _weights(left), _weights(right)
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.slow
def test_adapt_trains_resumes_deterministically_and_serves_as_embedder_model(small_kb, make_config, tmp_path):
    from transformers import TrainerCallback

    from pipelines.adapt.run import CHECKPOINTS, AdaptOptions, adapt_model
    from pipelines.config.manifest import index_fingerprint

    cfg = make_config()
    lines: list[str] = []

    def options(output: Path, **extra) -> AdaptOptions:
        return AdaptOptions(kb_path=str(small_kb), output=str(output), batch_size=4, max_steps=2, seed=3, **extra)

    straight = adapt_model(cfg, options(tmp_path / "a"), say=lines.append)
    assert straight.record["steps"] == 2 and not straight.already_done
    assert any("estimated training time" in line for line in lines)

    class Crash(TrainerCallback):
        def on_save(self, _args, _state, _control, **kwargs):
            raise RuntimeError("killed after the first checkpoint")

    with pytest.raises(RuntimeError, match="killed"):
        adapt_model(cfg, options(tmp_path / "b", callbacks=[Crash()]), say=lines.append)
    assert not (tmp_path / "b").exists()  # nothing at the announced folder until the model is complete
    assert (tmp_path / "b.partial" / CHECKPOINTS / "checkpoint-1").is_dir()
    lines.clear()
    resumed = adapt_model(cfg, options(tmp_path / "b"), say=lines.append)
    assert any("resuming from" in line and "checkpoint-1" in line for line in lines), lines
    assert resumed.record["resumed_from"] == "checkpoint-1"
    assert not (tmp_path / "b" / CHECKPOINTS).exists() and not (tmp_path / "b.partial").exists()
    assert _same_weights(tmp_path / "a", tmp_path / "b")  # same seed, resumed or not: the same model

    again = adapt_model(cfg, options(tmp_path / "a"), say=lines.append)
    assert again.already_done

    card = (tmp_path / "a" / "README.md").read_text(encoding="utf-8")
    assert str(small_kb.resolve()) in card and straight.record["settings"]["kb_fingerprint"] in card
    assert "| seed | 3 |" in card and "first sentence -> rest" in card

    model_cfg = make_config(f"kb.path={small_kb}", f"embedder.model={tmp_path / 'a'}")
    assert index_fingerprint(model_cfg) != index_fingerprint(make_config(f"kb.path={small_kb}"))
    _sweep_base_against_adapted(small_kb, tmp_path / "a", tmp_path / "sweep-state")


def _sweep_base_against_adapted(kb: Path, model: Path, state: Path) -> None:
    """`knowledge eval -m embedder.model=BASE,DIR`: both models in one run, each indexed into its own folder."""
    from pipelines.evaluation.run import load_queries
    from pipelines.tuning.sweep import run_sweep

    sources = {str(p.relative_to(kb)) for p in kb.rglob("*.md")}
    lines = (EVAL_DIR / "sample-kb.jsonl").read_text(encoding="utf-8").splitlines()
    chosen = [line for line in lines if line.strip() and set(json.loads(line)["relevant"]) <= sources][:3]
    assert chosen
    queries_file = state.parent / "queries.jsonl"
    queries_file.write_text("\n".join(chosen) + "\n", encoding="utf-8")
    result = run_sweep(
        [f"embedder.model=packaged:all-MiniLM-L6-v2,{model}", f"paths.state_dir={state}", "mlflow=off"],
        load_queries(str(queries_file)),
        str(queries_file),
        kb_path=str(kb),
    )
    assert [trial.swept for trial in result.trials] == [
        ["embedder.model=packaged\\:all-MiniLM-L6-v2"],
        [f"embedder.model={model}"],
    ]
    assert all(trial.metrics["answerable"] == len(chosen) for trial in result.trials)
    assert len(list((state / "sweep-index").iterdir())) == 2  # each model indexed into its own folder


def test_a_model_trained_again_into_the_same_folder_changes_the_index_fingerprint(make_config, tmp_path):
    from pipelines.config.manifest import index_fingerprint

    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "adapt.json").write_text('{"train_seconds": 1}', encoding="utf-8")
    first = index_fingerprint(make_config(f"embedder.model={folder}"))
    (folder / "adapt.json").write_text('{"train_seconds": 2}', encoding="utf-8")
    assert index_fingerprint(make_config(f"embedder.model={folder}")) != first
    assert "@" not in index_fingerprint(make_config())  # the packaged model's fingerprint is unchanged


def test_the_verdicts_held_out_anchors_never_train(sample_pairs):
    from pipelines.adapt.split import QUERY_KINDS, split_held_out
    from pipelines.adapt.verdict import kb_queries

    split = split_held_out(sample_pairs, seed=0, limit=20)
    assert len(split.held_out) == 20 and split.held_out == split_held_out(sample_pairs, seed=0, limit=20).held_out
    assert split.held_out != split_held_out(sample_pairs, seed=1, limit=20).held_out
    held = {anchor for anchor, _ in split.held_out}
    training = split.training.pairs
    assert training and not any(pair.anchor in held for pair in training)  # no pair of any kind trains on them
    assert len(training) < len(sample_pairs.pairs) and set(training) < set(sample_pairs.pairs)
    assert all(pair.kind in QUERY_KINDS for pair in sample_pairs.pairs if pair.anchor in held)
    queries = kb_queries(split.held_out)
    assert [(q.query, q.relevant) for q in queries] == [(a, {s}) for a, s in split.held_out]
