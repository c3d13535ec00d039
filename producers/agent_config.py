"""The node agent's settings: flags first, then `GPUFAILOVER_AGENT_*` env vars, then defaults."""

from __future__ import annotations

import argparse
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpufailover.security import PLAINTEXT, KafkaSecurity, add_security_arguments
from gpufailover.settings import (
    BOOTSTRAP_HELP,
    DEFAULT_METRICS_HOST,
    env_bool,
    env_float,
    env_int,
    env_str,
    metrics_host,
    state_dir,
)
from producers.health import HealthThresholds
from producers.heartbeat import DEFAULT_INTERVAL_S as DEFAULT_HEARTBEAT_S
from producers.nvml_watchdog import DEFAULT_HANG_TIMEOUT_S
from producers.spool import SYNC_MODES

SOURCES = ("nvml", "kmsg", "journal", "file:PATH")
NO_SPOOL = "none"
DEFAULT_SPOOL_MAX_BYTES = 64 << 20


@dataclass(frozen=True)
class AgentSettings:
    node: str
    source: str
    bootstrap: str | None = None
    topic_prefix: str | None = None
    from_start: bool = False
    sample_interval_s: float = 10.0
    dedup_window_s: float = 60.0
    buffer_size: int = 10_000
    metrics_port: int = 0
    drain_timeout_s: float = 10.0
    spool_dir: str = ""  # "" = the default under the state dir; "none" = in memory
    spool_max_bytes: int = DEFAULT_SPOOL_MAX_BYTES
    spool_sync: str = "normal"
    kmsg_path: str = "/dev/kmsg"
    thresholds: HealthThresholds = field(default_factory=HealthThresholds)
    metrics_host: str = DEFAULT_METRICS_HOST
    security: KafkaSecurity = PLAINTEXT
    heartbeat_interval_s: float = DEFAULT_HEARTBEAT_S
    nvml_hang_timeout_s: float = DEFAULT_HANG_TIMEOUT_S

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


def add_arguments(parser: argparse.ArgumentParser) -> None:
    d = HealthThresholds()
    env = "env GPUFAILOVER_AGENT_"
    options: list[tuple[str, Callable[[str], Any], str]] = [
        ("--source", str, f"nvml | kmsg | journal | file:PATH ({env}SOURCE, default nvml)"),
        ("--node", str, f"node name, the record key ({env}NODE, default: hostname)"),
        ("--bootstrap", str, BOOTSTRAP_HELP),
        ("--topic-prefix", str, "topic name prefix (env GPUFAILOVER_TOPIC_PREFIX)"),
        ("--interval", float, f"NVML health sampling period, s ({env}SAMPLE_INTERVAL_S, 10)"),
        ("--dedup-window", float, f"fold repeats of an XID on a GPU within this many s; 0 = off "
                                  f"({env}DEDUP_WINDOW_S, 60)"),
        ("--buffer-size", int, f"events kept in the spool while the broker is unreachable; the "
                               f"oldest are evicted beyond it ({env}BUFFER_SIZE, 10000)"),
        ("--spool-dir", str, f"directory of the on-disk spool of events not yet acknowledged "
                             f"(and the /dev/kmsg cursor); 'none' keeps them in memory, lost on "
                             f"restart ({env}SPOOL_DIR, default "
                             f"$GPUFAILOVER_STATE_DIR/agent-spool)"),
        ("--spool-max-bytes", int, f"byte cap of the spool, oldest evicted beyond it "
                                   f"({env}SPOOL_MAX_BYTES, {DEFAULT_SPOOL_MAX_BYTES})"),
        ("--spool-sync", str, f"normal: spooled events survive the agent's crash; full: also "
                              f"the host's power loss, one fsync per write ({env}SPOOL_SYNC, "
                              f"normal)"),
        ("--kmsg-path", str, f"the kernel log device of --source kmsg ({env}KMSG_PATH, "
                             f"/dev/kmsg)"),
        ("--heartbeat-interval", float, f"s between the agent's heartbeats on gpu.health; keep "
                                        f"it equal to the policy's silent_node."
                                        f"heartbeat_interval_s ({env}HEARTBEAT_INTERVAL_S, "
                                        f"{DEFAULT_HEARTBEAT_S:g})"),
        ("--nvml-hang-timeout", float, f"s an NVML call may run before the node reports "
                                       f"nvml_hung ({env}NVML_HANG_TIMEOUT_S, "
                                       f"{DEFAULT_HANG_TIMEOUT_S:g})"),
        ("--metrics-port", int, f"Prometheus /metrics port, 0 = off ({env}METRICS_PORT, 0)"),
        ("--drain-timeout", float, f"s to deliver spooled events on shutdown while connected; "
                                   f"with the broker unreachable the agent stops at once "
                                   f"(the spool keeps them) ({env}DRAIN_TIMEOUT_S, 10)"),
        ("--pcie-replays-per-min", float, f"PCIe replays/min above which 'pcie' fires "
                                          f"({env}PCIE_REPLAYS_PER_MIN, "
                                          f"{d.pcie_replays_per_min:g})"),
        ("--nvlink-errors-per-min", float, f"NVLink errors/min above which 'nvlink' fires "
                                           f"({env}NVLINK_ERRORS_PER_MIN, "
                                           f"{d.nvlink_errors_per_min:g})"),
        ("--ecc-correctable-per-min", float, f"corrected-ECC rate above which "
                                             f"'ecc_correctable_rate' fires ({env}ECC_CORRECTABLE_"
                                             f"PER_MIN, {d.ecc_correctable_per_min:g})"),
        ("--throttle-sustain", float, f"s of HW/thermal clock throttling before 'throttle' "
                                      f"({env}THROTTLE_SUSTAIN_S, {d.throttle_sustain_s:g})"),
        ("--clear-after", float, f"s a condition must stay quiet before it clears "
                                 f"({env}CLEAR_AFTER_S, {d.clear_after_s:g})"),
    ]  # fmt: skip
    for flag, kind, text in options:
        parser.add_argument(flag, type=kind, default=None, help=text)
    parser.add_argument(
        "--from-start",
        action="store_true",
        default=None,
        help="kernel-log sources: read what is there already instead of starting at the end "
        f"({env}FROM_START)",
    )
    parser.add_argument(
        "--metrics-host",
        default=None,
        help="address the metrics server binds (env GPUFAILOVER_METRICS_HOST, default "
        f"{DEFAULT_METRICS_HOST}; 0.0.0.0 lets a Prometheus elsewhere scrape it)",
    )
    add_security_arguments(parser)


def _float(flag: float | None, env: str, default: float) -> float:
    return flag if flag is not None else env_float(env, default)


def _int(flag: int | None, env: str, default: int) -> int:
    return flag if flag is not None else env_int(env, default)


def settings_from_args(args: argparse.Namespace) -> AgentSettings:
    """ValueError (or SystemExit from an env reader) on a bad value."""
    d = HealthThresholds()
    e = "GPUFAILOVER_AGENT_"
    thresholds = HealthThresholds(
        pcie_replays_per_min=_float(
            args.pcie_replays_per_min, e + "PCIE_REPLAYS_PER_MIN", d.pcie_replays_per_min
        ),
        nvlink_errors_per_min=_float(
            args.nvlink_errors_per_min, e + "NVLINK_ERRORS_PER_MIN", d.nvlink_errors_per_min
        ),
        ecc_correctable_per_min=_float(
            args.ecc_correctable_per_min, e + "ECC_CORRECTABLE_PER_MIN", d.ecc_correctable_per_min
        ),
        throttle_sustain_s=_float(
            args.throttle_sustain, e + "THROTTLE_SUSTAIN_S", d.throttle_sustain_s
        ),
        clear_after_s=_float(args.clear_after, e + "CLEAR_AFTER_S", d.clear_after_s),
    )
    return AgentSettings(
        node=args.node or env_str(e + "NODE", "") or socket.gethostname(),
        source=args.source or env_str(e + "SOURCE", "nvml"),
        bootstrap=args.bootstrap,
        topic_prefix=args.topic_prefix,
        from_start=bool(args.from_start) or env_bool(e + "FROM_START", False),
        sample_interval_s=_float(args.interval, e + "SAMPLE_INTERVAL_S", 10.0),
        dedup_window_s=_float(args.dedup_window, e + "DEDUP_WINDOW_S", 60.0),
        buffer_size=_int(args.buffer_size, e + "BUFFER_SIZE", 10_000),
        metrics_port=_int(args.metrics_port, e + "METRICS_PORT", 0),
        drain_timeout_s=_float(args.drain_timeout, e + "DRAIN_TIMEOUT_S", 10.0),
        spool_dir=args.spool_dir or env_str(e + "SPOOL_DIR", ""),
        spool_max_bytes=_int(args.spool_max_bytes, e + "SPOOL_MAX_BYTES", DEFAULT_SPOOL_MAX_BYTES),
        spool_sync=args.spool_sync or env_str(e + "SPOOL_SYNC", "normal"),
        kmsg_path=args.kmsg_path or env_str(e + "KMSG_PATH", "/dev/kmsg"),
        thresholds=thresholds,
        metrics_host=args.metrics_host or metrics_host(),
        security=KafkaSecurity.build(args),
        heartbeat_interval_s=_float(
            args.heartbeat_interval, e + "HEARTBEAT_INTERVAL_S", DEFAULT_HEARTBEAT_S
        ),
        nvml_hang_timeout_s=_float(
            args.nvml_hang_timeout, e + "NVML_HANG_TIMEOUT_S", DEFAULT_HANG_TIMEOUT_S
        ),
    )
