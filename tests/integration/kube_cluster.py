"""The Kubernetes tests' control plane: the shipped launcher, `deploy/kube_local.py`."""

from __future__ import annotations

from deploy.kube_local import NODES, KubeCluster, running_kube_cluster, wait_for

# Static-token users with no rights until a test binds a role to them.
PRINCIPALS = ("quarantine-actuator", "requeue-actuator", "k8s-events", "nobody")

__all__ = ["NODES", "PRINCIPALS", "KubeCluster", "running_kube_cluster", "wait_for"]
