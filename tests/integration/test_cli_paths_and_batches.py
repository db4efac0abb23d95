"""
Command-line input a shell can pass: `--kb` paths with characters Hydra's override grammar or
OmegaConf's interpolation would parse, and `--batch` files with invalid UTF-8 or JSONL queries
that are not strings.
"""

import json

import pytest

from pipelines.cli import main
from tests.integration.test_lookup_cli import TOMATO_QUERY

PATH_CHARACTERS = ["(", ")", ",", "'", '"', "${", "${x}", "\\", "\\${y}", "=", " ", "[", "{", "$", "~", "#", "%", "*"]


def state(cfg) -> list[str]:
    return [f"paths.state_dir={cfg.paths.state_dir}", "mlflow=off"]


@pytest.mark.parametrize("character", PATH_CHARACTERS)
def test_index_kb_path_with_any_character(tmp_path, capsys, character):
    kb = tmp_path / f"kb{character}dir"
    kb.mkdir()
    (kb / "a.md").write_text("# Restart\n\nThe service restarts cleanly after a deploy.\n", encoding="utf-8")
    code = main(["index", "--kb", str(kb), "--json", f"paths.state_dir={tmp_path / 'state'}", "mlflow=off"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert json.loads(out)["added"] == ["a.md"]


def test_batch_queries_that_are_not_strings_are_errors_of_their_line(topics_cfg, tmp_path, capsys):
    batch = tmp_path / "queries.jsonl"
    lines = [{"query": None}, {"query": 123}, {"query": ["a"]}, {"query": {"q": "a"}}, {"query": TOMATO_QUERY}]
    batch.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    assert main(["lookup", "--batch", str(batch), *state(topics_cfg)]) == 2
    results = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r.get("line") for r in results[:4]] == [1, 2, 3, 4]
    for result, kind in zip(results[:4], ["null", "int", "list", "dict"], strict=True):
        assert f"{batch}:{result['line']}:" in result["error"] and f"not {kind}" in result["error"]
    assert results[4]["found"] is True


def test_batch_with_invalid_utf8_names_the_file_and_line(topics_cfg, tmp_path, capsys):
    batch = tmp_path / "queries.txt"
    batch.write_bytes(TOMATO_QUERY.encode() + b"\n\nbroken \xff\xfe query\n")
    assert main(["lookup", "--batch", str(batch), *state(topics_cfg)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1 and err.startswith(f"knowledge: error: {batch}:3: invalid UTF-8")
