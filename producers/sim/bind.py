"""Binding a drawn incident to the fleet as it is now: which job, which node (pure choices)."""

from __future__ import annotations

import random
from collections.abc import Collection, Mapping, Sequence

from producers.sim.fleet import Job
from producers.sim.scenarios import Draw


def pick_job(
    rng: random.Random, running: Sequence[Job], lemons: Collection[str], d: Draw
) -> tuple[Job, str] | None:
    """A running job and its faulty node; a lemon node (and its job) when the draw says so."""
    if not running:
        return None
    if d.lemon:
        with_lemon = [j for j in running if set(lemons) & set(j.nodes)]
        if with_lemon:
            job = rng.choice(with_lemon)
            return job, rng.choice(sorted(set(lemons) & set(job.nodes)))
    job = rng.choice(running)
    return job, rng.choice(job.nodes)


def pick_node(
    rng: random.Random,
    scenario: str,
    nodes: Sequence[str],
    unavailable: Collection[str],
    job_on: Mapping[str, str],
    failing: Collection[str],
) -> str | None:
    """A node for a node scenario: never a broken or quarantined one (`unavailable`); an idle
    one for `idle_fault`; for another tenant's XID, none of a job that is failing now."""
    ok = [n for n in nodes if n not in unavailable]
    if scenario == "idle_fault":
        ok = [n for n in ok if n not in job_on]
    elif scenario == "other_tenant_xid":
        ok = [n for n in ok if n not in failing]
    return rng.choice(ok) if ok else None


def pick_decoy(
    rng: random.Random, nodes: Sequence[str], job: Job, job_on: Mapping[str, str]
) -> str | None:
    """A node outside the job for another tenant's XID, idle if one is."""
    outside = [n for n in nodes if n not in job.nodes]
    idle = [n for n in outside if n not in job_on]
    return rng.choice(idle or outside) if outside else None


def flags_of(
    planned: tuple[str, ...], faulty: str | None, lemons: Collection[str], why: str | None
) -> tuple[str, ...]:
    """The plan's hard cases, plus `lemon` and why a follow-up incident happened."""
    flags = planned + (("lemon",) if faulty is not None and faulty in lemons else ())
    return flags + ((why,) if why is not None else ())
