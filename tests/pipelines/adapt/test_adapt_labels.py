"""`knowledge adapt --labels`: the train split makes pairs, the check split judges and never trains."""

import json
from pathlib import Path

import pytest

from pipelines.adapt.labels import chunk_text, label_pairs, split_labels
from pipelines.adapt.pairs import Pair, check_provenance, read_kb
from pipelines.labels.split import label_split, normalised_query
from tests.helpers import run_cli, run_main, stderr_lines

DISK, CPU = "disk/disk-full.md", "cpu/runaway-process.md"
TRAIN = {
    "no space left on device while writing logs": "disk/disk-full.md",
    "df -i shows 100% IUse on /data": "disk/inode-exhaustion.md",
    "standby is minutes behind the primary": "database/postgresql-replication-lag.md",
    "a process pegs the cpu at 100%": "cpu/runaway-process.md",
}
CHECK = {
    "disk almost full on node-7": "disk/disk-full.md",
    "inodes exhausted on /var": "disk/inode-exhaustion.md",
    "replica lag on postgres standby growing": "database/postgresql-replication-lag.md",
}
OFF_TOPIC = {"chess opening for beginners": "check", "best hiking boots for rain": "train"}


def _labels(folder: Path) -> Path:
    rows = [{"query": q, "relevant": [s], "kind": "answerable"} for q, s in {**TRAIN, **CHECK}.items()]
    rows += [{"query": q, "relevant": [], "kind": "off_topic"} for q in OFF_TOPIC]
    path = folder / "labels.jsonl"
    path.write_text("\n".join(json.dumps({"id": f"l{i}", **row}) for i, row in enumerate(rows)) + "\n")
    return path


def test_the_fixture_labels_lie_on_the_sides_the_tests_name():
    assert {label_split(q) for q in TRAIN} == {"train"} and {label_split(q) for q in CHECK} == {"check"}
    assert {q: label_split(q) for q in OFF_TOPIC} == OFF_TOPIC
    assert label_split("standby lags the primary") == "train"  # a train-side query the labels do not hold


def test_train_labels_become_pairs_with_the_leading_other_document_as_negative(small_kb, tmp_path):
    from sentence_transformers import SentenceTransformer

    from components.common.embedding_models import resolve_model

    labels = split_labels(_labels(tmp_path))
    assert {q.query for q in labels.train} == set(TRAIN)  # off-topic lines carry no positive
    assert {q.query for q in labels.check} == {*CHECK, "chess opening for beginners"}
    documents, chunks = read_kb(small_kb)
    pairs = label_pairs(labels.train, chunks, SentenceTransformer(resolve_model("packaged:all-MiniLM-L6-v2")))
    assert sorted(p.anchor for p in pairs) == sorted(TRAIN)
    for pair in pairs:
        assert pair.kind == "label" and pair.source == TRAIN[pair.anchor] and pair.negative_source != pair.source
    assert next(p for p in pairs if "IUse" in p.anchor).negative_source == "disk/disk-full.md"  # the sibling leads
    check_provenance(pairs, documents, labels.train_queries)


def test_a_check_split_query_in_training_is_refused(small_kb, tmp_path):
    labels = split_labels(_labels(tmp_path))
    documents, chunks = read_kb(small_kb)
    held_out = next(q for q in labels.check if q.answerable)
    with pytest.raises(AssertionError, match="check-split label query may not train"):
        label_pairs([held_out], chunks, encoder=None)
    train_query = next(iter(TRAIN))
    text, other = (chunk_text(next(c for c in chunks if c.meta["source"] == s)) for s in (DISK, CPU))

    def pair(kind: str, anchor: str) -> Pair:
        return Pair(kind, anchor, text, other, DISK, CPU)

    every_query = frozenset(normalised_query(q) for q in [*TRAIN, *CHECK])
    check_provenance([pair("label", train_query)], documents, labels.train_queries)
    with pytest.raises(AssertionError, match="check-split label query may not train"):
        check_provenance([pair("label", held_out.query)], documents, every_query)
    with pytest.raises(AssertionError, match="no query of the labels"):
        check_provenance([pair("label", "standby lags the primary")], documents, labels.train_queries)
    with pytest.raises(AssertionError, match="not found"):  # only a label pair may hold a label query
        check_provenance([pair("sentence", train_query)], documents, labels.train_queries)


def test_adapt_with_labels_trains_on_them_and_judges_on_the_held_out_ones(small_kb, make_config, tmp_path):
    """The smallest real training on label pairs alone, then the verdict on the labels' check split."""
    from pipelines.adapt.run import AdaptOptions, adapt_model
    from pipelines.adapt.verdict import LABELS_SET, NotRecommendedError

    guard = tmp_path / "guard.jsonl"
    guard.write_text("\n".join(json.dumps({"query": q, "relevant": []}) for q in ("Redis is down", "Kafka lag high")))
    output = tmp_path / "model"
    options = AdaptOptions(
        kb_path=str(small_kb),
        output=str(output),
        batch_size=2,
        max_steps=1,
        labels=str(_labels(tmp_path)),
        labels_only=True,
        calibrate=True,
        verdict=True,
        guard_sets=[str(guard)],
    )
    lines: list[str] = []
    try:
        adapt_model(make_config(), options, say=lines.append)
    except NotRecommendedError:
        pass
    record = json.loads((output / "adapt.json").read_text())
    assert record["settings"]["pairs"] == {"title": 0, "heading": 0, "sentence": 0, "label": len(TRAIN)}
    assert record["settings"]["labels"]["train"] == len(TRAIN) and record["settings"]["labels"]["check"] == 4
    judging = next(line for line in lines if line.startswith("Judging"))
    assert f"{LABELS_SET} (4)" in judging and "kb-pairs" not in judging
    verdict = json.loads((output / "calibration.json").read_text())["verdict"]
    assert {LABELS_SET, "guard"} <= set(verdict["scores"]["adapted"]) and "kb-pairs" not in verdict["scores"]["adapted"]
    scores = verdict["scores"]["base"][LABELS_SET]
    assert scores["hit_at_1"] is not None and scores["rejected"] is not None  # 3 answerable, 1 off-topic
    assert "labelled query -> its document's best chunk 4" in (output / "README.md").read_text()


def test_adapt_from_the_trace_store_trains_on_its_merged_labels(small_kb, tmp_path, capsys):
    """Labels imported into a trace store train as a file of them would, a contradicted query left out."""
    state = tmp_path / "state"
    overrides = (f"paths.state_dir={state}", "mlflow=off")
    contradicted = "a process pegs the cpu at 100%"
    other_view = tmp_path / "other.jsonl"
    other_view.write_text(json.dumps({"query": contradicted, "relevant": [DISK], "kind": "answerable"}) + "\n")
    for path, reviewer in ((_labels(tmp_path), "ana"), (other_view, "ben")):
        imported = run_main(capsys, "labels", "import", str(path), "--reviewer", reviewer, *overrides)
        assert imported.returncode == 0, imported.stderr
    guard = tmp_path / "guard.jsonl"
    guard.write_text(json.dumps({"query": "Redis is down", "relevant": []}) + "\n")
    output = tmp_path / "model"
    given = ("--kb", str(small_kb), "--output", str(output), "--guard", str(guard), "--batch-size", "2")
    adapted = run_main(capsys, "adapt", "--labels-from-store", "--labels-only", "--max-steps", "1", *given, *overrides)
    assert adapted.returncode in (0, 1), adapted.stderr  # 1: trained, but not recommended
    assert "1 contradicted queries left out" in adapted.stdout
    settings = json.loads((output / "adapt.json").read_text())["settings"]
    assert settings["pairs"]["label"] == len(TRAIN) - 1
    assert settings["labels"]["store"] == f"sqlite:///{state / 'traces.db'}" and "file" not in settings["labels"]
    assert settings["labels"]["check"] == 4
    assert "labels of the trace store `sqlite:///" in (output / "README.md").read_text()


def test_adapt_from_a_store_without_labels_is_one_clear_error(tmp_path, capsys):
    state = (f"paths.state_dir={tmp_path / 'state'}", "mlflow=off")
    missing = run_main(capsys, "adapt", "--labels-from-store", "--output", str(tmp_path / "model"), *state)
    assert missing.returncode == 2 and len(stderr_lines(missing)) == 1, missing.stderr
    assert "no trace database at" in missing.stderr
    with pytest.raises(SystemExit) as both:
        run_main(capsys, "adapt", "--labels-from-store", "--labels", "x.jsonl", *state)
    assert both.value.code == 2 and "not allowed with argument" in capsys.readouterr().err


def test_cli_refuses_labels_only_without_labels(tmp_path):
    result = run_cli("adapt", "--labels-only", "--output", str(tmp_path / "model"), "mlflow=off")
    assert result.returncode == 2
    lines = stderr_lines(result)
    assert len(lines) == 1 and "--labels-only needs --labels" in lines[0], result.stderr


def test_a_label_naming_no_document_of_the_knowledge_base_is_refused(small_kb):
    from components.errors import BadInputError
    from pipelines.evaluation.metrics import EvalQuery

    _, chunks = read_kb(small_kb)
    stray = EvalQuery(next(iter(TRAIN)), {"network/dns.md"}, "answerable", id="l9")
    with pytest.raises(BadInputError, match="label l9 names network/dns.md, no document of the knowledge base"):
        label_pairs([stray], chunks, encoder=None)
