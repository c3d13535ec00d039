"""`gpu.xid` (key: node): one XID error reported by a GPU node."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from schemas import _fields as f
from schemas import bounds as b

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
        # Fast path: `peek` accepts only records the checked path below accepts; the same
        # value is built from them. Anything else goes through the checked path.
        if GpuXid.peek(value) is not None:
            get = value.get
            return GpuXid(
                get("node"),
                get("xid"),
                get("ts_ms"),
                get("gpu_index"),
                get("gpu_uuid"),
                get("pci_bus_id"),
                get("message"),
                get("source"),
                get("count") or 1,
            )
        return GpuXid.from_dict_checked(value)

    @staticmethod
    def peek(value: Any) -> tuple[str, int, int, int | None, int] | None:
        """(node, xid, ts_ms, gpu_index, count) of a record `from_dict` accepts, checked in
        full without building it (a flood is hundreds of thousands of these). None: decode
        with `from_dict` (the checked path names the bad field)."""
        if type(value) is dict:
            get = value.get
            node, code, ts, gpu = get("node"), get("xid"), get("ts_ms"), get("gpu_index")
            uuid, pci, message, source = (
                get("gpu_uuid"),
                get("pci_bus_id"),
                get("message"),
                get("source"),
            )
            count, version = get("count"), get("schema_version")
            if (
                type(node) is str
                and 0 < len(node) <= b.ID_MAX_CHARS
                and node.isprintable()
                and " " not in node  # b.is_id, inlined
                and type(code) is int
                and 0 <= code <= b.XID_MAX
                and type(ts) is int
                and b.TS_FLOOR_MS <= ts <= b.TS_CEIL_MS
                and (gpu is None or (type(gpu) is int and 0 <= gpu <= b.GPU_INDEX_MAX))
                and (uuid is None or (type(uuid) is str and len(uuid) <= b.SHORT_MAX_CHARS))
                and (pci is None or (type(pci) is str and len(pci) <= b.SHORT_MAX_CHARS))
                and (message is None or (type(message) is str and len(message) <= b.TEXT_MAX_CHARS))
                and (source is None or (type(source) is str and source in XID_SOURCES))
                and (count is None or (type(count) is int and 1 <= count <= b.U64_MAX))
                and (version is None or version == f.SCHEMA_VERSION)
            ):
                return node, code, ts, gpu, count or 1
        return None

    @staticmethod
    def from_dict_checked(value: Any) -> GpuXid:
        """Decode with a field-by-field check: the error names the first bad field."""
        d = f.as_object(value)
        f.check_version(d)
        return GpuXid(
            node=f.req_id(d, "node"),
            xid=f.req_int(d, "xid", minimum=0, maximum=b.XID_MAX),
            ts_ms=f.req_ts(d),
            gpu_index=f.opt_int(d, "gpu_index", minimum=0, maximum=b.GPU_INDEX_MAX),
            gpu_uuid=f.opt_str(d, "gpu_uuid", max_len=b.SHORT_MAX_CHARS),
            pci_bus_id=f.opt_str(d, "pci_bus_id", max_len=b.SHORT_MAX_CHARS),
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
