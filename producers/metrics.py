"""The node agent's Prometheus metrics, on an injectable registry (no node names as labels:
one agent runs per node, the scrape target says which)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

from gpufailover.settings import DEFAULT_METRICS_HOST


class AgentMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.xids = Counter(
            "gpufailover_agent_xids_total",
            "XID occurrences seen (before de-duplication), by code (0..255, else other)",
            ["code"],
            registry=r,
        )
        self.health_conditions = Counter(
            "gpufailover_agent_health_conditions_total",
            "GPU health condition changes published, by condition",
            ["condition"],
            registry=r,
        )
        self.buffer_depth = Gauge(
            "gpufailover_agent_buffer_depth",
            "events in the spool waiting for the broker's acknowledgement",
            registry=r,
        )
        self.spool_bytes = Gauge(
            "gpufailover_agent_spool_bytes",
            "bytes (keys, values, topic names) of the events in the spool",
            registry=r,
        )
        self.dropped = Counter(
            "gpufailover_agent_dropped_events_total",
            "events dropped: evicted (oldest first) from a full spool, or refused as too big",
            registry=r,
        )
        self.unparsed = Counter(
            "gpufailover_agent_unparsed_lines_total",
            "kernel-log lines that mention an Xid but could not be parsed",
            registry=r,
        )
        self.published = Counter(
            "gpufailover_agent_published_total",
            "events acknowledged by the broker, by logical topic",
            ["topic"],
            registry=r,
        )
        self.heartbeat = Gauge(
            "gpufailover_agent_heartbeat_timestamp_seconds",
            "Unix time the agent's event loop last turned (about every second while it runs)",
            registry=r,
        )
        self.suppressed = Counter(
            "gpufailover_agent_suppressed_repeats_total",
            "repeated XIDs folded into a later event's count by the flood de-duplication",
            registry=r,
        )


def serve_metrics(metrics: AgentMetrics, port: int, addr: str = DEFAULT_METRICS_HOST) -> None:
    """Serve /metrics on `port` in a daemon thread; 0 means off."""
    if port:
        start_http_server(port, addr=addr, registry=metrics.registry)
