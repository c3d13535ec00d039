"""NVML behind a thin interface: the few calls the agent makes, and our own error types.

`Nvml` is what the agent uses; `PynvmlBackend` implements it over nvidia-ml-py (the `pynvml`
module, imported inside the methods) and translates NVML errors. Tests use a scripted fake.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

T = TypeVar("T")

# NVML return codes we treat specially (nvml.h).
NOT_SUPPORTED = 3
NO_PERMISSION = 4
DRIVER_NOT_LOADED = 9
TIMEOUT = 10
LIBRARY_NOT_FOUND = 12
FUNCTION_NOT_FOUND = 13
GPU_IS_LOST = 15
RESET_REQUIRED = 16

# nvmlClocksEventReason* bits (nvml.h).
REASON_SW_POWER_CAP = 0x4
REASON_HW_SLOWDOWN = 0x8
REASON_SW_THERMAL = 0x20
REASON_HW_THERMAL = 0x40
REASON_HW_POWER_BRAKE = 0x80

# nvmlNvLinkErrorCounter_t: DL_REPLAY, DL_RECOVERY, DL_CRC_FLIT, DL_CRC_DATA.
NVLINK_ERROR_COUNTERS = (0, 1, 2, 3)

NO_INSTANCE = 0xFFFFFFFF  # gpuInstanceId/computeInstanceId outside MIG


class NvmlError(Exception):
    """An NVML call failed with return code `code`."""

    def __init__(self, code: int, message: str = "") -> None:
        super().__init__(message or f"NVML error {code}")
        self.code = code


class NvmlTimeout(NvmlError):
    """The event wait timed out: normal, nothing happened."""


class NvmlGpuLost(NvmlError):
    """GPU_IS_LOST or RESET_REQUIRED: a hardware fault (the XID 79 event may never come)."""


class NvmlNotSupported(NvmlError):
    """This GPU or driver does not offer the metric."""


class NvmlUnavailable(NvmlError):
    """NVML cannot be used on this machine (no library, no driver, no permission)."""


_ERROR_TYPES: dict[int, type[NvmlError]] = {
    TIMEOUT: NvmlTimeout,
    GPU_IS_LOST: NvmlGpuLost,
    RESET_REQUIRED: NvmlGpuLost,
    NOT_SUPPORTED: NvmlNotSupported,
    FUNCTION_NOT_FOUND: NvmlNotSupported,  # an older driver without the call
    LIBRARY_NOT_FOUND: NvmlUnavailable,
    DRIVER_NOT_LOADED: NvmlUnavailable,
    NO_PERMISSION: NvmlUnavailable,
}


def nvml_error(code: int, message: str = "") -> NvmlError:
    """Our exception for an NVML return code."""
    return _ERROR_TYPES.get(code, NvmlError)(code, message)


@dataclass(frozen=True, slots=True)
class NvmlXidEvent:
    xid: int
    device_uuid: str | None
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None


class Nvml(Protocol):
    """The NVML calls the agent makes. Every method may raise an `NvmlError` subclass."""

    def init(self) -> None: ...
    def shutdown(self) -> None: ...
    def device_count(self) -> int: ...
    def handle(self, index: int) -> Any: ...
    def uuid(self, handle: Any) -> str: ...
    def pci_bus_id(self, handle: Any) -> str: ...
    def event_set_create(self) -> Any: ...
    def register_xid_events(self, handle: Any, event_set: Any) -> None: ...
    def event_wait(self, event_set: Any, timeout_ms: int) -> NvmlXidEvent | None: ...
    def event_set_free(self, event_set: Any) -> None: ...
    def ecc_errors(self, handle: Any, *, corrected: bool) -> int: ...
    def remapped_rows(self, handle: Any) -> tuple[int, int, bool, bool]: ...
    def temperature(self, handle: Any) -> int: ...
    def temperature_shutdown(self, handle: Any) -> int: ...
    def clocks_event_reasons(self, handle: Any) -> int: ...
    def pcie_replay_counter(self, handle: Any) -> int: ...
    def nvlink_max_links(self) -> int: ...
    def nvlink_active(self, handle: Any, link: int) -> bool: ...
    def nvlink_error_counter(self, handle: Any, link: int, counter: int) -> int: ...


def normalize_pci(domain: int, bus: int, device: int, function: int = 0) -> str:
    """The one spelling of a PCI address in our records: `0000:3b:00.0` (lspci -D)."""
    return f"{domain:04x}:{bus:02x}:{device:02x}.{function:x}"


@contextmanager
def _translated() -> Iterator[None]:
    import pynvml

    try:
        yield
    except pynvml.NVMLError as exc:
        raise nvml_error(int(exc.value), str(exc)) from exc


def _nvml_call(method: Callable[..., T]) -> Callable[..., T]:
    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> T:
        with _translated():
            return method(*args, **kwargs)

    return wrapper


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


class PynvmlBackend:
    """`Nvml` over nvidia-ml-py."""

    @_nvml_call
    def init(self) -> None:
        import pynvml

        pynvml.nvmlInit()

    @_nvml_call
    def shutdown(self) -> None:
        import pynvml

        pynvml.nvmlShutdown()

    @_nvml_call
    def device_count(self) -> int:
        import pynvml

        return int(pynvml.nvmlDeviceGetCount())

    @_nvml_call
    def handle(self, index: int) -> Any:
        import pynvml

        return pynvml.nvmlDeviceGetHandleByIndex(index)

    @_nvml_call
    def uuid(self, handle: Any) -> str:
        import pynvml

        return _text(pynvml.nvmlDeviceGetUUID(handle))

    @_nvml_call
    def pci_bus_id(self, handle: Any) -> str:
        import pynvml

        info = pynvml.nvmlDeviceGetPciInfo(handle)
        return normalize_pci(int(info.domain), int(info.bus), int(info.device))

    @_nvml_call
    def event_set_create(self) -> Any:
        import pynvml

        return pynvml.nvmlEventSetCreate()

    @_nvml_call
    def register_xid_events(self, handle: Any, event_set: Any) -> None:
        import pynvml

        mask = pynvml.nvmlEventTypeXidCriticalError
        if not int(pynvml.nvmlDeviceGetSupportedEventTypes(handle)) & mask:
            raise NvmlNotSupported(NOT_SUPPORTED, "XID critical-error events not supported")
        pynvml.nvmlDeviceRegisterEvents(handle, mask, event_set)

    @_nvml_call
    def event_wait(self, event_set: Any, timeout_ms: int) -> NvmlXidEvent | None:
        import pynvml

        data = pynvml.nvmlEventSetWait_v2(event_set, timeout_ms)
        if not int(data.eventType) & pynvml.nvmlEventTypeXidCriticalError:
            return None
        try:
            uuid: str | None = _text(pynvml.nvmlDeviceGetUUID(data.device))
        except pynvml.NVMLError:
            uuid = None  # the GPU may be gone already: the event still counts

        def instance(v: int) -> int | None:
            return None if int(v) == NO_INSTANCE else int(v)

        return NvmlXidEvent(
            xid=int(data.eventData),
            device_uuid=uuid,
            gpu_instance_id=instance(data.gpuInstanceId),
            compute_instance_id=instance(data.computeInstanceId),
        )

    @_nvml_call
    def event_set_free(self, event_set: Any) -> None:
        import pynvml

        pynvml.nvmlEventSetFree(event_set)

    @_nvml_call
    def ecc_errors(self, handle: Any, *, corrected: bool) -> int:
        import pynvml

        kind = (
            pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED
            if corrected
            else pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
        )
        return int(pynvml.nvmlDeviceGetTotalEccErrors(handle, kind, pynvml.NVML_VOLATILE_ECC))

    @_nvml_call
    def remapped_rows(self, handle: Any) -> tuple[int, int, bool, bool]:
        import pynvml

        corr, unc, pending, failure = pynvml.nvmlDeviceGetRemappedRows(handle)
        return int(corr), int(unc), bool(pending), bool(failure)

    @_nvml_call
    def temperature(self, handle: Any) -> int:
        import pynvml

        return int(pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU))

    @_nvml_call
    def temperature_shutdown(self, handle: Any) -> int:
        import pynvml

        threshold = pynvml.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN
        return int(pynvml.nvmlDeviceGetTemperatureThreshold(handle, threshold))

    @_nvml_call
    def clocks_event_reasons(self, handle: Any) -> int:
        import pynvml

        try:
            return int(pynvml.nvmlDeviceGetCurrentClocksEventReasons(handle))
        except pynvml.NVMLError_FunctionNotFound:  # drivers before 535 name it "throttle"
            return int(pynvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle))

    @_nvml_call
    def pcie_replay_counter(self, handle: Any) -> int:
        import pynvml

        return int(pynvml.nvmlDeviceGetPcieReplayCounter(handle))

    def nvlink_max_links(self) -> int:
        import pynvml

        return int(pynvml.NVML_NVLINK_MAX_LINKS)

    @_nvml_call
    def nvlink_active(self, handle: Any, link: int) -> bool:
        import pynvml

        return bool(pynvml.nvmlDeviceGetNvLinkState(handle, link))

    @_nvml_call
    def nvlink_error_counter(self, handle: Any, link: int, counter: int) -> int:
        import pynvml

        return int(pynvml.nvmlDeviceGetNvLinkErrorCounter(handle, link, counter))
