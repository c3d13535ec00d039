"""The agent's outbox: records accepted but not yet acknowledged by the broker, kept on disk.

SQLite (the stdlib's `sqlite3`) rather than a file format of our own: an append, the read of
the head and the delete of acknowledged rows are each one transaction, so a crash at any point
(SIGKILL included) leaves the old state or the new one, never a torn record; and the kernel-log
cursor lives in the same database, so it moves in the same transaction as the records its
lines produced (`append(items, cursor)`). One process owns a spool: the connection holds an
exclusive lock, and a second agent on the same file fails at start with `SpoolBusy`.

Durability (`sync`):
- "normal" (default): each append is committed to the write-ahead log before `append`
  returns. It survives the agent's crash or SIGKILL (the data is in the OS), not the host's
  power loss, which may lose the last commits (never corrupts the database).
- "full": the WAL is also fsynced on every commit: survives power loss, costs one fsync per
  accepted batch (agent records are few: XIDs are de-duplicated, health sends changes only).

Bounded by records and bytes (key + value + topic); when either cap is passed the *oldest*
records are evicted (the freshest state of a node is what the pipeline needs when the broker
comes back), counted in `gpufailover_agent_dropped_events_total` and logged. `path=None` keeps
the spool in memory (same code, nothing survives a restart).
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from producers.metrics import AgentMetrics

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
SYNC_MODES = ("normal", "full")
EVICTION_LOG_EVERY = 1000  # after the first eviction of an outage, log every this many

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS outbox (
        id INTEGER PRIMARY KEY AUTOINCREMENT,  -- never reused: the send order across restarts
        logical_topic TEXT NOT NULL,
        topic TEXT NOT NULL,
        key BLOB NOT NULL,
        value BLOB NOT NULL,
        size INTEGER NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS cursors (
        name TEXT PRIMARY KEY,
        boot_id TEXT NOT NULL,
        seq INTEGER NOT NULL
    )""",
)


class SpoolError(RuntimeError):
    """The spool cannot be opened (another agent holds it, a newer schema, a bad file)."""


class SpoolBusy(SpoolError):
    """Another process holds the spool."""


@dataclass(frozen=True, slots=True)
class Outgoing:
    logical_topic: str
    topic: str
    key: bytes
    value: bytes

    @property
    def size(self) -> int:
        return len(self.key) + len(self.value) + len(self.topic)


@dataclass(frozen=True, slots=True)
class Spooled:
    id: int
    item: Outgoing


@dataclass(frozen=True, slots=True)
class Cursor:
    """How far a source's input is reflected in the spool: kernel record `seq` of boot `boot_id`."""

    name: str
    boot_id: str
    seq: int


class Spool:
    def __init__(
        self,
        path: Path | None,
        metrics: AgentMetrics,
        *,
        max_records: int = 10_000,
        max_bytes: int = 64 << 20,
        sync: str = "normal",
    ) -> None:
        if max_records < 1:
            raise ValueError(f"spool record cap must be >= 1, got {max_records}")
        if max_bytes < 1:
            raise ValueError(f"spool byte cap must be >= 1, got {max_bytes}")
        if sync not in SYNC_MODES:
            raise ValueError(f"spool sync must be one of {', '.join(SYNC_MODES)}, got {sync!r}")
        self.path = path
        self.metrics = metrics
        self.max_records = max_records
        self.max_bytes = max_bytes
        self.evicted = 0
        self._evicted_in_outage = 0
        self._db = _open(path, sync)
        row = self._db.execute("SELECT COUNT(*), COALESCE(SUM(size), 0) FROM outbox").fetchone()
        self._count, self._bytes = int(row[0]), int(row[1])
        self.append([])  # caps lowered since the last run apply now

    @property
    def durable(self) -> bool:
        return self.path is not None

    @property
    def where(self) -> str:
        return str(self.path) if self.path is not None else "memory"

    @property
    def bytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return self._count

    # -- writes -----------------------------------------------------------------------------
    def append(self, items: Sequence[Outgoing], cursor: Cursor | None = None) -> None:
        """Add `items` (in order) and move `cursor`, in one transaction; evict beyond the caps.

        A record larger than the byte cap could never be kept: it is refused, logged, counted."""
        keep = []
        for item in items:
            if item.size > self.max_bytes:
                log.error(
                    "event for %s of %d bytes is over the spool cap (%d bytes): dropped",
                    item.topic,
                    item.size,
                    self.max_bytes,
                )
                self.metrics.dropped.inc()
                continue
            keep.append(item)
        count, size = self._count, self._bytes
        with self._transaction():
            self._db.executemany(
                "INSERT INTO outbox (logical_topic, topic, key, value, size) VALUES (?,?,?,?,?)",
                [(i.logical_topic, i.topic, i.key, i.value, i.size) for i in keep],
            )
            if cursor is not None:
                self._db.execute(
                    "INSERT OR REPLACE INTO cursors (name, boot_id, seq) VALUES (?,?,?)",
                    (cursor.name, cursor.boot_id, cursor.seq),
                )
            count += len(keep)
            size += sum(i.size for i in keep)
            evicted, count, size = self._evict(count, size)
        self._count, self._bytes = count, size
        if evicted:
            self._note_evictions(evicted)
        self._gauges()

    def remove(self, ids: Sequence[int]) -> None:
        """Forget the records the broker acknowledged (ids already evicted are ignored)."""
        if not ids:
            return
        marks = ",".join("?" * len(ids))
        with self._transaction():
            row = self._db.execute(
                f"SELECT COUNT(*), COALESCE(SUM(size), 0) FROM outbox WHERE id IN ({marks})",  # noqa: S608 - only '?' marks
                list(ids),
            ).fetchone()
            self._db.execute(f"DELETE FROM outbox WHERE id IN ({marks})", list(ids))  # noqa: S608
        self._count -= int(row[0])
        self._bytes -= int(row[1])
        self._evicted_in_outage = 0  # the broker takes records again: a new outage logs anew
        self._gauges()

    # -- reads ------------------------------------------------------------------------------
    def head(self, limit: int) -> list[Spooled]:
        rows = self._db.execute(
            "SELECT id, logical_topic, topic, key, value FROM outbox ORDER BY id LIMIT ?",
            (limit,),
        ).fetchall()
        return [Spooled(r[0], Outgoing(r[1], r[2], bytes(r[3]), bytes(r[4]))) for r in rows]

    def cursor(self, name: str) -> Cursor | None:
        query = "SELECT boot_id, seq FROM cursors WHERE name = ?"
        row = self._db.execute(query, (name,)).fetchone()
        return None if row is None else Cursor(name, str(row[0]), int(row[1]))

    def close(self) -> None:
        self._db.close()

    # -- internals --------------------------------------------------------------------------
    @contextmanager
    def _transaction(self) -> Iterator[None]:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def _evict(self, count: int, size: int) -> tuple[int, int, int]:
        """Delete the oldest rows until both caps hold (inside the caller's transaction)."""
        if count <= self.max_records and size <= self.max_bytes:
            return 0, count, size
        evicted, last_id = 0, None
        rows = self._db.execute("SELECT id, size FROM outbox ORDER BY id")
        for row_id, row_size in rows:
            if count <= self.max_records and size <= self.max_bytes:
                break
            last_id = row_id
            evicted += 1
            count -= 1
            size -= int(row_size)
        rows.close()
        if last_id is not None:
            self._db.execute("DELETE FROM outbox WHERE id <= ?", (last_id,))
        return evicted, count, size

    def _note_evictions(self, evicted: int) -> None:
        before = self._evicted_in_outage
        self.evicted += evicted
        self._evicted_in_outage += evicted
        self.metrics.dropped.inc(evicted)
        every = EVICTION_LOG_EVERY
        if before == 0 or before // every != self._evicted_in_outage // every:
            log.warning(
                "spool %s is full (cap %d events, %d bytes): the oldest are evicted; "
                "%d evicted while the broker is unreachable",
                self.where,
                self.max_records,
                self.max_bytes,
                self._evicted_in_outage,
            )

    def _gauges(self) -> None:
        self.metrics.buffer_depth.set(self._count)
        self.metrics.spool_bytes.set(self._bytes)


def _open(path: Path | None, sync: str) -> sqlite3.Connection:
    if path is None:
        db = sqlite3.connect(":memory:", isolation_level=None)
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        # timeout 0: a held lock means another agent, not a moment's contention (we are alone)
        db = sqlite3.connect(path, isolation_level=None, timeout=0)
    try:
        db.execute("PRAGMA locking_mode = EXCLUSIVE")
        if path is not None:
            db.execute("PRAGMA journal_mode = WAL")
        db.execute(f"PRAGMA synchronous = {sync.upper()}")
        version = int(db.execute("PRAGMA user_version").fetchone()[0])
        if version > SCHEMA_VERSION:
            raise SpoolError(
                f"spool {path} has schema version {version}, this agent knows {SCHEMA_VERSION}"
            )
        db.execute("BEGIN IMMEDIATE")  # takes the exclusive lock now, held until close
        for statement in _SCHEMA:
            db.execute(statement)
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        db.execute("COMMIT")
    except sqlite3.OperationalError as exc:
        db.close()
        if "locked" in str(exc):
            raise SpoolBusy(
                f"spool {path} is in use by another agent (one spool per node and kind of "
                "source: is this agent running already? else give each a --spool-dir)"
            ) from exc
        raise SpoolError(f"cannot open spool {path}: {exc}") from exc
    except sqlite3.DatabaseError as exc:
        db.close()
        raise SpoolError(f"cannot open spool {path}: {exc}") from exc
    except BaseException:
        db.close()
        raise
    return db
