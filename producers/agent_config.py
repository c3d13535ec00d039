"""The node agent's settings: flags first, then `GPUFAILOVER_AGENT_*` env vars, then defaults."""

from __future__ import annotations

import argparse
import socket
from dataclasses import dataclass, field
from pathlib import Path

from gpufailover import settings as declare
from gpufailover.security import PLAINTEXT, KafkaSecurity, add_security_arguments
from gpufailover.settings import (
    DEFAULT_METRICS_HOST,
    bootstrap_setting,
    setting,
    state_dir,
    topic_prefix_setting,
)
from producers.health import HealthThresholds
from producers.heartbeat import DEFAULT_INTERVAL_S as DEFAULT_HEARTBEAT_S
from producers.nvml_watchdog import DEFAULT_HANG_TIMEOUT_S
from producers.spool import SYNC_MODES

SOURCES = ("nvml", "kmsg", "journal", "file:PATH")
NO_SPOOL = "none"
DEFAULT_SPOOL_MAX_BYTES = 64 << 20


_E = "GPUFAILOVER_AGENT_"
_D = HealthThresholds()


@dataclass(frozen=True)
class AgentSettings:
    node: str = setting(
        "",
        env=f"{_E}NODE",
        flag="--node",
        help="node name, the record key",
        shown_default="the host name",
    )
    source: str = setting(
        "nvml", env=f"{_E}SOURCE", flag="--source", help="nvml | kmsg | journal | file:PATH"
    )
    bootstrap: str | None = bootstrap_setting(None)
    topic_prefix: str | None = topic_prefix_setting(None)
    from_start: bool = setting(
        False,
        env=f"{_E}FROM_START",
        flag="--from-start",
        help="kernel-log sources: read what is there already instead of starting at the end",
    )
    sample_interval_s: float = setting(
        10.0, env=f"{_E}SAMPLE_INTERVAL_S", flag="--interval", help="NVML health sampling period, s"
    )
    dedup_window_s: float = setting(
        60.0,
        env=f"{_E}DEDUP_WINDOW_S",
        flag="--dedup-window",
        help="fold repeats of an XID on a GPU within this many s; 0 = off",
    )
    buffer_size: int = setting(
        10_000,
        env=f"{_E}BUFFER_SIZE",
        flag="--buffer-size",
        help="events kept in the spool while the broker is unreachable; the oldest are evicted "
        "beyond it",
    )
    metrics_port: int = setting(
        0, env=f"{_E}METRICS_PORT", flag="--metrics-port", help="Prometheus /metrics port, 0 = off"
    )
    drain_timeout_s: float = setting(
        10.0,
        env=f"{_E}DRAIN_TIMEOUT_S",
        flag="--drain-timeout",
        help="s to deliver spooled events on shutdown while connected; with the broker "
        "unreachable the agent stops at once (the spool keeps them)",
    )
    spool_dir: str = setting(  # "" = the default under the state dir; "none" = in memory
        "",
        env=f"{_E}SPOOL_DIR",
        flag="--spool-dir",
        help="directory of the on-disk spool of events not yet acknowledged (and the /dev/kmsg "
        "cursor); 'none' keeps them in memory, lost on restart",
        shown_default="$GPUFAILOVER_STATE_DIR/agent-spool",
    )
    spool_max_bytes: int = setting(
        DEFAULT_SPOOL_MAX_BYTES,
        env=f"{_E}SPOOL_MAX_BYTES",
        flag="--spool-max-bytes",
        help="byte cap of the spool, oldest evicted beyond it",
    )
    spool_sync: str = setting(
        "normal",
        env=f"{_E}SPOOL_SYNC",
        flag="--spool-sync",
        help="normal: spooled events survive the agent's crash; full: also the host's power "
        "loss, one fsync per write",
    )
    kmsg_path: str = setting(
        "/dev/kmsg",
        env=f"{_E}KMSG_PATH",
        flag="--kmsg-path",
        help="the kernel log device of --source kmsg",
    )
    thresholds: HealthThresholds = field(default_factory=HealthThresholds)
    metrics_host: str = setting(
        DEFAULT_METRICS_HOST,
        env="GPUFAILOVER_METRICS_HOST",
        flag="--metrics-host",
        help="address the metrics server binds (0.0.0.0 lets a Prometheus elsewhere scrape it)",
    )
    security: KafkaSecurity = PLAINTEXT
    heartbeat_interval_s: float = setting(
        DEFAULT_HEARTBEAT_S,
        env=f"{_E}HEARTBEAT_INTERVAL_S",
        flag="--heartbeat-interval",
        help="s between the agent's heartbeats on gpu.health; keep it equal to the policy's "
        "silent_node.heartbeat_interval_s",
    )
    nvml_hang_timeout_s: float = setting(
        DEFAULT_HANG_TIMEOUT_S,
        env=f"{_E}NVML_HANG_TIMEOUT_S",
        flag="--nvml-hang-timeout",
        help="s an NVML call may run before the node reports nvml_hung",
    )

    def __post_init__(self) -> None:
        if not self.node:
            raise ValueError("--node: must not be empty")
        if not (self.source in ("nvml", "kmsg", "journal") or self.file_path()):
            raise ValueError(f"--source {self.source!r}: expected one of {', '.join(SOURCES)}")
        if self.sample_interval_s <= 0:
            raise ValueError(f"--interval must be > 0, got {self.sample_interval_s}")
        if self.dedup_window_s < 0:
            raise ValueError(f"--dedup-window must be >= 0, got {self.dedup_window_s}")
        if self.buffer_size < 1:
            raise ValueError(f"--buffer-size must be >= 1, got {self.buffer_size}")
        if not 0 <= self.metrics_port <= 65535:
            raise ValueError(f"--metrics-port must be 0..65535, got {self.metrics_port}")
        if self.spool_max_bytes < 1 << 20:
            raise ValueError(f"--spool-max-bytes must be >= 1 MiB, got {self.spool_max_bytes}")
        if self.spool_sync not in SYNC_MODES:
            raise ValueError(
                f"--spool-sync {self.spool_sync!r}: expected one of {', '.join(SYNC_MODES)}"
            )
        if not self.kmsg_path:
            raise ValueError("--kmsg-path: must not be empty")
        if self.heartbeat_interval_s <= 0:
            raise ValueError(f"--heartbeat-interval must be > 0, got {self.heartbeat_interval_s}")
        if self.nvml_hang_timeout_s <= 0:
            raise ValueError(f"--nvml-hang-timeout must be > 0, got {self.nvml_hang_timeout_s}")

    def spool_path(self) -> Path | None:
        """The spool's file, or None to keep it in memory. One per node and kind of source, so
        an NVML agent and a kernel-log agent can run side by side on one node."""
        if self.spool_dir == NO_SPOOL:
            return None
        base = Path(self.spool_dir) if self.spool_dir else state_dir() / "agent-spool"
        safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in self.node)
        kind = "file" if self.file_path() else self.source
        return base / f"{safe}.{kind}.sqlite"

    def file_path(self) -> str | None:
        if self.source.startswith("file:") and len(self.source) > len("file:"):
            return self.source[len("file:") :]
        return None


@dataclass(frozen=True)
class ThresholdOptions:
    """The agent's flags and env vars for `HealthThresholds` (which stays a plain value)."""

    pcie_replays_per_min: float = setting(
        _D.pcie_replays_per_min,
        env=f"{_E}PCIE_REPLAYS_PER_MIN",
        flag="--pcie-replays-per-min",
        help="PCIe replays/min above which 'pcie' fires",
    )
    nvlink_errors_per_min: float = setting(
        _D.nvlink_errors_per_min,
        env=f"{_E}NVLINK_ERRORS_PER_MIN",
        flag="--nvlink-errors-per-min",
        help="NVLink errors/min above which 'nvlink' fires",
    )
    ecc_correctable_per_min: float = setting(
        _D.ecc_correctable_per_min,
        env=f"{_E}ECC_CORRECTABLE_PER_MIN",
        flag="--ecc-correctable-per-min",
        help="corrected-ECC rate above which 'ecc_correctable_rate' fires",
    )
    throttle_sustain_s: float = setting(
        _D.throttle_sustain_s,
        env=f"{_E}THROTTLE_SUSTAIN_S",
        flag="--throttle-sustain",
        help="s of HW/thermal clock throttling before 'throttle'",
    )
    clear_after_s: float = setting(
        _D.clear_after_s,
        env=f"{_E}CLEAR_AFTER_S",
        flag="--clear-after",
        help="s a condition must stay quiet before it clears",
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    declare.add_arguments(parser, AgentSettings)
    declare.add_arguments(parser, ThresholdOptions)
    add_security_arguments(parser)


def settings_from_args(args: argparse.Namespace) -> AgentSettings:
    """ValueError (or SystemExit naming a bad env var) on a bad value."""
    given = declare.values(AgentSettings, args)
    return AgentSettings(
        **{
            **given,
            "node": given["node"] or socket.gethostname(),
            "metrics_host": given["metrics_host"] or DEFAULT_METRICS_HOST,
        },
        thresholds=HealthThresholds(**declare.values(ThresholdOptions, args)),
        security=KafkaSecurity.build(args),
    )
