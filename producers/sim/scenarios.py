"""The simulator's failure mix: what breaks, how often, and what it looks like on the wire.

Shares follow the blend of `failure-data.md` (Llama 3 + a 32k-H100 Meta run), restricted to the
classes that leave a signal a node agent or a scheduler can see. Left out: unplanned host
maintenance (13%: a reboot shows up as a lost node, no GPU signal) and silent data corruption (3%:
found only by replay). The hard cases of that document are *modifiers* drawn on top of a scenario
(late XID, NCCL-timeout cascade, XID flood, precursor, lemon node, XID outside the job, unrelated
hardware XID during a software failure).

The sim's own truth table (`XID_CLASS`, `CONDITION_CLASS`, `REASON_CLASS`) is the mission's
classification, kept here independently of the pipeline's policy file: the sim grades the
pipeline, it does not borrow its answers.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

# Truth about the signals the sim emits (the mission's classification).
XID_CLASS: dict[int, str] = {
    79: "hardware",  # fell off the bus
    119: "hardware",  # GSP RPC timeout
    120: "hardware",  # GSP error
    48: "hardware",  # double-bit ECC (HBM)
    64: "hardware",  # row-remapping failure
    94: "hardware",  # contained SRAM error (mission: hardware)
    95: "hardware",  # uncontained SRAM error
    13: "software",  # graphics engine exception
    31: "software",  # MMU page fault
    43: "software",  # GPU stopped processing (app error)
    63: "precursor",  # row remapping event
    92: "precursor",  # high single-bit ECC rate
    45: "ignore",  # preemptive cleanup after another error (healthy peers)
}
CONDITION_CLASS: dict[str, str] = {
    "gpu_lost": "hardware",
    "ecc_uncorrectable": "hardware",
    "thermal": "hardware",
    "power": "hardware",
    "pcie": "hardware",
    "nvlink": "hardware",
    "row_remap_pending": "precursor",
    "ecc_correctable_rate": "precursor",
    "ok": "ignore",
}
REASON_CLASS: dict[str, str] = {
    "OOMKilled": "software",
    "NCCLTimeout": "transient",
    "Hang": "transient",
    "WorkerLost": "transient",
}
VERDICT_ORDER = ("hardware", "software", "transient", "unknown")


@dataclass(frozen=True, slots=True)
class Scenario:
    """One kind of incident. `target` "job": it kills a running job; "node": it hits a node only.

    `signal` is what the faulty GPU/node emits: ("xid", codes) drawn from, ("health", conditions),
    or ("none", ()) for failures seen only through the job's termination.
    """

    name: str
    weight: float
    true_class: str  # hardware | software | transient | unknown | precursor | none
    target: str  # job | node
    signal_kind: str  # xid | health | none
    codes: tuple[int | str, ...]
    reason: str | None  # the termination's reason (None: exit code only)
    exit_code: int | None
    about: str


SCENARIOS: tuple[Scenario, ...] = (
    Scenario("gpu_xid", 24, "hardware", "job", "xid", (79, 119, 120), "WorkerLost", 1,
             "GPU hard fault: XID 79/119/120 on one GPU"),
    Scenario("gpu_lost", 5, "hardware", "job", "health", ("gpu_lost",), "WorkerLost", 1,
             "GPU lost before any XID was logged (health gpu_lost only)"),
    Scenario("pcie", 4, "hardware", "job", "health", ("pcie",), "WorkerLost", 1,
             "PCIe replay storm on one GPU"),
    Scenario("ecc_xid", 17, "hardware", "job", "xid", (48, 64, 94, 95), None, 1,
             "uncorrectable memory error: XID 48/64/94/95"),
    Scenario("ecc_health", 5, "hardware", "job", "health", ("ecc_uncorrectable",), None, 1,
             "uncorrectable ECC count rose (health ecc_uncorrectable)"),
    Scenario("nvlink", 8, "hardware", "job", "health", ("nvlink",), "NCCLTimeout", 1,
             "network: NVLink/NVSwitch errors on one node, peers time out"),
    Scenario("power", 4, "hardware", "job", "health", ("power",), "WorkerLost", 1,
             "host hardware: PSU power brake"),
    Scenario("thermal", 1, "hardware", "job", "health", ("thermal",), "WorkerLost", 1,
             "over-temperature"),
    Scenario("oom", 6, "software", "job", "none", (), "OOMKilled", 137,
             "software: out of memory"),
    Scenario("app_xid", 4, "software", "job", "xid", (13, 31, 43), None, 1,
             "software: XID 13/31/43 alone (a code bug)"),
    Scenario("nccl_unknown", 5, "transient", "job", "none", (), "NCCLTimeout", 1,
             "NCCL watchdog timeout, cause unknown, no signal"),
    Scenario("hang", 4, "transient", "job", "none", (), "Hang", 1,
             "software hang: heartbeats stop, the job is killed after the hang timeout"),
    Scenario("unknown", 1, "unknown", "job", "none", (), None, 1,
             "the job dies with no reason and no signal"),
    Scenario("precursor", 5, "precursor", "node", "xid", (92, 63), None, None,
             "precursor on a node: high single-bit ECC rate or row remapping (no job dies)"),
    Scenario("idle_fault", 3, "hardware", "node", "xid", (79, 48), None, None,
             "hardware fault on a node while no job runs on it"),
    Scenario("other_tenant_xid", 4, "none", "node", "xid", (13, 31), None, None,
             "another tenant's XID 13/31 on a node outside any failing job"),
)  # fmt: skip
BY_NAME: dict[str, Scenario] = {s.name: s for s in SCENARIOS}


@dataclass(frozen=True, slots=True)
class Modifiers:
    """Probabilities of the hard cases, drawn per incident where they apply."""

    late_xid: float = 0.15  # hardware XID logged after the job died (inside the grace)
    cascade: float = 0.3  # hardware fault on a multi-node job surfaces as an NCCL timeout
    flood: float = 0.1  # the XID repeats thousands of times
    precursor: float = 0.3  # an ECC fault announced by XID 63/92 minutes before
    lemon: float = 0.3  # a hardware fault lands on a lemon node when one is busy
    decoy: float = 0.2  # another node, outside the job, logs XID 13/31 meanwhile
    false_evidence: float = 0.15  # software failure + an unrelated hardware XID on a job node


@dataclass(frozen=True, slots=True)
class Draw:
    """One drawn incident, before it is bound to a job or node."""

    at_ms: int
    scenario: str
    code: int | str | None
    late_xid: bool = False
    cascade: bool = False
    flood: bool = False
    precursor: bool = False
    lemon: bool = False
    decoy: bool = False
    false_evidence: bool = False


def pick_scenario(rng: random.Random, scenarios: tuple[Scenario, ...] = SCENARIOS) -> Scenario:
    return rng.choices(scenarios, weights=[s.weight for s in scenarios])[0]


def draw(rng: random.Random, at_ms: int, mods: Modifiers) -> Draw:
    """Draw a scenario and its modifiers (each modifier only where it makes sense)."""
    s = pick_scenario(rng)
    code = rng.choice(s.codes) if s.codes else None
    xid = s.signal_kind == "xid"
    hw_job = s.true_class == "hardware" and s.target == "job"
    late = hw_job and xid and rng.random() < mods.late_xid
    return Draw(
        at_ms=at_ms,
        scenario=s.name,
        code=code,
        late_xid=late,
        cascade=hw_job and not late and rng.random() < mods.cascade,
        flood=xid and s.target == "job" and rng.random() < mods.flood,
        precursor=s.name in ("ecc_xid", "ecc_health") and rng.random() < mods.precursor,
        lemon=hw_job and rng.random() < mods.lemon,
        decoy=s.target == "job" and rng.random() < mods.decoy,
        false_evidence=s.true_class == "software" and rng.random() < mods.false_evidence,
    )


def draw_trace(
    rng: random.Random,
    start_ms: int,
    end_ms: int,
    rate_per_hour: float,
    mods: Modifiers,
) -> list[Draw]:
    """A Poisson stream of incidents in [start_ms, end_ms) at `rate_per_hour` (simulated)."""
    if rate_per_hour <= 0 or end_ms <= start_ms:
        return []
    out: list[Draw] = []
    t = float(start_ms)
    mean_gap_ms = 3_600_000 / rate_per_hour
    while True:
        t += rng.expovariate(1.0) * mean_gap_ms
        if t >= end_ms:
            return out
        out.append(draw(rng, int(t), mods))


def verdict_of(classes: set[str]) -> str:
    """The mission's precedence: hardware > software > transient > unknown."""
    return next((v for v in VERDICT_ORDER[:3] if v in classes), "unknown")
