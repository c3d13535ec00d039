"""`gpu.health` (key: node): a change of a GPU's health condition."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, get_args

from schemas import _fields as f
from schemas import bounds as b

Condition = Literal[
    "gpu_lost",
    "ecc_uncorrectable",
    "row_remap_failure",
    "thermal",
    "power",
    "pcie",
    "nvlink",
    "row_remap_pending",
    "ecc_correctable_rate",
    "heartbeat",
    "nvml_hung",
    "agent_silent",
    "throttle",
    "ok",
]
Severity = Literal["critical", "warning", "info"]
HARDWARE_CONDITIONS: frozenset[Condition] = frozenset(
    {"gpu_lost", "ecc_uncorrectable", "row_remap_failure", "thermal", "power", "pcie", "nvlink"}
)
PRECURSOR_CONDITIONS: frozenset[Condition] = frozenset(
    {"row_remap_pending", "ecc_correctable_rate"}
)
# Whether the node's agent is heard from (docs/silent-nodes.md): `heartbeat` every interval,
# `nvml_hung` instead while an NVML call has not returned (the agent's watchdog), and
# `agent_silent`, which the classifier itself puts in a decision's evidence.
LIVENESS_CONDITIONS: frozenset[Condition] = frozenset({"heartbeat", "nvml_hung", "agent_silent"})
CONDITIONS: frozenset[Condition] = frozenset(get_args(Condition))
SEVERITIES: frozenset[Severity] = frozenset(get_args(Severity))
# The bounds as module globals for `GpuHealth.peek`, run for nearly every input record.
_ID_MAX, _TEXT_MAX, _SHORT_MAX = b.ID_MAX_CHARS, b.TEXT_MAX_CHARS, b.SHORT_MAX_CHARS
_TS_FLOOR, _TS_CEIL, _GPU_MAX = b.TS_FLOOR_MS, b.TS_CEIL_MS, b.GPU_INDEX_MAX
_VERSION, _is_flat = f.SCHEMA_VERSION, b.is_flat


def as_condition(value: str) -> Condition:
    """`value` as a Condition; ValueError when it is not one."""
    if value not in CONDITIONS:
        raise ValueError(f"{value!r} is not a health condition (one of {sorted(CONDITIONS)})")
    return value


@dataclass(frozen=True, slots=True)
class GpuHealth:
    node: str
    ts_ms: int
    condition: Condition
    gpu_index: int | None = None
    severity: Severity | None = None
    detail: str | None = None
    metrics: dict[str, Any] | None = None
    gpu_uuid: str | None = None
    pci_bus_id: str | None = None

    @staticmethod
    def from_dict(value: Any) -> GpuHealth:
        # Fast path: `peek` accepts only records the checked path below accepts; the same
        # value is built from them. Anything else goes through the checked path.
        if GpuHealth.peek(value) is not None:
            get = value.get
            return GpuHealth(
                get("node"),
                get("ts_ms"),
                get("condition"),
                get("gpu_index"),
                get("severity"),
                get("detail"),
                get("metrics"),
                get("gpu_uuid"),
                get("pci_bus_id"),
            )
        return GpuHealth.from_dict_checked(value)

    @staticmethod
    def peek(value: Any) -> tuple[str, int, Condition] | None:
        """(node, ts_ms, condition) of a sample `from_dict` accepts, checked in full without
        building it: most samples are ones the policy ignores, and the hot loops (signal
        filter, replay) need only their time. None: decode with `from_dict` (the checked
        path names the bad field, or accepts an unusual but valid record)."""
        if type(value) is dict:
            get = value.get
            node, ts, cond = get("node"), get("ts_ms"), get("condition")
            gpu, sev, detail, metrics = (
                get("gpu_index"),
                get("severity"),
                get("detail"),
                get("metrics"),
            )
            uuid, pci, version = get("gpu_uuid"), get("pci_bus_id"), get("schema_version")
            if (
                type(node) is str
                and 0 < len(node) <= _ID_MAX
                and node.isprintable()
                and " " not in node  # b.is_id, inlined
                and type(ts) is int
                and _TS_FLOOR <= ts <= _TS_CEIL
                and type(cond) is str
                and cond in CONDITIONS
                and (gpu is None or (type(gpu) is int and 0 <= gpu <= _GPU_MAX))
                and (sev is None or (type(sev) is str and sev in SEVERITIES))
                and (detail is None or (type(detail) is str and len(detail) <= _TEXT_MAX))
                and (metrics is None or (type(metrics) is dict and _is_flat(metrics)))
                and (uuid is None or (type(uuid) is str and len(uuid) <= _SHORT_MAX))
                and (pci is None or (type(pci) is str and len(pci) <= _SHORT_MAX))
                and (version is None or version == _VERSION)
            ):
                return node, ts, cond
        return None

    @staticmethod
    def from_dict_checked(value: Any) -> GpuHealth:
        """Decode with a field-by-field check: the error names the first bad field."""
        d = f.as_object(value)
        f.check_version(d)
        return GpuHealth(
            node=f.req_id(d, "node"),
            ts_ms=f.req_ts(d),
            condition=f.req_enum(d, "condition", CONDITIONS),
            gpu_index=f.opt_int(d, "gpu_index", minimum=0, maximum=b.GPU_INDEX_MAX),
            severity=f.opt_enum(d, "severity", SEVERITIES),
            detail=f.opt_str(d, "detail"),
            metrics=f.opt_object(d, "metrics"),
            gpu_uuid=f.opt_str(d, "gpu_uuid", max_len=b.SHORT_MAX_CHARS),
            pci_bus_id=f.opt_str(d, "pci_bus_id", max_len=b.SHORT_MAX_CHARS),
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "schema_version": f.SCHEMA_VERSION,
            "node": self.node,
            "ts_ms": self.ts_ms,
            "condition": self.condition,
        }
        for k in ("gpu_index", "severity", "detail", "metrics", "gpu_uuid", "pci_bus_id"):
            v = getattr(self, k)
            if v is not None:
                out[k] = v
        return out
