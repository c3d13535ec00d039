"""The signal filter in a child process of the classifier worker: its own core.

The filter reads every XID and health sample (~99% of the input) and the faust agents the rest;
in one process they share one core through one event loop, so a flood's reading delays the
agents' decisions and the drain is bound by their sum (BENCHMARKS.md, issue 18, seventh pass).
The filter needs nothing from the agents: it is its own consumer group, at least once, and its
partitions follow from that group alone (`streams.signal_loop`). So the worker starts it as a
child (`python -m streams.filter_process`) and keeps only what the faust side asks of it.

- Settings go down once, pickled on the child's stdin (same user, a pipe: nothing on disk).
- Reports come up as JSON lines on its stdout every `REPORT_EVERY_S`: metric increments (the
  worker's /metrics shows them as before), lag per input partition and whether it is draining
  (`NodeGlue`'s pacing). Logs go to the worker's stderr.
- Lifetimes are tied: the child dies with the worker (`PR_SET_PDEATHSIG`, SIGKILL: as when the
  machine dies); a child that exits makes the worker crash (`run` raises), as the in-worker
  filter did; a stopping worker asks the child to stop (SIGTERM: it commits what it forwarded).
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import os
import pickle
import signal
import sys
from collections import Counter
from typing import Any

import orjson

from streams.config import ClassifierSettings
from streams.metrics import ClassifierMetrics
from streams.signal_loop import SignalLoop

log = logging.getLogger("gpufailover.classifier")
REPORT_EVERY_S = 0.2
# After SIGTERM the filter commits and closes, each step bounded by CLOSE_STEP_TIMEOUT_S (8 s);
# Kubernetes kills the pod 30 s after asking it to stop.
CHILD_STOP_TIMEOUT_S = 20.0
REPORT_LINE_MAX = 4 * 1024 * 1024
_PR_SET_PDEATHSIG = 1


def signal_group(settings: ClassifierSettings) -> str:
    """The filter's consumer group."""
    return f"{settings.topic_prefix}{settings.app_id}-signals"


class MetricsRelay:
    """The child's stand-in for `ClassifierMetrics`: what the loop counts, kept until the next
    report (`take`), then applied to the worker's metrics by `apply`."""

    def __init__(self) -> None:
        self.counts: Counter[tuple[str, str, str]] = Counter()

    def record(self, topic: str, agent: str, n: int = 1) -> None:
        self.counts["record", topic, agent] += n

    def sent(self, topic: str, n: int = 1) -> None:
        self.counts["sent", topic, ""] += n

    def dead_letter(self, topic: str, kind: str, n: int = 1) -> None:
        self.counts["dead_letter", topic, kind] += n

    def xid(self, code: int, n: int = 1) -> None:
        self.counts["xid", str(code), ""] += n

    def health(self, condition: str, n: int = 1) -> None:
        self.counts["health", condition, ""] += n

    def take(self) -> list[tuple[str, str, str, int]]:
        out = [(kind, a, b, n) for (kind, a, b), n in self.counts.items()]
        self.counts.clear()
        return out


def apply(metrics: ClassifierMetrics, counts: list[list[Any]]) -> None:
    """A child's report of `MetricsRelay.take` applied to the worker's metrics."""
    for kind, a, b, n in counts:
        if kind == "record":
            metrics.record(a, b, n)
        elif kind == "sent":
            metrics.sent(a, n)
        elif kind == "dead_letter":
            metrics.dead_letter(a, b, n)
        elif kind == "xid":
            metrics.xid(int(a), n)
        elif kind == "health":
            metrics.health(a, n)


class FilterProcess:
    """The worker's side: starts the child, reads its reports, answers what the faust side
    asks (`lag`, `draining`) from the last one, like `SignalLoop` in the worker does."""

    def __init__(self, settings: ClassifierSettings, metrics: ClassifierMetrics) -> None:
        self.settings = settings
        self.metrics = metrics
        self._lag: list[tuple[str, int, int]] = []
        self._draining = False

    def lag(self) -> list[tuple[str, int, int]]:
        return self._lag

    def draining(self) -> bool:
        return self._draining

    async def run(self) -> None:
        """Run the child until it exits (raises: the worker must stop) or this is cancelled
        (the child is asked to stop, then killed if it does not)."""
        level = log.getEffectiveLevel()  # faust sets up the logging of the worker
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "streams.filter_process",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            limit=REPORT_LINE_MAX,
        )
        log.info("signal filter: started in process %d", proc.pid)
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write(pickle.dumps((self.settings, level, os.getpid())))
            await proc.stdin.drain()
            proc.stdin.close()
            while line := await proc.stdout.readline():
                self._on_report(orjson.loads(line))
            code = await proc.wait()
            # 0: it was asked to stop by a signal of its own (e.g. the whole service group
            # stopped); either way this worker has no filter now and must stop too.
            raise RuntimeError(f"signal filter process {proc.pid} exited with code {code}")
        finally:
            if proc.returncode is None:
                await _stop(proc)

    def _on_report(self, report: dict[str, Any]) -> None:
        apply(self.metrics, report["counts"])
        self._lag = [(t, p, n) for t, p, n in report["lag"]]
        self._draining = report["draining"]


async def _stop(proc: asyncio.subprocess.Process) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        await asyncio.wait_for(proc.wait(), CHILD_STOP_TIMEOUT_S)
    except TimeoutError:
        log.warning("signal filter process %d ignored SIGTERM: killed", proc.pid)
        proc.kill()
        await proc.wait()


# -- the child ------------------------------------------------------------------------------
async def _child(settings: ClassifierSettings) -> None:
    from schemas.event_time import EventTimeBounds
    from schemas.topics import TopicNames
    from streams.policy import load_policy

    relay = MetricsRelay()
    loop = SignalLoop(
        settings.bootstrap,
        signal_group(settings),
        TopicNames(settings.topic_prefix),
        load_policy(settings.policy or None),
        int(settings.idle_after_s * 1000),
        relay,
        EventTimeBounds.from_env(live=True),
        security=settings.security,
    )
    running = asyncio.ensure_future(loop.run())
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, running.cancel)
    out = sys.stdout.buffer
    try:
        while not running.done():
            await asyncio.wait([running], timeout=REPORT_EVERY_S)
            report = {"counts": relay.take(), "lag": loop.lag(), "draining": loop.draining()}
            out.write(orjson.dumps(report) + b"\n")
            out.flush()
    except BrokenPipeError:
        running.cancel()  # the worker is gone
    try:
        await running
    except asyncio.CancelledError:
        log.info("signal filter process %d: stopped", os.getpid())


def main() -> None:
    # Die with the worker, even when it is SIGKILLed; it may have died before this line.
    ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    # The worker's own pipe: nothing else can write it.
    settings, level, worker_pid = pickle.loads(sys.stdin.buffer.read())  # noqa: S301
    # Ctrl-C reaches the whole terminal's group: the worker stops this one in its order.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if os.getppid() != worker_pid:
        sys.exit("signal filter process: the worker is gone")
    logging.basicConfig(
        level=level,
        format="[%(asctime)s] [%(process)d] [%(levelname)s] %(message)s",  # as faust's
        stream=sys.stderr,
    )
    asyncio.run(_child(settings))


if __name__ == "__main__":
    main()
