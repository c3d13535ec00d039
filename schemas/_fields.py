"""Field readers shared by the decoders. Small and explicit: they are on the hot path."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from schemas.errors import SchemaError

SCHEMA_VERSION = 1


def as_object(value: Any) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise SchemaError("value", f"expected a JSON object, got {type(value).__name__}")
    return value


def req_str(d: Mapping[str, Any], name: str, *, non_empty: bool = True) -> str:
    v = d.get(name)
    if v is None:
        raise SchemaError(name, "required field is missing")
    if not isinstance(v, str):
        raise SchemaError(name, f"expected a string, got {type(v).__name__}")
    if non_empty and not v:
        raise SchemaError(name, "must not be empty")
    return v


def req_int(d: Mapping[str, Any], name: str, *, minimum: int | None = None) -> int:
    v = d.get(name)
    if v is None:
        raise SchemaError(name, "required field is missing")
    return check_int(name, v, minimum)


def check_int(name: str, v: Any, minimum: int | None) -> int:
    if not isinstance(v, int) or isinstance(v, bool):
        raise SchemaError(name, f"expected an integer, got {type(v).__name__}")
    if minimum is not None and v < minimum:
        raise SchemaError(name, f"must be >= {minimum}, got {v}")
    return v


def opt_int(d: Mapping[str, Any], name: str, *, minimum: int | None = None) -> int | None:
    v = d.get(name)
    return None if v is None else check_int(name, v, minimum)


def opt_str(d: Mapping[str, Any], name: str) -> str | None:
    v = d.get(name)
    if v is None:
        return None
    if not isinstance(v, str):
        raise SchemaError(name, f"expected a string, got {type(v).__name__}")
    return v


def opt_bool(d: Mapping[str, Any], name: str, default: bool) -> bool:
    v = d.get(name)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise SchemaError(name, f"expected a boolean, got {type(v).__name__}")
    return v


def opt_enum(d: Mapping[str, Any], name: str, allowed: frozenset[str]) -> str | None:
    v = opt_str(d, name)
    if v is not None and v not in allowed:
        raise SchemaError(name, f"must be one of {sorted(allowed)}, got {v!r}")
    return v


def req_enum(d: Mapping[str, Any], name: str, allowed: frozenset[str]) -> str:
    v = req_str(d, name)
    if v not in allowed:
        raise SchemaError(name, f"must be one of {sorted(allowed)}, got {v!r}")
    return v


def opt_object(d: Mapping[str, Any], name: str) -> dict[str, Any] | None:
    v = d.get(name)
    if v is None:
        return None
    if not isinstance(v, dict):
        raise SchemaError(name, f"expected an object, got {type(v).__name__}")
    return v


def check_version(d: Mapping[str, Any]) -> None:
    v = d.get("schema_version")
    if v is not None and v != SCHEMA_VERSION:
        raise SchemaError("schema_version", f"unsupported version {v!r} (this build reads 1)")


def str_list(d: Mapping[str, Any], name: str, *, required: bool) -> tuple[str, ...]:
    v = d.get(name)
    if v is None:
        if required:
            raise SchemaError(name, "required field is missing")
        return ()
    if not isinstance(v, list):
        raise SchemaError(name, f"expected a list of strings, got {type(v).__name__}")
    for i, item in enumerate(v):
        if not isinstance(item, str) or not item:
            raise SchemaError(f"{name}[{i}]", "expected a non-empty string")
    return tuple(v)
