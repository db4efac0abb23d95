"""
The model folder `knowledge adapt` writes: a run works in `OUTPUT.partial/` (checkpoints, model,
card, record, calibration) and moves the complete folder to `OUTPUT` at its end, so a folder at the
announced path is always whole (docs/adapt.md). A user's files are never overwritten without
`--overwrite`.
"""

import json
import os
import shutil
from pathlib import Path
from typing import Any

from components.common.model_folder import ADAPT_RECORD, CALIBRATION_FILE
from components.errors import BadInputError

CHECKPOINTS = "checkpoints"
RUN_FILE = "run.json"
MODEL_CARD_TITLE = "# Knowledge-base adapted embedding model"  # the card's first line marks a folder adapt wrote
PARTIAL_SUFFIX = ".partial"


class AdaptOutputError(BadInputError):
    """The output folder holds another run's model or checkpoints."""


def work_folder(output: Path) -> Path:
    """Where a run writes until the model folder is complete: beside it, moved to it at the end."""
    return output.with_name(output.name + PARTIAL_SUFFIX)


def trained_record(work: Path, settings: dict[str, Any], overwrite: bool) -> dict[str, Any] | None:
    """The record of a model an interrupted run trained in `work` (it stopped while calibrating), if the same."""
    record = finished_record(work)
    if record is None:
        return None
    if record.get("settings") == settings:
        return record
    if not overwrite:
        raise AdaptOutputError(
            f"{work} holds an unfinished run with other settings or another knowledge base: "
            "give another --output, or --overwrite to start again"
        )
    shutil.rmtree(work)  # adapt's own folder (its record says so) of the run being replaced
    return None


def publish(work: Path, output: Path) -> None:
    """
    Move the complete model folder `work` to `output`. A new or empty `output` is one rename; into an
    existing folder the files are moved one by one, its old calibration first out and the new one
    last in, so a lookup never takes a half-replaced model with a calibration that was not fitted for it.
    """
    if not output.exists() or not any(output.iterdir()):
        os.replace(work, output)
        return
    (output / CALIBRATION_FILE).unlink(missing_ok=True)
    entries = sorted(work.iterdir(), key=lambda entry: entry.name == CALIBRATION_FILE)
    for entry in entries:
        target = output / entry.name
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        os.replace(entry, target)
    work.rmdir()


def check_output_folder(output: Path, overwrite: bool) -> None:
    """
    Refuse, before any work, an output that is a file, or a folder holding files adapt did not
    write (a user's README.md or config.json would be overwritten by the model's), unless
    `overwrite`; and a work folder beside it that adapt did not write. A `checkpoints` folder adapt did not start is refused even then: it is removed at
    the end of a run.
    """
    if output.exists() and not output.is_dir():
        raise AdaptOutputError(f"--output {output} is a file, not a folder: give a new or empty folder")
    work = work_folder(output)
    if work.exists() and not (work.is_dir() and _written_by_adapt(work)):
        raise AdaptOutputError(f"{work} was not written by adapt (a run writes there until it ends): move it away")
    if not output.is_dir() or _written_by_adapt(output):
        return
    checkpoints = output / CHECKPOINTS
    if checkpoints.exists() and not (checkpoints / RUN_FILE).is_file():
        raise AdaptOutputError(
            f"{checkpoints} was not written by adapt (adapt removes it after training): move it away"
        )
    if not overwrite:
        raise AdaptOutputError(
            f"--output {output} holds files adapt did not write: give a new or empty folder, "
            "or --overwrite to write the model's files there (other files are left alone)"
        )


def _written_by_adapt(folder: Path) -> bool:
    """Empty, a model folder whose card adapt wrote, or an interrupted run's checkpoints alone."""
    entries = {entry.name for entry in folder.iterdir()}
    if not entries:
        return True
    if entries == {CHECKPOINTS}:
        return (folder / CHECKPOINTS / RUN_FILE).is_file()
    try:
        with (folder / "README.md").open(encoding="utf-8") as card:
            return card.readline().rstrip("\n") == MODEL_CARD_TITLE
    except (OSError, UnicodeDecodeError):
        return False


def finished_record(output: Path) -> dict[str, Any] | None:
    record = output / ADAPT_RECORD
    if not record.is_file():
        return None
    try:
        return json.loads(record.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None


def check_resumable(checkpoints: Path, settings: dict[str, Any], overwrite: bool) -> None:
    """Checkpoints of another run (other data or settings) must not be resumed into this one."""
    run_file = checkpoints / RUN_FILE
    if run_file.is_file() and json.loads(run_file.read_text(encoding="utf-8")) != settings:
        if not overwrite:
            raise AdaptOutputError(
                f"{checkpoints} holds checkpoints of a run with other settings or another knowledge base: "
                "give another --output, or --overwrite to start again"
            )
        shutil.rmtree(checkpoints)  # adapt's own checkpoints (run.json says so) of the run being replaced
    checkpoints.mkdir(parents=True, exist_ok=True)
    run_file.write_text(json.dumps(settings, indent=2) + "\n", encoding="utf-8")
