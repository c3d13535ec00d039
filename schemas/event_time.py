"""Event-time bounds that depend on a clock: how far ahead of now, and how old, a record may be.

The absolute floor (zero, negative, seconds) is checked at decode (`schemas.bounds`). These two
need a clock, so the component that reads the record applies them:

- future: `ts_ms` more than `max_future_skew_ms` ahead of now (an agent with a broken clock,
  a forged record). Accepting it would move a partition's watermark past every real record and
  close every window early, for good;
- past: `ts_ms` older than `max_age_ms` (the evidence retention horizon) when read. Nothing
  can still use it: its windows were closed and its evidence pruned long ago.

Live (the stream, the consumers) "now" is the wall clock when the record is read: acceptance
of a record near a bound depends on when it arrives. That is the price of the bound, and why
it is generous (minutes ahead, days back). Replay applies only the future bound, relative to
`--now` (default the wall clock), so an export of last month replays unchanged; for records
within both bounds replay and stream decide the same.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from schemas.bounds import TS_CEIL_MS, TS_FLOOR_MS
from schemas.errors import SchemaError

FUTURE_SKEW_ENV = "GPUFAILOVER_MAX_FUTURE_SKEW_S"
EVENT_AGE_ENV = "GPUFAILOVER_MAX_EVENT_AGE_S"
DEFAULT_MAX_FUTURE_SKEW_S = 300
# The policy's evidence retention (48 h): nothing older can still find a window or evidence.
DEFAULT_MAX_EVENT_AGE_S = 172_800
# Values that turn the bounds off, for harnesses that replay input stamped at fixed dates
# (the chaos workload, the test fixtures) or faster than real time (the demo).
BOUNDS_OFF_ENV = {FUTURE_SKEW_ENV: str(TS_CEIL_MS // 1000), EVENT_AGE_ENV: "0"}


@dataclass(frozen=True, slots=True)
class EventTimeBounds:
    max_future_skew_ms: int = DEFAULT_MAX_FUTURE_SKEW_S * 1000
    max_age_ms: int | None = None  # None: no past bound (replay)

    @staticmethod
    def from_env(*, live: bool) -> EventTimeBounds:
        """GPUFAILOVER_MAX_FUTURE_SKEW_S (default 300) and, live only,
        GPUFAILOVER_MAX_EVENT_AGE_S (default 172800; 0: no past bound)."""
        skew_s = _env_seconds(FUTURE_SKEW_ENV, DEFAULT_MAX_FUTURE_SKEW_S)
        age_s = _env_seconds(EVENT_AGE_ENV, DEFAULT_MAX_EVENT_AGE_S) if live else 0
        return EventTimeBounds(skew_s * 1000, age_s * 1000 if age_s else None)

    def __post_init__(self) -> None:
        if self.max_future_skew_ms < 0:
            raise ValueError(f"max future skew must be >= 0 ms, got {self.max_future_skew_ms}")
        if self.max_age_ms is not None and self.max_age_ms <= 0:
            raise ValueError(f"max event age must be > 0 ms, got {self.max_age_ms}")

    def violation(self, ts_ms: int, now_ms: int) -> str | None:
        """Why `ts_ms` is out of bounds at wall time `now_ms`, or None when it is within.
        The absolute floor too: the input decoders check it, our own records' do not."""
        if ts_ms < TS_FLOOR_MS:
            return f"{ts_ms} is below the floor {TS_FLOOR_MS} (zero, negative or in seconds)"
        ahead = ts_ms - now_ms
        if ahead > self.max_future_skew_ms:
            return (
                f"{ts_ms} is {ahead / 1000:.0f} s ahead of the clock ({now_ms}), more than the "
                f"max future skew of {self.max_future_skew_ms / 1000:.0f} s"
            )
        if self.max_age_ms is not None and now_ms - ts_ms > self.max_age_ms:
            return (
                f"{ts_ms} is {(now_ms - ts_ms) / 1000:.0f} s old at {now_ms}, older than the "
                f"retention horizon of {self.max_age_ms / 1000:.0f} s"
            )
        return None

    def range_at(self, now_ms: int) -> tuple[int, int]:
        """The accepted `ts_ms` range at wall time `now_ms`, both ends inclusive (hot loops
        compare against it and call `check` only for a record outside, for the reason)."""
        low = TS_FLOOR_MS if self.max_age_ms is None else max(TS_FLOOR_MS, now_ms - self.max_age_ms)
        return low, now_ms + self.max_future_skew_ms

    def check(self, name: str, ts_ms: int, now_ms: int) -> int:
        """`ts_ms`, or a SchemaError naming the field and the bound it breaks."""
        reason = self.violation(ts_ms, now_ms)
        if reason is not None:
            raise SchemaError(name, reason)
        return ts_ms


def _env_seconds(name: str, default: int) -> int:
    raw = os.environ.get(name, "")
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise SystemExit(f"{name}={raw!r}: expected whole seconds") from None
    if value < 0:
        raise SystemExit(f"{name}={raw!r}: must be >= 0")
    return value
