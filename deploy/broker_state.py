"""The state file of `gpufailover broker`: the one local broker, running or stopped.

It records the broker's run directory (its config, data and logs) and, while it runs, its pid.
`broker stop` keeps the record so that `broker start` brings back the same broker; only
`broker start --fresh` and `broker stop --delete-data` replace or drop it.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path

from deploy.broker import Broker, BrokerError
from gpufailover.local_broker import STATE_FILE
from gpufailover.settings import state_dir

log = logging.getLogger(__name__)


class BrokerStateError(RuntimeError):
    """A broker is recorded but cannot be used: the state file or its run directory is damaged."""


def state_path() -> Path:
    """`$GPUFAILOVER_STATE_DIR/broker.json` (default ~/.cache/gpufailover/broker.json)."""
    return state_dir() / STATE_FILE


def runs_dir() -> Path:
    """Where `gpufailover broker start` puts each cluster's config, data and logs."""
    return state_dir() / "runs"


def new_run_dir() -> Path:
    """A run directory name for a new cluster (not created here)."""
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    return runs_dir() / f"broker-{stamp}-{os.getpid()}"


def external_bootstrap() -> str | None:
    """KAFKA_BOOTSTRAP, when set: an externally managed broker that everything uses instead."""
    value = os.environ.get("KAFKA_BOOTSTRAP", "").strip()
    return value or None


def save_state(broker: Broker) -> Path:
    path = state_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(broker.to_json(), indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path


def load_state() -> Broker | None:
    """The recorded broker, running or stopped; None if none is recorded.

    Raises BrokerStateError when the record is unreadable or its run directory no longer
    holds the recorded cluster (the caller must not silently start another one instead).
    """
    path = state_path()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        run_dir = Path(data["run_dir"])
        pid = None if data.get("pid") is None else int(data["pid"])
        recorded_cluster = str(data["cluster_id"])
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError) as exc:
        raise BrokerStateError(f"unreadable broker state file {path}: {exc!r}") from exc
    try:
        broker = Broker.open(run_dir, pid=pid)
    except BrokerError as exc:
        raise BrokerStateError(f"the broker recorded in {path} is unusable: {exc}") from exc
    if broker.cluster_id != recorded_cluster:
        raise BrokerStateError(
            f"{broker.data_dir} holds cluster {broker.cluster_id}, but {path} records "
            f"cluster {recorded_cluster}"
        )
    return broker


def clear_state() -> None:
    state_path().unlink(missing_ok=True)


def live_state_broker() -> Broker | None:
    """The recorded broker if its process is running (a damaged record counts as none)."""
    try:
        broker = load_state()
    except BrokerStateError as exc:
        log.warning("%s", exc)
        return None
    if broker is not None and broker.is_running():
        return broker
    return None


def running_bootstrap() -> str | None:
    """Bootstrap of the broker `gpufailover broker start` left running, if any."""
    broker = live_state_broker()
    return broker.bootstrap if broker is not None else None
