"""One real 4-node Slurm cluster per session (tests/integration/slurm_cluster.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.slurm_cluster import SlurmCluster, missing_binaries, running_slurm_cluster


@pytest.fixture(scope="session")
def slurm_session() -> Iterator[SlurmCluster]:
    missing = missing_binaries()
    if missing:
        pytest.skip(f"Slurm not installed (missing {', '.join(missing)}); .ci/run installs it")
    with running_slurm_cluster() as cluster:
        yield cluster


@pytest.fixture
def slurm(slurm_session: SlurmCluster) -> Iterator[SlurmCluster]:
    """The session's cluster with no jobs and every node idle, before and after the test."""
    slurm_session.reset()
    yield slurm_session
    slurm_session.hook_env.unlink(missing_ok=True)
