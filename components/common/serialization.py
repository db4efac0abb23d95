"""
The two dict shapes of the data contracts (`components.contracts`), both derived from their field
declarations: `to_dict()` the agent-facing camelCase shape (docs/architecture.md), `to_record()` the
snake_case shape persisted in `tool_invocation.retrieval_details`. Field metadata (`wire`)
renames a field, leaves it out or drops it when empty; `CheapDeepcopy` is the fast deep copy
Haystack's per-component input copies need.
"""

import copy
import re
from dataclasses import MISSING, fields, is_dataclass
from typing import Any, Literal

_ATOMIC = (str, int, float, bool, type(None))


class CheapDeepcopy:
    """
    A deep copy that is several times faster than `copy.deepcopy`'s generic one for contracts
    whose fields are scalars, lists or dicts of scalars, and tuples or frozensets, which are
    shared: a contract keeps only immutable values in those (the rest goes through
    `copy.deepcopy`). Haystack deep-copies every input of every component, element by element, so
    the candidate lists of each lookup are copied three times or more.
    """

    def __deepcopy__(self, memo: dict) -> Any:
        clone = object.__new__(type(self))
        memo[id(self)] = clone
        fields = clone.__dict__
        for name, value in self.__dict__.items():
            kind = type(value)
            if kind in _ATOMIC or kind is tuple or kind is frozenset:  # contracts keep only immutable values in these
                fields[name] = value
            elif kind is list and all(type(item) in _ATOMIC for item in value):
                fields[name] = list(value)
            elif kind is dict and all(type(item) in _ATOMIC for item in value.values()):
                fields[name] = dict(value)
            else:
                fields[name] = copy.deepcopy(value, memo)
        return clone


JSON = "json"
RECORD = "record"
Style = Literal["json", "record"]
_SNAKE_PART = re.compile(r"_([a-z0-9])")


def camel(name: str) -> str:
    """`evidence_key` -> `evidenceKey`."""
    return _SNAKE_PART.sub(lambda match: match.group(1).upper(), name)


def wire(
    json: str | None | object = MISSING,
    record: str | None | object = MISSING,
    omit_none: bool = False,
    camel_keys: bool = False,
) -> dict[str, Any]:
    """
    Field metadata for `serialize`: `json`/`record` rename the field in that shape (None leaves it
    out), `omit_none` drops a None (or empty) value from the JSON shape ("when available"), and
    `camel_keys` turns the snake_case keys of a plain dict value into camelCase in the JSON shape.
    """
    meta: dict[str, Any] = {"omit_none": omit_none, "camel_keys": camel_keys}
    if json is not MISSING:
        meta[JSON] = json
    if record is not MISSING:
        meta[RECORD] = record
    return meta


def _field_name(name: str, meta: Any, style: Style) -> str | None:
    if style in meta:
        return meta[style]
    return camel(name) if style == JSON else name


def serialize(value: Any, style: Style, camel_keys: bool = False) -> Any:
    """
    A contract as plain JSON-ready data: dataclasses become dicts named after their fields (camelCase
    in the `json` style, field names in the `record` style, see `wire`); lists, tuples and sets
    become lists; dict keys are data (signal names, ...) and stay as they are unless `camel_keys`.
    """
    if is_dataclass(value) and not isinstance(value, type):
        data: dict[str, Any] = {}
        for item in fields(value):
            name = _field_name(item.name, item.metadata, style)
            if name is None:
                continue
            content = getattr(value, item.name)
            if style == JSON and item.metadata.get("omit_none") and not content and content != 0:
                continue
            data[name] = serialize(content, style, style == JSON and item.metadata.get("camel_keys", False))
        return data
    if isinstance(value, dict):
        return {
            (camel(k) if camel_keys and isinstance(k, str) else k): serialize(v, style, camel_keys)
            for k, v in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [serialize(item, style, camel_keys) for item in value]
    if isinstance(value, (set, frozenset)):
        return sorted(serialize(item, style, camel_keys) for item in value)
    return value


class Contract:
    """The two dict shapes of a contract dataclass, both derived from its field declarations."""

    def to_dict(self) -> dict[str, Any]:
        """The agent-facing shape: camelCase keys."""
        return serialize(self, JSON)

    def to_record(self) -> dict[str, Any]:
        """The persisted shape: snake_case keys, the field names."""
        return serialize(self, RECORD)


class RecordContract(Contract):
    """A contract that only tools and files read (index reports): `to_dict` is the record shape."""

    def to_dict(self) -> dict[str, Any]:
        return self.to_record()
