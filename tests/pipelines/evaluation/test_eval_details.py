"""`knowledge eval --details FILE` with several query sets: one row per query of every set, each naming its set."""

import json

from pipelines.cli import main
from tests.conftest import SAMPLE_KB


def test_details_of_several_sets_keep_every_row_and_name_the_set(capsys, sample_cfg, tmp_path):
    rows = [json.loads(line) for line in (SAMPLE_KB.parent / "eval" / "sample-kb.jsonl").read_text().splitlines()]
    first, second = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    first.write_text("".join(json.dumps(row) + "\n" for row in rows[:3]), encoding="utf-8")
    second.write_text("".join(json.dumps(row) + "\n" for row in rows[3:5]), encoding="utf-8")
    details = tmp_path / "details.jsonl"

    code = main(
        ["eval", "--queries", str(first), "--queries", str(second), "--no-baselines", "--details", str(details)]
        + [f"paths.state_dir={sample_cfg.paths.state_dir}", "mlflow=off"]
    )
    capsys.readouterr()

    assert code == 0
    written = [json.loads(line) for line in details.read_text(encoding="utf-8").splitlines()]
    assert [(row["set"], row["id"]) for row in written] == [("first", r["id"]) for r in rows[:3]] + [
        ("second", r["id"]) for r in rows[3:5]
    ]
