"""
The README's tuning commands, as written, on a knowledge base of the user's own that covers the
services of the shipped guard (MySQL, Redis, Kafka): that guard does not fit it, so it is left out
and named, every command ends with its verdict and exit 0, and `knowledge guard build` writes one
that fits.
"""

import json
import shlex
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.helpers import run_main
from tests.test_readme import ON_THE_SAMPLE_KB

pytestmark = pytest.mark.integration

RUNBOOKS = {
    "mysql-replica-lag.md": (
        "MySQL Replica Lag",
        "database",
        "The MySQL replica falls behind its primary; Seconds_Behind_Master grows.",
        "Check the replica's SQL thread, long transactions on the primary and the network between them.",
    ),
    "redis-down.md": (
        "Redis Instance Down",
        "cache",
        "The Redis instance does not answer PING; clients log connection refused.",
        "Restart the Redis service, check its memory limit and the persistence files.",
    ),
    "kafka-consumer-lag.md": (
        "Kafka Consumer Group Lag",
        "queues",
        "A Kafka consumer group is many messages behind on its topic.",
        "Scale the consumers, check for a rebalance loop and slow processing.",
    ),
    "postgres-connections.md": (
        "PostgreSQL Too Many Connections",
        "database",
        "PostgreSQL refuses clients: sorry, too many clients already.",
        "Put a pooler in front, lower the pool sizes and end idle sessions.",
    ),
}
QUERIES = [
    ("mysql replica is 300 seconds behind the primary", "mysql-replica-lag.md"),
    ("redis does not answer ping", "redis-down.md"),
    ("kafka consumers are lagging on the topic", "kafka-consumer-lag.md"),
    ("postgres says too many clients already", "postgres-connections.md"),
]
# Off-topic for the fixture knowledge base, but near enough to it that the default settings answer most.
NEAR_OFF_TOPIC = [
    "mysql replica lag on the analytics cluster after the upgrade",
    "redis memory limit reached, evictions rising",
    "kafka topic retention too short",
    "postgres vacuum takes hours",
    "restart the redis service after an OOM",
    "the kafka consumers rebalance in a loop",
    "How do I bake bread",
    "mysql primary refuses connections",
    "elasticsearch cluster is red",
    "nginx returns 502",
]
VERDICTS = ("keep the current settings: ", "best setting: ", "B is better", "B is worse", "no detectable difference")


def _write_kb(folder):
    folder.mkdir(parents=True)
    for name, (title, category, symptom, mitigation) in RUNBOOKS.items():
        text = f"---\ncategory: {category}\n---\n# {title}\n## Symptoms\n{symptom}\n## Mitigation\n{mitigation}\n"
        (folder / name).write_text(text, encoding="utf-8")
    return folder


@pytest.fixture
def own_kb(tmp_path, monkeypatch, capsys):
    kb = _write_kb(tmp_path / "kb")
    queries = tmp_path / "queries.jsonl"
    rows = [{"query": q, "relevant": [source], "kind": "answerable"} for q, source in QUERIES]
    queries.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    overrides = [f"paths.state_dir={tmp_path / 'state'}", "mlflow=off"]
    monkeypatch.chdir(REPO)
    assert run_main(capsys, "index", "--kb", str(kb), *overrides).returncode == 0
    return kb, str(queries), overrides


def _readme(command: str, queries: str, overrides: list[str]) -> list[str]:
    argv = shlex.split(command.replace("eval/sample-kb.jsonl", queries))
    return [*argv[1:], *overrides]


def _verdict_lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith(VERDICTS)]


def test_the_readme_tuning_commands_end_with_a_verdict_on_a_kb_that_covers_the_default_guard(own_kb, capsys):
    _, queries, overrides = own_kb
    assert run_main(capsys, "lookup", "redis does not answer ping", *overrides).returncode == 0  # one recorded lookup
    commands = [c for c in ON_THE_SAMPLE_KB if " -m " in c or " compare " in c or " rerun " in c]
    sweep = next(c for c in commands if " -m " in c)
    default_guard_sweep = sweep.replace(" guard=built", "")
    for command in [default_guard_sweep, *commands[1:]]:
        done = run_main(capsys, *_readme(command, queries, overrides))
        assert done.returncode == 0 and "error:" not in done.stderr, (command, done.stderr)
        assert "guard offtopic-alerts left out: the knowledge base answers its texts" in done.stdout, command
        assert "knowledge guard build --kb DIR" in done.stdout
        if " rerun " not in command:
            assert len(_verdict_lines(done.stdout)) == 1, (command, done.stdout)

    built = run_main(capsys, "guard", "build", *overrides)
    assert built.returncode == 0 and "MySQL" not in built.stdout.splitlines()[1], built.stdout
    swept = run_main(capsys, *_readme(sweep, queries, overrides))
    assert swept.returncode == 0 and "guard in effect: built (" in swept.stdout, swept.stdout
    assert len(_verdict_lines(swept.stdout)) == 1


def test_a_search_holds_each_set_to_what_the_current_settings_get_on_this_knowledge_base(own_kb, tmp_path, capsys):
    _, queries, overrides = own_kb
    mixed = tmp_path / "mixed.jsonl"
    rows = [json.loads(line) for line in Path(queries).read_text(encoding="utf-8").splitlines()]
    rows += [{"query": q, "relevant": [], "kind": "off_topic"} for q in NEAR_OFF_TOPIC]
    mixed.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    argv = ["eval", "--queries", str(mixed), "--search", "thresholds", "--trials", "2", "--seed", "0", *overrides]
    done = run_main(capsys, *argv)
    assert done.returncode == 0 and "error:" not in done.stderr, done.stderr
    lines = done.stdout.splitlines()
    (bounds,) = [line for line in lines if line.startswith("bounds on mixed: ")]
    rejected = float(bounds.split("no_evidence_rate ")[1].split(",")[0])
    assert rejected < 0.95, bounds  # the absolute floor of 0.95 would leave nothing feasible here
    relative = bounds.split("relative: a setting must keep ")[1].split(", ")[0]
    assert relative.startswith("no_evidence_rate@mixed>="), bounds
    assert rejected - 0.011 <= float(relative.split(">=")[1]) < rejected, bounds  # guard.tolerance below the current
    assert bounds in done.stderr.splitlines()  # said before the first trial too
    (current,) = [line for line in lines if line.rstrip().endswith("(current)")]
    assert " yes " in current, done.stdout  # the current settings keep their own bounds
    (verdict,) = _verdict_lines(done.stdout)
    assert verdict == lines[-3] and verdict.startswith("keep the current settings: "), done.stdout
    assert relative in verdict and "no setting tried met the constraints" not in verdict, verdict

    floor = run_main(capsys, *argv, "--constraint", "no_evidence_rate>=0.95")  # an absolute floor, when one is wanted
    assert floor.returncode == 0, floor.stderr
    assert "absolute: no_evidence_rate>=0.95 (--constraint)" in floor.stdout
    kept = "keep the current settings: no setting tried met the constraints under no_evidence_rate>=0.95"
    assert kept in floor.stdout

    held = tmp_path / "held.jsonl"  # a held-out file: bounded too, but only the best and the defaults are scored on it
    held.write_text("".join(json.dumps(row) + "\n" for row in [*rows[:2], *rows[-3:]]), encoding="utf-8")
    apart = run_main(capsys, *argv[: -len(overrides)], "--holdout", str(held), *overrides)
    assert apart.returncode == 0, apart.stderr
    assert any(line.startswith("bounds on held: ") for line in apart.stdout.splitlines()), apart.stdout
    (current,) = [line for line in apart.stdout.splitlines() if line.rstrip().endswith("(current)")]
    assert " yes " in current, apart.stdout
    (verdict,) = _verdict_lines(apart.stdout)
    assert "no_evidence_rate@held>=" in verdict and "no setting tried" not in verdict, verdict


def test_a_small_guard_is_warned_about_in_an_ab(own_kb, tmp_path, capsys):
    _, queries, overrides = own_kb
    small = tmp_path / "small-guard.jsonl"
    texts = [f"how do I prune fruit tree number {n} in the orchard" for n in range(10)]
    small.write_text("".join(json.dumps({"query": t, "relevant": [], "kind": "off_topic"}) + "\n" for t in texts))
    done = run_main(
        capsys, "compare", "--queries", queries, "--b", "retrieval.evidence_threshold=0.45", *overrides,
        f"guard.sets=[{small}]",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "guard in effect: small-guard (" in done.stdout
    assert "warning: off-topic constraint no_evidence_rate@small-guard>=" in done.stdout
    assert "only 10 off-topic queries (fewer than guard.min_off_topic=20)" in done.stdout


def test_an_adapted_model_not_recommended_is_a_verdict_printed_once(own_kb, tmp_path, capsys):
    kb, _, overrides = own_kb
    guard = tmp_path / "guard.jsonl"
    guard.write_text("".join(json.dumps({"query": q, "relevant": []}) + "\n" for q in ("Nginx is down", "DNS fails")))
    output = tmp_path / "adapted"
    args = ["adapt", "--kb", str(kb), "--output", str(output), "--batch-size", "1", "--max-steps", "1"]
    done = run_main(capsys, *args, "--guard", str(guard), *overrides)
    assert done.returncode == 0 and "error:" not in done.stderr, done.stderr
    verdicts = [line for line in done.stdout.splitlines() if "recommended" in line and "stays" not in line]
    assert len(verdicts) == 1 and verdicts[0].startswith("Verdict: "), done.stdout
    if verdicts[0].startswith("Verdict: not recommended"):
        assert f"The adapted model stays in {output}, marked as not recommended in its card" in done.stdout


def test_an_evaluation_says_what_it_does_while_it_runs(own_kb, capsys, monkeypatch):
    _, queries, overrides = own_kb
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)  # a terminal: the progress is shown
    done = run_main(capsys, "eval", "--queries", queries, "--no-baselines", *overrides)
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert f"evaluating {queries}: 4 queries (the model loads first) ..." in lines and "  4/4" in lines
