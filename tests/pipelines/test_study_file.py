"""A damaged Optuna study file (`optuna.db`): one line naming it and what to do, exit 2, before any trial."""

from pathlib import Path

from pipelines.cli import main
from tests.conftest import EVAL_DIR, sample_overrides

DATA = Path(__file__).parent / "data"


def test_a_damaged_study_file_is_named_with_what_to_do(sample_cfg, tmp_path, capsys):
    study_file = tmp_path / "optuna.db"
    study_file.write_bytes(b"SQLite format 3\x00" + b"\xde\xad" * 4000)  # a header, then garbage
    overrides = sample_overrides(sample_cfg, f"paths.state_dir={tmp_path}", "mlflow=off")
    argv = ["eval", "--queries", str(EVAL_DIR / "sample-kb.jsonl"), "--guard", str(DATA / "offtopic-sample.jsonl")]
    code = main([*argv, "--search", str(DATA / "guarded-space.yaml"), "--trials", "1", *overrides])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"the study file {study_file} is damaged" in err and "move it away" in err
