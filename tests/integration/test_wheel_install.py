"""
A non-editable install runs from any folder: the wheel built from this checkout carries its config
(`conf/`, as `pipelines/conf`), its pipeline YAMLs and the hayhooks wrapper, and `knowledge index`
and `knowledge lookup` work from a folder that is not the repository.

The fresh venv gets only the wheel; its dependencies come from the project's venv through a
`.pth` line (read after the venv's own site-packages, so the installed `pipelines` wins, and the
editable finder of the project's venv is not activated by it).
"""

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.slow

SOURCES = ("pyproject.toml", "README.md", "components", "pipelines", "conf")


def _run(command: list, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"{command}: {result.stderr}"
    return result


def _build_wheel(tmp_path: Path) -> Path:
    """The wheel of a copy of the checkout (the build writes build/ and *.egg-info beside its sources)."""
    source = tmp_path / "source"
    source.mkdir()
    for name in SOURCES:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, source / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(REPO / name, source / name)
    dist = tmp_path / "dist"
    pip_wheel = ["-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(dist), str(source)]
    _run([sys.executable, *pip_wheel], cwd=tmp_path)
    (wheel,) = dist.glob("lookup_knowledge-*.whl")
    return wheel


def _venv_with(wheel: Path, tmp_path: Path) -> Path:
    """A fresh venv holding only the wheel, the project's dependencies reachable through a .pth line."""
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=tmp_path)
    python = venv / "bin" / "python"
    # Without PYTHONPATH: a checkout on it (with the egg-info an editable install leaves) reads as installed already.
    alone = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    install = [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q", str(wheel)]
    _run(install, cwd=tmp_path, env=alone)
    site_packages = _run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp_path)
    Path(site_packages.stdout.strip(), "project-dependencies.pth").write_text(
        sysconfig.get_paths()["purelib"] + "\n", encoding="utf-8"
    )
    return venv


def test_wheel_indexes_and_looks_up_from_another_folder(tmp_path, small_kb):
    wheel = _build_wheel(tmp_path)
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    assert {"pipelines/conf/config.yaml", "pipelines/conf/trace/postgres.yaml"} <= names
    assert "pipelines/serving/wrappers/lookup_knowledge/pipeline_wrapper.py" in names

    venv = _venv_with(wheel, tmp_path)
    workdir = tmp_path / "elsewhere"
    workdir.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "KNOWLEDGE_API_KEY", "KNOWLEDGE_DEBUG")}
    env.update(HF_HUB_OFFLINE="1", HAYSTACK_TELEMETRY_ENABLED="False", HF_HUB_DISABLE_PROGRESS_BARS="1")

    where = _run(
        [str(venv / "bin" / "python"), "-c", "import pipelines.config.settings as s; print(s.__file__)"], workdir, env
    )
    assert Path(where.stdout.strip()).is_relative_to(venv), where.stdout

    knowledge = str(venv / "bin" / "knowledge")
    no_kb = subprocess.run([knowledge, "index"], cwd=workdir, env=env, capture_output=True, text=True, timeout=300)
    assert no_kb.returncode == 2 and no_kb.stderr.strip().splitlines() == [
        "knowledge: error: knowledge base knowledge/ does not exist (give one with --kb DIR)"
    ]
    indexed = _run([knowledge, "index", "--kb", str(small_kb), "--json", "mlflow=off"], workdir, env)
    assert sorted(json.loads(indexed.stdout)["added"]) == sorted(
        str(path.relative_to(small_kb)) for path in small_kb.rglob("*.md")
    )
    looked_up = _run([knowledge, "lookup", "the disk is full", "mlflow=off"], workdir, env)
    result = json.loads(looked_up.stdout)
    assert result["found"] and result["evidenceBlocks"][0]["source"].startswith("disk/")
    assert (workdir / ".knowledge" / "milvus.db").exists()  # the default state dir: relative to the cwd
