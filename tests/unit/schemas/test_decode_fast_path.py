"""The inlined fast decoders of the hot topics agree with the field-by-field checked decoders:
same value for every record, same SchemaError (field) for every bad one."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from schemas.errors import SchemaError
from schemas.health import CONDITIONS, SEVERITIES, GpuHealth
from schemas.xid import XID_SOURCES, GpuXid

# Values that are sometimes right and often subtly wrong for a field.
ANY_JSON = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.integers(),
    st.floats(allow_nan=False),
    st.text(max_size=6),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)


def field(good: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(good, good, good, ANY_JSON)


NODE = field(st.sampled_from(["gpu-node-001", "n", ""]))
TS = field(st.integers(0, 2**62))
GPU = field(st.integers(0, 7))
TEXT = field(st.text(max_size=8))
VERSION = st.one_of(st.none(), st.just(1), st.just(1.0), st.just(True), st.just(2), ANY_JSON)

HEALTH_FIELDS = {
    "node": NODE,
    "ts_ms": TS,
    "condition": field(st.sampled_from(sorted(CONDITIONS))),
    "gpu_index": GPU,
    "severity": field(st.sampled_from(sorted(SEVERITIES))),
    "detail": TEXT,
    "metrics": field(st.dictionaries(st.sampled_from(["temp_c", "power_w"]), st.integers())),
    "gpu_uuid": TEXT,
    "pci_bus_id": TEXT,
    "schema_version": VERSION,
    "extra": ANY_JSON,
}
XID_FIELDS = {
    "node": NODE,
    "xid": field(st.integers(0, 200)),
    "ts_ms": TS,
    "gpu_index": GPU,
    "gpu_uuid": TEXT,
    "pci_bus_id": TEXT,
    "message": TEXT,
    "source": field(st.sampled_from(sorted(XID_SOURCES))),
    "count": field(st.integers(1, 10**6)),
    "schema_version": VERSION,
    "extra": ANY_JSON,
}


def records(fields: dict[str, st.SearchStrategy[Any]]) -> st.SearchStrategy[Any]:
    required = ("node", "ts_ms", "condition", "xid")
    as_dict = st.fixed_dictionaries(
        {k: v for k, v in fields.items() if k in required},
        optional={k: v for k, v in fields.items() if k not in required},
    )
    # sometimes drop a required field; sometimes not an object at all
    dropped = st.tuples(as_dict, st.sampled_from(required)).map(
        lambda t: {k: v for k, v in t[0].items() if k != t[1]}
    )
    return st.one_of(as_dict, as_dict, dropped, ANY_JSON)


def outcome(decode: Callable[[Any], Any], value: Any) -> Any:
    try:
        return ("ok", decode(value))
    except SchemaError as exc:
        return ("error", exc.field)


@settings(max_examples=300, deadline=None, database=None)
@given(value=records(HEALTH_FIELDS))
def test_health_fast_path_agrees_with_checked_decoder(value: Any) -> None:
    assert outcome(GpuHealth.from_dict, value) == outcome(GpuHealth.from_dict_checked, value)


@settings(max_examples=300, deadline=None, database=None)
@given(value=records(HEALTH_FIELDS))
def test_health_peek_accepts_only_what_the_checked_decoder_accepts(value: Any) -> None:
    """The hot loops act on `peek` alone for samples the policy ignores: it must never pass a
    record the checked decoder refuses, and must give the same node, time and condition."""
    peeked = GpuHealth.peek(value)
    if peeked is not None:
        checked = GpuHealth.from_dict_checked(value)
        assert peeked == (checked.node, checked.ts_ms, checked.condition)


@settings(max_examples=300, deadline=None, database=None)
@given(value=records(XID_FIELDS))
def test_xid_peek_accepts_only_what_the_checked_decoder_accepts(value: Any) -> None:
    peeked = GpuXid.peek(value)
    if peeked is not None:
        c = GpuXid.from_dict_checked(value)
        assert peeked == (c.node, c.xid, c.ts_ms, c.gpu_index, c.count)


@settings(max_examples=300, deadline=None, database=None)
@given(value=records(XID_FIELDS))
def test_xid_fast_path_agrees_with_checked_decoder(value: Any) -> None:
    assert outcome(GpuXid.from_dict, value) == outcome(GpuXid.from_dict_checked, value)


# Every field of a valid record, replaced in turn by each of these (or removed): the edge cases
# where a hand-inlined check is most likely to drift from the checked one.
TRICKY = [None, True, False, -1, 0, 1, 1.0, 2, 2**63, "", "x", "ok", "nvml", "info", [], {}]
TRICKY += [{"temp_c": 1}, ["gpu-node-001"]]
VALID_HEALTH = {
    "schema_version": 1,
    "node": "gpu-node-001",
    "ts_ms": 1_773_532_800_000,
    "condition": "ok",
    "gpu_index": 0,
    "severity": "info",
    "detail": "fine",
    "metrics": {"temp_c": 50},
    "gpu_uuid": "GPU-1",
    "pci_bus_id": "00000000:3B:00.0",
}
VALID_XID = {
    "schema_version": 1,
    "node": "gpu-node-001",
    "xid": 0,
    "ts_ms": 1_773_532_800_000,
    "gpu_index": 0,
    "gpu_uuid": "GPU-1",
    "pci_bus_id": "00000000:3B:00.0",
    "message": "m",
    "source": "nvml",
    "count": 1,
}
_MISSING = object()


def single_field_mutations(valid: dict[str, Any]) -> list[Any]:
    out: list[Any] = [valid, {k: v for k, v in valid.items() if k in ("node", "ts_ms")}]
    for name in valid:
        for value in [*TRICKY, _MISSING]:
            mutated = {k: v for k, v in valid.items() if k != name}
            if value is not _MISSING:
                mutated[name] = value
            out.append(mutated)
    return out


def test_health_fast_path_agrees_on_every_single_field_edge_case() -> None:
    for value in single_field_mutations(VALID_HEALTH):
        got = outcome(GpuHealth.from_dict, value)
        assert got == outcome(GpuHealth.from_dict_checked, value), value


def test_xid_fast_path_agrees_on_every_single_field_edge_case() -> None:
    for value in single_field_mutations(VALID_XID):
        got = outcome(GpuXid.from_dict, value)
        assert got == outcome(GpuXid.from_dict_checked, value), value


def test_fast_path_result_keeps_every_field() -> None:
    value = {
        "node": "gpu-node-001",
        "xid": 79,
        "ts_ms": 1_773_532_800_000,
        "gpu_index": 2,
        "gpu_uuid": "GPU-1",
        "pci_bus_id": "00000000:3B:00.0",
        "message": "fell off the bus",
        "source": "nvml",
        "count": 5,
    }
    assert GpuXid.from_dict(value) == GpuXid.from_dict_checked(value)
    assert GpuXid.from_dict(value).to_dict() == value | {"schema_version": 1}
