"""`gpu.xid` (key: node): one XID error reported by a GPU node."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from schemas import _fields as f

XID_SOURCES = frozenset({"nvml", "kmsg", "dcgm", "sim"})


@dataclass(frozen=True, slots=True)
class GpuXid:
    node: str
    xid: int
    ts_ms: int
    gpu_index: int | None = None
    gpu_uuid: str | None = None
    pci_bus_id: str | None = None
    message: str | None = None
    source: str | None = None
    count: int = 1  # repeats coalesced by the agent before publishing

    @staticmethod
    def from_dict(value: Any) -> GpuXid:
        d = f.as_object(value)
        f.check_version(d)
        return GpuXid(
            node=f.req_str(d, "node"),
            xid=f.req_int(d, "xid", minimum=0),
            ts_ms=f.req_int(d, "ts_ms"),
            gpu_index=f.opt_int(d, "gpu_index", minimum=0),
            gpu_uuid=f.opt_str(d, "gpu_uuid"),
            pci_bus_id=f.opt_str(d, "pci_bus_id"),
            message=f.opt_str(d, "message"),
            source=f.opt_enum(d, "source", XID_SOURCES),
            count=f.opt_int(d, "count", minimum=1) or 1,
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "schema_version": f.SCHEMA_VERSION,
            "node": self.node,
            "xid": self.xid,
            "ts_ms": self.ts_ms,
        }
        for k in ("gpu_index", "gpu_uuid", "pci_bus_id", "message", "source"):
            v = getattr(self, k)
            if v is not None:
                out[k] = v
        if self.count != 1:
            out["count"] = self.count
        return out
