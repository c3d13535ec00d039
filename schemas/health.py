"""`gpu.health` (key: node): a change of a GPU's health condition."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from schemas import _fields as f

HARDWARE_CONDITIONS = frozenset(
    {"gpu_lost", "ecc_uncorrectable", "row_remap_failure", "thermal", "power", "pcie", "nvlink"}
)
PRECURSOR_CONDITIONS = frozenset({"row_remap_pending", "ecc_correctable_rate"})
CONDITIONS = HARDWARE_CONDITIONS | PRECURSOR_CONDITIONS | {"throttle", "ok"}
SEVERITIES = frozenset({"critical", "warning", "info"})


@dataclass(frozen=True, slots=True)
class GpuHealth:
    node: str
    ts_ms: int
    condition: str
    gpu_index: int | None = None
    severity: str | None = None
    detail: str | None = None
    metrics: dict[str, Any] | None = None
    gpu_uuid: str | None = None
    pci_bus_id: str | None = None

    @staticmethod
    def from_dict(value: Any) -> GpuHealth:
        d = f.as_object(value)
        f.check_version(d)
        return GpuHealth(
            node=f.req_str(d, "node"),
            ts_ms=f.req_int(d, "ts_ms"),
            condition=f.req_enum(d, "condition", CONDITIONS),
            gpu_index=f.opt_int(d, "gpu_index", minimum=0),
            severity=f.opt_enum(d, "severity", SEVERITIES),
            detail=f.opt_str(d, "detail"),
            metrics=f.opt_object(d, "metrics"),
            gpu_uuid=f.opt_str(d, "gpu_uuid"),
            pci_bus_id=f.opt_str(d, "pci_bus_id"),
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
