import pytest

from components.contracts import InvalidQueryError
from components.lookup.query_transformer import QueryTransformer
from components.stores.l0_index import L0Entry, L0Index
from components.stores.l0_index_file import save_l0_index
from tests.components.refusals import assert_refused
from tests.helpers import assert_round_trips, count_stats


def test_normalises_whitespace_and_control_characters(l0_path):
    out = QueryTransformer(l0_path).run(query="  disk\tfull\x07 on   node  ")
    assert out["query"] == "disk full on node"
    assert out["query_transform"].raw == "  disk\tfull\x07 on   node  "
    assert (out["query"], out["expanded_query"]) == ("disk full on node", None)


def test_template_actions_of_an_alert_annotation_become_the_label_names(l0_path):
    query = (
        'Filesystem on {{ $labels.device }} has only {{ printf "%.2f" $value }}% space left ({{ $labels.job_name }}).'
    )
    out = QueryTransformer(l0_path).run(query=query)
    assert out["query"] == "Filesystem on device has only % space left (job name)."
    assert out["query_transform"].raw == query
    assert QueryTransformer(l0_path).run(query="{{ $value }}")["query"] == "{{ $value }}"  # nothing else: kept


@pytest.mark.parametrize("query", ["", "   ", "\n\t"])
def test_empty_query_is_invalid(l0_path, query):
    with pytest.raises(InvalidQueryError):
        QueryTransformer(l0_path).run(query=query)


def test_a_query_that_is_not_a_string_is_invalid(l0_path):
    with pytest.raises(InvalidQueryError, match="string"):
        QueryTransformer(l0_path).run(query=42)


def test_overlong_query_is_truncated_at_a_word_boundary_and_recorded(l0_path):
    out = QueryTransformer(l0_path, max_chars=20).run(query="replication lag on the standby database")
    record = out["query_transform"]
    assert record.truncated and record.original_chars == 39
    assert len(out["query"]) <= 20 and "replication lag on the standby database".startswith(out["query"])
    assert not out["query"].endswith(" ")


def test_overlong_query_is_rejected_with_on_overlong_error(l0_path):
    with pytest.raises(InvalidQueryError):
        QueryTransformer(l0_path, max_chars=10, on_overlong="error").run(query="replication lag on the standby")


def test_an_entity_alias_adds_a_variant_naming_the_entity(l0_path):
    out = QueryTransformer(l0_path).run(query="pg lag is growing")
    assert out["query"] == "pg lag is growing"
    assert "PostgreSQL" in out["expanded_query"] and out["query_transform"].variants[-1] == out["expanded_query"]
    assert out["query_transform"].expansions


def test_expansion_can_be_turned_off(l0_path):
    out = QueryTransformer(l0_path, expand_entities=False).run(query="pg lag is growing")
    assert out["expanded_query"] is None


def test_round_trips(l0_path):
    assert_round_trips(QueryTransformer(l0_path, max_chars=99, on_overlong="error", expand_entities=False))


class TestQueryTransformerInit:
    @pytest.mark.parametrize("max_chars", [0, -3])
    def test_refuses_a_max_chars_under_one(self, l0_path, max_chars):
        with pytest.raises(ValueError, match=f"^max_chars={max_chars} must be at least 1$"):
            QueryTransformer(l0_path, max_chars=max_chars)


def transformer(l0_path, **params) -> QueryTransformer:
    return QueryTransformer(l0_path, **params)


class TestQueryTransformer:
    def test_init_defaults(self, l0_path):
        component = transformer(l0_path)
        assert (component.max_chars, component.on_overlong, component.expand_entities) == (2000, "truncate", True)

    def test_init_refuses_an_unknown_on_overlong_by_name(self, l0_path):
        with pytest.raises(ValueError, match=r"^on_overlong='cut' must be one of truncate, error$"):
            transformer(l0_path, on_overlong="cut")

    def test_run_truncates_at_the_last_word_boundary(self, l0_path):
        out = transformer(l0_path, max_chars=20).run(query="replication lag on the standby database")
        assert out["query"] == "replication lag on"

    def test_run_cuts_inside_a_word_when_the_last_boundary_is_far_back(self, l0_path):
        out = transformer(l0_path, max_chars=20).run(query="a bcdefghijklmnopqrstuvwxyz")
        assert out["query"] == "a bcdefghijklmnopqrs"

    def test_run_cuts_inside_a_word_when_the_boundary_is_at_four_fifths(self, l0_path):
        out = transformer(l0_path, max_chars=10).run(query="abcdefgh ijklmn")
        assert out["query"] == "abcdefgh i"

    def test_run_drops_the_space_a_cut_ends_with(self, l0_path):
        out = transformer(l0_path, max_chars=3).run(query="ab cd")
        assert out["query"] == "ab"


@pytest.mark.parametrize(
    ("query", "needed"),
    [
        ("disk full on node-1", {"mitigation"}),
        ("why is the disk full", {"diagnosis"}),
        ("how to fix pg lag", {"mitigation"}),
    ],
)
def test_the_needed_section_kinds_are_decided_once_here(l0_path, query, needed):
    assert QueryTransformer(l0_path).run(query=query)["query_transform"].needed_sections == needed


def test_the_l0_index_is_read_with_one_stat_per_run_and_passed_on(l0_path, monkeypatch):
    transformer = QueryTransformer(l0_path)
    transformer.warm_up()
    calls = count_stats(monkeypatch, l0_path)
    first = transformer.run(query="pg lag is growing")["l0_index"]
    assert calls == ["stat"]
    assert transformer.run(query="disk full")["l0_index"] is first  # unchanged file: not read again


def test_a_changed_l0_index_file_is_read_again(tmp_path):
    path = tmp_path / "kb.l0.json"
    save_l0_index(L0Index([L0Entry("a.md", "Disk Full", "disk")]), path)
    transformer = QueryTransformer(str(path))
    before = transformer.run(query="disk full")["l0_index"]
    save_l0_index(L0Index([L0Entry("a.md", "Disk Full", "disk"), L0Entry("b.md", "Replica Lag", "db")]), path)
    after = transformer.run(query="disk full")["l0_index"]
    assert [len(before.entries), len(after.entries)] == [1, 2]


# Each init parameter out of its bound: (parameter, value, what the one-line error says).
REFUSED = [
    ("l0_index_path", "", "non-empty"),
    ("max_chars", -3, "at least 1"),
    ("on_overlong", "explode", "one of truncate, error"),
    ("expand_entities", "yes", "true or false"),
]


@pytest.mark.parametrize(("parameter", "value", "rule"), REFUSED, ids=[f"{p}={v!r}" for p, v, _ in REFUSED])
def test_each_init_parameter_out_of_its_bound_is_refused_by_name(parameter, value, rule):
    assert_refused(
        lambda **changed: QueryTransformer(**{**{"l0_index_path": "kb.l0.json"}, **changed}), parameter, value, rule
    )
