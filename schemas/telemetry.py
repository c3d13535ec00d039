"""`training.telemetry` (key: job_id): progress reported by the training application itself.

Three kinds: `heartbeat` (the loop is alive at `step`), `throughput` (`samples_per_s`) and
`checkpoint` (a checkpoint of `step` was written to `uri`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from schemas import _fields as f
from schemas import bounds as b
from schemas.errors import SchemaError

TELEMETRY_KINDS = frozenset({"heartbeat", "throughput", "checkpoint"})


def _opt_number(d: Mapping[str, Any], name: str) -> float | None:
    v = d.get(name)
    if v is None:
        return None
    if not isinstance(v, int | float) or isinstance(v, bool):
        raise SchemaError(name, f"expected a number, got {type(v).__name__}")
    if not math.isfinite(v) or v < 0:
        raise SchemaError(name, f"must be a finite number >= 0, got {v}")
    return float(v)


@dataclass(frozen=True, slots=True)
class TrainingTelemetry:
    job_id: str
    attempt: int
    kind: str
    ts_ms: int
    step: int | None = None
    samples_per_s: float | None = None
    uri: str | None = None
    node: str | None = None

    def __post_init__(self) -> None:
        if self.kind in ("heartbeat", "checkpoint") and self.step is None:
            raise SchemaError("step", f"a {self.kind} record needs a step")
        if self.kind == "throughput" and self.samples_per_s is None:
            raise SchemaError("samples_per_s", "a throughput record needs samples_per_s")
        if self.kind == "checkpoint" and not self.uri:
            raise SchemaError("uri", "a checkpoint record needs a uri")

    @staticmethod
    def from_dict(value: Any) -> TrainingTelemetry:
        d = f.as_object(value)
        f.check_version(d)
        return TrainingTelemetry(
            job_id=f.req_id(d, "job_id"),
            attempt=f.req_int(d, "attempt", minimum=0, maximum=b.I32_MAX),
            kind=f.req_enum(d, "kind", TELEMETRY_KINDS),
            ts_ms=f.req_ts(d),
            step=f.opt_int(d, "step", minimum=0, maximum=b.STEP_MAX),
            samples_per_s=_opt_number(d, "samples_per_s"),
            uri=f.opt_str(d, "uri"),
            node=f.opt_id(d, "node"),
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "schema_version": f.SCHEMA_VERSION,
            "job_id": self.job_id,
            "attempt": self.attempt,
            "kind": self.kind,
            "ts_ms": self.ts_ms,
        }
        for k in ("step", "samples_per_s", "uri", "node"):
            v = getattr(self, k)
            if v is not None:
                out[k] = v
        return out
