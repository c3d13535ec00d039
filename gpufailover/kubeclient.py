"""A lightkube client built the one way gpufailover's Kubernetes components use it.

The kubeconfig is `--kubeconfig`, else `GPUFAILOVER_KUBECONFIG`, else lightkube's own search:
`KUBECONFIG`, `~/.kube/config`, then the in-cluster ServiceAccount (what a Deployment uses).
"""

from __future__ import annotations

import os

from lightkube import AsyncClient, KubeConfig

KUBECONFIG_ENV = "GPUFAILOVER_KUBECONFIG"


def make_async_client(kubeconfig: str | None, field_manager: str) -> AsyncClient:
    path = kubeconfig or os.environ.get(KUBECONFIG_ENV) or None
    if path:
        return AsyncClient(config=KubeConfig.from_file(path), field_manager=field_manager)
    return AsyncClient(field_manager=field_manager)
