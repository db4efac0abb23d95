"""`knowledge adapt --output`: never overwrite a user's files; empty folders, adapt's own folders and --overwrite work."""

import pytest

from pipelines.adapt.run import MODEL_CARD_TITLE, AdaptOptions, AdaptOutputError, adapt_model
from tests.helpers import run_cli, stderr_lines

USER_README = "# My project\n\nNotes I wrote myself.\n"
USER_CONFIG = '{"mine": true}\n'


def _user_folder(path):
    path.mkdir()
    (path / "README.md").write_text(USER_README, encoding="utf-8")
    (path / "config.json").write_text(USER_CONFIG, encoding="utf-8")
    return path


def _smallest(kb, output, **extra) -> AdaptOptions:
    """The smallest training adapt allows: one step of one pair."""
    return AdaptOptions(kb_path=str(kb), output=str(output), batch_size=1, max_steps=1, **extra)


def test_cli_refuses_a_folder_holding_a_users_files_and_leaves_them_alone(small_kb, tmp_path):
    folder = _user_folder(tmp_path / "mine")
    result = run_cli("adapt", "--kb", str(small_kb), "--output", str(folder), "--max-steps", "1", "mlflow=off")
    assert result.returncode == 2, result.stderr
    lines = stderr_lines(result)
    assert len(lines) == 1 and str(folder) in lines[0] and "--overwrite" in lines[0], result.stderr
    assert (folder / "README.md").read_text(encoding="utf-8") == USER_README
    assert (folder / "config.json").read_text(encoding="utf-8") == USER_CONFIG
    assert sorted(p.name for p in folder.iterdir()) == ["README.md", "config.json"]


def test_cli_refuses_an_output_that_is_a_file_up_front(small_kb, tmp_path):
    target = tmp_path / "model.bin"
    target.write_text("x", encoding="utf-8")
    result = run_cli("adapt", "--kb", str(small_kb), "--output", str(target), "mlflow=off")
    assert result.returncode == 2
    lines = stderr_lines(result)
    assert len(lines) == 1 and f"--output {target} is a file" in lines[0], result.stderr
    assert "Adapting" not in result.stdout  # refused before the pairs and the model


def test_a_checkpoints_folder_adapt_did_not_start_is_refused_even_with_overwrite(small_kb, make_config, tmp_path):
    folder = _user_folder(tmp_path / "mine")
    (folder / "checkpoints").mkdir()
    (folder / "checkpoints" / "mine.txt").write_text("keep", encoding="utf-8")
    with pytest.raises(AdaptOutputError, match="was not written by adapt"):
        adapt_model(make_config(), _smallest(small_kb, folder, overwrite=True), say=lambda _line: None)
    assert (folder / "checkpoints" / "mine.txt").read_text(encoding="utf-8") == "keep"


@pytest.mark.slow
def test_empty_folder_adapts_own_folder_and_overwrite_train(small_kb, make_config, tmp_path):
    cfg = make_config()
    quiet = lambda _line: None  # noqa: E731

    empty = tmp_path / "empty"
    empty.mkdir()
    first = adapt_model(cfg, _smallest(small_kb, empty), say=quiet)
    assert first.record["steps"] == 1
    assert (empty / "README.md").read_text(encoding="utf-8").startswith(MODEL_CARD_TITLE + "\n")

    assert adapt_model(cfg, _smallest(small_kb, empty), say=quiet).already_done  # a folder adapt wrote
    with pytest.raises(AdaptOutputError, match="--overwrite to replace it"):
        adapt_model(cfg, _smallest(small_kb, empty, seed=1), say=quiet)
    replaced = adapt_model(cfg, _smallest(small_kb, empty, seed=1, overwrite=True), say=quiet)
    assert not replaced.already_done and replaced.record["settings"]["seed"] == 1

    mine = _user_folder(tmp_path / "mine")
    (mine / "notes.txt").write_text("mine", encoding="utf-8")
    adapt_model(cfg, _smallest(small_kb, mine, overwrite=True), say=quiet)
    assert (mine / "README.md").read_text(encoding="utf-8").startswith(MODEL_CARD_TITLE)
    assert (mine / "notes.txt").read_text(encoding="utf-8") == "mine"  # a file adapt does not write is left alone
    assert (mine / "model.safetensors").is_file() and not (mine / "checkpoints").exists()


def test_an_adapt_stopped_after_training_leaves_no_usable_folder_and_the_next_run_finishes_it(
    small_kb, make_config, tmp_path
):
    """Ctrl+C once training ended, before the calibration: the announced folder must not exist yet."""
    from pipelines.config.model_calibration import read_calibration

    output = tmp_path / "model"
    options = _smallest(small_kb, output, calibrate=True)

    def stop_once_trained(line: str) -> None:
        if line.endswith(" steps)"):  # the line that says how long training took
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        adapt_model(make_config(), options, say=stop_once_trained)
    assert not output.exists()
    assert (tmp_path / "model.partial" / "adapt.json").is_file()
    lines: list[str] = []
    adapt_model(make_config(), options, say=lines.append)
    assert not any(line.startswith("Adapting") for line in lines), lines  # trained already: only calibrated
    assert read_calibration(output / "calibration.json")["method"] == "packaged_decides"
    assert not (tmp_path / "model.partial").exists()
    assert f"  use it with: embedder.model={output}" in lines[-1]
