"""A scripted NVML: the `Nvml` interface over plain data, for the agent's tests.

`events` is the script the XID thread reads, one entry per `event_wait` call: an
`NvmlXidEvent`, `None` (an event of another type), an exception to raise, or a callable run
first (a change of the world, e.g. a GPU falling off the bus). When the script runs out the
fake waits `timeout_ms`, raises `NvmlTimeout` and sets `events_done`, like a quiet GPU.
Metrics are per GPU index; an exception as a value is raised when the metric is read, and a
`Blocks` value blocks the read until released (a hung NVML call).
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from producers.nvml_source import (
    GPU_IS_LOST,
    NOT_SUPPORTED,
    TIMEOUT,
    NvmlGpuLost,
    NvmlNotSupported,
    NvmlTimeout,
    NvmlXidEvent,
)


class Blocks:
    """A metric whose read blocks (a hung driver) until `release()`, then reads `then`."""

    def __init__(self, then: Any) -> None:
        self.then = then
        self.entered = threading.Event()
        self._released = threading.Event()

    def release(self) -> None:
        self._released.set()

    def wait(self) -> Any:
        self.entered.set()
        self._released.wait(60)
        return self.then


def lost() -> NvmlGpuLost:
    return NvmlGpuLost(GPU_IS_LOST, "GPU is lost")


def unsupported() -> NvmlNotSupported:
    return NvmlNotSupported(NOT_SUPPORTED, "Not Supported")


@dataclass
class FakeGpu:
    uuid: str
    pci: str
    ecc_uncorrected: Any = 0
    ecc_corrected: Any = 0
    remapped_rows: Any = (0, 0, False, False)
    temperature: Any = 40
    temperature_shutdown: Any = 92
    clocks_reasons: Any = 0
    pcie_replays: Any = 0
    nvlinks: dict[int, Any] = field(default_factory=dict)  # link -> error-counter total
    xid_events_supported: bool = True
    lost: bool = False  # every query raises GpuIsLost


class FakeNvml:
    def __init__(self, gpus: list[FakeGpu], events: list[Any] | None = None) -> None:
        self.gpus = gpus
        self.events: deque[Any] = deque(events or [])
        self.events_done = threading.Event()
        self.calls: list[str] = []
        self.initialized = False
        self.freed = False
        self.registered: list[int] = []
        self.lock = threading.Lock()
        self.sampled = threading.Event()  # a health metric was read

    # -- plumbing --------------------------------------------------------------------------
    def _gpu(self, handle: Any) -> FakeGpu:
        gpu: FakeGpu = self.gpus[int(handle)]
        if gpu.lost:
            raise lost()
        return gpu

    def _value(self, handle: Any, name: str) -> Any:
        with self.lock:
            self.calls.append(name)
            self.sampled.set()
            value = getattr(self._gpu(handle), name)
        if isinstance(value, Blocks):
            value = value.wait()  # outside the lock: the other thread's calls go on
        if isinstance(value, BaseException):
            raise value
        return value

    # -- the Nvml interface ----------------------------------------------------------------
    def init(self) -> None:
        self.initialized = True

    def shutdown(self) -> None:
        self.initialized = False

    def device_count(self) -> int:
        return len(self.gpus)

    def handle(self, index: int) -> Any:
        return index

    def uuid(self, handle: Any) -> str:
        return self._gpu(handle).uuid

    def pci_bus_id(self, handle: Any) -> str:
        return self._gpu(handle).pci

    def event_set_create(self) -> Any:
        return "event-set"

    def register_xid_events(self, handle: Any, event_set: Any) -> None:
        if not self._gpu(handle).xid_events_supported:
            raise unsupported()
        self.registered.append(handle)

    def event_wait(self, event_set: Any, timeout_ms: int) -> NvmlXidEvent | None:
        while True:
            with self.lock:
                exhausted = not self.events
                item = None if exhausted else self.events.popleft()
            if exhausted:
                self.events_done.set()
                threading.Event().wait(timeout_ms / 1000.0)  # a quiet GPU: the wait times out
                raise NvmlTimeout(TIMEOUT, "Timeout")
            if isinstance(item, BaseException):
                raise item
            if callable(item):  # a scripted change of the world, e.g. a GPU falling off
                item()
                continue
            result: NvmlXidEvent | None = item
            return result

    def event_set_free(self, event_set: Any) -> None:
        self.freed = True

    def ecc_errors(self, handle: Any, *, corrected: bool) -> int:
        return int(self._value(handle, "ecc_corrected" if corrected else "ecc_uncorrected"))

    def remapped_rows(self, handle: Any) -> tuple[int, int, bool, bool]:
        value: tuple[int, int, bool, bool] = self._value(handle, "remapped_rows")
        return value

    def temperature(self, handle: Any) -> int:
        return int(self._value(handle, "temperature"))

    def temperature_shutdown(self, handle: Any) -> int:
        return int(self._value(handle, "temperature_shutdown"))

    def clocks_event_reasons(self, handle: Any) -> int:
        return int(self._value(handle, "clocks_reasons"))

    def pcie_replay_counter(self, handle: Any) -> int:
        return int(self._value(handle, "pcie_replays"))

    def nvlink_max_links(self) -> int:
        return 4

    def nvlink_active(self, handle: Any, link: int) -> bool:
        return link in self._gpu(handle).nvlinks

    def nvlink_error_counter(self, handle: Any, link: int, counter: int) -> int:
        value = self._gpu(handle).nvlinks[link]
        if isinstance(value, BaseException):
            raise value
        return int(value) if counter == 0 else 0


def xid(code: int, uuid: str | None) -> NvmlXidEvent:
    return NvmlXidEvent(xid=code, device_uuid=uuid)
