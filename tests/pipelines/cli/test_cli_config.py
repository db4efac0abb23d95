"""`--cfg` prints the composed config and exits 0; a comma value without -m names -m."""

import pytest
import yaml

from pipelines.cli import main


@pytest.mark.parametrize("command", [["eval"], ["lookup"], ["serve"]])
def test_cfg_prints_the_composed_config_as_yaml(command, tmp_path, capsys):
    overrides = [f"paths.state_dir={tmp_path}", "retrieval.top_k=7", "milvus.token=s3cret"]
    assert main([*command, "--cfg", *overrides]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["retrieval"]["top_k"] == 7 and printed["paths"]["state_dir"] == str(tmp_path)
    assert printed["milvus"]["token"] == "***"  # secrets never printed
    assert not (tmp_path / "mlflow.db").exists()  # nothing ran


@pytest.mark.parametrize("command", [["lookup", "disk full"], ["index"], ["traces", "list"]])
def test_a_comma_value_without_m_names_m(command, tmp_path, capsys):
    assert main([*command, f"paths.state_dir={tmp_path}", "retrieval.top_k=10,20"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "run with -m" in err and "retrieval.top_k=10,20" in err


def test_search_options_without_a_search_are_refused(capsys):
    assert main(["eval", "--queries", "eval/sample-kb.jsonl", "--guard", "eval/offtopic-alerts.jsonl"]) == 2
    assert "--guard: only with a search (--search NAME) or a sweep (-m)" in capsys.readouterr().err
    assert main(["eval", "--queries", "eval/sample-kb.jsonl", "-m", "--resume", "retrieval.top_k=5,10"]) == 2
    assert "--resume: only with a search (--search NAME)" in capsys.readouterr().err


def test_cfg_masks_every_credential_the_trace_url_password_too(tmp_path, capsys):
    overrides = [
        f"paths.state_dir={tmp_path}",
        "trace.db_url=postgresql://ops:pg-s3cret@127.0.0.1:5432/test",
        "milvus.password=mv-s3cret",
        "mlflow.tracking_uri=postgresql://ml:ml-s3cret@127.0.0.1/mlflow",
    ]
    assert main(["lookup", "--cfg", *overrides]) == 0
    out = capsys.readouterr().out
    assert "s3cret" not in out
    printed = yaml.safe_load(out)
    assert printed["trace"]["db_url"] == "postgresql://ops:***@127.0.0.1:5432/test"
    assert printed["milvus"]["password"] == "***"


def test_mlflow_params_hide_the_trace_url_password(make_config):
    from pipelines.tuning.runs import flatten_params

    params = flatten_params(make_config("trace.db_url=postgresql://ops:pg-s3cret@127.0.0.1/test"))
    assert params["trace.db_url"] == "postgresql://ops:***@127.0.0.1/test"
    assert params["milvus.password"] == "None"  # an empty credential stays visibly empty


@pytest.mark.parametrize("command", [["lookup"], ["eval"], ["serve"]])
def test_cfg_refuses_a_value_a_component_refuses_naming_the_config_key(command, tmp_path, capsys):
    assert main([*command, "--cfg", f"paths.state_dir={tmp_path}", "retrieval.top_k=-3"]) == 2
    captured = capsys.readouterr()
    assert captured.err == "knowledge: error: retrieval.top_k=-3: must be at least 1\n"
    assert captured.out == ""
