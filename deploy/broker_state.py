"""The state file of `gpufailover broker start`: which broker outlives the command."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from deploy.broker import RunningBroker, is_running
from gpufailover.settings import state_dir

log = logging.getLogger(__name__)


def state_path() -> Path:
    """`$GPUFAILOVER_STATE_DIR/broker.json` (default ~/.cache/gpufailover/broker.json)."""
    return state_dir() / "broker.json"


def runs_dir() -> Path:
    """Where `gpufailover broker start` puts each run's config, data and logs."""
    return state_dir() / "runs"


def external_bootstrap() -> str | None:
    """KAFKA_BOOTSTRAP, when set: an externally managed broker that everything uses instead."""
    value = os.environ.get("KAFKA_BOOTSTRAP", "").strip()
    return value or None


def save_state(broker: RunningBroker) -> Path:
    path = state_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(broker.to_json(), indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path


def load_state() -> RunningBroker | None:
    """The broker recorded by `gpufailover broker start`, alive or not; None if none recorded."""
    path = state_path()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return RunningBroker.from_json(data)
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError) as exc:
        log.warning("ignoring unreadable broker state file %s: %s", path, exc)
        return None


def clear_state() -> None:
    state_path().unlink(missing_ok=True)


def live_state_broker() -> RunningBroker | None:
    """The recorded broker if its process is still running."""
    broker = load_state()
    if broker is not None and is_running(broker):
        return broker
    return None
