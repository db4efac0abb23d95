"""
README.md is a front page: under 300 lines, and every shell command in it works. Each fenced
shell command is either run here, as written (a small copy of knowledge/ stands in for
`~/runbooks`; state, traces and MLflow are kept in temporary folders), or named in COVERED with
the test that runs it. A command in neither list fails, and so does an entry no longer in the README.
"""

import json
import re
import shlex
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from pipelines.cli import main
from tests.conftest import REPO, SAMPLE_KB

README = REPO / "README.md"
MAX_LINES = 300
SHELL_LANGUAGES = {"bash", "sh", "shell", "console"}
FENCE = re.compile(r"^```(\S*)\n(.*?)^```", re.M | re.S)
COMMENT = re.compile(r"\s+#\s.*$")

DISK_QUERY = "disk almost full on a worker node"
AGENT_IDS = ("citations", "invocationId")
OWN_KB_DOCUMENTS = (
    "disk/disk-full.md",
    "disk/inode-exhaustion.md",
    "database/postgresql-replication-lag.md",
    "cpu/runaway-process.md",
)

# Commands run elsewhere: the test that runs each (a server on a free loopback port).
COVERED = {
    "make test": "tests/test_readme.py::test_make_targets_are_the_scripts_the_readme_names",
    "make adapt KB=~/runbooks": "tests/test_readme.py::test_make_targets_are_the_scripts_the_readme_names",
    "knowledge adapt --kb ~/runbooks --labels labels.jsonl --labels-only --epochs 2": (
        "tests/pipelines/adapt/test_adapt_labels.py::test_adapt_with_labels_trains_on_them_and_judges_on_the_held_out_ones"
    ),
    "knowledge index --kb ~/runbooks --rebuild embedder.model=.knowledge/models/adapted-runbooks": (
        "tests/pipelines/adapt/test_adapt.py::test_adapt_trains_resumes_deterministically_and_serves_as_embedder_model"
    ),
    'knowledge lookup "disk almost full" embedder.model=.knowledge/models/adapted-runbooks': (
        "tests/pipelines/adapt/test_adapt.py::test_adapt_trains_resumes_deterministically_and_serves_as_embedder_model"
    ),
    "knowledge serve": "tests/integration/test_serve.py::test_lookup_returns_the_evidence_first_result_and_its_trace_row",
    "knowledge serve --mcp": "tests/integration/test_serve_mcp.py::test_call_tool_returns_evidence",
    "curl -s http://127.0.0.1:1416/lookup_knowledge/run -H 'Content-Type: application/json' "
    """-d '{"query": "disk almost full on a worker node"}'""": (
        "tests/integration/test_serve.py::test_the_served_body_is_exactly_what_knowledge_lookup_prints"
    ),
    f'knowledge lookup --url http://127.0.0.1:1416 "{DISK_QUERY}"': (
        "tests/integration/test_serve.py::test_lookup_url_asks_the_server_and_a_local_lookup_says_what_to_do"
    ),
}


def readme_blocks(text: str) -> list[tuple[str, str]]:
    """The fenced blocks of a markdown text: (language, body)."""
    return [(match.group(1), match.group(2)) for match in FENCE.finditer(text)]


def shell_commands(text: str) -> list[str]:
    """The commands of the shell blocks, continuation lines joined, comments and extra spaces dropped."""
    commands = []
    for language, body in readme_blocks(text):
        if language in SHELL_LANGUAGES:
            for line in body.replace("\\\n", " ").splitlines():
                command = " ".join(COMMENT.sub("", line).split())
                if command:
                    commands.append(command)
    return commands


def _json(out: str) -> dict:
    return json.loads(out)


def _agent_view_cites_disk_full(out: str) -> None:
    result = _json(out)
    assert set(result) == {"found", "evidenceStatus", "relevanceLevel", "completenessHint", "context", *AGENT_IDS}
    assert result["found"] is True and result["citations"][0]["source"] == "disk/disk-full.md"


def _eval_table(out: str) -> None:
    assert [line.split()[0] for line in out.splitlines() if line.split()[:1] in (["pipeline"], ["dense"])] == [
        "pipeline",
        "dense",
    ]


def _built_guard(out: str) -> None:
    assert out.startswith("kept ") and "services the knowledge base never mentions" in out


def _sweep_of_three(out: str) -> None:
    assert [t for t in ("0.3", "0.35", "0.4") if f"retrieval.evidence_threshold={t} " in out] == ["0.3", "0.35", "0.4"]
    assert "guard in effect: built (" in out and "no_evidence_rate@built>=" in out
    assert any(line.startswith(("keep the current settings: ", "best setting: ")) for line in out.splitlines())


def _ab_table(out: str) -> None:
    assert "A = (defaults); B = retrieval.evidence_threshold=0.45" in out and "hit@1" in out
    # The default guard does not fit knowledge/ (it covers MySQL, Redis, Kafka): left out and named, not "broken".
    assert "guard offtopic-alerts left out: the knowledge base answers its texts" in out and "breaks" not in out


def _rerun_of_the_recorded_lookup(out: str) -> None:
    assert out.startswith("reran 1 recorded lookups")
    assert "guard offtopic-alerts left out" in out


def _nothing_changed(out: str) -> None:
    assert "added 0, updated 0, unchanged 36," in out


def _indexed_four(out: str) -> None:
    assert "added 4," in out


def _status_names_the_kb(kb: Path) -> Callable[[str], None]:
    def check(out: str) -> None:
        assert str(kb) in out

    return check


def _finds_replication_lag(out: str) -> None:
    result = _json(out)
    assert result["found"] is True
    assert result["evidenceBlocks"][0]["source"] == "database/postgresql-replication-lag.md"


# Commands this module runs on the bundled knowledge base (indexed once per session), in README order.
ON_THE_SAMPLE_KB = {
    f'knowledge lookup --view agent "{DISK_QUERY}"': _agent_view_cites_disk_full,
    "knowledge eval --queries eval/sample-kb.jsonl": _eval_table,
    "knowledge guard build": _built_guard,
    "knowledge eval --queries eval/sample-kb.jsonl -m retrieval.evidence_threshold=0.3,0.35,0.4 guard=built": (
        _sweep_of_three
    ),
    'knowledge compare --queries eval/sample-kb.jsonl --a "" --b "retrieval.evidence_threshold=0.45"': _ab_table,
    "knowledge traces rerun retrieval.evidence_threshold=0.45": _rerun_of_the_recorded_lookup,
}
# Commands this module runs on a knowledge base of the user's own (`~/runbooks`), in README order.
ON_AN_OWN_KB = (
    "knowledge index --kb ~/runbooks",
    "knowledge index --status",
    'knowledge lookup "the standby is falling behind the primary"',
)
RUN = {"make demo", *ON_THE_SAMPLE_KB, *ON_AN_OWN_KB}


def test_the_readme_is_a_front_page_under_300_lines():
    assert len(README.read_text(encoding="utf-8").splitlines()) < MAX_LINES


def test_every_fenced_block_names_its_language():
    """A block without a language could hold a command this test would not see."""
    assert all(language for language, _ in readme_blocks(README.read_text(encoding="utf-8")))


def test_every_readme_command_is_run_here_or_covered_by_a_named_test():
    commands = shell_commands(README.read_text(encoding="utf-8"))
    assert [c for c in commands if c not in RUN and c not in COVERED] == []
    assert sorted(set(RUN) | set(COVERED)) == sorted(set(commands)), "an entry that is no longer in the README"
    assert not set(RUN) & set(COVERED)


@pytest.mark.parametrize("command", sorted(COVERED))
def test_each_covering_test_exists(command):
    path, name = COVERED[command].split("::")
    assert re.search(rf"^def {name}\(", (REPO / path).read_text(encoding="utf-8"), re.M), COVERED[command]


def test_shell_commands_join_continuations_and_drop_comments():
    text = "```bash\nknowledge serve   # REST\ncurl -s URL \\\n     -d '{}'\n```\n```json\n{\"a\": 1}\n```\n"
    assert shell_commands(text) == ["knowledge serve", "curl -s URL -d '{}'"]


def test_make_targets_are_the_scripts_the_readme_names():
    """`make demo` runs scripts/demo.sh, `make test` scripts/test.sh, which sets up, lints and runs pytest."""
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    assert re.search(r"^demo:.*\n\tscripts/demo\.sh$", makefile, re.M)
    assert re.search(r"^test:.*\n\tscripts/test\.sh$", makefile, re.M)
    assert re.search(
        r"^adapt:.*\n\tscripts/setup\.sh && \.venv/bin/knowledge adapt \$\(if \$\(KB\),--kb \$\(KB\)\)", makefile, re.M
    )
    test_script = (REPO / "scripts" / "test.sh").read_text(encoding="utf-8")
    assert "scripts/setup.sh" in test_script and "scripts/lint.sh" in test_script
    assert test_script.rstrip().splitlines()[-1].startswith("exec .venv/bin/python -m pytest")


def _knowledge(command: str, *overrides: str) -> list[str]:
    """The arguments of a README `knowledge ...` command, with the test's overrides after them."""
    argv = shlex.split(command)
    assert argv[0] == "knowledge", command
    return [*argv[1:], *overrides]


def _run(argv: list[str], capsys, check: Callable[[str], None]) -> None:
    capsys.readouterr()
    assert main(argv) == 0, f"knowledge {shlex.join(argv)}: {capsys.readouterr().err}"
    check(capsys.readouterr().out)


@pytest.fixture
def sample_overrides(sample_cfg, tmp_path, monkeypatch) -> list[str]:
    """The session's index of knowledge/, with traces of this test's own; run from the project folder."""
    monkeypatch.chdir(REPO)
    trace = [f"trace.db_url=sqlite:///{tmp_path}/traces.db", f"trace.spool_path={tmp_path}/spool.jsonl"]
    return [f"paths.state_dir={sample_cfg.paths.state_dir}", "mlflow=off", *trace]


def test_make_demo_indexes_knowledge_and_answers_its_example_query(sample_overrides, capsys):
    """scripts/demo.sh after its set-up: `knowledge index` (nothing changed since) and its example lookup."""
    lines = (REPO / "scripts" / "demo.sh").read_text(encoding="utf-8").splitlines()
    commands = [line.removeprefix(".venv/bin/") for line in lines if line.startswith(".venv/bin/knowledge ")]
    index, lookup = (c.replace(' "$@"', "") for c in commands)
    assert index == "knowledge index"
    _run(_knowledge(index, *sample_overrides), capsys, _nothing_changed)
    query = re.fullmatch(r'knowledge lookup "\$\{DEMO_QUERY:-(.+)\}"', lookup).group(1)
    _run(["lookup", query, *sample_overrides], capsys, _finds_replication_lag)


def test_the_sample_kb_commands_run_as_written(sample_overrides, capsys):
    for command, check in ON_THE_SAMPLE_KB.items():
        _run(_knowledge(command, *sample_overrides), capsys, check)


def test_the_own_kb_commands_run_as_written(tmp_path, monkeypatch, capsys):
    kb = tmp_path / "runbooks"
    for source in OWN_KB_DOCUMENTS:
        (kb / source).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(SAMPLE_KB / source, kb / source)
    monkeypatch.chdir(tmp_path)
    checks = (_indexed_four, _status_names_the_kb(kb), _finds_replication_lag)
    overrides = (f"paths.state_dir={tmp_path / 'state'}", "mlflow=off")
    for command, check in zip(ON_AN_OWN_KB, checks, strict=True):
        _run(_knowledge(command.replace("~/runbooks", str(kb)), *overrides), capsys, check)
