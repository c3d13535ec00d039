"""One real Kubernetes control plane per session (tests/integration/kube_cluster.py).

No skip: if the binaries cannot be built (no Go, no network on a first run), the tests error.
"""

from __future__ import annotations

import contextlib
import re
import uuid
from collections.abc import Iterator

import pytest

from tests.integration.kube_cluster import (
    PRINCIPALS,
    KubeCluster,
    running_kube_cluster,
    wait_for,
)


@pytest.fixture(scope="session")
def kube_session() -> Iterator[KubeCluster]:
    with running_kube_cluster(principals=PRINCIPALS) as cluster:
        yield cluster


@pytest.fixture
def kube(kube_session: KubeCluster) -> KubeCluster:
    """The session's cluster with its nodes schedulable, untainted and unannotated."""
    kube_session.reset()
    return kube_session


@pytest.fixture
def kube_namespace(kube: KubeCluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A namespace of this test's own, with its `default` ServiceAccount; deleted afterwards."""
    from lightkube import ApiError
    from lightkube.models.meta_v1 import ObjectMeta
    from lightkube.resources.core_v1 import Namespace, Pod, ServiceAccount

    name = re.sub(r"[^a-z0-9-]+", "-", request.node.name.lower())[:40].strip("-")
    namespace = f"{name}-{uuid.uuid4().hex[:6]}"
    client = kube.client()
    client.create(Namespace(metadata=ObjectMeta(name=namespace)))

    def has_default_account() -> bool:
        try:
            client.get(ServiceAccount, "default", namespace=namespace)
        except ApiError:
            return False
        return True

    wait_for(f"the default ServiceAccount of {namespace}", has_default_account, 30)
    yield namespace
    # No kubelet confirms a pod's death: without this its pods would stay Terminating, bound
    # to their nodes, holding GPUs the scheduler then refuses to later tests' pods.
    for pod in list(client.list(Pod, namespace=namespace)):
        with contextlib.suppress(ApiError):
            client.delete(Pod, pod.metadata.name, namespace=namespace, grace_period=0)
    client.delete(Namespace, namespace)
