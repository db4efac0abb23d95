"""The label split: stable per query, one side per spelling, about the configured share held out."""

import json
from pathlib import Path

import pytest

from pipelines.labels.split import CHECK_SHARE, label_split, normalised_query

DEV = Path(__file__).resolve().parents[3] / "eval" / "prometheus-dev.jsonl"


def dev_queries() -> list[str]:
    return [json.loads(line)["query"] for line in DEV.read_text(encoding="utf-8").splitlines() if line.strip()]


def test_a_query_lands_on_the_same_side_every_time():
    queries = dev_queries()
    assert [label_split(q) for q in queries] == [label_split(q) for q in queries]


def test_two_spellings_of_one_query_land_on_one_side():
    for query in dev_queries():
        respelled = "  " + query.upper().replace(" ", "  \t") + " "
        assert normalised_query(respelled) == normalised_query(query)
        assert label_split(respelled) == label_split(query)


def test_about_the_configured_share_is_held_out():
    queries = dev_queries()
    share = sum(label_split(q) == "check" for q in queries) / len(queries)
    assert abs(share - CHECK_SHARE) < 0.1, share


@pytest.mark.parametrize("share", [0.0, 1.0, -0.1, 1.5])
def test_a_share_outside_the_open_unit_interval_is_refused(share):
    with pytest.raises(ValueError, match="check_share"):
        label_split("disk full", check_share=share)
