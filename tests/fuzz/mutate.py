"""Seeded generator of hostile records for every input topic (issue 12, item 8).

Each record starts as a valid record of its topic and gets one to three mutations from what a
broken agent, a bad export or an attacker writes: wrong types, missing fields, 64-bit
overflows, far-future / zero / negative / seconds times, invalid UTF-8, lone surrogates, deep
nesting, 1 MB strings, 10,000-node lists, blank and control-character ids, non-objects,
truncated JSON, unknown fields and unknown topics. Valid records draw their ids from a small
pool, so the engine's state stays bounded and the run measures the code, not the fleet size.

The same seed gives the same records (`random.Random(seed)`): a failure names its seed and
index and reproduces.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import orjson

NOW_MS = 1_800_000_000_000  # the fuzz run's wall clock (2027-01-15); replay uses it as --now
NODES = [f"gpu-{i:03d}" for i in range(32)]
JOBS = [f"job-{i:03d}" for i in range(16)]
BIG_STRING_CHARS = 1_000_000
BIG_NODE_LIST = 10_000
DEEP = 2_000  # orjson refuses past 1,024 levels; 300 it reads but cannot write back

# Topics the records are written to: the pipeline's inputs and what the consumers read.
PIPELINE_TOPICS = ("gpu.xid", "gpu.health", "jobs.events", "training.telemetry")
CONSUMER_TOPICS = ("failover.decisions", "failover.quarantine-requests")
UNKNOWN_TOPICS = ("gpu.xid2", "", "failover.node-signals", "jobs.events.dlq.x")


@dataclass(frozen=True, slots=True)
class Hostile:
    topic: str  # logical topic (may be unknown)
    key: bytes | None
    value: bytes | None  # None: a tombstone
    mutations: tuple[str, ...]


def _ts(rng: random.Random) -> int:
    return NOW_MS - rng.randrange(0, 3_600_000)


def valid(topic: str, rng: random.Random) -> dict[str, Any]:
    """A record that decodes, of logical `topic`."""
    node, job, ts = rng.choice(NODES), rng.choice(JOBS), _ts(rng)
    if topic == "gpu.xid":
        code = rng.choice((79, 48, 13, 31, 45, 63, 999))
        return {"node": node, "xid": code, "ts_ms": ts, "gpu_index": rng.randrange(8),
                "count": rng.randrange(1, 5), "source": "kmsg"}  # fmt: skip
    if topic == "gpu.health":
        condition = rng.choice(("ok", "ok", "ok", "gpu_lost", "throttle", "row_remap_pending"))
        return {"node": node, "ts_ms": ts, "condition": condition, "gpu_index": rng.randrange(8),
                "metrics": {"temp_c": 70}}  # fmt: skip
    if topic == "jobs.events":
        kind = rng.choice(("started", "terminated", "succeeded", "submitted"))
        return {"job_id": job, "attempt": rng.randrange(3), "type": kind, "ts_ms": ts,
                "nodes": rng.sample(NODES, 2), "reason": rng.choice(("OOMKilled", None)),
                "spec": {"gpus": 16}}  # fmt: skip
    if topic == "training.telemetry":
        return {"job_id": job, "attempt": rng.randrange(3), "kind": "heartbeat", "ts_ms": ts,
                "step": rng.randrange(10_000)}  # fmt: skip
    if topic == "failover.quarantine-requests":
        return {"node": node, "state": "quarantined", "reason": "hardware", "ts_ms": ts,
                "evidence": [], "job_id": job}  # fmt: skip
    if topic == "failover.decisions":
        return {"job_id": job, "attempt": rng.randrange(3), "verdict": "software",
                "action": "reject", "status": "Pending-internalerror", "suspect_nodes": [],
                "next_attempt": None, "evidence": [], "rule": "software.reject",
                "terminated_ts_ms": ts - 120_000, "decided_ts_ms": ts}  # fmt: skip
    raise ValueError(f"no valid record for {topic!r}")


WRONG_TYPES: list[Any] = ["x", 1, 1.5, True, None, [], {}, [1, 2], {"a": 1}]
OVERFLOWS: list[Any] = [2**63 - 1, 2**63, 2**64 - 1, -(2**63), 1e308, -1e308, 1e19]
TIMES: list[Any] = [0, -1, -(2**63), 1_800_000_000, 4_102_444_800_000, 2**64 - 1, 2**63 - 1]
BAD_IDS: list[Any] = ["", " ", "\u0000", "a\nb", "\u00a0", "x" * 300, "\u202egpu", "a b"]


def _field(value: dict[str, Any], rng: random.Random) -> str:
    return rng.choice(sorted(value)) if value else "x"


def _nested(depth: int) -> Any:
    inner: Any = 1
    for _ in range(depth):
        inner = [inner]
    return inner


def _m_drop(v: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    v.pop(_field(v, rng), None)
    return v


def _m_wrong_type(v: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    v[_field(v, rng)] = rng.choice(WRONG_TYPES)
    return v


def _m_overflow(v: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    ints = [k for k, x in v.items() if isinstance(x, int) and not isinstance(x, bool)]
    v[rng.choice(ints) if ints else _field(v, rng)] = rng.choice(OVERFLOWS)
    return v


def _m_time(v: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    v[rng.choice([k for k in v if k.endswith("ts_ms")] or ["ts_ms"])] = rng.choice(TIMES)
    return v


def _m_bad_id(v: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    for name in ("node", "job_id"):
        if name in v:
            v[name] = rng.choice(BAD_IDS)
            return v
    v["nodes"] = ["gpu-001", rng.choice(BAD_IDS)]
    return v


def _m_big_string(v: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    v[rng.choice(("message", "detail", "reason", "node", "job_id", "uri"))] = "x" * (
        BIG_STRING_CHARS
    )
    return v


def _m_many_nodes(v: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    nodes = [f"n{i}" for i in range(BIG_NODE_LIST)]
    v["nodes" if "job_id" in v and "type" in v else "suspect_nodes"] = nodes
    if "type" in v:
        v["type"] = "terminated"
    return v


def _m_nesting(v: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    v[rng.choice(("metrics", "spec", "evidence", "checkpoint"))] = {
        "a": _nested(rng.choice((9, 300)))
    }
    return v


def _m_unknown_field(v: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    v[f"extra_{rng.randrange(100)}"] = rng.choice(WRONG_TYPES)
    return v


def _m_version(v: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    v["schema_version"] = rng.choice((0, 2, "1", None))
    return v


DICT_MUTATIONS: dict[str, Callable[[dict[str, Any], random.Random], dict[str, Any]]] = {
    "drop": _m_drop,
    "wrong_type": _m_wrong_type,
    "overflow": _m_overflow,
    "time": _m_time,
    "bad_id": _m_bad_id,
    "big_string": _m_big_string,
    "many_nodes": _m_many_nodes,
    "nesting": _m_nesting,
    "unknown_field": _m_unknown_field,
    "version": _m_version,
}
# Rare on purpose (each costs a megabyte): still thousands of them in a full run.
RARE = frozenset({"big_string", "many_nodes"})


def _bytes_mutation(raw: bytes, rng: random.Random) -> tuple[bytes | None, str]:
    """Mutations below JSON: the bytes on the wire."""
    kind = rng.choice(("utf8", "surrogate", "truncate", "not_object", "deep", "tombstone", "empty"))
    if kind == "utf8":
        i = rng.randrange(len(raw))
        return raw[:i] + rng.choice((b"\xff", b"\xc3", b"\xed\xa0\x80")) + raw[i:], kind
    if kind == "surrogate":
        return raw.replace(b'"ts_ms"', b'"\\ud800ts"', 1).replace(b'":"', b'":"\\udc00', 1), kind
    if kind == "truncate":
        return raw[: rng.randrange(len(raw))], kind
    if kind == "not_object":
        return rng.choice((b"[]", b"1", b'"x"', b"null", b"true", b"[{}]")), kind
    if kind == "deep":
        return b"[" * DEEP + b"]" * DEEP, kind
    if kind == "tombstone":
        return None, kind
    return b"", kind


def hostile(topic: str, rng: random.Random) -> Hostile:
    """One mutated record of logical `topic`."""
    value = valid(topic, rng)
    applied: list[str] = []
    if rng.random() < 0.15:
        raw, kind = _bytes_mutation(orjson.dumps(value), rng)
        return Hostile(topic, _key(value), raw, (kind,))
    for _ in range(rng.randrange(1, 4)):
        name = rng.choice(sorted(DICT_MUTATIONS))
        if name in RARE and rng.random() < 0.97:
            name = "wrong_type"
        value = DICT_MUTATIONS[name](value, rng)
        applied.append(name)
    if rng.random() < 0.02:
        topic = rng.choice(UNKNOWN_TOPICS)
        applied.append("unknown_topic")
    return Hostile(topic, _key(value), _dumps(value), tuple(applied))


def _dumps(value: dict[str, Any]) -> bytes:
    try:
        return orjson.dumps(value)
    except orjson.JSONEncodeError:  # nested deeper than orjson writes: the stdlib does
        return json.dumps(value).encode()


def _key(value: dict[str, Any]) -> bytes | None:
    key = value.get("node", value.get("job_id"))
    return key.encode("utf-8", "surrogatepass") if isinstance(key, str) else None


def records(topics: tuple[str, ...], per_topic: int, seed: int) -> Iterator[Hostile]:
    """`per_topic` hostile records of each topic, interleaved, a tenth of them left valid."""
    rng = random.Random(seed)
    for _ in range(per_topic):
        for topic in topics:
            if rng.random() < 0.1:
                value = valid(topic, rng)
                yield Hostile(topic, _key(value), orjson.dumps(value), ())
            else:
                yield hostile(topic, rng)
