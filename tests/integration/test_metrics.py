"""Metrics on a real broker: every component's /metrics changes as events flow, every metric the
dashboard and the alert rules query is emitted by a live component, and a real Prometheus server
scrapes one and evaluates the alert rules.

Components run as `gpufailover <command>` processes with their metrics ports set, as deployed.
Every wait polls (an endpoint, a topic, Prometheus' API) against a deadline.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest

from schemas.topics import TopicNames
from tests.integration.kafka_io import (
    Service,
    classifier,
    free_port,
    produce,
    short_grace_policy,
    wait_for,
)
from tests.promql_names import (
    ALERTS,
    SYNTHETIC,
    alert_exprs,
    dashboard_exprs,
    queried,
    samples,
    series_names,
)

DEADLINE_S = 60.0
UUID = "GPU-5e4c1fb2-2fa8-1e57-4a3b-8e4b1b2d2a11"
BOOT = f"[    5.301200] NVRM: GPU at PCI:0000:3b:00: {UUID}\n"
XID_79 = "[  966.500231] NVRM: Xid (PCI:0000:3b:00): 79, pid=1122, GPU has fallen off the bus.\n"
# A family every component declares once its metrics exist (the consumers' registries are
# served before their service has built its metrics).
READY = {
    "classifier": "gpufailover_classifier_records_consumed_total",
    "quarantine": "gpufailover_quarantine_records_consumed_total",
    "requeue": "gpufailover_requeue_records_consumed_total",
    "jobstatus": "gpufailover_jobstatus_records_consumed_total",
    "agent": "gpufailover_agent_xids_total",
}
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def get(s: Samples, name: str, **labels: str) -> float:
    return s.get((name, frozenset(labels.items())), 0.0)


def total(s: Samples, name: str) -> float:
    return sum(v for (n, _), v in s.items() if n == name)


def _fetch(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            text: str = resp.read().decode()
            return text
    except OSError:
        return None  # not listening yet


async def scrape(component: str, port: int, service: Service | None = None) -> str:
    """The component's /metrics text once it declares its metrics."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        text = await asyncio.to_thread(_fetch, f"http://127.0.0.1:{port}/metrics")
        if text is not None and f"# TYPE {READY[component]}" in text:
            return text
        if service is not None and service.proc is not None and service.proc.poll() is not None:
            raise AssertionError(f"{component} exited:\n{service.log_tail()}")
        assert time.monotonic() < deadline, f"{component}: no metrics on :{port}"
        await asyncio.sleep(0.2)  # poll interval


async def until(component: str, port: int, done: Callable[[Samples], bool], what: str) -> Samples:
    """Scrape until `done(samples)` holds, or fail with the last scrape."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        s = samples(await scrape(component, port))
        if done(s):
            return s
        if time.monotonic() > deadline:
            seen = sorted(f"{n}{dict(lb)}={v}" for (n, lb), v in s.items() if "gpufailover" in n)
            raise AssertionError(f"{component}: {what} not reached:\n" + "\n".join(seen))
        await asyncio.sleep(0.2)  # poll interval


@contextmanager
def pipeline(
    bootstrap: str, names: TopicNames, partitions: int, tmp: Path, kernel_log: Path
) -> Iterator[dict[str, tuple[int, Service]]]:
    """Classifier, quarantine, requeue, job-status and a node agent, each serving /metrics."""
    common = ["--bootstrap", bootstrap, "--prefix", names.prefix, "--instance-id", "metrics"]
    ports = {c: free_port() for c in ("quarantine", "requeue", "jobstatus", "agent")}
    services: dict[str, Service] = {
        "classifier": classifier(bootstrap, names.prefix, partitions, tmp, short_grace_policy(tmp)),
        "quarantine": Service(
            ["quarantine", *common, "--metrics-port", str(ports["quarantine"]),
             "--fleet-size", "100", "--actuator-log", str(tmp / "actuator.log")],
            tmp / "quarantine.log", {},
        ),
        "requeue": Service(
            ["requeue", *common, "--metrics-port", str(ports["requeue"])], tmp / "requeue.log", {}
        ),
        "jobstatus": Service(
            ["job-status", *common, "--metrics-port", str(ports["jobstatus"])],
            tmp / "jobstatus.log", {},
        ),
        "agent": Service(
            ["agent", "--source", f"file:{kernel_log}", "--from-start", "--node", "gpu-node-17",
             "--bootstrap", bootstrap, "--topic-prefix", names.prefix,
             "--metrics-port", str(ports["agent"]), "--spool-dir", str(tmp / "spool")],
            tmp / "agent.log", {},
        ),
    }  # fmt: skip
    args = services["classifier"].args
    ports["classifier"] = int(args[args.index("--web-port") + 1])
    with ExitStack() as stack:
        for service in services.values():
            stack.enter_context(service)
        yield {c: (ports[c], services[c]) for c in services}


async def test_every_component_s_metrics_change_as_events_flow(
    kafka_bootstrap: str,
    topic_names: TopicNames,
    topic_partitions: int,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An XID 79 in the agent's kernel log and the job's termination flow through the agent,
    the classifier, quarantine, requeue and job status: each one's counters move."""
    monkeypatch.chdir(tmp_path)
    n = topic_names
    kernel_log = tmp_path / "kern.log"
    kernel_log.write_text(BOOT)
    with pipeline(kafka_bootstrap, n, topic_partitions, tmp_path, kernel_log) as comps:
        before = {c: samples(await scrape(c, port, svc)) for c, (port, svc) in comps.items()}
        for c in ("quarantine", "requeue", "jobstatus"):  # nothing consumed yet
            assert total(before[c], f"gpufailover_{c}_records_consumed_total") == 0, c
        assert total(before["classifier"], "gpufailover_classifier_decisions_total") == 0
        assert get(before["agent"], "gpufailover_agent_xids_total", code="79") == 0

        with kernel_log.open("a") as f:
            f.write(XID_79)
        await wait_for(kafka_bootstrap, [n.gpu_xid], lambda r: len(r) >= 1)
        nodes = ["gpu-node-16", "gpu-node-17"]
        job = {"job_id": "llm-7b", "attempt": 0, "nodes": nodes}
        await produce(
            kafka_bootstrap,
            [
                (n.jobs_events, "llm-7b", {**job, "type": "started", "ts_ms": now_ms() - 60_000}),
                (n.jobs_events, "llm-7b", {**job, "type": "terminated", "ts_ms": now_ms()}),
            ],
        )
        await wait_for(kafka_bootstrap, [n.jobs_requeue], lambda r: len(r) >= 1)

        agent = await until(
            "agent",
            comps["agent"][0],
            lambda s: get(s, "gpufailover_agent_published_total", topic="gpu.xid") >= 1,
            "XID published",
        )
        assert get(agent, "gpufailover_agent_xids_total", code="79") == 1
        assert get(agent, "gpufailover_agent_heartbeat_timestamp_seconds") >= get(
            before["agent"], "gpufailover_agent_heartbeat_timestamp_seconds"
        )

        cls = await until(
            "classifier",
            comps["classifier"][0],
            lambda s: (
                get(
                    s,
                    "gpufailover_classifier_decisions_total",
                    verdict="hardware",
                    action="failover",
                )
                == 1
                # The signal filter's counts come from its own process, reported every
                # streams.filter_process.REPORT_EVERY_S: they may follow the decision.
                and get(s, "gpufailover_classifier_records_consumed_total", topic="gpu.xid") > 0
            ),
            "a hardware decision and the filter's report of its XID",
        )
        p = "gpufailover_classifier"
        assert get(cls, f"{p}_xids_total", code="79") == 1
        assert get(cls, f"{p}_records_consumed_total", topic="gpu.xid") == 1
        assert get(cls, f"{p}_records_consumed_total", topic="jobs.events") == 2
        assert get(cls, f"{p}_records_produced_total", topic="failover.decisions") == 1
        assert get(cls, f"{p}_records_produced_total", topic="failover.quarantine-requests") >= 1
        assert get(cls, f"{p}_decision_latency_seconds_count") == 1
        assert 0 <= get(cls, f"{p}_decision_latency_seconds_sum") < DEADLINE_S
        assert get(cls, f"{p}_evidence_wait_seconds_count") == 1
        assert get(cls, f"{p}_last_progress_timestamp_seconds", agent="job") > get(
            before["classifier"], f"{p}_last_progress_timestamp_seconds", agent="job"
        )
        lag = {dict(lb)["topic"] for (name, lb), _ in cls.items() if name == f"{p}_consumer_lag"}
        assert {"gpu.xid", "jobs.events"} <= lag
        assert any(name == f"{p}_watermark_timestamp_seconds" for name, _ in cls)

        q = await until(
            "quarantine",
            comps["quarantine"][0],
            lambda s: get(s, "gpufailover_quarantine_nodes_quarantined") == 1,
            "one node quarantined",
        )
        assert total(q, "gpufailover_quarantine_quarantines_total") == 1
        assert total(q, "gpufailover_quarantine_records_consumed_total") >= 1
        assert (
            get(q, "gpufailover_quarantine_records_produced_total", topic="nodes.quarantine") == 1
        )
        assert get(q, "gpufailover_quarantine_breaker_tripped") == 0
        assert any(name == "gpufailover_quarantine_consumer_lag" for name, _ in q)

        r = await until(
            "requeue",
            comps["requeue"][0],
            lambda s: total(s, "gpufailover_requeue_commands_total") == 1,
            "one requeue command",
        )
        assert get(r, "gpufailover_requeue_records_produced_total", topic="jobs.requeue") == 1
        assert get(r, "gpufailover_requeue_last_progress_timestamp_seconds") > 0

        js = await until(
            "jobstatus",
            comps["jobstatus"][0],
            lambda s: total(s, "gpufailover_jobstatus_updates_total") >= 2,
            "status updates",
        )
        assert get(js, "gpufailover_jobstatus_jobs") == 1
    for c, (_, svc) in comps.items():
        assert svc.proc is not None and svc.proc.returncode in (0, -15), (c, svc.log_tail())


async def test_every_metric_the_dashboard_and_alert_rules_query_is_emitted_live(
    kafka_bootstrap: str,
    topic_names: TopicNames,
    topic_partitions: int,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    kernel_log = tmp_path / "kern.log"
    kernel_log.write_text(BOOT)
    emitted: set[str] = set()
    with pipeline(kafka_bootstrap, topic_names, topic_partitions, tmp_path, kernel_log) as comps:
        for c, (port, svc) in comps.items():
            emitted |= series_names(await scrape(c, port, svc))
        # The classifier's page on the faust web server speaks the text exposition format.
        url = f"http://127.0.0.1:{comps['classifier'][0]}/metrics"
        with await asyncio.to_thread(urllib.request.urlopen, url, timeout=5) as resp:
            assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    dashboard = queried(dashboard_exprs())
    rules = queried(alert_exprs())
    assert not dashboard - emitted - SYNTHETIC, sorted(dashboard - emitted)
    assert not rules - emitted - SYNTHETIC, sorted(rules - emitted)
    # The check has teeth: histogram series and every component are among the queried.
    assert "gpufailover_classifier_decision_latency_seconds_bucket" in dashboard
    for c in READY:
        assert any(name.startswith(f"gpufailover_{c}_") for name in dashboard | rules), c


def _prometheus_api(port: int, path: str, **params: str) -> Any:
    url = f"http://127.0.0.1:{port}/api/v1/{path}"
    if params:
        url += "?" + urllib.parse.urlencode(params)
    text = _fetch(url)
    return None if text is None else json.loads(text)["data"]


async def test_a_real_prometheus_scrapes_the_classifier_and_evaluates_the_alert_rules(
    kafka_bootstrap: str,
    topic_names: TopicNames,
    topic_partitions: int,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip(
            "the `prometheus` binary is absent (Debian package `prometheus`; "
            "`bash .ci/promtool.sh` installs it, and .ci/run runs that first)"
        )
    monkeypatch.chdir(tmp_path)
    svc = classifier(kafka_bootstrap, topic_names.prefix, topic_partitions, tmp_path)
    target = int(svc.args[svc.args.index("--web-port") + 1])
    prom_port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        json.dumps(  # JSON is YAML
            {
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "rule_files": [str(ALERTS)],
                "scrape_configs": [
                    {
                        "job_name": "gpufailover-classifier",
                        "static_configs": [{"targets": [f"127.0.0.1:{target}"]}],
                    }
                ],
            }
        )
    )
    argv = [
        binary,
        f"--config.file={config}",
        f"--storage.tsdb.path={tmp_path / 'tsdb'}",
        f"--web.listen-address=127.0.0.1:{prom_port}",
        "--log.level=warn",
    ]
    with svc, (tmp_path / "prometheus.log").open("wb") as log:
        prom = await asyncio.create_subprocess_exec(*argv, stdout=log, stderr=subprocess.STDOUT)
        try:
            await scrape("classifier", target, svc)
            query = (
                'sum(gpufailover_classifier_records_consumed_total{job="gpufailover-classifier"})'
            )
            deadline = time.monotonic() + DEADLINE_S
            while True:
                assert prom.returncode is None, (tmp_path / "prometheus.log").read_text()
                result = await asyncio.to_thread(_prometheus_api, prom_port, "query", query=query)
                if result and result["result"] and float(result["result"][0]["value"][1]) > 0:
                    break  # the classifier's ticks, scraped and stored
                assert time.monotonic() < deadline, f"no sample in Prometheus: {result}"
                await asyncio.sleep(0.5)  # poll interval
            up = await asyncio.to_thread(
                _prometheus_api, prom_port, "query", query='up{job="gpufailover-classifier"}'
            )
            assert [float(r["value"][1]) for r in up["result"]] == [1.0]
            # Every alert rule loaded and evaluated without error against live data.
            while True:
                rules = await asyncio.to_thread(_prometheus_api, prom_port, "rules")
                evaluated = [r for g in rules["groups"] for r in g["rules"]]
                if evaluated and all(r["health"] == "ok" for r in evaluated):
                    break
                bad = [(r["name"], r["health"], r.get("lastError")) for r in evaluated]
                assert not [b for b in bad if b[1] == "err"], bad
                assert time.monotonic() < deadline, bad
                await asyncio.sleep(0.5)  # poll interval
            assert len(evaluated) == len(alert_exprs())
        finally:
            prom.terminate()
            try:
                await asyncio.wait_for(prom.wait(), 30)
            except TimeoutError:
                prom.kill()
                await prom.wait()
