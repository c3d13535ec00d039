"""Retry delays that double up to a cap: actuators, scheduler stages, the pod watcher and the
node agent's validation gate all wait this way between failed attempts."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Backoff:
    """Delay before retry n (1-based): first_ms * 2**(n-1), at most max_ms."""

    first_ms: int = 1_000
    max_ms: int = 60_000

    def __post_init__(self) -> None:
        if self.first_ms <= 0 or self.max_ms < self.first_ms:
            raise ValueError(f"back-off must be 0 < first <= max, got {self}")

    def delay_ms(self, failures: int) -> int:
        doublings = min(max(failures - 1, 0), 30)
        return min(self.max_ms, self.first_ms << doublings)
