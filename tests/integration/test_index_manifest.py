"""
The state dir knows its knowledge base: indexing writes a manifest, `index` without `--kb`
re-indexes the manifest's knowledge base, another `--kb` needs `--rebuild`, `eval` refuses a
query set whose sources the index lacks, and a sweep over an index-time key re-indexes the
manifest's knowledge base. The commands run through the CLI's entry point in this process
(their exit statuses and one-line errors as a shell sees them are tested in test_cli_errors and
test_damaged_state).
"""

import json
import shutil

from pipelines.config.manifest import manifest_path, read_manifest
from tests.conftest import SAMPLE_KB
from tests.helpers import derived_config, ids_by_source, run_main, stderr_lines


def _sources(cfg) -> set[str]:
    return set(ids_by_source(cfg))


def _kb(root, *sources):
    for source in sources:
        target = root / source
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(SAMPLE_KB / source, target)
    return root


def test_index_without_kb_keeps_the_manifests_knowledge_base(tmp_path, index_kb, capsys):
    kb_a = _kb(tmp_path / "a", "disk/disk-full.md", "disk/inode-exhaustion.md")
    cfg, _ = index_kb(kb_a)
    manifest = read_manifest(cfg)
    assert manifest is not None and manifest.kb_path == str(kb_a.resolve()) and manifest.documents == 2
    assert manifest.index_config["chunking"]["max_tokens"] == cfg.chunking.max_tokens

    state = [f"paths.state_dir={cfg.paths.state_dir}", "mlflow=off"]
    # The configured kb.path is knowledge/: not what the index holds.
    result = run_main(capsys, "index", "--json", *state)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["unchanged"] == ["disk/disk-full.md", "disk/inode-exhaustion.md"]
    assert _sources(cfg) == {"disk/disk-full.md", "disk/inode-exhaustion.md"}


def test_index_of_another_kb_needs_rebuild(tmp_path, index_kb, capsys):
    kb_a = _kb(tmp_path / "a", "disk/disk-full.md")
    kb_b = _kb(tmp_path / "b", "cpu/runaway-process.md")
    cfg, _ = index_kb(kb_a)
    state = [f"paths.state_dir={cfg.paths.state_dir}", "mlflow=off"]

    refused = run_main(capsys, "index", "--kb", str(kb_b), *state)
    assert refused.returncode == 2
    [line] = stderr_lines(refused)
    assert str(kb_a.resolve()) in line and str(kb_b.resolve()) in line and "--rebuild" in line
    assert _sources(cfg) == {"disk/disk-full.md"}  # nothing removed

    rebuilt = run_main(capsys, "index", "--kb", str(kb_b), "--rebuild", *state)
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert _sources(cfg) == {"cpu/runaway-process.md"}
    assert read_manifest(cfg).kb_path == str(kb_b.resolve())


def test_index_status_prints_the_manifest_or_says_there_is_none(tmp_path, index_kb, capsys):
    kb_a = _kb(tmp_path / "a", "disk/disk-full.md")
    empty = run_main(capsys, "index", "--status", f"paths.state_dir={tmp_path / 'nothing'}", "mlflow=off")
    assert empty.returncode == 0 and "no index manifest" in empty.stdout

    cfg, _ = index_kb(kb_a)
    shown = run_main(capsys, "index", "--status", f"paths.state_dir={cfg.paths.state_dir}", "mlflow=off")
    assert shown.returncode == 0, shown.stderr
    assert str(kb_a.resolve()) in shown.stdout and "1 documents" in shown.stdout


def test_index_status_json_prints_the_manifest_as_json(tmp_path, index_kb, capsys):
    kb_a = _kb(tmp_path / "a", "disk/disk-full.md")
    empty = run_main(capsys, "index", "--status", "--json", f"paths.state_dir={tmp_path / 'nothing'}", "mlflow=off")
    assert empty.returncode == 0 and json.loads(empty.stdout)["indexed"] is False

    cfg, _ = index_kb(kb_a)
    shown = run_main(capsys, "index", "--status", "--json", f"paths.state_dir={cfg.paths.state_dir}", "mlflow=off")
    assert shown.returncode == 0, shown.stderr
    status = json.loads(shown.stdout)
    assert status["kb_path"] == str(kb_a.resolve()) and status["documents"] == 1 and status["edited"] is False
    assert status["manifest"] == str(manifest_path(cfg))


def test_a_hand_edited_manifest_kb_path_is_refused_like_another_kb(tmp_path, index_kb, capsys):
    kb_a = _kb(tmp_path / "a", "disk/disk-full.md")
    kb_b = _kb(tmp_path / "b", "cpu/runaway-process.md")
    cfg, _ = index_kb(kb_a)
    path = manifest_path(cfg)
    data = json.loads(path.read_text(encoding="utf-8"))
    path.write_text(json.dumps({**data, "kb_path": str(kb_b.resolve())}), encoding="utf-8")
    state = [f"paths.state_dir={cfg.paths.state_dir}", "mlflow=off"]

    refused = run_main(capsys, "index", *state)
    assert refused.returncode == 2
    [line] = stderr_lines(refused)
    assert str(path) in line and "edited" in line and "--rebuild" in line
    assert _sources(cfg) == {"disk/disk-full.md"}  # nothing indexed from the edited path, nothing removed

    rebuilt = run_main(capsys, "index", "--rebuild", "--kb", str(kb_a), *state)
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert not read_manifest(cfg).edited


def test_a_manifest_without_its_checksum_is_refused_like_a_hand_edited_one(tmp_path, index_kb, capsys):
    kb_a = _kb(tmp_path / "a", "disk/disk-full.md")
    kb_b = _kb(tmp_path / "b", "cpu/runaway-process.md")
    cfg, _ = index_kb(kb_a)
    path = manifest_path(cfg)
    data = json.loads(path.read_text(encoding="utf-8"))
    del data["checksum"]
    path.write_text(json.dumps({**data, "kb_path": str(kb_b.resolve())}), encoding="utf-8")
    state = [f"paths.state_dir={cfg.paths.state_dir}", "mlflow=off"]

    refused = run_main(capsys, "index", *state)
    assert refused.returncode == 2
    [line] = stderr_lines(refused)
    assert str(path) in line and "edited after indexing (its checksum is missing)" in line and "--rebuild" in line
    assert _sources(cfg) == {"disk/disk-full.md"}  # nothing indexed from the named folder, nothing removed
    status = run_main(capsys, "index", "--status", "--json", *state)
    assert json.loads(status.stdout)["edited"] is True


def test_a_manifest_written_before_checksums_indexes_as_before_and_gets_one(tmp_path, index_kb, capsys):
    kb_a = _kb(tmp_path / "a", "disk/disk-full.md")
    cfg, _ = index_kb(kb_a)
    path = manifest_path(cfg)
    data = json.loads(path.read_text(encoding="utf-8"))
    del data["checksum"]
    path.write_text(json.dumps({**data, "version": 1}), encoding="utf-8")  # the format before checksums

    result = run_main(capsys, "index", "--json", f"paths.state_dir={cfg.paths.state_dir}", "mlflow=off")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["unchanged"] == ["disk/disk-full.md"]
    rewritten = read_manifest(cfg)
    assert rewritten.checksum and not rewritten.edited and rewritten.version > 1


def test_a_state_dir_indexed_before_manifests_indexes_as_before_and_gets_one(tmp_path, index_kb, capsys):
    kb_a = _kb(tmp_path / "a", "disk/disk-full.md")
    cfg, _ = index_kb(kb_a)
    manifest_path(cfg).unlink()
    result = run_main(
        capsys, "index", "--json", f"kb.path={kb_a}", f"paths.state_dir={cfg.paths.state_dir}", "mlflow=off"
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["unchanged"] == ["disk/disk-full.md"]
    assert read_manifest(cfg).kb_path == str(kb_a.resolve())


def test_a_state_dir_indexed_before_manifests_refuses_a_kb_that_shares_no_document(tmp_path, index_kb, capsys):
    kb_a = tmp_path / "a"
    (kb_a / "ops").mkdir(parents=True)
    (kb_a / "ops" / "rotate-logs.md").write_text("# Rotate logs\n\nRotate the service logs daily.\n", encoding="utf-8")
    kb_b = _kb(tmp_path / "b", "cpu/runaway-process.md")
    cfg, _ = index_kb(kb_a)
    manifest_path(cfg).unlink()
    state = [f"paths.state_dir={cfg.paths.state_dir}", "mlflow=off"]
    for refused in (
        run_main(capsys, "index", "--kb", str(kb_b), *state),
        run_main(capsys, "index", *state),
    ):  # b, then knowledge/
        assert refused.returncode == 2
        [line] = stderr_lines(refused)
        assert "indexed before manifests" in line and "none of them in" in line
    assert _sources(cfg) == {"ops/rotate-logs.md"}


def test_eval_refuses_a_query_set_whose_sources_are_not_indexed(sample_cfg, tmp_path, capsys):
    queries = tmp_path / "runbooks.jsonl"
    rows = [
        {"query": "disk almost full", "relevant": ["disk/disk-full.md"], "kind": "answerable"},
        {"query": "alertmanager cluster down", "relevant": ["alertmanager/AlertmanagerClusterDown.md"]},
        {"query": "prometheus target down", "relevant": ["general/TargetDown.md", "general/Watchdog.md"]},
    ]
    queries.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    result = run_main(
        capsys,
        "eval",
        "--queries",
        str(queries),
        "--no-baselines",
        f"paths.state_dir={sample_cfg.paths.state_dir}",
        "mlflow=off",
    )
    assert result.returncode == 2
    # When another process holds the session's Lite db, eval first says it reads a snapshot copy; the error is one line.
    *notes, line = stderr_lines(result)
    assert all("reading a snapshot copy" in note for note in notes)
    assert "3 of 4 relevant sources" in line and "alertmanager/AlertmanagerClusterDown.md" in line


def test_a_sweep_over_chunking_reindexes_the_manifests_knowledge_base(tmp_path, index_kb, capsys):
    from pipelines.evaluation.metrics import EvalQuery
    from pipelines.tuning.sweep import run_sweep

    kb_a = _kb(tmp_path / "a", "disk/disk-full.md", "cpu/runaway-process.md")
    cfg, _ = index_kb(kb_a)
    said: list[str] = []
    queries = [EvalQuery("disk almost full on a worker node", {"disk/disk-full.md"}, "answerable")]
    overrides = [f"paths.state_dir={cfg.paths.state_dir}", "mlflow=off", "chunking.max_tokens=120,200"]
    result = run_sweep(overrides, queries, "q", say=said.append)  # kb.path stays knowledge/: the manifest wins
    reindexed = [line for line in said if "re-indexing" in line]  # the rest: a line per combination
    assert len(reindexed) == 2 and all(str(kb_a.resolve()) in line for line in reindexed)
    assert all(trial.metrics["hit@1"] == 1.0 for trial in result.trials)
    combination = derived_config(cfg, "chunking.max_tokens=120", *_redirect(cfg, "chunking.max_tokens=120"))
    assert read_manifest(combination).kb_path == str(kb_a.resolve())


def _redirect(cfg, *combination):
    from pipelines.tuning.sweep import index_redirect

    return index_redirect(list(combination), cfg.paths.state_dir)
