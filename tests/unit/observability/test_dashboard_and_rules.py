"""The dashboard and alert rules query only metrics the components declare; names and labels
follow the conventions. (The integration test compares with a live scrape too.)"""

from __future__ import annotations

import json

import pytest
import yaml
from prometheus_client import CollectorRegistry, generate_latest

from consumers.jobstatus.metrics import JobStatusMetrics
from consumers.quarantine.metrics import QuarantineMetrics
from consumers.requeue.k8s_stage import kubernetes_stage_metrics
from consumers.requeue.metrics import RequeueMetrics
from consumers.requeue.slurm_stage import SlurmStageMetrics
from producers.k8s.metrics import K8sEventsMetrics
from producers.metrics import AgentMetrics
from streams.metrics import ClassifierMetrics
from tests.promql_names import (
    ALERTS,
    DASHBOARD,
    SYNTHETIC,
    alert_exprs,
    dashboard_exprs,
    metric_names,
    queried,
    series_names,
)

# Labels that would carry unbounded values: per-node and per-job detail lives in the topics.
FORBIDDEN_LABELS = {"node", "job_id", "job", "host", "hostname", "gpu_uuid", "uuid", "instance_id"}


def registries() -> dict[str, CollectorRegistry]:
    out = {c: CollectorRegistry() for c in ("classifier", "quarantine", "requeue", "jobstatus")}
    ClassifierMetrics(out["classifier"]).lag_from(list)
    QuarantineMetrics.create(out["quarantine"])
    RequeueMetrics.create(out["requeue"])
    SlurmStageMetrics.create(out["requeue"])  # the requeue service with --scheduler slurm
    kubernetes_stage_metrics(out["requeue"])  # ... and with --scheduler kubernetes
    JobStatusMetrics.create(out["jobstatus"])
    out["agent"] = AgentMetrics().registry
    out["kubernetes_events"] = CollectorRegistry()
    K8sEventsMetrics.create(out["kubernetes_events"])
    return out


def declared() -> set[str]:
    return {n for r in registries().values() for n in series_names(generate_latest(r).decode())}


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ("max(gpufailover_quarantine_nodes) > 0", {"gpufailover_quarantine_nodes"}),
        ('sum by (code) (rate(a_total{topic="gpu.xid",x=~"b|c"}[$__rate_interval]))', {"a_total"}),
        ("histogram_quantile(0.99, sum by (le) (rate(h_seconds_bucket[10m]))) > 300",
         {"h_seconds_bucket"}),
        ("x / clamp_min(max(y), 1) > 0.05", {"x", "y"}),
        ("sum by (job, topic) (deriv(lag[10m])) > 0 and sum by (job, topic) (lag) > 100", {"lag"}),
        ('up{job="gpufailover-agent"} == 0', {"up"}),
        ("time() - max by (agent) (p_seconds) > 1e3", {"p_seconds"}),
        ("a or on (job) b unless ignoring (x) group_left (y) c offset 5m", {"a", "b", "c"}),
        ("count(time() - hb < 60)", {"hb"}),
    ],
)  # fmt: skip
def test_metric_names_are_found_in_promql_shapes(expr: str, names: set[str]) -> None:
    assert metric_names(expr) == names


def test_the_committed_dashboard_is_what_the_generator_builds() -> None:
    from deploy.dashboard import OUT, render

    assert OUT == DASHBOARD
    assert DASHBOARD.read_text() == render(), "stale: run python -m deploy.dashboard"


def test_dashboard_has_the_four_sections_and_every_panel_queries_something() -> None:
    d = json.loads(DASHBOARD.read_text())
    rows = [p["title"] for p in d["panels"] if p["type"] == "row"]
    assert rows == ["Fleet health", "Decisions", "Pipeline health", "Safety"]
    panels = [p for p in d["panels"] if p["type"] != "row"]
    titles = {p["title"] for p in panels}
    assert {"Nodes quarantined", "XIDs by code", "Decisions by verdict and action"} <= titles
    assert {"Decision latency", "Consumer lag", "Dead letters", "Quarantine breaker"} <= titles
    for p in panels:
        assert p["targets"] and all(t["expr"] for t in p["targets"]), p["title"]
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
    assert len({p["id"] for p in d["panels"]}) == len(d["panels"])
    latency = next(p for p in panels if p["title"] == "Decision latency")
    exprs = " ".join(t["expr"] for t in latency["targets"])
    assert "histogram_quantile(0.5," in exprs and "histogram_quantile(0.99," in exprs


def test_alert_rules_cover_the_issue_and_carry_severity_and_summary() -> None:
    doc = yaml.safe_load(ALERTS.read_text())
    rules = [r for g in doc["groups"] for r in g["rules"]]
    assert {r["alert"] for r in rules} >= {
        "GpuFailoverBreakerTripped",
        "GpuFailoverQuarantinedShareHigh",
        "GpuFailoverDecisionLatencyHigh",
        "GpuFailoverConsumerLagGrowing",
        "GpuFailoverDeadLetters",
        "GpuFailoverAgentNotReporting",
        "GpuFailoverDecisionOverdue",
        "GpuFailoverActuationFailing",
        "GpuFailoverWatermarkAhead",
    }
    for r in rules:
        assert r["labels"]["severity"] in {"warning", "critical"}, r["alert"]
        assert r["annotations"]["summary"], r["alert"]
    # Each consuming component's lag is watched.
    lag = [r["expr"] for r in rules if r["alert"] == "GpuFailoverConsumerLagGrowing"]
    for c in ("classifier", "quarantine", "requeue", "jobstatus"):
        assert any(f"gpufailover_{c}_consumer_lag" in e for e in lag), c
    # The decision deadline is watched through the job status service, which keeps running
    # when the classifier is down; and unactuated quarantines through the quarantine service.
    by_name = {r["alert"]: r["expr"] for r in rules}
    assert "gpufailover_jobstatus_overdue_decisions" in by_name["GpuFailoverDecisionOverdue"]
    assert "gpufailover_classifier" not in by_name["GpuFailoverDecisionOverdue"]
    assert "gpufailover_quarantine_actuations_owed" in by_name["GpuFailoverActuationFailing"]
    # A watermark ahead of the wall clock by more than the max future skew (issue 12).
    ahead = by_name["GpuFailoverWatermarkAhead"]
    assert "gpufailover_classifier_watermark_timestamp_seconds" in ahead and "time()" in ahead


def test_every_metric_the_dashboard_and_rules_query_is_declared_by_a_component() -> None:
    wanted = queried(dashboard_exprs()) | queried(alert_exprs())
    assert len(wanted) > 20
    missing = wanted - declared() - SYNTHETIC
    assert not missing, f"queried but declared by no component: {sorted(missing)}"


def test_names_follow_the_convention_and_labels_are_bounded() -> None:
    for component, registry in registries().items():
        for family in registry.collect():
            assert family.name.startswith(f"gpufailover_{component}_"), family.name
            if family.type == "histogram":
                assert family.name.endswith(("_seconds", "_nodes")), family.name
        text = generate_latest(registry).decode()
        for line in text.splitlines():
            if line.startswith("# TYPE") and line.split()[3] == "counter":
                assert line.split()[2].endswith("_total"), line
    # Label names, from every family's declared labels (children or not).
    seen: set[str] = set()
    for registry in registries().values():
        for collector in list(registry._collector_to_names):  # the registry's own index
            labels = set(getattr(collector, "_labelnames", ()))
            assert not labels & FORBIDDEN_LABELS, (collector, labels)
            seen |= labels
    assert {"topic", "code", "verdict", "action", "reason", "condition", "kind"} <= seen


def test_the_metrics_reference_lists_exactly_the_declared_metrics() -> None:
    import re

    doc = (DASHBOARD.parents[3] / "docs" / "metrics.md").read_text()
    documented = set()
    for name in re.findall(r"`(gpufailover_(?:<c>|[a-z])[a-z<>_]*)`", doc):
        for c in ("quarantine", "requeue", "jobstatus") if "<c>" in name else ("",):
            documented.add(name.replace("<c>", c))
    families = set()
    for registry in registries().values():
        for family in registry.collect():
            families.add(family.name + ("_total" if family.type == "counter" else ""))
    assert families - documented == set(), "declared but not in docs/metrics.md"
    assert documented - families == set(), "in docs/metrics.md but declared by no component"
