"""Choosing the Kubernetes requeue stage and `k8s-events`' settings: flags, env vars, defaults."""

from __future__ import annotations

import pytest

from consumers.requeue.config import RequeueSettings
from gpufailover.cli import build_parser
from producers.k8s.config import K8sEventsSettings


def test_flags_select_the_kubernetes_requeue_and_its_options() -> None:
    args = build_parser().parse_args(
        ["requeue", "--scheduler", "kubernetes", "--kubeconfig", "/k", "--k8s-namespace", "ml",
         "--k8s-failover-priority-class", "urgent", "--k8s-retry-priority-class", "batch"]
    )  # fmt: skip
    r = RequeueSettings.from_env_and_args(args)
    assert (r.scheduler, r.kubeconfig, r.k8s_namespace) == ("kubernetes", "/k", "ml")
    assert (r.k8s_failover_priority_class, r.k8s_retry_priority_class) == ("urgent", "batch")


def test_env_vars_and_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    r = RequeueSettings.from_env_and_args(None)
    assert (r.kubeconfig, r.k8s_namespace, r.k8s_retry_priority_class) == (None, None, None)
    assert r.k8s_failover_priority_class == "gpufailover-failover"
    monkeypatch.setenv("GPUFAILOVER_REQUEUE_SCHEDULER", "kubernetes")
    monkeypatch.setenv("GPUFAILOVER_KUBECONFIG", "/etc/k")
    monkeypatch.setenv("GPUFAILOVER_REQUEUE_K8S_FAILOVER_PRIORITY_CLASS", "")  # keep the Job's
    r = RequeueSettings.from_env_and_args(None)
    assert (r.scheduler, r.kubeconfig, r.k8s_failover_priority_class) == (
        "kubernetes",
        "/etc/k",
        None,
    )


def test_k8s_events_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUFAILOVER_K8S_EVENTS_NAMESPACE", "ml")
    monkeypatch.setenv("GPUFAILOVER_K8S_EVENTS_WATCH_TIMEOUT_S", "60")
    monkeypatch.setenv("GPUFAILOVER_TOPIC_PREFIX", "p.")
    s = K8sEventsSettings.from_env_and_args(None)
    assert (s.namespace, s.watch_timeout_s, s.names.jobs_events) == ("ml", 60, "p.jobs.events")
    args = build_parser().parse_args(["k8s-events", "--namespace", "a", "--bootstrap", "b:1"])
    s = K8sEventsSettings.from_env_and_args(args)
    assert (s.namespace, s.bootstrap) == ("a", "b:1")
    monkeypatch.setenv("GPUFAILOVER_K8S_EVENTS_WATCH_TIMEOUT_S", "0")
    with pytest.raises(SystemExit, match="at least 1 s"):
        K8sEventsSettings.from_env_and_args(None)
