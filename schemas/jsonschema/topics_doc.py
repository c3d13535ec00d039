"""docs/topics.md: one table of every topic, generated from the catalog and the value types."""

from __future__ import annotations

from schemas.registry import VALUE_TYPES
from schemas.topics import SPECS, TopicSpec

_HEADER = """\
# Topics

Every Kafka topic of the pipeline: its key, the record its values are, how long it is kept,
who writes it and who reads it. Generated from `schemas/topics.py` (the catalog) and
`schemas/registry.py` (the value types) by `python -m schemas.jsonschema write`; do not edit by
hand (a test fails when it is stale). Each value links to its topic's JSON Schema (draft
2020-12), shipped in the package as `schemas/jsonschema/<topic>.json`, for tools in other
languages that publish or read these topics.

Topic names get the prefix `GPUFAILOVER_TOPIC_PREFIX` (empty by default). A topic marked
internal is written and read by the classifier only.

| topic | key | value | retention | written by | read by |
|-------|-----|-------|-----------|------------|---------|
"""


def _retention(spec: TopicSpec) -> str:
    ms = spec.retention_ms
    if ms is None:
        return "compacted"
    for unit, size in (("d", 86_400_000), ("h", 3_600_000)):
        if ms % size == 0:
            return f"{ms // size} {unit}"
    return f"{ms} ms"


def _row(spec: TopicSpec) -> str:
    name = f"`{spec.logical}`" + (" (internal)" if spec.internal else "")
    types = ", ".join(t.__name__ for t in VALUE_TYPES[spec.logical])
    value = f"[{types}](../schemas/jsonschema/{spec.logical}.json)"
    cells = (
        name,
        spec.key.value,
        value,
        _retention(spec),
        "; ".join(spec.writers),
        "; ".join(spec.readers),
    )
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"


def topics_markdown() -> str:
    return _HEADER + "\n".join(_row(spec) for spec in SPECS.values()) + "\n"
