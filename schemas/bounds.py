"""Bounds every decoded value must fit in: a record outside them is refused at decode.

The numbers are generous for real input and small enough that nothing downstream can overflow,
run long or outgrow a Kafka record: event times are milliseconds between TS_FLOOR_MS and
TS_CEIL_MS (so `T + grace` and friends stay far inside 64 bits), counts are at most U64_MAX and
add up saturating, ids are short printable strings, lists of nodes and free-form objects are
capped in length and depth, and a value is at most MAX_VALUE_BYTES before it is even parsed.

The bounds that depend on a clock (how far ahead of now, how old) are not here: they belong to
the component that reads the record (`streams.time_bounds`).
"""

from __future__ import annotations

import os
from typing import Any

from schemas.errors import SchemaError

# 2001-09-09T01:46:40Z. Below it a time is zero, negative or (1.7e9 today) in seconds: no GPU
# report is that old, so refusing it costs nothing and catches the unit mistake.
TS_FLOOR_MS = 1_000_000_000_000
# 9999-12-31T23:59:59.999Z, the last instant a datetime holds.
TS_CEIL_MS = 253_402_300_799_999
U64_MAX = 2**64 - 1  # the largest integer orjson reads and writes
I32_MAX = 2**31 - 1
I32_MIN = -(2**31)
XID_MAX = 65_535  # NVIDIA's codes are < 200; room for new ones, not for garbage
GPU_INDEX_MAX = 1_023
STEP_MAX = 2**63 - 1
ID_MAX_CHARS = 256  # node and job ids
SHORT_MAX_CHARS = 256  # gpu uuid, PCI bus id, enums
TEXT_MAX_CHARS = 4_096  # messages, details, reasons, uris
MAX_DEPTH = 8  # free-form objects (health metrics, job spec, checkpoint)
MAX_OBJECT_ITEMS = 1_024  # entries in one free-form object, all levels together
MAX_VALUE_BYTES = 1024 * 1024  # the producer's max request size: nothing bigger is real
DEFAULT_MAX_JOB_NODES = 4_096
MAX_JOB_NODES_ENV = "GPUFAILOVER_MAX_JOB_NODES"


def _max_job_nodes() -> int:
    raw = os.environ.get(MAX_JOB_NODES_ENV, "")
    if not raw:
        return DEFAULT_MAX_JOB_NODES
    try:
        value = int(raw)
    except ValueError:
        raise SystemExit(f"{MAX_JOB_NODES_ENV}={raw!r}: expected an integer") from None
    if value < 1:
        raise SystemExit(f"{MAX_JOB_NODES_ENV}={raw!r}: must be >= 1")
    return value


# Read once per process (a setting, like every GPUFAILOVER_* variable): the decoders are static.
MAX_JOB_NODES = _max_job_nodes()


def saturating_add(a: int, b: int) -> int:
    """a + b, capped at U64_MAX: a count that large says "very many", and stays encodable."""
    total = a + b
    return U64_MAX if total > U64_MAX else total


def is_id(value: str) -> bool:
    """A node or job id: 1..ID_MAX_CHARS printable characters, no space of any kind (str's
    isprintable() is False for control characters and every whitespace but ' ')."""
    return 0 < len(value) <= ID_MAX_CHARS and value.isprintable() and " " not in value


def check_id(name: str, value: str) -> str:
    if not value or value.isspace():
        raise SchemaError(name, "must not be blank")
    if len(value) > ID_MAX_CHARS:
        raise SchemaError(name, f"longer than {ID_MAX_CHARS} characters ({len(value)})")
    if not is_id(value):
        raise SchemaError(name, f"must not contain spaces or control characters: {value[:64]!r}")
    return value


def check_ts(name: str, value: int) -> int:
    if value < TS_FLOOR_MS:
        hint = " (in seconds? event times are epoch milliseconds)" if value > 0 else ""
        raise SchemaError(name, f"{value} is below the floor {TS_FLOOR_MS}{hint}")
    if value > TS_CEIL_MS:
        raise SchemaError(name, f"{value} is past the year 9999")
    return value


def is_ts(value: int) -> bool:
    return TS_FLOOR_MS <= value <= TS_CEIL_MS


FLAT_MAX_ITEMS = 64


def is_flat(value: dict[str, Any]) -> bool:
    """A small object of numbers, booleans, nulls and short strings (a health sample's
    metrics): what `check_free_object` accepts, told apart cheaply for the decoders' fast
    path; anything else goes through the full check."""
    if len(value) > FLAT_MAX_ITEMS:
        return False
    for k, v in value.items():
        t = type(v)
        if len(k) > TEXT_MAX_CHARS or not (
            t is int
            or t is float
            or t is bool
            or v is None
            or (t is str and len(v) <= TEXT_MAX_CHARS)
        ):
            return False
    return True


def check_free_object(name: str, value: dict[str, Any]) -> dict[str, Any]:
    """A free-form object must stay small and shallow: it is copied into state and outputs."""
    items = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            if any(len(k) > TEXT_MAX_CHARS for k in node):
                raise SchemaError(name, f"a key longer than {TEXT_MAX_CHARS} characters")
            children = node.values()
        else:
            children = node
        for child in children:
            items += 1
            if items > MAX_OBJECT_ITEMS:
                raise SchemaError(name, f"more than {MAX_OBJECT_ITEMS} entries")
            if isinstance(child, str) and len(child) > TEXT_MAX_CHARS:
                raise SchemaError(name, f"a string longer than {TEXT_MAX_CHARS} characters")
            if isinstance(child, dict | list):
                if depth >= MAX_DEPTH:
                    raise SchemaError(name, f"nested deeper than {MAX_DEPTH} levels")
                stack.append((child, depth + 1))
    return value
