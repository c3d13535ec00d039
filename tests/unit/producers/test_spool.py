"""The agent's on-disk spool: order, caps and eviction, atomic cursor moves, crash points."""

from __future__ import annotations

import logging
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from producers.metrics import AgentMetrics
from producers.spool import Cursor, Outgoing, Spool, SpoolBusy, SpoolError

REPO = Path(__file__).resolve().parents[3]


def item(i: int, pad: int = 0) -> Outgoing:
    return Outgoing("gpu.xid", "p.gpu.xid", b"node-a", f"{i}".encode() + b" " * pad)


def values(spool: Spool) -> list[int]:
    return [int(s.item.value) for s in spool.head(1_000_000)]


def sample(metrics: AgentMetrics, name: str) -> float:
    value = metrics.registry.get_sample_value(name)
    return 0.0 if value is None else value


def test_records_come_back_in_order_after_a_reopen(tmp_path: Path) -> None:
    path = tmp_path / "dir" / "spool.sqlite"
    spool = Spool(path, AgentMetrics())
    spool.append([item(i) for i in range(3)])
    spool.remove([s.id for s in spool.head(3)])  # all sent: the next ids must still be larger
    spool.append([item(3), item(4)])
    spool.close()
    metrics = AgentMetrics()
    again = Spool(path, metrics)
    assert values(again) == [3, 4]
    assert (len(again), again.bytes) == (2, 2 * item(3).size)
    assert sample(metrics, "gpufailover_agent_buffer_depth") == 2
    assert sample(metrics, "gpufailover_agent_spool_bytes") == 2 * item(3).size
    again.append([item(5)])
    assert values(again) == [3, 4, 5]
    again.close()
    smaller = Spool(path, metrics, max_records=2)  # a lower cap applies from the start
    assert values(smaller) == [4, 5] and smaller.evicted == 1
    head = smaller.head(2)
    assert [s.item for s in head] == [item(4), item(5)]
    assert head[0].id < head[1].id


def test_the_record_cap_evicts_the_oldest_counted_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    metrics = AgentMetrics()
    spool = Spool(None, metrics, max_records=3)
    with caplog.at_level(logging.WARNING, logger="producers.spool"):
        for i in range(5):
            spool.append([item(i)])
    assert values(spool) == [2, 3, 4]
    assert (len(spool), spool.evicted) == (3, 2)
    assert sample(metrics, "gpufailover_agent_dropped_events_total") == 2
    assert sample(metrics, "gpufailover_agent_buffer_depth") == 3
    full = [r for r in caplog.records if "is full" in r.getMessage()]
    assert len(full) == 1  # once when the evictions start, not once per record


def test_eviction_logs_again_every_thousand_and_after_the_broker_came_back(
    caplog: pytest.LogCaptureFixture,
) -> None:
    spool = Spool(None, AgentMetrics(), max_records=1)
    with caplog.at_level(logging.WARNING, logger="producers.spool"):
        spool.append([item(i) for i in range(2_502)])  # one append, 2,501 evicted
        spool.append([item(0)])  # 2,502
        spool.remove([s.id for s in spool.head(1)])  # delivered: the outage is over
        spool.append([item(1), item(2)])  # a new outage
    full = [r.getMessage() for r in caplog.records if "is full" in r.getMessage()]
    assert len(full) == 2
    assert "2501 evicted" in full[0] and "1 evicted" in full[1]
    assert spool.evicted == 2_503


def test_the_byte_cap_evicts_the_oldest_and_a_record_over_it_is_refused(
    caplog: pytest.LogCaptureFixture,
) -> None:
    metrics = AgentMetrics()
    size = item(0, pad=100).size
    spool = Spool(None, metrics, max_bytes=3 * size)
    spool.append([item(i, pad=100) for i in range(4)])
    assert values(spool) == [1, 2, 3] and spool.bytes == 3 * size
    with caplog.at_level(logging.ERROR, logger="producers.spool"):
        spool.append([item(9, pad=3 * size), item(4, pad=100)])
    assert values(spool) == [2, 3, 4]
    assert sample(metrics, "gpufailover_agent_dropped_events_total") == 3  # 0, 1 and the big one
    assert any("over the spool cap" in r.getMessage() for r in caplog.records)


def test_removing_an_evicted_or_unknown_id_changes_nothing() -> None:
    spool = Spool(None, AgentMetrics(), max_records=2)
    spool.append([item(0), item(1)])
    in_flight = spool.head(2)
    spool.append([item(2)])  # evicts 0 while it is being sent
    spool.remove([s.id for s in in_flight])
    assert values(spool) == [2]
    assert (len(spool), spool.bytes) == (1, item(2).size)
    spool.remove([])
    spool.remove([10_000])
    assert len(spool) == 1


def test_cursor_moves_with_its_records_or_not_at_all(tmp_path: Path) -> None:
    path = tmp_path / "spool.sqlite"
    spool = Spool(path, AgentMetrics())
    assert spool.cursor("kmsg:/dev/kmsg") is None
    spool.append([item(1)], Cursor("kmsg:/dev/kmsg", "boot-a", 7))
    spool.append([], Cursor("kmsg:/dev/kmsg", "boot-a", 9))

    def broken_evict(count: int, size: int) -> tuple[int, int, int]:
        raise sqlite3.OperationalError("disk I/O error")

    spool._evict = broken_evict  # type: ignore[method-assign]  # a failure mid-transaction
    with pytest.raises(sqlite3.OperationalError):
        spool.append([item(2)], Cursor("kmsg:/dev/kmsg", "boot-a", 12))
    assert (values(spool), len(spool)) == ([1], 1)
    spool.close()
    again = Spool(path, AgentMetrics())
    assert again.cursor("kmsg:/dev/kmsg") == Cursor("kmsg:/dev/kmsg", "boot-a", 9)
    assert values(again) == [1]


def test_a_second_owner_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "spool.sqlite"
    first = Spool(path, AgentMetrics())
    with pytest.raises(SpoolBusy, match="in use by another agent"):
        Spool(path, AgentMetrics())
    first.close()
    Spool(path, AgentMetrics(), sync="full").close()  # free again once the owner closed it


def test_bad_files_and_settings_are_clear_errors(tmp_path: Path) -> None:
    newer = tmp_path / "newer.sqlite"
    db = sqlite3.connect(newer)
    db.execute("PRAGMA user_version = 99")
    db.close()
    with pytest.raises(SpoolError, match="schema version 99"):
        Spool(newer, AgentMetrics())
    garbage = tmp_path / "garbage.sqlite"
    garbage.write_bytes(b"not a database" * 100)
    with pytest.raises(SpoolError, match="cannot open spool"):
        Spool(garbage, AgentMetrics())
    for kwargs, match in (
        ({"max_records": 0}, "record cap"),
        ({"max_bytes": 0}, "byte cap"),
        ({"sync": "sometimes"}, "sync"),
    ):
        with pytest.raises(ValueError, match=match):
            Spool(None, AgentMetrics(), **kwargs)


# A writer that appends record i with cursor i and, like the publisher, removes acknowledged
# heads, until it is killed. It prints i once append(i) returned.
_WRITER = """
import sys
from pathlib import Path
from producers.metrics import AgentMetrics
from producers.spool import Cursor, Outgoing, Spool
spool = Spool(Path(sys.argv[1]), AgentMetrics(), max_records=10_000)
i = 0
while True:
    i += 1
    spool.append([Outgoing("gpu.xid", "t", b"k", str(i).encode())], Cursor("kmsg", "b", i))
    if i % 7 == 0:
        spool.remove([s.id for s in spool.head(5)])
    print(i, flush=True)
"""


def test_sigkill_at_any_point_keeps_records_and_cursor_consistent(tmp_path: Path) -> None:
    path = tmp_path / "spool.sqlite"
    for round_ in range(3):
        proc = subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(path)],
            stdout=subprocess.PIPE,
            cwd=REPO,
            env={"PYTHONPATH": str(REPO)},
        )
        assert proc.stdout is not None
        confirmed = 0
        for line in proc.stdout:  # kill it mid-stream, at a different point each round
            confirmed = int(line)
            if confirmed >= 300 + 97 * round_:
                break
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        proc.stdout.close()
        spool = Spool(path, AgentMetrics())
        cursor = spool.cursor("kmsg")
        assert cursor is not None
        got = values(spool)
        # Everything confirmed is there (or was removed as acknowledged); the cursor is exactly
        # the last record kept: no record without its cursor move, no cursor without its record.
        assert cursor.seq >= confirmed
        assert got == list(range(got[0], cursor.seq + 1))
        assert len(spool) == len(got)
        spool.close()
        # the next round's writer starts counting at 1 again: clear the slate
        path.unlink()
