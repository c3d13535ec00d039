"""The Grafana dashboard, built with grafana-foundation-sdk (Grafana's own typed builders).

    python -m deploy.dashboard            # rewrite deploy/grafana/dashboards/gpufailover.json
    python -m deploy.dashboard --check    # exit 1 when the committed JSON is stale

The JSON is committed (Grafana and operators read the file, not this module); a test checks that
it equals this module's output and that every metric it queries is emitted by a component.
The SDK is a development dependency only: nothing at run time imports this module.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grafana_foundation_sdk.builders import common as gc
from grafana_foundation_sdk.builders import dashboard as gd
from grafana_foundation_sdk.builders import prometheus as gp
from grafana_foundation_sdk.builders import stat, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common as cm
from grafana_foundation_sdk.models import dashboard as dm

UID = "gpufailover-overview"
OUT = Path(__file__).parent / "grafana" / "dashboards" / "gpufailover.json"
DS = dm.DataSourceRef(type_val="prometheus", uid="${datasource}")
RATE = "$__rate_interval"
CONSUMERS = ("quarantine", "requeue", "jobstatus")
PIPELINE = ("classifier", *CONSUMERS)


@dataclass(frozen=True)
class Q:
    """One query: PromQL and its legend."""

    expr: str
    legend: str = ""


def _targets(queries: tuple[Q, ...]) -> list[gp.Dataquery]:
    out = []
    for i, q in enumerate(queries):
        t = gp.Dataquery().expr(q.expr).ref_id(chr(ord("A") + i)).datasource(DS)
        out.append(t.legend_format(q.legend) if q.legend else t)
    return out


def _series(
    title: str, desc: str, *queries: Q, unit: str = "short", stack: bool = False
) -> timeseries.Panel:
    p = (
        timeseries.Panel()
        .title(title)
        .description(desc)
        .datasource(DS)
        .unit(unit)
        .height(8)
        .span(12)
        .fill_opacity(10)
        .legend(
            gc.VizLegendOptions()
            .show_legend(True)
            .display_mode(cm.LegendDisplayMode.LIST)
            .placement(cm.LegendPlacement.BOTTOM)
        )
        .tooltip(
            gc.VizTooltipOptions().mode(cm.TooltipDisplayMode.MULTI).sort(cm.SortOrder.DESCENDING)
        )
    )
    if stack:
        p = p.stacking(gc.StackingConfig().mode(cm.StackingMode.NORMAL))
    for t in _targets(queries):
        p = p.with_target(t)
    return p


def _stat(
    title: str,
    desc: str,
    query: Q,
    *,
    unit: str = "short",
    red_at: float | None = None,
    mappings: dict[str, tuple[str, str]] | None = None,
) -> stat.Panel:
    p = (
        stat.Panel()
        .title(title)
        .description(desc)
        .datasource(DS)
        .unit(unit)
        .height(5)
        .span(6)
        .reduce_options(gc.ReduceDataOptions().calcs(["lastNotNull"]).values(False))
    )
    if red_at is not None:
        steps = [dm.Threshold(value=None, color="green"), dm.Threshold(value=red_at, color="red")]
        p = p.thresholds(gd.ThresholdsConfig().mode(dm.ThresholdsMode.ABSOLUTE).steps(steps))
    if mappings:
        options = {
            value: dm.ValueMappingResult(text=text, color=color, index=i)
            for i, (value, (text, color)) in enumerate(mappings.items())
        }
        p = p.mappings([dm.ValueMap(options=options)])
    return p.with_target(_targets((query,))[0])


def _each(template: str, legend: str, components: tuple[str, ...] = PIPELINE) -> tuple[Q, ...]:
    """One query per component: `{c}` in the template and the legend is the component name."""
    return tuple(Q(template.format(c=c), legend.format(c=c)) for c in components)


def build() -> gd.Dashboard:
    d = (
        gd.Dashboard("GPU failover")
        .uid(UID)
        .tags(["gpufailover"])
        .description(
            "Fleet health, decisions, pipeline health and safety of the gpufailover pipeline. "
            "Per-node and per-job detail lives in the Kafka topics, not in metrics."
        )
        .refresh("30s")
        .time("now-6h", "now")
        .timezone("browser")
        .editable()
        .with_variable(gd.DatasourceVariable("datasource").label("Data source").type("prometheus"))
    )
    d = d.with_row(gd.Row("Fleet health"))
    d = d.with_panel(
        _stat(
            "Nodes quarantined",
            "Nodes the quarantine service holds out of scheduling now.",
            Q("max(gpufailover_quarantine_nodes_quarantined)"),
            red_at=1,
        )
    )
    d = d.with_panel(
        _stat(
            "Quarantined share",
            "Quarantined nodes over the known fleet size (the breaker's denominator).",
            Q(
                "max(gpufailover_quarantine_nodes_quarantined)"
                " / clamp_min(max(gpufailover_quarantine_fleet_nodes), 1)"
            ),
            unit="percentunit",
            red_at=0.05,
        )
    )
    d = d.with_panel(
        _stat(
            "Lemon nodes",
            "Quarantined nodes marked lemon (quarantined lemon_count times within the policy's "
            "window): never auto-released; only `gpufailover quarantine release` returns one.",
            Q("max(gpufailover_quarantine_lemon_nodes)"),
            red_at=1,
        )
    )
    d = d.with_panel(
        _stat(
            "Validation failures (24h)",
            "Node validations that failed in the last 24 hours: those nodes stay quarantined, "
            "the output is in their nodes.quarantine record (validation.output).",
            Q(
                "sum(increase(gpufailover_quarantine_validation_steps_total"
                '{outcome="failed"}[24h]))'
            ),
            red_at=1,
        )
    )
    d = d.with_panel(
        _stat(
            "Agents reporting",
            "Node agents whose heartbeat is under a minute old.",
            Q("count(time() - gpufailover_agent_heartbeat_timestamp_seconds < 60)"),
        )
    )
    d = d.with_panel(
        _stat(
            "NVML hung (5m)",
            "Node agents whose NVML calls stopped returning in the last 5 minutes (a hung "
            "driver): WorkerLost/NodeLost there is decided hardware (docs/silent-nodes.md).",
            Q(
                'count(increase(gpufailover_agent_health_conditions_total{condition="nvml_hung"}'
                "[5m]) > 0) or vector(0)"
            ),
            red_at=1,
        )
    )
    d = d.with_panel(
        _stat(
            "Agent events dropped (1h)",
            "Events node agents dropped because their buffer to the broker was full.",
            Q("sum(increase(gpufailover_agent_dropped_events_total[1h]))"),
            red_at=1,
        )
    )
    d = d.with_panel(
        _series(
            "XIDs by code",
            "XID records the classifier read, per second, by XID code (codes > 255: other).",
            Q(f"sum by (code) (rate(gpufailover_classifier_xids_total[{RATE}]))", "XID {{code}}"),
            unit="ops",
            stack=True,
        )
    )
    d = d.with_panel(
        _series(
            "Health conditions",
            "GPU health condition changes the classifier read, per second, by condition.",
            Q(
                "sum by (condition) "
                f"(rate(gpufailover_classifier_health_conditions_total[{RATE}]))",
                "{{condition}}",
            ),
            unit="ops",
            stack=True,
        )
    )
    d = d.with_panel(
        _series(
            "Quarantines and releases",
            "Nodes quarantined (by reason and mode) and released, per interval.",
            Q(
                "sum by (reason, mode) "
                f"(increase(gpufailover_quarantine_quarantines_total[{RATE}]))",
                "quarantined {{reason}} ({{mode}})",
            ),
            Q(f"sum(increase(gpufailover_quarantine_releases_total[{RATE}]))", "released"),
        )
    )
    d = d.with_panel(
        _series(
            "Validations",
            "Node validations per interval by outcome: requests started, passed (awaiting an "
            "operator, or held: a lemon), released, failed (the node stays quarantined with the "
            "output on nodes.quarantine), refused.",
            Q(
                "sum by (source, outcome) "
                f"(increase(gpufailover_quarantine_validation_steps_total[{RATE}]))",
                "{{source}}: {{outcome}}",
            ),
        )
    )
    d = d.with_panel(
        _series(
            "Agent buffer depth",
            "Events waiting in node agents' memory for the broker (sum and worst agent).",
            Q("sum(gpufailover_agent_buffer_depth)", "all agents"),
            Q("max(gpufailover_agent_buffer_depth)", "worst agent"),
        )
    )

    d = d.with_row(gd.Row("Decisions"))
    d = d.with_panel(
        _series(
            "Decisions by verdict and action",
            "Failover decisions published, per interval.",
            Q(
                "sum by (verdict, action) "
                f"(increase(gpufailover_classifier_decisions_total[{RATE}]))",
                "{{verdict}} / {{action}}",
            ),
            stack=True,
        )
    )
    latency = "gpufailover_classifier_decision_latency_seconds_bucket"
    wait = "gpufailover_classifier_evidence_wait_seconds_bucket"
    d = d.with_panel(
        _series(
            "Decision latency",
            "Termination event time to decision published (wall clock); evidence wait is the "
            "event time the decision waited for late evidence.",
            Q(f"histogram_quantile(0.5, sum by (le) (rate({latency}[{RATE}])))", "latency p50"),
            Q(f"histogram_quantile(0.99, sum by (le) (rate({latency}[{RATE}])))", "latency p99"),
            Q(f"histogram_quantile(0.99, sum by (le) (rate({wait}[{RATE}])))", "evidence wait p99"),
            unit="s",
        )
    )
    d = d.with_panel(
        _series(
            "Requeue commands by reason",
            "Requeue commands published, per interval, by the decision's rule.",
            Q(
                f"sum by (reason) (increase(gpufailover_requeue_commands_total[{RATE}]))",
                "{{reason}}",
            ),
            stack=True,
        )
    )
    d = d.with_panel(
        _series(
            "Terminations awaiting a decision",
            "Terminations the job status service read with no decision yet, and those past the "
            "decision deadline (alert GpuFailoverDecisionOverdue; it works with the classifier "
            "down).",
            Q("max(gpufailover_jobstatus_awaited_decisions)", "awaiting"),
            Q("max(gpufailover_jobstatus_overdue_decisions)", "overdue"),
        )
    )
    d = d.with_panel(
        _series(
            "Hang and straggler alerts",
            "Alerts the classifier published on failover.alerts, per interval.",
            Q(f"sum by (kind) (increase(gpufailover_classifier_alerts_total[{RATE}]))", "{{kind}}"),
        )
    )

    d = d.with_row(gd.Row("Pipeline health"))
    d = d.with_panel(
        _series(
            "Consumer lag",
            "Records not processed yet, by component and input topic.",
            *_each("sum by (topic) (gpufailover_{c}_consumer_lag)", "{c} {{{{topic}}}}"),
        )
    )
    d = d.with_panel(
        _series(
            "Dead letters",
            "Records sent to dead-letter topics, per second, by component, topic and error.",
            *_each(
                "sum by (topic, error) (rate(gpufailover_{c}_dead_lettered_total[" + RATE + "]))",
                "{c} {{{{topic}}}} {{{{error}}}}",
            ),
            unit="ops",
        )
    )
    d = d.with_panel(
        _series(
            "Throughput in",
            "Input records processed per second, by component.",
            *_each("sum(rate(gpufailover_{c}_records_consumed_total[" + RATE + "]))", "{c}"),
            Q(f"sum(rate(gpufailover_agent_published_total[{RATE}]))", "agents (published)"),
            unit="ops",
        )
    )
    d = d.with_panel(
        _series(
            "Throughput out",
            "Records published per second, by component.",
            *_each("sum(rate(gpufailover_{c}_records_produced_total[" + RATE + "]))", "{c}"),
            unit="ops",
        )
    )
    d = d.with_panel(
        _series(
            "Time since last progress",
            "Seconds since each component last finished work (the classifier's node agent "
            "handles clock ticks every second, so it stays near zero while it runs).",
            Q(
                "time() - max by (agent) (gpufailover_classifier_last_progress_timestamp_seconds)",
                "classifier {{agent}}",
            ),
            *_each(
                "time() - max(gpufailover_{c}_last_progress_timestamp_seconds)",
                "{c}",
                CONSUMERS,
            ),
            unit="s",
        )
    )
    d = d.with_panel(
        _series(
            "Watermark delay",
            "Wall clock minus each node partition's event-time watermark.",
            Q(
                "time() - max by (partition) (gpufailover_classifier_watermark_timestamp_seconds)",
                "partition {{partition}}",
            ),
            unit="s",
        )
    )

    d = d.with_row(gd.Row("Safety"))
    d = d.with_panel(
        _stat(
            "Quarantine breaker",
            "TRIPPED: the breaker refuses new quarantines until an operator resets it "
            "(gpufailover quarantine reset-breaker).",
            Q("max(gpufailover_quarantine_breaker_tripped)"),
            red_at=1,
            mappings={"0": ("closed", "green"), "1": ("TRIPPED", "red")},
        )
    )
    d = d.with_panel(
        _stat(
            "Nodes in breaker window",
            "Nodes quarantined within the breaker's window (it trips above its limit).",
            Q("max(gpufailover_quarantine_window_nodes)"),
        )
    )
    d = d.with_panel(
        _series(
            "Breaker trips and refusals",
            "Breaker trips by cause, and quarantines it refused, per interval.",
            Q(
                f"sum by (cause) (increase(gpufailover_quarantine_breaker_trips_total[{RATE}]))",
                "trip: {{cause}}",
            ),
            Q(f"sum(increase(gpufailover_quarantine_refused_total[{RATE}]))", "refused"),
            Q(f"sum(increase(gpufailover_quarantine_breaker_resets_total[{RATE}]))", "resets"),
        )
    )
    d = d.with_panel(
        _series(
            "Actuator errors",
            "Cordon/uncordon calls that failed, per interval, by action (each is retried), and "
            "desired states not actuated yet.",
            Q(
                f"sum by (action) (increase(gpufailover_quarantine_actuator_errors_total[{RATE}]))",
                "{{action}}",
            ),
            Q("max(gpufailover_quarantine_actuations_owed)", "owed"),
        )
    )
    return d


def render() -> str:
    model: Any = build().build()
    for i, panel in enumerate(model.panels, start=1):
        panel.id_val = i  # stable ids: Grafana keys links and state by them
    return json.dumps(model, cls=JSONEncoder, indent=2, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="fail when the JSON is stale")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = OUT.read_text() if OUT.exists() else ""
        if current != text:
            print(f"{OUT} is stale: run python -m deploy.dashboard", file=sys.stderr)
            return 1
        return 0
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(text)
    print(OUT)
    return 0


if __name__ == "__main__":
    sys.exit(main())
