"""A typed view over a faust table whose values are JSON objects (plain dicts).

The engine works on `MutableMapping[str, State]`; replay passes a dict, the stream processor
passes this view over a changelog-backed table.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, MutableMapping
from typing import Any, Generic, TypeVar

StateT = TypeVar("StateT")


class CodecTable(MutableMapping[str, StateT], Generic[StateT]):
    def __init__(
        self,
        table: MutableMapping[str, dict[str, Any]],
        decode: Callable[[dict[str, Any]], StateT],
        encode: Callable[[StateT], dict[str, Any]],
    ) -> None:
        self._table = table
        self._decode = decode
        self._encode = encode

    def __getitem__(self, key: str) -> StateT:
        return self._decode(self._table[key])

    def get(self, key: str, default: Any = None) -> Any:
        raw: dict[str, Any] | None = self._table.get(key)
        return default if raw is None else self._decode(raw)

    def __setitem__(self, key: str, value: StateT) -> None:
        # faust keeps the dict in memory and JSON-encodes it into the changelog; a restore
        # decodes the changelog back into the same dict.
        self._table[key] = self._encode(value)

    def __delitem__(self, key: str) -> None:
        del self._table[key]

    def pop(self, key: str, default: Any = None) -> Any:
        if key in self._table:
            value = self[key]
            del self._table[key]
            return value
        return default

    def __iter__(self) -> Iterator[str]:
        return iter(self._table)

    def __len__(self) -> int:
        return len(self._table)


class WriteBack(MutableMapping[str, StateT], Generic[StateT]):
    """A mapping over `table` that keeps what one input record reads and writes in memory and
    writes each changed key back once, at `flush` (`discard` drops the changes instead).

    The engine writes a job's state back after each node report; a termination on N nodes
    gets ~3N reports, and each write of its state is O(N) bytes on the changelog: O(N^2) for
    one termination. Packed reports (`streams.glue`) handled through this write each job once
    per record, and decode it once. Between records nothing is cached: a rebalance or a table
    recovery changes the table underneath.

    The classifier's agents hold the changes of a whole batch of records (one wait for the
    broker's acknowledgements per batch, not per record): `mark` before each record lets
    `rollback` undo that record's writes alone when handling it fails.
    """

    def __init__(
        self,
        table: MutableMapping[str, StateT],
        write: Callable[[str, StateT | None, Any], None] | None = None,
    ) -> None:
        """`write(key, value or None for deleted, record)`: how `flush` writes a key back,
        given the record (from `mark`) that last wrote it; default: into `table`. The
        classifier writes faust tables through `streams.changelog` (the record's partition
        is the changelog's)."""
        self._table = table
        self._write = write
        self._cache: dict[str, StateT | None] = {}  # None: deleted
        self._dirty: dict[str, Any] = {}  # key -> the record that last wrote it
        self._record: Any = None
        # key -> (was dirty, its writer, was cached, cached value) before the current record's
        # first write of it
        self._undo: dict[str, tuple[bool, Any, bool, StateT | None]] = {}

    def __getitem__(self, key: str) -> StateT:
        value = self._cached(key)
        if value is None:
            raise KeyError(key)
        return value

    def _cached(self, key: str) -> StateT | None:
        if key not in self._cache:
            self._cache[key] = self._table.get(key)
        return self._cache[key]

    def get(self, key: str, default: Any = None) -> Any:
        if key not in self._cache:
            self._cache[key] = self._table.get(key)
        value = self._cache[key]
        return default if value is None else value

    def __setitem__(self, key: str, value: StateT) -> None:
        self._remember(key)
        self._cache[key] = value
        self._dirty[key] = self._record

    def __delitem__(self, key: str) -> None:
        if self.get(key) is None:
            raise KeyError(key)
        self._remember(key)
        self._cache[key] = None
        self._dirty[key] = self._record

    def _remember(self, key: str) -> None:
        if key not in self._undo:
            dirty, cached = key in self._dirty, key in self._cache
            self._undo[key] = (dirty, self._dirty.get(key), cached, self._cache.get(key))

    def mark(self, record: Any = None) -> None:
        """`record` starts: `rollback` undoes what is written from here on."""
        self._record = record
        self._undo.clear()

    def rollback(self) -> None:
        """Undo the writes since `mark`, keeping the earlier records' changes."""
        for key, (dirty, writer, cached, value) in self._undo.items():
            if cached:
                self._cache[key] = value
            else:
                self._cache.pop(key, None)
            if dirty:
                self._dirty[key] = writer
            else:
                self._dirty.pop(key, None)
        self._undo.clear()

    def __iter__(self) -> Iterator[str]:
        self.flush()
        return iter(self._table)

    def __len__(self) -> int:
        self.flush()
        return len(self._table)

    def flush(self) -> None:
        """Write every changed key once; forget the cache."""
        write = self._write
        for key, record in self._dirty.items():
            value = self._cache[key]
            if write is not None:
                write(key, value, record)
            elif value is None:
                self._table.pop(key, None)
            else:
                self._table[key] = value
        self.discard()

    def discard(self) -> None:
        """Forget the cache and the changes (the record failed: nothing of it is written)."""
        self._cache.clear()
        self._dirty.clear()
        self._undo.clear()
        self._record = None
