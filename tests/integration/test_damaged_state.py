"""
Damaged state, through CLI children: a truncated L0 index is named in one line with what to do
(exit 2), and `knowledge index` writes it again.
"""

from tests.helpers import REPO, run_cli, stderr_lines
from tests.integration.serving_helpers import copy_state


def test_a_truncated_l0_index_is_named_and_knowledge_index_repairs_it(served_index, tmp_path_factory):
    state = copy_state(served_index, tmp_path_factory, "damaged-l0")
    index_file = state / "knowledge.l0.json"
    text = index_file.read_text(encoding="utf-8")
    index_file.write_text(text[: len(text) // 2], encoding="utf-8")  # cut mid-file, as a crash would
    overrides = [f"paths.state_dir={state}", "mlflow=off"]
    broken = run_cli("lookup", "--compact", "disk almost full", *overrides)
    assert broken.returncode == 2
    [line] = stderr_lines(broken)
    assert f"the L0 index {index_file} is damaged" in line and "run `knowledge index`" in line
    repaired = run_cli("index", "--kb", str(REPO / "knowledge"), *overrides, timeout=900)
    assert repaired.returncode == 0, repaired.stderr
    again = run_cli("lookup", "--compact", "disk almost full", *overrides)
    assert again.returncode == 0, again.stderr


def test_a_damaged_milvus_lite_collection_is_one_line_without_a_traceback(served_index, tmp_path_factory):
    state = copy_state(served_index, tmp_path_factory, "damaged-milvus")
    collection = state / "milvus.db" / "collections" / "knowledge"
    for name in ("manifest.json", "manifest.json.prev"):
        (collection / name).write_text("garbage{", encoding="utf-8")
    done = run_cli("lookup", "--compact", "disk almost full", f"paths.state_dir={state}", "mlflow=off")
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    [line] = stderr_lines(done)
    assert str(collection) in line
