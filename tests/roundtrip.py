"""Hypothesis strategies for round-trip tests of persisted and wire types.

`records(cls, **overrides)` builds instances of a dataclass from its own fields, so a field added
later is generated too (or fails loudly when its type is unknown here) instead of silently left at
its default. Values are chosen so that a decoder that swaps two fields cannot pass:

- every int field of one instance has a different value (field i gets values = i mod 64),
- every str field starts with its own name (`"job_id:..."`),

so `Termination.from_dict` reading `attempt` from `ts_ms` fails on the first example.
"""

from __future__ import annotations

import dataclasses
import enum
import heapq
import types
import typing
from collections.abc import Callable
from typing import Any, TypeVar

import orjson
from hypothesis import strategies as st

from schemas import bounds
from schemas.decisions import EVIDENCE_CLASSES, EVIDENCE_KINDS, Evidence

T = TypeVar("T")
FIELD_STRIDE = 64  # int fields get distinct residues modulo this: at most 64 fields per type
MAX_INT = 2**40  # times in ms until year ~36800, well inside JSON's and orjson's range

json_scalars = st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=8)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=6,
)
json_objects = st.dictionaries(st.text(max_size=6), json_values, max_size=4)


def json_trip(value: Any) -> Any:
    """What a changelog or topic hands back: the value through JSON bytes (tuples become lists,
    int keys become strings)."""
    return orjson.loads(orjson.dumps(value))


# Fields the decoders bound below MAX_INT (schemas.bounds): generated inside their range.
BOUNDED_INTS = {
    "xid": bounds.XID_MAX,
    "code": bounds.XID_MAX,  # an XID code in Evidence
    "gpu_index": bounds.GPU_INDEX_MAX,
    "attempt": bounds.I32_MAX,
    "next_attempt": bounds.I32_MAX,
    "max_failovers": bounds.I32_MAX,
    "exit_code": bounds.I32_MAX,
    "priority": bounds.I32_MAX,
}


def distinct_ints(index: int, name: str = "") -> st.SearchStrategy[int]:
    """Non-negative ints congruent to `index` modulo FIELD_STRIDE: two fields never collide.
    Event times (`*ts_ms`) start at the decoders' floor (TS_FLOOR_MS, a multiple of the
    stride); fields with a smaller bound stay under it."""
    top = BOUNDED_INTS.get(name, MAX_INT) // FIELD_STRIDE - 1
    base = bounds.TS_FLOOR_MS if name.endswith("ts_ms") else 0
    return st.integers(0, top).map(lambda v: base + v * FIELD_STRIDE + index % FIELD_STRIDE)


# Printable, no whitespace: what a node or job id may hold (schemas.bounds.is_id).
id_text = st.text(alphabet=st.characters(categories=("L", "N", "P", "S")), max_size=6)


def named_text(name: str) -> st.SearchStrategy[str]:
    """Non-empty strings that start with the field's name: two fields never collide."""
    return id_text.map(lambda s: f"{name}:{s}")


def for_type(tp: Any, name: str, index: int) -> st.SearchStrategy[Any]:
    """A strategy for a field of type `tp`; TypeError for a type this module does not know."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is int:
        return distinct_ints(index, name)
    if tp is str:
        return named_text(name)
    if tp is bool:
        return st.booleans()
    if tp is float:
        return st.floats(0, 1e12, allow_nan=False, allow_infinity=False)
    if tp is Any:
        return json_values
    if tp is Evidence:
        return evidence()
    if origin is typing.Literal:
        return st.sampled_from(args)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return st.sampled_from(list(tp))
    if origin in (typing.Union, types.UnionType):
        return st.one_of([st.none() if a is type(None) else for_type(a, name, index) for a in args])
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return st.lists(for_type(args[0], name, index), max_size=4).map(tuple)
    if origin is tuple:
        return st.tuples(*(for_type(a, f"{name}{i}", index + i) for i, a in enumerate(args)))
    if origin is list:
        return st.lists(for_type(args[0], name, index), max_size=4)
    if origin is set:
        return st.sets(for_type(args[0], name, index), max_size=4)
    if origin is dict and args == (str, Any):
        return json_objects
    if origin is dict and args and args[0] is str:
        return st.dictionaries(named_text(name), for_type(args[1], name, index), max_size=4)
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return records(tp)
    raise TypeError(f"no strategy for field {name!r} of type {tp!r}: pass an override")


def field_values(
    record_type: type[Any], /, **overrides: st.SearchStrategy[Any]
) -> st.SearchStrategy[Any]:
    """A dict of constructor arguments for every init field of dataclass `record_type`."""
    hints = typing.get_type_hints(record_type)
    fields = [f for f in dataclasses.fields(record_type) if f.init]
    unknown = set(overrides) - {f.name for f in fields}
    if unknown:
        raise TypeError(f"{record_type.__name__} has no fields {sorted(unknown)}")
    return st.fixed_dictionaries(
        {
            f.name: overrides[f.name]
            if f.name in overrides
            else for_type(hints[f.name], f.name, index)
            for index, f in enumerate(fields)
        }
    )


def records(record_type: type[T], /, **overrides: st.SearchStrategy[Any]) -> st.SearchStrategy[T]:
    """Instances of dataclass `record_type` built from all of its fields (module docstring)."""
    return field_values(record_type, **overrides).map(lambda kwargs: record_type(**kwargs))


def evidence() -> st.SearchStrategy[Evidence]:
    return records(
        Evidence,
        kind=st.sampled_from(sorted(EVIDENCE_KINDS)),
        cls=st.sampled_from(sorted(EVIDENCE_CLASSES)),
        code=st.integers(0, bounds.XID_MAX) | named_text("code"),
        count=st.integers(1, 2**31),
    )


def heap_of(elements: st.SearchStrategy[T]) -> st.SearchStrategy[list[T]]:
    """A list kept as a heap (the clocks' `closing` and `deadlines`): what the engine stores."""

    def heapified(items: list[T]) -> list[T]:
        heapq.heapify(items)
        return items

    return st.lists(elements, max_size=5).map(heapified)


def canonical(value: Any) -> Any:
    """`value` with the encoders' one documented normalisation applied: an Evidence seen once
    (`last_ts_ms` None) is written with `last_ts_ms = ts_ms`."""
    if isinstance(value, Evidence):
        last = value.ts_ms if value.last_ts_ms is None else value.last_ts_ms
        return dataclasses.replace(value, last_ts_ms=last)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {
            f.name: canonical(getattr(value, f.name)) for f in dataclasses.fields(value) if f.init
        }
        return dataclasses.replace(value, **changes)
    if isinstance(value, dict):
        return {k: canonical(v) for k, v in value.items()}
    if isinstance(value, list):
        return [canonical(v) for v in value]
    if isinstance(value, tuple):
        return tuple(canonical(v) for v in value)
    if isinstance(value, set):
        return {canonical(v) for v in value}
    return value


@dataclasses.dataclass(frozen=True)
class RoundTrip:
    """How one type is persisted: its instances, and the encode/decode pair the code uses."""

    strategy: st.SearchStrategy[Any]
    encode: Callable[[Any], Any]
    decode: Callable[[Any], Any]


def assert_round_trip(case: RoundTrip, value: Any) -> None:
    """decode(encode(x)) == x, both straight (faust keeps the dict in memory) and through JSON
    bytes (a changelog restore, a topic), up to `canonical`; and encoding is stable."""
    encoded = case.encode(value)
    expected = canonical(value)
    assert case.decode(encoded) == expected
    restored = case.decode(json_trip(encoded))
    assert restored == expected
    assert json_trip(case.encode(restored)) == json_trip(encoded)
