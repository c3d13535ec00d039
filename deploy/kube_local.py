"""A real Kubernetes control plane on this host, for the integration tests (no kubelet).

etcd (Debian's `etcd-server`), kube-apiserver, kube-controller-manager (without the node
lifecycle controller, so kubelet-less nodes stay Ready) and kube-scheduler, built once by
`deploy/kube_build.py`, run under one temp dir on free ports. Authentication is by static
bearer tokens: one for the admin (`system:masters`) and one per test principal (a user with no
rights until a test binds a role to it); ServiceAccount tokens work too (TokenRequest). Nodes
are API objects whose status this module writes: Ready, `nvidia.com/gpu: 8`, no not-ready taint.

    python -m deploy.kube_local build     # build the binaries into the cache (CI, before pytest)
    python -m deploy.kube_local up        # a cluster until Ctrl-C, kubeconfig path printed
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import secrets
import shutil
import signal
import ssl
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deploy.kube_build import ensure_binaries
from deploy.local_wait import poll_until
from gpufailover.ports import free_ports

NODES = tuple(f"gpu-{i}" for i in range(1, 5))
GPUS_PER_NODE = 8
GPU_RESOURCE = "nvidia.com/gpu"
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
READY_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 15.0
ALREADY_EXISTS = 409


def wait_for(what: str, check: Callable[[], bool], timeout_s: float = READY_TIMEOUT_S) -> None:
    poll_until(what, check, timeout_s, poll_s=0.2)


def kubeconfig_dict(server: str, ca_file: Path, user: str, token: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "local", "cluster": {"server": server, "certificate-authority": str(ca_file)}}
        ],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": "local", "context": {"cluster": "local", "user": user}}],
        "current-context": "local",
    }


def gpu_node_status(gpus: int = GPUS_PER_NODE) -> dict[str, Any]:
    """What a kubelet would report: capacity with GPUs, and Ready."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    resources = {"cpu": "64", "memory": "512Gi", "pods": "110", GPU_RESOURCE: str(gpus)}
    ready = {
        "type": "Ready",
        "status": "True",
        "reason": "KubeletReady",
        "message": "fake node (gpufailover tests): no kubelet",
        "lastHeartbeatTime": now,
        "lastTransitionTime": now,
    }
    return {"status": {"capacity": resources, "allocatable": resources, "conditions": [ready]}}


@dataclass
class KubeCluster:
    """A running control plane; `tokens` maps each test principal (a user name) to its token."""

    base: Path
    server: str
    admin_token: str
    tokens: dict[str, str]
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    nodes: tuple[str, ...] = NODES
    _clients: dict[str, Any] = field(default_factory=dict)

    @property
    def ca_file(self) -> Path:
        """kube-apiserver's self-signed serving certificate (its own CA)."""
        return self.base / "certs" / "apiserver.crt"

    @property
    def kubeconfig(self) -> Path:
        """The admin's kubeconfig (kubectl --kubeconfig, KUBECONFIG, lightkube)."""
        return self.base / "admin.kubeconfig"

    def kubeconfig_for(self, token: str, user: str = "test") -> Path:
        """A kubeconfig file authenticating with `token` (a principal's or a ServiceAccount's)."""
        path = self.base / f"{user}-{secrets.token_hex(4)}.kubeconfig"
        path.write_text(json.dumps(kubeconfig_dict(self.server, self.ca_file, user, token)))
        return path

    def config(self, token: str | None = None) -> Any:
        """A lightkube KubeConfig for `token` (default: the admin)."""
        from lightkube import KubeConfig

        return KubeConfig.from_dict(
            kubeconfig_dict(self.server, self.ca_file, "user", token or self.admin_token)
        )

    def client(self, token: str | None = None) -> Any:
        """A synchronous lightkube Client (default: the admin), one per token, closed with the
        cluster."""
        from lightkube import Client

        key = token or self.admin_token
        if key not in self._clients:
            self._clients[key] = Client(config=self.config(key), trust_env=False)
        return self._clients[key]

    def close_clients(self) -> None:
        for client in self._clients.values():
            client.close()
        self._clients.clear()

    def async_client(self, token: str | None = None) -> Any:
        """An asynchronous lightkube AsyncClient (default: the admin); the caller closes it
        (`await client.close()`): it belongs to the caller's event loop."""
        from lightkube import AsyncClient

        return AsyncClient(config=self.config(token), trust_env=False)

    def service_account_token(self, namespace: str, name: str, *, create: bool = True) -> str:
        """A token of the ServiceAccount `namespace/name` (created first unless `create=False`)."""
        from lightkube import ApiError
        from lightkube.models.authentication_v1 import TokenRequestSpec
        from lightkube.models.meta_v1 import ObjectMeta
        from lightkube.resources.core_v1 import ServiceAccount

        client = self.client()
        if create:
            try:
                client.create(ServiceAccount(metadata=ObjectMeta(name=name, namespace=namespace)))
            except ApiError as exc:
                if exc.status.code != ALREADY_EXISTS:
                    raise
        request = ServiceAccount.Token(
            metadata=ObjectMeta(name=name, namespace=namespace),
            spec=TokenRequestSpec(audiences=[], expirationSeconds=3600),
        )
        issued = client.create(request, name=name, namespace=namespace)
        assert issued.status is not None  # the API server always fills it
        token: str = issued.status.token
        return token

    def create_gpu_node(
        self, name: str, gpus: int = GPUS_PER_NODE, labels: dict[str, str] | None = None
    ) -> None:
        """A Ready node with `gpus` GPUs that the scheduler may use."""
        from lightkube.models.meta_v1 import ObjectMeta
        from lightkube.resources.core_v1 import Node

        client = self.client()
        node_labels = {"kubernetes.io/hostname": name, "nvidia.com/gpu.present": "true"}
        client.create(Node(metadata=ObjectMeta(name=name, labels=node_labels | (labels or {}))))
        self.reset_node(name, gpus)

    def reset_node(self, name: str, gpus: int = GPUS_PER_NODE) -> None:
        """Ready with `gpus` GPUs, schedulable, no taints, no annotations (between tests). The
        API server put the not-ready taint on at creation; the disabled node lifecycle
        controller would have removed it once the node reported Ready."""
        from lightkube.resources.core_v1 import Node

        client = self.client()
        client.patch(Node.Status, name, gpu_node_status(gpus))
        client.patch(
            Node, name, {"metadata": {"annotations": None}, "spec": {"unschedulable": None}}
        )
        client.patch(Node, name, [{"op": "replace", "path": "/spec/taints", "value": []}],
                     patch_type=_json_patch())  # fmt: skip
        node = client.get(Node, name)
        if any(t.key == NOT_READY_TAINT for t in (node.spec.taints or [])):
            raise RuntimeError(f"node {name} still has the {NOT_READY_TAINT} taint")

    def reset(self) -> None:
        """Every default node reset, nodes a test added deleted, the `default` namespace's
        Events (where Node Events go) deleted."""
        from lightkube.resources.core_v1 import Event, Node

        client = self.client()
        client.deletecollection(Event, namespace="default")
        for node in client.list(Node):
            name = node.metadata.name
            if name in self.nodes:
                self.reset_node(name)
            else:
                client.delete(Node, name)


def _json_patch() -> Any:
    from lightkube.types import PatchType

    return PatchType.JSON


def _spawn(base: Path, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
    with (base / "log" / f"{name}.log").open("wb") as out:  # the child keeps its own copy
        return subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, cwd=base, stdin=subprocess.DEVNULL
        )


def _check_alive(cluster: KubeCluster) -> None:
    for name, proc in cluster.processes.items():
        if proc.poll() is not None:
            tail = (cluster.base / "log" / f"{name}.log").read_text(errors="replace")[-3000:]
            raise RuntimeError(f"{name} exited {proc.returncode} while starting:\n{tail}")


def _write_keys_and_tokens(base: Path, admin: str, tokens: dict[str, str]) -> None:
    key = base / "sa.key"
    subprocess.run(["openssl", "genrsa", "-out", str(key), "2048"], check=True, capture_output=True)
    subprocess.run(
        ["openssl", "rsa", "-in", str(key), "-pubout", "-out", str(base / "sa.pub")],
        check=True,
        capture_output=True,
    )
    lines = [f"{admin},admin,admin,system:masters"]
    lines += [f"{token},{user},{user}" for user, token in tokens.items()]
    (base / "tokens.csv").write_text("\n".join(lines) + "\n")


def _api_ready(cluster: KubeCluster) -> bool:
    _check_alive(cluster)
    if not cluster.ca_file.exists():
        return False
    request = urllib.request.Request(  # noqa: S310 (https, to our own server)
        f"{cluster.server}/readyz", headers={"Authorization": f"Bearer {cluster.admin_token}"}
    )
    tls = ssl.create_default_context(cafile=str(cluster.ca_file))
    try:
        with urllib.request.urlopen(request, timeout=5.0, context=tls) as resp:  # noqa: S310 (https, ours)
            body: bytes = resp.read()
    except (urllib.error.URLError, OSError):
        return False
    return body.strip() == b"ok"


def _default_service_account(cluster: KubeCluster) -> bool:
    """kube-controller-manager creates each namespace's `default` ServiceAccount (pods need it)."""
    from lightkube import ApiError
    from lightkube.resources.core_v1 import ServiceAccount

    _check_alive(cluster)
    try:
        cluster.client().get(ServiceAccount, "default", namespace="default")
    except ApiError:
        return False
    return True


@contextlib.contextmanager
def running_kube_cluster(
    principals: tuple[str, ...] = (), nodes: tuple[str, ...] = NODES
) -> Iterator[KubeCluster]:
    """Build (once) and start the control plane, create `nodes`, yield; stop and clean up."""
    bin_dir = ensure_binaries()
    etcd = shutil.which("etcd")
    if etcd is None:
        raise RuntimeError("etcd not found: `apt-get install etcd-server` (Debian's etcd)")
    base = Path(tempfile.mkdtemp(prefix="gpufailover-kube-"))
    etcd_port, peer_port, api_port = free_ports(3)
    cluster = KubeCluster(
        base,
        server=f"https://127.0.0.1:{api_port}",
        admin_token=secrets.token_hex(16),
        tokens={p: secrets.token_hex(16) for p in principals},
        nodes=nodes,
    )
    try:
        (base / "log").mkdir()
        _write_keys_and_tokens(base, cluster.admin_token, cluster.tokens)
        etcd_url = f"http://127.0.0.1:{etcd_port}"
        cluster.processes["etcd"] = _spawn(base, "etcd", [
            etcd, "--data-dir", str(base / "etcd-data"), "--name", "gpufailover-test",
            "--listen-client-urls", etcd_url, "--advertise-client-urls", etcd_url,
            "--listen-peer-urls", f"http://127.0.0.1:{peer_port}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer_port}",
            "--initial-cluster", f"gpufailover-test=http://127.0.0.1:{peer_port}",
        ])  # fmt: skip
        cluster.processes["kube-apiserver"] = _spawn(base, "kube-apiserver", [
            str(bin_dir / "kube-apiserver"), f"--etcd-servers={etcd_url}",
            f"--secure-port={api_port}", "--bind-address=127.0.0.1",
            f"--cert-dir={base / 'certs'}", "--service-account-issuer=https://kubernetes.default.svc",
            f"--service-account-key-file={base / 'sa.pub'}",
            f"--service-account-signing-key-file={base / 'sa.key'}",
            f"--token-auth-file={base / 'tokens.csv'}", "--authorization-mode=RBAC",
            "--service-cluster-ip-range=10.96.0.0/12",
        ])  # fmt: skip
        wait_for("kube-apiserver /readyz", lambda: _api_ready(cluster))
        admin = kubeconfig_dict(cluster.server, cluster.ca_file, "admin", cluster.admin_token)
        cluster.kubeconfig.write_text(json.dumps(admin))  # JSON is YAML: kubectl reads it
        kc = str(cluster.kubeconfig)
        common = [f"--kubeconfig={kc}", f"--authentication-kubeconfig={kc}",
                  f"--authorization-kubeconfig={kc}", "--leader-elect=false",
                  "--bind-address=127.0.0.1", "--secure-port=0"]  # fmt: skip
        cluster.processes["kube-controller-manager"] = _spawn(base, "kube-controller-manager", [
            str(bin_dir / "kube-controller-manager"), *common,
            f"--service-account-private-key-file={base / 'sa.key'}",
            "--use-service-account-credentials=false", "--controllers=*,-nodelifecycle",
        ])  # fmt: skip
        cluster.processes["kube-scheduler"] = _spawn(
            base, "kube-scheduler", [str(bin_dir / "kube-scheduler"), *common]
        )
        wait_for("the default ServiceAccount", lambda: _default_service_account(cluster))
        for name in nodes:
            cluster.create_gpu_node(name)
        _check_alive(cluster)
        yield cluster
    finally:
        _stop(cluster)
        shutil.rmtree(base, ignore_errors=True)


def _stop(cluster: KubeCluster) -> None:
    """Stop in reverse start order (etcd last); kill what does not stop in time."""
    cluster.close_clients()
    for name in reversed(list(cluster.processes)):
        proc = cluster.processes[name]
        if proc.poll() is not None:
            continue
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=STOP_TIMEOUT_S)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m deploy.kube_local",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("command", choices=("build", "up"))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    for noisy in ("httpx", "httpx2"):  # one INFO line per API request
        logging.getLogger(noisy).setLevel(logging.WARNING)
    if args.command == "build":
        print(ensure_binaries())
        return 0
    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with running_kube_cluster() as cluster:
        print(f"kubeconfig: {cluster.kubeconfig}  (Ctrl-C stops the cluster)", flush=True)
        stop.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
