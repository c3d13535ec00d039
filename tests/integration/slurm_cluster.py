"""The Slurm tests' cluster: the shipped launcher, `deploy/slurm_local.py`."""

from __future__ import annotations

from deploy.slurm_local import (
    NODES,
    SlurmCluster,
    missing_binaries,
    running_slurm_cluster,
    wait_for,
)
from gpufailover.slurm_text import parse_fields

__all__ = [
    "NODES",
    "SlurmCluster",
    "missing_binaries",
    "parse_fields",
    "running_slurm_cluster",
    "wait_for",
]
