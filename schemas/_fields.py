"""Field readers shared by the decoders. Small and explicit: they are on the hot path.

Every reader enforces `schemas.bounds`: integers in range, strings short, ids printable,
lists and free-form objects capped.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from schemas import bounds as b
from schemas.errors import SchemaError

SCHEMA_VERSION = 1
S = TypeVar("S", bound=str)  # a closed set's member type: str or a Literal


def as_object(value: Any) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise SchemaError("value", f"expected a JSON object, got {type(value).__name__}")
    return value


def req_str(
    d: Mapping[str, Any], name: str, *, non_empty: bool = True, max_len: int = b.TEXT_MAX_CHARS
) -> str:
    v = d.get(name)
    if v is None:
        raise SchemaError(name, "required field is missing")
    if not isinstance(v, str):
        raise SchemaError(name, f"expected a string, got {type(v).__name__}")
    if non_empty and not v:
        raise SchemaError(name, "must not be empty")
    if len(v) > max_len:
        raise SchemaError(name, f"longer than {max_len} characters ({len(v)})")
    return v


def req_id(d: Mapping[str, Any], name: str) -> str:
    """A node or job id (`schemas.bounds.check_id`)."""
    return b.check_id(name, req_str(d, name, non_empty=False, max_len=b.ID_MAX_CHARS + 1))


def opt_id(d: Mapping[str, Any], name: str) -> str | None:
    v = opt_str(d, name, max_len=b.ID_MAX_CHARS + 1)
    return None if v is None else b.check_id(name, v)


def req_int(
    d: Mapping[str, Any], name: str, *, minimum: int | None = None, maximum: int = b.U64_MAX
) -> int:
    v = d.get(name)
    if v is None:
        raise SchemaError(name, "required field is missing")
    return check_int(name, v, minimum, maximum)


def check_int(name: str, v: Any, minimum: int | None, maximum: int = b.U64_MAX) -> int:
    if not isinstance(v, int) or isinstance(v, bool):
        raise SchemaError(name, f"expected an integer, got {type(v).__name__}")
    if minimum is not None and v < minimum:
        raise SchemaError(name, f"must be >= {minimum}, got {v}")
    if v > maximum:
        raise SchemaError(name, f"must be <= {maximum}, got {v}")
    return v


def req_ts(d: Mapping[str, Any], name: str = "ts_ms") -> int:
    """An event time in epoch ms, inside the absolute bounds (`schemas.bounds.check_ts`)."""
    return b.check_ts(name, req_int(d, name))


def opt_ts(d: Mapping[str, Any], name: str) -> int | None:
    v = d.get(name)
    return None if v is None else b.check_ts(name, check_int(name, v, None))


def opt_int(
    d: Mapping[str, Any], name: str, *, minimum: int | None = None, maximum: int = b.U64_MAX
) -> int | None:
    v = d.get(name)
    return None if v is None else check_int(name, v, minimum, maximum)


def opt_str(d: Mapping[str, Any], name: str, *, max_len: int = b.TEXT_MAX_CHARS) -> str | None:
    v = d.get(name)
    if v is None:
        return None
    if not isinstance(v, str):
        raise SchemaError(name, f"expected a string, got {type(v).__name__}")
    if len(v) > max_len:
        raise SchemaError(name, f"longer than {max_len} characters ({len(v)})")
    return v


def opt_bool(d: Mapping[str, Any], name: str, default: bool) -> bool:
    v = d.get(name)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise SchemaError(name, f"expected a boolean, got {type(v).__name__}")
    return v


def opt_enum(d: Mapping[str, Any], name: str, allowed: frozenset[S]) -> S | None:
    """One of `allowed` (a closed set, often a Literal's values), or None when absent."""
    v = opt_str(d, name, max_len=b.SHORT_MAX_CHARS)
    if v is not None and v not in allowed:
        raise SchemaError(name, f"must be one of {sorted(allowed)}, got {v!r}")
    return v


def req_enum(d: Mapping[str, Any], name: str, allowed: frozenset[S]) -> S:
    """One of `allowed` (a closed set, often a Literal's values)."""
    v = req_str(d, name, max_len=b.SHORT_MAX_CHARS)
    if v not in allowed:
        raise SchemaError(name, f"must be one of {sorted(allowed)}, got {v!r}")
    return v


def opt_object(d: Mapping[str, Any], name: str) -> dict[str, Any] | None:
    v = d.get(name)
    if v is None:
        return None
    if not isinstance(v, dict):
        raise SchemaError(name, f"expected an object, got {type(v).__name__}")
    return b.check_free_object(name, v)


def check_version(d: Mapping[str, Any]) -> None:
    v = d.get("schema_version")
    if v is not None and v != SCHEMA_VERSION:
        raise SchemaError("schema_version", f"unsupported version {v!r} (this build reads 1)")


def str_list(
    d: Mapping[str, Any], name: str, *, required: bool, max_items: int | None = None
) -> tuple[str, ...]:
    """A list of node ids, at most `max_items` (default: the MAX_JOB_NODES setting)."""
    v = d.get(name)
    if v is None:
        if required:
            raise SchemaError(name, "required field is missing")
        return ()
    if not isinstance(v, list):
        raise SchemaError(name, f"expected a list of strings, got {type(v).__name__}")
    cap = b.MAX_JOB_NODES if max_items is None else max_items
    if len(v) > cap:
        raise SchemaError(name, f"{len(v)} items, more than the cap of {cap}")
    for i, item in enumerate(v):
        if not isinstance(item, str):
            raise SchemaError(f"{name}[{i}]", "expected a non-empty string")
        b.check_id(f"{name}[{i}]", item)
    return tuple(v)
