"""The signal filter's child process lives and dies with its classifier worker
(`streams.filter_process`): a worker without its filter must not look alive, and a filter
without its worker must not keep its partitions."""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

from schemas.topics import TopicNames
from tests.integration.kafka_io import Service, classifier

STARTED = re.compile(r"signal filter: started in process (\d+)")


async def _started(tmp_path: Path, bootstrap: str, names: TopicNames, partitions: int) -> Service:
    worker = classifier(bootstrap, names.prefix, partitions, tmp_path).start()
    await worker.wait_for_log("signal filter: started in process", timeout_s=90)
    return worker


def _filter_pid(worker: Service) -> int:
    found = STARTED.search(worker.log_path.read_text(errors="replace"))
    assert found is not None
    return int(found.group(1))


def _gone(pid: int, timeout_s: float) -> bool:
    """Has `pid` exited (or become a zombie nobody waits for) within `timeout_s`?"""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return True
        if state == "Z":
            return True
        time.sleep(0.05)  # polling /proc with a deadline, not a fixed wait
    return False


async def test_a_worker_whose_filter_process_dies_stops_with_an_error(
    kafka_bootstrap: str, topic_names: TopicNames, topic_partitions: int, tmp_path: Path
) -> None:
    worker = await _started(tmp_path, kafka_bootstrap, topic_names, topic_partitions)
    try:
        os.kill(_filter_pid(worker), signal.SIGKILL)
        assert worker.proc is not None
        code = worker.proc.wait(60)
        assert code != 0, worker.log_tail()
        assert "signal filter failed: stopping the worker" in worker.log_tail(200)
    finally:
        if worker.proc is not None and worker.proc.poll() is None:
            worker.proc.kill()


async def test_the_filter_process_dies_with_a_killed_worker(
    kafka_bootstrap: str, topic_names: TopicNames, topic_partitions: int, tmp_path: Path
) -> None:
    worker = await _started(tmp_path, kafka_bootstrap, topic_names, topic_partitions)
    child = _filter_pid(worker)
    assert worker.proc is not None
    worker.proc.kill()
    worker.proc.wait()
    assert _gone(child, timeout_s=10), f"filter process {child} outlived its worker"


async def test_a_stopped_worker_stops_its_filter_process_first(
    kafka_bootstrap: str, topic_names: TopicNames, topic_partitions: int, tmp_path: Path
) -> None:
    worker = await _started(tmp_path, kafka_bootstrap, topic_names, topic_partitions)
    await worker.wait_for_log("signal filter assigned", timeout_s=90)  # the child's log
    child = _filter_pid(worker)
    worker.stop()
    assert _gone(child, timeout_s=1), f"filter process {child} outlived its stopped worker"
    assert f"signal filter process {child}: stopped" in worker.log_tail(200)
