"""
Damaged state, through CLI children: a truncated L0 index is named in one line with what to do
(exit 2), and `knowledge index` writes it again; a Milvus Lite collection that cannot load is
named with what to do, and `knowledge index --rebuild` removes it and indexes again; a read-only
state folder is named as read-only.
"""

import shutil
import subprocess

import pytest

from tests.helpers import REPO, child_env, cli_command, run_cli, stderr_lines
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


@pytest.fixture(scope="module")
def small_state_template(tmp_path_factory):
    """A one-document knowledge base indexed once for the module (Milvus Lite); the tests damage copies."""
    root = tmp_path_factory.mktemp("small-state")
    kb = root / "kb"
    kb.mkdir()
    (kb / "disk.md").write_text("# Disk full\n\nWhen the disk is almost full, rotate the old logs.\n", encoding="utf-8")
    state = root / "state"
    done = run_cli("index", "--kb", str(kb), f"paths.state_dir={state}", "mlflow=off")
    assert done.returncode == 0, done.stderr
    return kb, state


@pytest.fixture
def small_state(small_state_template, tmp_path):
    """The module's indexed state copied into the test's own folder (its knowledge base is only read)."""
    kb, template = small_state_template
    state = tmp_path / "state"
    shutil.copytree(template, state)
    return kb, state


def _damage_manifest(collection):
    for name in ("manifest.json", "manifest.json.prev"):
        (collection / name).write_text("garbage{", encoding="utf-8")
    return "neither copy of its manifest loads"


def _damage_data(collection):
    [data] = collection.glob("partitions/*/data/*.parquet")
    data.write_bytes(b"garbage" * (data.stat().st_size // 7 + 1))
    return f"its data file {data} is not Parquet"


@pytest.mark.parametrize("damage", [_damage_manifest, _damage_data], ids=["manifest", "data"])
def test_a_damaged_milvus_lite_collection_is_named_and_index_rebuild_recovers(small_state, damage):
    kb, state = small_state
    collection = state / "milvus.db" / "collections" / "knowledge"
    reason = damage(collection)
    overrides = [f"paths.state_dir={state}", "mlflow=off"]
    for broken in (
        run_cli("lookup", "--compact", "disk almost full", *overrides),
        run_cli("index", "--kb", str(kb), *overrides),
    ):
        assert broken.returncode == 1
        assert "Traceback" not in broken.stderr
        [line] = stderr_lines(broken)
        assert f"the Milvus Lite collection {collection} is damaged ({reason})" in line
        assert "run `knowledge index --rebuild`" in line
    rebuilt = run_cli("index", "--rebuild", "--kb", str(kb), *overrides)
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert f"Removed the damaged Milvus Lite collection {collection}" in rebuilt.stderr
    again = run_cli("lookup", "--compact", "disk almost full", *overrides)
    assert again.returncode == 0 and '"found": true' in again.stdout, again.stderr


def test_a_milvus_lite_db_replaced_by_a_file_is_named_and_index_rebuild_moves_it_aside(small_state):
    kb, state = small_state
    db = state / "milvus.db"
    shutil.rmtree(db)
    db.write_text("not a Milvus Lite database\n", encoding="utf-8")
    overrides = [f"paths.state_dir={state}", "mlflow=off"]
    for broken in (
        run_cli("lookup", "--compact", "disk almost full", *overrides),
        run_cli("index", "--kb", str(kb), *overrides),
    ):
        assert broken.returncode == 1
        [line] = stderr_lines(broken)
        assert f"the Milvus Lite database {db} is damaged (a file, not the folder" in line
        assert "run `knowledge index --rebuild`" in line
    rebuilt = run_cli("index", "--rebuild", "--kb", str(kb), *overrides)
    assert rebuilt.returncode == 0, rebuilt.stderr
    [aside] = state.glob("milvus.db.damaged-*")
    assert aside.read_text(encoding="utf-8") == "not a Milvus Lite database\n"  # kept, not deleted
    assert f"Moved the damaged Milvus Lite database {db} (a file, not a folder) aside to {aside}" in rebuilt.stderr
    again = run_cli("lookup", "--compact", "disk almost full", *overrides)
    assert again.returncode == 0 and '"found": true' in again.stdout, again.stderr


def read_only_mount_command(folder, *args: str) -> list[str]:
    """`knowledge ARGS` in a mount namespace where `folder` is a read-only bind mount (root bypasses chmod)."""
    mount = 'mount --bind "$0" "$0" && mount -o remount,ro,bind "$0" "$0" && exec "$@"'
    return ["unshare", "-m", "sh", "-c", mount, str(folder), *cli_command(*args)]


def test_a_read_only_state_folder_is_named_as_read_only(small_state, tmp_path):
    kb, state = small_state
    if shutil.which("unshare") is None:
        pytest.skip("unshare (util-linux) is needed for a read-only mount")
    overrides = [f"paths.state_dir={state}", "mlflow=off"]
    probe = subprocess.run(read_only_mount_command(state, "--help"), capture_output=True, text=True, env=child_env())
    if probe.returncode != 0:
        pytest.skip(f"no mount namespace here: {probe.stderr.strip()[:200]}")
    beside = [f"trace.db_url=sqlite:///{tmp_path / 'traces.db'}"]  # a trace database elsewhere, or in the folder
    for args, trace in (
        (["lookup", "--compact", "disk almost full"], beside),
        (["lookup", "--compact", "disk almost full"], []),
        (["index", "--kb", str(kb)], beside),
    ):
        done = subprocess.run(
            read_only_mount_command(state, *args, *overrides, *trace),
            cwd=REPO,
            capture_output=True,
            text=True,
            env=child_env(),
            timeout=300,
        )
        assert done.returncode == 1, done.stderr
        [line] = stderr_lines(done)  # the trace record lost with it is said on the same line
        assert f"{state / 'milvus.db'} is read-only" in line and "give paths.state_dir a writable folder" in line


def test_damaged_l0_summary_vectors_are_named_and_knowledge_index_repairs_them(small_state):
    kb, state = small_state
    vectors = state / "knowledge.l0.summaries.npy"
    assert vectors.is_file()
    vectors.write_bytes(b"\x93NUMPY garbage over the summary vectors" * 4)
    overrides = [f"paths.state_dir={state}", "mlflow=off"]
    broken = run_cli("lookup", "--compact", "disk almost full", *overrides)
    assert broken.returncode == 2, broken.stderr
    [line] = stderr_lines(broken)
    assert f"the L0 summary vectors {vectors} are damaged" in line and "run `knowledge index`" in line
    repaired = run_cli("index", "--kb", str(kb), *overrides)
    assert repaired.returncode == 0, repaired.stderr
    again = run_cli("lookup", "--compact", "disk almost full", *overrides)
    assert again.returncode == 0 and '"found": true' in again.stdout, again.stderr


def test_traces_list_on_a_read_only_state_folder_names_it_read_only(small_state):
    _, state = small_state
    if shutil.which("unshare") is None:
        pytest.skip("unshare (util-linux) is needed for a read-only mount")
    overrides = [f"paths.state_dir={state}", "mlflow=off"]
    recorded = run_cli("lookup", "--compact", "disk almost full", *overrides)
    assert recorded.returncode == 0 and (state / "traces.db").is_file(), recorded.stderr
    done = subprocess.run(
        read_only_mount_command(state, "traces", "list", *overrides),
        cwd=REPO,
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=300,
    )
    if "unshare" in done.stderr and done.returncode not in (1, 2):
        pytest.skip(f"no mount namespace here: {done.stderr.strip()[:200]}")
    assert done.returncode == 1, done.stderr
    [line] = stderr_lines(done)
    assert f"the trace database {state / 'traces.db'} cannot be opened: its folder {state} is read-only" in line


def test_l0_summary_vectors_of_another_dimension_are_named_and_knowledge_index_repairs_them(small_state):
    """Another model's summaries (768-d) beside a 384-d index: one line with both dimensions, not numpy's shape error."""
    import numpy as np

    kb, state = small_state
    vectors = state / "knowledge.l0.summaries.npy"
    rows = len(np.load(vectors))
    wide = np.random.default_rng(0).normal(size=(rows, 768)).astype(np.float32)
    np.save(vectors, wide / np.linalg.norm(wide, axis=1, keepdims=True))
    overrides = [f"paths.state_dir={state}", "mlflow=off"]
    broken = run_cli("lookup", "--compact", "disk almost full", *overrides)
    assert broken.returncode == 1, broken.stderr  # found while looking up: a failed call, with its trace row
    [line] = stderr_lines(broken)
    assert f"the L0 summary vectors {vectors} are 768-d, the query embedding 384-d" in line, line
    assert "run `knowledge index" in line
    repaired = run_cli("index", "--kb", str(kb), *overrides)
    assert repaired.returncode == 0, repaired.stderr
    assert np.load(vectors).shape == (rows, 384)
    again = run_cli("lookup", "--compact", "disk almost full", *overrides)
    assert again.returncode == 0 and '"found": true' in again.stdout, again.stderr
