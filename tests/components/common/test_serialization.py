"""
A contract's two dict shapes come from its field declarations: camelCase for the agent,
snake_case field names for the persisted record, renamed or left out by `wire` metadata.
"""

from dataclasses import dataclass, field

from components.common.serialization import Contract, camel, wire


@dataclass
class Inner:
    some_value: int
    note: str | None = field(default=None, metadata=wire(omit_none=True))


@dataclass
class Outer(Contract):
    first_name: str
    inner_items: list[Inner]
    renamed_field: str = field(default="x", metadata=wire(json="alias", record="stored_alias"))
    hidden_field: int = field(default=1, metadata=wire(json=None))
    label_counts: dict[str, int] = field(default_factory=dict)
    snake_map: dict[str, int] = field(default_factory=dict, metadata=wire(camel_keys=True))
    tags: frozenset[str] = frozenset()


def test_camel():
    assert camel("evidence_key") == "evidenceKey"
    assert camel("l1_enabled") == "l1Enabled"
    assert camel("found") == "found"


def test_serialize_names_fields_by_style_and_metadata():
    outer = Outer(
        "a", [Inner(1), Inner(2, "n")], label_counts={"some_label": 1}, snake_map={"a_b": 2}, tags=frozenset("ba")
    )
    assert outer.to_dict() == {
        "firstName": "a",
        "innerItems": [{"someValue": 1}, {"someValue": 2, "note": "n"}],
        "alias": "x",
        "labelCounts": {"some_label": 1},
        "snakeMap": {"aB": 2},
        "tags": ["a", "b"],
    }
    assert outer.to_record() == {
        "first_name": "a",
        "inner_items": [{"some_value": 1, "note": None}, {"some_value": 2, "note": "n"}],
        "stored_alias": "x",
        "hidden_field": 1,
        "label_counts": {"some_label": 1},
        "snake_map": {"a_b": 2},
        "tags": ["a", "b"],
    }
