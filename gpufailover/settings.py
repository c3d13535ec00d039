"""Settings shared by every process: flags first, then `GPUFAILOVER_*` env vars, then defaults.

Each service has its own frozen settings dataclass built with these readers; every option names
its env var in its `--help` text.
"""

from __future__ import annotations

import os
from pathlib import Path

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
# Every --bootstrap flag says this: the order `default_bootstrap` really follows.
BOOTSTRAP_HELP = (
    "Kafka bootstrap (env GPUFAILOVER_BOOTSTRAP or KAFKA_BOOTSTRAP, else the broker from "
    f"`gpufailover broker start` in GPUFAILOVER_STATE_DIR, else {DEFAULT_BOOTSTRAP})"
)


def env_str(name: str, default: str) -> str:
    return os.environ.get(name, default)


def env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise SystemExit(f"{name}={raw!r}: expected an integer") from None


def env_float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return float(raw)
    except ValueError:
        raise SystemExit(f"{name}={raw!r}: expected a number") from None


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    return raw.strip().lower() in ("1", "true", "yes", "on")


def default_bootstrap() -> str:
    """GPUFAILOVER_BOOTSTRAP, else KAFKA_BOOTSTRAP, else the broker `gpufailover broker start`
    left running, else 127.0.0.1:9092."""
    for name in ("GPUFAILOVER_BOOTSTRAP", "KAFKA_BOOTSTRAP"):
        value = os.environ.get(name)
        if value:
            return value
    try:
        from deploy.broker import running_bootstrap

        found = running_bootstrap()
    except (ImportError, OSError, ValueError):
        found = None
    return found or DEFAULT_BOOTSTRAP


def state_dir() -> Path:
    return Path(env_str("GPUFAILOVER_STATE_DIR", str(Path.home() / ".cache" / "gpufailover")))


DEFAULT_METRICS_HOST = "127.0.0.1"


def metrics_host() -> str:
    """The address metrics and web servers bind: this host only unless opened on purpose
    (GPUFAILOVER_METRICS_HOST=0.0.0.0, as a Prometheus scraping pods needs)."""
    return env_str("GPUFAILOVER_METRICS_HOST", "") or DEFAULT_METRICS_HOST
