"""Kernel-log XID lines: the parser, the PCI -> GPU directory, and the source over a follower.

Formats (driver `krcReportXid`), after any prefix (`[  966.50]`, `[Fri Aug 30 11:43:09 2024]`,
`host kernel:`, or /dev/kmsg's `pri,seq,usec,flags;`):

    NVRM: Xid (PCI:0000:01:00): 79, pid=1122, GPU has fallen off the bus.
    NVRM: Xid (PCI:0000:cb:00): 13, pid='<unknown>', name=<unknown>, Graphics SM ...
    NVRM: Xid (PCI:0000:3b:00 GPU-I:01 GPU-CI:00): 31, pid=..., name=..., ...   (MIG)
    NVRM: Xid (0000:01:00): 13, 0005 00000000 ...                              (old drivers)
    NVRM: GPU at PCI:0000:01:00: GPU-<uuid>                                    (BDF -> UUID)
    nvidia-nvswitch0: SXid (PCI:0000:c3:00.0): 24007, Fatal, Link 44 ...       (NVSwitch)

A line that mentions `Xid` but matches none of these is counted as unparsed, never an error.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from producers.kmsg_resume import KernelRead, kmsg_seq
from producers.metrics import AgentMetrics
from producers.nvml_source import normalize_pci
from schemas.health import GpuHealth
from schemas.xid import GpuXid

log = logging.getLogger(__name__)

_BDF = r"(?P<bdf>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?)"
_XID_RE = re.compile(
    r"NVRM: Xid \((?:PCI:)?" + _BDF + r"(?:\s+GPU-I:(?P<gi>\d+)\s+GPU-CI:(?P<ci>\d+))?\):"
    r"\s*(?P<code>\d+)\s*(?:,\s*(?P<rest>.*?))?\s*$"
)
_SXID_RE = re.compile(
    r"(?P<dev>nvidia-nvswitch\d+): SXid \((?:PCI:)?" + _BDF + r"\):"
    r"\s*(?P<code>\d+)\s*(?:,\s*(?P<rest>.*?))?\s*$"
)
_MAP_RE = re.compile(
    r"NVRM: GPU at (?:PCI:)?" + _BDF + r":\s*(?P<uuid>GPU-[0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}"
    r"-[0-9a-fA-F]{12})"
)
_PID_RE = re.compile(
    r"^pid=(?P<pid>'<unknown>'|<unknown>|\d*)\s*(?:,\s*|$)"
    r"(?:name=(?P<name>[^,]*?)\s*(?:,\s*|$))?(?P<msg>.*)$"
)
_KMSG_PREFIX_RE = re.compile(r"^\d+,\d+,(?P<usec>\d+),[^;]*;")
_DMESG_PREFIX_RE = re.compile(r"^\[\s*(?P<sec>\d+)\.(?P<frac>\d+)\]")


@dataclass(frozen=True, slots=True)
class KernelXid:
    """One XID (or NVSwitch SXid) line."""

    pci_bus_id: str  # normalized: 0000:3b:00.0
    code: int
    text: str  # everything after the code, as logged
    pid: int | None = None
    process: str | None = None
    gpu_instance: int | None = None
    compute_instance: int | None = None
    boot_usec: int | None = None  # kernel time since boot, when the line carries it
    switch: str | None = None  # "nvidia-nvswitch0" for an SXid

    @property
    def fatal_sxid(self) -> bool:
        return self.switch is not None and self.text.lower().startswith("fatal")


@dataclass(frozen=True, slots=True)
class GpuMapping:
    pci_bus_id: str
    gpu_uuid: str


class Unparsed:
    """A line that mentions an Xid we could not read."""

    __slots__ = ()


UNPARSED = Unparsed()
ParseResult = KernelXid | GpuMapping | Unparsed | None


def normalize_bdf(raw: str) -> str:
    """`0000:01:00`, `00000000:01:00.0`, `0000:C3:00.0` -> `0000:01:00.0` style."""
    domain, bus, devfn = raw.split(":")
    device, _, function = devfn.partition(".")
    return normalize_pci(int(domain, 16), int(bus, 16), int(device, 16), int(function or "0"))


def _boot_usec(line: str) -> int | None:
    m = _KMSG_PREFIX_RE.match(line)
    if m:
        return int(m["usec"])
    m = _DMESG_PREFIX_RE.match(line)
    if m:
        return int(m["sec"]) * 1_000_000 + int(m["frac"].ljust(6, "0")[:6])
    return None


def _pid_name(rest: str) -> tuple[int | None, str | None]:
    m = _PID_RE.match(rest)
    if not m:
        return None, None
    pid = int(m["pid"]) if m["pid"].isdigit() else None
    name = m["name"]
    return pid, (name if name and name != "<unknown>" else None)


def parse_line(line: str) -> ParseResult:
    """What a kernel-log line says about GPUs: an XID, a PCI->UUID mapping, unparsed, or None."""
    if "NVRM: GPU at" in line:
        m = _MAP_RE.search(line)
        return GpuMapping(normalize_bdf(m["bdf"]), m["uuid"]) if m else None
    if "Xid" not in line:
        return None
    m = _XID_RE.search(line) or _SXID_RE.search(line)
    if m is None:
        return UNPARSED
    rest = m["rest"] or ""
    groups = m.groupdict()
    pid, name = _pid_name(rest) if groups.get("dev") is None else (None, None)
    gi, ci = groups.get("gi"), groups.get("ci")
    return KernelXid(
        pci_bus_id=normalize_bdf(m["bdf"]),
        code=int(m["code"]),
        text=rest,
        pid=pid,
        process=name,
        gpu_instance=int(gi) if gi is not None else None,
        compute_instance=int(ci) if ci is not None else None,
        boot_usec=_boot_usec(line),
        switch=groups.get("dev"),
    )


class GpuDirectory:
    """PCI bus id -> (GPU index, UUID): from NVML when available, else learned from the
    `NVRM: GPU at PCI:...` lines, else unknown. Thread-safe."""

    def __init__(self) -> None:
        self._by_pci: dict[str, tuple[int | None, str | None]] = {}
        self._lock = threading.Lock()

    def learn(self, pci_bus_id: str, *, uuid: str | None = None, index: int | None = None) -> None:
        with self._lock:
            old_index, old_uuid = self._by_pci.get(pci_bus_id, (None, None))
            self._by_pci[pci_bus_id] = (
                index if index is not None else old_index,
                uuid if uuid is not None else old_uuid,
            )

    def lookup(self, pci_bus_id: str) -> tuple[int | None, str | None]:
        with self._lock:
            return self._by_pci.get(pci_bus_id, (None, None))

    def __len__(self) -> int:
        with self._lock:
            return len(self._by_pci)


def _message(x: KernelXid) -> str:
    if x.gpu_instance is not None:
        return f"MIG GPU-I:{x.gpu_instance} GPU-CI:{x.compute_instance}: {x.text}"
    return x.text


Sink = Callable[[GpuXid | GpuHealth | KernelRead], None]
LineFollower = Callable[[threading.Event], Iterator[str]]


class KernelLogSource:
    """`Source` over kernel-log lines from a follower (/dev/kmsg, journalctl, or a file).

    With `sequenced` (/dev/kmsg), every record is handed over as a `KernelRead` carrying the
    kernel's sequence number, so the agent can store how far it got; records up to
    `resume_after` were published by an earlier run and only teach the GPU directory."""

    def __init__(
        self,
        name: str,
        follow: LineFollower,
        node: str,
        directory: GpuDirectory,
        metrics: AgentMetrics,
        *,
        kernel_time: bool = False,
        sequenced: bool = False,
        resume_after: int | None = None,
        now_ms: Callable[[], int] | None = None,
    ) -> None:
        self.name = name
        self.follow = follow
        self.node = node
        self.directory = directory
        self.metrics = metrics
        # /dev/kmsg stamps are CLOCK_MONOTONIC-like microseconds since boot.
        self.boot_ms = (time.time() - time.monotonic()) * 1000.0 if kernel_time else None
        self.now_ms = now_ms or (lambda: time.time_ns() // 1_000_000)
        self.sequenced = sequenced
        self.resume_after = resume_after
        self._gap_checked = resume_after is None
        self._stop = threading.Event()
        self.lines = 0

    def close(self) -> None:
        self._stop.set()

    def run(self, sink: Sink) -> None:
        for line in self.follow(self._stop):
            self.lines += 1
            self.handle_line(line, sink)

    def handle_line(self, line: str, sink: Sink) -> None:
        seq = kmsg_seq(line) if self.sequenced else None
        if seq is None:
            rec = self.record_for(line)
            if rec is not None:
                sink(rec)
            return
        if self.resume_after is not None and seq <= self.resume_after:
            mapping = parse_line(line)  # published before: only what it says about GPUs
            if isinstance(mapping, GpuMapping):
                self.directory.learn(mapping.pci_bus_id, uuid=mapping.gpu_uuid)
            return
        if not self._gap_checked:
            self._gap_checked = True
            assert self.resume_after is not None
            if seq > self.resume_after + 1:
                log.warning(
                    "%s: kernel records %d..%d were overwritten in the ring buffer while the "
                    "agent was down: lost",
                    self.name,
                    self.resume_after + 1,
                    seq - 1,
                )
        sink(KernelRead(seq, self.record_for(line)))

    def record_for(self, line: str) -> GpuXid | GpuHealth | None:
        """The record a line gives (after learning what it says about GPUs), if any."""
        result = parse_line(line)
        if result is None:
            return None
        if isinstance(result, Unparsed):
            self.metrics.unparsed.inc()
            log.debug("unparsed Xid line: %r", line[:300])
        elif isinstance(result, GpuMapping):
            self.directory.learn(result.pci_bus_id, uuid=result.gpu_uuid)
        elif result.switch is not None:
            if result.fatal_sxid:
                return self._sxid_health(result)
            log.info("%s SXid %d (non-fatal): %s", result.switch, result.code, result.text)
        else:
            return self._xid_record(result)
        return None

    def _ts(self, x: KernelXid) -> int:
        if self.boot_ms is not None and x.boot_usec is not None:
            return int(self.boot_ms + x.boot_usec / 1000.0)
        return self.now_ms()

    def _xid_record(self, x: KernelXid) -> GpuXid:
        index, uuid = self.directory.lookup(x.pci_bus_id)
        return GpuXid(
            node=self.node,
            xid=x.code,
            ts_ms=self._ts(x),
            gpu_index=index,
            gpu_uuid=uuid,
            pci_bus_id=x.pci_bus_id,
            message=_message(x) or None,
            source="kmsg",
        )

    def _sxid_health(self, x: KernelXid) -> GpuHealth:
        return GpuHealth(
            node=self.node,
            ts_ms=self._ts(x),
            condition="nvlink",
            severity="critical",
            detail=f"{x.switch} SXid {x.code}: {x.text}",
            pci_bus_id=x.pci_bus_id,
        )
