"""The failure policy: data, not if-chains. Shipped as `streams/data/policy.json`.

A policy file is validated whole before use: a bad key is a `PolicyError` naming it, never a
half-loaded policy.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Any, cast

import orjson

from schemas.decisions import EvidenceClass
from schemas.health import CONDITIONS, LIVENESS_CONDITIONS
from schemas.quarantine import HISTORY_MAX

EVIDENCE_CLASSES: tuple[EvidenceClass, ...] = (
    "hardware",
    "software",
    "transient",
    "precursor",
    "ignore",
)
# The liveness conditions' own class: they count only through the silent-node rule; "ignore"
# drops them (no heartbeat reaches the engine, so no node is ever silent).
LIVENESS_CLASSES: tuple[EvidenceClass, ...] = ("liveness", "ignore")
# The silent-node rule (docs/silent-nodes.md): the defaults of its keys.
DEFAULT_HEARTBEAT_INTERVAL_S = 30
DEFAULT_MISSED_HEARTBEATS = 3
DEFAULT_SILENT_REASONS = ("WorkerLost", "NodeLost")
DEFAULT_SILENT_CONDITIONS = ("agent_silent", "nvml_hung")
_REQUIRED_INT_KEYS = (
    "lookback_s",
    "grace_s",
    "coalesce_s",
    "max_failovers",
    "max_evidence_per_node",
)


class PolicyError(ValueError):
    """The policy file is unusable; the message names the key and what is wrong."""


@dataclass(frozen=True)
class Policy:
    lookback_ms: int
    grace_ms: int
    coalesce_ms: int
    max_failovers: int
    max_evidence_per_node: int
    xid_class: MappingProxyType[int, EvidenceClass]
    condition_class: MappingProxyType[str, EvidenceClass]
    reason_class: MappingProxyType[str, EvidenceClass]
    source: str
    # Training telemetry (optional keys, defaults below): a running job silent this long hangs;
    # a throughput sample under `straggler_ratio` x the job's recent level is a straggler.
    hang_after_ms: int = 600_000
    straggler_ratio: float = 0.5
    straggler_min_samples: int = 5
    # How long a node keeps evidence after its newer signals (still capped by
    # max_evidence_per_node): a termination read this much later than the node's signals
    # (a job agent down or rebalancing while the node side goes on) still finds it.
    evidence_retention_ms: int = 172_800_000
    # Node lifecycle (consumers/quarantine/lifecycle.py, docs/node-lifecycle.md): a node
    # quarantined `lemon_count` times within `lemon_window` is a lemon (only an operator may
    # release it); a passed validation releases a node only with `auto_release`; an agent's
    # restart triggers a validation only with `validate_on_repair`, at most
    # `max_validations_per_episode` per quarantine episode (operator requests included).
    lemon_count: int = 3
    lemon_window_ms: int = 604_800_000
    auto_release: bool = False
    validate_on_repair: bool = False
    max_validations_per_episode: int = 3
    # The silent-node rule: an agent unheard for `silent_after_ms` is silent; a termination
    # with one of `silent_reasons` on a node showing one of `silent_conditions` at its time is
    # hardware with that node as the suspect.
    heartbeat_interval_ms: int = DEFAULT_HEARTBEAT_INTERVAL_S * 1000
    missed_heartbeats: int = DEFAULT_MISSED_HEARTBEATS
    silent_reasons: frozenset[str] = frozenset(DEFAULT_SILENT_REASONS)
    silent_conditions: frozenset[str] = frozenset(DEFAULT_SILENT_CONDITIONS)

    @property
    def silent_after_ms(self) -> int:
        # Never under coalesce: the signal filter folds heartbeats closer than coalesce into
        # one span, so a shorter gap could be seen by replay (record by record) and not on Kafka.
        return max(self.heartbeat_interval_ms * self.missed_heartbeats, self.coalesce_ms)

    @property
    def retention_ms(self) -> int:
        # Evidence must outlive any termination that can still gather it: T - lookback is the
        # oldest it needs, T can be up to `grace` behind the watermark, and the termination can
        # reach the node side late (evidence_retention): the decision must not depend on that.
        return max(self.lookback_ms + self.grace_ms, self.evidence_retention_ms)

    def classify_xid(self, code: int) -> EvidenceClass:
        return self.xid_class.get(code, "ignore")

    def is_known_xid(self, code: int) -> bool:
        return code in self.xid_class

    def classify_condition(self, condition: str) -> EvidenceClass:
        return self.condition_class.get(condition, "ignore")

    def classify_reason(self, reason: str | None) -> EvidenceClass:
        if reason is None:
            return "ignore"
        return self.reason_class.get(reason, "ignore")


def _class_of(where: str, value: Any) -> EvidenceClass:
    cls = value.get("class") if isinstance(value, dict) else value
    if cls not in EVIDENCE_CLASSES:
        raise PolicyError(f"{where}: class must be one of {list(EVIDENCE_CLASSES)}, got {cls!r}")
    return cast(EvidenceClass, cls)  # checked against EVIDENCE_CLASSES above


def policy_from_dict(data: Any, source: str = "<dict>") -> Policy:
    if not isinstance(data, dict):
        raise PolicyError(f"{source}: the policy must be a JSON object")
    ints: dict[str, int] = {}
    for key in _REQUIRED_INT_KEYS:
        v = data.get(key)
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise PolicyError(f"{source}: {key} must be a non-negative integer, got {v!r}")
        ints[key] = v
    if ints["max_evidence_per_node"] < 1:
        raise PolicyError(f"{source}: max_evidence_per_node must be >= 1")
    xids: dict[int, EvidenceClass] = {}
    raw_xid = data.get("xid")
    if not isinstance(raw_xid, dict):
        raise PolicyError(f"{source}: xid must be an object of code -> class")
    for code, entry in raw_xid.items():
        try:
            n = int(code)
        except ValueError:
            raise PolicyError(f"{source}: xid.{code}: not an integer XID code") from None
        if n < 0:
            raise PolicyError(f"{source}: xid.{code}: XID codes are >= 0")
        xids[n] = _class_of(f"{source}: xid.{code}", entry)
    conditions: dict[str, EvidenceClass] = {}
    raw_cond = data.get("conditions")
    if not isinstance(raw_cond, dict):
        raise PolicyError(f"{source}: conditions must be an object of condition -> class")
    for cond, entry in raw_cond.items():
        if cond not in CONDITIONS:
            raise PolicyError(f"{source}: conditions.{cond}: unknown condition")
        if cond in LIVENESS_CONDITIONS:
            if entry not in LIVENESS_CLASSES:
                raise PolicyError(
                    f"{source}: conditions.{cond}: class must be one of "
                    f"{list(LIVENESS_CLASSES)}, got {entry!r}"
                )
            conditions[cond] = cast(EvidenceClass, entry)  # in LIVENESS_CLASSES
            continue
        conditions[cond] = _class_of(f"{source}: conditions.{cond}", entry)
    for cond in LIVENESS_CONDITIONS - conditions.keys():
        conditions[cond] = "liveness"  # policies written before these conditions existed
    missing = sorted(CONDITIONS - conditions.keys())
    if missing:
        raise PolicyError(f"{source}: conditions: no class for {missing}")
    raw_reasons = data.get("reasons", {})
    if not isinstance(raw_reasons, dict):
        raise PolicyError(f"{source}: reasons must be an object of reason -> class")
    reasons = {str(r): _class_of(f"{source}: reasons.{r}", c) for r, c in raw_reasons.items()}
    hang_after_s = data.get("hang_after_s", 600)
    if not isinstance(hang_after_s, int) or isinstance(hang_after_s, bool) or hang_after_s < 1:
        raise PolicyError(
            f"{source}: hang_after_s must be a positive integer, got {hang_after_s!r}"
        )
    ratio = data.get("straggler_ratio", 0.5)
    if not isinstance(ratio, int | float) or isinstance(ratio, bool) or not 0 < ratio < 1:
        raise PolicyError(f"{source}: straggler_ratio must be a number in (0, 1), got {ratio!r}")
    min_samples = data.get("straggler_min_samples", 5)
    if not isinstance(min_samples, int) or isinstance(min_samples, bool) or min_samples < 1:
        raise PolicyError(
            f"{source}: straggler_min_samples must be a positive integer, got {min_samples!r}"
        )
    retention_s = data.get("evidence_retention_s", 172_800)
    if not isinstance(retention_s, int) or isinstance(retention_s, bool) or retention_s < 1:
        raise PolicyError(
            f"{source}: evidence_retention_s must be a positive integer, got {retention_s!r}"
        )
    lifecycle = _lifecycle_keys(data, source)
    silent = _silent_node(data.get("silent_node", {}), source)
    return Policy(
        lookback_ms=ints["lookback_s"] * 1000,
        grace_ms=ints["grace_s"] * 1000,
        coalesce_ms=ints["coalesce_s"] * 1000,
        max_failovers=ints["max_failovers"],
        max_evidence_per_node=ints["max_evidence_per_node"],
        xid_class=MappingProxyType(xids),
        condition_class=MappingProxyType(conditions),
        reason_class=MappingProxyType(reasons),
        source=source,
        hang_after_ms=hang_after_s * 1000,
        straggler_ratio=float(ratio),
        straggler_min_samples=min_samples,
        evidence_retention_ms=retention_s * 1000,
        **lifecycle,
        heartbeat_interval_ms=silent["heartbeat_interval_s"] * 1000,
        missed_heartbeats=silent["missed_heartbeats"],
        silent_reasons=frozenset(silent["reasons"]),
        silent_conditions=frozenset(silent["conditions"]),
    )


def _lifecycle_keys(data: dict[str, Any], source: str) -> dict[str, Any]:
    """The optional node-lifecycle keys, checked; Policy's field names -> values."""
    out: dict[str, Any] = {}
    for key, field_name, default, factor in (
        ("lemon_count", "lemon_count", 3, 1),
        ("lemon_window_s", "lemon_window_ms", 604_800, 1000),
        ("max_validations_per_episode", "max_validations_per_episode", 3, 1),
    ):
        v = data.get(key, default)
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise PolicyError(f"{source}: {key} must be a positive integer, got {v!r}")
        out[field_name] = v * factor
    if out["lemon_count"] > HISTORY_MAX:
        raise PolicyError(f"{source}: lemon_count must be <= {HISTORY_MAX}")
    for key in ("auto_release", "validate_on_repair"):
        flag = data.get(key, False)
        if not isinstance(flag, bool):
            raise PolicyError(f"{source}: {key} must be true or false, got {flag!r}")
        out[key] = flag
    return out


def _silent_node(raw: Any, source: str) -> dict[str, Any]:
    """The `silent_node` section, each key defaulted (docs/silent-nodes.md)."""
    where = f"{source}: silent_node"
    if not isinstance(raw, dict):
        raise PolicyError(f"{where} must be an object")
    unknown = sorted(raw.keys() - {"heartbeat_interval_s", "missed_heartbeats", "reasons",
                                   "conditions"})  # fmt: skip
    if unknown:
        raise PolicyError(f"{where}: unknown keys {unknown}")
    out: dict[str, Any] = {}
    for key, default in (
        ("heartbeat_interval_s", DEFAULT_HEARTBEAT_INTERVAL_S),
        ("missed_heartbeats", DEFAULT_MISSED_HEARTBEATS),
    ):
        v = raw.get(key, default)
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise PolicyError(f"{where}.{key} must be a positive integer, got {v!r}")
        out[key] = v
    for key, default_names, allowed in (
        ("reasons", DEFAULT_SILENT_REASONS, None),
        ("conditions", DEFAULT_SILENT_CONDITIONS, LIVENESS_CONDITIONS - {"heartbeat"}),
    ):
        names = raw.get(key, list(default_names))
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise PolicyError(f"{where}.{key} must be a list of strings, got {names!r}")
        bad = sorted(set(names) - allowed) if allowed is not None else []
        if bad:
            raise PolicyError(f"{where}.{key}: {bad} not among {sorted(allowed or ())}")
        out[key] = names
    return out


def load_policy(path: str | Path | None = None) -> Policy:
    """Load `path`, or the shipped default policy when `path` is None."""
    if path is None:
        raw = resources.files("streams").joinpath("data/policy.json").read_bytes()
        source = "default policy"
    else:
        source = str(path)
        try:
            raw = Path(path).read_bytes()
        except OSError as exc:
            raise PolicyError(f"{source}: cannot read: {exc.strerror}") from None
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise PolicyError(f"{source}: not valid JSON: {exc}") from None
    return policy_from_dict(data, source)
