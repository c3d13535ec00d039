"""Local flood de-duplication of XIDs: same GPU, same code, within a window -> one event.

The first occurrence goes out at once (a fault must not wait). Repeats inside the window are
folded; when the window closes they go out as one event whose `count` is the number of
repeats (ts/message of the last one), and a new window starts. A window that closes with no
repeats ends the flood. So a continuous flood costs one event per window, and the counts of
everything published add up to the occurrences seen.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from schemas.xid import GpuXid

GpuKey = tuple[str, int]


@dataclass(slots=True)
class _Window:
    ends_at: float
    repeats: int = 0
    last: GpuXid | None = None


def gpu_key(rec: GpuXid) -> GpuKey:
    gpu = (
        rec.gpu_uuid or rec.pci_bus_id or (str(rec.gpu_index) if rec.gpu_index is not None else "")
    )
    return gpu, rec.xid


class FloodDeduper:
    def __init__(self, window_s: float = 60.0) -> None:
        self.window_s = window_s
        self._windows: dict[GpuKey, _Window] = {}
        self.suppressed = 0

    def offer(self, rec: GpuXid, now: float) -> list[GpuXid]:
        """Records to publish now because `rec` was seen at monotonic time `now`."""
        if self.window_s <= 0:
            return [rec]
        key = gpu_key(rec)
        w = self._windows.get(key)
        if w is not None and now < w.ends_at:
            w.repeats += rec.count
            w.last = rec
            self.suppressed += rec.count
            return []
        out = [self._summary(w)] if w is not None and w.repeats else []
        self._windows[key] = _Window(ends_at=now + self.window_s)
        out.append(rec)
        return out

    def due(self, now: float) -> list[GpuXid]:
        """Summaries of the windows that closed by `now`."""
        out = []
        for key, w in list(self._windows.items()):
            if now < w.ends_at:
                continue
            if w.repeats:
                out.append(self._summary(w))
                self._windows[key] = _Window(ends_at=now + self.window_s)
            else:
                del self._windows[key]
        return out

    def drain(self) -> list[GpuXid]:
        """Every pending summary (at shutdown)."""
        out = [self._summary(w) for w in self._windows.values() if w.repeats]
        self._windows.clear()
        return out

    def _summary(self, w: _Window) -> GpuXid:
        assert w.last is not None
        return dataclasses.replace(w.last, count=w.repeats)

    def __len__(self) -> int:
        return len(self._windows)
