"""Choosing the Kubernetes quarantine actuator: flags, env vars, bad values."""

from __future__ import annotations

from pathlib import Path

import pytest

from consumers.quarantine.actuator import Reconciler, make_actuator
from consumers.quarantine.actuator_k8s import KubernetesActuator
from consumers.quarantine.config import QuarantineSettings
from gpufailover.cli import build_parser
from schemas.quarantine import QuarantineRecord


def test_flags_select_the_kubernetes_actuator_and_its_taint() -> None:
    argv = ["quarantine", "--actuator", "kubernetes", "--kubeconfig", "/etc/k.yaml",
            "--taint-key", "example.com/bad-gpu", "--taint-effect", "NoExecute",
            "--event-namespace", "ops"]  # fmt: skip
    q = QuarantineSettings.from_env_and_args(build_parser().parse_args(argv))
    actuator = make_actuator(q.actuator, q.scheduler, None, kubernetes=q.kubernetes)
    assert isinstance(actuator, KubernetesActuator) and isinstance(actuator, Reconciler)
    assert (actuator.taint.key, actuator.taint.effect) == ("example.com/bad-gpu", "NoExecute")
    assert actuator.event_namespace == "ops"
    assert q.kubernetes.kubeconfig == Path("/etc/k.yaml")
    command = actuator.command("quarantine", _record("gpu-1"))
    assert "kubectl cordon gpu-1" in command
    assert "example.com/bad-gpu=hardware:NoExecute" in command


def test_env_vars_and_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    default = QuarantineSettings.from_env_and_args(None).kubernetes
    assert (default.kubeconfig, default.taint.key, default.taint.effect) == (
        None,
        "gpufailover.io/quarantine",
        "NoSchedule",
    )
    monkeypatch.setenv("GPUFAILOVER_QUARANTINE_ACTUATOR", "kubernetes")
    monkeypatch.setenv("GPUFAILOVER_KUBECONFIG", "/k")
    monkeypatch.setenv("GPUFAILOVER_QUARANTINE_TAINT_EFFECT", "NoExecute")
    q = QuarantineSettings.from_env_and_args(None)
    assert (q.actuator, q.kubernetes.kubeconfig, q.kubernetes.taint.effect) == (
        "kubernetes",
        Path("/k"),
        "NoExecute",
    )


def test_a_bad_taint_effect_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUFAILOVER_QUARANTINE_TAINT_EFFECT", "PreferNoSchedule")
    with pytest.raises(SystemExit, match="taint effect must be one of"):
        QuarantineSettings.from_env_and_args(None)


def _record(node: str) -> QuarantineRecord:
    return QuarantineRecord(node, "quarantined", "hardware", (), None, 1)
